"""Tiny local models for the client-library tests (tests/emulated/test_clients.py), made without any hub
download: random-weight transformers models from configs, exported by the clients' own tools.

    python -m tests.support.client_models OUT    # writes OUT/bert, OUT/llama, OUT/genai; prints OUT's manifest

- `bert/`: a 1-layer BERT (hidden 32, 2 heads) with a WordPiece tokenizer made from a word list, saved
  by transformers and exported by Optimum (`main_export`, task feature-extraction) into `bert/onnx/`:
  what sentence-transformers (`backend="onnx"`) and `ORTModelForFeatureExtraction` load.
- `llama/`: a 1-layer Llama (hidden 32, 2 heads, 1 KV head) exported by Optimum with past key values
  (task text-generation-with-past): what `ORTModelForCausalLM.generate` runs.
- `genai/`: plus_ep.zoo.ortopt's onnxruntime-genai-form decoder (float32, int4 MatMulNBits, GroupQueryAttention)
  with the `genai_config.json` onnxruntime-genai reads.
Needs the clients' environment (torch, transformers < 4.58, optimum-onnx): run it with that interpreter.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

WORDS = ("the a of to and in is it you that he was for on are with as his they be at one have this from or had "
         "by hot word but what some we can out other were all there when up use your how said an each she which "
         "do their time if will way about many then them write would like so these her long make thing see him "
         "two has look more day could go come did number sound no most people my over know water than call first "
         "who may down side been now find").split()
SENTENCES = ["the water is hot", "a word of people", "how many time did he come", "no"]
GENAI = dict(layers=1, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=256, max_len=64, dtype="float32")


def bert(out: Path) -> Path:
    import torch
    from optimum.exporters.onnx import main_export
    from transformers import BertConfig, BertModel, BertTokenizerFast
    d = out / "bert"
    d.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    BertModel(cfg).eval().save_pretrained(d)
    BertTokenizerFast(vocab_file=str(d / "vocab.txt")).save_pretrained(d)
    main_export(str(d), output=str(d / "onnx"), task="feature-extraction")
    return d


def llama(out: Path) -> Path:
    import torch
    from optimum.exporters.onnx import main_export
    from transformers import LlamaConfig, LlamaForCausalLM
    d = out / "llama"
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():   # weights large enough that greedy tokens do not hang on rounding ties
        for p in model.parameters():
            p.mul_(4.0) if p.dim() > 1 else None
    model.save_pretrained(d)
    main_export(str(d), output=str(d / "onnx"), task="text-generation-with-past")
    for f in ("config.json", "generation_config.json"):
        if (d / f).exists() and not (d / "onnx" / f).exists():
            shutil.copy(d / f, d / "onnx" / f)
    return d / "onnx"


def genai(out: Path) -> Path:
    import onnx

    from plus_ep.zoo.ortopt import genai_llama
    d = out / "genai"
    d.mkdir(parents=True, exist_ok=True)
    src = genai_llama(**GENAI, cache_dir=out / "zoo")
    onnx.save(onnx.load(src), d / "model.onnx")
    g = GENAI
    config = {
        "model": {
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "type": "llama",
            "context_length": g["max_len"], "vocab_size": g["vocab"],
            "decoder": {
                "filename": "model.onnx", "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "head_size": g["hidden"] // g["heads"], "hidden_size": g["hidden"],
                "num_attention_heads": g["heads"], "num_key_value_heads": g["kv_heads"],
                "num_hidden_layers": g["layers"],
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
            },
        },
        "search": {"do_sample": False, "num_beams": 1, "max_length": 24, "min_length": 0, "past_present_share_buffer": False,
                   "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 1, "top_p": 1.0},
    }
    (d / "genai_config.json").write_text(json.dumps(config, indent=1))
    return d


KINDS = {"st": "sentence_transformers", "optimum": "optimum.onnxruntime", "generate": "optimum.onnxruntime",
         "genai": "onnxruntime_genai"}      # client run kind (tests/support/client_runs.py) -> what it imports


def clients_python() -> str:
    """The interpreter of the clients' environment: PLUS_EP_CLIENTS_PYTHON, else this one."""
    from plus_ep import config
    return config.get("PLUS_EP_CLIENTS_PYTHON") or sys.executable


def missing(python: str, module: str) -> str | None:
    """Why `python` cannot import `module` (its last error line), or None."""
    import subprocess
    r = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=300)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1]


def build(out: Path, python: str | None = None, timeout: int = 900) -> dict:
    """Every model into `out` by a child of the clients' interpreter; the manifest {name: path}."""
    import subprocess
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p))
    r = subprocess.run([python or clients_python(), "-m", "tests.support.client_models", str(out)], cwd=root, env=env,
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"building the client models failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
    return json.loads((out / "manifest.json").read_text())


def run(kind: str, out: Path, python: str | None = None, timeout: int = 600, env_extra: dict | None = None):
    """One client run (tests/support/client_runs.py KIND) in a fresh process on the emulated driver:
    (CompletedProcess, its JSON line or None)."""
    import subprocess

    from tests.support.emulated_models import ROOT, child_env
    env = child_env({"HF_HUB_OFFLINE": "1", **(env_extra or {})})
    r = subprocess.run([python or clients_python(), "-m", "tests.support.client_runs", kind, str(out / "manifest.json")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    return r, (json.loads(lines[-1]) if lines else None)


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path((argv or sys.argv[1:])[0])
    made = {"bert": str(bert(out)), "llama": str(llama(out)), "genai": str(genai(out))}
    (out / "manifest.json").write_text(json.dumps(made))
    print(json.dumps(made))
    return 0


if __name__ == "__main__":
    sys.exit(main())
