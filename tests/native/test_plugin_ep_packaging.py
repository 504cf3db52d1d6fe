"""PlusEP by ONNX Runtime's plugin-EP packaging rules (no GPU here): the library exports only the plugin-EP
and custom-op entry points (a version script) and links no ONNX Runtime; `plus_ep.get_library_path()`,
`get_ep_names()`, `get_ep_name()`; the host check `import plus_ep` makes (too old an ORT, two ORT
distributions in one folder) in one line naming the fix; PlusEP's devices: GPU-typed with the device's
name, compute capability, memory and PlusEP's version, none at all without a usable GPU (so ORT's
PREFER_CPU / DEFAULT policies never pick PlusEP), and the no-GPU warning once per process through ORT's
logger at its severity.

Device cases run in child processes (the library reads PLUS_EP_CUDA_LIBRARY once per process): no driver,
the emulated driver (staging: a GPU-typed device, host memory), the stand-in driver with two devices and
PLUS_EP_VIRTUAL_GPU=1 (gpu mode, device memory)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import plus_ep  # noqa: E402
from plus_ep import library  # noqa: E402
from tests.support.plugin_host import EXPECTED_EXPORTS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25), reason="plugin EPs need onnxruntime >= 1.25")



def _dynamic_symbols(path: str) -> dict[str, str]:
    r = subprocess.run(["nm", "-D", "--defined-only", "--with-symbol-versions", path], capture_output=True, text=True)
    if r.returncode:
        pytest.skip("no nm with --with-symbol-versions")
    out = {}
    for ln in r.stdout.splitlines():
        parts = ln.split()
        if len(parts) == 3 and parts[1] in ("T", "D", "B", "W"):
            name, _, version = parts[2].partition("@@")
            out[name] = version
    return out


def test_library_exports_only_the_entry_points_and_links_no_ort(library):
    syms = _dynamic_symbols(library)
    assert set(syms) == EXPECTED_EXPORTS, sorted(set(syms) ^ EXPECTED_EXPORTS)
    assert set(syms.values()) == {"PLUSEP_1.0"}, syms                 # every export carries the version node
    r = subprocess.run(["readelf", "-d", library], capture_output=True, text=True)
    needed = [ln for ln in r.stdout.splitlines() if "(NEEDED)" in ln]
    assert needed and not any("onnxruntime" in ln for ln in needed), needed


def test_python_hooks_are_among_the_exports(library):
    """Every PlusEP_* function plus_ep/ep.py calls through ctypes is exported (the version script's glob)."""
    text = (ROOT / "plus_ep" / "ep.py").read_text()
    import re
    used = set(re.findall(r"lib\.(PlusEP_\w+)", text))
    assert used and used <= set(_dynamic_symbols(library)), used


def test_helpers_name_the_library_and_the_ep():
    assert plus_ep.get_ep_names() == ["PlusEP"] and plus_ep.get_ep_name() == "PlusEP"
    assert os.path.isabs(plus_ep.get_library_path()) and plus_ep.get_library_path().endswith(".so")
    native = (ROOT / "plus_ep" / "native" / "ep_base.h").read_text()
    assert f'#define PLUS_EP_NAME "{plus_ep.get_ep_name()}"' in native
    assert f'#define PLUS_EP_VERSION "{plus_ep.__version__}"' in native       # what ep_metadata["version"] shows


# ---------------------------------------------------------------- the host ONNX Runtime


def _site(tmp_path: Path, dists: dict[str, str], libs=("libonnxruntime.so.1.31.1",)) -> types.ModuleType:
    """A site-packages folder with an onnxruntime package and .dist-info folders for `dists` (name ->
    version), each of whose RECORD lists files in onnxruntime/capi/; a module object standing for it."""
    pkg = tmp_path / "onnxruntime"
    (pkg / "capi").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for lib in libs:
        (pkg / "capi" / lib).write_bytes(b"")
    for name, version in dists.items():
        info = tmp_path / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"onnxruntime/__init__.py,,\nonnxruntime/capi/{libs[0]},,\n")
    (tmp_path / "onnxruntime_genai-0.9.dist-info").mkdir()           # another ORT-named distribution, no capi files
    (tmp_path / "onnxruntime_genai-0.9.dist-info" / "RECORD").write_text("onnxruntime_genai/__init__.py,,\n")
    return types.SimpleNamespace(__version__="1.31.1", __file__=str(pkg / "__init__.py"))


def test_host_check_accepts_one_distribution(tmp_path):
    assert library.host_problem(_site(tmp_path, {"onnxruntime-gpu": "1.31.1"})) is None
    assert library.host_problem() is None            # this environment: onnxruntime-gpu 1.31.1 alone


def test_host_check_refuses_two_distributions_in_one_folder(tmp_path):
    problem = library.host_problem(_site(tmp_path, {"onnxruntime": "1.31.1", "onnxruntime-gpu": "1.31.1"}))
    assert problem and len(problem.splitlines()) == 1, problem
    assert "onnxruntime 1.31.1, onnxruntime-gpu 1.31.1" in problem and str(tmp_path / "onnxruntime") in problem
    assert "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu" in problem, problem


def test_host_check_refuses_two_libraries_in_capi(tmp_path):
    """One distribution on record but two ORT libraries in capi/ (a leftover of an overlaid install)."""
    mod = _site(tmp_path, {"onnxruntime": "1.31.1"}, libs=("libonnxruntime.so.1.31.1", "libonnxruntime.so.1.24.4"))
    problem = library.host_problem(mod)
    assert problem and len(problem.splitlines()) == 1, problem
    assert "(libonnxruntime.so.1.24.4, libonnxruntime.so.1.31.1)" in problem, problem
    assert "pip uninstall -y onnxruntime && pip install onnxruntime`" in problem, problem


def test_host_check_refuses_an_old_ort(tmp_path):
    mod = _site(tmp_path, {"onnxruntime": "1.24.4"})
    mod.__version__ = "1.24.4"
    problem = library.host_problem(mod)
    assert problem and len(problem.splitlines()) == 1
    assert "onnxruntime >= 1.25" in problem and "this is 1.24.4" in problem and "pip install -U" in problem


def test_import_refuses_with_one_warning_and_registers_nothing(tmp_path):
    """`import plus_ep` under a host ORT that cannot host it: one RuntimeWarning line with the fix, the EP
    not registered; plus_ep.register() raises the same line."""
    code = ("import warnings, onnxruntime as ort\n"
            "ort.__version__ = '1.24.4'\n"                  # what an old host ORT reports
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    import plus_ep\n"
            "print([str(x.message) for x in w if issubclass(x.category, RuntimeWarning)])\n"
            "print(any(d.ep_name == 'PlusEP' for d in ort.get_ep_devices()))\n"
            "try:\n    plus_ep.register()\nexcept RuntimeError as e:\n    print('raised', e)\n")
    r = _run(code, {"PLUS_EP_CUDA_LIBRARY": _emu()})
    warned, listed, raised = r.stdout.strip().splitlines()[-3:]
    problem = library.host_problem(types.SimpleNamespace(__version__="1.24.4", __file__=ort.__file__))
    assert warned == repr([problem]) and "this is 1.24.4" in problem, r.stdout + r.stderr[-2000:]
    assert listed == "False" and raised == f"raised {problem}", r.stdout



NO_ORT = "import sys\nsys.modules['onnxruntime'] = None\n"     # as if no ONNX Runtime were installed


def test_import_without_any_ort_is_silent_and_registers_nothing():
    """onnxruntime is an optional dependency (rewriting needs none): `import plus_ep` says nothing and
    registers nothing; plus_ep.register() raises ImportError."""
    code = NO_ORT + ("import warnings\n"
                     "with warnings.catch_warnings(record=True) as w:\n"
                     "    warnings.simplefilter('always')\n"
                     "    import plus_ep\n"
                     "print([str(x.message) for x in w])\n"
                     "try:\n    plus_ep.register()\nexcept ImportError:\n    print('ImportError')\n")
    r = _run(code, {})
    assert r.stdout.strip().splitlines()[-2:] == ["[]", "ImportError"], r.stdout + r.stderr[-2000:]
    assert "PlusEP" not in r.stderr, r.stderr


def test_cli_without_any_ort_prints_no_registration_line(tmp_path):
    """The CLI's first line of stderr is its own: no 'not registered' warning from `import plus_ep`."""
    code = NO_ORT + "import sys\nsys.argv = ['plus-ep', '--help']\nfrom plus_ep.cli import main\nmain()\n"
    e = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "PLUS_EP_"))}
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, env=e,
                       timeout=300, cwd=str(ROOT))
    assert "usage" in r.stdout and "Warning" not in r.stderr and "PlusEP" not in r.stderr, r.stdout + r.stderr


# ---------------------------------------------------------------- devices


def _emu() -> str:
    pytest.importorskip("cuda.bindings")
    from plus_ep.verification.emulator import library_path
    return library_path()


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}
    e.update(env)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    return r


DEVICES = r"""
import json, sys, numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper
import plus_ep
devs = [{"type": str(d.device.type), "meta": dict(d.ep_metadata), "hw_vendor_id": d.device.vendor_id}
        for d in ort.get_ep_devices() if d.ep_name == "PlusEP"]
vi = [helper.make_tensor_value_info(i, TensorProto.FLOAT, ["n"]) for i in ("X", "Y")]
g = helper.make_graph([helper.make_node("Add", ["X", "Y"], ["Z"])], "g", vi,
                      [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["n"])])
path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/_plus_ep_add.onnx"
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
P = ort.OrtExecutionProviderDevicePolicy
picked = {}
for name in ("PREFER_CPU", "DEFAULT", "PREFER_GPU"):
    so = ort.SessionOptions()
    so.set_provider_selection_policy(getattr(P, name))
    picked[name] = ort.InferenceSession(path, so).get_providers()
print(json.dumps({"devices": devs, "picked": picked, "listed": [d["mode"] for d in plus_ep.ep.devices()]}))
"""


def _devices(tmp_path, env) -> dict:
    code = DEVICES.replace('sys.argv[1] if len(sys.argv) > 1 else "/tmp/_plus_ep_add.onnx"', repr(str(tmp_path / "a.onnx")))
    return json.loads(_run(code, env).stdout.strip().splitlines()[-1])


def test_no_driver_no_device_and_no_policy_picks_plus_ep(tmp_path):
    res = _devices(tmp_path, {"PLUS_EP_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"})
    assert res["devices"] == [] and res["listed"] == [], res
    assert all(p == ["CPUExecutionProvider"] for p in res["picked"].values()), res


def test_emulated_driver_gpu_typed_device_with_metadata(tmp_path):
    res = _devices(tmp_path, {"PLUS_EP_CUDA_LIBRARY": _emu()})
    [d] = res["devices"]
    assert d["type"] == "OrtHardwareDeviceType.GPU" and d["hw_vendor_id"] == 0x10DE, d
    m = d["meta"]
    assert m["plus_ep.mode"] == "staging" and m["plus_ep.compute_capability"] == "9.0", m
    assert m["plus_ep.device_name"].startswith("PlusEP emulated GPU") and int(m["plus_ep.memory_bytes"]) > 0, m
    assert m["version"] == plus_ep.__version__ and m["plus_ep.cuda_ordinal"] == "0", m
    # ORT's automatic selection: a GPU-typed device is never chosen for PREFER_CPU or DEFAULT
    assert res["picked"]["PREFER_CPU"] == ["CPUExecutionProvider"], res
    assert res["picked"]["DEFAULT"] == ["CPUExecutionProvider"], res
    assert res["picked"]["PREFER_GPU"][0] == "PlusEP", res


def test_two_gpus_each_with_its_metadata(tmp_path, fake_cuda):
    res = _devices(tmp_path, {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "PLUS_EP_VIRTUAL_GPU": "1",
                              "FAKE_CUDA_DEVICES": "2", "FAKE_CUDA_CC": "80,90"})
    metas = [d["meta"] for d in res["devices"]]
    assert [m["plus_ep.mode"] for m in metas] == ["gpu", "gpu"], metas
    assert [m["plus_ep.device_name"] for m in metas] == ["Fake CUDA device 0", "Fake CUDA device 1"], metas
    assert [m["plus_ep.compute_capability"] for m in metas] == ["8.0", "9.0"], metas
    assert [int(m["plus_ep.memory_bytes"]) for m in metas] == [1 << 30, 2 << 30], metas
    assert all(d["type"] == "OrtHardwareDeviceType.GPU" for d in res["devices"])
    assert res["picked"]["PREFER_CPU"] == ["CPUExecutionProvider"], res


WARN = r"""
import onnxruntime as ort
if SEVERITY is not None:
    ort.set_default_logger_severity(SEVERITY)
import plus_ep
for again in ("PlusEP_again", "PlusEP_again2"):       # clients' own registrations (onnxruntime-genai, ...)
    ort.register_execution_provider_library(again, plus_ep.get_library_path())
for _ in range(3):
    ort.InferenceSession(PATH, providers=["CPUExecutionProvider"])
print("ok")
"""


@pytest.mark.parametrize("severity, shown", [(None, 1), (2, 1), (3, 0)])
def test_no_gpu_warning_once_per_process_at_ort_log_severity(tmp_path, severity, shown):
    """No device: one line through ORT's default logger when a client registers the library (as
    onnxruntime-genai and C hosts do), however often; ORT's log severity ERROR (3) silences it. The
    registration `import plus_ep` makes says it at INFO only (every Python process, the CLI's too)."""
    from onnx import TensorProto, helper
    path = tmp_path / "id.onnx"
    vi = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"])
    g = helper.make_graph([helper.make_node("Identity", ["X"], ["Z"])], "g", [vi],
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["n"])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
    code = WARN.replace("SEVERITY", repr(severity)).replace("PATH", repr(str(path)))
    r = _run(code, {"PLUS_EP_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"})
    ours = [ln for ln in (r.stderr + r.stdout).splitlines() if "PlusEP: no usable NVIDIA GPU" in ln]
    assert len(ours) == shown, r.stderr[-2000:]
    quiet = _run(code.replace("ort.register_execution_provider_library", "(lambda *a: None)"),
                 {"PLUS_EP_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"})
    assert "PlusEP: no usable NVIDIA GPU" not in quiet.stderr + quiet.stdout, quiet.stderr[-2000:]
    if shown:
        assert "[W:onnxruntime" in ours[0] and "/nonexistent/libcuda.so.1" in ours[0], ours


def test_stand_in_staging_device_is_gpu_typed_and_never_preferred_for_cpu(tmp_path, fake_cuda):
    """The stand-in driver without PLUS_EP_VIRTUAL_GPU: the staging device (host memory) is GPU-typed too."""
    res = _devices(tmp_path, {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)})
    [d] = res["devices"]
    assert d["type"] == "OrtHardwareDeviceType.GPU" and d["meta"]["plus_ep.mode"] == "staging", d
    assert d["meta"]["plus_ep.device_name"] == "Fake CUDA device 0", d
    assert res["picked"]["PREFER_CPU"] == ["CPUExecutionProvider"] == res["picked"]["DEFAULT"], res
