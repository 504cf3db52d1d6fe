"""Golden generated sources (tests/golden/*.cu) on the PTX interpreter, launched as their plans say
(the first route's kernel lines, grid expressions evaluated here), against float64 references:
GEMM + bias + GELU(erf) (libdevice erff: ex2.approx.ftz, fma.rm, cvt.sat) and the embedding gather +
LayerNorm row program (block reductions with shfl.sync, rsqrt.approx, gather guards for negative and
out-of-range ids). Both with approximate instructions exact and perturbed within the ISA bounds."""
from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest

from tests.support import ptx_harness as H

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"


def rpn(expr: str, syms: dict) -> int:
    st = []
    for item in expr.split(","):
        if item.lstrip("-").isdigit():
            st.append(int(item))
        elif item[0] == "s" and item[1:].isdigit():
            st.append(syms[int(item[1:])])
        else:
            b, a = st.pop(), st.pop()
            st.append({"+": a + b, "-": a - b, "*": a * b, "/": a // b, "%": a % b, "min": min(a, b),
                       "max": max(a, b), "cdiv": -(-a // b), "<": int(a < b), "<=": int(a <= b),
                       ">": int(a > b), ">=": int(a >= b), "==": int(a == b), "!=": int(a != b)}[item])
    assert len(st) == 1
    return st[0]


def launches(name: str, syms: dict):
    """(entry, grid, block, smem) of the first route whose condition holds."""
    lines = (GOLDEN / f"{name}.plan").read_text().splitlines()
    chosen, out = None, []
    for ln in lines:
        t = ln.split(" ")
        if t[0] == "route" and chosen is None and rpn(t[2], syms):
            chosen = t[1]
        elif t[0] == "kernel" and t[1] == chosen:
            out.append((t[3], tuple(rpn(x, syms) for x in t[4:7]), tuple(rpn(x, syms) for x in t[7:10]),
                        rpn(t[10], syms)))
    return out


def _run(name, arch, syms, ins, out, approx):
    mod = H.module((GOLDEN / f"{name}.cu").read_text(), arch, f"golden_{name}")
    dev = H.Device()
    ptrs = [dev.upload(a, f"in{i}") if a is not None else 0 for i, a in enumerate(ins)]
    pout = dev.alloc(out.nbytes, "out", fill=0xFF)
    params = H.plus_args(ins=ptrs, outs=(pout,), v=(syms[0], syms[1]))
    for entry, grid, block, smem in launches(name, syms):
        r = mod.kernel(entry).launch(grid, block, smem, params, dev.mem, checks=True, approx=approx, seed=5)
        assert not r.findings, "\n".join(map(str, r.findings))
    return dev.download(pout, out).astype(np.float64)


@pytest.mark.parametrize("approx", ["exact", "perturb"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_gemm_bias_gelu(arch, approx):
    syms = {0: 2, 1: 9}
    M = 18
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 9, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 128)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(128).astype(np.float32)
    got = _run("gemm_bias_gelu", arch, syms, [a, w, bias], np.zeros((2, 9, 128), np.float32), approx)
    x = a.reshape(M, 64).astype(np.float64) @ w.astype(np.float64) + bias
    want = (0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))).reshape(2, 9, 128)
    mag = (np.abs(a.reshape(M, 64)) @ np.abs(w) + np.abs(bias)).reshape(2, 9, 128)
    # fp32 accumulation (K+2 roundings) carried through GELU (|d gelu/dx| <= 1.13) + erff's few ulps
    bound = 1.2 * 70 * 2.0 ** -24 * mag + 8 * 2.0 ** -24 * np.abs(want) + 1e-7
    assert (np.abs(got - want) <= bound).all(), np.abs(got - want).max()


@pytest.mark.parametrize("approx", ["exact", "perturb"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_layernorm_embed(arch, approx):
    syms = {0: 3, 1: 7}
    rng = np.random.default_rng(4)
    table = rng.standard_normal((1000, 64)).astype(np.float32)
    ids = rng.integers(-1000, 1000, (3, 7)).astype(np.int64)
    ids[0, 0], ids[1, 2] = 1000, -1001                        # out of range: gather yields 0
    types = rng.integers(0, 2, (3, 7)).astype(np.int64)
    ttable = rng.standard_normal((2, 64)).astype(np.float32)
    pos = rng.standard_normal((1, 7, 64)).astype(np.float32)
    gamma, beta = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    got = _run("layernorm_embed", arch, syms, [table, ids, ttable, types, pos, gamma, beta],
               np.zeros((3, 7, 64), np.float32), approx)
    idx = np.where(ids < 0, ids + 1000, ids)
    ok = (idx >= 0) & (idx < 1000)
    e = np.where(ok[..., None], table[np.where(ok, idx, 0)], 0).astype(np.float64) + ttable[types] + pos
    mean = e.mean(-1, keepdims=True)
    var = ((e - mean) ** 2).mean(-1, keepdims=True)
    want = (e - mean) / np.sqrt(var + 1e-12) * gamma + beta
    bound = 2e-6 * (np.abs(want) + np.abs(beta) + np.abs(gamma) * 4)
    assert (np.abs(got - want) <= bound).all(), np.abs(got - want).max()


@pytest.mark.parametrize("approx", ["exact", "perturb"])
def test_wgmma_attention(approx):
    """tests/golden/wg_attention.cu (the sm_90a body: wgmma, TMA) launched as its plan says, tensor maps encoded
    here from the plan's tmap records, against float64 softmax(Q·Kᵀ·0.125 + mask)·V: batch 2, seq 150 (two
    query tiles, two key tiles, ragged), a padding mask hiding batch 1's last 20 keys."""
    from plus_ep.kernels.wire.plan import parse
    from plus_ep.verification.shapes import rpn as plan_rpn
    plan = parse((GOLDEN / "wg_attention.plan").read_text())
    syms = {0: 2, 1: 150, 2: 2, 3: 150}
    (launch,) = plan.routes[-1].launches        # the long sequences' route: the body (wg_attention.cu)
    qi, ki, vi = (t[2] for t in launch.tmaps)
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((2, 4, 150, 64)).astype(np.float16) for _ in range(3))
    mask = np.zeros((2, 1, 1, 150), np.float16)
    mask[1, ..., 130:] = -np.inf
    ins = {qi: q, ki: k, vi: v}
    for i, (_, dims) in enumerate(plan.inputs):
        if i not in ins:
            ins[i] = np.array(0.125, np.float16) if not dims else mask
    dev = H.Device()
    ptrs = [dev.upload(ins[i], f"in{i}") for i in range(len(plan.inputs))]
    out = np.zeros((2, 4, 150, 64), np.float16)
    pout = dev.output(out)
    params = H.plus_args(ins=ptrs, outs=(pout,), v=[syms[i] for i in range(4)])
    assert all((t[0], t[1], t[7]) == (10, "in", 128) for t in launch.tmaps)
    kern = H.module((GOLDEN / "wg_attention.cu").read_text(), "sm_90a", "golden_wg_attention").kernel(launch.entry)
    r = kern.launch(tuple(plan_rpn(e, syms) for e in launch.grid), tuple(plan_rpn(e, syms) for e in launch.block),
                    plan_rpn(launch.smem, syms), H.with_tmaps(kern, params, H.plan_tmaps(launch.tmaps, ptrs, syms)),
                    dev.mem, checks=True, approx=approx, seed=5)
    assert r.findings == [], [str(f) for f in r.findings]
    got = dev.download_written(pout, out, "O").astype(np.float64)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) * 0.125 + mask.astype(np.float64)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    # P rounded to f16 before P·V (relative 2^-11 per term), O rounded once on store
    assert np.abs(got - want).max() <= 4 * 2.0 ** -11 * max(1.0, np.abs(want).max())
