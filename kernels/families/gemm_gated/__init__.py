"""The gemm_gated template family: a gated MLP's gate and up products of one A in one GEMM of the gemm
family's templates (PLUS_GATED), the epilogue getting both sums (render)."""
