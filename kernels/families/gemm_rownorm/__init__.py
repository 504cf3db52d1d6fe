"""The gemm_rownorm template family: a GEMM whose epilogue feeds a row normalisation (LayerNorm, RMSNorm,
softmax) on the gemm family's templates: its renderer (render) and the one-kernel route over a thread-block
cluster on sm_90a (tile)."""
