"""The model and helpers the serving recipes' tests share (tests/native/test_server.py,
tests/native/test_ray_serve.py): a small LayerNorm -> MatMul -> Add -> Gelu block that PlusEP fuses, and a
free loopback port.

    model = block_model()       # X [B, S, 32] -> Y [B, S, 16], float32, fixed random weights
"""
from __future__ import annotations

import socket

import numpy as np
import onnx

from tests.support.graphs import Graph


def block_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    g = Graph("block")
    x = g.input("X", ["B", "S", 32])
    y = g.op("LayerNormalization", x, g.init("gamma", (1 + 0.1 * rng.standard_normal(32)).astype(np.float32)),
             g.init("beta", (0.1 * rng.standard_normal(32)).astype(np.float32)), axis=-1, epsilon=1e-5)
    h = g.op("MatMul", y, g.init("W", (0.2 * rng.standard_normal((32, 16))).astype(np.float32)))
    h = g.op("Add", h, g.init("b", (0.1 * rng.standard_normal(16)).astype(np.float32)))
    g.op("Gelu", h, out="Y", domain="com.microsoft")
    g.output("Y", ["B", "S", 16])
    return g.model()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
