"""Per-run state shared by the units: torch builds, exports, ORT-optimized files, fp32 references."""
from __future__ import annotations

import copy
import pathlib
import shutil
import time
import warnings

from bench.harness import export
from bench.harness import measure
from bench.harness import model_set


class Store:
    def __init__(self, size, layers, device, workdir):
        self.size, self.layers, self.device = size, layers, device
        self.workdir = pathlib.Path(workdir)
        self.exports, self.optimizer = [], {}     # logs for the JSON
        self._built, self._refs, self._optimized = {}, {}, {}

    def built(self, name) -> model_set.Built:
        if name not in self._built:
            self._built[name] = model_set.build(name, self.size, self.layers)
        return self._built[name]

    def config(self, name):
        return self.built(name).config if name in self._built else model_set.config(name, self.size, self.layers)

    def onnx_path(self, name, exporter, dtype):
        def log(n, ex, dt, seconds):
            self.exports.append({"model": n, "exporter": ex, "dtype": dt, "seconds": round(seconds, 2)})
        return export.onnx_path(name, exporter, dtype, self.size, self.layers,
                                built=lambda: self.built(name), log=log)

    def ort_optimized(self, name, exporter, dtype) -> pathlib.Path:
        key = (name, exporter, dtype)
        if key not in self._optimized:
            from onnxruntime.transformers.optimizer import optimize_model
            src = self.onnx_path(name, exporter, "fp32")
            spec, cfg = model_set.SPECS[name], self.config(name)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = optimize_model(str(src), model_type=spec.optimizer_type, num_heads=model_set.heads(cfg),
                                   hidden_size=model_set.hidden(cfg), use_gpu=self.device == "cuda")
                fused = {k: v for k, v in m.get_fused_operator_statistics().items() if v}
                if dtype == "fp16":
                    m.convert_float_to_float16(keep_io_types=False)
            out = self.workdir / f"{name}-{exporter}-{dtype}-ort_optimizer.onnx"
            m.save_model_to_file(str(out), use_external_data_format=src.with_name(src.name + ".data").exists())
            self.optimizer[f"{name}/{exporter}/{dtype}"] = {
                "model_type": spec.optimizer_type, "fused_ops": fused,
                "seconds": round(time.perf_counter() - t0, 2)}
            self._optimized[key] = out
        return self._optimized[key]

    def references(self, name, shapes) -> dict:
        """fp32 torch eager outputs (numpy) on this device for each (batch, seq); kept for one model."""
        self._refs = {k: v for k, v in self._refs.items() if k[0] == name}
        todo = [s for s in shapes if (name, s) not in self._refs]
        if todo:
            import torch
            built = self.built(name)
            model = built.wrapper if self.device == "cpu" else copy.deepcopy(built.wrapper).to(self.device)
            with torch.inference_mode():
                for b, s in todo:
                    feeds = model_set.make_feeds(built.spec, built.config, b, s)
                    args = [torch.from_numpy(v).to(self.device) for v in feeds.values()]
                    self._refs[(name, (b, s))] = [o.float().cpu().numpy() for o in model(*args)]
            del model
            measure.release()
        return {s: self._refs[(name, s)] for s in shapes}

    def context(self, name, dtype, exporter) -> "Context":
        return Context(self, name, dtype, exporter)


class Context:
    """What a contender sees: one model, dtype and exporter on this run's device."""

    def __init__(self, store, name, dtype, exporter):
        self.store, self.name, self.dtype, self.exporter = store, name, dtype, exporter
        self.device, self.spec = store.device, model_set.SPECS[name]

    def onnx_path(self, dtype=None):
        return self.store.onnx_path(self.name, self.exporter, dtype or self.dtype)

    def ort_optimized(self):
        return self.store.ort_optimized(self.name, self.exporter, self.dtype)

    def torch_fp32(self) -> model_set.Built:
        return self.store.built(self.name)

    def fresh_dir(self, label) -> pathlib.Path:
        d = self.store.workdir / f"{self.name}-{self.dtype}-{self.exporter}-{label}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d
