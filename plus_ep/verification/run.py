"""The process `plus-ep verify` runs in: ORT CPU with the real launcher on the emulated CUDA driver.

Started by plus_ep.verify with PLUS_EP_CUDA_LIBRARY naming plus_ep/_emucuda*.so (the launcher reads it
once per process, and `import plus_ep` already loads the launcher). For each arch:

1. the emulated device takes that arch's compute capability; a session with the launcher registered
   runs the rewritten model, every Fused node's inputs and outputs exposed as graph outputs: the
   launcher binds, routes, computes grids and launches each kernel, which the PTX interpreter runs;
2. a plain ORT CPU session (no launcher: Fused nodes inline their function bodies) runs every fused
   node's function body side by side on the very inputs its kernel got: per-node error;
3. the same plain session kind runs the whole rewritten model: the model outputs' reference.

    python -m plus_ep.verification.run REQUEST.json RESULT.json
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import onnx
from onnx import helper

from .emulator import Emulator
from .tolerances import compare, node_math, tolerance

FUSED_DOMAIN = "ai.plus_ep"


def _plan_types(plan: str) -> tuple[dict, dict]:
    """{input index: ONNX dtype}, {output index: ONNX dtype} from the node's plan (kernels/wire/plan.py reads it)."""
    from ..kernels.wire.plan import parse
    p = parse(plan)
    return dict(enumerate(dt for dt, _ in p.inputs)), dict(enumerate(dt for dt, _ in p.outputs))


def _attr(node, name):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return None


def _plan(node) -> str:
    p = _attr(node, "plus_plan")
    return p.decode() if isinstance(p, bytes) else (p or "")


def _exposed(model: onnx.ModelProto, fused) -> tuple[onnx.ModelProto, list]:
    """The model with every fused node's non-constant inputs and outputs as extra graph outputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    consts = {i.name for i in m.graph.initializer} | {i.name for i in m.graph.input}
    extra = []
    for node in fused:
        tin, tout = _plan_types(_plan(node))
        for names, types in ((node.input, tin), (node.output, tout)):
            for i, nm in enumerate(names):
                if nm and nm not in have and nm not in consts and i in types:
                    m.graph.output.append(helper.make_tensor_value_info(nm, types[i], None))
                    have.add(nm)
                    extra.append(nm)
    return m, extra


def _side_by_side(model: onnx.ModelProto, fused, values: dict) -> tuple[onnx.ModelProto, dict, list]:
    """Every fused node alone on its captured inputs: node k reads n<k>_i<j>, writes n<k>_o<j>."""
    nodes, inputs, outputs, feeds, names = [], [], [], {}, []
    for k, node in enumerate(fused):
        ins = []
        for j, nm in enumerate(node.input):
            if not nm:
                ins.append("")
                continue
            arr = values[nm]
            gi = f"n{k}_i{j}"
            feeds[gi] = arr
            inputs.append(helper.make_tensor_value_info(gi, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape))
            ins.append(gi)
        _, tout = _plan_types(_plan(node))
        outs = []
        for j, nm in enumerate(node.output):
            go = f"n{k}_o{j}"
            outs.append(go)
            outputs.append(helper.make_tensor_value_info(go, tout.get(j, onnx.TensorProto.FLOAT), None))
        names.append(outs)
        n = onnx.NodeProto()
        n.CopyFrom(node)
        del n.input[:]
        n.input.extend(ins)
        del n.output[:]
        n.output.extend(outs)
        nodes.append(n)
    g = helper.make_graph(nodes, "side_by_side", inputs, outputs)
    m = helper.make_model(g, opset_imports=list(model.opset_import), functions=list(model.functions),
                          ir_version=model.ir_version)
    return m, feeds, names


def _initializers(model) -> dict:
    from onnx import numpy_helper
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def run(request: dict) -> dict:
    import onnxruntime as ort

    from ..library import get_library_path

    model = onnx.load(request["model"])
    feeds = {k: v for k, v in np.load(request["inputs"]).items()}
    fused = [n for n in model.graph.node if n.domain == FUSED_DOMAIN]
    emu = Emulator.get()
    emu.register_model(model)
    emu.fail_on_findings = False          # record findings per node instead of failing the run
    profiling = bool(request.get("profile"))
    # verify runs every CTA (outputs are compared); a profile may sample CTAs (outputs then partial)
    emu.sample_ctas = request.get("sample_ctas") if profiling else None
    progress = request.get("progress", False)
    cpu = ["CPUExecutionProvider"]

    exposed, _ = _exposed(model, fused)
    plain_opts = ort.SessionOptions()
    plain_opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref_sess = ort.InferenceSession(model.SerializeToString(), plain_opts, providers=cpu)
    out_names = [o.name for o in model.graph.output]
    ref_outputs = dict(zip(out_names, ref_sess.run(None, feeds)))
    inits = _initializers(model)
    result = {"model": request["model"], "archs": [], "nodes": [], "outputs": [], "errors": []}

    for arch in request["archs"]:
        emu.set_arch(arch)
        emu.reset_records()
        total = [0, time.perf_counter()]

        def tick(rec, total=total, arch=arch):
            total[0] += 1
            if progress:
                sys.stderr.write(f"\r[{arch}] kernels run on the PTX interpreter: {total[0]} launches, "
                                 f"{time.perf_counter() - total[1]:.0f}s ({rec.entry} of {rec.node or 'ptx'})   ")
                sys.stderr.flush()
        emu.progress = tick
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.register_custom_ops_library(get_library_path())
        so.log_severity_level = 3
        t0 = time.perf_counter()
        error = None
        try:
            sess = ort.InferenceSession(exposed.SerializeToString(), so, providers=cpu)
            names = [o.name for o in exposed.graph.output]
            got = dict(zip(names, sess.run(None, feeds)))
            del sess
        except Exception as e:  # noqa: BLE001 - reported, with the node the launcher names
            error, got = " ".join(str(e).split()), {}
        if progress:
            sys.stderr.write("\n")
        seconds = time.perf_counter() - t0
        result["archs"].append({"arch": arch, "seconds": round(seconds, 2), "launches": len(emu.records),
                                "error": error})
        if error:
            result["errors"].append(f"[{arch}] {error}")
        owner = _attribute(emu.load_order, fused, arch)
        by_node: dict = {}
        for rec in emu.records:
            by_node.setdefault(owner.get(rec.module, rec.node), []).append(rec)

        values = dict(inits)
        values.update(feeds)
        values.update(got)
        side = None
        if not error and not profiling:
            sbs, sfeeds, _ = _side_by_side(model, fused, values)
            side = ort.InferenceSession(sbs.SerializeToString(), plain_opts, providers=cpu).run(None, sfeeds)
            flat = [o.name for o in sbs.graph.output]
            side = dict(zip(flat, side))
        for k, node in enumerate(fused):
            recs = by_node.get(node.name, [])
            ptx = ""
            for rec in recs:
                lm = None
                for key_h, key in emu.load_order:
                    if key_h == rec.module:
                        lm = emu.registry.get(key)
                ptx += lm.ptx if lm else ""
            tin, tout = _plan_types(_plan(node))
            math = node_math(ptx, list(tout.values()) + list(tin.values()))
            row = {"arch": arch, "node": node.name, "pattern": _pattern(node), "math": math,
                   "kernels": sorted({r.entry for r in recs}), "launches": len(recs),
                   "seconds": round(sum(r.seconds for r in recs), 3),
                   "findings": [f for r in recs for f in r.findings][:20],
                   "n_findings": sum(len(r.findings) for r in recs),
                   "errors": [r.error for r in recs if r.error][:3], "outputs": []}
            if profiling:
                row["counters"] = [r.counters for r in recs]
                row["compulsory_bytes"] = int(sum(values[nm].nbytes for nm in list(node.input) + list(node.output)
                                                  if nm and nm in values and hasattr(values[nm], "nbytes")))
            if error and not row["errors"] and f"node '{node.name}'" in error:
                row["errors"].append(error)
            if side is not None:
                for j, nm in enumerate(node.output):
                    kern, ref = got.get(nm), side.get(f"n{k}_o{j}")
                    if kern is None or ref is None:
                        continue
                    tol = tolerance(math, ref.dtype, kind="node")
                    row["outputs"].append(dict(compare(kern, ref), name=nm, tol=tol))
            row["executed"] = bool(recs) and not row["errors"]
            if profiling:
                row["ok"] = row["executed"] and row["n_findings"] == 0
                result["nodes"].append(row)
                continue
            row["ok"] = (row["executed"] and row["n_findings"] == 0 and bool(row["outputs"])
                         and all(o["rel"] <= o["tol"] for o in row["outputs"]))
            result["nodes"].append(row)
        maths = {r["math"] for r in result["nodes"] if r["arch"] == arch}
        for nm in ([] if profiling else out_names):
            if nm not in got:
                continue
            ref = ref_outputs[nm]
            tol = max([tolerance(m, ref.dtype, kind="model") for m in maths] or [tolerance("exact", ref.dtype, "model")])
            c = compare(got[nm], ref)
            result["outputs"].append(dict(c, arch=arch, name=nm, tol=tol, ok=c["rel"] <= tol))
    return result


def _expected_loads(node, arch: str) -> list:
    """The digests the launcher loads for `node` from pack `arch`, in order: one module per distinct
    image index of its kernel lines, in file order (plus_ep/native/kernel.c, load_ctx)."""
    import hashlib

    from onnx import numpy_helper

    from ..kernels.wire.pack import parse as parse_pack
    blob = next((numpy_helper.to_array(a.t).tobytes() for a in node.attribute
                 if a.name == f"plus_images_{arch}"), None)
    if blob is None:
        return []
    digests = [hashlib.sha256(im.cubin).hexdigest() for im in parse_pack(blob)]
    seen = []
    for line in _plan(node).splitlines():
        t = line.split(" ")
        if t[0] == "kernel" and len(t) > 2 and int(t[2]) not in seen:
            seen.append(int(t[2]))
    return [digests[i] for i in seen if i < len(digests)]


def _attribute(load_order, fused, arch: str) -> dict:
    """Module handle -> node name. The launcher loads one node's modules back to back, on its first
    launch; the sequence of loaded cubin digests is matched against each node's expected sequence, the
    first unmatched node in graph order winning. Exact unless two nodes load identical kernels (then
    their launch records may be swapped between them; their outputs are still compared per node)."""
    expected = {n.name: _expected_loads(n, arch) for n in fused}
    owner, used, p = {}, set(), 0
    keys = [k for _, k in load_order]
    while p < len(load_order):
        for n in fused:
            seq = expected[n.name]
            if n.name not in used and seq and keys[p:p + len(seq)] == seq:
                for h, _ in load_order[p:p + len(seq)]:
                    owner[h] = n.name
                used.add(n.name)
                p += len(seq)
                break
        else:
            owner[load_order[p][0]] = ""
            p += 1
    return owner


def _pattern(node) -> str:
    p = _attr(node, "plus_pattern")
    if isinstance(p, bytes):
        return p.decode()
    if p:
        return str(p)
    parts = node.name.split("/")
    return parts[1] if len(parts) >= 3 and parts[0] == "plus_ep" else node.op_type


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        request = json.load(f)
    result = run(request)
    with open(argv[1], "w") as f:
        json.dump(result, f, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
