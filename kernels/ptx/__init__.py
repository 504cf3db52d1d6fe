"""PlusEP's PTX interpreter: runs the exact PTX NVRTC emits for PlusEP's kernels on a CPU (numpy only).

    from plus_ep.kernels.ptx import Module, GlobalMemory, PtxError, LaunchResult
    mod = Module.parse(ptx_text, name="gemm_f16_...")   # PtxError(form, line) on an unknown form
    k = mod.kernel("plus_gemm")
    mem = GlobalMemory(); a = mem.map_array(host_array, "A")
    res = k.launch(grid=(gx, gy, gz), block=(bx, by, bz), shared_bytes=n, params=param_bytes,
                   memory=mem, checks=True, approx="exact", seed=0, sample_ctas=None)
    res.counters, res.findings, res.raise_for_findings()

A debugging and verification tool (like Triton's interpreter mode): one CTA at a time, vectorised over
its threads (the CTAs of a thread-block cluster interleaved at cluster barriers, see cluster.py);
exact IEEE arithmetic where the ISA prescribes it; asynchronous copies and wgmma results land only at
their waits; checkers for races, proxies, `.nc`, uninitialised shared memory and DSMEM; modelled
(never measured) sector and bank-conflict counts.
"""
from .errors import PtxError
from .exec import Kernel, LaunchResult, Module
from .memory import GlobalMemory

__all__ = ["Module", "Kernel", "GlobalMemory", "PtxError", "LaunchResult"]
