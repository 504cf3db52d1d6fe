"""Golden rendered sources: the generated .cu of a few patterns, kept under tests/golden/.

    python -m tests.support.golden            # check (exit 1 and a diff summary on a mismatch)
    python -m tests.support.golden --update   # regenerate after an intended codegen change

The cases render subgraphs of the small BERT TorchScript export (zoo, needs the [models] extra).
"""
from __future__ import annotations

import pathlib
import sys

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
CASES = {"gemm_group_qkv": ("gemm_group", "Transpose"), "gemm_bias_gelu": ("gemm", "Erf"),
         "gemm_layernorm": ("gemm_layernorm", "LayerNormalization"), "attention": ("attention", "Softmax"),
         "layernorm_embed": ("layernorm", "Gather")}


def render_cases(arch="sm_80") -> dict:
    from plus_ep import zoo
    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.kernels.render import render
    from plus_ep.kernels.target import Target
    r = rewrite_detailed(zoo.load("bert", "torchscript", "small", layers=2))
    out = {}
    for case, (pattern, op) in CASES.items():
        sg = next(s for s in r.subgraphs if s.pattern.name == pattern
                  and any(r.view.nodes[i].op_type == op for i in s.nodes)
                  and not any(r.view.nodes[i].op_type == "Flatten" for i in s.nodes))
        ins, outs = r.view.graph_index.boundary(sg.nodes)
        rd = render(r.view, sg, ins, outs, Target(arch, "exact"), node_name=case)
        out[f"{case}.cu"] = rd.variants[0].source
        out[f"{case}.plan"] = rd.plan.text()
    return out


def main(argv=None) -> int:
    update = "--update" in (argv if argv is not None else sys.argv[1:])
    bad = []
    for name, text in render_cases().items():
        path = GOLDEN / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            bad.append(name)
    if bad:
        print("golden sources differ: " + ", ".join(bad) + " (python -m tests.support.golden --update)")
        return 1
    print("golden sources " + ("written" if update else "match") + f" ({GOLDEN})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
