"""The Triton model repository example (docs/deploy/triton/): the script makes a rewritten model and a
config.pbtxt that parses as Triton's ModelConfig (protobuf text format, tests/support/triton_config.py),
names the custom-op library, and declares exactly the model's inputs and outputs; the checked-in example
config is the script's current output; the rewritten model loads and runs in ONNX Runtime with the
library registered, as Triton's onnxruntime backend does (on the CPU here: no Triton server, no GPU)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf import text_format

from tests.support.triton_config import parse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "deploy" / "triton"
LIBRARY = "/opt/plus_ep/_launcher.so"          # the path the checked-in example names (inside the container)


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    out = tmp_path_factory.mktemp("triton")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(EXAMPLE / "make_repository.py"), str(out), "--arch", "none",
                        "--library", LIBRARY], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return out / "plus_bert"


def test_config_parses_and_matches_the_model(repository):
    text = (repository / "config.pbtxt").read_text()
    cfg = parse(text)
    model = onnx.load(repository / "1" / "model.onnx")
    assert any(n.domain == "ai.plus_ep" for n in model.graph.node)            # a rewritten model
    assert cfg.backend == "onnxruntime" and cfg.name == "plus_bert" and cfg.max_batch_size == 0
    assert list(cfg.model_operations.op_library_filename) == [LIBRARY]
    assert [(i.name, list(i.dims)) for i in cfg.input] == [("input_ids", [-1, -1]), ("attention_mask", [-1, -1])]
    assert [i.name for i in cfg.output] == [o.name for o in model.graph.output]
    assert cfg.instance_group[0].kind == 1 and cfg.instance_group[0].count == 1           # KIND_GPU
    # what the checked-in example shows is what the script writes
    assert (EXAMPLE / "model_repository" / "plus_bert" / "config.pbtxt").read_text() == text


@pytest.mark.parametrize("bad", ["backend: onnxruntime", "model_operations { op_library: \"x\" }",
                                 "input [ { name: \"x\" data_type: TYPE_FLOAT32 } ]", "max_batch_size: \"0\""])
def test_the_schema_rejects_what_triton_would(bad):
    with pytest.raises(text_format.ParseError):
        parse(bad)


def test_the_rewritten_model_runs_with_the_library(repository):
    import onnxruntime as ort

    import plus_ep
    from plus_ep.demo_model import sample_inputs
    so = ort.SessionOptions()
    so.register_custom_ops_library(plus_ep.get_library_path())
    sess = ort.InferenceSession(str(repository / "1" / "model.onnx"), so, providers=["CPUExecutionProvider"])
    cfg = parse((repository / "config.pbtxt").read_text())
    feeds = sample_inputs(batch=2, seq=7, vocab=100)
    assert sorted(feeds) == sorted(i.name for i in cfg.input)
    (out,) = sess.run([cfg.output[0].name], feeds)
    assert out.shape == (2, 7, 64) and np.isfinite(out).all()
