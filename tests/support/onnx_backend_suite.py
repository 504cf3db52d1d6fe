"""ONNX's backend test suite through the rewriter: every model, rewritten, run on ORT's CPU EP.

Sources (each case is a directory with ``model.onnx`` and ``test_data_set_*/{input,output}_*.pb``):

* ``debian/*``: Debian's ``libonnx-testdata`` (``/usr/share/libonnx-testdata/data``, or
  ``$PLUS_EP_ONNX_TESTDATA``): ``node`` (the backend node tests, which the onnx wheel no longer
  ships as files), ``pytorch-converted``, ``pytorch-operator``, ``simple``; its ``real`` cases
  point at downloads and are skipped.
* ``onnx/*``: the onnx wheel's ``onnx/backend/test/data``: ``pytorch-converted``,
  ``pytorch-operator``, ``simple``, and ``real``, whose cases are the ``light/light_*.onnx`` models
  run on onnx's deterministic dummy inputs against the shipped ``light_*_output_0.pb``.
  Debian cases with exactly the same files as a wheel case are skipped as duplicates.
* ``onnx/node-generated``: the installed onnx's own node tests (opsets up to the newest it knows),
  generated in memory by ``onnx.backend.test.loader.load_node_model_tests`` (~10 s).

Per case: the original model runs on ORT CPU (default graph optimizations) against the expected
outputs with the case's tolerances (onnx's runner: rtol 1e-3, atol 1e-7 unless the case's
``data.json`` says otherwise); if it fails, the case is *skipped* ("original fails on ORT CPU").
Otherwise the model is rewritten (an exception is a *crash*), the rewritten model runs on ORT CPU
(fused nodes through their inlined functions; a rejected model is a crash, wrong outputs a
*mismatch*), and every fused subgraph runs through the +Graph interpreter on the boundary values
of the original model on the case's first data set (tests/support/subgraph_check.py; interpreter errors
and mismatches are failures, what onnx.reference itself cannot run is a recorded skip). Models
ORT cannot run are still rewritten: a crash there is a failure too (a one-line ``ModelError``
refusal is accepted and counted).

``python -m tests.support.onnx_backend_suite [--json OUT] [--filter SUBSTR] [--jobs N] [--no-generated-node]
[--no-interpret] [-v]`` prints the count table and the skip reasons grouped; exit status 1 when
anything failed. Cases run in ``--jobs`` processes (default: ``$PLUS_EP_BACKEND_JOBS`` or the CPU
count).
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import logging
import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

if __package__ in (None, ""):       # run as a script: make `graph_rewrites`, `plus_ep`, `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import onnx
from onnx import numpy_helper

from plus_ep import config

DEBIAN_DATA = config.path("PLUS_EP_ONNX_TESTDATA") or Path("/usr/share/libonnx-testdata/data")
WHEEL_DATA = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"
KINDS = ("node", "pytorch-converted", "pytorch-operator", "simple", "real")
RTOL, ATOL = 1e-3, 1e-7                    # onnx.backend.test.loader's defaults
INTERP_RTOL, INTERP_ATOL = 1e-3, 1e-5      # +Graph interpreter (onnx.reference) vs ORT

ORIGINAL_FAILS = "original fails on ORT CPU"


# ---- discovery ---------------------------------------------------------------------------------
@dataclass
class Case:
    name: str                       # "debian/node/test_abs"
    source: str                     # "debian" | "onnx"
    kind: str
    model_path: str | None = None
    data_dirs: list = field(default_factory=list)
    rtol: float = RTOL
    atol: float = ATOL
    light_outputs: list | None = None     # light models: expected output files; inputs are generated
    skip: str | None = None               # decided at discovery (download needed, duplicate)
    skip_detail: str = ""
    model: object = None                  # generated node cases: the ModelProto ...
    data_sets: list | None = None         # ... and [(inputs, outputs)] in graph order


def _digest(case_dir: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(case_dir.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(case_dir)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _tolerances(case_dir: Path):
    rtol, atol, data = RTOL, ATOL, {}
    js = case_dir / "data.json"
    if js.exists():
        data = json.loads(js.read_text())
        rtol, atol = data.get("rtol", rtol), data.get("atol", atol)
    return rtol, atol, data


def _cases_in(root: Path, source: str, kind: str) -> list:
    kdir = root / kind
    if not kdir.is_dir():
        return []
    out = []
    for d in sorted(p for p in kdir.iterdir() if p.is_dir()):
        rtol, atol, data = _tolerances(d)
        c = Case(f"{source}/{kind}/{d.name}", source, kind, rtol=rtol, atol=atol)
        if (d / "model.onnx").exists():
            c.model_path = str(d / "model.onnx")
            c.data_dirs = sorted(glob.glob(str(d / "test_data_set*")))
        else:
            url = data.get("url", "")
            if url.startswith("onnx/backend/test/data/light/"):
                path = WHEEL_DATA.parent.parent.parent.parent / url
                prefix = str(path)[: -len(".onnx")]
                c.model_path, c.light_outputs = str(path), []
                if not path.exists():
                    c.skip, c.skip_detail = "model file missing", str(path)
                for i in range(len(onnx.load(str(path), load_external_data=False).graph.output)
                               if path.exists() else 0):
                    f = f"{prefix}_output_{i}.pb"
                    if not os.path.exists(f):
                        c.skip, c.skip_detail = "no expected output shipped", f
                        break
                    c.light_outputs.append(f)
            else:
                c.skip, c.skip_detail = "needs a download (not in the test data)", url or "no url"
        out.append(c)
    return out


def generated_node_cases() -> list:
    """The node tests of the installed onnx (its newer opsets), generated in memory by
    ``onnx.backend.test.loader.load_node_model_tests`` (about 10 s)."""
    from onnx.backend.test.loader import load_node_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tests = load_node_model_tests()
    return [Case(f"onnx/node-generated/{t.name}", "onnx", "node-generated", rtol=t.rtol, atol=t.atol,
                 model=t.model, data_sets=[(list(i), list(o)) for i, o in t.data_sets])
            for t in sorted(tests, key=lambda t: t.name)]


def discover(debian: Path | None = DEBIAN_DATA, wheel: Path | None = WHEEL_DATA,
             generated_node: bool = False) -> list:
    """Every case of both sources; Debian cases identical to wheel cases are marked duplicates.
    ``generated_node`` adds the installed onnx's own node tests (generated_node_cases)."""
    cases, seen = [], {}
    for kind in KINDS:
        for c in _cases_in(wheel, "onnx", kind) if wheel else []:
            if c.model_path and not c.light_outputs and c.skip is None:
                seen[(kind, _digest(Path(c.model_path).parent))] = c.name
            cases.append(c)
    for kind in KINDS:
        for c in _cases_in(debian, "debian", kind) if debian else []:
            if c.model_path and c.skip is None:
                other = seen.get((kind, _digest(Path(c.model_path).parent)))
                if other:
                    c.skip, c.skip_detail = "duplicate (same files as the onnx wheel's case)", other
            cases.append(c)
    if generated_node:
        cases.extend(generated_node_cases())
    return cases


def debian_present(debian: Path = DEBIAN_DATA) -> bool:
    return (debian / "node").is_dir() and any((debian / "node").iterdir())


# ---- loading data ------------------------------------------------------------------------------
class Unloadable(Exception):
    pass


def _load_value(path: str, tp: onnx.TypeProto):
    data = Path(path).read_bytes()
    if tp.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if tp.HasField("tensor_type"):
        t = onnx.TensorProto()
        t.ParseFromString(data)
        return numpy_helper.to_array(t)
    if tp.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    raise Unloadable(f"{Path(path).name}: values of type {tp.WhichOneof('value')} cannot be loaded")


def load_data_sets(case: Case, model: onnx.ModelProto) -> list:
    """[(feeds: {name: value}, expected: [value])] for every data set of the case."""
    g = model.graph
    if case.data_sets is not None:              # generated: arrays or TensorProtos, in graph order
        def value(v):
            if isinstance(v, onnx.TensorProto):
                return numpy_helper.to_array(v)
            return np.asarray(v) if isinstance(v, np.generic) else v     # numpy scalars: 0-d arrays
        return [({g.input[i].name: value(v) for i, v in enumerate(ins)}, [value(v) for v in outs])
                for ins, outs in case.data_sets]
    if case.light_outputs is not None:          # onnx's runner: deterministic dummy inputs
        from onnx.backend.test.runner import Runner
        inits = {i.name for i in g.initializer}
        feeds = {}
        for x in g.input:
            if x.name in inits:
                continue
            try:
                feeds[x.name] = Runner.generate_dummy_data(x, seed=0, name=case.name, random=False)
            except NotImplementedError as exc:
                raise Unloadable(f"no dummy data for input {x.name}: {exc}") from None
        expected = [_load_value(f, g.output[i].type) for i, f in enumerate(case.light_outputs)]
        return [(feeds, expected)]
    sets = []
    for d in case.data_dirs:
        n_in = len(glob.glob(os.path.join(d, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(d, "output_*.pb")))
        if n_in > len(g.input) or n_out > len(g.output):
            raise Unloadable(f"{os.path.basename(d)}: {n_in} inputs/{n_out} outputs for a model with "
                             f"{len(g.input)}/{len(g.output)}")
        feeds = {g.input[i].name: _load_value(os.path.join(d, f"input_{i}.pb"), g.input[i].type)
                 for i in range(n_in)}
        expected = [_load_value(os.path.join(d, f"output_{i}.pb"), g.output[i].type) for i in range(n_out)]
        sets.append((feeds, expected))
    if not sets:
        raise Unloadable("no test_data_set directory")
    return sets


# ---- running and comparing -----------------------------------------------------------------------
def _session(model: onnx.ModelProto):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1            # the suite runs cases in parallel processes
    so.inter_op_num_threads = 1
    so.log_severity_level = 4              # failures are recorded; keep ORT's log quiet
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def compare_outputs(expected: list, got: list, rtol: float, atol: float) -> str | None:
    """None when ``got`` matches ``expected`` the way onnx's backend runner checks it
    (``Runner.assert_similar_outputs``), else the first line of the difference."""
    from onnx.backend.test.runner import Runner
    if len(got) < len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    try:
        Runner.assert_similar_outputs(expected, list(got[:len(expected)]), rtol=rtol, atol=atol)
    except Exception as exc:        # AssertionError, or a type the comparison cannot handle
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        keep = [ln for ln in lines if ln.startswith(("Mismatched", "Max absolute", "Max relative",
                                                     "Output", "x:", "y:"))]
        return f"{type(exc).__name__}: " + "; ".join((keep or lines or [""])[:4])[:400]
    return None


def _one_line(exc: BaseException) -> str:
    """The first line of an error, without ORT's C++ source location and signature."""
    import re
    s = str(exc).strip().splitlines()
    msg = re.sub(r"/onnxruntime_src/\S+:\d+ .*?\)(?= [A-Z])", "", s[0]) if s else ""
    return f"{type(exc).__name__}: {msg[:400]}"


_ORT_ERRORS = (            # (pattern in ORT's message, groupable reason)
    ("Unsupported model IR version", "model IR version newer than ORT supports"),
    ("is under development", "opset newer than ORT supports"),
    ("can't be converted to MLDataType", "ORT's Python API takes no numpy bfloat16/float8/float4"),
    ("No corresponding Numpy type", "ORT's Python API returns no numpy bfloat16/float8/float4"),
    ("is not a registered function/op", "op not registered in ORT"),
    ("Could not find an implementation", "no ORT CPU kernel for the op and type"),
    ("Failed to find kernel", "no ORT CPU kernel for the op and type"),
    ("Failed to construct locale", "locale missing on this machine"),
    ("Batchwise recurrent operations", "no ORT CPU kernel for the op and type"),
    ("NOT_IMPLEMENTED", "not implemented"), ("INVALID_GRAPH", "invalid graph"),
    ("INVALID_ARGUMENT", "invalid argument"), ("RUNTIME_EXCEPTION", "runtime exception"),
    ("FAIL", "load/run failure"))


def _short(exc: BaseException) -> str:
    """A groupable form of an ORT error."""
    msg = str(exc)
    return next((label for pat, label in _ORT_ERRORS if pat in msg), type(exc).__name__)


def _shape_diagnosis(model, result, which, feeds) -> list:
    """For failed subgraphs: tensors inside them whose inferred static shape is wrong at run time."""
    from tests.support.subgraph_check import shape_disagreements, with_outputs
    view = result.view
    inits = {i.name for i in model.graph.initializer}
    names = list(dict.fromkeys(t for k in which for i in result.subgraphs[k].nodes
                               for t in list(view.nodes[i].input) + list(view.nodes[i].output)
                               if t and t not in inits and t not in feeds))
    try:
        sess = _session(with_outputs(model, names))
        vals = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    except Exception:
        return []
    vals.update(feeds)
    return shape_disagreements(view, {t: vals[t] for t in names + list(feeds) if t in vals})


def _rewrite(model: onnx.ModelProto, rec: dict):
    """(RewriteResult, None) or (None, (reason, detail)) when the rewrite crashed."""
    import traceback

    from plus_ep.graph_rewrites.index import ModelError
    from plus_ep.rewrite import rewrite_detailed
    before = model.SerializeToString()
    try:
        result = rewrite_detailed(model)
    except ModelError as exc:           # a deliberate one-line refusal: judged by the caller
        return None, ("crash: rewrite refused the model (ModelError)", str(exc), exc)
    except Exception:
        return None, ("crash: rewrite raised", traceback.format_exc(limit=-4))
    if model.SerializeToString() != before:
        return None, ("crash: rewrite modified its input model", "")
    fused = [n for n in result.model.graph.node if n.domain == "ai.plus_ep"]
    rec["fused"] = len(fused)
    rec["patterns"] = dict(Counter(sg.pattern.name for sg in result.subgraphs))
    if len(fused) != len(result.subgraphs):
        return None, ("crash: fused node count differs from the subgraph count",
                      f"{len(fused)} nodes, {len(result.subgraphs)} subgraphs")
    if fused:
        try:
            onnx.checker.check_model(result.model)
        except Exception as exc:
            try:
                onnx.checker.check_model(model)
            except Exception:
                pass                # the original fails the checker as well: not the rewrite's doing
            else:
                return None, ("crash: the rewritten model fails onnx.checker", _one_line(exc))
    return result, None


class _Warnings(logging.Handler):
    """Collects the rewriter's warnings into the case record instead of stderr."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage()[:300])


def run_case(case: Case, interpret: bool = True) -> dict:
    """One case end to end; a JSON-able record (see module doc)."""
    logger, capture = logging.getLogger("plus_ep"), _Warnings()
    logger.addHandler(capture)
    propagate, logger.propagate = logger.propagate, False
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):   # onnx.reference on inf/nan data
            warnings.simplefilter("ignore")
            rec = _run_case(case, interpret)
    finally:
        logger.removeHandler(capture)
        logger.propagate = propagate
    rec["warnings"] = list(dict.fromkeys(capture.messages))[:10]
    return rec


def _run_case(case: Case, interpret: bool) -> dict:
    t0 = time.perf_counter()
    rec = {"case": case.name, "source": case.source, "kind": case.kind, "status": "skipped",
           "reason": "", "detail": "", "nodes": 0, "opset": None, "fused": 0, "patterns": {},
           "subgraphs": [], "rewrite_only": False, "rewrite_refused": "", "seconds": 0.0}

    def done(status, reason="", detail=""):
        rec.update(status=status, reason=reason, detail=detail[:2000],
                   seconds=round(time.perf_counter() - t0, 3))
        return rec

    if case.skip:
        return done("skipped", case.skip, case.skip_detail)
    try:
        model = case.model if case.model is not None else onnx.load(case.model_path)
    except Exception as exc:
        return done("skipped", "model cannot be loaded by onnx", _one_line(exc))
    rec["nodes"] = len(model.graph.node)
    rec["opset"] = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    try:
        sets = load_data_sets(case, model)
    except Unloadable as exc:
        return done("skipped", "test data cannot be loaded", str(exc))
    except Exception as exc:
        return done("skipped", "test data cannot be loaded", _one_line(exc))

    # 1. the original on ORT CPU
    skip = None
    try:
        sess = _session(model)
        originals = [sess.run(None, feeds) for feeds, _ in sets]
    except Exception as exc:
        skip = (f"{ORIGINAL_FAILS} ({_short(exc)})", _one_line(exc))
    else:
        for (feeds, expected), got in zip(sets, originals):
            diff = compare_outputs(expected, got, case.rtol, case.atol)
            if diff:
                skip = (f"{ORIGINAL_FAILS} (wrong outputs)", diff)
                break

    # 2. rewrite; also when ORT cannot run the original: the rewriter must not crash on any valid
    #    model (that is checked, the outputs of such a rewrite are not)
    result, crash = _rewrite(model, rec)
    if crash and skip and len(crash) == 3:
        # ORT cannot run it either (e.g. opset < 7): a clear ModelError is an acceptable answer
        rec["rewrite_only"], rec["rewrite_refused"] = True, crash[1]
        return done("skipped", *skip)
    if crash:
        return done("failed", *crash[:2])
    if skip:
        rec["rewrite_only"] = True
        return done("skipped", *skip)
    fused = rec["fused"]

    # 3. the rewritten model on ORT CPU
    if fused:
        try:
            rsess = _session(result.model)
            rewritten = [rsess.run(None, feeds) for feeds, _ in sets]
        except Exception as exc:
            return done("failed", "crash: ORT rejects the rewritten model", _one_line(exc))
        for k, ((feeds, expected), got) in enumerate(zip(sets, rewritten)):
            diff = compare_outputs(expected, got, case.rtol, case.atol)
            if diff:
                return done("failed", "mismatch: rewritten model", f"data set {k}: {diff}")

    # 4. every fused subgraph through the +Graph interpreter
    if interpret and result.subgraphs:
        from tests.support.subgraph_check import boundaries, check_subgraphs, with_outputs
        feeds = sets[0][0]
        inits = {i.name for i in model.graph.initializer}
        bounds = boundaries(result)
        wanted = list(dict.fromkeys(t for ins, outs in bounds for t in ins + outs
                                    if t not in inits and t not in feeds))
        try:
            ext = with_outputs(model, wanted)
            esess = _session(ext)
            names = [o.name for o in esess.get_outputs()]
            ref = dict(zip(names, esess.run(None, feeds)))
            ref.update(feeds)
        except Exception as exc:
            rec["subgraphs"] = [{"index": k, "pattern": sg.pattern.name, "status": "skipped",
                                 "reason": "ORT cannot output the boundary tensors of the original",
                                 "detail": _one_line(exc)} for k, sg in enumerate(result.subgraphs)]
        else:
            checks = check_subgraphs(result, ref, INTERP_RTOL, max(INTERP_ATOL, case.atol), bounds)
            rec["subgraphs"] = [{k: v for k, v in asdict(c).items() if k != "stats"} for c in checks]
        bad = [s for s in rec["subgraphs"] if s["status"] == "failed"]
        if bad:
            detail = "; ".join(f"subgraph {s['index']} ({s['pattern']}): {s['detail']}" for s in bad)
            why = _shape_diagnosis(model, result, [bad_s["index"] for bad_s in bad], feeds)
            if why:
                detail += f"\n  cause: GraphView's shape inference is wrong: {'; '.join(why[:4])}"
            return done("failed", f"{bad[0]['reason']}", detail)
    return done("passed")


# ---- the whole suite ---------------------------------------------------------------------------
def _worker(args):
    case, interpret = args
    try:
        return run_case(case, interpret)
    except Exception:                 # a bug of the runner itself: still a record, never lost
        import traceback
        return {"case": case.name, "source": case.source, "kind": case.kind, "status": "failed",
                "reason": "crash: runner error", "detail": traceback.format_exc(limit=-4),
                "nodes": 0, "opset": None, "fused": 0, "patterns": {}, "subgraphs": [], "rewrite_only": False,
                "rewrite_refused": "", "seconds": 0.0}


# imported once by the forkserver (ORT's symbolic shape inference pulls in torch and sympy: seconds
# per worker otherwise)
_PRELOAD = ["onnx.backend.test.runner", "onnx.reference", "onnxruntime", "onnxruntime.tools.symbolic_shape_infer",
            "plus_ep.graph_rewrites.interpret", "plus_ep.rewrite", "tests.support.subgraph_check", "tests.support.onnx_backend_suite"]


def _pool_context():
    """Workers fork from a clean forkserver that imported the heavy modules once; forking the caller
    itself is unsafe once it runs threads (ORT's pools; torch under pytest). Spawn elsewhere."""
    import multiprocessing as mp
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx
    return mp.get_context("spawn")


def run_suite(cases=None, filter: str | None = None, jobs: int | None = None, interpret: bool = True,
              progress=None, generated_node: bool = True) -> dict:
    """Run every case (in ``jobs`` processes); the summary: counts and per-case records."""
    t0 = time.perf_counter()
    cases = discover(generated_node=generated_node) if cases is None else list(cases)
    if filter:
        cases = [c for c in cases if filter in c.name]
    jobs = jobs or config.integer("PLUS_EP_BACKEND_JOBS", 0) or os.cpu_count() or 1
    jobs = max(1, min(jobs, len(cases) or 1))
    work = [(c, interpret) for c in cases]
    records = []
    if jobs == 1:
        for w in work:
            records.append(_worker(w))
            if progress:
                progress(records[-1])
    else:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(jobs, mp_context=_pool_context()) as ex:
            for rec in ex.map(_worker, work, chunksize=4):
                records.append(rec)
                if progress:
                    progress(rec)
    return summarize(records, time.perf_counter() - t0)


def summarize(records: list, seconds: float = 0.0) -> dict:
    subs = [s for r in records for s in r["subgraphs"]]
    counts = {
        "models": len(records),
        "run": sum(r["status"] != "skipped" for r in records),
        "rewritten": sum(r["fused"] > 0 for r in records if r["status"] != "skipped"),
        "fused_nodes": sum(r["fused"] for r in records if r["status"] != "skipped"),
        # models ORT cannot run: rewritten all the same, only checked not to crash
        "rewrite_only": sum(r["rewrite_only"] for r in records),
        "rewrite_only_rewritten": sum(r["rewrite_only"] and r["fused"] > 0 for r in records),
        "rewrite_only_fused_nodes": sum(r["fused"] for r in records if r["rewrite_only"]),
        "rewrite_only_refused": sum(bool(r["rewrite_refused"]) for r in records),
        "passed": sum(r["status"] == "passed" for r in records),
        "skipped": sum(r["status"] == "skipped" for r in records),
        "failed": sum(r["status"] == "failed" for r in records),
        "crashes": sum(r["status"] == "failed" and r["reason"].startswith("crash") for r in records),
        "mismatches": sum(r["status"] == "failed" and r["reason"].startswith("mismatch") for r in records),
        "interpreter_failures": sum(r["status"] == "failed" and r["reason"].startswith("interpreter")
                                    for r in records),
        "subgraphs": len(subs),
        "subgraphs_passed": sum(s["status"] == "passed" for s in subs),
        "subgraphs_skipped": sum(s["status"] == "skipped" for s in subs),
        "subgraphs_failed": sum(s["status"] == "failed" for s in subs),
    }
    by_source = {}
    for r in records:
        key = f"{r['source']}/{r['kind']}"
        row = by_source.setdefault(key, Counter())
        row["models"] += 1
        row[r["status"]] += 1
        if r["status"] != "skipped":
            row["rewritten"] += r["fused"] > 0
            row["fused_nodes"] += r["fused"]
    return {
        "counts": counts,
        "by_source": {k: dict(v) for k, v in by_source.items()},
        "skipped": dict(Counter(r["reason"] for r in records if r["status"] == "skipped").most_common()),
        "subgraph_skips": dict(Counter(s["reason"] for s in subs if s["status"] == "skipped").most_common()),
        "patterns": dict(sum((Counter(r["patterns"]) for r in records), Counter()).most_common()),
        "failures": [r for r in records if r["status"] == "failed"],
        "seconds": round(seconds, 1),
        "versions": _versions(),
        "records": records,
    }


def _versions():
    import onnxruntime as ort
    return {"onnx": onnx.__version__, "onnxruntime": ort.__version__, "numpy": np.__version__}


def format_failures(summary: dict, limit: int = 50) -> str:
    lines = []
    for r in summary["failures"][:limit]:
        lines.append(f"{r['case']}: {r['reason']}\n    " + r["detail"].strip().replace("\n", "\n    ")[:1500])
    if len(summary["failures"]) > limit:
        lines.append(f"... and {len(summary['failures']) - limit} more")
    return "\n".join(lines)


def format_summary(summary: dict, examples: int = 3) -> str:
    c = summary["counts"]
    recs = summary["records"]
    out = ["| source | models | run | rewritten | fused nodes | passed | skipped | failed |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for key, row in sorted(summary["by_source"].items()):
        run = row.get("passed", 0) + row.get("failed", 0)
        out.append(f"| {key} | {row['models']} | {run} | {row.get('rewritten', 0)} | "
                   f"{row.get('fused_nodes', 0)} | {row.get('passed', 0)} | {row.get('skipped', 0)} | "
                   f"{row.get('failed', 0)} |")
    out.append(f"| **total** | {c['models']} | {c['run']} | {c['rewritten']} | {c['fused_nodes']} | "
               f"{c['passed']} | {c['skipped']} | {c['failed']} |")
    out.append("")
    out.append(f"failures: {c['failed']} (crashes {c['crashes']}, mismatches {c['mismatches']}, "
               f"interpreter {c['interpreter_failures']})")
    out.append(f"rewrite-only crash check on {c['rewrite_only']} models ORT cannot run: "
               f"{c['rewrite_only_rewritten']} rewritten ({c['rewrite_only_fused_nodes']} fused nodes), "
               f"{c['rewrite_only_refused']} refused with a ModelError")
    refusals = Counter(r["rewrite_refused"].split(": ", 1)[-1][:90] for r in recs if r["rewrite_refused"])
    for why, n in refusals.most_common():
        out.append(f"  {n:5d}  refused: {why}")
    out.append(f"+Graph interpreter: {c['subgraphs']} fused subgraphs, {c['subgraphs_passed']} match ORT, "
               f"{c['subgraphs_skipped']} skipped, {c['subgraphs_failed']} failed")
    if summary["patterns"]:
        out.append("patterns: " + ", ".join(f"{k} {v}" for k, v in summary["patterns"].items()))
    out.append("")
    out.append("skipped models, by reason:")
    for reason, n in summary["skipped"].items():
        names = [r["case"].split("/", 1)[1] for r in recs if r["status"] == "skipped" and r["reason"] == reason]
        more = f", ... (+{len(names) - examples})" if len(names) > examples else ""
        out.append(f"  {n:5d}  {reason}: {', '.join(names[:examples])}{more}")
    if summary["subgraph_skips"]:
        out.append("skipped subgraphs (interpreter), by reason:")
        for reason, n in summary["subgraph_skips"].items():
            names = [r["case"].split("/", 1)[1] for r in recs for s in r["subgraphs"]
                     if s["status"] == "skipped" and s["reason"] == reason]
            out.append(f"  {n:5d}  {reason}: {', '.join(dict.fromkeys(names[:examples]))}")
    if summary["failures"]:
        out.append("")
        out.append("FAILURES:")
        out.append(format_failures(summary))
    v = summary["versions"]
    out.append("")
    out.append(f"{summary['seconds']}s; onnx {v['onnx']}, onnxruntime {v['onnxruntime']}, numpy {v['numpy']}; "
               f"Debian data {'present' if debian_present() else 'MISSING'} ({DEBIAN_DATA})")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="OUT", help="write the summary with every per-case record")
    ap.add_argument("--filter", metavar="SUBSTR", help="only cases whose name contains SUBSTR")
    ap.add_argument("--jobs", type=int, default=0, help="processes (default: CPU count)")
    ap.add_argument("--no-generated-node", action="store_true",
                    help="leave out the installed onnx's own node tests (generated in memory, ~10 s)")
    ap.add_argument("--no-interpret", action="store_true", help="skip the +Graph interpreter checks")
    ap.add_argument("-v", "--verbose", action="store_true", help="print one line per case")
    args = ap.parse_args(argv)

    def progress(r):
        if args.verbose:
            extra = f" ({r['reason']})" if r["reason"] else ""
            print(f"{r['status']:7s} {r['case']} fused={r['fused']} {r['seconds']:.2f}s{extra}", flush=True)

    summary = run_suite(filter=args.filter, jobs=args.jobs, interpret=not args.no_interpret, progress=progress,
                        generated_node=not args.no_generated_node)
    print(format_summary(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
    return 1 if summary["counts"]["failed"] else 0


if __name__ == "__main__":       # run under its package name, so the workers unpickle its classes
    from tests.support.onnx_backend_suite import main as _main
    sys.exit(_main())
