"""Greedy generation of a decoder exported with past key/values, through a rewritten model's kernels on the
PTX interpreter, against the original model on ONNX Runtime's CPU EP.

    from plus_ep.verification.generate import generate, generate_text
    rep = generate("llama.onnx", "llama.plus.onnx", prompts=[[5, 9, 2, 7], [3, 1]], steps=24)
    rep["ok"], rep["tokens"], rep["steps"]           # every step: past length, logits error, launches
    print(generate_text(rep))

The model is one graph for prefill and decode, with Optimum's names: inputs `input_ids [batch, seq]`,
`attention_mask [batch, past + seq]`, optionally `position_ids [batch, seq]`, and per layer
`past_key_values.{i}.key/.value [batch, kv_heads, past, head_dim]`; outputs `logits [batch, seq, vocab]`
and `present.{i}.key/.value`. The prompts are left-padded to one length (as transformers' generate pads
a batch for a decoder); positions count the unpadded tokens. Step 0 is the prefill (past 0); each later
step feeds the previous step's greedy tokens with the presents as the past.

The reference loop runs the original model with stock `onnxruntime.InferenceSession` on the CPU; the
kernel loop runs the rewritten model with stock `onnxruntime.InferenceSession` and PlusEP's launcher
library (`SessionOptions.register_custom_ops_library`) on the emulated CUDA driver, in a child process
(the launcher reads PLUS_EP_CUDA_LIBRARY once), for each arch of its packs. It passes when the tokens are
identical, every step's logits are within `plus-ep verify`'s model-output tolerance of the reference's
(while the tokens agree the two loops see the same inputs), every fused node launched its kernels at
every step, and no launch reported a checker finding. Nothing here is timed on a GPU.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from .tolerances import compare, tolerance

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


@dataclass
class DecoderIO:
    """What a greedy loop needs of a decoder's graph inputs."""
    past_names: list            # past_key_values.{i}.key/.value in layer order
    present_names: list         # present.{i}.key/.value, same order
    kv_heads: int
    head_dim: int
    dtype: object               # numpy dtype of the cache
    positions: bool             # the graph takes position_ids


def decoder_io(model: onnx.ModelProto) -> DecoderIO:
    """The decoder-with-past inputs of `model`, or ValueError naming what is missing."""
    inits = {t.name for t in model.graph.initializer}
    ins = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    outs = {vi.name for vi in model.graph.output}
    pasts = sorted(((int(m.group(1)), m.group(2) == "value"), n) for n in ins if (m := _PAST.match(n)))
    missing = [n for n in ("input_ids", "attention_mask") if n not in ins]
    if missing or not pasts or "logits" not in outs:
        raise ValueError("not a decoder exported with past key/values: it needs inputs input_ids, attention_mask "
                         "and past_key_values.{i}.key/.value and the output logits (Optimum's names); missing: "
                         + ", ".join(missing + ([] if pasts else ["past_key_values.*"])
                                     + ([] if "logits" in outs else ["logits"])))
    past_names = [n for _, n in pasts]
    present_names = [n.replace("past_key_values.", "present.") for n in past_names]
    absent = [n for n in present_names if n not in outs]
    if absent:
        raise ValueError(f"the model has no outputs {', '.join(absent[:3])} for its past inputs")
    tt = ins[past_names[0]].type.tensor_type
    dims = tt.shape.dim
    if len(dims) != 4 or not (dims[1].HasField("dim_value") and dims[3].HasField("dim_value")):
        raise ValueError(f"{past_names[0]}: expected [batch, kv_heads, past, head_dim] with static heads and head dim")
    return DecoderIO(past_names, present_names, int(dims[1].dim_value), int(dims[3].dim_value),
                     np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)), "position_ids" in ins)


def greedy(run, io: DecoderIO, prompts: list, steps: int, pad_id: int = 0, on_step=None) -> np.ndarray:
    """Greedy generation of `steps` tokens (the prefill makes the first) for a batch of prompts, left-padded
    to one length, through `run(feeds) -> {output name: array}`. `on_step(k, past, feeds, outputs)` sees every
    step (k = 0: the prefill). Returns the new tokens [batch, steps]."""
    batch, longest = len(prompts), max(len(p) for p in prompts)
    if min(len(p) for p in prompts) < 1:
        raise ValueError("every prompt needs at least one token")
    ids = np.full((batch, longest), pad_id, np.int64)
    mask = np.zeros((batch, longest), np.int64)
    for b, p in enumerate(prompts):
        ids[b, longest - len(p):] = p
        mask[b, longest - len(p):] = 1
    past = {n: np.zeros((batch, io.kv_heads, 0, io.head_dim), io.dtype) for n in io.past_names}
    out = []
    for k in range(steps):
        feeds = {"input_ids": ids, "attention_mask": mask, **past}
        if io.positions:
            pos = np.cumsum(mask, axis=1) - 1
            feeds["position_ids"] = np.where(mask == 0, 1, pos)[:, mask.shape[1] - ids.shape[1]:].astype(np.int64)
        got = run(feeds)
        if on_step is not None:
            on_step(k, mask.shape[1] - ids.shape[1], feeds, got)
        nxt = np.argmax(got["logits"][:, -1, :], axis=-1).astype(np.int64)
        out.append(nxt)
        past = {n: got[p] for n, p in zip(io.past_names, io.present_names)}
        ids = nxt[:, None]
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
    return np.stack(out, axis=1)


def _reference(original: str, io: DecoderIO, prompts, steps: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(original, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    logits = []
    tokens = greedy(lambda f: dict(zip(names, sess.run(None, f))), io, prompts, steps,
                    on_step=lambda k, past, f, got: logits.append(got["logits"]))
    return tokens, logits


def _launcher_run(request: dict) -> dict:
    """The child process: the kernel loop per arch, compared step by step with the reference's logits."""
    import onnxruntime as ort

    from ..library import get_library_path
    from .emulator import Emulator
    from .run import _attribute, _node_math
    model = onnx.load(request["model"])
    io = decoder_io(model)
    prompts, steps = request["prompts"], request["steps"]
    ref = np.load(request["reference"])
    ref_tokens, ref_logits = ref["tokens"], [ref[f"logits{k}"] for k in range(steps)]
    fused = [n for n in model.graph.node if n.domain == "ai.plus_ep"]
    emu = Emulator.get()
    emu.register_model(model, archs=request["archs"])
    emu.fail_on_findings = False
    result = {"archs": []}
    for arch in request["archs"]:
        emu.set_arch(arch)
        emu.reset_records()
        maths = {_node_math(n, arch) for n in fused}
        order = ["exact", "tf32", "fp16", "bf16"]
        math = max(maths or {"exact"}, key=order.index)
        tol = tolerance(math, io.dtype, kind="model")
        so = ort.SessionOptions()
        so.register_custom_ops_library(get_library_path())
        so.add_session_config_entry("plus_ep.trust", "any")   # the PTX interpreter only: no device code runs
        so.log_severity_level = 3
        sess = ort.InferenceSession(request["model"], so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        rows, start = [], [0]

        def run(f, sess=sess, names=names, start=start):
            start[0] = len(emu.records)       # the launcher loads each module once: keep the load order
            return dict(zip(names, sess.run(None, f)))

        def on_step(k, past, f, got, rows=rows, tol=tol, arch=arch, start=start):
            recs = emu.records[start[0]:]
            owner = _attribute(emu.load_order, fused, arch)
            nodes = {owner.get(r.module, r.node) for r in recs}
            c = compare(got["logits"], ref_logits[k]) if k < len(ref_logits) else {"rel": float("inf")}
            rows.append({"step": k, "past": int(past), "seq": int(f["input_ids"].shape[1]),
                         "launches": len(recs), "nodes_launched": len([n for n in fused if n.name in nodes]),
                         "findings": sum(len(r.findings) for r in recs),
                         "errors": [r.error for r in recs if r.error][:2],
                         "logits_rel": float(c["rel"]), "tol": tol,
                         "seconds": round(sum(r.seconds for r in recs), 2)})
        error = None
        try:
            tokens = greedy(run, io, prompts, steps, on_step=on_step)
        except Exception as e:  # noqa: BLE001 - reported with the step it stopped at
            error, tokens = " ".join(str(e).split())[:600], np.zeros((len(prompts), 0), np.int64)
        same = tokens.shape == ref_tokens.shape and bool(np.array_equal(tokens, ref_tokens))
        ok = (error is None and same and all(r["logits_rel"] <= r["tol"] and r["findings"] == 0 and not r["errors"]
                                             and r["nodes_launched"] == len(fused) for r in rows))
        result["archs"].append({"arch": arch, "math": math, "tokens": tokens.tolist(), "tokens_equal": same,
                                "steps": rows, "error": error, "ok": ok})
    return result


def generate(original, rewritten, prompts: list, steps: int = 24, archs=None, timeout: float | None = None) -> dict:
    """Greedy generation through `rewritten`'s kernels on the interpreter against `original` on ORT CPU (see
    the module doc). Returns the report; report["ok"] is the verdict."""
    from .check import emulated_env, pack_archs
    original, rewritten = str(Path(original).resolve()), str(Path(rewritten).resolve())
    proto = onnx.load(rewritten, load_external_data=False)
    io = decoder_io(proto)
    have = pack_archs(proto)
    archs = list(archs) if archs else have
    if not have or any(a not in have for a in archs):
        raise ValueError(f"{Path(rewritten).name}: no image packs for {', '.join(a for a in archs if a not in have) or archs} "
                         "(rewrite it with kernels: `plus-ep rewrite MODEL -o OUT --arch sm_80,sm_90a`)")
    tokens, logits = _reference(original, io, prompts, steps)
    with tempfile.TemporaryDirectory(prefix="plus_ep_generate_") as tmp:
        tmp = Path(tmp)
        np.savez(tmp / "reference.npz", tokens=tokens, **{f"logits{k}": x for k, x in enumerate(logits)})
        request = {"model": rewritten, "reference": str(tmp / "reference.npz"), "prompts": prompts, "steps": steps,
                   "archs": archs}
        (tmp / "request.json").write_text(json.dumps(request))
        r = subprocess.run([sys.executable, "-m", "plus_ep.verification.generate", str(tmp / "request.json"),
                            str(tmp / "result.json")], env=emulated_env(), timeout=timeout, check=False,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0 or not (tmp / "result.json").exists():
            raise RuntimeError(f"the generation process failed (exit {r.returncode}):\n{(r.stderr or '')[-3000:]}")
        result = json.loads((tmp / "result.json").read_text())
    result.update({"original": original, "model": rewritten, "prompts": prompts, "steps_requested": steps,
                   "reference_tokens": tokens.tolist()})
    result["ok"] = bool(result["archs"]) and all(a["ok"] for a in result["archs"])
    return result


def generate_text(rep: dict) -> str:
    lines = [f"greedy generation of {rep['steps_requested']} tokens for {len(rep['prompts'])} prompts (lengths "
             f"{', '.join(str(len(p)) for p in rep['prompts'])}, left-padded): {Path(rep['model']).name} with its "
             f"kernels on the CPU PTX interpreter vs {Path(rep['original']).name} on ONNX Runtime CPU"]
    for a in rep["archs"]:
        worst = max((r["logits_rel"] / r["tol"] for r in a["steps"]), default=float("inf"))
        pasts = [r["past"] for r in a["steps"]]
        lines.append(f"[{a['arch']}] {len(a['steps'])} steps (past {pasts[0] if pasts else '-'}..{pasts[-1] if pasts else '-'}), "
                     f"tokens {'identical' if a['tokens_equal'] else 'DIFFER'}, worst logits error/tolerance "
                     f"{worst:.2g} (tol {a['steps'][0]['tol'] if a['steps'] else '-'}, {a['math']}), "
                     f"{sum(r['launches'] for r in a['steps'])} launches, "
                     f"{sum(r['findings'] for r in a['steps'])} findings: {'ok' if a['ok'] else 'FAILED'}"
                     + (f"; error: {a['error']}" if a["error"] else ""))
    lines.append(f"reference tokens: {rep['reference_tokens']}")
    lines.append("PASSED" if rep["ok"] else "FAILED")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    request = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(_launcher_run(request), default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
