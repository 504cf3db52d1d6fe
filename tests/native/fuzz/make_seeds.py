"""Write the fuzzers' seed corpus (tests/native/fuzz/seeds/<entry>/) from real rewritten models.

    python tests/native/fuzz/make_seeds.py [--zoo bert-torchscript,gpt2-dynamo,...] [--layers 2]

Models: the demo BERT (1 layer), the emulated tests' tiny LayerNorm -> MatMul+Add+Relu model, and the
small zoo exports named (exported first when not in the zoo cache: needs the [models] extra), each rewritten with
kernels for sm_80 and sm_90a (kernels from the kernel cache). Every fused node gives:
  plan    its plan text
  expr    each distinct expression token of its plan, with an environment binding every symbol to 2
  bind    its plan and inputs that satisfy it (symbols 2, shape tensors' values 2)
  pack    its packs with every cubin and PTX text cut to 48 bytes (the parser reads tables and
          terminators, not code; the committed corpus stays small)
  kernel  plan, those packs and inputs (models whose tensors all fit the harness's element cap)
  ortop   the same as ONNX Runtime would hand them to the custom op
  trust   its digest input (plan, packs, a signature), plus a keys file, signatures and base64
The raw seeds are then merged with each fuzzer (`-merge=1`: the fewest inputs that keep all their
coverage) into seeds/<entry>, which this replaces; the formats are the harnesses' (fuzz_*.c). Needs
clang with libFuzzer (tests/support/fuzz.py). The fuzzers grow their own corpus at run time.
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

SEEDS = Path(__file__).resolve().parent / "seeds"
RAW = SEEDS          # where put() writes; main() points it at a temporary folder before merging
ARCHS = ["sm_80", "sm_90a"]
SYM = 2            # every symbol's value in the seeds' inputs
CAP = 4096         # FZ_MAX_ELEMS in fuzz_util.h
INLINE = 16        # FZ_INLINE_ELEMS
CUT = 48           # bytes kept of each cubin and PTX text


def put(entry: str, data: bytes) -> bool:
    d = RAW / entry
    d.mkdir(parents=True, exist_ok=True)
    p = d / hashlib.sha256(data).hexdigest()[:16]
    if p.exists():
        return False
    p.write_bytes(data)
    return True


def fused_nodes(model: onnx.ModelProto):
    for n in model.graph.node:
        if n.domain == "ai.plus_ep" and any(a.name == "plus_plan" for a in n.attribute):
            plan = next(a.s for a in n.attribute if a.name == "plus_plan")
            packs = {a.name[len("plus_images_"):]: numpy_helper.to_array(a.t).tobytes()
                     for a in n.attribute if a.name.startswith("plus_images_")}
            yield n, plan, packs


def shrink(blob: bytes) -> bytes:
    from plus_ep.kernels.wire import pack
    images = pack.parse(blob)
    return pack.write([pack.Image(im.cubin[:CUT], None if im.ptx is None else im.ptx[:CUT]) for im in images])


def input_bytes(plan) -> tuple[bytes, bool]:
    """fz_make_inputs bytes for inputs that satisfy `plan` (kernels.wire.plan.Plan); fits: every tensor
    within the element cap (so the harnesses run it, not only bind it)."""
    out = bytearray([0])               # lead byte: the plan's input count
    fits = True
    total = 0
    bound = set()
    for dt, dims in plan.inputs:
        out.append(0)                  # control: everything as the plan says
        elems = 1
        for t in dims:
            if t.startswith("s"):
                if t not in bound:
                    out.append(SYM)
                    bound.add(t)
                elems *= SYM
            elif t == "*":
                out.append(SYM)
                elems *= SYM
            else:
                elems *= int(t)
        total += elems * 4
        if elems <= INLINE:
            out += bytes([SYM]) * elems    # each element one fz_dim byte
        elif elems <= CAP:
            out.append(0)                  # one fill seed byte
        else:
            fits = False
    return bytes(out), fits


def ortop_input(dtype_onnx: int, dims: list) -> bytes:
    """fuzz_ortop's make_input bytes for one tensor: control 0x0C (element type and rank given)."""
    out = bytearray([0x0C, dtype_onnx, len(dims)])
    out += bytes(dims)
    elems = 1
    for d in dims:
        elems *= d
    size = {1: 4, 7: 8, 6: 4, 10: 2, 16: 2, 9: 1, 2: 1, 3: 1, 11: 8}.get(dtype_onnx, 4)
    out += bytes([1]) * (elems * size) if elems <= INLINE else b"\0"
    return bytes(out)


# a signature attribute and keys file in the forms plus-ep writes them (fixed bytes: the parsers only)
KEY = bytes(range(32))
SIGNATURE = "ed25519 " + hashlib.sha256(KEY).hexdigest()[:16] + " " + __import__("base64").b64encode(bytes(64)).decode()


def trust_text_seeds() -> int:
    import base64
    line = "ed25519 " + base64.b64encode(KEY).decode()
    added = put("trust", bytes([0]) + f"# release keys\n{line} release\n\n{line}\n".encode())
    added += put("trust", bytes([1]) + SIGNATURE.encode())
    for n in (1, 2, 3, 32, 64):
        added += put("trust", bytes([2, n]) + base64.b64encode(bytes(range(n))))
    return added


def seeds_of(model: onnx.ModelProto, label: str) -> int:
    from plus_ep.kernels.wire.plan import parse
    added = 0
    for node, text, packs in fused_nodes(model):
        plan = parse(text.decode())
        added += put("plan", text)
        exprs = [*plan.vals, *plan.scratch, *(d for _, dims in plan.outputs for d in dims)]
        exprs += [e for r in plan.routes for ln in r.launches for e in (*ln.grid, *ln.block, ln.smem)]
        exprs += [r.cond for r in plan.routes] + [d for _, dims in plan.inputs for d in dims if "," in d]
        env = bytes([32]) + b"\xff" * 8 + b"".join(bytes([1, SYM]) for _ in range(64))
        for t in exprs:
            added += put("expr", t.encode() + b"\0" + env)
        body = b"".join(a.encode() + b"\0" + struct.pack("<H", len(b)) + b
                        for a, b in sorted({a: shrink(b) for a, b in packs.items()}.items()))
        added += put("trust", bytes([3]) + text + b"\0" + bytes([len(packs)]) + body + SIGNATURE.encode() + b"\0")
        ins, fits = input_bytes(plan)
        added += put("bind", text + b"\0" + ins + b"\0\0")
        small = {a: shrink(b) for a, b in packs.items()}
        for arch, blob in small.items():
            added += put("pack", bytes([0]) + arch.encode() + b"\0" + blob)
        if not fits:
            continue
        body = b"".join(a.encode() + b"\0" + struct.pack("<H", len(b)) + b for a, b in sorted(small.items()))
        for cc_index, mode in ((4, 1), (1, 0), (4, 2)):    # sm_90 on a stream, sm_80 with no stream, staging
            added += put("kernel", text + b"\0" + bytes([len(small)]) + body + bytes([cc_index]) + ins + bytes([mode]))
        host = int(node.op_type[len("FusedHost"):]) if node.op_type.startswith("FusedHost") else 0
        attrs = b"".join(a.encode() + b"\0" + b"\0" + struct.pack("<H", len(b)) + b for a, b in sorted(small.items()))
        tensors = []
        for dt, dims in plan.inputs:
            tensors.append(ortop_input(dt, [SYM if (t.startswith("s") or t == "*") else int(t) for t in dims]))
        for cpu in (0, 1):
            added += put("ortop", bytes([cpu | host << 1]) + node.name.encode() + b"\0" + text + b"\0" +
                         bytes([len(small)]) + attrs + bytes([len(tensors)]) + b"".join(tensors) + b"\0")
    print(f"{label}: {added} new seeds")
    return added


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", default="bert-torchscript,gpt2-dynamo,t5-torchscript,llama-torchscript,vit-dynamo")
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args(argv)
    global RAW
    RAW = Path(tempfile.mkdtemp(prefix="plus_ep_seeds_"))
    import plus_ep
    from plus_ep.demo_model import build_bert
    from tests.support.emulated_models import rewritten_tiny
    trust_text_seeds()
    seeds_of(rewritten_tiny(), "tiny (emulated tests' model)")
    seeds_of(plus_ep.rewrite(build_bert(layers=1), archs=ARCHS), "demo BERT, 1 layer")
    from plus_ep import zoo
    for spec in [s for s in args.zoo.split(",") if s]:
        fam, exp = spec.split("-")
        try:
            model = zoo.load(fam, exp, "small", layers=args.layers)
        except Exception as e:  # noqa: BLE001  (cannot be exported here: skip it)
            print(f"{spec}: skipped ({type(e).__name__}: {str(e)[:120]})")
            continue
        seeds_of(plus_ep.rewrite(model, archs=ARCHS), f"zoo {spec}, {args.layers} layers")
    merge()
    total = sum(f.stat().st_size for f in SEEDS.rglob("*") if f.is_file())
    print(f"seeds: {sum(1 for f in SEEDS.rglob('*') if f.is_file())} files, {total} bytes")
    return 0


def merge() -> None:
    """seeds/<entry> := the inputs of RAW/<entry> that keep all the coverage (libFuzzer -merge=1)."""
    from tests.support import fuzz
    cc = fuzz.clang()
    if cc is None:
        raise SystemExit(f"cannot merge the seeds: {fuzz.why_unavailable()}")
    with tempfile.TemporaryDirectory() as tmp:
        exes = fuzz.build_all(Path(tmp) / "bin", cc)
        for entry, exe in exes.items():
            out = Path(tmp) / "merged" / entry
            out.mkdir(parents=True)
            subprocess.run([str(exe), "-merge=1", f"-dict={fuzz.DICT}", str(out), str(RAW / entry)], env=fuzz.env(entry != "trust"),
                           cwd=tmp, check=True, capture_output=True)
            shutil.rmtree(SEEDS / entry, ignore_errors=True)
            shutil.copytree(out, SEEDS / entry)
            print(f"{entry}: {len(list(out.iterdir()))} seeds after merging")


if __name__ == "__main__":
    raise SystemExit(main())
