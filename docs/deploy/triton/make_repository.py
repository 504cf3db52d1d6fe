"""Make an NVIDIA Triton Inference Server model repository that serves a PlusEP-rewritten model with
Triton's onnxruntime backend and PlusEP's custom-op library.

    python docs/deploy/triton/make_repository.py OUT [--model model.onnx] [--name plus_bert]
        [--arch sm_80,sm_90a] [--library /opt/plus_ep/_launcher.so]

writes

    OUT/<name>/config.pbtxt      backend "onnxruntime", the model's inputs and outputs, one GPU instance,
                                 model_operations { op_library_filename: <the launcher> }
    OUT/<name>/1/model.onnx      the model rewritten by PlusEP (plus-ep rewrite), kernels for --arch
    OUT/<name>/trusted/          a trust manifest of exactly these kernels (built here, so trusted here)

Trust (docs/guide/trust.md): the launcher in the container runs a fused node's kernels only when they
are in a trust manifest, signed by a listed key, or the operator opted out. A fresh container has an
empty manifest and would refuse every fused node, so the repository ships one: start Triton with
`-e PLUS_EP_TRUST_DIR=/models/<name>/trusted`, with the repository owned by the container's user (or
root) and not writable by group or others (the launcher ignores a manifest another user could change:
`chown -R root:root OUT; chmod -R go-w OUT`). With --sign KEY the nodes and the model are also signed
(`plus-ep rewrite --sign`): list KEY.pub in a file named by `-e PLUS_EP_TRUSTED_KEYS=...` instead.
Never set PLUS_EP_TRUST=any on a server: it runs whatever kernels a model file carries.

Without --model it uses a one-layer demo BERT (plus_ep.demo_model, random weights). --library is the
launcher's path *inside the Triton container*: copy `python -c "import plus_ep; print(plus_ep.get_library_path())"`
there (it needs only the CUDA driver and ONNX Runtime's C API, both in Triton's image) and name it here;
the default is this machine's path. The backend registers it in every session it creates, so the fused
nodes run PlusEP's kernels on the CUDA EP's stream; without it they run their original subgraphs.
`docs/deploy/triton/model_repository/` holds this script's output for the demo BERT
(tests/native/test_deploy_triton.py checks that it is current and that config.pbtxt parses as
Triton's ModelConfig).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

import onnx

# ONNX element types -> Triton's DataType names (model_config.proto)
TRITON_TYPES = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.FLOAT16: "TYPE_FP16",
                onnx.TensorProto.BFLOAT16: "TYPE_BF16", onnx.TensorProto.DOUBLE: "TYPE_FP64",
                onnx.TensorProto.INT64: "TYPE_INT64", onnx.TensorProto.INT32: "TYPE_INT32",
                onnx.TensorProto.INT8: "TYPE_INT8", onnx.TensorProto.UINT8: "TYPE_UINT8",
                onnx.TensorProto.BOOL: "TYPE_BOOL"}


def tensor_config(vi) -> str:
    t = vi.type.tensor_type
    if t.elem_type not in TRITON_TYPES:
        raise SystemExit(f"{vi.name}: element type {onnx.TensorProto.DataType.Name(t.elem_type)} has no "
                         "Triton DataType here")
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
    return (f"  {{\n    name: \"{vi.name}\"\n    data_type: {TRITON_TYPES[t.elem_type]}\n"
            f"    dims: [ {', '.join(str(d) for d in dims)} ]\n  }}")


def tensors(kind: str, values) -> str:
    return f"{kind} [\n" + ",\n".join(tensor_config(vi) for vi in values) + "\n]\n"


def config_text(model: onnx.ModelProto, name: str, library: str) -> str:
    """config.pbtxt for `model`: every dim as the model declares it (symbolic ones -1), no Triton batching
    (max_batch_size 0: the batch is the model's first dim, as exported)."""
    inits = {t.name for t in model.graph.initializer}
    parts = [f"name: \"{name}\"\n", "backend: \"onnxruntime\"\n", "max_batch_size: 0\n"]
    parts.append(tensors("input", [vi for vi in model.graph.input if vi.name not in inits]))
    parts.append(tensors("output", model.graph.output))
    parts.append("instance_group [\n  {\n    count: 1\n    kind: KIND_GPU\n  }\n]\n")
    parts.append(f"model_operations {{\n  op_library_filename: \"{library}\"\n}}\n")
    return "".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Make a Triton model repository for a PlusEP-rewritten model.")
    ap.add_argument("out", help="the repository folder to write")
    ap.add_argument("--model", help="the original .onnx model (default: a one-layer demo BERT)")
    ap.add_argument("--name", default="plus_bert", help="the model's name in the repository")
    ap.add_argument("--arch", default="auto", help="archs of the kernels, as for `plus-ep rewrite --arch`")
    ap.add_argument("--library", help="the launcher's path inside the Triton container (default: this machine's)")
    ap.add_argument("--sign", metavar="KEY", help="also sign the nodes and the model with this Ed25519 key "
                                                  "(plus-ep keygen; the [sign] extra)")
    args = ap.parse_args(argv)

    import plus_ep
    from plus_ep.cli import main as plus_ep_cli
    out = pathlib.Path(args.out) / args.name
    (out / "1").mkdir(parents=True, exist_ok=True)
    source = args.model
    if source is None:
        from plus_ep.demo_model import save_bert
        source = str(out / "original.onnx")
        save_bert(source, layers=1, hidden=64, heads=2, intermediate=128, vocab=100, max_pos=64)
    code = plus_ep_cli(["rewrite", source, "-o", str(out / "1" / "model.onnx"), "--arch", args.arch]
                       + (["--sign", args.sign] if args.sign else []))
    if args.model is None:
        os.remove(source)
    if code:
        return code
    model = onnx.load(str(out / "1" / "model.onnx"), load_external_data=False)
    (out / "config.pbtxt").write_text(config_text(model, args.name, args.library or plus_ep.get_library_path()))
    print(f"wrote {out / 'config.pbtxt'} and {out / '1' / 'model.onnx'}")
    from plus_ep import trust
    nodes = trust.kernel_nodes(onnx.load(str(out / "1" / "model.onnx")))
    if nodes:               # built here: a manifest of exactly these kernels, for the container
        (out / "trusted").mkdir(mode=0o700, exist_ok=True)
        recorded, failed = trust.record_nodes(nodes, f"built by make_repository.py for {args.name}",
                                              folder=out / "trusted")
        if failed:
            print(f"error: {failed[0]}", file=sys.stderr)
            return 1
        print(f"wrote {out / 'trusted'} ({recorded} fused nodes): start Triton with "
              f"-e PLUS_EP_TRUST_DIR=/models/{args.name}/trusted (see docs/guide/trust.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
