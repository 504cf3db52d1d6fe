"""PlusEP as an ONNX Runtime plugin execution provider (ONNX Runtime >= 1.25).

    import plus_ep                      # registers the EP library and the planner, once per process
    import onnxruntime as ort
    sess = ort.InferenceSession("model.onnx", providers=["PlusEP", "CUDAExecutionProvider", "CPUExecutionProvider"])

`import plus_ep` calls `onnxruntime.register_execution_provider_library("PlusEP", <launcher library>)`
(idempotent) and installs the Python rewriter as the EP's *planner*: when the EP's GetCapability sees a
graph without `ai.plus_ep::Fused` nodes that was loaded from a file, it calls back here with the model
path; the planner rewrites the model (rewrite and kernels cached on disk, `plus_ep.session.rewritten_model`)
and hands the EP each fused node's original nodes, plan and image packs, which the EP claims and compiles.
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

NAME = "PlusEP"
MIN_ORT = (1, 25)
OPTIONS = ("arch", "cache_dir", "disable", "fp32_math", "verify")
log = logging.getLogger("plus_ep")

_lock = threading.Lock()
_state: dict = {"path": None, "lib": None, "planner": None}
_memo: dict = {}          # (path, mtime, size, options) -> planned groups, for the process

_PLANNER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)


def ort_version() -> tuple[int, int]:
    import onnxruntime as ort
    parts = ort.__version__.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def register() -> str:
    """Register the PlusEP library with ONNX Runtime under "PlusEP" and install the planner.

    Idempotent (also when the library was registered by other code in this process). Returns the
    library path. Raises RuntimeError on ONNX Runtime < 1.25, where plugin EPs cannot be named in
    `providers`."""
    import onnxruntime as ort
    with _lock:
        if _state["path"]:
            return _state["path"]
        if ort_version() < MIN_ORT:
            raise RuntimeError(
                f"PlusEP as an ONNX Runtime execution provider needs onnxruntime >= {MIN_ORT[0]}.{MIN_ORT[1]} "
                f"(this is {ort.__version__}): older versions do not accept plugin EPs in providers=[...]. "
                "Upgrade onnxruntime-gpu, or run rewritten models through the custom-op library "
                "(SessionOptions.register_custom_ops_library(plus_ep.get_library_path())).")
        from .library import get_library_path
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
    """What `import plus_ep` does: register unless PLUS_EP_REGISTER=0; never raise (warn instead)."""
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
        warnings.warn(f"PlusEP: not registered with ONNX Runtime: {e}", RuntimeWarning, stacklevel=3)


def devices() -> list[dict]:
    """PlusEP's devices as ONNX Runtime lists them: mode ("gpu", "staging", "inert"), CUDA ordinal,
    compute capability and, for an inert device, the reason."""
    import onnxruntime as ort
    out = []
    for d in ort.get_ep_devices():
        if d.ep_name == NAME:
            m = dict(d.ep_metadata)
            out.append({"mode": m.get("plus_ep.mode"), "ordinal": m.get("plus_ep.cuda_ordinal"),
                        "compute_capability": m.get("plus_ep.compute_capability"),
                        "reason": m.get("plus_ep.reason"), "device": d})
    return out


def arch_for(opts: dict) -> str:
    """The arch kernels are built for: the `arch` option, else the device's ("9.0" -> sm_90a)."""
    from .kernels import nvrtc
    if opts.get("arch"):
        return nvrtc.parse_arch(opts["arch"])
    cc = opts.get("cc") or ""
    major, _, minor = cc.partition(".")
    from .kernels.arch import for_device        # the arch table's choice: 9.0 -> sm_90a
    return nvrtc.parse_arch(for_device(int(major), int(minor or 0)))


# ------------------------------------------------------------------------------------------ planner


def plan_groups(path: str, opts: dict) -> list[dict]:
    """The node groups PlusEP should claim in the model at `path`: one per Fused node of its rewrite,
    with the original nodes it replaces (by first output name), its inputs and outputs in plan order,
    its plan and its image packs (arch -> bytes)."""
    st = os.stat(path)
    arch = arch_for(opts)
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size, arch, opts.get("disable", ""),
           opts.get("fp32_math", "exact"), opts.get("cache_dir", ""))
    if key in _memo:
        return _memo[key]
    import onnx
    from .rewrite import load_model
    from .session import rewritten_model
    original = load_model(path)
    data = original.SerializeToString()
    ropts = {k: opts[k] for k in ("cache_dir", "disable", "fp32_math") if opts.get(k)}
    rewritten = onnx.load_model_from_string(rewritten_model(data, arch, ropts))
    groups = partition(original, rewritten)
    if opts.get("verify") in ("1", 1, True):
        _verify_rewrite(data, rewritten.SerializeToString(), path)
    log.info("PlusEP planner: %s -> %d node groups for %s", path, len(groups), arch)
    _memo[key] = groups
    return groups


def partition(original, rewritten) -> list[dict]:
    """Groups of `original`'s nodes that `rewritten`'s top-level Fused nodes (with plans) replace."""
    from onnx import numpy_helper
    nodes = list(original.graph.node)
    if any(n.domain == "ai.plus_ep" and n.op_type == "Fused" for n in nodes):
        return []       # already rewritten: the EP claims its Fused nodes itself
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    groups = []
    for f in rewritten.graph.node:
        if f.domain != "ai.plus_ep" or f.op_type != "Fused":
            continue
        attrs = {a.name: a for a in f.attribute}
        if "plus_plan" not in attrs:
            continue
        boundary = {i for i in f.input if i}
        members, stack = set(), [producer[o] for o in f.output if o in producer]
        while stack:
            k = stack.pop()
            if k in members:
                continue
            members.add(k)
            stack.extend(producer[i] for i in nodes[k].input if i and i not in boundary and i in producer)
        if not members or any(not nodes[k].output or not nodes[k].output[0] for k in members):
            continue
        packs = {name[len("plus_images_"):]: numpy_helper.to_array(a.t).tobytes()
                 for name, a in attrs.items() if name.startswith("plus_images_")}
        groups.append({"node": f.name, "members": [nodes[k].output[0] for k in sorted(members)],
                       "inputs": list(f.input), "outputs": list(f.output),
                       "plan": attrs["plus_plan"].s.decode(), "packs": packs})
    return groups


def _verify_rewrite(original: bytes, rewritten: bytes, path: str) -> None:
    """verify=1: the rewritten model (function bodies) against the original on ORT CPU, once."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from .zoo.inputs import sample_inputs
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
        for g in plan_groups(path, opts):
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
