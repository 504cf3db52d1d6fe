"""The gemm template family (gemm.cuh, gemm_sm90a.cuh, gemm_hooks.cuh): the renderer of GEMM nodes (render),
the hooks it writes into the template (hooks), MatMulNBits weights decoded in the mainloop (nbits), the
config menus for sm_80 and sm_90a (configs, sm90a_configs) and the shape routes that choose among them (routes).
The gemm_rownorm, gemm_group and gemm_gated families render into the same templates."""
