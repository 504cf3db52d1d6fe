"""Host costs (issue 24): renders are kept by the subgraph's canonical form, so identical layers render once
and a warm rewrite renders nothing, with byte-identical plans and sources; dimension strings are parsed once;
`import plus_ep` loads the rewriter only when it is used."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from onnx import numpy_helper

from plus_ep.demo_model import build_bert
from plus_ep.graph_rewrites.partition import node_name
from plus_ep.kernels import render as R
from plus_ep.kernels.codegen import symdim
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed


def _renders(model, arch="sm_90a"):
    r = rewrite_detailed(model)
    out = []
    for k, sg in enumerate(r.subgraphs):
        ins, outs = r.view.graph_index.boundary(sg.nodes)
        out.append((r, sg, ins, outs, node_name(sg.pattern.name, k)))
    return out


def test_identical_layers_render_once_and_cached_renders_equal_fresh_ones():
    jobs = _renders(build_bert(layers=3, hidden=64, heads=2, intermediate=128))
    R.clear_render_cache()
    misses = 0
    for arch in ("sm_90a", "sm_80"):
        for r, sg, ins, outs, name in jobs:
            before = len(R._RENDERS)
            got = R.render(r.view, sg, ins, outs, Target(arch), node_name=name)
            misses += len(R._RENDERS) > before
            fresh = R._render(r.view, sg, ins, outs, Target(arch), node_name=name)
            assert got.plan.text() == fresh.plan.text(), name
            assert [(v.name, v.source, v.entries) for v in got.variants] == \
                [(v.name, v.source, v.entries) for v in fresh.variants], name
            assert f"node:    {name}\n" in got.variants[0].source
    per_arch = len({R.render_key(r.view, sg, ins, outs, Target("sm_90a")) for r, sg, ins, outs, _ in jobs})
    assert misses == 2 * per_arch < 2 * len(jobs)      # layers 2 and 3 come from the cache


def _attention_keys(m):
    jobs = [j for j in _renders(m) if j[1].pattern.name == "attention"]
    return [R.render_key(r.view, sg, ins, outs, Target("sm_90a")) for r, sg, ins, outs, _ in jobs]


def test_a_folded_constant_is_part_of_the_key():
    """Layers 1 and 2 render alike; once layer 2's attention scale (a scalar folded into the code) differs,
    its render is not layer 1's."""
    m = build_bert(layers=3, hidden=64, heads=2, intermediate=128)
    keys = _attention_keys(m)
    assert len(keys) == 3 and keys[1] == keys[2]
    (div,) = [n for n in m.graph.node if n.op_type == "Div" and "layer.2/attention" in n.name]
    inits = {t.name: t for t in m.graph.initializer}
    consts = {o: n for n in m.graph.node if n.op_type == "Constant" for o in n.output}
    (src,) = [i for i in div.input if i in inits or i in consts]
    t = inits[src] if src in inits else consts[src].attribute[0].t
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(2), t.name))
    keys = _attention_keys(m)
    assert keys[1] != keys[2]


def test_dimension_strings_are_parsed_once():
    symdim._parse_text.cache_clear()
    for _ in range(3):
        assert str(symdim.parse("batch*seq")) == "batch*seq"
    info = symdim._parse_text.cache_info()
    assert info.misses == 1 and info.hits == 2


def test_import_plus_ep_is_lazy_and_rewrite_stays_the_function():
    code = ("import sys, plus_ep\n"
            "assert 'plus_ep.rewrite' not in sys.modules and 'sympy' not in sys.modules, sorted(sys.modules)\n"
            "from plus_ep.rewrite import rewrite_detailed\n"
            "assert callable(plus_ep.rewrite) and plus_ep.rewrite.__name__ == 'rewrite'\n"
            "assert plus_ep.InferenceSession.__name__ == 'InferenceSession'\n"
            "print('ok')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PLUS_EP_REGISTER": "0", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
