"""The gemm_group template family: sibling GEMMs reading one A (a layer's Q, K and V projections) in one
launch of the gemm family's templates, the group index as an outer batch index (render)."""
