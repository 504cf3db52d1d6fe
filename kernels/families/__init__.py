"""The template families: one folder each, named as the family, holding its renderer, config menus, shape routes
and CUDA templates (the `.cuh` files, on NVRTC's include path beside `kernels/templates/`)."""
