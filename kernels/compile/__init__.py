"""The compile stage: NVRTC bindings (nvrtc), the cubin reader (cubin), compile jobs (jobs), the
content-keyed kernel cache (cache), source dumps and overrides (sources), renders kept on disk
(render_store), NVRTC's PTX of a source for the interpreter (ptx), and the stage the rewriter calls to
render, compile and pack every fused node's kernels (stage: build_kernels)."""
