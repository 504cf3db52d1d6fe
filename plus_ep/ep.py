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
import warnings

from . import options
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
            try:
                ort.register_execution_provider_library(NAME, path)
            except Exception as e:  # noqa: BLE001  (ORT raises its own Fail type)
                if "already registered" not in str(e):
                    raise
        _install_planner(path)
        _state["path"] = path
        return path


def register_on_import() -> None:
    """What `import plus_ep` does: register unless PLUS_EP_REGISTER=0; never raise: a host ONNX Runtime
    that cannot host PlusEP (or none) is one warning line naming the fix, and nothing is registered."""
    from . import config          # the owner of every PLUS_EP_* variable
    if config.get("PLUS_EP_REGISTER") == "0":
        return
    try:
        register()
    except FileNotFoundError as e:      # a source checkout without the built library
        log.info("PlusEP: not registered with ONNX Runtime: %s", e)
    except ImportError:
        from .library import host_problem
        warnings.warn(host_problem(), RuntimeWarning, stacklevel=3)
    except Exception as e:  # noqa: BLE001
        warnings.warn(str(e) if str(e).startswith("PlusEP") else f"PlusEP: not registered with ONNX Runtime: {e}",
                      RuntimeWarning, stacklevel=3)


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
    try:
        graph = ort_basic_graph(path)
    except Exception as e:  # noqa: BLE001 - plan on the file as it is; ORT may then change some groups
        log.warning("PlusEP planner: could not apply ONNX Runtime's basic optimizations to %s (%s); planning on "
                    "the file as it is", path, e)
        graph = original
    ropts = {k: opts[k] for k in ("cache_dir", "disable", "fp32_math") if opts.get(k)}
    # shape_reads off: every group must be convex in the graph ORT partitions, where each Shape still
    # reads its copy (partition() below leaves a group that is not with the next provider)
    rewritten = onnx.load_model_from_string(rewritten_model(graph.SerializeToString(), arch, ropts,
                                                            shape_reads=False))
    groups = partition(graph, rewritten)
    if graph is not original:
        _add_original_names(groups, graph, original)
    if options.verify(opts):
        _verify_rewrite(original.SerializeToString(), rewritten.SerializeToString(), path)
    log.info("PlusEP planner: %s -> %d node groups for %s", path, len(groups), arch)
    _memo[key] = groups
    return groups


def planned() -> dict[str, list[str]]:
    """What the planner planned in this process: model path -> the fused node name of each group."""
    out: dict[str, list[str]] = {}
    for key, groups in list(_memo.items()):
        out.setdefault(key[0], []).extend(g["node"] for g in groups)
    return out


def partition(original, rewritten) -> list[dict]:
    """Groups of `original`'s nodes that `rewritten`'s top-level Fused nodes (with plans) replace."""
    from onnx import numpy_helper

    from .graph_rewrites.fuse import is_fused
    from .graph_rewrites.index import GraphIndex
    if any(is_fused(n) for n in original.graph.node):
        return []       # already rewritten: the EP claims its Fused nodes itself
    index = GraphIndex(original.graph)
    nodes, producer = index.nodes, index.producer
    known = set(producer) | {i.name for i in original.graph.input} | {t.name for t in original.graph.initializer}
    groups = []
    for f in rewritten.graph.node:
        if not is_fused(f):
            continue
        attrs = {a.name: a for a in f.attribute}
        if "plus_plan" not in attrs:
            continue
        boundary = {i for i in f.input if i}
        if not boundary <= known or any(o and o not in producer for o in f.output):
            # a contrib op the rewrite expanded into several fused nodes (Attention: the Q/K/V group and the
            # attention): its pieces read or write values the model does not have, so ORT keeps the node
            log.info("PlusEP planner: %s reads or writes values the model does not name (an expanded contrib "
                     "op); its nodes stay with the next provider", f.name)
            continue
        members, stack = set(), [producer[o] for o in f.output if o in producer]
        while stack:
            k = stack.pop()
            if k in members:
                continue
            members.add(k)
            stack.extend(producer[i] for i in nodes[k].input if i and i not in boundary and i in producer)
        if not members or any(not nodes[k].output or not nodes[k].output[0] for k in members):
            continue
        if not index.is_convex(members):
            # a group ORT would refuse to fuse (plan_groups rewrites with Shape nodes reading their copies,
            # so none should be; kept as the guard)
            log.info("PlusEP planner: %s is not convex in the model as ONNX Runtime holds it; its nodes stay "
                     "with the next provider", f.name)
            continue
        packs = {name[len("plus_images_"):]: numpy_helper.to_array(a.t).tobytes()
                 for name, a in attrs.items() if name.startswith("plus_images_")}
        groups.append({"node": f.name, "members": [nodes[k].output[0] for k in sorted(members)],
                       "inputs": list(f.input), "outputs": list(f.output),
                       "plan": attrs["plus_plan"].s.decode(), "packs": packs})
    return groups


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
        return onnx.load(out)


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


def _planner(path_b, opts_b, request) -> int:
    lib = _state["lib"]
    try:
        path, opts = path_b.decode(), json.loads(opts_b.decode())
        groups = plan_groups(path, opts)
        _register_with_emulator(groups)
        for g in groups:
            archs = list(g["packs"])
            n = len(archs)
            blobs = [g["packs"][a] for a in archs]
            c_archs = (ctypes.c_char_p * max(n, 1))(*[a.encode() for a in archs])
            c_data = (ctypes.c_char_p * max(n, 1))(*blobs)
            c_sizes = (ctypes.c_size_t * max(n, 1))(*[len(b) for b in blobs])
            rc = lib.PlusEP_PlanAddGroup(request, g["node"].encode(), "\n".join(g["members"]).encode(),
                                         "\n".join(g["inputs"]).encode(), "\n".join(g["outputs"]).encode(),
                                         g["plan"].encode(), n, c_archs, c_data, c_sizes)
            if rc:
                raise RuntimeError(f"the EP refused the group of {g['node']}")
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
        for arch, blob in g["packs"].items():
            emu.register_pack(blob, g["node"], arch)


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
    lib.PlusEP_PlanAddGroup.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p,
                                        ctypes.c_void_p, ctypes.c_void_p]
    lib.PlusEP_PlanAddGroup.restype = ctypes.c_int
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
