"""PNG chart of a GPU-run JSON: p50 latency per model and contender, one panel per batch of the main
shapes, and the dynamic sweep of the first model. Needs matplotlib (the ``bench`` extra); without it
``write`` returns None and says so."""
from __future__ import annotations

import sys

from bench.harness.run_order import ORDER


def banner(doc) -> str:
    """The warning a result that is not a GPU benchmark run carries in its table and chart."""
    return {"cpu-smoke": "CPU SMOKE RUN: NOT A GPU RESULT.",
            "gpu-smoke": "GPU SMOKE RUN: NOT A BENCHMARK RESULT."}.get(doc.get("kind"), "NOT A GPU BENCHMARK RUN.")


def _ok(r):
    return r["status"] == "ok" and isinstance(r.get("p50_ms"), (int, float))


def write(doc, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: no matplotlib, no PNG chart (pip install matplotlib)", file=sys.stderr)
        return None
    ex0 = (doc.get("args", {}).get("exporters") or [None])[0]
    main = [r for r in doc["results"] if _ok(r) and not r["sweep"] and r["exporter"] in (None, ex0)]
    sweep = [r for r in doc["results"] if _ok(r) and r["sweep"] and r["exporter"] in (None, ex0)]
    batches = sorted({r["batch"] for r in main})
    panels = len(batches) + bool(sweep)
    fig, axes = plt.subplots(panels or 1, 1, figsize=(12, 3.6 * max(panels, 1)), squeeze=False)
    axes = [a[0] for a in axes]
    contenders = [c for c in ORDER if any(r["contender"] == c for r in main + sweep)]
    colors = {c: plt.get_cmap("tab10")(i) for i, c in enumerate(ORDER)}
    for ax, b in zip(axes, batches):
        rows = [r for r in main if r["batch"] == b]
        groups = sorted({(r["model"], r["dtype"]) for r in rows},
                        key=lambda g: (list(doc.get("models", {})).index(g[0]), g[1]))
        width = 0.8 / max(len(contenders), 1)
        for i, c in enumerate(contenders):
            xs, ys = [], []
            for j, g in enumerate(groups):
                hit = [r["p50_ms"] for r in rows if (r["model"], r["dtype"], r["contender"]) == (*g, c)]
                if hit:
                    xs.append(j + (i - len(contenders) / 2 + 0.5) * width)
                    ys.append(hit[0])
            ax.bar(xs, ys, width, label=c, color=colors[c])
        ax.set_xticks(range(len(groups)), [f"{m}\n{d}" for m, d in groups], fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel(f"p50 ms, batch {b}")
        ax.grid(axis="y", alpha=0.3)
    if sweep:
        ax = axes[-1]
        first = sweep[0]["model"]
        for c in contenders:
            pts = sorted((r["batch"] * r["seq"], r["p50_ms"]) for r in sweep
                         if r["model"] == first and r["contender"] == c and r["dtype"] == sweep[0]["dtype"])
            if pts:
                ax.plot(*zip(*pts), "o-", label=c, color=colors[c], markersize=3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"{first} {sweep[0]['dtype']}: batch x seq (tokens), one session")
        ax.set_ylabel("p50 ms")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=4, loc="upper left")
    title = f"PlusEP GPU benchmark {doc['date'][:10]}, {doc['device']}"
    if doc.get("kind") != "gpu":
        title += "\n" + banner(doc)
    fig.suptitle(title, fontsize=10, color="black" if doc.get("kind") == "gpu" else "red")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
