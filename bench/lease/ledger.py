"""The GPU lease's bookkeeping (bench/lease/gpu_lease.sh calls it): the preflight step, the summary every step
is recorded in, the readable report, and the copy of a lease's results into bench/results/.

    python -m bench.lease.ledger preflight CARRY         the first step: machine, versions, tools, carry
    python -m bench.lease.ledger record NAME SECONDS RC  merge a step's status file into $OUT/summary.json
    python -m bench.lease.ledger skip NAME REASON        record a step as skipped
    python -m bench.lease.ledger report                  $OUT/report.md from what $OUT holds
    python -m bench.lease.ledger collect OUT [--results DIR]
                                                         a finished lease's files -> bench/results/
                                                         <date>-gpu-lease-<device>.json and .md

summary.json: {"schema", "mode", "started", "steps": [{"name", "status": "ok"|"skipped"|"failed",
"seconds", "detail"}], "environment": {...}}, rewritten after every step.
"""
from __future__ import annotations

import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

from bench import RESULTS
from bench.lease import env as lease_env

SCHEMA = "plus_ep.lease/1"


def _summary_path() -> pathlib.Path:
    return lease_env.out_dir() / "summary.json"


def load_summary() -> dict:
    p = _summary_path()
    if p.exists():
        return json.loads(p.read_text())
    return {"schema": SCHEMA, "mode": lease_env.mode(), "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "steps": [], "environment": {}}


def save_summary(s: dict) -> None:
    lease_env.write_json(_summary_path(), s)
    report()


def _put_step(s: dict, row: dict) -> None:
    s["steps"] = [r for r in s["steps"] if r["name"] != row["name"]] + [row]


def record(name: str, seconds: float, rc: int) -> int:
    """The step's own status file ($LEASE_STATUS) when it wrote one, else what its exit code says."""
    s = load_summary()
    status, detail = "failed", f"exit code {rc}"
    path = os.environ.get("LEASE_STATUS")
    if path and pathlib.Path(path).exists():
        st = json.loads(pathlib.Path(path).read_text())
        status, detail = st["status"], st["detail"]
    if rc in (124, 137):
        status, detail = "failed", f"timed out after {seconds:.0f}s (its limit); last state: {detail}"
    elif rc != 0 and status == "ok":
        status, detail = "failed", f"exit code {rc} after reporting: {detail}"
    _put_step(s, {"name": name, "status": status, "seconds": round(seconds, 1), "detail": detail})
    save_summary(s)
    lease_env.say(f"step {name}: {status} in {seconds:.0f}s: {detail}")
    return 0


def skip(name: str, reason: str) -> int:
    s = load_summary()
    _put_step(s, {"name": name, "status": "skipped", "seconds": 0.0, "detail": reason})
    save_summary(s)
    lease_env.say(f"step {name}: skipped: {reason}")
    return 0


def _run(cmd) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (r.stdout or r.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"not available ({type(e).__name__})"


def preflight(carry: str) -> int:
    st = lease_env.Status("preflight")
    from bench.harness.env_info import env_info
    mode = lease_env.mode()
    env = env_info(gpu=True) if mode == "device" else {"note": "rehearsal: versions of the device's stack are "
                                                                 "recorded on the GPU machine"}
    tools = {}
    for tool, args in (("gcc", ["--version"]), ("nvcc", ["--version"]), ("compute-sanitizer", ["--version"]),
                       ("ncu", ["--version"]), ("nvidia-smi", ["-L"])):
        path = shutil.which(tool)
        tools[tool] = {"path": path, "version": _run([tool, *args]).splitlines()[-1][:200] if path else None}
    import onnxruntime as ort
    facts = {"mode": mode, "onnxruntime": ort.__version__, "ort_providers": ort.get_available_providers(),
             "cpus": os.cpu_count(), "tools": tools, "env": env}
    problems = []
    manifest = pathlib.Path(carry) / "manifest.json"
    if manifest.exists():
        m = json.loads(manifest.read_text())
        facts["carry"] = {k: m.get(k) for k in ("created", "plus_ep", "source_digest", "bytes", "short", "failed")}
        facts["carry"]["models"] = len(m.get("models", []))
        try:
            from plus_ep import config
            if m.get("source_digest") and config.source_digest()[:16] != m["source_digest"]:
                facts["carry"]["warning"] = "prepared from other PlusEP sources than these (rerun --prepare)"
        except Exception as e:  # noqa: BLE001 - plus_ep may not be installed yet (the install step is next)
            facts["carry"]["digest_check"] = f"not checked: {type(e).__name__}"
    else:
        problems.append(f"no carry folder {carry} (run `bash bench/lease/gpu_lease.sh --prepare` before the lease)")
    if mode == "device":
        gpu = env.get("gpu") or {}
        if not (gpu.get("nvidia_smi") or {}).get("name"):
            problems.append("nvidia-smi reports no GPU")
    s = load_summary()
    s["environment"] = facts
    s["mode"] = mode
    save_summary(s)
    device = (((env.get("gpu") or {}).get("nvidia_smi") or {}).get("name")) if mode == "device" else "emulated driver"
    detail = (f"{device}; python {sys.version.split()[0]}, onnxruntime {ort.__version__} "
              f"({'CUDA EP' if 'CUDAExecutionProvider' in ort.get_available_providers() else 'CPU build'}), "
              f"torch {env.get('torch')}, gcc {'yes' if tools['gcc']['path'] else 'NO'}, compute-sanitizer "
              f"{'yes' if tools['compute-sanitizer']['path'] else 'no'}, carry {facts.get('carry', {}).get('models', 0)} models")
    st.set("failed" if problems else "ok", "; ".join(problems) + ("; " if problems else "") + detail)
    return 1 if problems else 0


# ------------------------------------------------------------------------------------------------ report
def _table(rows, head) -> list:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _e(x) -> str:
    return "-" if x is None else f"{x:.1e}" if isinstance(x, float) else str(x)


def report_text(out: pathlib.Path) -> str:
    s = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else load_summary()
    lines = [f"# PlusEP GPU lease ({s.get('mode')}), {s.get('started')}", ""]
    lines += _table([(r["name"], r["status"], r["seconds"], r["detail"].replace("|", "/")[:300]) for r in s["steps"]],
                    ["step", "status", "s", "detail"])
    p = out / "correctness.json"
    if p.exists():
        c = json.loads(p.read_text())
        lines += ["", f"## Kernel correctness: {c.get('summary', '')}", ""]
        rows = []
        for m in c["models"]:
            for n in m.get("nodes", []):
                outs = n["outputs"]
                rows.append((m["model"], n["node"], n["math"], n["runs"],
                             f"{min((o.get('bitwise_fraction', 0) for o in outs), default=0) * 100:.1f}%",
                             _e(max((o.get("interp_max_abs", 0) for o in outs), default=None)),
                             _e(max((o.get("ref_rel", 0) for o in outs), default=None)),
                             _e(min((o["tol"] for o in outs), default=None)), "ok" if n["ok"] else "FAILED"))
            if m.get("error"):
                rows.append((m["model"], "-", "-", 0, "-", "-", "-", "-", "FAILED: " + m["error"][:120]))
        lines += _table(rows, ["model", "node", "math", "runs", "bitwise = interp", "max abs vs interp",
                               "rel vs float64", "tol", "verdict"])
    for name, title in (("kernels.json", "Kernel device times"), ("e2e.json", "End to end")):
        p = out / name
        if p.exists():
            d = json.loads(p.read_text())
            lines += ["", f"## {title}", "", *d.get("table", [])]
            for note in d.get("notes", []):
                lines.append(f"- {note}")
    return "\n".join(lines) + "\n"


def report() -> None:
    out = lease_env.out_dir()
    if out.exists():
        (out / "report.md").write_text(report_text(out))


def collect(out: str, results: str | None = None) -> int:
    """Copy a finished lease's outcome (compact) into bench/results/<date>-gpu-lease-<device>.json + .md."""
    out_p = pathlib.Path(out)
    s = json.loads((out_p / "summary.json").read_text())
    env = s.get("environment", {})
    device = (((env.get("env") or {}).get("gpu") or {}).get("nvidia_smi") or {}).get("name") \
        or ("emulated" if s.get("mode") == "emulated" else "unknown")
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    data = {"schema": SCHEMA, "device": device, "summary": s}
    for name in ("correctness.json", "kernels.json", "e2e.json"):
        if (out_p / name).exists():
            data[name[:-5]] = json.loads((out_p / name).read_text())
    dest = pathlib.Path(results) if results else RESULTS
    stem = f"{s.get('started', '')[:10] or datetime.date.today().isoformat()}-gpu-lease-{slug}"
    lease_env.write_json(dest / f"{stem}.json", data)
    (dest / f"{stem}.md").write_text(report_text(out_p))
    print(dest / f"{stem}.json")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "preflight":
        return preflight(rest[0] if rest else ".gpu")
    if cmd == "record":
        return record(rest[0], float(rest[1]), int(rest[2]))
    if cmd == "skip":
        return skip(rest[0], " ".join(rest[1:]))
    if cmd == "report":
        report()
        return 0
    if cmd == "collect":
        return collect(rest[0], rest[rest.index("--results") + 1] if "--results" in rest else None)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
