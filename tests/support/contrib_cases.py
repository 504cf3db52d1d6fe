"""Single-node contrib-op cases checked against ONNX Runtime's CPU kernels (the reference): each case is
one com.microsoft node with random inputs (non-trivial weights: biases != 0, gammas != 1, odd lengths,
padded batches), run by ORT CPU as is and by its expansion (graph_rewrites/contrib) on ORT CPU and on
onnx.reference (the +Graph interpreter's runner)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

MS = "com.microsoft"
F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


@dataclass
class Case:
    name: str
    node: onnx.NodeProto
    feeds: dict
    opset: int = 17
    tol: float = 2e-5                       # max |a - b| / (1 + |b|)
    reference: object = None                # fn(feeds) -> outputs, for ops ORT has no CPU kernel for
    compare: dict = field(default_factory=dict)   # output -> fn(array) selecting what is defined
    constants: tuple = ()                   # inputs stored as initializers (weights)


def _elem(a):
    return helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype)


def single_node_model(case: Case) -> onnx.ModelProto:
    ins, inits = [], []
    for k in dict.fromkeys(t for t in case.node.input if t):
        v = np.asarray(case.feeds[k])
        if k in case.constants:
            inits.append(onnx.numpy_helper.from_array(v, k))
        else:
            ins.append(helper.make_tensor_value_info(k, _elem(v), list(v.shape)))
    outs = [onnx.ValueInfoProto(name=o) for o in case.node.output if o]
    g = helper.make_graph([case.node], case.name, ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", case.opset), helper.make_opsetid(MS, 1)],
                             ir_version=10)


def reference(case: Case) -> dict:
    """What the contrib op computes: ORT CPU's kernel (numpy for the CUDA-only BiasAdd)."""
    if case.reference is not None:
        return case.reference(case.feeds)
    return run_ort(single_node_model(case), case.feeds)


def run_ort(model, feeds: dict) -> dict:
    """Outputs by name of `model` (ModelProto or path) on ORT CPU, graph optimizations off."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    res = sess.run(None, {k: v for k, v in feeds.items() if k in names})
    return dict(zip([o.name for o in sess.get_outputs()], res))


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / (1.0 + np.abs(b))))


def rng(seed):
    return np.random.default_rng(seed)


def node(op, ins, outs, domain=MS, **attrs):
    return helper.make_node(op, ins, outs, domain=domain, name=f"{op}_0", **attrs)


# ---- cases ---------------------------------------------------------------------------------------------
def norm_cases():
    r = rng(1)
    cases = []
    for dt, tol in ((np.float32, 2e-5), (np.float16, 4e-3)):
        B, S, H = 2, 5, 48
        x = r.standard_normal((B, S, H)).astype(dt)
        skip = r.standard_normal((B, S, H)).astype(dt)
        g = (1 + 0.3 * r.standard_normal(H)).astype(dt)
        beta = (0.2 * r.standard_normal(H)).astype(dt)
        bias = (0.2 * r.standard_normal(H)).astype(dt)
        f = {"x": x, "skip": skip, "g": g, "beta": beta, "bias": bias}
        tag = np.dtype(dt).name
        cases += [
            Case(f"SkipLayerNorm_{tag}", node("SkipLayerNormalization", ["x", "skip", "g", "beta", "bias"],
                                              ["y", "", "", "sum"], epsilon=1e-5), f, tol=tol),
            Case(f"SkipLayerNorm_nobias_{tag}", node("SkipLayerNormalization", ["x", "skip", "g", "beta"], ["y"],
                                                     epsilon=1e-12), f, tol=tol),
            Case(f"SkipLayerNorm_opset14_{tag}", node("SkipLayerNormalization", ["x", "skip", "g", "beta", "bias"],
                                                      ["y"], epsilon=1e-5), f, opset=14, tol=tol),
            Case(f"SkipSimplifiedLayerNorm_{tag}", node("SkipSimplifiedLayerNormalization", ["x", "skip", "g"],
                                                        ["y", "", "", "sum"], epsilon=1e-6), f, tol=tol),
            Case(f"SkipSimplifiedLayerNorm_bias_{tag}", node("SkipSimplifiedLayerNormalization",
                                                             ["x", "skip", "g", "bias"], ["y"], epsilon=1e-6),
                 f, tol=tol),
            Case(f"SimplifiedLayerNorm_{tag}", node("SimplifiedLayerNormalization", ["x", "g"], ["y"], domain="",
                                                    axis=-1, epsilon=1e-5, stash_type=1), f, tol=tol),
        ]
    # EmbedLayerNormalization (fp32; int32 ids), padded batch, with and without segments / position ids
    B, S, H, V = 3, 7, 32, 50
    ids = r.integers(0, V, (B, S)).astype(np.int32)
    seg = r.integers(0, 2, (B, S)).astype(np.int32)
    mask = np.ones((B, S), np.int32)
    mask[1, 5:] = 0
    mask[2, 3:] = 0
    f = {"ids": ids, "seg": seg, "word": r.standard_normal((V, H)).astype(np.float32),
         "pos": r.standard_normal((16, H)).astype(np.float32), "segw": r.standard_normal((2, H)).astype(np.float32),
         "g": (1 + 0.3 * r.standard_normal(H)).astype(np.float32), "beta": (0.2 * r.standard_normal(H)).astype(np.float32),
         "mask": mask, "pids": np.tile(np.arange(2, 2 + S, dtype=np.int32), (B, 1))}
    cases += [
        Case("EmbedLayerNorm", node("EmbedLayerNormalization", ["ids", "seg", "word", "pos", "segw", "g", "beta", "mask"],
                                    ["y", "mask_index", "sum"], epsilon=1e-12), f, tol=2e-5),
        Case("EmbedLayerNorm_noseg_nomask", node("EmbedLayerNormalization", ["ids", "", "word", "pos", "", "g", "beta"],
                                                 ["y", "mask_index"], epsilon=1e-12), f, tol=2e-5),
        Case("EmbedLayerNorm_position_ids", node("EmbedLayerNormalization",
                                                 ["ids", "seg", "word", "pos", "segw", "g", "beta", "mask", "pids"],
                                                 ["y", "mask_index"], epsilon=1e-12), f, tol=2e-5),
    ]
    return cases


def activation_cases():
    r = rng(2)
    cases = []
    for dt, tol in ((np.float32, 2e-5), (np.float16, 4e-3)):
        x = (2 * r.standard_normal((3, 5, 40))).astype(dt)
        b = r.standard_normal(40).astype(dt)
        skip = r.standard_normal((3, 5, 40)).astype(dt)
        f = {"x": x, "b": b, "skip": skip}
        tag = np.dtype(dt).name
        for opset in (17, 20):
            cases += [
                Case(f"BiasGelu_{tag}_o{opset}", node("BiasGelu", ["x", "b"], ["y"]), f, opset=opset, tol=tol),
                Case(f"Gelu_{tag}_o{opset}", node("Gelu", ["x"], ["y"]), f, opset=opset, tol=tol),
                Case(f"FastGelu_{tag}_o{opset}", node("FastGelu", ["x", "b"], ["y"]), f, opset=opset, tol=tol),
                Case(f"FastGelu_nobias_{tag}_o{opset}", node("FastGelu", ["x"], ["y"]), f, opset=opset, tol=tol),
            ]
        cases += [
            Case(f"QuickGelu_{tag}", node("QuickGelu", ["x"], ["y"]), f, tol=tol),
            Case(f"QuickGelu_alpha_{tag}", node("QuickGelu", ["x"], ["y"], alpha=1.3), f, tol=tol),
        ]
    x = r.standard_normal((2, 6, 32)).astype(np.float32)
    cases.append(Case("BiasAdd", node("BiasAdd", ["x", "b", "skip"], ["y"]),        # ORT: a CUDA-only kernel
                      {"x": x, "b": r.standard_normal(32).astype(np.float32),
                       "skip": r.standard_normal((2, 6, 32)).astype(np.float32)},
                      reference=lambda f: {"y": f["x"] + f["b"] + f["skip"]}))
    return cases


def _qkv(r, B, S, hidden, n_out, dt):
    return (r.standard_normal((B, S, hidden)).astype(dt), (r.standard_normal((hidden, n_out)) / np.sqrt(hidden)).astype(dt),
            (0.3 * r.standard_normal(n_out)).astype(dt))


def attention_cases():
    r = rng(3)
    cases = []
    B, S, hidden, N = 3, 7, 32, 4
    lengths = np.array([7, 4, 5], np.int32)
    raw = (np.arange(S)[None, :] < lengths[:, None]).astype(np.int32)
    for dt, tol in ((np.float32, 5e-5), (np.float16, 5e-3)):
        x, w, b = _qkv(r, B, S, hidden, 3 * hidden, dt)
        tag = np.dtype(dt).name
        f = {"x": x, "w": w, "b": b, "mask1d": lengths, "raw": raw,
             "ends": np.concatenate([lengths, np.array([0, 1, 2], np.int32)]),
             "mask3d": np.tril(np.ones((S, S), np.int32))[None].repeat(B, 0),
             "abias": (0.5 * r.standard_normal((1, N, S, S))).astype(dt)}
        valid = lambda y: y[np.arange(S)[None, :] < lengths[:, None]]     # noqa: E731 rows of real tokens
        cases += [
            Case(f"Attention_mask_index_{tag}", node("Attention", ["x", "w", "b", "mask1d"], ["y"], num_heads=N),
                 f, tol=tol, constants=("w", "b")),
            Case(f"Attention_raw_mask_{tag}", node("Attention", ["x", "w", "b", "raw"], ["y"], num_heads=N),
                 f, tol=tol, constants=("w", "b")),
            Case(f"Attention_end_start_{tag}", node("Attention", ["x", "w", "b", "ends"], ["y"], num_heads=N),
                 f, tol=tol, constants=("w", "b")),
            Case(f"Attention_mask3d_{tag}", node("Attention", ["x", "w", "b", "mask3d"], ["y"], num_heads=N),
                 f, tol=tol, constants=("w", "b")),
            Case(f"Attention_causal_padded_{tag}", node("Attention", ["x", "w", "b", "mask1d"], ["y"], num_heads=N,
                                                        unidirectional=1), f, tol=tol, constants=("w", "b")),
            Case(f"Attention_nomask_bias_scale_{tag}", node("Attention", ["x", "w", "b", "", "", "abias"], ["y"],
                                                            num_heads=N, scale=0.3), f, tol=tol, constants=("w", "b")),
            Case(f"Attention_weights_input_{tag}", node("Attention", ["x", "w", "b", "mask1d"], ["y"], num_heads=N),
                 f, tol=tol),
        ]
        del valid
    # Q/K/V of different widths (qkv_hidden_sizes), no bias
    x, w, _ = _qkv(r, 2, 5, 24, 32 + 32 + 16, np.float32)
    cases.append(Case("Attention_qkv_sizes", node("Attention", ["x", "w", "b"], ["y"], num_heads=4,
                                                  qkv_hidden_sizes=[32, 32, 16]),
                      {"x": x, "w": w, "b": (0.3 * r.standard_normal(80)).astype(np.float32)}, constants=("w", "b")))
    return cases


def mha_cases():
    r = rng(4)
    cases = []
    B, S, L, N, D, P = 2, 5, 6, 4, 8, 3
    for dt, tol in ((np.float32, 5e-5), (np.float16, 5e-3)):
        tag = np.dtype(dt).name
        q = r.standard_normal((B, S, N * D)).astype(dt)
        k = r.standard_normal((B, L, N * D)).astype(dt)
        v = r.standard_normal((B, L, N * D)).astype(dt)
        kself, vself = r.standard_normal((B, S, N * D)).astype(dt), r.standard_normal((B, S, N * D)).astype(dt)
        bias = (0.3 * r.standard_normal(3 * N * D)).astype(dt)
        kpm = np.ones((B, L), np.int32)
        kpm[1, 4:] = 0
        f = {"q": q, "k": k, "v": v, "bias": bias, "kpm": kpm, "kself": kself, "vself": vself,
             "kb": r.standard_normal((B, N, L, D)).astype(dt), "vb": r.standard_normal((B, N, L, D)).astype(dt),
             "pk": r.standard_normal((B, N, P, D)).astype(dt), "pv": r.standard_normal((B, N, P, D)).astype(dt),
             "abias": (0.5 * r.standard_normal((B, 1, S, L))).astype(dt), "lens": np.array([6, 4], np.int32)}
        cases += [
            Case(f"MHA_bias_kpm_{tag}", node("MultiHeadAttention", ["q", "k", "v", "bias", "kpm"], ["y"], num_heads=N),
                 f, tol=tol),
            Case(f"MHA_kpm1d_attnbias_{tag}", node("MultiHeadAttention", ["q", "k", "v", "", "lens", "abias"], ["y"],
                                                   num_heads=N), f, tol=tol),
            Case(f"MHA_bnsh_kv_{tag}", node("MultiHeadAttention", ["q", "kb", "vb"], ["y"], num_heads=N, scale=0.2),
                 f, tol=tol),
            Case(f"MHA_past_causal_{tag}", node("MultiHeadAttention", ["q", "kself", "vself", "bias", "", "", "pk", "pv"],
                                                ["y", "present_k", "present_v"], num_heads=N, unidirectional=1),
                 f, tol=tol),
        ]
    return cases


def rotary_cases():
    r = rng(5)
    cases = []
    B, S, N, H, M = 2, 5, 3, 16, 20
    for dt, tol in ((np.float32, 2e-5), (np.float16, 4e-3)):
        tag = np.dtype(dt).name
        ang = r.uniform(0, 6, (M, H // 2))
        f = {"x3": r.standard_normal((B, S, N * H)).astype(dt), "x4": r.standard_normal((B, N, S, H)).astype(dt),
             "pos": r.integers(0, M, (B, S)).astype(np.int64), "off": np.array([4], np.int64),
             "cos": np.cos(ang).astype(dt), "sin": np.sin(ang).astype(dt),
             "cos_half": np.cos(ang[:, :4]).astype(dt), "sin_half": np.sin(ang[:, :4]).astype(dt)}
        for inter in (0, 1):
            cases += [
                Case(f"Rotary_bsd_i{inter}_{tag}", node("RotaryEmbedding", ["x3", "pos", "cos", "sin"], ["y"],
                                                        interleaved=inter, num_heads=N), f, tol=tol),
                Case(f"Rotary_bnsh_i{inter}_{tag}", node("RotaryEmbedding", ["x4", "pos", "cos", "sin"], ["y"],
                                                         interleaved=inter), f, tol=tol),
                Case(f"Rotary_partial_i{inter}_{tag}", node("RotaryEmbedding", ["x3", "pos", "cos_half", "sin_half"],
                                                            ["y"], interleaved=inter, num_heads=N,
                                                            rotary_embedding_dim=8), f, tol=tol),
            ]
        cases.append(Case(f"Rotary_offset_{tag}", node("RotaryEmbedding", ["x3", "off", "cos", "sin"], ["y"],
                                                       num_heads=N), f, tol=tol))
    return cases


def gqa_inputs(r, B, S, N, KV, D, P, dt, lengths, M=64, packed=True, shared=False):
    """GroupQueryAttention feeds: `lengths` = valid tokens per row after this step (total_b)."""
    ang = r.uniform(0, 6, (M, D // 2))
    f = {"cos": np.cos(ang).astype(dt), "sin": np.sin(ang).astype(dt),
         "seqlens_k": (np.asarray(lengths) - 1).astype(np.int32),
         "total": np.array(max(lengths) if not shared else max(lengths), np.int32)}
    if packed:
        f["qkv"] = r.standard_normal((B, S, (N + 2 * KV) * D)).astype(dt)
    else:
        f["q"] = r.standard_normal((B, S, N * D)).astype(dt)
        f["k"] = r.standard_normal((B, S, KV * D)).astype(dt)
        f["v"] = r.standard_normal((B, S, KV * D)).astype(dt)
    if P:
        f["pk"] = r.standard_normal((B, KV, P, D)).astype(dt)
        f["pv"] = r.standard_normal((B, KV, P, D)).astype(dt)
    return f


def gqa_cases():
    r = rng(6)
    cases = []
    N, KV, D = 4, 2, 16
    for dt, tol in ((np.float32, 5e-5), (np.float16, 6e-3)):
        tag = np.dtype(dt).name
        ins = lambda pk: ["qkv", "", "", pk or "", "pv" if pk else "", "seqlens_k", "total", "cos", "sin"]  # noqa: E731
        base = dict(num_heads=N, kv_num_heads=KV)
        # first prompt, padded batch (row 1 has 4 of 6 tokens), no past
        lengths = [6, 4]
        f = gqa_inputs(r, 2, 6, N, KV, D, 0, dt, lengths)
        # the output rows of padding are not defined (ORT leaves them to its scratch buffer): compared rows
        # are the real tokens'
        rows = lambda lens: (lambda y: np.concatenate([y[b, :n].ravel() for b, n in enumerate(lens)]))  # noqa: E731
        cases.append(Case(f"GQA_prompt_padded_rotary_{tag}",
                          node("GroupQueryAttention", ins(None), ["y", "present_k", "present_v"], do_rotary=1, **base),
                          f, tol=tol, compare={"y": rows(lengths)}))
        # decode with a growing cache: past 5, one new token, both rows full
        f = gqa_inputs(r, 2, 1, N, KV, D, 5, dt, [6, 6])
        cases.append(Case(f"GQA_decode_rotary_{tag}",
                          node("GroupQueryAttention", ins("pk"), ["y", "present_k", "present_v"], do_rotary=1, **base),
                          f, tol=tol))
        # decode into a shared max-length buffer (past length 9 = present length), rows at 4 and 7 tokens
        f = gqa_inputs(r, 2, 1, N, KV, D, 9, dt, [4, 7], shared=True)
        cases.append(Case(f"GQA_decode_buffer_{tag}",
                          node("GroupQueryAttention", ins("pk"), ["y", "present_k", "present_v"], do_rotary=1,
                               rotary_interleaved=1, **base), f, tol=tol))
        # a first prompt written into a shared max-length buffer (past length 8 = present length)
        f = gqa_inputs(r, 2, 3, N, KV, D, 8, dt, [3, 2], shared=True)
        cases.append(Case(f"GQA_prompt_into_buffer_{tag}",
                          node("GroupQueryAttention", ins("pk"), ["y", "present_k", "present_v"], do_rotary=1, **base),
                          f, tol=tol, compare={"y": rows([3, 2])}))
        # batched decode with a growing cache whose rows differ: row 1 has 3 of the 5 past tokens
        f = gqa_inputs(r, 2, 1, N, KV, D, 5, dt, [6, 4])
        cases.append(Case(f"GQA_decode_ragged_{tag}",
                          node("GroupQueryAttention", ins("pk"), ["y", "present_k", "present_v"], do_rotary=1, **base),
                          f, tol=tol))
        # separate Q/K/V, no rotary, window 2, softcap, scale
        f = gqa_inputs(r, 1, 5, N, KV, D, 3, dt, [8], packed=False)
        cases.append(Case(f"GQA_subsequent_prompt_window_softcap_{tag}",
                          node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens_k", "total"],
                               ["y", "present_k", "present_v"], local_window_size=2, softcap=3.0, scale=0.3, **base),
                          f, tol=tol))
    return cases


def quantize_nbits(w, bits, block, symmetric, rng_):
    """(packed uint8 [N, blocks, block·bits/8], scales [N, blocks], packed zero points or None) of a
    [K, N] weight, in ORT's MatMulNBits layout."""
    K, N = w.shape
    blocks = -(-K // block)
    wt = np.zeros((N, blocks * block), np.float32)
    wt[:, :K] = w.T
    wt = wt.reshape(N, blocks, block)
    top = (1 << bits) - 1
    if symmetric:
        scales = np.abs(wt).max(-1) / (1 << (bits - 1))
        zp = np.full((N, blocks), 1 << (bits - 1))
    else:
        lo, hi = wt.min(-1), wt.max(-1)
        scales = (hi - lo) / top
        zp = np.clip(np.round(-lo / np.where(scales == 0, 1, scales)), 0, top)
    scales = np.where(scales == 0, 1.0, scales).astype(np.float32)
    q = np.clip(np.round(wt / scales[..., None]) + zp[..., None], 0, top).astype(np.uint8)
    per = 8 // bits

    def pack(v):
        v = v.reshape(v.shape[:-1] + (-1, per))
        out = np.zeros(v.shape[:-1], np.uint8)
        for j in range(per):
            out |= (v[..., j] << (bits * j)).astype(np.uint8)
        return out
    packed = pack(q)
    zrow = -(-blocks * bits // 8) * per
    zpad = np.zeros((N, zrow), np.uint8)
    zpad[:, :blocks] = zp
    return packed, scales, (None if symmetric else pack(zpad)), zp


def nbits_cases():
    r = rng(7)
    cases = []
    for bits, block, K, N, sym in ((4, 32, 64, 48, True), (4, 16, 40, 24, False), (8, 32, 64, 16, False),
                                   (2, 16, 32, 8, False)):
        w = r.standard_normal((K, N)).astype(np.float32) / np.sqrt(K)
        packed, scales, zp, zvals = quantize_nbits(w, bits, block, sym, r)
        a = r.standard_normal((2, 3, K)).astype(np.float32)
        for dt, tol in ((np.float32, 5e-5), (np.float16, 5e-3)):
            tag = np.dtype(dt).name
            f = {"a": a.astype(dt), "b": packed, "s": scales.astype(dt), "bias": (0.3 * r.standard_normal(N)).astype(dt)}
            ins = ["a", "b", "s"]
            if zp is not None:
                f["zp"] = zp
                ins.append("zp")
            attrs = dict(K=K, N=N, bits=bits, block_size=block)
            cases.append(Case(f"MatMulNBits_b{bits}_bs{block}_{'sym' if sym else 'zp'}_{tag}",
                              node("MatMulNBits", ins, ["y"], **attrs), f, tol=tol, constants=tuple(ins[1:])))
            if dt == np.float32 and bits == 4:
                fz = dict(f, zpf=zvals.astype(np.float32) + 0.25)
                cases.append(Case(f"MatMulNBits_b{bits}_bs{block}_floatzp_bias",
                                  node("MatMulNBits", ["a", "b", "s", "zpf", "", "bias"], ["y"], **attrs), fz,
                                  tol=tol, constants=("b", "s", "zpf")))
    return cases


def quant_cases():
    """DynamicQuantizeLinear, QLinearMatMul, MatMulIntegerToFloat and DynamicQuantizeMatMul on uint8/int8 data with
    non-zero (per-column) zero points; DynamicQuantizeLinear on inputs whose range excludes zero, all-zero input
    and values on exact rounding ties. Integer outputs must equal ORT's (tol 0)."""
    r = rng(7)
    cases = []
    ties = (np.arange(-24, 25, dtype=np.float32) * 0.5)            # x / scale lands on .5 ties for scale 1/... below
    for tag, x in (("mixed", (r.standard_normal((3, 5, 7)) * 4).astype(np.float32)),
                   ("positive", (r.random((4, 9)) * 3 + 1).astype(np.float32)),
                   ("negative", (-r.random((4, 9)) * 3 - 0.5).astype(np.float32)),
                   ("zeros", np.zeros((2, 3), np.float32)),
                   ("ties", np.concatenate([ties, [-12.0, 13.0]]).astype(np.float32))):
        cases.append(Case(f"DynamicQuantizeLinear_{tag}", node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"],
                                                                  domain=""), {"x": x}, opset=13, tol=0.0))
    M, K, N = 6, 40, 12
    a8 = r.integers(0, 256, (M, K)).astype(np.uint8)
    b8 = r.integers(-128, 128, (K, N)).astype(np.int8)
    bu = r.integers(0, 256, (K, N)).astype(np.uint8)
    for tag, b, sb, zb in (("tensor", bu, np.array(0.013, np.float32), np.array(131, np.uint8)),
                           ("column", b8, (r.random(N) * 0.02 + 0.005).astype(np.float32),
                            r.integers(-9, 9, N).astype(np.int8))):
        f = {"a": a8, "sa": np.array(0.021, np.float32), "za": np.array(117, np.uint8), "b": b, "sb": np.asarray(sb),
             "zb": np.asarray(zb), "sy": np.array(3.1, np.float32), "zy": np.array(121, np.uint8)}
        cases.append(Case(f"QLinearMatMul_{tag}", node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                                                       ["y"], domain=""), f, opset=21 if tag == "column" else 13,
                          tol=0.0, constants=("b", "sb", "zb", "sy", "zy")))
    a3 = r.integers(0, 256, (2, 5, K)).astype(np.uint8)
    fz = {"a": a3, "b": b8, "sa": np.array(0.031, np.float32), "sb": (r.random(N) * 0.02 + 0.005).astype(np.float32),
          "za": np.array(140, np.uint8), "zb": r.integers(-5, 5, N).astype(np.int8),
          "bias": r.standard_normal(N).astype(np.float32)}
    cases.append(Case("MatMulIntegerToFloat_column_bias", node("MatMulIntegerToFloat",
                                                                ["a", "b", "sa", "sb", "za", "zb", "bias"], ["y"]),
                      fz, tol=1e-6, constants=("b", "sb", "zb", "bias")))
    fd = {"a": (r.standard_normal((2, 5, K)) * 2).astype(np.float32), "b": b8, "sb": fz["sb"], "zb": fz["zb"],
          "bias": fz["bias"]}
    cases.append(Case("DynamicQuantizeMatMul_column_bias", node("DynamicQuantizeMatMul",
                                                                 ["a", "b", "sb", "zb", "bias"], ["y"]),
                      fd, tol=1e-6, constants=("b", "sb", "zb", "bias")))
    return cases


def all_cases():
    return norm_cases() + activation_cases() + attention_cases() + mha_cases() + rotary_cases() + gqa_cases() + \
        nbits_cases() + quant_cases()
