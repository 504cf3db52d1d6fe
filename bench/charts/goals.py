"""The goals the GPU table is read against (targets, not assertions), evaluated from a result JSON.

Speed ratios count only between results of one process on one GPU (same ``process`` field, a GPU
run); a CPU smoke run measures no goal. Batch 1 and 16 rows of the main shapes are compared; the
best PlusEP variant (with or without CUDA graph) against the best of the other side.
"""
from __future__ import annotations

from dataclasses import dataclass

from bench.harness.contenders import COMPILE_CONFIGS, ORT_CONFIGS, PLUS_CONFIGS

GOAL_BATCHES = (1, 16)


@dataclass(frozen=True)
class Goal:
    id: str
    text: str
    kind: str                  # ratio | latency | kernels
    target: float
    against: tuple = ()
    contenders: tuple = PLUS_CONFIGS
    where: tuple = ()          # (model, dtype, batch, seq) for latency goals


GOALS = (
    Goal("vs_ort", "PlusEP >= 1.5x faster than the best ORT config (batch 1 and 16)", "ratio", 1.5, ORT_CONFIGS),
    Goal("vs_compile", "PlusEP >= 1.3x faster than the best torch.compile (batch 1 and 16)", "ratio", 1.3,
         COMPILE_CONFIGS),
    Goal("bert_b1", "BERT-base fp16 seq 128 batch 1 <= 0.30 ms (PlusEP, CUDA graph)", "latency", 0.30,
         contenders=("plus_ep_cuda_graph",), where=("bert", "fp16", 1, 128)),
    Goal("bert_b16", "BERT-base fp16 seq 128 batch 16 <= 1.2 ms (PlusEP)", "latency", 1.2,
         where=("bert", "fp16", 16, 128)),
    Goal("kernels", "<= 7 GPU kernels per layer (PlusEP, whole inference / layers)", "kernels", 7.0,
         contenders=("plus_ep",)),
)


def usable(doc) -> list:
    """Rows a goal may use: measured on the GPU, main shapes, in the JSON's own process."""
    return [r for r in doc["results"] if r["status"] == "ok" and r.get("gpu_run") and not r["sweep"]
            and r.get("process") == doc.get("process")]


def best(rows, contenders, key="p50_ms"):
    cands = [r for r in rows if r["contender"] in contenders and isinstance(r.get(key), (int, float))]
    return min(cands, key=lambda r: r[key]) if cands else None


def ratio_cases(doc, goal) -> list:
    """(model, dtype, batch, seq, plus row, other row, ratio) for every group where both sides ran."""
    groups = {}
    for r in usable(doc):
        if r["batch"] in GOAL_BATCHES:
            groups.setdefault((r["model"], r["dtype"], r["batch"], r["seq"]), []).append(r)
    cases = []
    for key, rows in groups.items():
        plus, other = best(rows, goal.contenders), best(rows, goal.against)
        if plus and other:
            cases.append((*key, plus, other, other["p50_ms"] / plus["p50_ms"]))
    return cases


def evaluate(doc) -> list[dict]:
    """One dict per goal: text, measured (words and numbers), met (True/False/None = not measured)."""
    out = []
    for g in GOALS:
        res = {"id": g.id, "text": g.text, "target": g.target, "met": None, "measured": "not measured"}
        if doc.get("kind") != "gpu":
            res["measured"] = f"not measured ({doc.get('kind')} run, not a benchmark result)"
        elif doc.get("args", {}).get("size", "real") != "real" or doc.get("args", {}).get("layers"):
            res["measured"] = "not measured (not the full-size models)"
        elif g.kind == "ratio":
            cases = ratio_cases(doc, g)
            if cases:
                worst = min(cases, key=lambda c: c[-1])
                ok = sum(c[-1] >= g.target for c in cases)
                res.update(met=ok == len(cases), cases=len(cases), cases_met=ok, worst_ratio=worst[-1],
                           measured=f"{ok} of {len(cases)} cases; worst {worst[-1]:.2f}x "
                                    f"({worst[0]} {worst[1]} b{worst[2]}: {worst[4]['contender']} vs "
                                    f"{worst[5]['contender']})")
        elif g.kind == "latency":
            model, dtype, batch, seq = g.where
            rows = [r for r in usable(doc) if (r["model"], r["dtype"], r["batch"], r["seq"]) == g.where]
            b = best(rows, g.contenders)
            if b:
                res.update(met=b["p50_ms"] <= g.target, value=b["p50_ms"],
                           measured=f"{b['p50_ms']:.3f} ms p50 ({b['contender']}, {b['exporter']})")
        elif g.kind == "kernels":
            rows = [r for r in usable(doc) if r["contender"] in g.contenders
                    and isinstance(r.get("kernels_per_layer"), (int, float))]
            if rows:
                worst = max(rows, key=lambda r: r["kernels_per_layer"])
                ok = sum(r["kernels_per_layer"] <= g.target for r in rows)
                res.update(met=ok == len(rows), cases=len(rows), cases_met=ok, worst=worst["kernels_per_layer"],
                           measured=f"{ok} of {len(rows)} cases; worst {worst['kernels_per_layer']:.1f} per layer "
                                    f"({worst['model']} {worst['dtype']} b{worst['batch']})")
        out.append(res)
    return out
