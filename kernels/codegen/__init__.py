"""Codegen shared by every template family: the +Graph pull emitter (pull), forward maps and stores
(forward), row programs (row), pointwise kernels (pointwise), C expressions of ONNX ops (cexpr),
symbolic dims (symdim), launch-time shape values (shapevals) and element types (dtypes)."""
