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
from contextlib import ExitStack

import numpy as np
import onnx
from onnx import helper

from .. import progress as _progress
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


def _dedup_key(node, values: dict) -> str:
    """Nodes with this key run the same kernels on the same synthetic inputs (the layers of a model)."""
    import hashlib
    h = hashlib.sha256()
    h.update(f"{node.domain}:{node.op_type}:{node.overload}".encode())
    from ..kernels.wire.plan import parse
    plan = parse(_plan(node))
    plan.node = ""                                  # the layers' plans differ by the node name only
    h.update(plan.text().encode())
    for a in node.attribute:
        if a.name.startswith("plus_images_"):
            h.update(a.name.encode() + a.t.raw_data)
    for nm in node.input:
        arr = values.get(nm) if nm else None
        if arr is None:
            h.update(b"-")
            continue
        arr = np.asarray(arr)
        h.update(f"{arr.dtype}{arr.shape}".encode())
        if arr.dtype.kind != "f" or arr.size <= 1:
            h.update(arr.tobytes())
    return h.hexdigest()


def _body(model, node):
    for f in model.functions:
        if f.domain == node.domain and f.name == node.op_type and f.overload == node.overload:
            return f
    return None


def _node_math(node, arch: str) -> str:
    """The node's math mode from its pack's PTX for `arch` and its plan's element types."""
    from onnx import numpy_helper

    from ..kernels.wire.pack import parse as parse_pack
    blob = next((numpy_helper.to_array(a.t).tobytes() for a in node.attribute if a.name == f"plus_images_{arch}"),
                None)
    ptx = "".join(im.ptx or "" for im in parse_pack(blob)) if blob is not None else ""
    tin, tout = _plan_types(_plan(node))
    return node_math(ptx, list(tout.values()) + list(tin.values()))


def _check_outputs(body, node, ins: list, outs: list, math: str, label: str, flat_ref=None) -> list:
    """Each output of one node run against its function body in float64 with per-element bounds
    (plus_ep/verification/bounds.py); flat tolerance against `flat_ref` (ORT fp32) when the body has an op
    without an error model."""
    from .bounds import Unsupported, compare as bounded_compare, evaluate
    rows = []
    try:
        if body is None:
            raise Unsupported("no function body")
        ev = evaluate(body, ins, math=math)
        for j, (nm, got) in enumerate(zip(node.output, outs)):
            if got is None:
                continue
            c = bounded_compare(got, ev.outputs[j])
            rows.append(dict(c, name=nm, run=label, bound="element"))
        return rows
    except Unsupported as e:
        why = str(e)
    for j, (nm, got) in enumerate(zip(node.output, outs)):
        ref = None if flat_ref is None else flat_ref[j]
        if got is None or ref is None:
            continue
        tol = tolerance(math, ref.dtype, kind="node")
        c = compare(got, ref)
        rows.append(dict(c, name=nm, run=label, bound=f"flat ({why})", tol=tol, ok=bool(c["rel"] <= tol)))
    return rows


def _run_plain(model_bytes: bytes, feeds: dict, names=None) -> dict:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    names = names or [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def _run_launcher(model_bytes: bytes, feeds: dict) -> tuple[dict, str | None]:
    import onnxruntime as ort

    from ..library import get_library_path
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.register_custom_ops_library(get_library_path())
    # The kernels run on the CPU PTX interpreter only (no device code executes), so verify checks a
    # model whether or not this installation trusts its kernels (plus_ep/trust.py): an explicit
    # per-session opt-out of the trust check.
    so.add_session_config_entry("plus_ep.trust", "any")
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        got = dict(zip(names, sess.run(None, feeds)))
        del sess
        return got, None
    except Exception as e:  # noqa: BLE001 - reported, with the node the launcher names
        return {}, " ".join(str(e).split())


def _records_by_node(emu, nodes, arch: str) -> dict:
    owner = _attribute(emu.load_order, nodes, arch)
    by_node: dict = {}
    for rec in emu.records:
        by_node.setdefault(owner.get(rec.module, rec.node), []).append(rec)
    return by_node


def _shape_label(kind: str, feeds: dict) -> str:
    dims = ", ".join(f"{k}{list(np.shape(v))}" for k, v in feeds.items())
    return f"{kind} {dims}"


def _stress_shapes(model, exposed_bytes: bytes, fused, archs, given: dict, seed: int) -> tuple[list, dict]:
    """Per fused node, the cheapest shape whose routes span every tile they can with a ragged remainder
    (plus_ep/verification/shapes.py): the given feeds (the model run's) first, then batch 2 at each seq of
    shapes.SEQ_CANDIDATES the model accepts (its position table may end earlier); a node keeps the first
    shape that spans everything the largest one does (dims set by the weights, or by batch alone, span at
    no seq and are only reported). Returns ([(feeds, [node names])], info)."""
    from ..feeds import sample_inputs
    from . import shapes as vs
    cands: list = [given]
    missed_at: list = []
    fixed_missed: set = set()

    def grow() -> bool:
        """Evaluate the next candidate; False when there is none the model accepts."""
        i = len(cands)
        if i > len(vs.SEQ_CANDIDATES):
            return False
        feeds = sample_inputs(model, batch=vs.BATCH_LARGE, seq=vs.SEQ_CANDIDATES[i - 1], seed=seed + i)
        try:
            _measure(feeds)
        except Exception:  # noqa: BLE001 - a shape the model cannot run (beyond its positions): stop here
            return False
        cands.append(feeds)
        return True

    def _measure(feeds: dict) -> None:
        values = _run_plain(exposed_bytes, feeds)
        values.update(feeds)
        per = {}
        for node in fused:
            shapes = [np.shape(values[nm]) if nm in values else None for nm in node.input]
            head = next((sh[-1] for sh in shapes if sh is not None and len(sh) == 4), None)
            miss = {}
            for arch in archs:
                for what, tile, extent in vs.tiles_of(_plan(node), arch, shapes, head, _node_math(node, arch)):
                    if vs.spanned(tile, extent):
                        continue
                    if what.endswith("(fixed)"):
                        fixed_missed.add(f"{what} tile {tile} over {extent}")
                    else:
                        miss[(arch, what, tile)] = extent
            per[node.name] = miss
        missed_at.append(per)
    _measure(given)
    chosen, not_spanned = {}, set()
    for node in fused:
        k = 0
        while missed_at[k][node.name] and (k + 1 < len(cands) or grow()):
            k += 1
        if missed_at[k][node.name]:    # never all spanned: the first shape spanning what the largest does
            final = set(missed_at[-1][node.name])
            k = next(i for i in range(len(cands)) if set(missed_at[i][node.name]) <= final)
            not_spanned |= {f"{w} tile {t} over {e}" if t > 1 else f"{w} (is {e})"
                            for (_, w, t), e in missed_at[k][node.name].items()}
        chosen[node.name] = k
    groups = [(cands[k], [n.name for n in fused if chosen[n.name] == k]) for k in sorted(set(chosen.values()))]
    info = {"shapes": [{"label": _shape_label("", f).strip(), "nodes": len(nm)} for f, nm in groups],
            "not_spanned": sorted(not_spanned | fixed_missed)[:20], "largest_seq": (
                vs.SEQ_CANDIDATES[len(cands) - 2] if len(cands) > 1 else None)}
    return groups, info


def run(request: dict) -> dict:
    """Run a rewritten model's kernels on the emulated driver per arch and check every fused node (the
    verification child's job; `request` as plus_ep/verification/check.py writes it). E.g.
    run({"model": "m.onnx", "inputs": "in.npz", "archs": ["sm_80"]})["nodes"][0]["ok"]."""
    from .emulator import TieError

    model = onnx.load(request["model"])
    feeds = {k: v for k, v in np.load(request["inputs"]).items()}
    fused = [n for n in model.graph.node if n.domain == FUSED_DOMAIN]
    result = {"model": request["model"], "archs": [], "nodes": [], "outputs": [], "errors": [], "runs": []}
    emu = Emulator.get()
    try:
        emu.register_model(model, archs=request["archs"], ties=request.get("ties", True))
    except TieError as e:
        result["errors"].append(str(e))
        result["tie_errors"] = e.problems
        return result
    emu.fail_on_findings = False          # record findings per node instead of failing the run
    profiling = bool(request.get("profile"))
    # verify runs every CTA (outputs are compared); a profile may sample CTAs (outputs then partial)
    emu.sample_ctas = request.get("sample_ctas") if profiling else None
    progress = request.get("progress", "off")     # plus_ep/progress.py: "bar", "lines" or "off"
    seed = int(request.get("seed", 0))

    exposed, _ = _exposed(model, fused)
    exposed_bytes = exposed.SerializeToString()
    out_names = [o.name for o in model.graph.output]
    try:
        ref_outputs = {} if profiling else _run_plain(model.SerializeToString(), feeds, out_names)
    except Exception as e:  # noqa: BLE001 - the inputs do not fit the model: said in one line, not a crash
        result["errors"].append(f"the model does not run on these inputs on ONNX Runtime CPU (without its kernels): "
                                f"{' '.join(str(e).split())[:400]}; pass inputs that fit it (--inputs)")
        result["inputs_refused"] = True
        return result
    inits = _initializers(model)
    bodies = {n.name: _body(model, n) for n in fused}
    stress_sets = ([] if profiling or not request.get("stress", True) else
                   _stress_sets(request, model, exposed_bytes, fused, feeds, inits, bodies, seed, result))

    saved = {}
    for arch in request["archs"]:
        emu.set_arch(arch)
        emu.reset_records()
        bars = ExitStack()        # closed after this arch's runs
        pbar = bars.enter_context(_progress.bar(f"[{arch}] kernels on the PTX interpreter", unit="launches",
                                                enabled=progress))

        def tick(rec, pbar=pbar):
            pbar.update(note=f"{rec.entry} of {rec.node or 'ptx'}")
        emu.progress = tick
        t0 = time.perf_counter()
        got, error = _run_launcher(exposed_bytes, feeds)
        launches = len(emu.records)
        timing = {"model_run": round(time.perf_counter() - t0, 2)}
        if error:
            result["errors"].append(f"[{arch}] {error}")
        values = dict(inits)
        values.update(feeds)
        values.update(got)
        maths = {n.name: _node_math(n, arch) for n in fused}
        rows = _model_rows(model, fused, _records_by_node(emu, fused, arch), values, got, error, maths, bodies,
                           arch, profiling)
        timing["model_checks"] = round(time.perf_counter() - t0 - timing["model_run"], 2)
        for st in ([] if error else stress_sets):
            t1 = time.perf_counter()
            launches += _stress_rows(emu, model, st, rows, maths, bodies, arch, result)
            timing[st["label"]] = round(time.perf_counter() - t1, 2)
        bars.close()
        result["archs"].append({"arch": arch, "seconds": round(time.perf_counter() - t0, 2), "launches": launches,
                                "error": error, "timing": timing})
        _finish_arch(result, fused, rows, maths, got, ref_outputs, out_names, arch, profiling)
        if request.get("save_outputs") and not error:    # the kernels' model outputs, "<arch>/<output name>"
            saved.update({f"{arch}/{nm}": got[nm] for nm in out_names if nm in got})
    if request.get("save_outputs"):
        np.savez(request["save_outputs"], **saved)
    return result


def _stress_sets(request, model, exposed_bytes, fused, feeds, inits, bodies, seed, result) -> list:
    """The stress runs: every distinct fused node on synthetic inputs, at the given shape and (by default)
    at one spanning every tile; shapes bound by a plain ORT run of the model (no kernels). Each set:
    {"label", "reps" (one node per group of identical nodes), "groups", "inputs" (per rep)}."""
    from .stress import stress_inputs
    if request.get("auto_shapes"):
        # each node where every tile it has is spanned; the model run covers the small shape too
        groups_by_shape, result["tiles"] = _stress_shapes(model, exposed_bytes, fused, request["archs"], feeds, seed)
    else:
        groups_by_shape = [(feeds, [n.name for n in fused])]
    sets = []
    for f, members in groups_by_shape:
        values = dict(inits)
        values.update(_run_plain(exposed_bytes, f))
        values.update(f)
        groups: dict = {}
        for n in fused:
            if n.name in members:
                groups.setdefault(_dedup_key(n, values), []).append(n)
        reps = [g[0] for g in groups.values()]
        synth = {n.name: stress_inputs(n, bodies[n.name], [values.get(nm) if nm else None for nm in n.input],
                                       seed=seed + 7 * k) for k, n in enumerate(reps)}
        label = "stress " + ", ".join(f"{k}{list(np.shape(v))}" for k, v in f.items())
        sets.append({"label": label, "reps": reps, "groups": list(groups.values()), "inputs": synth})
        result["runs"].append({"label": label, "distinct_nodes": len(reps), "fused_nodes": len(members)})
    return sets


def _model_rows(model, fused, by_node, values, got, error, maths, bodies, arch, profiling) -> dict:
    """One row per fused node from the whole model's run on this arch: its launches, findings, errors and
    (verify) its outputs checked against its body run on the same inputs."""
    flat = None
    rows = {}
    for k, node in enumerate(fused):
        recs = by_node.get(node.name, [])
        row = {"arch": arch, "node": node.name, "pattern": _pattern(node), "math": maths[node.name],
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
        row["executed"] = bool(recs) and not row["errors"]
        if not profiling and not error:
            ins = [values.get(nm) if nm else None for nm in node.input]
            outs = [got.get(nm) for nm in node.output]
            checks = _check_outputs(bodies[node.name], node, ins, outs, maths[node.name], "model")
            if any(c["bound"].startswith("flat") for c in checks) or (not checks and bodies[node.name] is None):
                if flat is None:
                    sbs, sfeeds, _ = _side_by_side(model, fused, values)
                    flat = _run_plain(sbs.SerializeToString(), sfeeds)
                refs = [flat.get(f"n{k}_o{j}") for j in range(len(node.output))]
                checks = _check_outputs(None, node, ins, outs, maths[node.name], "model", refs)
            row["outputs"] += checks
        rows[node.name] = row
    return rows


def _stress_rows(emu, model, st, rows, maths, bodies, arch, result) -> int:
    """Run one stress set (its distinct nodes side by side) and add its checks to every node of each group;
    returns the launches it made."""
    emu.reset_records()
    sbs, sfeeds, _ = _stress_model(model, st)
    sgot, serr = _run_launcher(sbs.SerializeToString(), sfeeds)
    srecs = _records_by_node(emu, st["reps"], arch)
    flat_s = None
    for k, (rep, group) in enumerate(zip(st["reps"], st["groups"])):
        recs = srecs.get(rep.name, [])
        outs = [sgot.get(f"n{k}_o{j}") for j in range(len(rep.output))]
        ins = st["inputs"][rep.name]
        errs = [r.error for r in recs if r.error]
        if serr and not errs and f"node '{rep.name}'" in serr:
            errs.append(serr)
        checks = [] if serr else _check_outputs(bodies[rep.name], rep, ins, outs, maths[rep.name], st["label"])
        if any(c["bound"].startswith("flat") for c in checks):
            if flat_s is None:
                flat_s = _run_plain(sbs.SerializeToString(), sfeeds)
            refs = [flat_s.get(f"n{k}_o{j}") for j in range(len(rep.output))]
            checks = _check_outputs(None, rep, ins, outs, maths[rep.name], st["label"], refs)
        for node in group:
            row = rows[node.name]
            for c in checks:
                row["outputs"].append(dict(c, shared_with=rep.name) if node is not rep else c)
            row["errors"] += errs
            row["findings"] = (row["findings"] + [f for r in recs for f in r.findings])[:20]
            row["n_findings"] += sum(len(r.findings) for r in recs)
            row["launches"] += len(recs) if node is rep else 0
            if not recs:
                row["errors"].append(f"{st['label']}: the node's kernels did not run")
            row["executed"] = row["executed"] and bool(recs) and not row["errors"]
    if serr and not any(rows[n.name]["errors"] for n in st["reps"]):
        result["errors"].append(f"[{arch}] {st['label']}: {serr}")
    return len(emu.records)


def _finish_arch(result, fused, rows, maths, got, ref_outputs, out_names, arch, profiling) -> None:
    """Each node's verdict on this arch, and the model's outputs against ONNX Runtime CPU's."""
    for node in fused:
        row = rows[node.name]
        if profiling:
            row["ok"] = row["executed"] and row["n_findings"] == 0
        else:
            row["ok"] = (row["executed"] and row["n_findings"] == 0 and bool(row["outputs"])
                         and all(o["ok"] for o in row["outputs"]))
        result["nodes"].append(row)
    arch_maths = set(maths.values())
    for nm in ([] if profiling else out_names):
        if nm not in got:
            continue
        ref = ref_outputs[nm]
        tol = max([tolerance(m, ref.dtype, kind="model") for m in arch_maths]
                  or [tolerance("exact", ref.dtype, "model")])
        c = compare(got[nm], ref)
        result["outputs"].append(dict(c, arch=arch, name=nm, tol=tol, ok=c["rel"] <= tol))


def _stress_model(model, st) -> tuple:
    """The distinct nodes side by side on their synthetic inputs: node k reads n<k>_i<j>, writes n<k>_o<j>."""
    values, rename = {}, []
    for k, rep in enumerate(st["reps"]):
        for j, (nm, arr) in enumerate(zip(rep.input, st["inputs"][rep.name])):
            if nm and arr is not None:
                values[f"s{k}_{j}"] = arr
        rename.append(rep)
    # _side_by_side reads values by the node's own input names: give it renamed copies
    nodes = []
    for k, rep in enumerate(st["reps"]):
        n = onnx.NodeProto()
        n.CopyFrom(rep)
        del n.input[:]
        n.input.extend(f"s{k}_{j}" if nm else "" for j, nm in enumerate(rep.input))
        nodes.append(n)
    return _side_by_side(model, nodes, values)


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
    from ..kernels.wire.plan import parse
    seen = []
    for launch in (ln for route in parse(_plan(node)).routes for ln in route.launches):
        if launch.image not in seen:
            seen.append(launch.image)
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
