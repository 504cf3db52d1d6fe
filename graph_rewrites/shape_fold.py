"""Static shape values: fold the shape arithmetic that shape inference leaves unknown.

TorchScript exports compute pads and view shapes at run time from Shape nodes (Swin's
`pad = (window - width % window) % window`, then torch's reversed-pads Slice/Transpose/Reshape/Cast
before Pad). ONNX Runtime's symbolic inference propagates no values through Mod, a reversing Slice or
a Transpose, so everything after the Pad gets invented dims (`unk__9`, `Pad_101_o0__d1`) although the
image size is static, and no fused node can bind them.

`fold(light, inferred)` evaluates every tensor computed only from constants and Shape/Size outputs (no
graph-input data) with onnx's reference implementation, once per sample of the input symbols, and
returns those whose value is the same for every sample (so it depends on static dims only): the caller
makes them initializers and infers again, and dims that were invented become numbers.
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
import sympy
from onnx import helper, numpy_helper

log = logging.getLogger("plus_ep.graph")

SAMPLES = (2, 3, 5)            # values given to every input symbol, one evaluation each
MAX_ELEMS = 4096               # larger intermediate values are not evaluated (nor kept)
_SKIP = {"Shape", "Size", "Constant", "RandomNormal", "RandomUniform", "RandomNormalLike",
         "RandomUniformLike", "Multinomial", "Bernoulli"}


def _dims(vi) -> list | None:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]


def _input_symbols(model) -> list:
    out = []
    for vi in model.graph.input:
        for d in _dims(vi) or []:
            if isinstance(d, str) and d not in out:
                out.append(d)
    return out


def _eval_dim(d, env_syms: dict):
    if isinstance(d, int):
        return d
    if d is None:
        return None
    try:
        e = sympy.sympify(d, locals={k: sympy.Symbol(k) for k in env_syms})
    except (sympy.SympifyError, TypeError, SyntaxError):
        return None
    v = e.subs({sympy.Symbol(k): v for k, v in env_syms.items()})
    return int(v) if v.is_Integer else None


def constant_value(node):
    """The value of a Constant node (any of its value attributes), else None."""
    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
    return None


class _Runner:
    """One onnx.reference evaluator per distinct node signature (op, attributes, inputs present, outputs)."""

    def __init__(self, opset):
        self.opset, self.cache = opset, {}

    def run(self, node, args):
        key = (node.op_type, node.domain, tuple(bool(t) for t in node.input), len(node.output),
               tuple(a.SerializeToString() for a in node.attribute))
        if key not in self.cache:
            from onnx.reference import ReferenceEvaluator
            ins = [helper.make_tensor_value_info(f"i{k}", onnx.TensorProto.UNDEFINED, None) for k in range(len(args))]
            outs = [helper.make_tensor_value_info(f"o{k}", onnx.TensorProto.UNDEFINED, None)
                    for k in range(len(node.output))]
            n = helper.make_node(node.op_type, [f"i{k}" if t else "" for k, t in enumerate(node.input)],
                                 [f"o{k}" for k in range(len(node.output))], domain=node.domain)
            n.attribute.extend(node.attribute)
            g = helper.make_graph([n], "fold", ins, outs)
            m = helper.make_model(g, opset_imports=self.opset)
            self.cache[key] = ReferenceEvaluator(m)
        feeds = {f"i{k}": a for k, a in enumerate(args) if a is not None}
        return self.cache[key].run(None, feeds)


def _evaluate(model, shapes: dict, env_syms: dict, runner) -> dict:
    """tensor -> value of every tensor computed from constants and Shape/Size of known shapes."""
    g = model.graph
    vals = {}
    for init in g.initializer:
        if int(np.prod(init.dims)) <= MAX_ELEMS:
            vals[init.name] = numpy_helper.to_array(init)
    for node in g.node:
        if node.domain not in ("", "ai.onnx") or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                                     for a in node.attribute):
            continue
        if node.op_type == "Constant":
            v = constant_value(node)
            if v is not None:
                vals[node.output[0]] = v
            continue
        if node.op_type in ("Shape", "Size"):
            dims = shapes.get(node.input[0])
            if dims is None:
                continue
            dims = [_eval_dim(d, env_syms) for d in dims]
            if any(d is None for d in dims):
                continue
            if node.op_type == "Size":
                vals[node.output[0]] = np.array(int(np.prod(dims)), dtype=np.int64)
                continue
            start, end = 0, len(dims)
            for a in node.attribute:
                if a.name == "start":
                    start = a.i
                if a.name == "end":
                    end = a.i
            vals[node.output[0]] = np.array(dims[slice(start, end)], dtype=np.int64)
            continue
        if node.op_type in _SKIP or not all(t in vals for t in node.input if t):
            continue
        args = [vals[t] if t else None for t in node.input]
        if any(a is not None and np.asarray(a).size > MAX_ELEMS for a in args):
            continue
        try:
            outs = runner.run(node, args)
        except Exception as exc:            # an op onnx.reference does not know, a bad value: not folded
            log.debug("shape fold: %s %s not evaluated: %s", node.op_type, node.name, exc)
            continue
        for t, v in zip(node.output, outs):
            if t and v is not None and np.asarray(v).size <= MAX_ELEMS:
                vals[t] = np.asarray(v)
    return vals


def fold(light: onnx.ModelProto, inferred: onnx.ModelProto) -> dict:
    """tensor -> constant value of the tensors of `light` (not already constants) that shape arithmetic
    computes from static dims only; `inferred` holds the shapes the last inference gave."""
    g = inferred.graph
    shapes = {vi.name: _dims(vi) for vi in list(g.input) + list(g.output) + list(g.value_info)}
    for init in light.graph.initializer:
        shapes[init.name] = list(init.dims)
    syms = _input_symbols(light)
    runner = _Runner(list(light.opset_import))
    runs = [_evaluate(light, shapes, {s: v + k for k, s in enumerate(syms)}, runner)
            for v in (SAMPLES if syms else SAMPLES[:1])]
    known = {i.name for i in light.graph.initializer} | {
        n.output[0] for n in light.graph.node if n.op_type == "Constant"}
    out = {}
    for t, v in runs[0].items():
        if t in known or v.dtype == object:
            continue
        if all(t in r and r[t].shape == v.shape and np.array_equal(r[t], v) for r in runs[1:]):
            out[t] = v
    return out


def with_constants(light: onnx.ModelProto, consts: dict) -> onnx.ModelProto:
    """`light` with the tensors of `consts` as initializers and the nodes computing them dropped (a node
    is dropped only when all its outputs are constants)."""
    g = light.graph
    drop = [bool(n.output) and all(not t or t in consts for t in n.output) for n in g.node]
    made = {t for n, d in zip(g.node, drop) if d for t in n.output if t}
    nodes = [n for n, d in zip(g.node, drop) if not d]
    inits = list(g.initializer) + [numpy_helper.from_array(np.asarray(consts[t]), t) for t in sorted(made)]
    new = onnx.GraphProto(name=g.name, node=nodes, input=g.input, output=g.output,
                          value_info=[vi for vi in g.value_info if vi.name not in made], initializer=inits)
    return onnx.ModelProto(ir_version=light.ir_version, opset_import=light.opset_import,
                           functions=light.functions, graph=new)


def _fit(samples: list, envs: list, syms: list):
    """The elements of an int tensor as (coefficient, symbol or None) from its values at `envs`, or None
    when an element is not c or c * one symbol."""
    flat = [np.asarray(v).reshape(-1) for v in samples]
    out = []
    for k in range(flat[0].size):
        vals = [int(f[k]) for f in flat]
        if len(set(vals)) == 1:
            out.append((vals[0], None))
            continue
        for s in syms:
            ratios = {v // env[s] if v % env[s] == 0 else None for v, env in zip(vals, envs)}
            if len(ratios) == 1 and None not in ratios:
                out.append((ratios.pop(), s))
                break
        else:
            return None
    return out


def input_shape_values(view, model: onnx.ModelProto, names: list) -> int:
    """Compute the shape values `names` (int tensors that shape arithmetic inside fused subgraphs derives from
    intermediate tensors' shapes, e.g. Swin's batch size from Gather(Shape(x), 0)) from the graph inputs'
    shapes instead, for the nodes of `model` (the rewritten model) that read them: they no longer wait for a
    fused node's output (which stays, read by nobody). Only values that are constants or c * an input symbol
    are rerouted, for plain nodes only (a fused node's inputs stay as its plan and ORT's graph name them).
    Returns how many were."""
    g = model.graph
    where = {}
    for vi in view.model.graph.input:
        for a, d in enumerate(_dims(vi) or []):
            if isinstance(d, str):
                where.setdefault(d, (vi.name, a))
    syms = sorted(where)
    envs = [{s: v + 2 * k for k, s in enumerate(syms)} for v in (SAMPLES if syms else SAMPLES[:1])]
    shapes = {t: view.shape(t) for t in view.shapes}
    runner = _Runner(list(view.model.opset_import))
    runs = [_evaluate(view.model, shapes, env, runner) for env in envs]
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    new_nodes, new_inits, made_sym, done = [], [], {}, 0

    def sym_tensor(s):
        if s not in made_sym:
            inp, a = where[s]
            name = f"plus_ep/shape/{inp}/{a}"
            if opset >= 15:
                new_nodes.append(helper.make_node("Shape", [inp], [name], start=a, end=a + 1))
            else:
                new_nodes.append(helper.make_node("Shape", [inp], [name + "/all"]))
                new_inits.append(numpy_helper.from_array(np.array([a], np.int64), name + "/axis"))
                new_nodes.append(helper.make_node("Gather", [name + "/all", name + "/axis"], [name], axis=0))
            made_sym[s] = name
        return made_sym[s]

    for t in names:
        if any(t not in r for r in runs) or runs[0][t].dtype.kind not in "iu" or runs[0][t].ndim > 1:
            continue
        elems = _fit([r[t] for r in runs], envs, syms)
        if elems is None:
            continue
        base = f"plus_ep/shape/{t}"
        parts = []
        for k, (c, s) in enumerate(elems):
            if s is not None and c == 1:
                parts.append(sym_tensor(s))
                continue
            const = f"{base}/c{k}"
            new_inits.append(numpy_helper.from_array(np.array([c], np.int64), const))
            if s is None:
                parts.append(const)
            else:
                parts.append(f"{base}/e{k}")
                new_nodes.append(helper.make_node("Mul", [sym_tensor(s), const], [parts[-1]]))
        vec = parts[0]
        if len(parts) > 1:
            vec = f"{base}/concat"
            new_nodes.append(helper.make_node("Concat", parts, [vec], axis=0))
        out = vec
        if runs[0][t].ndim == 0:
            out = f"{base}/scalar"
            new_inits.append(numpy_helper.from_array(np.array([], np.int64), f"{base}/rank0"))
            new_nodes.append(helper.make_node("Reshape", [vec, f"{base}/rank0"], [out]))
        dt = view.dtypes.get(t, onnx.TensorProto.INT64)
        if dt != onnx.TensorProto.INT64:
            new_nodes.append(helper.make_node("Cast", [out], [f"{base}/cast"], to=dt))
            out = f"{base}/cast"
        for n in g.node:
            if t in n.output or n.domain == "ai.plus_ep":
                continue        # fused nodes keep their inputs: the EP matches them with ORT's graph by name
            for k, i in enumerate(n.input):
                if i == t:
                    n.input[k] = out
        done += 1
    if done:
        nodes = new_nodes + list(g.node)
        del g.node[:]
        g.node.extend(nodes)
        g.initializer.extend(new_inits)
    return done
