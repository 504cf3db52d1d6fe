"""One client library run with PlusEP on the emulated CUDA driver, against the same client on ORT's CPU
provider, in this process (start it with PLUS_EP_CUDA_LIBRARY naming the emulated driver, in the
clients' environment; tests/emulated/test_clients.py does):

    python -m tests.support.client_runs KIND MANIFEST    # KIND: st | optimum | generate | genai

Prints one JSON line: `launches` (kernels run on the PTX interpreter), `errors` (interpreter errors or
checker findings), `nodes` (fused nodes that launched), `tol` (the model tolerance of the loosest math
the launched kernels used, plus_ep/verification/tolerances.py) and what the client returned both ways.
The Emulator attaches first: PlusEP's planner (plus_ep/ep.py) rewrites each raw model the client hands
ONNX Runtime and registers its packs with the emulator.
"""
from __future__ import annotations

import json
from collections import Counter
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from plus_ep.verification.emulator import Emulator  # noqa: E402

emu = Emulator.get()

import numpy as np  # noqa: E402

import plus_ep  # noqa: E402,F401  - registers "PlusEP" with onnxruntime
from tests.support.client_models import SENTENCES  # noqa: E402


def _kernels() -> dict:
    from plus_ep.verification.tolerances import node_math, tolerance
    ran = {r.module for r in emu.records}
    maths = sorted({node_math(emu.registry[key].ptx if key in emu.registry else "", []) for h, key in emu.load_order
                    if h in ran} or {"exact"})
    return {"launches": len(emu.records), "errors": [r.error or r.findings[0] for r in emu.records
                                                     if r.error or r.findings][:5],
            "nodes": sorted({r.node for r in emu.records}), "maths": maths,
            "per_node": dict(Counter(r.node for r in emu.records)),
            "tol": max(tolerance(m, np.dtype(np.float32), kind="model") for m in maths)}


def st(m: dict) -> dict:
    from sentence_transformers import SentenceTransformer

    def encode(provider):
        model = SentenceTransformer(m["bert"], backend="onnx", device="cpu", model_kwargs={"provider": provider})
        return model.encode(SENTENCES)
    want = encode("CPUExecutionProvider")
    emu.reset_records()
    got = encode("PlusEP")
    cos = [float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(got, want)]
    return {"max_abs": float(np.abs(got - want).max()), "min_cos": min(cos), "shape": list(got.shape)}


def optimum(m: dict) -> dict:
    from optimum.onnxruntime import ORTModelForFeatureExtraction
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(m["bert"])
    feeds = tok(SENTENCES, padding=True, return_tensors="np")

    def run(provider):
        model = ORTModelForFeatureExtraction.from_pretrained(m["bert"], subfolder="onnx", provider=provider)
        assert model.providers[0] == provider, model.providers
        return model(**feeds).last_hidden_state
    want = run("CPUExecutionProvider")
    emu.reset_records()
    got = np.asarray(run("PlusEP"))
    return {"max_abs": float(np.abs(got - np.asarray(want)).max()), "shape": list(got.shape)}


def generate(m: dict) -> dict:
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM
    ids = torch.tensor([[0, 0, 1, 17, 42, 9], [1, 5, 77, 3, 64, 100]])    # left padding in row 0
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])

    def run(provider):
        model = ORTModelForCausalLM.from_pretrained(m["llama"], provider=provider, use_cache=True)
        assert model.use_cache and model.providers[0] == provider, model.providers
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                              pad_token_id=0, eos_token_id=None).tolist()
    want = run("CPUExecutionProvider")
    emu.reset_records()
    return {"tokens": run("PlusEP"), "want": want}


def genai(m: dict) -> dict:
    import onnxruntime_genai as og
    name = plus_ep.get_library_path()
    try:
        og.register_execution_provider_library("PlusEP", name)
    except Exception as e:  # noqa: BLE001 - `import plus_ep` may have registered it in the shared OrtEnv
        if "already" not in str(e).lower():
            raise
    prompt = [1, 17, 42, 9, 120, 33]

    def run(provider):
        cfg = og.Config(m["genai"])
        cfg.clear_providers()
        if provider:
            cfg.append_provider(provider)
        model = og.Model(cfg)
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + 8, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(prompt)
        while not gen.is_done():
            gen.generate_next_token()
        return [int(t) for t in gen.get_sequence(0)]
    want = run(None)                       # no provider: ORT's CPU provider
    emu.reset_records()
    return {"tokens": run("PlusEP"), "want": want}


def main(argv=None) -> int:
    kind, manifest = (argv or sys.argv[1:])[:2]
    m = json.loads(open(manifest).read())
    out = {"kind": kind, **globals()[kind](m)}
    out.update(_kernels())
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
