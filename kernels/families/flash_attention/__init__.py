"""The flash_attention template family (attention.cuh): its renderer (render), config menu (configs) and
shape routes (routes)."""
