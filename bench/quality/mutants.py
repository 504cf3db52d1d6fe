"""Mutation score of the default test command: realistic bugs planted one at a time in a scratch copy of the
product, each run against a recorded subset of the default tests (`python -m pytest`), reporting which
tests catch it.

    python -m bench.quality.mutants --list               # the catalogue (id, family, file, what it breaks)
    nice -n 10 python -m bench.quality.mutants           # every mutant; JSON to bench/results/DATE-mutation.json
    python -m bench.quality.mutants --only attn_gqa_head_map row_eps_floor --out /tmp/m.json

How it works. The tracked tree (plus the built plus_ep/_launcher*.so and _emucuda*.so) is copied to a scratch
folder whose plus_ep/ links kernels/, graph_rewrites/ and warehouse/ as the installed package does, and
tests run there with PYTHONPATH pointing at it, so every import, NVRTC compile and child process sees the
mutated code. Each mutant is a source-level edit (exact text -> replacement, every occurrence counted, so a
stale mutant fails loudly instead of silently testing nothing) of a product file; C mutants rebuild the
launcher in the scratch tree. Running the whole suite per mutant is far too slow on 2 cores: each mutant
runs the union of the named test subsets of its family (SUBSETS: pytest node selections by file and -k
expression, evaluated by pytest's own -k parser on the collected node ids), which are all part of the default command, so a mutant a
subset catches is caught by the whole command. A baseline run of every subset on the unmutated tree comes
first; a test failing there cannot count as catching anything. A mutant that makes the run exceed its
timeout counts as caught (the default command would hang), and is marked so.

The JSON records per mutant: the edit, the subsets and the number of tests run, the tests that failed (the
catching ones), the time, and for survivors the written reason they are equivalent (`equivalent`) or the
test added since; plus per family the distinct test functions that catch its mutants. With --zoo, a mutant
that names a zoo model (`zoo`) is also judged by `plus-ep verify` with its defaults on that model rewritten in
the scratch tree (`zoo_verify`; the unmutated tree's run first, `zoo_baseline`). The kernel cache is
shared between the mutant runs (content-keyed: a mutated template or source never hits an unmutated entry).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from bench import ROOT

# ---------------------------------------------------------------------------------------------- subsets
# name -> [(test file, -k expression or None)]; every file is part of the default `python -m pytest`.
SUBSETS: dict[str, list] = {
    "gemm_mma": [("tests/emulated/test_ptx_gemm.py", "sm_80 and (f16 or tf32)"),
                 ("tests/emulated/test_row_kernels_conditioning.py", "gemm"),
                 ("tests/emulated/test_ptx_gemm.py", "sm_90- and f16"),
                 ("tests/emulated/test_gemm_group_kernels.py", "tf32 or f16"),
                 ("tests/emulated/test_ptx_gpu_backend.py", "gemm_reference"),
                 ("tests/emulated/test_models_on_kernels.py", "tf32 or fp16")],
    "gemm_simt": [("tests/emulated/test_ptx_gemm.py", "simt"),
                  ("tests/emulated/test_row_kernels_conditioning.py", "gemm"),
                  ("tests/emulated/test_ptx_golden.py", None),
                  ("tests/emulated/test_verify_kernels.py", "verify_passes or corrupted"),
                  ("tests/emulated/test_models_on_kernels.py", "exact")],
    "gemm_wgmma": [("tests/emulated/test_ptx_gemm.py", "sm_90a"),
                   ("tests/emulated/test_gemm_group_kernels.py", "wgmma or sm90a"),
                   ("tests/emulated/test_gemm_norm_cluster.py", "float64"),
                   ("tests/emulated/test_ptx_mutations.py", "weakened or unmutated"),
                   ("tests/emulated/test_models_on_kernels.py", "fp16")],
    "tma": [("tests/emulated/test_ptx_gemm_ws.py", "not box_off and not phase_flipped and not released and not next_stage"),
            ("tests/emulated/test_gemm_tma_routes.py", None),
            ("tests/cpu/test_golden.py", "tma"),
            ("tests/cpu/test_gemm_tma_model.py", None),
            ("tests/cpu/test_gemm_norm_cluster_routes.py", None),
            ("tests/emulated/test_gemm_issue_table.py", None),
            ("tests/cpu/test_gemm_tma_compile.py", None)],
    # the sm_90a attention body; its planted-bug tests plant these same edits themselves (left out)
    "attention_wgmma": [("tests/emulated/test_attention_sm90a.py", "matches_float64 or loads_each"),
                        ("tests/emulated/test_ptx_golden.py", "wgmma"),
                        ("tests/emulated/test_attention_sm90a_verify.py", None),
                        ("tests/cpu/test_attention_sm90a_routes.py", None),
                        ("tests/cpu/test_golden.py", "wgmma")],
    "gemm_norm_cluster": [("tests/emulated/test_gemm_norm_cluster.py", None),
                          ("tests/emulated/test_gemm_norm_cluster_verify.py", None),
                          ("tests/emulated/test_ptx_cluster_driver.py", None),
                          ("tests/emulated/test_models_on_kernels.py", "fp16")],
    "attention_f16": [("tests/emulated/test_ptx_attention.py", "tc_ and (d64 or d32 or d80)"),
                      ("tests/emulated/test_ptx_attention.py", "bshd"),
                      ("tests/emulated/test_ptx_gpu_backend.py", "attention"),
                      ("tests/emulated/test_models_on_kernels.py", "fp16")],
    "attention_tf32": [("tests/emulated/test_ptx_attention.py", "tf32 and (d64 or d32 or d80)"),
                       ("tests/emulated/test_ptx_attention.py", "bshd"),
                       ("tests/emulated/test_attention_tf32_rendered.py", None),
                       ("tests/emulated/test_models_on_kernels.py", "tf32")],
    "attention_simt": [("tests/emulated/test_ptx_attention.py", "simt_d64 or simt_d32 or simt_d80"),
                       ("tests/emulated/test_ptx_attention.py", "bshd"),
                       ("tests/emulated/test_attention_masked_rows.py", None),
                       ("tests/emulated/test_models_on_kernels.py", "exact or fuzzed")],
    "row": [("tests/emulated/test_row_kernels_conditioning.py", "softmax or norm"),
            ("tests/emulated/test_row_register_mode.py", None),
            ("tests/emulated/test_ptx_golden.py", "layernorm"),
            ("tests/emulated/test_nan_row_reductions.py", None),
            ("tests/emulated/test_row_reduction_outputs.py", None),
            ("tests/emulated/test_verify_kernels.py", "verify_passes or corrupted"),
            ("tests/emulated/test_models_on_kernels.py", "exact or fuzzed")],
    "pointwise": [("tests/emulated/test_index_ops_on_interpreter.py", None),
                  ("tests/emulated/test_nan_activations.py", None),
                  ("tests/emulated/test_cpu_resident_shapes_emulated.py", None),
                  ("tests/emulated/test_models_on_kernels.py", "fuzzed")],
    "render": [("tests/cpu/test_golden.py", None),
               ("tests/emulated/test_row_kernels_conditioning.py", "gemm"),
               ("tests/cpu/test_attention_roles.py", None),
               ("tests/emulated/test_attention_masked_rows.py", None),
               ("tests/emulated/test_nan_activations.py", None),
               ("tests/emulated/test_models_on_kernels.py", "exact or fuzzed")],
    "routes": [("tests/cpu/test_route_model.py", None),
               ("tests/cpu/test_gemm_norm_cluster_routes.py", None),
               ("tests/cpu/test_gemm_alignment_proof.py", None),
               ("tests/cpu/test_per_arch_build.py", None),
               ("tests/emulated/test_models_on_kernels.py", "exact or fuzzed")],
    "identify": [("tests/cpu/test_attention_roles.py", None),
                 ("tests/cpu/test_fuse.py", None),
                 ("tests/cpu/test_paper_examples.py", None),
                 ("tests/cpu/test_golden.py", None),
                 ("tests/cpu/test_fuzz.py", None)],
    "session_logging": [("tests/native/test_session_logging.py", None),
                        ("tests/cpu/test_ortlog.py", None)],
    "broadcast": [("tests/cpu/test_assumed_dims.py", None),
                  ("tests/emulated/test_runtime_broadcast.py", None),
                  ("tests/native/test_launch_bounds.py", "inconsistent_shape"),
                  ("tests/emulated/test_launch_bounds_emulated.py", "cases_1_to_3")],
    "reshape_zero": [("tests/cpu/test_shape_binding.py", "zero"),
                     ("tests/native/test_launcher.py", "zero_shape"),
                     ("tests/native/test_launch_bounds.py", "zero_element"),
                     ("tests/emulated/test_reshape_zero_emulated.py", None)],
    "launcher": [("tests/native/test_launcher.py", None),
                 ("tests/native/test_launcher_shapes.py", None),
                 ("tests/emulated/test_emulated_driver.py", None),
                 ("tests/emulated/test_verify_kernels.py", "verify_passes or corrupted"),
                 ("tests/emulated/test_models_on_kernels.py", "exact")],
    # issue 37: the classes of input the earlier subsets did not reach
    "vocabulary": [("tests/emulated/test_op_vocabulary_sweep.py", None),
                   ("tests/emulated/test_verify_conditioning.py", "saturation"),
                   ("tests/emulated/test_nan_activations.py", None)],
    "layouts": [("tests/emulated/test_rendered_layouts.py", None),
                ("tests/emulated/test_launch_geometry.py", None),
                ("tests/emulated/test_models_on_kernels.py", "exact")],
    # causal key-tile skipping (PLUS_HAS_ATTN_CAUSAL): the skip against the full loop, rendered graphs, the proof
    "attention_causal": [("tests/emulated/test_attention_causal_skip.py", None),
                         ("tests/emulated/test_attention_causal_graph.py", None),
                         ("tests/cpu/test_attention_causal_roles.py", None)],
    "attention_heads": [("tests/emulated/test_attention_head_dims.py", None),
                        ("tests/emulated/test_launch_geometry.py", None),
                        ("tests/emulated/test_attention_masked_rows.py", None)],
    "splitk_nbits": [("tests/emulated/test_split_k_and_int4.py", None),
                     ("tests/emulated/test_row_kernels_conditioning.py", "gemm"),
                     ("tests/emulated/test_contrib_kernels.py", "int4_gemm_kernel")],
    "geometry": [("tests/emulated/test_launch_geometry.py", None)],
    "verify_feeds": [("tests/cpu/test_verify_default_feeds.py", None),
                     ("tests/cpu/test_sample_inputs.py", None),
                     ("tests/cpu/test_decoder_feeds.py", None)],
    # the 8-bit TMA GEMM; its planted-bug tests plant these same edits themselves (left out)
    "ws8": [("tests/emulated/test_ptx_gemm_ws8.py", "not planted"),
            ("tests/emulated/test_gemm_ws8_model.py", None),
            ("tests/cpu/test_gemm_ws8_routes.py", None)],
    "quant": [("tests/cpu/test_quant_codegen.py", None),
              ("tests/cpu/test_quant_perfmodel.py", None),
              ("tests/emulated/test_quant_kernels.py", None)],
    "quant_attention": [("tests/cpu/test_quant_attention.py", None),
                        ("tests/emulated/test_quant_kernels.py", "qdq_attention")],
    "dynamic_range": [("tests/emulated/test_dynamic_range.py", None),
                      ("tests/emulated/test_quant_kernels.py", "dynamic")],
    "gemm_int8_quant_a": [("tests/emulated/test_dynamic_range.py", "ragged"),
                          ("tests/emulated/test_quant_kernels.py", "8bit and dynamic")],
    "gemm_int8": [("tests/emulated/test_gemm_int8.py", "i8_64x64 or i8_32x64 or batched"),
                  ("tests/emulated/test_quant_kernels.py", "8bit"),
                  ("tests/cpu/test_quant_codegen.py", "folds")],
    "interpreter": [("tests/cpu/test_ptx_semantics.py", None),
                    ("tests/cpu/test_ptx_8bit.py", None),
                    ("tests/cpu/test_ptx_layouts.py", None),
                    ("tests/cpu/test_ptx_wgmma_layout.py", None),
                    ("tests/emulated/test_ptx_mutations.py", None),
                    ("tests/emulated/test_ptx_gemm.py", "sm_80 and (f16 or tf32) and T1")],
}


@dataclass
class Mutant:
    id: str
    family: str                  # the template family or product area it belongs to
    path: str                    # product file, relative to the repository root
    edits: list                  # [(exact text, replacement)], each text must occur exactly `count` times
    what: str                    # the bug, in words
    subsets: list                # SUBSETS names run against it
    count: int = 1
    equivalent: str = ""         # for a survivor: why it cannot change a result (or what covers it)
    zoo: tuple = ()              # (zoo model, rewrite arguments...): `plus-ep verify` with its defaults must fail
    c: bool = field(init=False, default=False)

    def __post_init__(self):
        self.c = self.path.endswith((".c", ".h"))


def M(id, family, path, old, new, what, subsets, count=1, equivalent="", more=(), zoo=()):
    return Mutant(id, family, path, [(old, new), *more], what, list(subsets), count, equivalent, tuple(zoo))


GPT2 = ("zoo:gpt2", "--arch", "sm_80")      # TF32 GEMMs and attention with the causal + padding mask


T = "kernels/templates/"
GEMM_T, ATTN_T = "kernels/families/gemm/", "kernels/families/flash_attention/"
CATALOGUE = [
    # ---- gemm.cuh, tensor-core (mma.sync f16/bf16, tf32) -------------------------------------------------
    M("gemm_mma_wait_short", "gemm_mma", GEMM_T + "gemm.cuh",
      "plus_cp_async_wait<PLUS_STAGES - 2>();", "plus_cp_async_wait<PLUS_STAGES - 1>();",
      "the pipeline waits for one cp.async group too few: tile kt is read before it landed", ["gemm_mma"]),
    M("gemm_mma_bfrag_swap", "gemm_mma", GEMM_T + "gemm.cuh",
      "bf[2 * j][0] = r[0]; bf[2 * j][1] = r[1]; bf[2 * j + 1][0] = r[2]; bf[2 * j + 1][1] = r[3];\n      }\n#elif",
      "bf[2 * j][0] = r[0]; bf[2 * j][1] = r[2]; bf[2 * j + 1][0] = r[1]; bf[2 * j + 1][1] = r[3];\n      }\n#elif",
      "[N][K] B: the ldmatrix.x4 registers of two n8 tiles mixed up (k-high half of tile 0 <-> k-low of tile 1)",
      ["gemm_mma"]),
    M("gemm_mma_tail_zero_fill", "gemm_mma", GEMM_T + "gemm.cuh",
      "  avail = a < 0 ? 0 : (a > CE ? CE : a);",
      "  avail = a < 0 ? 0 : CE;",
      "cp.async copies whole 16-byte chunks at the K / row tail instead of zero-filling past the edge",
      ["gemm_mma"]),
    M("gemm_mma_tf32_no_round", "gemm_mma", GEMM_T + "gemm.cuh",
      "for (int q = 0; q < 4; ++q) af[i][q] = plus_to_tf32(af[i][q]);",
      "for (int q = 0; q < 4; ++q) af[i][q] = af[i][q];",
      "TF32 A operands not rounded (cvt.rna): the tensor core truncates them instead", ["gemm_mma"]),
    M("gemm_store_n_edge", "gemm_mma", GEMM_T + "gemm.cuh",
      "if (m >= blk.M || n >= blk.N) return;\n#if PLUS_SPLITK > 1\n  float* part = (float*)args.scratch[0];\n  part[",
      "if (m >= blk.M || n > blk.N) return;\n#if PLUS_SPLITK > 1\n  float* part = (float*)args.scratch[0];\n  part[",
      "the store guard lets column N through (one element past each row)", ["gemm_mma", "gemm_simt"]),
    # ---- gemm.cuh, SIMT fp32 and split-K ----------------------------------------------------------------
    M("gemm_simt_last_tile", "gemm_simt", GEMM_T + "gemm.cuh",
      "const bool more = kt + 1 < ktiles;", "const bool more = kt + 2 < ktiles;",
      "SIMT: the last K tile is never fetched (its stage keeps the previous tile)", ["gemm_simt"]),
    M("gemm_splitk_reduce_drop", "gemm_simt", GEMM_T + "gemm.cuh",
      "for (int p = 0; p < PLUS_SPLITK; ++p) s += part[p * total + i];",
      "for (int p = 0; p < PLUS_SPLITK - 1; ++p) s += part[p * total + i];",
      "split-K reduce sums one partial plane too few", ["gemm_simt", "gemm_mma"]),
    # ---- gemm_sm90a.cuh (wgmma) --------------------------------------------------------------------------
    M("wgmma_loader_no_swizzle", "gemm_wgmma", GEMM_T + "gemm_sm90a.cuh",
      "dst = r0 * 128 + ((c ^ (r0 & 7)) << 4);", "dst = r0 * 128 + (c << 4);",
      "the K-major tile loader forgets the 128-byte swizzle the descriptors promise", ["gemm_wgmma"]),
    M("wgmma_wait_one_more", "gemm_wgmma", GEMM_T + "gemm_sm90a.cuh",
      "    plus_wgmma_wait<1>();\n", "    plus_wgmma_wait<2>();\n",
      "two wgmma groups left in flight: the stage being refilled may still be read", ["gemm_wgmma"]),
    M("wgmma_acc_layout", "gemm_wgmma", GEMM_T + "gemm_sm90a.cuh",
      "plus_st_shared_f2(c_tile + c_offset(mf, r, c), acc[ms][4 * j + 2 * h], acc[ms][4 * j + 2 * h + 1]);",
      "plus_st_shared_f2(c_tile + c_offset(mf, r, c), acc[ms][4 * j + h], acc[ms][4 * j + h + 1]);",
      "accumulator fragment read as acc[4j + h] instead of acc[4j + 2h] (rows g and g+8 mixed)", ["gemm_wgmma"]),
    M("wgmma_a_k16_step", "gemm_wgmma", GEMM_T + "gemm_sm90a.cuh",
      "s_base + a_off + ms * 64 * 128 + kk * 32, 16, 1024);", "s_base + a_off + ms * 64 * 128 + kk * 16, 16, 1024);",
      "A descriptor advances 16 bytes per k16 step instead of 32 (8 k instead of 16)", ["gemm_wgmma"]),
    # ---- GEMM + norm on a cluster (plus_cluster.cuh, row.py tile mode, gemm_rownorm/tile.py) ---------------
    M("cluster_reduce_last_rank", "gemm_norm_cluster", T + "plus_cluster.cuh",
      "for (int q = 0; q < C; ++q) acc = combine", "for (int q = 0; q < C - 1; ++q) acc = combine",
      "the cluster-wide row reduction drops the last rank's partial", ["gemm_norm_cluster"]),
    M("cluster_partials_single_buffer", "gemm_norm_cluster", "kernels/codegen/row.py",
      'part = f"plus_rt_part[{self._passes % 2}]"', 'part = "plus_rt_part[0]"',
      "row passes reuse one partial buffer while other ranks may still read the previous pass's", ["gemm_norm_cluster"]),
    M("cluster_size_floor", "gemm_norm_cluster", "kernels/families/gemm_rownorm/tile.py",
      "menus.append((-(-int(symdim.parse(st.N)) // bn),", "menus.append((int(symdim.parse(st.N)) // bn,",
      "cluster size floor(N / BN): the ragged last column tile is never computed", ["gemm_norm_cluster"]),
    # ---- attention.cuh: every path -------------------------------------------------------------------------
    M("attn_gqa_head_map", "attention_f16", ATTN_T + "attention.cuh",
      "t.hkv = t.h / group;", "t.hkv = t.h % s.Hkv;",
      "grouped-query attention maps query head h to kv head h % Hkv instead of h / (H / Hkv)",
      ["attention_f16", "attention_simt"]),
    M("attn_score_hook_edges_only", "attention_simt", ATTN_T + "attention.cuh",
      "#if defined(PLUS_HAS_SCORE) || defined(PLUS_HAS_KEY_BIAS)\n  (void)t; (void)kv0; (void)r0; (void)rows;",
      "#if defined(PLUS_HAS_SCORE_NEVER) || defined(PLUS_HAS_KEY_BIAS)\n  (void)t; (void)kv0; (void)r0; (void)rows;",
      "the score hook (scale + mask) is applied on edge key tiles only, skipped on interior ones",
      ["attention_simt", "attention_f16"]),
    M("attn_row_max_half", "attention_simt", ATTN_T + "attention.cuh",
      "for (int o = 1; o < NXOR; o <<= 1) x = fmaxf(", "for (int o = 1; o < NXOR / 2; o <<= 1) x = fmaxf(",
      "the row maximum is reduced over half the lanes that share a row", ["attention_simt", "attention_f16"]),
    # ---- attention.cuh: SIMT ------------------------------------------------------------------------------
    M("attn_simt_no_rescale_l", "attention_simt", ATTN_T + "attention.cuh",
      "      m[r] = m_new;\n      l[r] *= alpha;\n", "      m[r] = m_new;\n",
      "SIMT online softmax: the running sum is not rescaled when a later key tile raises the maximum",
      ["attention_simt"]),
    M("attn_simt_masked_rows_unwritten", "attention_simt", ATTN_T + "attention.cuh",
      "    if (p < t.rows) {\n#pragma unroll\n      for (int c = 0; c < ND; ++c) plus_attn_out",
      "    if (p < t.rows && lsum > 0.0f) {\n#pragma unroll\n      for (int c = 0; c < ND; ++c) plus_attn_out",
      "SIMT: fully masked rows are left unwritten instead of 0 (guarded) / NaN", ["attention_simt"]),
    # ---- attention.cuh: tensor cores (f16/bf16 and TF32 share the schedule) --------------------------------
    M("attn_tc_no_rescale_l", "attention_f16", ATTN_T + "attention.cuh",
      "    m[rh] = m_new;\n    l[rh] *= alpha;\n", "    m[rh] = m_new;\n",
      "tensor-core online softmax: the running sum is not rescaled when the maximum grows",
      ["attention_f16", "attention_tf32"]),
    M("attn_f16_p_fragment", "attention_f16", ATTN_T + "attention.cuh",
      "a[1] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);\n        a[2] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);",
      "a[1] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);\n        a[2] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);",
      "f16/bf16: P's A fragment registers 1 and 2 swapped (rows g+8 and keys 8-15 exchanged)", ["attention_f16"]),
    M("attn_causal_tile_bound_short", "attention_causal", ATTN_T + "attention.cuh",
      "(int)min((long long)t.n_tiles, jmax / BKV + 1);", "(int)min((long long)t.n_tiles, jmax / BKV);",
      "causal skip: the key-tile bound one short, the diagonal tile (the last visible keys) never visited",
      ["attention_causal"]),
    M("attn_causal_tile_bound_long", "attention_causal", ATTN_T + "attention.cuh",
      "(int)min((long long)t.n_tiles, jmax / BKV + 1);", "(int)min((long long)t.n_tiles, jmax / BKV + 2);",
      "causal skip: one key tile past the diagonal visited (no output changes: only the work counts show it)",
      ["attention_causal"]),
    M("attn_causal_ignores_past", "attention_causal", ATTN_T + "attention.cuh",
      "const long long jmax = (long long)row_i(min(t.q0 + BQ, t.rows) - 1) + plus_attn_causal(args);",
      "const long long jmax = (long long)row_i(min(t.q0 + BQ, t.rows) - 1) + 0 * plus_attn_causal(args);",
      "causal skip ignores the diagonal offset (past keys): query i stops at key i instead of i + Skv - Sq",
      ["attention_causal"]),
    M("attn_causal_upper_trilu", "attention_causal", "warehouse/families/flash_attention.py",
      'if attr(n, "upper", 1) or kv is None', "if kv is None",
      "the causal proof accepts an upper Trilu (it masks the keys below the diagonal, not above)",
      ["attention_causal"]),
    M("attn_tc_masked_row_inf", "attention_f16", ATTN_T + "attention.cuh",
      "inv[rh] = lsum > 0.0f ? 1.0f / lsum : PLUS_MASKED_ROW_SCALE;", "inv[rh] = 1.0f / lsum;",
      "tensor cores: a fully masked row divides by its zero sum (NaN) even where the graph guards it",
      ["attention_f16", "attention_tf32"]),
    M("attn_tf32_p_fragment", "attention_tf32", ATTN_T + "attention.cuh",
      "a[1] = operand(__float_as_uint(s[kk][2]));\n        a[2] = operand(__float_as_uint(s[kk][1]));",
      "a[1] = operand(__float_as_uint(s[kk][1]));\n        a[2] = operand(__float_as_uint(s[kk][2]));",
      "TF32: P's m16n8k8 A fragment in the f16 order (registers 1 and 2 swapped)", ["attention_tf32"]),
    M("attn_tf32_k_tail_unguarded", "attention_tf32", ATTN_T + "attention.cuh",
      "w[e] = __float_as_uint(j < t.Skv ? plus_k(args, t.b, t.hkv, j, d0 + e) : 0.0f);",
      "w[e] = __float_as_uint(plus_k(args, t.b, t.hkv, j, d0 + e));",
      "TF32 K hook loads: keys past Skv read without the guard (out of the tensor)", ["attention_tf32"]),
    # ---- row kernels (kernels/codegen/row.py, plus_common.cuh) ------------------------------------------------
    M("row_eps_floor", "row", "kernels/codegen/row.py",
      'eps = lit(attr(node, "epsilon", 1e-5))', 'eps = lit(max(attr(node, "epsilon", 1e-5), 1e-3))',
      "LayerNorm/RMSNorm epsilon at least 1e-3 instead of the model's", ["row", "gemm_norm_cluster"]),
    M("row_var_unbiased", "row", "kernels/codegen/row.py",
      'self._scalar(f"rstd{k}", f"rsqrtf({q} / (float)L + {eps})")',
      'self._scalar(f"rstd{k}", f"rsqrtf({q} / (float)(L - 1) + {eps})")',
      "LayerNorm variance divided by L - 1 (unbiased) instead of L", ["row", "gemm_norm_cluster"]),
    M("row_softmax_no_max", "row", "kernels/codegen/row.py",
      'lambda idx: f"expf({self._x(node, idx)} - {mx})")', 'lambda idx: f"expf({self._x(node, idx)})")',
      "softmax row kernel without the max subtraction (exp overflows for logits above ~88)", ["row"],
      more=[('expr = f"{x} - {mx} - logf({s})" if log else f"expf({x} - {mx}) / {s}"',
             'expr = f"{x} - {mx} - logf({s})" if log else f"expf({x}) / {s}"')]),
    M("row_warp_sum_half", "row", T + "plus_common.cuh",
      "for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync", "for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync",
      "warp sum over 16 lanes only (block reductions miss half of every warp)", ["row", "gemm_norm_cluster"]),
    M("row_register_ragged_guard", "row", "kernels/codegen/row.py",
      'em.emit("if (j < L) {")', 'em.emit("if (j <= L) {")',
      "register mode: a row not a multiple of the lanes reads and stores one element past its end", ["row"]),
    M("row_register_any_index", "row", "kernels/codegen/row.py",
      "lambda idx: self._elem and list(idx) == canon,", "lambda idx: self._elem,",
      "register mode: a read of x at another element of the row takes the thread's own register copy", ["row"]),
    M("row_register_outer_index", "row", "kernels/codegen/row.py",
      'em.emit(f"const long long o{k} = {part};")', 'em.emit(f"const long long o{k} = row;")',
      "register mode: the row's named outer index is the row number (a position table read past its rows)",
      ["row"]),
    M("cluster_column_values_one_column", "gemm_norm_cluster", "kernels/codegen/row.py",
      'em.emit("const long long j = n0 + c;")', 'em.emit("const long long j = n0 + lane;")',
      "row tile: gamma, beta and the GEMM bias loaded once per CTA from the lane's first column only",
      ["gemm_norm_cluster"]),
    M("cluster_bias_next_column", "gemm_norm_cluster", "kernels/codegen/row.py",
      'names.append(f"w{n}[k]")', 'names.append(f"w{n}[(k + 1) % (PLUS_BN / 32)]")',
      "row tile: the x hook is passed the GEMM bias of another of the lane's columns", ["gemm_norm_cluster"]),
    M("cluster_reduce4_row_swapped", "gemm_norm_cluster", "kernels/codegen/row.py",
      "{part}[r4 + (lane >> 3)] = {name}_row;", "{part}[r4 + ((lane >> 3) ^ 1)] = {name}_row;",
      "row tile: the four-row warp reduction's results stored to the partials of the neighbouring rows",
      ["gemm_norm_cluster"]),
    # ---- point-wise kernels and the element puller (kernels/codegen/pointwise.py, kernels/codegen/pull.py) ---
    M("pointwise_last_element", "pointwise", "kernels/codegen/pointwise.py",
      'threadIdx.x; q < n;\\n"', 'threadIdx.x; q < n - 1;\\n"',
      "the grid-stride loop stops one element short", ["pointwise"]),
    M("pull_broadcast_left_aligned", "pointwise", "kernels/codegen/pull.py",
      'return ["0" if d == 1 and out_shape[off + k] != 1 else idx[off + k] for k, d in enumerate(in_shape)]',
      'return ["0" if d == 1 and out_shape[off + k] != 1 else idx[k] for k, d in enumerate(in_shape)]',
      "broadcast indices aligned left instead of right for inputs of lower rank", ["pointwise", "row"]),
    M("bcast_zero_against_one", "pointwise", "kernels/codegen/assumed.py",
      "    return sympy.Max(*dims) * sympy.Min(1, *dims)", "    return sympy.Max(*dims)",
      "a broadcast dim of 0 against 1 taken as 1: ORT's empty output refused (or a 1-row output)", ["broadcast"]),
    # ---- renderers ----------------------------------------------------------------------------------------
    M("render_gemm_beta_ignored", "render", "kernels/families/gemm/render.py",
      'return em.tmp(f"{lit(alpha)} * acc + {lit(beta)} * {c}", "float"), "float"',
      'return em.tmp(f"{lit(alpha)} * acc + {c}", "float"), "float"',
      "ONNX Gemm's beta is ignored (C added with weight 1)", ["render", "gemm_simt"]),
    M("render_attn_masked_nan_lost", "render", "kernels/families/flash_attention/render.py",
      'defines["PLUS_MASKED_ROW_NAN"] = 0 if a.nan_guard else 1', 'defines["PLUS_MASKED_ROW_NAN"] = 0',
      "a fully masked row gives 0 even where the graph has no NaN guard (ORT: NaN)", ["render"]),
    M("render_max_nan", "render", "kernels/codegen/cexpr.py",
      '"Pow": _pow, "Max": _minmax("fmaxf", ">"), "Min": _minmax("fminf", "<"),',
      '"Pow": _pow, "Max": lambda n, a, t: (f"fmaxf({a[0]}, {a[1]})", "float"), "Min": _minmax("fminf", "<"),',
      "Max through fmaxf alone: a NaN operand is dropped (ONNX: NaN)", ["render", "pointwise"]),
    # ---- routes ---------------------------------------------------------------------------------------------
    M("routes_first_config", "routes", "kernels/families/gemm/routes.py",
      "return [x[4] for x in sorted(cands, key=lambda x: x[:4])]", "return [x[4] for x in cands]",
      "the GEMM route model always picks the first usable config of the menu", ["routes"]),
    M("routes_aligned_ignores_ldb", "routes", "kernels/families/gemm/routes.py",
      "return bool(k.is_Integer and ld.is_Integer and (int(k) * elem) % 16 == 0 and (int(ld) * elem) % 16 == 0)",
      "return bool(k.is_Integer and (int(k) * elem) % 16 == 0)",
      "PLUS_ALIGNED=1 proven from K alone: a B whose rows are not whole 16-byte chunks gets 16-byte cp.async",
      ["routes"]),
    # ---- identification -----------------------------------------------------------------------------------
    M("identify_no_epilogue", "identify", "graph_rewrites/identify.py",
      "if epilogue and not p.allow_epilogue:", "if epilogue:",
      "growth refuses every epilogue (a GEMM's bias/activation stay unfused)", ["identify"]),
    M("identify_dropout_training", "identify", "warehouse/families/flash_attention.py",
      "            why = _dropout_training(view, node)\n            if why:\n                return why\n",
      "            why = _dropout_training(view, node)\n",
      "a training-mode Dropout between Softmax and PV is accepted (the kernel would drop nothing)", ["identify"]),
    M("identify_no_cycle_check", "identify", "graph_rewrites/identify.py",
      "if not self.acyclic_with(trial):", "if False:",
      "growth no longer refuses members that would make the fused node part of a cycle", ["identify"]),
    M("interp_shape_of_later_intermediate", "identify", "graph_rewrites/interpret.py",
      "if _is_shape(node) and node.input[0] not in values and node.input[0] not in support_of:",
      "if False:",
      "the +Graph interpreter runs a Shape of an intermediate only after the intermediate's statement, so a "
      "valid order (Expand(b, Shape(t)) placed before t) is refused", ["identify"]),
    # ---- the launcher (C): expressions and binding ---------------------------------------------------------
    M("bind_bcast_other_side_as_refused", "launcher", "plus_ep/native/bind.c",
      "        if (want == 1) {", "        if (0 && want == 1) {",
      "an input broadcast against a side of 1 the kernels cannot stretch is refused saying ORT refuses it too",
      ["launcher", "broadcast"]),
    M("bind_reshape_zero_unexplained", "launcher", "plus_ep/native/bind.c",
      "env->sym[sv->sym] == 0) {", "env->sym[sv->sym] == -1) {",
      "a 0 in a shape tensor (Reshape: the input's own dim) refused saying ORT's Reshape refuses it too",
      ["broadcast"]),
    M("bind_reshape_zero_as_is", "launcher", "plus_ep/native/bind.c",
      "        if (x == 0 && sv->zero == PLUS_ZERO_EXPR) {", "        if (0) {",
      "a 0 in a Reshape's shape tensor binds 0, not the input's dim the Reshape copies (X2 [0, 32], mask [65, 0]: "
      "an empty [65, 0, 96] where ONNX Runtime refuses)", ["reshape_zero"]),
    M("render_reshape_zero_literal", "render", "kernels/codegen/shapevals.py",
      "                means.append(dims[j] if j < len(dims) else None)", "                means.append(sympy.Integer(0))",
      "the plan says a 0 in a Reshape's shape tensor (allowzero 0) stays 0 instead of the input's dim",
      ["reshape_zero"]),
    M("fuse_shares_bodies_by_constant_shape", "identify", "graph_rewrites/fuse.py",
      '        a.t.ClearField("name")\n', '        a.t.ClearField("name")\n        a.t.ClearField("raw_data")\n',
      "fused subgraphs whose Constants differ only in value share one function body (the second runs the "
      "first's constant where no custom op runs it)", ["identify"]),
    M("launcher_cdiv_floor", "launcher", "plus_ep/native/expr.c",
      "else r = -floordiv(-a, b);", "else r = floordiv(a, b);",
      "cdiv evaluated as floor division: grids one block short on ragged sizes", ["launcher"]),
    M("launcher_le_strict", "launcher", "plus_ep/native/expr.c",
      "case PX_LE: r = a <= b; break;", "case PX_LE: r = a < b; break;",
      "`<=` evaluated as `<` (route conditions and guards at their boundary)", ["launcher"]),
    M("launcher_symbol_recheck", "launcher", "plus_ep/native/bind.c",
      "                if (env->sym[k] != x) {", "                if (0) {",
      "a symbol bound by two inputs is no longer checked to agree (mismatched shapes run)", ["launcher"]),
    M("launcher_last_route", "launcher", "plus_ep/native/bind.c",
      "for (int r = first; r < end && b->group_route[g] < 0; r++) {", "for (int r = first; r < end; r++) {",
      "the last route whose condition holds is taken instead of the first", ["launcher"]),
    # ---- issue 37: batched GEMMs, permutations, head dims, launches, split-K, int4, element ops, verify -----
    M("render_gemm_b_batch_stride_of_a", "render", GEMM_T + "render.py",
      "offset(sa, M, K), offset(sb, K, N)", "offset(sa, M, K), offset(sb, M, K)",
      "batched GEMM: B's batch stride taken as A's (M K instead of K N; equal in QK^T-shaped problems)",
      ["layouts", "gemm_simt"]),
    M("render_gemm_ldb_m", "render", GEMM_T + "hooks.py",
      "ldb = (K if trans_b else N) if ldb is None else ldb", "ldb = (K if trans_b else M) if ldb is None else ldb",
      "GEMM hooks: B's row stride M instead of N for a [K][N] B (equal when M == N)", ["layouts", "gemm_simt"],
      zoo=GPT2),
    M("pull_transpose_inverse", "pointwise", "kernels/codegen/pull.py",
      "                src_idx[p] = idx[i]\n", "                src_idx[i] = idx[p]\n",
      "a value pulled through Transpose takes the inverse permutation (right for perms that are their own inverse)",
      ["layouts", "pointwise"], zoo=GPT2),
    M("forward_transpose_inverse", "render", "kernels/codegen/forward.py",
      "fwd[node.output[0]] = ([in_idx[p] for p in perm], conds)",
      "fwd[node.output[0]] = ([in_idx[perm.index(i)] for i in range(len(perm))], conds)",
      "an epilogue stored through Transpose takes the inverse permutation", ["layouts", "render"], zoo=GPT2),
    M("attn_out_guard_padded", "attention_f16", ATTN_T + "render.py",
      '    em.emit(f"if (d >= {a.D}) return;")', '    em.emit(f"if (d >= {routes._padded(a.D)}) return;")',
      "attention output hook guarded by the padded head dim: D = 24 stores columns 24..31 into the next row",
      ["attention_heads", "attention_f16"]),
    M("attn_score_mask_ij_swap", "attention_simt", ATTN_T + "render.py",
      '    val, ct = em.value(score_t, em.broadcast(lead_l("b", "h") + ["i", "j"], em.shape(score_t), l_shape))',
      '    val, ct = em.value(score_t, em.broadcast(lead_l("b", "h") + ["j", "i"], em.shape(score_t), l_shape))',
      "the score hook indexes the logits' terms [.., j, i]: a causal mask becomes anti-causal",
      ["attention_heads", "attention_simt"], zoo=GPT2),
    M("launcher_launch_yz_swap", "launcher", "plus_ep/native/kernel.c",
      "d->cuLaunchKernel(cc->fn[i], g.grid[0], g.grid[1], g.grid[2],",
      "d->cuLaunchKernel(cc->fn[i], g.grid[0], g.grid[2], g.grid[1],",
      "cuLaunchKernel gets grid y and z swapped (invisible where both are 1)", ["launcher", "geometry"], zoo=GPT2),
    M("gemm_splitk_kend_unclamped", "gemm_simt", GEMM_T + "gemm.cuh",
      "  blk.kend = min(K, blk.kbeg + per);", "  blk.kend = blk.kbeg + per;",
      "split-K: the last split reads to its nominal end past K (equal ranges when K splits into whole tiles)",
      ["splitk_nbits", "gemm_simt"]),
    M("nbits_default_zero_point_int4", "render", GEMM_T + "nbits.py",
      'z = f"{float(1 << (bits - 1))}f"', 'z = "8.0f"',
      "MatMulNBits without zero points: int4's default 8 used for every bit width (2 bits: 2, 8 bits: 128)",
      ["splitk_nbits"]),
    M("cexpr_gelu_tanh_cubic", "elements", "kernels/codegen/cexpr.py",
      "0.044715f * {x} * {x} * {x}", "0.04715f * {x} * {x} * {x}",
      "Gelu(approximate=tanh) with a mistyped cubic coefficient (0.04715): within tolerance on N(0, 1) inputs",
      ["vocabulary"]),
    M("ops_softplus_overflow", "elements", "graph_rewrites/ops.py",
      '("Softplus", "(({x}) > 0.0f ? ({x}) + log1pf(expf(-({x}))) : log1pf(expf({x})))"),',
      '("Softplus", "log1pf(expf({x}))"),',
      "Softplus as log1p(exp(x)): +inf for x >= 89 (ONNX, ORT: x)", ["vocabulary"]),
    M("ops_sign_nan_zero", "elements", "graph_rewrites/ops.py",
      '("Sign", "(isnan({x}) ? ({x}) : (float)(({x} > 0.0f) - ({x} < 0.0f)))"),',
      '("Sign", "(float)(({x} > 0.0f) - ({x} < 0.0f))"),',
      "Sign(NaN) = 0 (ONNX: NaN)", ["vocabulary"]),
    M("cexpr_elu_alpha_default", "elements", "kernels/codegen/cexpr.py",
      'x, al = _f(a[0], t[0]), lit(attr(node, "alpha", 1.0))\n    return f"({x} >= 0.0f ? {x} : {al} * (expf({x}) - 1.0f))", F',
      'x, al = _f(a[0], t[0]), lit(1.0)\n    return f"({x} >= 0.0f ? {x} : {al} * (expf({x}) - 1.0f))", F',
      "Elu ignores its alpha attribute (the default 1.0 always)", ["vocabulary"]),
    M("cexpr_hardsigmoid_beta_from_alpha", "elements", "kernels/codegen/cexpr.py",
      'lit(attr(node, "alpha", 0.2)), lit(attr(node, "beta", 0.5))',
      'lit(attr(node, "alpha", 0.2)), lit(attr(node, "alpha", 0.5))',
      "HardSigmoid reads beta from the alpha attribute (right only with both defaults)", ["vocabulary"]),
    M("bounds_gelu_formula_dropped", "verify", "plus_ep/verification/bounds.py",
      '    "Gelu": _gelu_bound,\n', "",
      "verify's GELU bound back to C u |GELU(x)|: a correct kernel fails in saturation (-0.0 vs -4e-16)",
      ["vocabulary"]),
    M("feeds_index_limits_direct_only", "verify", "plus_ep/feeds.py",
      '            if len(src) == 1 and node.output and node.output[0]:\n                tracked[node.output[0]] = src.pop()',
      '            if False:\n                tracked[node.output[0]] = src.pop()',
      "default ids stay inside a table only when the input is the Gather's index itself (a position table "
      "reached through Reshape gets vocabulary ids: GPT-2's index 850 of 512)", ["verify_feeds"]),
    M("feeds_cache_length_as_batch", "verify", "plus_ep/feeds.py",
      "            out.setdefault(p, batch if ax == 0 else past)", "            out.setdefault(p, batch)",
      "a KV cache's unnamed length symbol (the dynamo exporter's s2) sized as the batch, not the past",
      ["verify_feeds"]),
    M("plan_extents_sum_as_symbol", "launcher", "kernels/wire/plan.py",
      'if re.fullmatch(r"s\\d+", tok)}',
      'if tok.startswith("s")}',
      "an input dim that is a sum of symbols (a decoder mask's past + seq) read as a bound symbol: no kernels",
      ["verify_feeds"]),
    M("interp_cvta_to_local_adds", "interpreter", "kernels/ptx/ops_alu.py",
      "            if to:\n                return lambda m: put(get() - base, m)",
      "            if to and space != \"local\":\n                return lambda m: put(get() - base, m)",
      "cvta.to.local adds the generic window's base instead of removing it (sinf's stack lands out of its frame)",
      ["vocabulary"]),
    # ---- the TMA GEMM (gemm_sm90a_ws.cuh, its tensor maps and its route model) -----------------------------
    M("ws_box_row_off_by_one", "tma", GEMM_T + "gemm_sm90a_ws.cuh",
      "plus_tma_load_3d(sa, ma, k0, (int)min(t.m0, M - 1), za, bar);",
      "plus_tma_load_3d(sa, ma, k0, (int)min(t.m0, M - 1) + 1, za, bar);",
      "the producer's A box starts one row below its tile: every row of C reads the next row of A", ["tma"]),
    M("ws_consumer_phase_flipped", "tma", GEMM_T + "gemm_sm90a_ws.cuh",
      "plus_mbar_wait(full + 8 * stage, phase);", "plus_mbar_wait(full + 8 * stage, phase ^ 1u);",
      "consumers wait on the other parity of a stage's full barrier: wgmma reads a stage before its copy lands",
      ["tma"]),
    M("ws_issue_term_dropped", "tma", GEMM_T + "routes.py",
      "warp_instructions=issued, cluster=", "warp_instructions=0.0, cluster=",
      "the route model stops charging the sm_90a tiles' counted instruction issue", ["tma"]),
    M("ws_gemm_tiles_config_import", "tma", GEMM_T + "routes.py",
      "    from .... import config     # the owner", "    from ... import config     # the owner",
      "PLUS_EP_GEMM_TILES read through a relative import one level short (the families move): every sm_90a "
      "render fails and the subgraph stays unfused", ["tma"]),
    # ---- the sm_90a attention body (attention_sm90a.cuh, its route) -----------------------------------------
    M("wg_attn_v_desc_stride_off", "attention_wgmma", ATTN_T + "attention_sm90a.cuh",
      "plus_wgmma_desc_sw128(skv + KV_BYTES, KV_BOX_BYTES, 1024)", "plus_wgmma_desc_sw128(skv + KV_BYTES, KV_BOX_BYTES, 512)",
      "the V descriptor's stride between 8-key core matrices is half a swizzle atom: P·V reads the wrong keys",
      ["attention_wgmma"]),
    M("wg_attn_consumer_phase_flipped", "attention_wgmma", ATTN_T + "attention_sm90a.cuh",
      "plus_mbar_wait(full + 8 * stage, phase);", "plus_mbar_wait(full + 8 * stage, phase ^ 1u);",
      "consumers wait on the other parity of a stage's full barrier: wgmma reads K/V before the copy lands",
      ["attention_wgmma"]),
    M("wg_attn_rescale_dropped", "attention_wgmma", ATTN_T + "attention.cuh",
      "      o[n][2 * rh] *= alpha;\n", "",
      "the tensor-core online softmax (shared by the mma.sync and sm_90a bodies) no longer rescales half of O's "
      "columns when a key tile raises a row's maximum", ["attention_wgmma"]),
    M("wg_attn_route_slower_wins", "attention_wgmma", ATTN_T + "routes.py",
      "if us is not None and us < today:", "if us is not None and us > today:",
      "the route takes the sm_90a body where the model says it is slower (and never where it is faster)",
      ["attention_wgmma"]),
    M("interp_wgmma_a_regs_rows_cols", "interpreter", "kernels/ptx/tensorcore.py",
      "out[16 * w + g + 8 * (r & 1), 2 * t + h + 8 * (r >> 1)]", "out[16 * w + g + 8 * (r >> 1), 2 * t + h + 8 * (r & 1)]",
      "wgmma with A from registers reads registers 1 and 2 as each other's (rows g+8 and columns 8-15 exchanged)",
      ["interpreter", "attention_wgmma"]),
    M("ws_epilogue_whole_chunk_past_m", "tma", GEMM_T + "gemm_sm90a_ws.cuh",
      "if (mrow + 64 <= M && nbase + EPI_W <= N) {", "if (mrow < M && nbase + EPI_W <= N) {",
      "the epilogue's unguarded path also takes a chunk whose rows cross M: stores past the last row of C", ["tma"]),
    M("ws_epilogue_whole_chunk_past_n", "tma", GEMM_T + "gemm_sm90a_ws.cuh",
      "if (mrow + 64 <= M && nbase + EPI_W <= N) {", "if (mrow + 64 <= M && nbase < N) {",
      "the epilogue's unguarded path also takes a chunk whose columns cross N: stores into the next row's start",
      ["tma"]),
    M("ws_multicast_boxes_in_halves", "tma", GEMM_T + "gemm_sm90a_ws.cuh",
      "for (int j = rank; j < BN / BOX_N; j += CL) {", "for (int j = rank; j < BN / BOX_N / CL * CL; j += CL) {",
      "a multicast pair shares B's 64-column boxes as whole halves: the third box of a 192-wide tile is never "
      "loaded and its stage's transaction count never completes", ["tma"]),
    M("ws_release_to_one_peer", "tma", GEMM_T + "gemm_sm90a_ws.cuh",
      "for (int q = 1; q < CL; ++q)", "for (int q = 1; q < 2; ++q)",
      "a consumer releases a multicast stage to its next peer only (right for a pair): in a cluster of four, two "
      "peers' producers wait for releases that never come", ["tma"]),
    M("ws_producer_regs_40", "tma", GEMM_T + "gemm_sm90a_ws.cuh",
      "constexpr int PRODUCER_REGS = 56, CONSUMER_REGS = CONSUMERS == 2 ? 224 : 160;",
      "constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = CONSUMERS == 2 ? 232 : 160;",
      "the producer warpgroup keeps 40 registers: a horizontal group's multicast tiles spill, the build excludes "
      "them and BERT's QKV group falls back to 128 x 128 tiles", ["tma"]),
    M("ws_gated_menu_keeps_192", "tma", GEMM_T + "routes.py",
      "if not gated or c.bn % 128 == 0", "if not gated or c.bn % 64 == 0",
      "a gated pair is offered the 192-wide TMA tiles, whose halves are not whole boxes: the kernel does not compile "
      "and the gated MLP stays unfused", ["tma"]),
    M("ws_192_issues_misread", "tma", GEMM_T + "sm90a_configs.py",
      '"ws_128x192x64_s5": (6609, 443)', '"ws_128x192x64_s5": (6609, 4430)',
      "the route model charges the 128 x 192 TMA tile ten times the warp instructions per k-tile the interpreter "
      "counts: BERT's b16 GEMMs go back to the 128 x 256 tiles", ["tma"]),
    # ---- the 8-bit TMA GEMM (gemm_sm90a_ws.cuh PLUS_MATH 3, WS8/WS8T configs, its menus) ----------------------
    M("ws8_fragment_column_swap", "ws8", GEMM_T + "gemm_sm90a_ws.cuh",
      'asm volatile("st.shared.v2.s32 [%0], {%1, %2};\\n"', 'asm volatile("st.shared.v2.s32 [%0], {%2, %1};\\n"',
      "the 8-bit epilogue stages a fragment's two columns swapped: every even column of C holds the odd one's sum",
      ["ws8"]),
    M("ws8_sums_truncated", "ws8", GEMM_T + "gemm_sm90a_ws.cuh",
      "PLUS_DEV void ld_acc(plus_u32 src, int& x) { x = ld_i(src); }",
      "PLUS_DEV void ld_acc(plus_u32 src, int& x) { x = (short)ld_i(src); }",
      "the 8-bit epilogue hands on the s32 sums truncated to 16 bits", ["ws8"]),
    M("ws8_b_signedness_of_a", "ws8", GEMM_T + "gemm_sm90a_ws.cuh",
      "((plus_b_t)-1 < 0), BN>", "((plus_ab_t)-1 < 0), BN>",
      "the 8-bit wgmma takes B's signedness from A: u8 x s8 multiplies B as unsigned", ["ws8"]),
    M("ws8t_block_written_in_place", "ws8", GEMM_T + "gemm_sm90a_ws.cuh",
      "st_w(at_t ^ (i * 0x90u), p[i]);", "st_w(at_p ^ (i * 0x90u), p[i]);",
      "the in-shared-memory transposition of a [K, N] B writes each transposed block back to its own place",
      ["ws8"]),
    M("ws8t_transpose_barrier_dropped", "ws8", GEMM_T + "gemm_sm90a_ws.cuh",
      "plus_named_sync(TRANSPOSED_BAR, 128 * CONSUMERS);", "",
      "the consumers' wgmmas read a stage's B before the other consumer's threads finished transposing it", ["ws8"]),
    M("ws8_menus_swapped", "ws8", GEMM_T + "routes.py",
      "(gemm_sm90a_configs.WS8_CONFIGS if b_kmajor", "(gemm_sm90a_configs.WS8_CONFIGS if not b_kmajor",
      "a [K, N] B is offered the tiles that read B as [N, K] (and the reverse)", ["ws8"]),
    # ---- the PTX interpreter --------------------------------------------------------------------------------
    M("interp_fma_zero_sign", "interpreter", "kernels/ptx/semantics.py",
      'z = np.where(same, np.copysign(0.0, c64), -0.0 if mode == "rm" else 0.0).astype(np.float32)',
      "z = np.where(same, np.copysign(0.0, c64), 0.0).astype(np.float32)",
      "fma: an exact zero sum is +0 under .rm too (IEEE: -0)", ["interpreter"]),
    M("interp_tf32_truncate", "interpreter", "kernels/ptx/semantics.py",
      "r = ((u + 0x1000) & 0xFFFFE000).astype(np.uint32)", "r = (u & 0xFFFFE000).astype(np.uint32)",
      "cvt.rna.tf32.f32 truncates instead of rounding to nearest (ties away)", ["interpreter"]),
    M("interp_ldmatrix_trans_ignored", "interpreter", "kernels/ptx/tensorcore.py",
      "            if trans:\n                mats = mats.transpose(0, 1, 3, 2)\n",
      "            if trans and False:\n                mats = mats.transpose(0, 1, 3, 2)\n",
      "ldmatrix .trans loads like the plain form", ["interpreter"]),
    M("interp_shfl_bfly_4bit", "interpreter", "kernels/ptx/ops_warp.py",
      "                j = lane ^ bv\n", "                j = lane ^ (bv & 15)\n",
      "shfl.bfly keeps only 4 bits of the lane mask (xor 16 exchanges nothing)", ["interpreter", "row"]),
    M("interp_cp_async_no_zero_fill", "interpreter", "kernels/ptx/ops_mem.py",
      "            data = np.zeros((len(tids), size), np.uint8)\n            if zg is None:",
      "            data = np.full((len(tids), size), 0x7F, np.uint8)\n            if zg is None:",
      "cp.async with src-size < cp-size leaves the rest of the 16 bytes as garbage instead of zeros",
      ["interpreter"]),
    M("interp_race_check_inverted", "interpreter", "kernels/ptx/checks.py",
      "& ~self._ordered(wt, self.w_wep[idx], t)\n        if race.any():",
      "& self._ordered(wt, self.w_wep[idx], t)\n        if race.any():",
      "the shared-memory race checker flags reads ordered by a warp barrier and misses unordered ones",
      ["interpreter"]),
    # ---- QuantizeLinear / DequantizeLinear (cexpr.py, pull.py, plus_quant.cuh) ------------------------------
    M("interp_s8_read_unsigned", "interpreter", "kernels/ptx/tensorcore.py",
      "        return b.view(np.int8).astype(np.int64)\n", "        return b.astype(np.int64)\n",
      "8-bit mma/wgmma operands of type .s8 read as unsigned bytes", ["interpreter"]),
    M("interp_k32_b_rows", "interpreter", "kernels/ptx/tensorcore.py",
      "br = np.array([[4 * _t + j + 16 * r for j in range(4)] for r in range(2)])",
      "br = np.array([[4 * _t + j + 8 * r for j in range(4)] for r in range(2)])",
      "m16n8k32 B fragment: the second register's rows 8 instead of 16 further down K", ["interpreter"]),
    M("interp_fp8_satfinite_ignored", "interpreter", "kernels/ptx/semantics.py",
      "    big = top if satfinite else (np.inf if has_inf else np.nan)",
      "    big = np.inf if has_inf else np.nan",
      "cvt to e4m3/e5m2 ignores .satfinite: overflow gives NaN / infinity", ["interpreter"]),
    M("i8_signedness_lost", "gemm_int8", GEMM_T + "gemm.cuh",
      "plus_mma_m16n8k32_i8<(plus_ab_t)-1 < 0, (plus_b_t)-1 < 0>(d, a, b[0], b[1]);",
      "plus_mma_m16n8k32_i8<false, (plus_b_t)-1 < 0>(d, a, b[0], b[1]);",
      "8-bit GEMM: a signed A multiplied as unsigned bytes", ["gemm_int8"]),
    M("i8_kn_b_rows", "gemm_int8", GEMM_T + "gemm.cuh",
      "const unsigned char* p = bs + (kk + 4 * t + 16 * r) * PLUS_GEMM_LDB_S + wn0 + j * 8 + g;",
      "const unsigned char* p = bs + (kk + 4 * t + 8 * r) * PLUS_GEMM_LDB_S + wn0 + j * 8 + g;",
      "8-bit GEMM with a [K][N] B: the fragment's second register gathered 8 rows down instead of 16",
      ["gemm_int8"]),
    M("fold_scale_per_tensor", "gemm_int8", "graph_rewrites/contrib/quant.py",
      "scale = (np.float32(sa.reshape(-1)[0]) * sw).astype(np.float32)",
      "scale = (np.float32(sa.reshape(-1)[0]) * sw.reshape(-1)[0] + 0 * sw).astype(np.float32)",
      "the 8-bit GEMM's epilogue scales every column by the first column's weight scale", ["gemm_int8"]),
    M("fold_zero_point_ignored", "gemm_int8", "graph_rewrites/contrib/quant.py",
      "    zero = 0 if za is None else int(za.reshape(-1)[0])\n", "    zero = 0\n",
      "the 8-bit GEMM drops the activation's zero-point correction", ["gemm_int8"]),
    M("dr_partials_of_cta0_only", "quant", "kernels/families/dynamic_range/dynamic_range.cuh",
      "for (unsigned c = threadIdx.x; c < gridDim.x; c += PLUS_DR_THREADS) {",
      "for (unsigned c = threadIdx.x; c < 1u; c += PLUS_DR_THREADS) {",
      "dynamic range: the last CTA combines only CTA 0's partial min and max", ["dynamic_range"]),
    M("dr_finish_one_arrival_early", "quant", "kernels/families/dynamic_range/dynamic_range.cuh",
      "last = plus_last_arrival(word, gridDim.x);", "last = plus_last_arrival(word, gridDim.x - 1);",
      "dynamic range: the combine runs at the second-to-last CTA's arrival, before the last partial",
      ["dynamic_range"]),
    M("aquant_chunk_column_dropped", "gemm_int8", GEMM_T + "gemm.cuh",
      "plus_a_quant(args, b, m0 + r, k0 + cc + j)", "plus_a_quant(args, b, m0 + r, k0 + j)",
      "8-bit GEMM quantizing A as it loads it: every 16-byte chunk of a row reads the row's first chunk",
      ["gemm_int8_quant_a"]),
    M("aquant_last_k_dropped", "gemm_int8", GEMM_T + "gemm.cuh",
      "m0 + r < m_lim && k0 + cc + j < k_lim ?", "m0 + r < m_lim && k0 + cc + j < k_lim - 1 ?",
      "8-bit GEMM quantizing A as it loads it: the last k of every row is left 0", ["gemm_int8_quant_a"]),
    M("dql_zero_point_floor", "quant", "graph_rewrites/contrib/quant.py",
      '    zpf = e.op("Round", e.op("Clip",', '    zpf = e.op("Floor", e.op("Clip",',
      "DynamicQuantizeLinear's zero point rounded down instead of to nearest even", ["dynamic_range"]),
    M("attn_prob_unnormalised_simt", "quant", ATTN_T + "attention.cuh",
      "expf(s[r][c] - m_use) * inv_l[r])", "expf(s[r][c] - m_use))",
      "QDQ attention, SIMT: the probability hook quantizes e^(s - m) without dividing by the row's sum",
      ["quant_attention"]),
    M("attn_prob_unnormalised_tc", "quant", ATTN_T + "attention.cuh",
      "exp2f((s[n][e] - m_use) * LOG2E) * inv_l[rh])", "exp2f((s[n][e] - m_use) * LOG2E))",
      "QDQ attention, tensor cores: the probability hook quantizes e^(s - m) without dividing by the row's sum",
      ["quant_attention"]),
    M("attn_prob_second_pass_restarts_late", "quant", ATTN_T + "attention.cuh",
      "const int kt_next = kt + 1 < t.kt1 ? kt + 1 : stats ? t.kt0 : -1;",
      "const int kt_next = kt + 1 < t.kt1 ? kt + 1 : -1;",
      "QDQ attention, tensor cores: the second pass starts on the last key tile left in shared memory, not the first",
      ["quant_attention"]),
    M("attn_prob_quantization_ignored", "quant", "warehouse/families/flash_attention.py",
      "            quantized = True\n", "            quantized = False\n",
      "the role finder lets a quantization of the probabilities through without the probability hook",
      ["quant_attention"]),
    M("explain_fold_entry_missing", "quant", "plus_ep/explain.py",
      "({(contrib_op(g.node) or FOLDS[g.node.op_type]).becomes})", "({contrib_op(g.node).becomes})",
      "plus-ep explain looks a folded quantized MatMul up among the contrib ops (and crashes)", ["quant_attention"]),
    M("quant_zero_point_ignored", "quant", "kernels/codegen/cexpr.py",
      'return f"((float)(({a[0]}) - ({a[2]})) * {s})", F', 'return f"((float)({a[0]}) * {s})", F',
      "DequantizeLinear of integers ignores the zero point", ["quant"]),
    M("quant_scale_per_tensor", "quant", "kernels/codegen/pull.py",
      "            at = [idx[axis]]\n", '            at = ["0"]\n',
      "a per-axis scale and zero point read at channel 0: per tensor instead of per channel", ["quant"]),
    M("quant_saturation_dropped", "quant", T + "plus_quant.cuh",
      "  return (long long)(v >= lo ? (v <= hi ? v : hi) : lo);", "  return (long long)v;",
      "QuantizeLinear to integers without saturation (out-of-range values wrap in the store)", ["quant"]),
    M("quant_fp8_truncates", "quant", T + "plus_quant.cuh",
      "    a = rintf(a * up) * down;", "    a = truncf(a * up) * down;",
      "float8 rounding truncates instead of rounding to nearest even", ["quant"]),
    M("unwritten_0d_made_1d", "quant", "plus_ep/verification/bounds.py",
      "    a = np.asarray(a)                  # a 0-d output stays 0-d (ascontiguousarray makes it 1-d)\n",
      "    a = np.ascontiguousarray(a)\n",
      "verify's unwritten-element mask of a 0-d output comes back 1-d: compare crashes on a dynamic scale",
      ["quant"]),
    M("i8_output_charged_one_byte", "quant", GEMM_T + "routes.py",
      "out_b = (4 if cfg.math == gemm_configs.MATH_INT8 else elem) if out_bytes is None else out_bytes",
      "out_b = elem if out_bytes is None else out_bytes",
      "the route model charges an 8-bit GEMM's C at its operands' 1 byte instead of 4", ["quant"]),

    # ---- session-time messages at ONNX Runtime's log severity, the planner's progress (issue 39) -------------
    M("ortlog_ignores_severity", "session_logging", "plus_ep/ortlog.py",
      "    if not shows(level, sess_options):\n        return False\n", "",
      "a session-time line shows whatever the session's or ORT's severity (log_severity_level=3 still warns)",
      ["session_logging"]),
    M("log_once_counts_hidden", "session_logging", "plus_ep/native/ep_base.c",
      "if (!plus_ep_log_shows(logger, level) || atomic_exchange(once, 1)) return 0;",
      "if (atomic_exchange(once, 1) || !plus_ep_log_shows(logger, level)) return 0;",
      "a once-per-process C line is used up by a logger that hides it (a later session never gets it)",
      ["session_logging"]),
    M("progress_not_routed", "session_logging", "plus_ep/progress.py",
      '            return "lines", route[1]', "            return how, stream",
      "the planner's progress is dropped off a terminal instead of going to ORT's logger", ["session_logging"]),
]

FAMILIES = ("gemm_mma", "gemm_wgmma", "gemm_norm_cluster", "attention_f16", "attention_tf32", "attention_simt",
            "row", "pointwise")          # the template families of the acceptance (two independent tests each)


# ------------------------------------------------------------------------------------------- the tree
def _git(*args, cwd=ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def prepare_tree(work: Path) -> Path:
    """A scratch copy of the tracked (and untracked, not ignored) files plus the built native libraries;
    plus_ep/ links kernels/, graph_rewrites/ and warehouse/ as the installed package maps them."""
    tree = work / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    files = _git("ls-files", "-co", "--exclude-standard").splitlines()
    for f in files:
        src = ROOT / f
        if src.is_file():
            dst = tree / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    for so in list((ROOT / "plus_ep").glob("_launcher*.so")) + list((ROOT / "plus_ep").glob("_emucuda*.so")):
        shutil.copy2(so, tree / "plus_ep" / so.name)
    for sub in ("kernels", "graph_rewrites", "warehouse"):
        (tree / "plus_ep" / sub).symlink_to(Path("..") / sub)
    return tree


def tree_env(tree: Path, work: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PLUS_EP_OVERRIDE", "PLUS_EP_DUMP", "PLUS_EP_CUDA", "FAKE_CUDA_"))}
    env["PYTHONPATH"] = str(tree)
    env["PLUS_EP_CACHE_DIR"] = str(work / "cache")        # shared by the runs: content-keyed
    from plus_ep import config
    env.setdefault("PLUS_EP_ZOO_DIR", str(config.zoo_dir()))
    return env


def collect(tree: Path, env: dict, files: list) -> list:
    """Node ids of every test in `files` (one collection run)."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files]
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False).stdout
    return [ln.strip() for ln in out.splitlines() if "::" in ln and not ln.startswith(("=", " "))]


def select(ids: list, path: str, kexpr) -> list:
    """The ids of `path` that pytest's -k expression `kexpr` keeps, each name matched case-insensitively as a
    substring of the node id (what -k does with the names of a test and its parents)."""
    from _pytest.mark.expression import Expression
    mine = [i for i in ids if i.split("::")[0] == path]
    if not kexpr:
        return mine
    expr = Expression.compile(kexpr)
    return [i for i in mine if expr.evaluate(lambda name, i=i: name.lower() in i.split("::", 1)[1].lower())]


def run_tests(tree: Path, env: dict, ids: list, xml: Path, timeout: float) -> dict:
    """Run `ids`; {"failed": [node ids failed or errored], "seconds": s, "timeout": bool, "ran": n}."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit2",
           f"--junitxml={xml}", *ids]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": [], "seconds": round(time.time() - t0, 1), "timeout": True, "ran": 0, "tail": ""}
    failed, ran = [], 0
    try:
        for tc in ET.parse(xml).getroot().iter("testcase"):
            ran += 1
            if tc.find("failure") is not None or tc.find("error") is not None:
                cls, name = tc.get("classname", ""), tc.get("name", "")
                failed.append(f"{cls.replace('.', '/')}.py::{name}")
    except (ET.ParseError, FileNotFoundError):
        failed = ["<no junit report>"]
    tail = "" if failed or p.returncode == 0 else p.stdout[-1500:]
    return {"failed": failed, "seconds": round(time.time() - t0, 1), "timeout": False, "ran": ran,
            "rc": p.returncode, "tail": tail}


def apply(tree: Path, m: Mutant) -> dict:
    """Apply `m` in the tree; returns {path: original text}. Raises when an edit does not occur `count` times."""
    path = tree / m.path
    text = orig = path.read_text()
    for old, new in m.edits:
        n = text.count(old)
        if n != m.count:
            raise ValueError(f"mutant {m.id}: {old!r} occurs {n} times in {m.path}, expected {m.count}")
        text = text.replace(old, new)
    path.write_text(text)
    return {m.path: orig}


def rebuild_launcher(tree: Path, env: dict) -> str:
    p = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, env=env,
                       capture_output=True, text=True, check=False)
    return "" if p.returncode == 0 else (p.stdout + p.stderr)[-2000:]


def zoo_verify(tree: Path, env: dict, work: Path, spec: tuple, timeout: float) -> dict:
    """`plus-ep rewrite MODEL ARGS` then `plus-ep verify` with its defaults, in the tree: caught when verify exits
    non-zero (1: a mismatch, finding or node that did not run) or the rewrite fails."""
    model, *rewrite_args = spec
    out = work / "zoo.plus.onnx"
    t0 = time.time()
    res = {"model": model, "rewrite": list(rewrite_args)}
    for step, cmd in (("rewrite", ["rewrite", model, "-o", str(out), *rewrite_args, "-q"]),
                      ("verify", ["verify", str(out), "-q"])):
        try:
            p = subprocess.run([sys.executable, "-m", "plus_ep", *cmd], cwd=tree, env=env, capture_output=True,
                               text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            res.update(caught=True, how=f"{step} timed out", seconds=round(time.time() - t0, 1))
            return res
        lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
        res[step] = {"rc": p.returncode, "last": lines[-1][:300] if lines else ""}
        if p.returncode != 0:
            res.update(caught=True, how=f"{step} exit {p.returncode}", seconds=round(time.time() - t0, 1))
            return res
    res.update(caught=False, how="verify passed", seconds=round(time.time() - t0, 1))
    return res


def test_function(node_id: str) -> str:
    """file::function of a node id (parameters dropped): what counts as one independent test."""
    return re.sub(r"\[.*$", "", node_id)


# --------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.quality.mutants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the catalogue and exit")
    ap.add_argument("--only", nargs="*", default=None, help="mutant ids to run (default: all)")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one under /tmp)")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/<date>-mutation.json)")
    ap.add_argument("--timeout", type=float, default=1500, help="seconds per mutant run (a hang counts as caught)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the subsets")
    ap.add_argument("--zoo", action="store_true",
                    help="also rewrite the zoo model a mutant names and run `plus-ep verify` with its defaults on it")
    args = ap.parse_args(argv)
    if args.list:
        for m in CATALOGUE:
            print(f"{m.id:34s} {m.family:18s} {m.path:34s} {m.what}")
        print(f"{len(CATALOGUE)} mutants")
        return 0
    chosen = [m for m in CATALOGUE if args.only is None or m.id in args.only]
    unknown = set(args.only or []) - {m.id for m in CATALOGUE}
    if unknown:
        print(f"unknown mutant ids: {sorted(unknown)}", file=sys.stderr)
        return 2
    work = Path(args.work or f"/tmp/plus_ep_mutants_{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out or ROOT / "bench" / "results" / f"{datetime.date.today()}-mutation.json")
    tree = prepare_tree(work)
    env = tree_env(tree, work)
    for m in chosen:                          # stale mutants fail before anything runs
        for old, _ in m.edits:
            n = (tree / m.path).read_text().count(old)
            if n != m.count:
                raise SystemExit(f"mutant {m.id}: {old!r} occurs {n} times in {m.path}, expected {m.count}")
    t_all = time.time()
    names = sorted({s for m in chosen for s in m.subsets})
    every_id = collect(tree, env, sorted({f for n in names for f, _ in SUBSETS[n]}))
    ids_of: dict = {}
    for name in names:
        ids = [i for path, k in SUBSETS[name] for i in select(every_id, path, k)]
        ids_of[name] = list(dict.fromkeys(ids))
        if not ids_of[name]:
            raise SystemExit(f"subset {name} selects no test")
        print(f"subset {name}: {len(ids_of[name])} tests", flush=True)
    baseline_failed: set = set()
    baseline = None
    if not args.no_baseline:
        every = list(dict.fromkeys(i for ids in ids_of.values() for i in ids))
        print(f"baseline: {len(every)} tests on the unmutated tree", flush=True)
        baseline = run_tests(tree, env, every, work / "baseline.xml", args.timeout * 3)
        baseline_failed = set(baseline["failed"])
        print(f"baseline: {len(baseline_failed)} failed, {baseline['seconds']} s", flush=True)
    zoo_baseline = {}
    if args.zoo and not args.no_baseline:
        for spec in sorted({m.zoo for m in chosen if m.zoo}):
            zoo_baseline[" ".join(spec)] = zoo_verify(tree, env, work, spec, args.timeout * 3)
            print(f"zoo baseline {' '.join(spec)}: {zoo_baseline[' '.join(spec)]['how']}", flush=True)
    from bench.harness.env_info import env_info
    doc = {"what": "mutation score of the default test command (python -m pytest): each mutant against the union "
                   "of its subsets (tests of the default command); see bench/quality/mutants.py",
           "date": datetime.datetime.now().isoformat(timespec="seconds"), "env": env_info(),
           "git_head": _git("rev-parse", "HEAD").strip(), "command": "nice -n 10 python -m bench.quality.mutants",
           "subsets": {k: [{"file": f, "k": kx} for f, kx in SUBSETS[k]] for k in ids_of},
           "subset_sizes": {k: len(v) for k, v in ids_of.items()},
           "baseline": None if baseline is None else {"tests": baseline["ran"], "failed": sorted(baseline_failed),
                                                      "seconds": baseline["seconds"]},
           "zoo_baseline": zoo_baseline,
           "mutants": []}
    for i, m in enumerate(chosen):
        ids = list(dict.fromkeys(x for s in m.subsets for x in ids_of[s]))
        rec = {"id": m.id, "family": m.family, "file": m.path, "what": m.what,
               "edits": [{"from": a, "to": b} for a, b in m.edits], "subsets": m.subsets, "tests_run": len(ids)}
        originals = apply(tree, m)
        try:
            err = rebuild_launcher(tree, env) if m.c else ""
            if err:
                res = {"failed": ["<launcher build failed>"], "seconds": 0, "timeout": False, "ran": 0, "tail": err}
            else:
                res = run_tests(tree, env, ids, work / f"{m.id}.xml", args.timeout)
            if args.zoo and m.zoo and not err:
                rec["zoo_verify"] = zoo_verify(tree, env, work, m.zoo, args.timeout)
        finally:
            for p, text in originals.items():
                (tree / p).write_text(text)
            if m.c:
                for so in (ROOT / "plus_ep").glob("_launcher*.so"):
                    shutil.copy2(so, tree / "plus_ep" / so.name)
        caught_by = [f for f in res["failed"] if f not in baseline_failed]
        rec.update(caught=bool(caught_by) or res["timeout"], timeout=res["timeout"], caught_by=caught_by,
                   catching_functions=sorted({test_function(f) for f in caught_by}), seconds=res["seconds"])
        if not rec["caught"]:
            rec["equivalent"] = m.equivalent or None
            if res.get("tail"):
                rec["note"] = res["tail"][-600:]
        doc["mutants"].append(rec)
        print(f"[{i + 1}/{len(chosen)}] {m.id}: {'CAUGHT' if rec['caught'] else 'SURVIVED'} "
              f"by {len(caught_by)} tests ({len(rec['catching_functions'])} functions), {res['seconds']} s", flush=True)
        _write(doc, out, t_all)
    _write(doc, out, t_all)
    s = doc["summary"]
    print(f"mutation score: {s['caught']}/{s['mutants']} = {s['score']:.1%}; survivors: {s['survivors']}; "
          f"{s['minutes']} min; {out}")
    return 0


def _write(doc: dict, out: Path, t0: float) -> None:
    ms = doc["mutants"]
    caught = [m for m in ms if m["caught"]]
    fam = {}
    for f in sorted({m["family"] for m in ms}):
        of = [m for m in ms if m["family"] == f]
        fam[f] = {"mutants": len(of), "caught": sum(m["caught"] for m in of),
                  "catching_functions": sorted({c for m in of for c in m["catching_functions"]}),
                  "each_caught_by_two_functions": all(len(m["catching_functions"]) >= 2 for m in of)}
    doc["summary"] = {"mutants": len(ms), "caught": len(caught), "score": len(caught) / len(ms) if ms else 0.0,
                      "survivors": [m["id"] for m in ms if not m["caught"]], "families": fam,
                      "zoo_verify": {m["id"]: m["zoo_verify"]["caught"] for m in ms if "zoo_verify" in m},
                      "minutes": round((time.time() - t0) / 60, 1)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
