"""ONNX Runtime contenders: plain ORT, ORT after its transformers optimizer, PlusEP; CUDA graphs
optional. Inputs and outputs are OrtValues on the device, bound once per shape (IOBinding).

With the CPU onnxruntime (the GPU lease machine has no onnxruntime-gpu) the ORT contenders are skipped
with that reason and PlusEP runs as the plugin EP on its GPU device ([PlusEP, CPU EP]; device memory
from PlusEP's allocator, copies through its data transfer; CUDA graphs through its cuda_graph option)."""
from __future__ import annotations

import warnings

import numpy as np

from bench.harness.contender import Contender, start_twice

_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}
NVIDIA = 0x10DE


def cuda_ep() -> bool:
    """Whether this onnxruntime has ORT's CUDA EP (onnxruntime-gpu)."""
    import onnxruntime as ort
    return "CUDAExecutionProvider" in ort.get_available_providers()


def _device_value(arr, device):
    """An OrtValue holding arr on `device`: the CUDA EP's memory, else PlusEP's GPU device memory."""
    import onnxruntime as ort
    if device != "cuda" or cuda_ep():
        return ort.OrtValue.ortvalue_from_numpy(arr, device, 0)
    v = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), arr.dtype, "gpu", 0, NVIDIA)
    ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(arr)], [v], None)
    return v


def _host(v):
    import onnxruntime as ort
    if v.device_name().lower() == "cpu" or cuda_ep():
        return v.numpy()
    arr = np.zeros(v.shape(), _NP[v.data_type()])
    ort.copy_tensors([v], [ort.OrtValue.ortvalue_from_numpy(arr)], None)
    return arr


class OrtBound:
    """``out_shapes``: {output name: shape} in the order ``outputs()`` returns them."""

    def __init__(self, sess, feeds, out_shapes, device, graph_id):
        import onnxruntime as ort
        self.sess, self.device = sess, device
        wanted = {i.name for i in sess.get_inputs()}
        self.inputs = {k: _device_value(np.ascontiguousarray(v), device) for k, v in feeds.items() if k in wanted}
        types = {o.name: _NP[o.type] for o in sess.get_outputs()}
        where = (device, 0) if device != "cuda" or cuda_ep() else ("gpu", 0, NVIDIA)
        self.outs = {k: ort.OrtValue.ortvalue_from_shape_and_type(list(shp), types[k], *where)
                     for k, shp in out_shapes.items()}
        self.iob = sess.io_binding()
        for k, v in self.inputs.items():
            self.iob.bind_ortvalue_input(k, v)
        for k, v in self.outs.items():
            self.iob.bind_ortvalue_output(k, v)
        self.opts = ort.RunOptions()
        if graph_id is not None:
            self.opts.add_run_config_entry("gpu_graph_id", str(graph_id))

    def run(self):
        self.sess.run_with_iobinding(self.iob, self.opts)

    def sync(self):
        self.iob.synchronize_outputs()

    def outputs(self):
        return [_host(v).astype(np.float32) for v in self.outs.values()]


class OrtRunner:
    def __init__(self, make_session, device, graph):
        self.make_session, self.device, self.graph = make_session, device, graph
        self.sess = make_session(None)
        self.provider = self.sess.get_providers()[0]
        if device == "cuda" and self.provider not in ("CUDAExecutionProvider", "PlusEP"):
            raise RuntimeError(f"the session runs on {self.provider}, not on a GPU EP (did CUDA load?)")
        self.gpu_run, self.note, self.graphs = device == "cuda", None, 0

    def bind(self, feeds, out_shapes):
        graph_id = None
        if self.graph:                       # one captured graph per shape
            graph_id, self.graphs = self.graphs, self.graphs + 1
        return OrtBound(self.sess, feeds, out_shapes, self.device, graph_id)

    def ort_profile(self, feeds, out_shapes, runs, prefix) -> str:
        """Profile file of ``runs`` inferences (+1 warm-up) in a fresh session with profiling on."""
        so = session_options()
        so.enable_profiling, so.profile_file_prefix = True, str(prefix)
        sess = self.make_session(so)
        bound = OrtBound(sess, feeds, out_shapes, self.device, None)
        for _ in range(runs + 1):
            bound.run()
        bound.sync()
        path = sess.end_profiling()
        del bound, sess
        return path

    def close(self):
        self.sess = None


def session_options():
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return so


def providers_for(device, graph):
    if device != "cuda":
        return ["CPUExecutionProvider"]
    cuda = {"device_id": "0"}
    if graph:
        cuda["enable_cuda_graph"] = "1"
    return [("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]


class Ort(Contender):
    """ONNX Runtime, ORT_ENABLE_ALL, on the CUDA EP (CPU EP in a CPU run); optionally CUDA graphs."""

    def __init__(self, name, graph=False):
        self.name, self.graph, self.needs_gpu = name, graph, graph

    def skip_reason(self, ctx):
        if ctx.device == "cuda" and not cuda_ep():
            import onnxruntime as ort
            return (f"onnxruntime {ort.__version__} is a CPU build: ORT's CUDA EP is not there to measure "
                    "(onnxruntime-gpu cannot be carried to a lent GPU machine)")
        return super().skip_reason(ctx)

    def model_path(self, ctx):
        return str(ctx.onnx_path())

    def ready(self, ctx):
        """Exports the model is made from: done before the clock starts."""
        ctx.onnx_path()

    def prepare(self, ctx, feeds, out_shapes):
        self.ready(ctx)

        def start():
            path = self.model_path(ctx)

            def make(so):
                import onnxruntime as ort
                return ort.InferenceSession(path, so or session_options(),
                                            providers=providers_for(ctx.device, self.graph))
            runner = OrtRunner(make, ctx.device, self.graph)
            bound = runner.bind(feeds, out_shapes)
            bound.run()
            bound.sync()
            return runner, bound
        return start_twice(start)


class OrtOptimizer(Ort):
    """ORT after ``onnxruntime.transformers.optimizer`` on the fp32 export, then fp16 conversion
    (``keep_io_types=False``) for fp16; the optimizer's run is part of the cold start."""

    def model_path(self, ctx):
        return str(ctx.ort_optimized())

    def ready(self, ctx):
        ctx.onnx_path("fp32")


class PlusEP(Contender):
    """plus_ep.InferenceSession(providers=["PlusEP", CUDA EP, CPU EP]); optionally CUDA graphs.
    Cold start uses an empty PlusEP cache (rewrite + NVRTC), warm start the cache it filled."""

    def __init__(self, name, graph=False):
        self.name, self.graph, self.needs_gpu = name, graph, graph

    def prepare(self, ctx, feeds, out_shapes):
        cache = ctx.fresh_dir(f"plus_ep_cache-{self.name}")
        ctx.onnx_path()
        said = []                            # plus_ep warns once per process: keep the first word

        def start():
            path = str(ctx.onnx_path())

            def make(so):
                from plus_ep import InferenceSession
                opts = {"cache_dir": str(cache)}
                if ctx.device == "cuda" and not cuda_ep():     # the plugin EP alone on the GPU device
                    if self.graph:
                        opts["cuda_graph"] = "1"
                    rest = ["CPUExecutionProvider"]
                else:
                    rest = providers_for(ctx.device, self.graph)
                return InferenceSession(path, so or session_options(), providers=[("PlusEP", opts)] + rest)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                runner = _PlusRunner(make, ctx.device, self.graph)
            said.extend(str(w.message) for w in caught if "PlusEP" in str(w.message))
            if runner.fallback:
                runner.note = "PlusEP fell back to the original model: not a GPU run" + \
                    (f" ({said[0]})" if said else "")
            bound = runner.bind(feeds, out_shapes)
            bound.run()
            bound.sync()
            return runner, bound
        return start_twice(start)


class _PlusRunner(OrtRunner):
    def __init__(self, make_session, device, graph):
        super().__init__(make_session, device, graph)
        self.fallback = getattr(self.sess, "plus_ep_arch", None) is None
        if self.fallback:
            self.gpu_run = False
