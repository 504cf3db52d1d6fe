"""The kernel build stage: NVRTC bindings (nvrtc), the cubin reader (cubin), compile jobs
(compile), the content-keyed kernel cache (cache), source dumps and overrides (sources), and the stage the rewriter
calls to render, compile and pack every fused node's kernels (stage)."""
