"""What a user meets around the kernels (issue 26): --version, the cache command, progress (-q, -v, a
terminal or not), one-line errors with exit 2 (bad --inputs, IR versions onnxruntime cannot load, bad
options the same way in the CLI, the session wrapper and the plugin EP's C factory), accurate hints,
the package's metadata."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from plus_ep import cli, config, options, progress, session
from plus_ep.validate import for_runtime, min_ir_version, runtime_limits
from tests.support.graphs import Graph

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv, env=None):
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "plus_ep", *argv], capture_output=True, text=True, env=e,
                          timeout=300)


def softmax_model(ir_version: int | None, opset: int = 17, **kw) -> onnx.ModelProto:
    g = Graph("sm", opset=opset, ir_version=ir_version)
    x = g.input("X", ["B", 16])
    g.op("Softmax", g.op("Mul", x, g.init("s", np.float32(0.7))), out="Y", axis=-1)
    g.output("Y", ["B", 16])
    return g.model()


# --------------------------------------------------------------------------------- version, help
def test_version_and_cache_help():
    r = run_cli("--version")
    assert r.returncode == 0 and re.fullmatch(r"plus-ep \d+\.\d+\.\d+ \(onnxruntime [\d.]+, onnx [\d.]+, "
                                              r"Python [\d.]+\)\n", r.stdout), r.stdout + r.stderr
    from plus_ep import __version__
    assert __version__ in r.stdout
    h = run_cli("cache", "--help")
    assert h.returncode == 0 and all(w in h.stdout for w in ("info", "clear", "trim", "PLUS_EP_KERNEL_CACHE_LIMIT"))
    top = run_cli("--help").stdout + run_cli("rewrite", "--help").stdout
    assert "zoo:FAMILY[/EXPORTER][@SIZE]" in top and "gpt2" in top and "dynamo" in top


def test_package_metadata():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (ROOT / "LICENSE").read_text().startswith("\n                                 Apache License")
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]
    readme = ROOT / meta["readme"]["file"]
    assert len(readme.read_text().splitlines()) < 40 and "README.md" in readme.read_text()
    deps = [re.split(r"[<>=\[ ]", d)[0] for d in meta["dependencies"]]
    assert "onnx-graphsurgeon" not in deps and "tqdm" in deps
    # every required dependency is used by the package: imported, or (the NVIDIA wheels, NVRTC and the CUDA
    # headers) found by kernels/compile/nvrtc.py through cuda-python's path finder and the wheel's version
    uses = {"onnxruntime-gpu": r"^\s*import onnxruntime", "cuda-python": r"^\s*from cuda[. ]",
            "nvidia-cuda-nvrtc": r'version\("nvidia-cuda-nvrtc"\)',
            "nvidia-cuda-runtime": r'find_nvidia_header_directory\("cudart"\)'}
    text = "\n".join(p.read_text() for d in ("plus_ep", "kernels", "graph_rewrites", "warehouse")
                     for p in (ROOT / d).rglob("*.py"))
    for d in deps:
        assert re.search(uses.get(d, rf"^\s*(import|from) {d}\b"), text, re.M), f"{d} is never used"


# ------------------------------------------------------------------------------------------ cache
def test_cache_info_clear_and_sizes(tmp_path, capsys, monkeypatch):
    env_root = tmp_path / "root"
    monkeypatch.setenv("PLUS_EP_CACHE_DIR", str(env_root))
    monkeypatch.delenv("PLUS_EP_ZOO_DIR", raising=False)         # never the shared zoo
    if True:
        (env_root / "kernels" / "ab" / ("ab" + "0" * 62)).mkdir(parents=True)
        (env_root / "kernels" / "ab" / ("ab" + "0" * 62) / "meta.json").write_bytes(b"x" * 3000)
        (env_root / "models").mkdir()
        (env_root / "models" / "k.onnx").write_bytes(b"m" * 5000)
        (env_root / "models" / "k.json").write_text("{}")
        assert config.zoo_dir() == env_root / "zoo"
        (env_root / "zoo").mkdir()
        (env_root / "zoo" / "bert.onnx").write_bytes(b"z" * 7000)
        assert cli.main(["cache", "info", "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        kinds = info["kinds"]
        assert kinds["kernels"]["bytes"] == 3000 and kinds["kernels"]["entries"] == 1
        assert kinds["models"]["bytes"] == 5002 and kinds["models"]["entries"] == 1
        assert kinds["zoo"]["bytes"] == 7000 and kinds["zoo"]["limit"] is None
        assert kinds["kernels"]["limit"] == 2 << 30 and info["bytes"] == 15002
        assert cli.main(["cache", "info"]) == 0 and "models" in capsys.readouterr().out
        assert cli.main(["cache", "clear", "bogus"]) == 2
        assert "unknown kind 'bogus'" in capsys.readouterr().err
        assert cli.main(["cache", "clear", "models"]) == 0
        assert not list((env_root / "models").iterdir()) and (env_root / "zoo" / "bert.onnx").exists()
        assert cli.main(["cache", "clear"]) == 0
        assert not (env_root / "zoo" / "bert.onnx").exists() and not list((env_root / "kernels").glob("ab/*"))


def test_size_variables():
    assert config.parse_size("2G") == 2 << 30 and config.parse_size("500M") == 500 << 20
    assert config.parse_size("1.5GiB") == 3 << 29 and config.parse_size("123") == 123
    with pytest.raises(ValueError, match="not a size"):
        config.parse_size("lots")


# --------------------------------------------------------------------------------------- progress
class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_modes(monkeypatch):
    import time
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    for mode, stream, want in (("auto", io.StringIO(), "off"), ("auto", _Tty(), "bar"), ("quiet", _Tty(), "off"),
                               ("lines", io.StringIO(), "lines")):
        progress.set_mode(mode)
        try:
            assert progress.resolve(None, stream) == want
            with progress.bar("compiling kernels", total=3, unit="kernels", stream=stream) as b:
                for k in range(3):
                    b.update(note=f"sm_{80 + k}")
            with progress.task("zoo: exporting bert", stream=stream):
                time.sleep(0.01)
        finally:
            progress.set_mode("auto")
        text = stream.getvalue()
        if want == "off":
            assert text == "", (mode, text)
        elif want == "bar":
            assert "compiling kernels" in text and "zoo: exporting bert" in text
        else:   # -v: plain lines as it goes, no carriage returns
            assert "compiling kernels: 1/3 kernels (sm_80)" in text and "compiling kernels: 3/3 kernels (sm_82)" in text
            assert "zoo: exporting bert ..." in text and "zoo: exporting bert: done in" in text and "\r" not in text
    assert progress.resolve(False, _Tty()) == "off" and progress.resolve(True, io.StringIO()) == "bar"


def test_cli_flags_set_the_progress_mode(tmp_path, capsys):
    src = tmp_path / "sm.onnx"
    onnx.save(softmax_model(10), src)
    for flags, want in ((["-q"], "quiet"), (["-v"], "lines"), ([], "auto")):
        seen = {}
        orig = progress.set_mode
        progress.set_mode = lambda m, seen=seen: (seen.setdefault("mode", m), orig(m))
        try:
            assert cli.main([*flags, "inspect", str(src)]) == 0
        finally:
            progress.set_mode = orig
            progress.set_mode("auto")
        assert seen["mode"] == want
    capsys.readouterr()


# ------------------------------------------------------------------------------- errors and hints
def test_bad_inputs_are_one_line_exit_2(tmp_path):
    """verify --inputs with a wrong name, a wrong dtype, a file that is not .npz: one line, exit 2."""
    import plus_ep
    model = tmp_path / "sm.plus.onnx"
    onnx.save(plus_ep.rewrite(softmax_model(10), archs=["sm_80"]), model)
    np.savez(tmp_path / "wrong_name.npz", Z=np.zeros((2, 16), np.float32))
    np.savez(tmp_path / "wrong_dtype.npz", X=np.zeros((2, 16), np.int32))
    (tmp_path / "junk.npz").write_text("not a zip")
    for f in ("wrong_name.npz", "wrong_dtype.npz", "junk.npz"):
        r = run_cli("verify", str(model), "--inputs", str(tmp_path / f))
        assert r.returncode == 2, (f, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("plus-ep: error: --inputs"), (f, r.stderr)
        assert "internal error" not in r.stderr


def test_ir14_model_rewrites_to_a_loadable_ir(tmp_path, capsys, monkeypatch):
    import onnxruntime as ort

    from plus_ep import validate
    ir, opset = runtime_limits()
    src, out = tmp_path / "ir14.onnx", tmp_path / "ir14.plus.onnx"
    onnx.save(softmax_model(onnx.IR_VERSION), src)
    assert onnx.load(src).ir_version == onnx.IR_VERSION
    if ir < onnx.IR_VERSION:
        with pytest.raises(Exception):           # what the issue saw: the original is refused
            ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    else:       # this onnxruntime loads onnx's newest IR (1.32 does): as if it stopped one below, as 1.31 does
        ir = onnx.IR_VERSION - 1
        monkeypatch.setattr(validate, "_RUNTIME_LIMITS", [(ir, opset)])
    assert cli.main(["rewrite", str(src), "-o", str(out), "--arch", "none"]) == 0
    got = onnx.load(out)
    assert got.ir_version == ir < onnx.IR_VERSION
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    y = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    e = np.exp(0.7 * x - (0.7 * x).max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    capsys.readouterr()


def test_ir_that_cannot_be_lowered_is_one_line(tmp_path, capsys):
    ir, _ = runtime_limits()
    m = softmax_model(onnx.IR_VERSION)
    m.graph.initializer.append(helper.make_tensor("f6", 27, [1], [0]))           # FLOAT6E2M3: IR 14
    assert min_ir_version(m) == (14, "its FLOAT6E2M3 tensors")
    if ir >= 14:
        pytest.skip("this onnxruntime loads IR 14")
    with pytest.raises(ValueError, match=rf"need IR >= 14, but the installed onnxruntime .* up to {ir}"):
        for_runtime(m, "m.onnx")
    src = tmp_path / "f6.onnx"
    onnx.save(m, src)
    assert cli.main(["rewrite", str(src), "-o", str(tmp_path / "o.onnx"), "--arch", "none"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "IR >= 14" in err and not (tmp_path / "o.onnx").exists()


def test_unwritable_output_names_out_not_the_temporary(tmp_path, capsys):
    src = tmp_path / "sm.onnx"
    onnx.save(softmax_model(10), src)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who writes read-only folders (root)")
        assert cli.main(["rewrite", str(src), "-o", str(ro / "out.onnx"), "--arch", "none"]) == 2
    finally:
        ro.chmod(0o700)
    err = capsys.readouterr().err
    assert "out.onnx" in err and ".tmp" not in err and ".plus-ep-" not in err


def test_save_errors_name_out(tmp_path, monkeypatch):
    """The hidden temporary never reaches the message (also as root, where folders are always writable)."""
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".plus-ep-abc.onnx.tmp"))
    monkeypatch.setattr(cli.tempfile, "mkstemp", refuse)
    with pytest.raises(OSError) as e:
        cli.save_model(softmax_model(10), str(tmp_path / "out.onnx"))
    assert e.value.filename == str(tmp_path / "out.onnx") and ".tmp" not in cli._os_message(e.value)


def test_hints_are_runnable():
    """Every `plus-ep rewrite` a message suggests carries -o (required); no hint installs plus-ep from an index."""
    bad = []
    for folder in ("plus_ep", "kernels", "graph_rewrites", "warehouse"):
        for p in (ROOT / folder).rglob("*"):
            if p.suffix not in (".py", ".c") or "__pycache__" in p.parts:
                continue
            for line in p.read_text().splitlines():      # messages: the hint inside a string literal
                for m in re.finditer(r"`plus-ep rewrite ([^`]*)`", line):
                    if '"' in line[:m.start()] and " -o " not in f" {m.group(1)} ":
                        bad.append(f"{p.relative_to(ROOT)}: {m.group(0)}")
            if re.search(r"pip install ['\"]?plus-ep", p.read_text()):
                bad.append(f"{p.relative_to(ROOT)}: pip install plus-ep (not on an index)")
    assert bad == []


# ------------------------------------------------------------------------------ options, one way
BAD = [({"bogus": "1"}, "unknown PlusEP provider option 'bogus'"),
       ({"arch": "sm_42"}, "PlusEP provider option arch='sm_42': use 'sm_80'"),
       ({"disable": "nope"}, "PlusEP provider option disable='nope': unknown pattern 'nope'"),
       ({"fp32_math": "fast"}, "PlusEP provider option fp32_math='fast': use"),
       ({"verify": "yes"}, "PlusEP provider option verify='yes': use '1' or '0'"),
       ({"cuda_graph_warmup": "-1"}, "cuda_graph_warmup='-1'")]


@pytest.mark.parametrize("opts, needle", BAD)
def test_bad_options_same_text_python_and_c(opts, needle, tmp_path):
    """options.check, the session wrapper and the plugin EP's factory (on the emulated driver's device, which
    reads the options before any kernel) refuse a bad option with the same line. Through
    SessionOptions.add_provider_for_devices, onnxruntime up to 1.31 does not raise: its Python wrapper prints
    its "EP Error" banner with the line and falls back to the CPU EP (its behaviour for any EP that fails);
    1.32 raises with the line (docs/guide/integrations.md)."""
    with pytest.raises(ValueError, match=re.escape(needle)):
        options.check(opts)
    with pytest.raises(ValueError, match=re.escape(needle)):
        session._split_providers([("PlusEP", opts)], None)
    model = tmp_path / "m.onnx"
    onnx.save(softmax_model(10), model)
    code = ("import json, sys, onnxruntime as ort, plus_ep\n"
            "so = ort.SessionOptions()\n"
            "devs = [d for d in ort.get_ep_devices() if d.ep_name == 'PlusEP']\n"
            "so.add_provider_for_devices(devs, json.loads(sys.argv[2]))\n"
            "try:\n    s = ort.InferenceSession(sys.argv[1], sess_options=so)\n    print('session', s.get_providers())\n"
            "except Exception as e:\n    print('raised', str(e))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUS_EP_") or k == "PLUS_EP_CACHE_DIR"}
    from plus_ep.verification.emulator import library_path
    env.update(PLUS_EP_CUDA_LIBRARY=library_path(),
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code, str(model), json.dumps(opts)], capture_output=True, text=True,
                       env=env, timeout=120)
    out = r.stdout
    import onnxruntime as ort
    if tuple(int(x) for x in ort.__version__.split(".")[:2]) >= (1, 32):      # the session refuses, naming it
        assert out.startswith("raised ") and needle in out and "session [" not in out, (out, r.stderr[-2000:])
        return
    assert needle in out and "EP Error" in out and "Falling back to ['CPUExecutionProvider']" in out, (out, r.stderr[-2000:])
    assert out.strip().splitlines()[-1] == "session ['CPUExecutionProvider']", out     # fell back, did not raise


def test_the_cli_refuses_the_same(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(softmax_model(10), src)
    for argv, needle in ((["--disable", "nope"], "--disable: unknown pattern 'nope'"),
                         (["--arch", "sm_42"], "--arch: unsupported GPU architecture 'sm_42'")):
        assert cli.main(["rewrite", str(src), "-o", str(tmp_path / "o.onnx"), *argv]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err


def test_the_c_factory_knows_the_archs():
    from plus_ep.kernels.arch import ARCHS
    text = (ROOT / "plus_ep" / "native" / "ep_factory.c").read_text()
    listed = re.search(r"ARCH_NAMES\[\] = \{([^}]*)\}", text).group(1)
    assert tuple(re.findall(r'"(\w+)"', listed)) == ARCHS
    assert options.DEFAULT_ARCHS == ("sm_80", "sm_90a") and set(options.DEFAULT_ARCHS) <= set(ARCHS)
    assert options.disabled({"disable": "all"}) == tuple(sorted(p.name for p in __import__(
        "plus_ep.warehouse", fromlist=["default_warehouse"]).default_warehouse()))
