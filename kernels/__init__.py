"""+Code side of PlusEP: CUDA templates, hook rendering, NVRTC compilation and the kernel cache.

Filled by the kernels issue. graph_rewrites and warehouse never import this package; the rewrite
stage hands it fused subgraphs (their +Graph and ONNX bodies) and embeds what it returns.
"""
