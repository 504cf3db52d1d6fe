"""The GPU lease: gpu_lease.sh and its steps (prepare, preflight, install, correctness, sanitizer, kernel
times, end to end) with their bookkeeping."""
