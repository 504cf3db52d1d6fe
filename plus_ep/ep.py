"""PlusEP as an ONNX Runtime plugin execution provider (ONNX Runtime >= 1.25).

    import plus_ep                      # registers the EP library and the planner, once per process
    import onnxruntime as ort
    sess = ort.InferenceSession("model.onnx", providers=["PlusEP", "CUDAExecutionProvider", "CPUExecutionProvider"])

`import plus_ep` calls `onnxruntime.register_execution_provider_library("PlusEP", <launcher library>)`
(idempotent) and installs the Python rewriter as the EP's *planner*: when the EP's GetCapability sees a
graph without `ai.plus_ep::Fused` nodes that was loaded from a file, it calls back here with the model
path; the planner rewrites the model as ONNX Runtime hands it to GetCapability (after its basic
optimizations, `ort_basic_graph`; rewrite and kernels cached on disk, `plus_ep.model_cache.rewritten_model`)
and hands the EP each fused node's original nodes, plan and image packs, which the EP claims and compiles.
In a process that runs the emulated CUDA driver (`plus_ep.verification.emulator.Emulator`), the planner also hands
the emulator those packs, so their cubins resolve to the PTX the interpreter runs.
Models loaded from bytes cannot be planned (the EP sees no path): they run unfused, with one warning
(`plus_ep.InferenceSession` rewrites bytes itself). Processes without Python have no planner: there the
EP runs rewritten models (`plus-ep rewrite`) only.

Set PLUS_EP_REGISTER=0 to keep `import plus_ep` from registering anything.
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import threading
import time
import warnings
from contextlib import contextmanager

from . import options, ortlog, progress
from .options import NAME

log = logging.getLogger("plus_ep")

_lock = threading.Lock()
_state: dict = {"path": None, "lib": None, "planner": None, "option_check": None}
_memo: dict = {}          # (path, mtime, size, options) -> planned groups, for the process

_PLANNER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
_OPTION_CHECK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)


def register() -> str:
    """Register the PlusEP library with ONNX Runtime under "PlusEP" and install the planner.

    Idempotent (also when the library was registered by other code in this process). Returns the
    library path. Raises RuntimeError with one line naming the fix when the host ONNX Runtime cannot
    host it (`plus_ep.library.host_problem`: older than 1.25, where plugin EPs cannot be named in
    `providers`; two ONNX Runtime distributions installed into one folder)."""
    import onnxruntime as ort
    with _lock:
        if _state["path"]:
            return _state["path"]
        from .library import get_library_path, host_problem
        problem = host_problem(ort)
        if problem:
            raise RuntimeError(problem)
        path = get_library_path()
        if NAME not in ort.get_available_providers():
            lib = ctypes.CDLL(path)        # the object ORT loads next: this registration says "no GPU" at INFO
            quiet = getattr(lib, "PlusEP_SetQuietRegistration", None)
            if quiet is not None:
                quiet.argtypes = [ctypes.c_int]
                quiet(1)
            try:
                ort.register_execution_provider_library(NAME, path)
            except Exception as e:  # noqa: BLE001  (ORT raises its own Fail type)
                if "already registered" not in str(e):
                    raise
            finally:
                if quiet is not None:
                    quiet(0)
        _install_planner(path)
        _state["path"] = path
        return path


def register_on_import() -> None:
    """What `import plus_ep` does: register unless PLUS_EP_REGISTER=0; never raise: a host ONNX Runtime
    that cannot host PlusEP is one warning line naming the fix, and nothing is registered. Without any
    ONNX Runtime (an optional dependency: rewriting needs none) there is nothing to register into."""
    from . import config          # the owner of every PLUS_EP_* variable
    if config.get("PLUS_EP_REGISTER") == "0":
        return
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return
    try:
        register()
    except FileNotFoundError as e:      # a source checkout without the built library
        log.info("PlusEP: not registered with ONNX Runtime: %s", e)
    except Exception as e:  # noqa: BLE001
        warnings.warn(str(e) if str(e).startswith("PlusEP") else f"PlusEP: not registered with ONNX Runtime: {e}",
                      RuntimeWarning, stacklevel=3)


def no_device_reason() -> str:
    """Why PlusEP offers no device in this process ("no usable NVIDIA GPU (...)"), "" when it offers some."""
    register()
    lib = _state["lib"]
    if lib is None or not hasattr(lib, "PlusEP_NoDeviceReason"):
        return ""
    lib.PlusEP_NoDeviceReason.restype = ctypes.c_char_p
    return (lib.PlusEP_NoDeviceReason() or b"").decode(errors="replace")


def get_ep_devices() -> list:
    """PlusEP's `onnxruntime.OrtEpDevice`s (registering first): one per NVIDIA GPU PlusEP can use (or the
    emulated / stand-in driver's device), none without one. For `SessionOptions.add_provider_for_devices`
    and ModelCompiler; `ep_metadata` holds plus_ep.mode, plus_ep.device_name, plus_ep.compute_capability,
    plus_ep.memory_bytes, plus_ep.cuda_ordinal and ORT's "version" (PlusEP's)."""
    import onnxruntime as ort
    register()
    return [d for d in ort.get_ep_devices() if d.ep_name == NAME]


def devices() -> list[dict]:
    """PlusEP's devices as ONNX Runtime lists them (none without a usable GPU): mode ("gpu", "staging":
    the emulated or stand-in driver through host staging, "inert": PLUS_EP_DISABLE on a GPU), CUDA
    ordinal, device name, compute capability, memory in bytes, PlusEP's version and, for an inert
    device, the reason."""
    import onnxruntime as ort
    out = []
    for d in ort.get_ep_devices():
        if d.ep_name == NAME:
            m = dict(d.ep_metadata)
            out.append({"mode": m.get("plus_ep.mode"), "ordinal": m.get("plus_ep.cuda_ordinal"),
                        "name": m.get("plus_ep.device_name"), "compute_capability": m.get("plus_ep.compute_capability"),
                        "memory_bytes": int(m["plus_ep.memory_bytes"]) if m.get("plus_ep.memory_bytes") else None,
                        "version": m.get("version"), "reason": m.get("plus_ep.reason"), "device": d})
    return out


# ------------------------------------------------------------------------------------------ planner


def plan_groups(path: str, opts: dict) -> list[dict]:
    """The node groups PlusEP should claim in the model at `path`: one per Fused node of its rewrite,
    with the original nodes it replaces (by first output name), its inputs and outputs in plan order,
    its plan and its image packs (arch -> bytes)."""
    st = os.stat(path)
    arch = options.arch_for(opts, opts.get("cc"))     # the `arch` option, else the device's (ep.c sends "cc")
    if arch is None:
        raise ValueError("PlusEP planner: neither an `arch` option nor the device's compute capability")
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size, arch, options.disabled(opts),
           options.fp32_math(opts), opts.get("cache_dir", ""))
    if key in _memo:
        return _memo[key]
    import onnx
    from .graph_rewrites.fuse import is_fused
    from .rewrite import load_model
    from .model_cache import rewritten_model
    original = load_model(path)
    if any(is_fused(n) for n in original.graph.node):
        _memo[key] = []
        return []       # already rewritten: the EP claims its Fused nodes itself
    start = time.perf_counter()
    with _planner_progress(path, arch):
        with progress.task("PlusEP planner: ONNX Runtime's basic optimizations"):
            try:
                graph = ort_basic_graph(path)
            except Exception as e:  # noqa: BLE001 - plan on the file as it is; ORT may then change some groups
                log.warning("PlusEP planner: could not apply ONNX Runtime's basic optimizations to %s (%s); "
                            "planning on the file as it is", path, e)
                graph = original
        ropts = {k: opts[k] for k in ("cache_dir", "disable", "fp32_math") if opts.get(k)}
        # shape_reads off: every group must be convex in the graph ORT partitions, where each Shape still
        # reads its copy (partition() below leaves a group that is not with the next provider)
        rewritten = onnx.load_model_from_string(rewritten_model(graph.SerializeToString(), arch, ropts,
                                                                shape_reads=False))
        with progress.task("PlusEP planner: partitioning"):
            groups = partition(graph, rewritten)
            if graph is not original:
                _add_original_names(groups, graph, original)
        if options.verify(opts):
            _verify_rewrite(original.SerializeToString(), rewritten.SerializeToString(), path)
    ortlog.emit(ortlog.INFO, f"PlusEP planner: {path} -> {len(groups)} node groups for {arch} in "
                             f"{time.perf_counter() - start:.1f}s")
    _memo[key] = groups
    return groups


LONG_SECONDS = 5.0      # a planner step longer than this gives one line at the default severity


@contextmanager
def _planner_progress(path: str, arch: str):
    """The planner's progress (plus_ep/progress.py's steps: basic optimizations, rendering and compiling
    kernels of N, partitioning): bars on a terminal; elsewhere lines through ORT's logger at INFO
    (plus_ep/ortlog.py), so the default severity shows only one WARNING line, once the rewrite has taken
    LONG_SECONDS; nothing at all from severity 3 (error) up."""
    quiet = ortlog.severity() >= ortlog.ERROR
    timer = None
    if not quiet and progress.resolve() != "bar" and not ortlog.shows(ortlog.INFO):
        timer = ortlog.later(LONG_SECONDS, ortlog.WARNING,
                             f"PlusEP planner: rewriting {path} for {arch} inside the session (kernels are "
                             "compiled once and cached; log_severity_level=1 shows its progress)")
    try:
        with progress.routed(None if quiet else (lambda line: ortlog.emit(ortlog.INFO, line if line.startswith("PlusEP") else f"PlusEP planner: {line}"))):
            yield
    finally:
        if timer is not None:
            timer.cancel()


def planned() -> dict[str, list[str]]:
    """What the planner planned in this process: model path -> the fused node name of each group."""
    out: dict[str, list[str]] = {}
    for key, groups in list(_memo.items()):
        out.setdefault(key[0], []).extend(g["node"] for g in groups)
    return out


def partition(original, rewritten) -> list[dict]:
    """The groups of `original`'s nodes PlusEP claims, computed by `rewritten` (its rewrite; both graphs as
    ONNX Runtime holds them): the Fused nodes with plans, joined where a contrib op's expansion spans
    several (an Attention's Q/K/V projections and its attention) through the tensors the expansion made,
    with the nodes of such an expansion no kernel holds (shape computations: host parts ONNX Runtime runs
    on the CPU inside the compiled node) and the constants it made. A group: its node name, members (each
    original node's first output), inputs and outputs (the members' boundary), parts in order (kernel:
    plan, packs, plan-order inputs and outputs; host: an ONNX model) and constants (name -> TensorProto).

    A set of Fused nodes is not claimed when it writes or reads a tensor of an expansion that something
    outside it produces or reads, or when it is not the exact computation of its original nodes (ORT
    would see other boundary values): those nodes stay with the next provider."""
    from .graph_rewrites.fuse import is_fused
    from .graph_rewrites.index import GraphIndex
    if any(is_fused(n) for n in original.graph.node):
        return []       # already rewritten: the EP claims its Fused nodes itself
    index = GraphIndex(original.graph)
    nodes, producer = index.nodes, index.producer
    originals = set(producer) | {i.name for i in original.graph.input} | {t.name for t in original.graph.initializer}
    ridx = GraphIndex(rewritten.graph)
    rnodes = ridx.nodes
    made = {t.name: t for t in rewritten.graph.initializer if t.name not in originals}   # an expansion's constants
    has_plan = {p for p, n in enumerate(rnodes) if is_fused(n) and any(a.name == "plus_plan" for a in n.attribute)}
    inner = {p for p, n in enumerate(rnodes) if p not in has_plan and any(o and o not in originals for o in n.output)}
    parent = {p: p for p in has_plan | inner}

    def root(p):
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p
    tainted: set[int] = set()
    for t, q in ridx.producer.items():              # join what an expansion's own tensors connect
        if t in originals:
            continue
        for u in ridx.consumers.get(t, ()):
            if q in parent and u in parent:
                parent[root(q)] = root(u)
            else:                                   # read by (or made by) a node outside any group
                tainted.update(x for x in (q, u) if x in parent)
        if t in ridx.graph_outputs and q in parent:
            tainted.add(q)
    bad = {root(p) for p in tainted}

    def analyse(comp):
        """(inputs, outputs, members) of a set of rewritten nodes, or a reason it cannot be claimed."""
        ins, outs = ridx.boundary(comp)
        ins = [t for t in ins if t not in made]
        if not set(ins) <= originals or not set(outs) <= originals:
            return "reads or writes values the model does not name"
        boundary = set(ins)
        members, stack = set(), [producer[o] for o in outs if o in producer]
        while stack:
            k = stack.pop()
            if k in members:
                continue
            members.add(k)
            stack.extend(producer[i] for i in index.reads[k] if i and i not in boundary and i in producer)
        member_outs = {o for k in members for o in nodes[k].output if o}
        if (not members or any(not nodes[k].output or not nodes[k].output[0] for k in members)
                or boundary & member_outs or not set(outs) <= member_outs):
            return "is not the computation of a set of the model's nodes"
        needed = set(index.outputs(members))
        if not needed <= set(outs):
            return f"leaves {sorted(needed - set(outs))[:2]} of its original nodes uncomputed"
        return ins, outs, members

    # Grow each set until it is the exact computation of a convex set of original nodes: sets sharing an
    # original node merge, and so does every set owning a node on a path between two of a set's nodes (a
    # mask an Attention expansion shares with the next layer's pulls that layer's other nodes in).
    while True:
        comps: dict[int, list[int]] = {}
        for p in sorted(parent):
            comps.setdefault(root(p), []).append(p)
        info = {r: analyse(c) for r, c in comps.items() if r not in bad and any(p in has_plan for p in c)}
        owner: dict[int, int] = {}
        merge: list[tuple[int, int]] = []
        for r, a in info.items():
            if isinstance(a, str):
                continue
            for k in a[2]:
                if k in owner and owner[k] != r:
                    merge.append((owner[k], r))
                owner[k] = r
        for r, a in info.items():
            if isinstance(a, str) or index.is_convex(a[2]):
                continue
            desc, anc = index.descendants, index.ancestors
            mask = d = an = 0
            for p in a[2]:
                mask |= 1 << p
                d |= desc[p]
                an |= anc[p]
            hull = d & an & ~mask
            outside = [p for p in range(len(nodes)) if hull >> p & 1]
            if all(p in owner for p in outside):
                merge.extend((r, owner[p]) for p in outside)
            else:
                bad.add(r)
        joined = False
        for x, y in merge:
            rx, ry = root(x), root(y)
            if rx != ry:
                joined = True
                parent[rx] = ry
                if rx in bad or ry in bad:
                    bad.update((rx, ry))
        bad = {root(p) for p in bad}
        if not joined:
            break
    groups = []
    types = None
    for r, comp in comps.items():
        kernels = [p for p in comp if p in has_plan]
        if not kernels:
            continue
        label = rnodes[kernels[0]].name
        a = info.get(r)
        if r in bad or a is None:
            log.info("PlusEP planner: %s shares a contrib expansion's values with nodes no group holds; its nodes "
                     "stay with the next provider", label)
            continue
        if isinstance(a, str):
            log.info("PlusEP planner: %s %s; its nodes stay with the next provider", label, a)
            continue
        ins, outs, members = a
        if not index.is_convex(members):
            log.info("PlusEP planner: %s is not convex in the model as ONNX Runtime holds it; its nodes stay with "
                     "the next provider", label)
            continue
        hosts = [p for p in comp if p in inner]
        if hosts and types is None:
            types = _value_types(original, rewritten)
        opsets = {o.domain or "": o.version for o in rewritten.opset_import}
        parts = _parts(rnodes, comp, kernels, hosts, made, types or {}, set(outs), opsets)
        if parts is None:
            log.info("PlusEP planner: %s: a shape computation between its kernels has values of unknown type; its "
                     "nodes stay with the next provider", label)
            continue
        kernel_reads = {t for pt in parts if pt["kind"] == "kernel" for t in pt["inputs"]}
        member_outs = {o for k in members for o in nodes[k].output if o}
        member_ins = list(dict.fromkeys(t for k in sorted(members) for t in index.reads[k]
                                        if t and t not in member_outs))
        groups.append({"node": label, "members": [nodes[k].output[0] for k in sorted(members)],
                       "inputs": member_ins, "outputs": list(outs), "parts": parts,
                       "constants": {t: made[t] for t in ridx.boundary(comp)[0] if t in made and t in kernel_reads}})
    return groups


def _value_types(original, rewritten) -> dict:
    """TypeProto of every value either graph declares, and the element type of every Fused node's output
    (its plan's `out` lines: kernels/CONTRACT.md §3)."""
    from onnx import helper
    from .graph_rewrites.fuse import is_fused
    types = {}
    for m in (original, rewritten):
        for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types.setdefault(vi.name, vi.type)
        for t in m.graph.initializer:
            types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    try:     # the rest from ONNX's shape inference of the expansion (standard ops only, unlike the graphs)
        import onnx
        from .graph_rewrites.contrib import expand_model
        inferred = onnx.shape_inference.infer_shapes(expand_model(original).model)
        for vi in inferred.graph.value_info:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types.setdefault(vi.name, vi.type)
    except Exception as e:  # noqa: BLE001 - the declared types and the plans still serve
        log.info("PlusEP planner: shape inference of the expanded model failed (%s)", e)
    for n in rewritten.graph.node:
        plan = next((a.s.decode() for a in n.attribute if a.name == "plus_plan"), None) if is_fused(n) else None
        for line in (plan or "").splitlines():
            f = line.split()
            if len(f) >= 3 and f[0] == "out" and int(f[1]) < len(n.output) and n.output[int(f[1])]:
                types.setdefault(n.output[int(f[1])], helper.make_tensor_type_proto(int(f[2]), None))
    return types


def _parts(rnodes, comp, kernels, hosts, made, types, outs, opsets) -> list | None:
    """The group's parts in an order that respects every dependency: each kernel node one part, and the
    expansion's other nodes as host parts, each placed right after the last kernel it depends on."""
    import onnx
    from onnx import helper, numpy_helper
    from .graph_rewrites.index import implicit_inputs
    k_index = {p: i for i, p in enumerate(kernels)}
    producer = {o: p for p in comp for o in rnodes[p].output if o}
    level: dict[int, int] = {}
    for p in comp:                     # ridx order is topological
        if p in k_index:
            level[p] = k_index[p]
            continue
        deps = [level[producer[t]] for t in list(rnodes[p].input) + implicit_inputs(rnodes[p]) if t in producer]
        level[p] = max(deps, default=-1)
    later_reads: dict[str, int] = {}   # tensor -> the last part level reading it
    parts = []
    for lv in range(-1, len(kernels)):
        if lv >= 0:
            f = rnodes[kernels[lv]]
            packs = {a.name[len("plus_images_"):]: numpy_helper.to_array(a.t).tobytes()
                     for a in f.attribute if a.name.startswith("plus_images_")}
            plan = next(a.s.decode() for a in f.attribute if a.name == "plus_plan")
            parts.append({"kind": "kernel", "node": f.name, "plan": plan, "packs": packs,
                          "inputs": list(f.input), "outputs": list(f.output), "op_type": f.op_type,
                          "attributes": [a.name for a in f.attribute],    # what the trust digest covers
                          "strings": {a.name: a.s for a in f.attribute
                                      if a.type == onnx.AttributeProto.STRING
                                      and a.name not in ("plus_signature", "plus_plan")}})
        group = [rnodes[p] for p in hosts if level[p] == lv]
        if group:
            parts.append({"kind": "host", "nodes": group})
    for k, part in enumerate(parts):   # who reads what, to know a host part's outputs
        reads = part["inputs"] if part["kind"] == "kernel" else [
            t for n in part["nodes"] for t in list(n.input) + implicit_inputs(n)]
        for t in reads:
            later_reads[t] = max(later_reads.get(t, -1), k)
    for k, part in enumerate(parts):
        if part["kind"] != "host":
            continue
        body = part.pop("nodes")
        made_here = [o for n in body for o in n.output if o]
        reads = list(dict.fromkeys(t for n in body for t in list(n.input) + implicit_inputs(n)
                                   if t and t not in made_here))
        ins = [t for t in reads if t not in made]
        inits = [made[t] for t in reads if t in made]
        host_outs = [o for o in made_here if later_reads.get(o, -1) > k or o in outs]
        if any(t not in types for t in ins):
            return None
        domains = sorted({n.domain or "" for n in body} | {""})
        opset_ids = [helper.make_opsetid(d, opsets.get(d, 1)) for d in domains]
        g = helper.make_graph(body, f"plus_ep_host_{k}", [helper.make_value_info(t, types[t]) for t in ins],
                              [onnx.ValueInfoProto(name=t) for t in host_outs], inits)
        inferred = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=opset_ids, ir_version=10))
        known = {vi.name: vi.type for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
                 if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
        if any(t not in known and t not in types for t in host_outs):
            return None
        for t in host_outs:
            types.setdefault(t, known.get(t))
        del g.output[:]
        g.output.extend(helper.make_value_info(t, known.get(t) or types[t]) for t in host_outs)
        model = helper.make_model(g, opset_imports=opset_ids, ir_version=10)
        part.update({"node": f"{parts[k - 1]['node'] if k else 'start'}/host", "inputs": ins, "outputs": host_outs,
                     "model": model.SerializeToString()})
    return parts


def ort_basic_graph(path: str):
    """The model at `path` as ONNX Runtime hands it to GetCapability: after its basic (level-1)
    optimizations, which run before partitioning at every optimization level but ORT_DISABLE_ALL
    (ConstantSharing renames constants, CommonSubexpressionElimination merges the shape computations
    of Q/K/V reshapes, ConstantFolding folds them: groups planned on the file would no longer match).
    Applied by ORT itself (CPU session at ORT_ENABLE_BASIC, optimized model saved to a temporary file);
    node names and first outputs of the nodes it keeps are the file's."""
    import tempfile
    import onnx
    import onnxruntime as ort
    with tempfile.TemporaryDirectory(prefix="plus_ep_plan_") as d:
        out = os.path.join(d, "basic.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = out
        so.log_severity_level = 3
        # large initializers go to a side file (the 2 GB protobuf limit), read back by onnx.load
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "basic.onnx.data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1048576")
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return _without_inserted_casts(onnx.load(out))


def _without_inserted_casts(model):
    """The model without the Cast nodes ORT's InsertCastTransformer put around float16 nodes the CPU provider
    computes in float32 (`InsertedPrecisionFreeCast_*`, renaming the node's own output to that prefix): they
    come after partitioning, so the graph GetCapability sees has neither the casts nor the renames."""
    prefix = "InsertedPrecisionFreeCast_"
    casts = [n for n in model.graph.node if n.op_type == "Cast" and n.name.startswith(prefix)
             and len(n.input) == 1 and len(n.output) == 1]
    names = {t for n in model.graph.node for t in list(n.input) + list(n.output)}
    renamed = {t for t in names if t.startswith(prefix) and t[len(prefix):] not in names}
    if not casts and not renamed:
        return model
    parent: dict = {t: t[len(prefix):] for t in renamed}    # a pair ORT folded away left only the renames

    def find(t):
        while parent.get(t, t) != t:
            t = parent[t]
        return t
    for c in casts:                    # a cast's input and output are one value of the original graph
        a, b = find(c.input[0]), find(c.output[0])
        if a != b:
            keep, drop = (a, b) if not a.startswith(prefix) else (b, a)
            parent[drop] = keep
    rename = {t: find(t) for t in names if find(t) != t}
    dropped = {id(c) for c in casts}
    kept = [n for n in model.graph.node if id(n) not in dropped]
    for n in kept:
        for k, t in enumerate(n.input):
            n.input[k] = rename.get(t, t)
        for k, t in enumerate(n.output):
            n.output[k] = rename.get(t, t)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    vi = [v for v in model.graph.value_info if v.name not in rename]
    del model.graph.value_info[:]
    model.graph.value_info.extend(vi)
    return model


def _constants(m) -> dict:
    got = {t.name: t for t in m.graph.initializer}
    for n in m.graph.node:      # Constant nodes: ORT turns them into initializers
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output:
            for a in n.attribute:
                if a.name == "value":
                    got[n.output[0]] = a.t
    return got


def _add_original_names(groups: list[dict], graph, original) -> None:
    """A group input that ORT's basic optimizations made a shared constant (ConstantSharing: the mask's
    `1.0` becomes GELU's `1.0`) also gets the file's name, tab-separated: the EP accepts either, so the
    group still matches a session at ORT_DISABLE_ALL where its other nodes are unchanged."""
    from onnx import numpy_helper
    c_now, c_file = _constants(graph), _constants(original)
    by_out = {n.output[0]: n for n in graph.graph.node if n.output}
    file_nodes = {n.name: n for n in original.graph.node if n.name}

    def same(a, b) -> bool:
        try:
            x, y = numpy_helper.to_array(a), numpy_helper.to_array(b)
        except Exception:  # noqa: BLE001
            return False
        return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()

    for g in groups:
        alt: dict[str, str] = {}
        for m in g["members"]:
            node = by_out.get(m)
            was = file_nodes.get(node.name) if node is not None and node.name else None
            if was is None or len(was.input) != len(node.input):
                continue
            for b, a in zip(node.input, was.input):
                if a != b and b in c_now and a in c_file and same(c_now[b], c_file[a]):
                    alt.setdefault(b, a)
        g["inputs"] = [f"{i}\t{alt[i]}" if i in alt else i for i in g["inputs"]]
        for part in g["parts"]:     # the host model's input keeps the first name (ep_chain.c runs it by that)
            part["inputs"] = [f"{i}\t{alt[i]}" if i in alt else i for i in part["inputs"]]


def _verify_rewrite(original: bytes, rewritten: bytes, path: str) -> None:
    """verify=1: the rewritten model (function bodies) against the original on ORT CPU, once."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from .feeds import sample_inputs
    feeds = sample_inputs(onnx.load_model_from_string(original), batch=2, seq=16)
    want = ort.InferenceSession(original, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(rewritten, providers=["CPUExecutionProvider"]).run(None, feeds)
    worst = max((float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                 for a, b in zip(want, got) if np.asarray(a).size), default=0.0)
    (log.info if worst <= 1e-3 else log.warning)("PlusEP verify %s: rewrite max |diff| vs original = %.3g", path, worst)


_KINDS = {"kernel": 0, "host": 1}      # PLUS_PART_KERNEL, PLUS_PART_HOST (plus_ep/native/ep.h)


def _hand_over(lib, request, g: dict) -> None:
    """One planned group through the EP's planner protocol (PlusEP_PlanBeginGroup, ...AddPart,
    ...AddConstant in plus_ep/native/ep.c)."""
    from onnx import numpy_helper
    if lib.PlusEP_PlanBeginGroup(request, g["node"].encode(), "\n".join(g["members"]).encode(),
                                 "\n".join(g["inputs"]).encode(), "\n".join(g["outputs"]).encode()):
        raise RuntimeError(f"the EP refused the group of {g['node']}")
    for part in g["parts"]:
        archs = list(part.get("packs", {}))
        n = len(archs)
        blobs = [part["packs"][a] for a in archs]
        c_archs = (ctypes.c_char_p * max(n, 1))(*[a.encode() for a in archs])
        c_data = (ctypes.c_char_p * max(n, 1))(*blobs)
        c_sizes = (ctypes.c_size_t * max(n, 1))(*[len(b) for b in blobs])
        model = part.get("model", b"")
        rc = lib.PlusEP_PlanAddPart(request, _KINDS[part["kind"]], part["node"].encode(),
                                    "\n".join(part["inputs"]).encode(), "\n".join(part["outputs"]).encode(),
                                    part.get("plan", "").encode(), n, c_archs, c_data, c_sizes, model, len(model))
        if not rc and part["kind"] == "kernel" and "op_type" in part:   # the Fused node it was (trust digest)
            rc = lib.PlusEP_PlanSetPartNode(request, part["op_type"].encode(), "\n".join(part["attributes"]).encode())
            for name, value in part["strings"].items():
                rc = rc or lib.PlusEP_PlanAddPartString(request, name.encode(), value, len(value))
        if rc:
            raise RuntimeError(f"the EP refused part {part['node']} of the group of {g['node']}")
    for name, t in g.get("constants", {}).items():
        arr = numpy_helper.to_array(t)
        if arr.dtype == object:
            raise RuntimeError(f"constant {name} of the group of {g['node']} is a string tensor")
        data = arr.tobytes()
        dims = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
        if lib.PlusEP_PlanAddConstant(request, name.encode(), t.data_type, arr.ndim, dims, data, len(data)):
            raise RuntimeError(f"the EP refused constant {name} of the group of {g['node']}")


def _planner(path_b, opts_b, request) -> int:
    lib = _state["lib"]
    try:
        path, opts = path_b.decode(), json.loads(opts_b.decode())
        with ortlog.planner_scope(lib, request):
            groups = plan_groups(path, opts)
        _register_with_emulator(groups)
        for g in groups:
            _hand_over(lib, request, g)
        return 0
    except BaseException as e:  # noqa: BLE001  (never let an exception cross into C)
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:900]
        try:
            lib.PlusEP_PlanSetError(request, msg.encode())
        except Exception:  # noqa: BLE001
            pass
        return 1


def _register_with_emulator(groups: list[dict]) -> None:
    """When this process runs the emulated CUDA driver (plus_ep.verification.emulator.Emulator exists), hand it the
    planned groups' packs: it maps each cubin the launcher loads to the PTX beside it in its pack."""
    import sys
    mod = sys.modules.get("plus_ep.verification.emulator")
    emu = getattr(getattr(mod, "Emulator", None), "_instance", None)
    if emu is None:
        return
    for g in groups:
        for part in g["parts"]:
            for arch, blob in part.get("packs", {}).items():
                emu.register_pack(blob, part["node"], arch)


def _option_check(json_b, err, err_len) -> int:
    """ep_factory.c's callback: plus_ep/options.py's check on a session's PlusEP options (JSON); a bad one
    writes the one-line reason into `err` and returns 1, so ONNX Runtime refuses the session with it."""
    try:
        try:
            opts = json.loads(json_b.decode())
        except ValueError:
            return 0                     # too long to pass whole: the C checks stand
        options.check(opts)
        return 0
    except BaseException as e:  # noqa: BLE001  (never let an exception cross into C)
        msg = (str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}").splitlines()[0]
        data = msg.encode()[:max(int(err_len) - 1, 0)]
        ctypes.memmove(err, data + b"\0", len(data) + 1)
        return 1


def _install_planner(path: str) -> None:
    lib = ctypes.CDLL(path)        # the same loaded object ONNX Runtime uses
    lib.PlusEP_SetPlanner.argtypes = [_PLANNER]
    lib.PlusEP_SetPlanner.restype = None
    lib.PlusEP_PlanBeginGroup.argtypes = [ctypes.c_void_p] + [ctypes.c_char_p] * 4
    lib.PlusEP_PlanBeginGroup.restype = ctypes.c_int
    lib.PlusEP_PlanAddPart.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_char_p] * 4 + [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.PlusEP_PlanAddPart.restype = ctypes.c_int
    lib.PlusEP_PlanSetPartNode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    lib.PlusEP_PlanSetPartNode.restype = ctypes.c_int
    lib.PlusEP_PlanAddPartString.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.PlusEP_PlanAddPartString.restype = ctypes.c_int
    lib.PlusEP_PlanAddConstant.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.PlusEP_PlanAddConstant.restype = ctypes.c_int
    lib.PlusEP_PlanSetError.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.PlusEP_PlanSetError.restype = None
    cb = _PLANNER(_planner)
    _state["lib"], _state["planner"] = lib, cb      # keep both alive for the process
    lib.PlusEP_SetPlanner(cb)
    if hasattr(lib, "PlusEP_SetOptionCheck"):
        lib.PlusEP_SetOptionCheck.argtypes = [_OPTION_CHECK]
        lib.PlusEP_SetOptionCheck.restype = None
        _state["option_check"] = check = _OPTION_CHECK(_option_check)
        lib.PlusEP_SetOptionCheck(check)
