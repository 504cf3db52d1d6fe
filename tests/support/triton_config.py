"""Triton's model configuration schema (the fields a PlusEP model repository uses), for parsing
config.pbtxt with protobuf's own text-format parser in CI.

    config = parse(text)          # a ModelConfig message; unknown fields, bad enums or types raise ParseError

Why a descriptor built here: Triton ships its schema as model_config.proto inside the server and as
generated code in tritonclient[grpc], which pulls in grpcio and pins a protobuf gencode version; the
config only needs protobuf's text_format (already installed with onnx) and the schema's field names,
numbers and types, which are public interface facts of `inference.ModelConfig` (triton-inference-server/
common, protobuf/model_config.proto). A field the example does not use is left out on purpose: using it
makes the parse fail here, the signal to add it.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, text_format
from google.protobuf import message_factory

F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED


def _field(msg, name, number, ftype, label=_OPT, type_name=None):
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="plus_ep_triton_model_config.proto", package="inference",
                                            syntax="proto3")
    dt = fd.enum_type.add(name="DataType")
    for name, number in (("TYPE_INVALID", 0), ("TYPE_BOOL", 1), ("TYPE_UINT8", 2), ("TYPE_UINT16", 3),
                         ("TYPE_UINT32", 4), ("TYPE_UINT64", 5), ("TYPE_INT8", 6), ("TYPE_INT16", 7),
                         ("TYPE_INT32", 8), ("TYPE_INT64", 9), ("TYPE_FP16", 10), ("TYPE_FP32", 11),
                         ("TYPE_FP64", 12), ("TYPE_STRING", 13), ("TYPE_BF16", 14)):
        dt.value.add(name=name, number=number)

    group = fd.message_type.add(name="ModelInstanceGroup")
    kind = group.enum_type.add(name="Kind")
    for name, number in (("KIND_AUTO", 0), ("KIND_GPU", 1), ("KIND_CPU", 2), ("KIND_MODEL", 3)):
        kind.value.add(name=name, number=number)
    _field(group, "name", 1, F.TYPE_STRING)
    _field(group, "count", 2, F.TYPE_INT32)
    _field(group, "gpus", 3, F.TYPE_INT32, _REP)
    _field(group, "kind", 4, F.TYPE_ENUM, type_name=".inference.ModelInstanceGroup.Kind")

    inp = fd.message_type.add(name="ModelInput")
    _field(inp, "name", 1, F.TYPE_STRING)
    _field(inp, "data_type", 2, F.TYPE_ENUM, type_name=".inference.DataType")
    _field(inp, "dims", 4, F.TYPE_INT64, _REP)
    _field(inp, "optional", 8, F.TYPE_BOOL)

    out = fd.message_type.add(name="ModelOutput")
    _field(out, "name", 1, F.TYPE_STRING)
    _field(out, "data_type", 2, F.TYPE_ENUM, type_name=".inference.DataType")
    _field(out, "dims", 3, F.TYPE_INT64, _REP)

    ops = fd.message_type.add(name="ModelOperations")
    _field(ops, "op_library_filename", 1, F.TYPE_STRING, _REP)

    cfg = fd.message_type.add(name="ModelConfig")
    _field(cfg, "name", 1, F.TYPE_STRING)
    _field(cfg, "platform", 2, F.TYPE_STRING)
    _field(cfg, "max_batch_size", 4, F.TYPE_INT32)
    _field(cfg, "input", 5, F.TYPE_MESSAGE, _REP, ".inference.ModelInput")
    _field(cfg, "output", 6, F.TYPE_MESSAGE, _REP, ".inference.ModelOutput")
    _field(cfg, "instance_group", 7, F.TYPE_MESSAGE, _REP, ".inference.ModelInstanceGroup")
    _field(cfg, "default_model_filename", 8, F.TYPE_STRING)
    _field(cfg, "backend", 17, F.TYPE_STRING)
    _field(cfg, "model_operations", 18, F.TYPE_MESSAGE, type_name=".inference.ModelOperations")
    return fd


def model_config_class():
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))


def parse(text: str):
    """config.pbtxt text -> ModelConfig message (text_format.ParseError on anything the schema rejects)."""
    return text_format.Parse(text, model_config_class()())
