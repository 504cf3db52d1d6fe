"""Verify and profile kernels on the CPU PTX interpreter through the real launcher (`plus-ep verify`,
`plus-ep profile --emulate`): the emulated CUDA driver's Python side (emulator), the verify request
and its report (check), the process it runs in (run), tolerances (tolerances) and modelled counters
per node (profile). Named `verification` because `plus_ep.verify` is the public function."""
