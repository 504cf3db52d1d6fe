"""plus-ep profile: distributed-shared-memory traffic of cluster kernels is reported apart from DRAM,
scaled like every count when CTAs are sampled."""
from plus_ep.verification.profile import node_profile, profile_text


def _row(ctas_run):
    counters = {"grid": [6, 4, 1], "ctas_run": ctas_run, "flops": 100, "unique_dram_bytes": 4096,
                "dsmem_ld": {"requests": 8, "bytes": 3072}, "dsmem_st": {"requests": 2, "bytes": 1024},
                "shared_ld": {"requests": 10, "wavefronts": 10, "ideal_wavefronts": 10, "bytes": 1280}}
    return {"node": "plus_ep/gemm_layernorm/3", "pattern": "gemm_layernorm", "arch": "sm_90a", "math": "fp16",
            "kernels": ["plus_gemm"], "launches": 1, "counters": [counters], "n_findings": 0, "errors": []}


def test_dsmem_bytes_are_summed_scaled_and_kept_out_of_dram():
    full = node_profile(_row(24))
    assert full["dsmem_bytes"] == 4096 and full["dram_bytes"] == 4096 and not full["sampled"]
    half = node_profile(_row(12))          # one cluster row of two sampled: counts doubled
    assert half["dsmem_bytes"] == 8192 and half["dram_bytes"] == 8192 and half["sampled"]
    assert half["smem_wavefronts_per_request"] == 1.0


def test_text_names_the_dsmem_line_only_when_there_is_traffic():
    rep = {"model": "m.onnx", "arch": "sm_90a", "gpu": "H100 SXM (model)", "inputs": {}, "sample_ctas": None,
           "nodes": [node_profile(_row(24))], "errors": []}
    assert "4.10kB through distributed shared memory" in profile_text(rep)
    plain = _row(24)
    del plain["counters"][0]["dsmem_ld"], plain["counters"][0]["dsmem_st"]
    rep["nodes"] = [node_profile(plain)]
    assert "distributed shared memory" not in profile_text(rep)
