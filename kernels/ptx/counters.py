"""Per-launch emulator counts: what Nsight Compute would report, *modelled* from the interpreted
execution — never measurements.

* instructions: warp-level issues and thread-level executions per class (predicated-off threads are not
  executed); tensor-core instructions (mma.sync per warp, wgmma.mma_async per warpgroup); FLOPs
  (tensor-core MACs x2, fma.f32 x2, add/sub/mul.f32 x1 per thread), the tensor-core ones also by instruction
  class and precision (`tensor_flops`: {"mma.fp16": ..., "mma.tf32": ..., "wgmma.fp16": ...}; bf16 counts
  as fp16, whose peak it shares), which kernels/perfmodel.py charges each at its own peak.
* global memory: requests (one per warp instruction), 32-byte sectors per request against the ideal
  for the access width (active lanes x bytes / 32, rounded up), unique sectors touched (x32 = unique
  DRAM bytes, a lower bound on DRAM traffic with an infinite L2).
* distributed shared memory (cluster launches): remote ld/st requests (one per warp instruction) and
  bytes, kept apart from shared memory and never counted as DRAM.
* shared memory: wavefronts per request against the ideal. Model: 32 banks of 4 bytes; a request is
  split in phases of 32 lanes (<= 4-byte accesses), 16 lanes (8-byte) or 8 lanes (16-byte); a phase
  costs the largest number of distinct 4-byte words any bank serves; ldmatrix costs one phase per 8x8
  matrix; cp.async counts its shared-memory writes like a 16-byte store.
"""
from __future__ import annotations

import numpy as np

NOTE = "emulator counts: modelled from interpreted execution, not measurements"


class Counters:
    def __init__(self, kernel, T: int):
        self.kernel = kernel
        n = len(kernel.ops)
        self.thread_counts = np.zeros(n, np.int64)
        self.warp_counts = np.zeros(n, np.int64)
        self.mem = {}       # kind -> [requests, sectors/wavefronts, ideal, bytes]
        self.sector_log = []

    def _add(self, key, req, units, ideal, nbytes):
        r = self.mem.setdefault(key, [0, 0, 0, 0])
        r[0] += req
        r[1] += units
        r[2] += ideal
        r[3] += nbytes

    def global_(self, M, op, addrs, size, tids, kind):
        a = addrs.astype(np.int64)
        w = tids // 32
        first, last = a >> 5, (a + size - 1) >> 5
        keys = np.concatenate([w * (1 << 40) + first, w * (1 << 40) + last])
        sectors = _distinct(keys)
        lanes = np.bincount(w)
        lanes = lanes[lanes > 0]
        ideal = int(np.sum(-(-(lanes * size) // 32)))
        self._add(f"global_{kind}", lanes.size, sectors, ideal, int(len(tids) * size))
        self.sector_log.append(first)
        if size > 1:
            self.sector_log.append(last)
        if len(self.sector_log) >= 4096:            # fold the log now and then (memory stays small)
            self.sector_log = [np.unique(np.concatenate(self.sector_log))]

    def shared(self, M, op, addrs, size, tids, kind):
        wf, ideal, req = _wavefronts(addrs.astype(np.int64), size, tids)
        self._add(f"shared_{kind}", req, wf, ideal, int(len(tids) * size))

    def dsmem(self, kind, tids, size):
        lanes = np.unique(np.asarray(tids) // 32).size
        self._add(f"dsmem_{kind}", lanes, 0, 0, int(len(tids) * size))

    def ldmatrix(self, M, op, addr, tids):
        # addr [nw, 8n]: one phase per matrix (8 rows of 16 bytes)
        nw, rows = addr.shape
        mats = rows // 8
        a = addr.astype(np.int64).reshape(nw * mats, 8)
        words = a[..., None] // 4 + np.arange(4)                 # [nw * mats, 8, 4]
        grp = np.broadcast_to(np.arange(nw * mats)[:, None, None], words.shape)
        total = _max_words_per_bank(grp.reshape(-1), words.reshape(-1))
        self._add("shared_ldmatrix", nw, total, nw * mats, nw * rows * 16)

    def wgmma_operands(self, M, op, a_addr, b_addr):
        self._add("shared_wgmma_operands", 1, 0, 0, int((a_addr.size + b_addr.size) * 2))

    def summary(self, grid, block, n_ctas) -> dict:
        ops = self.kernel.ops
        by_class_w, by_class_t = {}, {}
        flops = 0
        tc = 0
        tensor = {}
        for i, op in enumerate(ops):
            w, t = int(self.warp_counts[i]), int(self.thread_counts[i])
            if not w:
                continue
            by_class_w[op.cls] = by_class_w.get(op.cls, 0) + w
            by_class_t[op.cls] = by_class_t.get(op.cls, 0) + t
            meta = op.meta or {}
            if op.cls == "mma" or (op.cls == "wgmma" and "flops" in meta):
                n = w if op.cls == "mma" else w // 4          # wgmma: one per warpgroup (4 warps issue it)
                tc += n
                flops += n * meta.get("flops", 0)
                key = f"{op.cls}.{meta.get('precision', 'fp16')}"
                tensor[key] = tensor.get(key, 0) + n * meta.get("flops", 0)
            elif op.form.endswith(".f32") and op.form.split(".")[0] in ("fma", "mad"):
                flops += 2 * t
            elif op.form.endswith(".f32") and op.form.split(".")[0] in ("add", "sub", "mul"):
                flops += t
        out = {"note": NOTE, "grid": list(grid), "block": list(block), "ctas_run": n_ctas,
               "warp_instructions": int(self.warp_counts.sum()), "thread_instructions": int(self.thread_counts.sum()),
               "warp_instructions_by_class": dict(sorted(by_class_w.items())),
               "thread_instructions_by_class": dict(sorted(by_class_t.items())),
               "tensor_core_instructions": tc, "flops": int(flops),
               "tensor_flops": {k: int(v) for k, v in sorted(tensor.items())},
               "tensor_core_flops": int(sum(tensor.values()))}
        for key, (req, units, ideal, nbytes) in sorted(self.mem.items()):
            if key.startswith("dsmem"):
                out[key] = {"requests": req, "bytes": nbytes}
                continue
            unit = "sectors" if key.startswith("global") else "wavefronts"
            d = {"requests": req, unit: units, f"ideal_{unit}": ideal, "bytes": nbytes}
            if req:
                d[f"{unit}_per_request"] = round(units / req, 3)
                d[f"ideal_{unit}_per_request"] = round(ideal / req, 3)
            out[key] = d
        if self.sector_log:
            out["unique_dram_bytes"] = int(np.unique(np.concatenate(self.sector_log)).size * 32)
        else:
            out["unique_dram_bytes"] = 0
        return out


def _distinct(keys) -> int:
    """Number of distinct values of a 1-D int64 array."""
    if keys.size <= 1:
        return int(keys.size)
    k = np.sort(keys)
    return int(np.count_nonzero(k[1:] != k[:-1])) + 1


def _max_words_per_bank(grp, words) -> int:
    """Sum over groups (phases) of the largest number of distinct 4-byte words one bank serves.
    grp, words: 1-D int64 of equal length (group id < 2^30, word index < 2^28)."""
    key = np.sort((grp << 33) | ((words & 31) << 28) | words)   # (group, bank, word), sorted
    if key.size == 0:
        return 0
    new = np.empty(key.size, bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    key = key[new]                                              # distinct (group, bank, word)
    gb = key >> 28                                              # (group, bank)
    starts = np.flatnonzero(np.r_[True, gb[1:] != gb[:-1]])
    counts = np.diff(np.r_[starts, gb.size])                    # distinct words per (group, bank)
    g = gb[starts] >> 5
    gstarts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    return int(np.maximum.reduceat(counts, gstarts).sum())


def _wavefronts(a, size, tids):
    """(wavefronts, ideal, requests) of one shared-memory instruction (all warps of the CTA)."""
    per_phase = 32 if size <= 4 else (16 if size == 8 else 8)
    nwords = max(1, size // 4)
    warp = tids // 32
    grp = warp * 8 + (tids % 32) // per_phase
    if nwords == 1:
        words = a // 4
    else:
        words = ((a // 4)[:, None] + np.arange(nwords)).reshape(-1)
        grp = np.repeat(grp, nwords)
    wf = _max_words_per_bank(grp, words)
    lanes = np.bincount(warp)
    lanes = lanes[lanes > 0]
    ideal = int(np.sum(np.maximum(1, -(-(lanes * size) // 128))))
    return wf, ideal, int(lanes.size)
