"""The benchmark harness: the GPU benchmark (contenders, measurements, run order) and the CPU fusion
benchmark, plus the model builders and the environment record the other folders share."""
