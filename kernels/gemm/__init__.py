"""The GEMM template family (templates/gemm.cuh, templates/gemm_sm90a.cuh): renderers of GEMM and
GEMM + row-norm nodes (render, norm_render), the hooks both write into the template (hooks), the
config menus for sm_80 and sm_90a (configs, sm90a_configs) and the shape routes that choose among them (routes)."""
