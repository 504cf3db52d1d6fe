"""`bash bench/lease/gpu_lease.sh --prepare`: build the carry folder `.gpu/` (git-ignored) the lease takes
to the GPU machine. Runs here, on the emulated CUDA driver (the plugin EP on an emulated GPU device).

    .gpu/models/<case>__<arch>/nodes.onnx      every fused node of the rewritten case side by side, each
                                               reading its own inputs; packs of one arch; NO function
                                               bodies: a session whose launcher is not active fails
         .../inputs.npz                        the inputs each node's kernels got in the whole model's run
         .../expected.npz                      each node's outputs computed by its kernels on the CPU PTX
                                               interpreter (emulated driver, checkers on), raw bits
         .../reference.npz                     each node's function body on those inputs in float64
                                               (onnx.reference), the accuracy reference
         .../meta.json                         case, arch, what it covers, per node: pattern, math,
                                               tolerance, kernels, the interpreter's error vs float64
    .gpu/cache/kernels/                        the kernel cache of BERT-base (fp16 and fp32, sm_90a) for
                                               the kernel-time and end-to-end steps
    .gpu/manifest.json                         what is carried, sizes, versions, notes

bfloat16 tensors are stored as their uint16 bits. Progress goes to stdout, one line per case.
"""
from __future__ import annotations

import pathlib
import shutil
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from plus_ep import progress

from bench.lease import env as lease_env
from bench.lease import carry_models

FLOATS = (T.FLOAT, T.FLOAT16, T.BFLOAT16, T.DOUBLE)
FUSED = "ai.plus_ep"


# ------------------------------------------------------------------------------------- values / bf16
def to_ortvalue(arr: np.ndarray, onnx_type: int):
    import onnxruntime as ort
    if onnx_type == T.BFLOAT16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(arr, np.uint16), T.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr))


def from_ortvalue(v) -> np.ndarray:
    """Host numpy of an OrtValue anywhere (device values through PlusEP's copy); bf16 as uint16 bits."""
    import ctypes

    import onnxruntime as ort
    if v.data_type() == "tensor(bfloat16)":
        host = ort.OrtValue.ortvalue_from_shape_and_type(v.shape(), T.BFLOAT16)
        ort.copy_tensors([v], [host], None)
        out = np.empty(v.shape(), np.uint16)
        ctypes.memmove(out.ctypes.data, host.data_ptr(), out.nbytes)
        return out
    if v.device_name().lower() == "cpu":
        return np.array(v.numpy(), copy=True)
    return lease_env.to_host(v)


def as_float(arr: np.ndarray, onnx_type: int) -> np.ndarray:
    """The values as float64 (bf16 bits widened)."""
    if onnx_type == T.BFLOAT16:
        return (arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return arr.astype(np.float64) if arr.dtype.kind == "f" else arr


def elem_types(model: onnx.ModelProto) -> dict:
    """name -> ONNX element type of every typed value (inputs, outputs, initializers, value_info)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.input) + list(g.output) + list(g.value_info)}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


# ------------------------------------------------------------------------------------------ models
def fused_nodes(model):
    return [n for n in model.graph.node if n.domain == FUSED]


def constants(model) -> dict:
    """name -> TensorProto of the initializers and of the Constant nodes' outputs."""
    out = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    t = onnx.TensorProto()
                    t.CopyFrom(a.t)
                    t.name = n.output[0]
                    out[n.output[0]] = t
    return out


def nodes_model(model, values: dict, types: dict) -> tuple[onnx.ModelProto, dict, list]:
    """Every fused node alone on its captured inputs (node k reads n<k>_i<j>, writes n<k>_o<j>),
    weights as initializers, no model-local functions. Returns (model, feeds, [(node, outputs)])."""
    inits = constants(model)
    nodes, g_in, g_out, g_init, feeds, layout = [], [], [], [], {}, []
    for k, node in enumerate(fused_nodes(model)):
        ins = []
        for j, nm in enumerate(node.input):
            if not nm:
                ins.append("")
                continue
            gi = f"n{k}_i{j}"
            ins.append(gi)
            if nm in inits:
                t = onnx.TensorProto()
                t.CopyFrom(inits[nm])
                t.name = gi
                g_init.append(t)
            else:
                arr = values[nm]
                feeds[gi] = arr
                g_in.append(helper.make_tensor_value_info(gi, types.get(nm, T.FLOAT), list(arr.shape)))
        outs = []
        for j, nm in enumerate(node.output):
            go = f"n{k}_o{j}"
            outs.append(go)
            g_out.append(helper.make_tensor_value_info(go, types.get(nm, T.FLOAT), None))
        n = onnx.NodeProto()
        n.CopyFrom(node)
        del n.input[:], n.output[:]
        n.input.extend(ins)
        n.output.extend(outs)
        nodes.append(n)
        layout.append((node, outs))
    g = helper.make_graph(nodes, "lease_nodes", g_in, g_out, g_init)
    m = helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    return m, feeds, layout


def _to_double(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every float element type of the graph and its functions made float64 (Casts, Constants, types)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)

    def fix_nodes(nodes):
        for n in nodes:
            for a in n.attribute:
                if n.op_type == "Cast" and a.name == "to" and a.i in FLOATS:
                    a.i = T.DOUBLE
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR and a.t.data_type in FLOATS:
                    a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
    fix_nodes(m.graph.node)
    for f in m.functions:
        fix_nodes(f.node)
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type in FLOATS:
            vi.type.tensor_type.elem_type = T.DOUBLE
    for i, t in enumerate(m.graph.initializer):
        if t.data_type in FLOATS:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float64), t.name))
    return m


def reference(model: onnx.ModelProto, node, inputs: list, in_types: list) -> list:
    """The node's function body in float64 (onnx.reference) on `inputs` (None = absent)."""
    from onnx.reference import ReferenceEvaluator
    fn = next(f for f in model.functions if f.domain == node.domain and f.name == node.op_type
              and getattr(f, "overload", "") == getattr(node, "overload", ""))
    n = onnx.NodeProto()
    n.CopyFrom(node)
    keep = set(fn.attribute) | {a.name for a in fn.attribute_proto}
    del n.attribute[:]
    n.attribute.extend(a for a in node.attribute if a.name in keep)
    names = [f"x{j}" if x is not None else "" for j, x in enumerate(inputs)]
    del n.input[:], n.output[:]
    n.input.extend(names)
    n.output.extend(f"y{j}" for j in range(len(node.output)))
    g_in = [helper.make_tensor_value_info(nm, t, list(x.shape)) for nm, t, x in zip(names, in_types, inputs) if nm]
    g_out = [helper.make_tensor_value_info(f"y{j}", T.UNDEFINED, None) for j in range(len(node.output))]
    m = helper.make_model(helper.make_graph([n], "ref", g_in, g_out), opset_imports=list(model.opset_import),
                          functions=[fn], ir_version=model.ir_version)
    m = _to_double(m)
    feeds = {nm: (as_float(x, t) if t in FLOATS else x) for nm, t, x in zip(names, in_types, inputs) if nm}
    return [np.asarray(y) for y in ReferenceEvaluator(m).run(None, feeds)]


def node_math(node, arch: str, dtypes) -> str:
    from plus_ep.kernels.wire.pack import parse as parse_pack
    from plus_ep.verification.tolerances import node_math as math_of
    ptx = ""
    for a in node.attribute:
        if a.name == f"plus_images_{arch}":
            ptx = "".join(im.ptx or "" for im in parse_pack(numpy_helper.to_array(a.t).tobytes()))
    return math_of(ptx, dtypes)


# ----------------------------------------------------------------------------------------- running
def run_model(path, feeds: dict, types: dict, options=None, runs=1, custom_ops=False, optimize=True,
              out_shapes=None):
    """Run a model through stock ORT + PlusEP on the GPU device with device-bound inputs and outputs.
    optimize=False: ORT_DISABLE_ALL (a carried nodes model runs as it is: ORT's ConstantSharing would turn
    a scalar constant into a [1] tensor). out_shapes {name: (shape, onnx type)}: outputs allocated in
    PlusEP's device memory up front (else ORT allocates them on the device named "cuda").
    Returns (outputs per run [{name: host array}], session)."""
    import onnxruntime as ort
    sess = lease_env.session(path, options, custom_ops=custom_ops,
                             level=None if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    io = sess.io_binding()
    keep = []
    for i in sess.get_inputs():
        v = lease_env.device_value_ort(to_ortvalue(feeds[i.name], types.get(i.name, T.FLOAT)))
        keep.append(v)
        io.bind_ortvalue_input(i.name, v)
    outs = []
    for _ in range(runs):
        io.clear_binding_outputs()
        values = []
        for o in sess.get_outputs():
            if out_shapes:
                shape, t = out_shapes[o.name]
                values.append(ort.OrtValue.ortvalue_from_shape_and_type(list(shape), t, "gpu", 0, lease_env.NVIDIA))
                io.bind_ortvalue_output(o.name, values[-1])
            else:
                io.bind_output(o.name, "cuda", 0)
        sess.run_with_iobinding(io)
        got = values or io.get_outputs()
        outs.append({o.name: from_ortvalue(v) for o, v in zip(sess.get_outputs(), got)})
    return outs, sess


# ----------------------------------------------------------------------------------------- prepare
def prepare_case(case, arch: str, root: pathlib.Path) -> dict:
    import plus_ep
    from plus_ep.verification.run import _exposed
    from plus_ep.verification.tolerances import compare, tolerance
    r = plus_ep.rewrite_detailed(case.model, archs=[arch], fp32_math=case.fp32_math)
    if r.kernels.failures:
        raise RuntimeError(f"kernels failed to build: {r.kernels.failures}")
    model = r.model
    fused = fused_nodes(model)
    if not fused:
        raise RuntimeError("nothing fused")
    lease_env.register(model)
    if lease_env.emulator() is not None:
        lease_env.emulator().reset_records()
    types = elem_types(model)
    exposed, _ = _exposed(model, fused)
    d = root / f"{case.name}__{arch}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    onnx.save(exposed, d / "exposed.onnx")
    feeds = dict(case.feeds)
    got, _ = run_model(d / "exposed.onnx", feeds, types)
    (d / "exposed.onnx").unlink()
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type != T.BFLOAT16}
    values.update(feeds)
    values.update(got[0])
    nm, nfeeds, layout = nodes_model(model, values, types)
    onnx.save(nm, d / "nodes.onnx")
    ntypes = elem_types(nm)
    outs, sess = run_model(d / "nodes.onnx", nfeeds, ntypes, custom_ops=True, optimize=False)
    on_plus = lease_env.on_plus(sess)
    feats = features(lease_env.emulator())     # while the session holds its modules
    del sess
    if len(on_plus) != len(layout):
        raise RuntimeError(f"PlusEP claimed {len(on_plus)} of {len(layout)} nodes of the carried model")
    expected = outs[0]
    refs, rows = {}, []
    inits = constants(model)
    for k, (node, onames) in enumerate(layout):
        ins, in_types = [], []
        for j, x in enumerate(node.input):
            if not x:
                ins.append(None), in_types.append(T.UNDEFINED)
                continue
            t = inits.get(x)
            if t is not None and t.data_type == T.BFLOAT16:
                arr = numpy_helper.to_array(t).view(np.uint16)
            else:
                arr = numpy_helper.to_array(t) if t is not None else values[x]
            ins.append(arr), in_types.append(types.get(x, T.FLOAT))
        ref = reference(model, node, ins, in_types)
        out_types = [types.get(o, T.FLOAT) for o in node.output]
        math = node_math(node, arch, in_types + out_types)
        outputs = []
        for j, (go, t) in enumerate(zip(onames, out_types)):
            refs[go] = ref[j]
            kern = as_float(expected[go], t)
            tol = tolerance(math, np.float16 if t == T.FLOAT16 else None, kind="node")
            c = compare(kern, ref[j])
            outputs.append({"name": go, "original": node.output[j], "onnx_type": t, "shape": list(expected[go].shape),
                            "tol": tol, "interpreter_vs_ref": {"rel": c["rel"], "max_abs": c["max_abs"]}})
        rows.append({"k": k, "node": node.name, "pattern": node.name.split("/")[1] if "/" in node.name else node.op_type,
                     "op_type": node.op_type, "math": math, "outputs": outputs})
    np.savez(d / "inputs.npz", **nfeeds)
    np.savez(d / "expected.npz", **expected)
    np.savez(d / "reference.npz", **refs)
    emu = lease_env.emulator()
    meta = {"case": case.name, "arch": arch, "covers": case.covers, "fp32_math": case.fp32_math,
            "input_types": {k: int(ntypes.get(k, T.FLOAT)) for k in nfeeds}, "nodes": rows,
            "kernels": sorted({rec.entry for rec in emu.records}) if emu else [], "features": feats}
    lease_env.write_json(d / "meta.json", meta)
    bad = [(r["node"], o["name"], o["interpreter_vs_ref"]["rel"], o["tol"]) for r in rows for o in r["outputs"]
           if not o["interpreter_vs_ref"]["rel"] <= o["tol"]]
    if bad:
        raise RuntimeError(f"the PTX interpreter's outputs miss the float64 reference: {bad}")
    return meta


def features(emu) -> list:
    """What the kernels that ran executed, read off their PTX: wgmma, mma.sync, clusters, element types."""
    if emu is None:
        return []
    ran = {r.module for r in emu.records}
    ptx = "".join(emu._modules[h].module.text if h in emu._modules else
                  emu.registry[key].ptx if key in emu.registry else "" for h, key in emu.load_order if h in ran)
    checks = {"wgmma": "wgmma.mma_async", "mma.sync": "mma.sync", "cluster": "%cluster_ctarank",
              "dsmem": "shared::cluster", "tf32": ".tf32", "bf16": ".bf16", "f16": ".f16", "cp.async": "cp.async"}
    found = [k for k, v in checks.items() if v in ptx]
    if "mma.sync" not in found and "wgmma" not in found:
        found.append("simt")
    return found


def kernel_cache(root: pathlib.Path, short: bool) -> dict:
    """The kernels of the BERTs the kernel-time and end-to-end steps build (bench/lease_bert.plan: one
    layer has every kernel of twelve), into the carried cache: BERT-base fp16 and fp32 for the GPU, the
    rehearsal's small BERTs for here."""
    import plus_ep
    from plus_ep.kernels.compile.cache import KernelCache

    from bench.lease import bert as lease_bert
    cache = KernelCache(root / "cache" / "kernels")
    t0 = time.perf_counter()
    counts = {}
    plans = [lease_bert.plan(False, True)] if short else [lease_bert.plan(False, False), lease_bert.plan(True, False)]
    for p in plans:
        for dtype in p["dtypes"]:
            m = lease_bert.onnx_model(layers=1, dtype=dtype, size=p["size"])
            r = plus_ep.rewrite_detailed(m, archs=["sm_90a"], cache=cache)
            key = f"hidden{p['size']['hidden']}-{dtype}"
            counts[key] = {"fused": len(fused_nodes(r.model)), "compiled": r.kernels.compiled,
                           "failures": len(r.kernels.failures)}
            lease_env.say(f"prepare: BERT {key} kernels in the carried cache ({counts[key]})")
    return {"seconds": round(time.perf_counter() - t0, 1), **counts}


def folder_bytes(p: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def main(carry: str, short: bool = False) -> int:
    root = pathlib.Path(carry)
    if root.exists():
        shutil.rmtree(root)
    (root / "models").mkdir(parents=True)
    t0 = time.perf_counter()
    cases, notes = carry_models.cases(short)
    done, failed = [], []
    # a bar over the carried models on a terminal (plus_ep/progress.py); the per-model lines print above it
    with progress.bar("prepare: carried models", total=sum(len(c.archs) for c in cases), unit="models") as bar:
        for case in cases:
            for arch in case.archs:
                t = time.perf_counter()
                bar.update(0, note=f"{case.name} [{arch}]")
                try:
                    meta = prepare_case(case, arch, root / "models")
                    done.append(f"{case.name}__{arch}")
                    bar.write(lease_env.stamp(f"prepare: {case.name} [{arch}] {len(meta['nodes'])} nodes, kernels "
                                              f"{','.join(meta['kernels'])} [{' '.join(meta['features'])}] "
                                              f"({time.perf_counter() - t:.0f}s)"))
                except Exception as e:  # noqa: BLE001 - every case is reported, the manifest says which failed
                    failed.append(f"{case.name}__{arch}: {type(e).__name__}: {e}"[:600])
                    bar.write(lease_env.stamp(f"prepare: {case.name} [{arch}] FAILED: {failed[-1]}"))
                bar.update()
    lease_env.say("prepare: the carried kernel cache (BERT layers) ...")
    cache = kernel_cache(root, short)
    import onnxruntime as ort
    import plus_ep
    manifest = {"schema": "plus_ep.lease.carry/1", "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                "plus_ep": plus_ep.__version__, "source_digest": _digest(), "onnxruntime": ort.__version__,
                "onnx": onnx.__version__, "short": short, "models": done, "failed": failed, "notes": notes,
                "kernel_cache": cache, "bytes": folder_bytes(root), "seconds": round(time.perf_counter() - t0, 1)}
    lease_env.write_json(root / "manifest.json", manifest)
    lease_env.say(f"prepare: {len(done)} carried models, {len(failed)} failed, {manifest['bytes'] / 2**20:.1f} MiB in "
                  f"{root} ({manifest['seconds']:.0f}s)")
    return 1 if failed or not done else 0


def _digest() -> str:
    from plus_ep import config
    return config.source_digest()[:16]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--short" in sys.argv))
