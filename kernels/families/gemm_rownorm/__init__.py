"""The gemm_rownorm template family: a GEMM whose epilogue feeds a row normalisation (LayerNorm, RMSNorm,
softmax), on the gemm family's templates; tile.py is the one-kernel route over a thread-block cluster."""
