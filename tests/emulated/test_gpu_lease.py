"""The GPU lease script (bench/lease/gpu_lease.sh) in its short form, so it cannot rot between leases: prepare a
one-model carry, rehearse the whole lease on the emulated driver (the plugin EP on an emulated GPU
device), and check what a lease must leave in $OUT: every step recorded in summary.json in order, none
failed, both install paths taken in a fresh environment, the sanitizer skipped with its reason, the
correctness step run on every carried model, at most 8 files with the fixed names. Also: a carried model
whose launcher is not active fails loudly (its nodes have no function bodies, so nothing can run them in
the kernels' place)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.emulated_models import ROOT

STEPS = ["preflight", "install", "correctness", "sanitizer", "kernels", "e2e"]
FILES = {"summary.json", "lease.log", "correctness.json", "kernels.json", "e2e.json", "report.md", "sanitizer.log"}


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLUS_EP_CUDA", "PLUS_EP_VIRTUAL", "LEASE_"))}
    env["PYTHON"] = sys.executable
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def carry(tmp_path_factory):
    pytest.importorskip("cuda.bindings")
    d = tmp_path_factory.mktemp("lease") / "carry"
    r = subprocess.run(["bash", "bench/lease/gpu_lease.sh", "--prepare", "--short", "--carry", str(d)], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "(limit 60)" in r.stdout
    return d


def test_short_rehearsal(carry, tmp_path):
    out = tmp_path / "out"
    r = subprocess.run(["bash", "bench/lease/gpu_lease.sh", "--rehearse", "--short", "--carry", str(carry)], cwd=ROOT,
                       env=_env(OUT=str(out)), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["mode"] == "emulated"
    assert [x["name"] for x in s["steps"]] == STEPS
    status = {x["name"]: x["status"] for x in s["steps"]}
    assert "failed" not in status.values(), s["steps"]
    assert status["sanitizer"] == "skipped" and "rehearsal" in s["steps"][3]["detail"]
    assert all(status[n] == "ok" for n in STEPS if n != "sanitizer"), s["steps"]
    installed = s["steps"][1]["detail"]
    assert "source path (no pip): the carried _launcher" in installed and "pip install --dry-run -e ." in installed
    carried = json.loads((carry / "manifest.json").read_text())["models"]
    checked = json.loads((out / "correctness.json").read_text())["models"]
    assert sorted(m["model"] for m in checked) == sorted(carried) and carried
    assert all(m["ok"] and all(n["runs"] >= 2 for n in m["nodes"]) for m in checked)
    assert {p.name for p in out.iterdir()} <= FILES and len(list(out.iterdir())) <= 8
    k = json.loads((out / "kernels.json").read_text())
    assert k["rows"] and all(row["plus_ms"] for row in k["rows"])
    e = json.loads((out / "e2e.json").read_text())
    assert e["rows"][0]["plus_ep"]["p50_ms"] > 0 and e["rows"][0]["plus_ep"]["finite"]
    assert "ERROR" not in (out / "report.md").read_text()


def test_inactive_launcher_fails_loudly(carry, tmp_path):
    """No usable CUDA driver: the launcher registers nothing and PlusEP has no device to run on; the
    carried model (no function bodies) cannot even be loaded, and the step says FAILED."""
    status = tmp_path / "status.json"
    r = subprocess.run([sys.executable, "-m", "bench.lease.correctness", str(carry), str(tmp_path / "c.json")], cwd=ROOT,
                       env=_env(PLUS_EP_CUDA_LIBRARY=str(tmp_path / "no-driver.so"), LEASE_STATUS=str(status)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    st = json.loads(status.read_text())
    assert st["status"] == "failed" and "0/" in st["detail"] and "FAILED" in st["detail"], st
    res = json.loads((tmp_path / "c.json").read_text())
    assert all(not m["ok"] and "not a registered function/op" in m["error"] for m in res["models"]), res
