"""The launcher's C sources (plus_ep/native) that the native harness links: one list for
tests/native/test_launcher.py and bench/launch_overhead.py (the ORT-facing files are left out)."""
LAUNCHER_SOURCES = ["dtype.c", "plan.c", "expr.c", "bind.c", "pack.c", "driver.c", "kernel.c", "sha256.c", "trust.c"]
