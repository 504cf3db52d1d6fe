"""The flash_attention template family's kernel half (attention.cuh): its renderer (render), config menu
(configs) and shape routes (routes); the key tile `plus-ep verify` must span (key_tiles)."""
from __future__ import annotations

from .. import KernelFamily
from ....warehouse.families.flash_attention import FLASH_ATTENTION
from .configs import WGMMA_CONFIGS, attn_smem_bytes
from .render import COMBINE_ENTRY, ENTRY, render_attention

_PATHS = {"exact": 0, "tf32": 1, "fp16": 2, "bf16": 2}      # a node's math mode -> the template's path


def _key_tile_candidates(kernel: list, head_dim: int | None, path: int | None = None) -> list:
    """BKV candidates of an attention launch from its shared memory and query tile (none if unknown)."""
    grid_x, smem = kernel[4], kernel[-1]
    if not smem.isdigit() or head_dim is None or not grid_x.endswith(",cdiv"):
        return []
    try:
        bq = int(grid_x.split(",")[-2])
    except ValueError:
        return []
    # the sm_90a body's configs by their shared memory and query tile
    found = [c.bkv for c in WGMMA_CONFIGS.get(head_dim, ()) if c.smem_bytes == int(smem) and c.bq == bq]
    for m in ((0, 1, 2) if path is None else (path,)):
        for bkv in range(16, 513, 16):
            if attn_smem_bytes(m, head_dim, bq, bkv) == int(smem):
                found.append(bkv)
    return sorted(set(found))


def key_tiles(kernel: list, symbols: dict, names: dict, head_dim: int | None, math: str | None) -> list:
    """[(what, BKV, the shortest sequence)] of an attention launch: the grid tiles the queries, the kernel
    loops over key tiles of BKV, recovered from the launch's shared memory (`math`: the node's math mode)."""
    if kernel[3] != ENTRY:
        return []
    seqs = [symbols[i] for i, nm in names.items() if "seq" in nm and i in symbols]
    if not seqs:
        return []
    return [(f"{ENTRY} keys", bkv, min(seqs)) for bkv in _key_tile_candidates(kernel, head_dim, _PATHS.get(math))]


KERNEL = KernelFamily(FLASH_ATTENTION, render_attention, entries=(ENTRY, COMBINE_ENTRY), hidden_tiles=key_tiles)
