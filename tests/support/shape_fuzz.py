"""The shape-adversarial fuzzer (issue 34, item 3): fused nodes of every template family, run through both
front ends on the emulated driver (every kernel on the PTX interpreter, its bounds and race checkers on)
with random input shapes and shape-tensor values, inside and outside what each model admits. Every run
must either give ORT CPU's answer on the original graph (shapes and values) or be refused naming a node
(one line, ORT refusing too or the plan saying why the kernels cannot follow); a checker finding, an
interpreter error, a crash, a wrong shape or value, an unnamed error, or a result where ORT refuses is a
finding, except where ORT CPU refuses only an out-of-range Gather index: the kernels read zeros there as
ORT's CUDA Gather does, and the run counts (`gather_oob_as_cuda`) when its outputs are ORT CPU's on the
model whose data has a zero row those indices are sent to (`zero_row_oracle`).

    prepared = prepare(FAMILIES)                            # rewrite each family's models once (kernels cached)
    stats = fuzz(tmp_dir, prepared, runs=40, seed=0)        # one child process per batch of runs
    runs = budget_runs(prepared, stats, seconds=240)        # {model: runs}: equal time per model, next batch
    stats["findings"]                                       # [] when nothing went wrong

Models come from the case libraries (tests/support/*_models.py, decoder_graphs.py, the demo BERT);
their graph inputs' declared dims give the symbols. A run draws one value per symbol (small ones; in
about a third of the runs one symbol, rarely two, one past a tile, mostly 17, so a grid dimension
exceeds 1), then, by its mode, keeps every input consistent (`admitted`: drawn again while ORT refuses
it), sets one symbolic axis of one input to 1 (`broadcast`) or one or two axes of any input to another
size, 0 included (`outside`). Integer inputs that index a Gather get indices in range (now and then
one past it); other integer inputs 0/1. Shape tensors (TorchScript's Shape -> Concat) take their
values from the inputs they describe, so an inconsistent input is an inconsistent shape tensor.

`python -m tests.support.shape_fuzz --seconds 3600 --out bench/results/2026-11-29-shape-fuzz.json` is
the long run (the JSON is rewritten after every batch). Each batch gives every model an equal share of
its time at what the model's runs cost so far: the interpreter's time goes to many small-grid runs of
the cheap nodes, and a model whose run takes a minute (BERT, split-K GEMM) runs every few batches.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from tests.support import broadcast_models, decoder_graphs, emulated_models, gated_models, qkv_models, shapev_models
from tests.support import t5_embedding_models
from tests.support.emulated_runs import FRONT_ENDS, matches, oracle, run_cases

SMALL = (1, 2, 3, 4, 5, 7, 8)
PAST_TILE = (17, 33, 65, 129)         # one past a 16/32/64/128 tile: grid dimensions above 1
PAST_TILE_P = (0.5, 0.3, 0.15, 0.05)  # mostly the smallest: the edge shows as well, in fewer CTAs
NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.INT64: np.int64,
      TensorProto.INT32: np.int32, TensorProto.BOOL: np.bool_}


def _bert():
    from plus_ep.demo_model import build_bert
    return build_bert(layers=1, hidden=64, heads=2, intermediate=128, vocab=50, max_pos=40)


# family -> [(model name, builder, max elements of one input, tolerance)]
FAMILIES = {
    "pointwise": [("add", broadcast_models.add, 4096, 1e-4), ("concat_add", broadcast_models.concat_add, 4096, 1e-4)],
    "row": [("layernorm_sum", broadcast_models.layernorm_sum, 4096, 1e-4),
            ("softmax_sum", broadcast_models.softmax_sum, 4096, 1e-4),
            ("t5_rmsnorm", t5_embedding_models.t5_embedding_rmsnorm, 4096, 1e-4)],
    "gemm": [("gemm_residual", broadcast_models.gemm_residual, 4096, 1e-4),
             ("gemm_concat", broadcast_models.gemm_concat, 4096, 1e-4),
             ("tiny_ln_gemm", emulated_models.tiny_model, 4096, 1e-4)],
    "gated": [("gated_pair", gated_models.gated_pair_model, 2048, 1e-4)],
    "grouped": [("qkv", qkv_models.qkv_model, 2048, 1e-4),
                ("gqa_long_k", gated_models.gqa_long_k_model, 16384, 1e-3)],     # split-K through scratch
    "nbits": [("gated_nbits", gated_models.gated_nbits_model, 2048, 2e-2)],
    "attention": [("kv_cache_gqa", decoder_graphs.kv_cache_attention, 8192, 1e-3)],
    "bert": [("bert_1layer", _bert, 2048, 1e-3)],
    "fusedhost": [("gpt2_chain", shapev_models.gpt2_like, 4096, 1e-4),
                  ("gpt2_rows", shapev_models.gpt2_like_rows, 4096, 1e-4)],
}


@dataclass
class Prepared:
    family: str
    name: str
    original: onnx.ModelProto
    rewritten: bytes
    nodes: list                     # (fused node name, pattern) of the rewritten model
    cap: int
    tol: float
    inputs: list = field(default_factory=list)      # (name, elem type, declared dims)
    gather_range: dict = field(default_factory=dict)  # int input -> number of rows it indexes
    zero_row: onnx.ModelProto | None = None   # the original with a 0 row past each such Gather's data


def prepare(families=FAMILIES, archs=("sm_80",), only=None) -> list:
    """Each family's models rewritten with kernels (compiled once; the kernel cache keeps them)."""
    import plus_ep
    out = []
    for family, models in families.items():
        for name, build, cap, tol in models:
            if only and family not in only and name not in only:
                continue
            model = build()
            r = plus_ep.rewrite_detailed(model, archs=list(archs), fp32_math="exact")
            fused = [(n.name, n.name.split("/")[1] if n.name.count("/") >= 2 else n.op_type)
                     for n in r.model.graph.node if n.domain == "ai.plus_ep"]
            p = Prepared(family, name, model, r.model.SerializeToString(), fused, cap, tol)
            inits = {t.name: t for t in model.graph.initializer}
            for i in model.graph.input:
                if i.name in inits:
                    continue
                tt = i.type.tensor_type
                dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tt.shape.dim]
                p.inputs.append((i.name, tt.elem_type, dims))
            for n in model.graph.node:
                if n.op_type == "Gather" and len(n.input) > 1 and n.input[0] in inits:
                    axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                    p.gather_range[n.input[1]] = int(inits[n.input[0]].dims[axis])
            p.zero_row = _zero_row_model(model) if p.gather_range else None
            out.append(p)
    return out


def _zero_row_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Gather of an initializer reading a copy that has one row of zeros past its end:
    with out-of-range indices sent to that row, ORT CPU gives what ORT's CUDA Gather (and PlusEP's
    kernels, pull.Emitter._indexed) give for them: zeros, where ORT CPU's own Gather refuses."""
    from onnx import numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name: t for t in m.graph.initializer}
    for k, n in enumerate(m.graph.node):
        if n.op_type != "Gather" or len(n.input) < 2 or n.input[0] not in inits:
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
        data = numpy_helper.to_array(inits[n.input[0]])
        axis %= data.ndim
        pad = np.zeros(data.shape[:axis] + (1,) + data.shape[axis + 1:], data.dtype)
        name = f"{n.input[0]}__zero_row_{k}"
        m.graph.initializer.append(numpy_helper.from_array(np.concatenate([data, pad], axis), name))
        n.input[0] = name
    return m


def zero_row_oracle(p: Prepared, feeds: dict) -> tuple:
    """ORT CPU's answer with ORT CUDA's out-of-range Gather semantics (`_zero_row_model`): (outputs, None),
    or (None, why) when no index is out of range or ORT refuses anyway."""
    if p.zero_row is None:
        return None, "no Gather of an initializer"
    moved, out_of_range = dict(feeds), False
    for name, rows in p.gather_range.items():
        if name not in feeds:
            continue
        idx = np.asarray(feeds[name])
        bad = (idx < -rows) | (idx >= rows)
        out_of_range |= bool(bad.any())
        moved[name] = np.where(bad, rows, np.where(idx < 0, idx + rows, idx)).astype(idx.dtype)
    if not out_of_range:
        return None, "every index in range"
    return oracle(p.zero_row, moved)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _eval_dim(d, values: dict) -> int:
    if isinstance(d, int):
        return d
    return int(eval(d, {"__builtins__": {}}, values))   # noqa: S307 - dims of our own case libraries


def _symbol_values(names: list, rng: np.random.Generator) -> dict:
    """Small values, and now and then one symbol (rarely a second) one past a tile, mostly the smallest
    tile: a grid above 1 where the tiling's edges are, without the many-CTA grids that cost the
    interpreter minutes and show no more (e.g. softmax with 17 x 65 rows: 1105 CTAs, 40 s a run)."""
    values = {s: int(rng.choice(SMALL)) for s in names}
    for p_past in (0.3, 0.1):
        if names and rng.random() < p_past:
            values[names[rng.integers(len(names))]] = int(rng.choice(PAST_TILE, p=PAST_TILE_P))
    return values


def sample(p: Prepared, rng: np.random.Generator, mode: str | None = None) -> tuple:
    """(feeds, mode, symbol values) for one run of `p` (module docstring)."""
    mode = mode or rng.choice(["admitted", "admitted", "broadcast", "outside"])
    names = sorted({s for _, _, dims in p.inputs for d in dims if isinstance(d, str) for s in _NAME.findall(d)})
    shapes = None
    for _ in range(20):   # symbol values whose inputs fit the cap
        values = _symbol_values(names, rng)
        shapes = [[_eval_dim(d, values) for d in dims] for _, _, dims in p.inputs]
        if all(int(np.prod(s)) <= p.cap for s in shapes):
            break
        values = None
    if values is None:
        values = {s: 1 for s in names}
        shapes = [[_eval_dim(d, values) for d in dims] for _, _, dims in p.inputs]
    axes = [(k, a) for k, (_, _, dims) in enumerate(p.inputs) for a, d in enumerate(dims)]
    symbolic = [(k, a) for k, a in axes if isinstance(p.inputs[k][2][a], str)]
    if mode == "broadcast" and symbolic:
        k, a = symbolic[rng.integers(len(symbolic))]
        shapes[k][a] = 1
    elif mode == "outside" and axes:
        for _ in range(int(rng.integers(1, 3))):   # mostly symbolic axes: a static one ORT's own checks refuse
            pool = symbolic if symbolic and rng.random() < 0.85 else axes
            k, a = pool[rng.integers(len(pool))]
            v = shapes[k][a]
            shapes[k][a] = int(rng.choice([0, 1, v + 1, max(v - 1, 0), 2 * v, int(rng.integers(1, 10))]))
    feeds = {}
    for (name, et, _), shape in zip(p.inputs, shapes):
        dt = NP[et]
        if et in (TensorProto.INT64, TensorProto.INT32):
            hi = p.gather_range.get(name)
            if hi is not None:
                top = hi + 2 if rng.random() < 0.05 else hi
                arr = rng.integers(0, top, size=shape)
            else:
                arr = rng.integers(0, 2, size=shape)
        elif et == TensorProto.BOOL:
            arr = rng.integers(0, 2, size=shape).astype(bool)
        else:
            arr = rng.standard_normal(shape)
        feeds[name] = np.asarray(arr).astype(dt)
    return feeds, str(mode), values


def _named(err: str | None) -> bool:
    return bool(err) and "PlusEP node '" in err


def classify(p: Prepared, feeds: dict, res: dict, want, why, zero_want=None) -> tuple:
    """(category, detail) of one front end's run (module docstring). Categories: match, refused_as_ort,
    refused_by_ort_itself (ORT's own input checks, before any node), refused_where_ort_runs,
    gather_oob_as_cuda (ORT CPU refuses an out-of-range Gather index only; the run gave ORT CUDA's
    zeros for it, `zero_want`), finding."""
    launches = res["launches"]
    bad = [ln for ln in launches if ln[1] is not None or ln[2]]
    if bad:
        return "finding", f"checker/interpreter: {bad[0][0]}: {bad[0][1] or f'{bad[0][2]} findings'}"[:400]
    err = res["error"]
    if want is None:
        if err is None and zero_want is not None:
            diff = matches(res["outputs"], zero_want, rtol=p.tol, atol=p.tol)
            return ("finding", f"wrong result for an out-of-range Gather index: {diff}") if diff else \
                ("gather_oob_as_cuda", "")
        if err is None:
            return "finding", f"ran where ORT refuses ({why[:200]})"
        if _named(err):
            return "refused_as_ort", err[err.index("PlusEP node"):][:300]
        if "Got invalid dimensions" in err or "Invalid rank" in err or why.split(":")[0] in err:
            return "refused_by_ort_itself", err[:200]
        return "finding", f"error without the node named: {err[:300]}"
    if err is not None:
        if _named(err):
            tail = err[err.index("PlusEP node"):]
            if "\n" in tail.strip():
                return "finding", f"refusal of more than one line: {tail[:300]}"
            return "refused_where_ort_runs", tail[:300]
        return "finding", f"error without the node named where ORT runs: {err[:300]}"
    diff = matches(res["outputs"], want, rtol=p.tol, atol=p.tol)
    if diff:
        return "finding", f"wrong result: {diff}"
    return "match", ""


def _new_stats() -> dict:
    return {"runs": 0, "node_runs": 0, "launches": 0, "families": {}, "findings": [], "refusals_where_ort_runs": {},
            "grid_above_1": {}, "seconds_by_model": {}, "runs_by_model": {}, "launching_runs_by_model": {}}


def budget_runs(prepared: list, stats: dict, seconds: float, most: int = 40) -> dict:
    """{model name: runs} for a batch of about `seconds`: each model an equal share of the time at what
    its runs that launched a kernel cost so far (refused runs cost next to nothing and say nothing of a
    run that launches), at most `most` runs each; a model with no such run yet gets 2 runs. A share a
    model's run does not fit in is kept for later batches (stats["credit_by_model"]): cheap models get
    many runs a batch, one whose run takes minutes (BERT, split-K GEMM on a loaded machine) one every few."""
    out = {}
    share = seconds / max(1, len(prepared))
    credit = stats.setdefault("credit_by_model", {})
    for p in prepared:
        n = stats.setdefault("launching_runs_by_model", {}).get(p.name, 0)
        if not n:
            out[p.name] = 2
            continue
        cost = max(stats["seconds_by_model"].get(p.name, 0.0) / n, 1e-3)
        have = credit.get(p.name, 0.0) + share
        out[p.name] = int(min(most, have // cost))
        credit[p.name] = min(have - out[p.name] * cost, 4 * max(share, cost))
    return out


def _fam(stats, family):
    return stats["families"].setdefault(family, {"runs": 0, "node_runs": 0, "match": 0, "refused_as_ort": 0,
                                                 "refused_by_ort_itself": 0, "refused_where_ort_runs": 0,
                                                 "gather_oob_as_cuda": 0, "finding": 0, "modes": {}})


def draw(p: Prepared, rng: np.random.Generator, mode: str | None = None, tries: int = 8) -> tuple:
    """(feeds, mode, symbol values, ORT's outputs or None, ORT's error, ORT's outputs with out-of-range
    Gather indices reading zeros or None): one run of `p` with ORT CPU's answers. An `admitted` draw
    ORT refuses (symbols the declared dims do not relate, e.g. t = 1 or s for a broadcast) is drawn
    again, up to `tries` times: the runs ORT refuses are the other modes'."""
    for _ in range(tries):
        feeds, mode, values = sample(p, rng, mode)
        want, why = oracle(p.original, feeds)
        if want is not None or mode != "admitted":
            break
    zero_want = zero_row_oracle(p, feeds)[0] if want is None else None
    return feeds, mode, values, want, why, zero_want


def fuzz(tmp_dir: Path, prepared: list, runs, seed: int, fronts=FRONT_ENDS, stats=None, modes=None) -> dict:
    """`runs` runs of each prepared model (an int, or {model name: runs}), each on every front end in
    `fronts`, in one child process; `modes`: the modes in turn (model k's run j takes modes[(k + j) %
    len]) instead of random ones. stats["seconds_by_model"] adds up each model's run times (all front
    ends), stats["runs_by_model"] its runs, stats["launching_runs_by_model"] those that launched a
    kernel: what a run costs, for `budget_runs`."""
    stats = stats if stats is not None else _new_stats()
    rng = np.random.default_rng(seed)
    cases, drawn, chosen = [], [], []
    for m, p in enumerate(prepared):
        n = runs if isinstance(runs, int) else runs.get(p.name, 1)
        if n <= 0:
            continue
        feeds = [draw(p, rng, modes[(m + j) % len(modes)] if modes else None) for j in range(n)]
        cases.append((p.rewritten, [d[0] for d in feeds]))
        drawn.append(feeds)
        chosen.append(p)
    if not cases:
        return stats
    tmp_dir.mkdir(parents=True, exist_ok=True)
    try:
        results = run_cases(tmp_dir, cases, fronts=fronts, timeout=3600)
    except Exception as e:   # noqa: BLE001 - a crash of the child is a finding, with the batch to replay it
        stats["findings"].append({"family": "*", "what": f"child process failed: {str(e)[-600:]}", "seed": seed})
        return stats
    for p, feeds, rows in zip(chosen, drawn, results):
        fam = _fam(stats, p.family)
        for k, ((f, mode, values, want, why, zero_want), row) in enumerate(zip(feeds, rows)):
            fam["modes"][mode] = fam["modes"].get(mode, 0) + 1
            stats["runs_by_model"][p.name] = stats["runs_by_model"].get(p.name, 0) + 1
            if any(row[how]["launches"] for how in fronts):
                launching = stats.setdefault("launching_runs_by_model", {})
                launching[p.name] = launching.get(p.name, 0) + 1
            for how in fronts:
                res = row[how]
                stats["seconds_by_model"][p.name] = stats["seconds_by_model"].get(p.name, 0.0) + res.get("seconds", 0.0)
                cat, detail = classify(p, f, res, want, why, zero_want)
                stats["runs"] += 1
                fam["runs"] += 1
                nodes = {_node_of(ln) for ln in res["launches"]}
                stats["launches"] += len(res["launches"])
                reached = len({_node_of(ln) for ln in res["launches"]}) + (1 if _named(res["error"]) else 0)
                stats["node_runs"] += reached
                fam["node_runs"] += reached
                fam[cat] += 1
                for ln in res["launches"]:
                    g = ln[3] if len(ln) > 3 else None
                    if g and max(g) > 1:
                        seen = stats["grid_above_1"].setdefault(p.family, [1, 1, 1])
                        for a in range(3):
                            seen[a] = max(seen[a], int(g[a]))
                if cat == "refused_where_ort_runs":
                    key = re.sub(r"\d+", "N", detail.split(": ", 1)[-1])[:160]
                    stats["refusals_where_ort_runs"][key] = stats["refusals_where_ort_runs"].get(key, 0) + 1
                if cat == "finding":
                    stats["findings"].append({"family": p.family, "model": p.name, "front_end": how, "mode": mode,
                                              "seed": seed, "run": k, "symbols": values,
                                              "shapes": {n: list(v.shape) for n, v in f.items()}, "what": detail,
                                              "nodes": sorted(nodes)})
    return stats


def _node_of(launch) -> str:
    return launch[4] if len(launch) > 4 else launch[0]


def _env() -> dict:
    """Date, machine, versions (bench/harness/env_info.py) and the commit that ran, for the JSON."""
    import subprocess
    from bench.harness.env_info import env_info
    root = Path(__file__).resolve().parents[2]
    git = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "plus_ep", "kernels", "tests/support"],
                           capture_output=True, text=True, check=False)
    return {**env_info(), "commit": git.stdout.strip() or None, "dirty": bool(dirty.stdout.strip()),
            "nice": os.nice(0), "load_average_1_5_15_before": list(os.getloadavg())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="the shape-adversarial fuzzer's long run")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--batch-seconds", type=float, default=240,
                    help="the interpreter time a batch aims at, shared equally by the models (budget_runs)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/plus_ep_shape_fuzz"))
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args(argv)
    import onnxruntime as ort
    t0 = time.time()
    prepared = prepare(only=args.only)
    stats = _new_stats()
    stats.update({"what": "shape-adversarial fuzzer (tests/support/shape_fuzz.py): fused nodes of every template "
                          "family through both front ends on the emulated driver, kernels on the PTX interpreter "
                          "(bounds and race checkers on), against ORT CPU on the original graph",
                  "command": "python -m tests.support.shape_fuzz " + " ".join(argv or sys.argv[1:]),
                  "machine": f"{platform.processor() or platform.machine()}, shared 2-core box, nice 19",
                  "versions": {"python": platform.python_version(), "onnxruntime": ort.__version__,
                               "onnx": onnx.__version__},
                  "env": _env(),
                  "models": {p.name: {"family": p.family, "fused_nodes": p.nodes} for p in prepared},
                  "prepare_seconds": round(time.time() - t0, 1)})
    batch = 0
    while time.time() - t0 < args.seconds:
        runs = budget_runs(prepared, stats, min(args.batch_seconds, max(30.0, args.seconds - (time.time() - t0))))
        fuzz(args.work / f"b{batch}", prepared, runs, args.seed * 100003 + batch, stats=stats)
        batch += 1
        stats.update({"batches": batch, "seconds": round(time.time() - t0, 1),
                      "node_runs_per_second": round(stats["node_runs"] / max(1e-9, time.time() - t0), 2)})
        stats["env"]["load_average_1_5_15_after"] = list(os.getloadavg())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n")
        print(f"batch {batch}: {stats['runs']} runs, {stats['node_runs']} node runs, "
              f"{len(stats['findings'])} findings, {round(time.time() - t0)} s", flush=True)
    return 1 if stats["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
