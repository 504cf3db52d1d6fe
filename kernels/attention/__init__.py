"""The attention template family (templates/attention.cuh): its renderer (render), config menu (configs) and
shape routes (routes)."""
