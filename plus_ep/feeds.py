"""Random but valid feeds for zoo models (numpy + onnx only, no torch)."""

from __future__ import annotations

import os
import re
from typing import Union

import numpy as np
import onnx

META_PREFIX = "plus_ep.zoo."
_SEQ_DIMS = ("seq", "dec_seq", "sequence", "sequence_length", "seq_len")
# a KV cache's length (decoders exported with past key/values: PlusEP's zoo, Optimum)
_PAST_DIMS = ("past", "past_sequence_length", "past_seq_len", "past_len", "past_length")
# the whole attended length of a decode step (past + new tokens: onnxruntime-genai, Optimum)
_TOTAL_DIMS = ("total_sequence_length", "total_seq_len", "total_length")
_BATCH_DIMS = ("batch", "batch_size", "N")
_INT_INPUTS_DEFAULT_VOCAB = 1000


def _load_graph_only(src) -> onnx.ModelProto:
    if isinstance(src, onnx.ModelProto):
        return src
    return onnx.load(os.fspath(src), load_external_data=False)


def metadata(model: onnx.ModelProto) -> dict[str, str]:
    """The ``plus_ep.zoo.*`` metadata written at export (prefix stripped)."""
    return {p.key[len(META_PREFIX):]: p.value for p in model.metadata_props
            if p.key.startswith(META_PREFIX)}


def _functions(model: onnx.ModelProto) -> dict:
    return {(f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions}


# ops whose output holds only values of their (first, or any for Concat) input: an id or position that
# reaches a Gather through them indexes the Gather's table (exporters reshape, cast and unsqueeze ids)
_VALUE_MOVES = {"Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Expand", "Transpose", "Slice",
                "Tile", "Concat", "CastLike"}


def _index_limits(nodes, inputs: dict, shape_of, functions: dict, limits: dict) -> None:
    """Record, for each tracked name (`inputs`: tensor -> the graph input whose values it holds) used as Gather
    indices, the extent of the axis it indexes (an int, or the dim_param of a symbolic extent; the smallest int
    over its uses wins), following value-preserving ops (_VALUE_MOVES) and looking into model-local functions
    (a fused node's body) too. shape_of(name) -> shape list (ints, dim_param strings, None) or None."""
    tracked = dict(inputs)
    for node in nodes:
        if node.op_type in ("Gather", "GatherElements") and len(node.input) > 1 and node.input[1] in tracked:
            axis = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
            shape = shape_of(node.input[0])
            if shape is not None and len(shape) > 0 and -len(shape) <= axis < len(shape):
                _limit(limits, tracked[node.input[1]], shape[axis])
        elif node.op_type in _VALUE_MOVES and node.domain in ("", "ai.onnx"):
            data = node.input if node.op_type == "Concat" else node.input[:1]
            src = {tracked[i] for i in data if i in tracked}
            if len(src) == 1 and node.output and node.output[0]:
                tracked[node.output[0]] = src.pop()
        f = functions.get((node.domain, node.op_type, getattr(node, "overload", "")))
        if f is not None and any(i in tracked for i in node.input):
            inner_inputs = {fi: tracked[ni] for fi, ni in zip(f.input, node.input) if ni in tracked}
            outer = dict(zip(f.input, node.input))
            _index_limits(f.node, inner_inputs, lambda nm, outer=outer: shape_of(outer[nm]) if nm in outer else None,
                          functions, limits)


def _limit(limits: dict, name: str, extent) -> None:
    """Keep the tighter of two limits: ints compare, a symbolic extent is kept only until an int is known."""
    if isinstance(extent, int) and extent > 0:
        old = limits.get(name)
        limits[name] = extent if not isinstance(old, int) else min(old, extent)
    elif isinstance(extent, str) and extent and name not in limits:
        limits[name] = extent


def _index_limits_of(model: onnx.ModelProto) -> dict:
    """{graph input: int or dim_param} (see _index_limits)."""
    shapes = {i.name: list(i.dims) for i in model.graph.initializer}
    for vi in list(model.graph.value_info) + list(model.graph.input):
        dims = vi.type.tensor_type.shape.dim
        if vi.name not in shapes and vi.type.tensor_type.HasField("shape"):
            shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims]
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    limits: dict = {}
    _index_limits(model.graph.node, {n: n for n in names}, shapes.get, _functions(model), limits)
    return limits


def index_limits(model: onnx.ModelProto) -> dict[str, int]:
    """{graph input: number of valid index values} for integer inputs used as Gather indices (an embedding
    lookup, a position table), also through Reshape/Cast/Unsqueeze... and inside fused nodes' function
    bodies: ids must lie in [0, limit). Tables whose extent is symbolic are left out (see sample_inputs)."""
    return {k: v for k, v in _index_limits_of(model).items() if isinstance(v, int)}


def _symbol(name: str, axis: int, batch: int, seq: int, dec_seq: int, past: int = 0) -> int:
    if name == "dec_seq":
        return dec_seq
    if name in _PAST_DIMS:
        return past
    if name in _TOTAL_DIMS:
        return past + seq
    if name in _SEQ_DIMS or (axis == 1 and name not in _BATCH_DIMS):
        return seq
    return batch


def _known(name: str) -> bool:
    return name in _BATCH_DIMS or name in _SEQ_DIMS or name in _PAST_DIMS or name in _TOTAL_DIMS


def _is_cache(name: str) -> bool:
    """A decoder's KV-cache input (past_key_values.0.key, past_key.3, cache.1.value, layer_past...)."""
    return bool(re.search(r"past|cache", name, re.IGNORECASE)) and "mask" not in name and "position" not in name


def _plain_dims(model: onnx.ModelProto, batch: int, seq: int, dec_seq: int, past: int = 0) -> dict[str, int]:
    """{dim_param: size} of the graph inputs' plain symbols. By name first (batch, seq, past,
    total_sequence_length ...); a symbol with an unknown name (an exporter's `s0`, `s43`) by where it stands:
    in a KV-cache input the batch axis (0) and the cache length (the other symbolic axis: past); in an
    integer id input of rank 2 batch and seq; in a mask of a model with a KV cache the whole length (past +
    seq); anywhere else axis 1 is seq, the others batch. A symbol keeps the first size given to it."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits and vi.type.tensor_type.HasField("shape")]

    def params(vi):
        return [(ax, d.dim_param) for ax, d in enumerate(vi.type.tensor_type.shape.dim)
                if not d.HasField("dim_value") and d.dim_param and not _EXPR.match(d.dim_param.strip())]
    out: dict = {}
    for vi in inputs:
        for ax, p in params(vi):
            if _known(p) or p == "dec_seq":
                out.setdefault(p, _symbol(p, ax, batch, seq, dec_seq, past))
    caches = [vi for vi in inputs if _is_cache(vi.name) and len(vi.type.tensor_type.shape.dim) >= 3]
    for vi in caches:
        for ax, p in params(vi):
            out.setdefault(p, batch if ax == 0 else past)
    integer = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    for vi in inputs:
        if vi.type.tensor_type.elem_type in integer and len(vi.type.tensor_type.shape.dim) == 2 \
                and "mask" not in vi.name and not _is_cache(vi.name):
            for ax, p in params(vi):
                out.setdefault(p, batch if ax == 0 else seq)
    for vi in inputs:
        if "mask" in vi.name and len(vi.type.tensor_type.shape.dim) == 2:
            for ax, p in params(vi):
                out.setdefault(p, batch if ax == 0 else (past + seq if caches else seq))
    for vi in inputs:
        for ax, p in params(vi):
            out.setdefault(p, _symbol(p, ax, batch, seq, dec_seq, past))
    return out


_EXPR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\s*[*+\-/]\s*([A-Za-z_][A-Za-z0-9_]*|[0-9]+))+$")


def _expression(text: str, axis: int, batch: int, seq: int, dec_seq: int, past: int = 0,
                plain: dict | None = None) -> int | None:
    """A dim_param that is arithmetic over symbols (`batch*seq`, `seq+1`, `2*seq` written `seq*2`, `s1 + s2`),
    as exporters and PlusEP's rewriter write them: each symbol gets its size (`plain`, else its usual value),
    the result must be a positive whole number."""
    if not _EXPR.match(text.strip()):
        return None
    import sympy
    expr = sympy.sympify(text)
    plain = plain or {}
    values = {s: plain.get(str(s), _symbol(str(s), -1, batch, seq, dec_seq, past)) for s in expr.free_symbols}
    v = expr.subs(values)
    if not v.is_integer or int(v) < 1:
        raise ValueError(f"dimension {text!r} (axis {axis}) evaluates to {v} with batch={batch}, seq={seq}; "
                         "pass the inputs explicitly (--inputs)")
    return int(v)


def _shape(vi: onnx.ValueInfoProto, batch: int, seq: int, dec_seq: int, past: int = 0,
           plain: dict | None = None) -> tuple[int, ...]:
    plain = plain or {}
    dims = []
    for i, d in enumerate(vi.type.tensor_type.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
            continue
        value = _expression(d.dim_param, i, batch, seq, dec_seq, past, plain) if d.dim_param else None
        if value is None:
            value = plain.get(d.dim_param) if d.dim_param else None
        dims.append(value if value is not None else _symbol(d.dim_param, i, batch, seq, dec_seq, past))
    return tuple(dims)


def random_feeds(specs, meta: dict[str, str], batch: int, seq: int,
                 dec_seq: int | None = None, seed: int = 0, limits: dict | None = None) -> dict[str, np.ndarray]:
    """``specs``: sequence of (name, numpy dtype, concrete shape); ``limits``: {name: index range} of
    integer inputs (index_limits), which wins over the vocabulary of the metadata."""
    rng = np.random.default_rng(seed)
    vocab = int(meta.get("vocab_size", _INT_INPUTS_DEFAULT_VOCAB))
    type_vocab = int(meta.get("type_vocab_size", 2))
    limits = limits or {}
    feeds: dict[str, np.ndarray] = {}
    for name, dtype, shape in specs:
        dtype = np.dtype(dtype)
        if "mask" in name and (np.issubdtype(dtype, np.number) or dtype == np.bool_):
            arr = np.ones(shape, dtype=dtype)
            if len(shape) == 2 and shape[1] > 1:
                # right padding on the last row: zero out the tail (keep >= 1 token)
                pad = max(1, shape[1] // 3)
                arr[-1, shape[1] - pad:] = 0
        elif "position" in name and np.issubdtype(dtype, np.integer) and len(shape) in (1, 2):
            # the positions of the last shape[-1] tokens of a sequence: a decoder's past comes first
            total = max((len(s) > 1 and s[1] for n, _, s in specs if "mask" in n), default=shape[-1])
            total = max(total, shape[-1])
            arr = np.broadcast_to(np.arange(total - shape[-1], total), shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer) and name in limits:
            arr = rng.integers(0, limits[name], size=shape).astype(dtype)
        elif name == "token_type_ids":
            arr = rng.integers(0, type_vocab, size=shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            arr = rng.integers(0, vocab, size=shape).astype(dtype)
        elif np.issubdtype(dtype, np.floating):
            arr = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            arr = np.ones(shape, dtype=dtype)
        else:
            raise TypeError(f"cannot make a random feed for {name!r} of dtype {dtype}")
        feeds[name] = arr
    return feeds


def sample_inputs(model_path_or_proto: Union[str, os.PathLike, onnx.ModelProto],
                  batch: int = 2, seq: int = 7, seed: int = 0,
                  dec_seq: int | None = None, past: int = 0) -> dict[str, np.ndarray]:
    """Valid random feeds for every graph input of an ONNX model.

    int64 ids are drawn from ``[0, vocab)`` (vocab from the zoo metadata, else
    from the embedding table the ids index), attention masks are ones with the
    tail of the last row zeroed (right padding), ``pixel_values`` are standard
    normal float32. Symbolic dims named ``batch`` get ``batch``, ``dec_seq`` get
    ``dec_seq`` (default ``seq``), a KV cache's length (``past``, ``past_sequence_length``, ...) gets
    ``past`` (a decoder exported with past key/values: ``past=0`` is the prefill, ``seq=1, past=N`` a
    decode step), ``total_sequence_length`` ``past + seq``, other symbolic dims get ``seq``; symbols with
    names nobody uses (``s0``, ``s43``) by where they stand (_plain_dims). Position ids count on from the
    past; ids stay inside every table a Gather indexes with them (index_limits, a symbolic table at its
    size here).

        sample_inputs(decoder, batch=1, seq=1, past=20)   # one decode step: mask [1, 21], positions [[20]]
    """
    model = _load_graph_only(model_path_or_proto)
    meta = metadata(model)
    initializer_names = {i.name for i in model.graph.initializer}
    dec_seq = seq if dec_seq is None else dec_seq
    plain = _plain_dims(model, batch, seq, dec_seq, past)
    specs = []
    for vi in model.graph.input:
        if vi.name in initializer_names:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        specs.append((vi.name, dtype, _shape(vi, batch, seq, dec_seq, past, plain)))
    limits = {}
    for k, v in _index_limits_of(model).items():       # a table of symbolic extent: its size at these dims
        v = v if isinstance(v, int) else plain.get(v, _expression(v, -1, batch, seq, dec_seq, past, plain)
                                                   if _EXPR.match(v.strip()) else None)
        if v:
            limits[k] = v
    return random_feeds(specs, meta, batch, seq, dec_seq, seed, limits=limits)


def check_feeds(model: onnx.ModelProto, feeds: dict, source: str = "--inputs") -> None:
    """Raise ValueError (one line naming the input and the fix) unless ``feeds`` fit the model's inputs:
    every input present and no other, the declared element type, rank and fixed dims, one size per
    symbolic dim, and integer ids inside the range the graph indexes with them."""
    initializer_names = {i.name for i in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in initializer_names]
    want = [vi.name for vi in graph_inputs]
    unknown = [k for k in feeds if k not in want]
    missing = [k for k in want if k not in feeds]
    if unknown or missing:
        parts = ([f"unknown input(s) {', '.join(unknown)}"] if unknown else []) + \
                ([f"missing input(s) {', '.join(missing)}"] if missing else [])
        raise ValueError(f"{source}: {'; '.join(parts)} (the model's inputs: {', '.join(want)})")
    symbols: dict = {}
    limits = _index_limits_of(model)
    for vi in graph_inputs:
        arr = np.asarray(feeds[vi.name])
        tt = vi.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if arr.dtype != dtype:
            raise ValueError(f"{source}: input {vi.name} is {arr.dtype}, the model takes {dtype}")
        if tt.HasField("shape"):
            dims = tt.shape.dim
            if arr.ndim != len(dims):
                raise ValueError(f"{source}: input {vi.name} has shape {list(arr.shape)} (rank {arr.ndim}), the model "
                                 f"takes rank {len(dims)} ({_dims_text(dims)})")
            for axis, (d, n) in enumerate(zip(dims, arr.shape)):
                if d.HasField("dim_value") and d.dim_value != n:
                    raise ValueError(f"{source}: input {vi.name} has shape {list(arr.shape)}, the model takes "
                                     f"{_dims_text(dims)} (axis {axis} must be {d.dim_value})")
                if d.dim_param:
                    seen = symbols.setdefault(d.dim_param, (n, vi.name, axis))
                    if seen[0] != n:
                        raise ValueError(f"{source}: dim {d.dim_param!r} is {seen[0]} in input {seen[1]} (axis "
                                         f"{seen[2]}) but {n} in input {vi.name} (axis {axis})")
    for vi in graph_inputs:
        arr = np.asarray(feeds[vi.name])
        limit = limits.get(vi.name)
        if isinstance(limit, str):           # a table of symbolic extent: its size in these feeds
            limit = symbols.get(limit, (None,))[0]
        if limit and arr.size and np.issubdtype(arr.dtype, np.integer):
            lo, hi = int(arr.min()), int(arr.max())
            if lo < -limit or hi >= limit:
                raise ValueError(f"{source}: input {vi.name} holds indices {lo}..{hi}, but the graph indexes a table "
                                 f"of {limit} rows with it (valid: 0..{limit - 1})")


def _dims_text(dims) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + "]"
