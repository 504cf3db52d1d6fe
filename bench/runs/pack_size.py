"""Size cost of carrying PTX in the image packs: bytes per rewritten model with and without PTX.

    python -m bench.runs.pack_size MODEL.plus.onnx [...]      # prints one JSON line per model
"""
from __future__ import annotations

import json
import os
import sys

import onnx
from onnx import numpy_helper
from plus_ep.kernels.wire import pack


def pack_sizes(path: str) -> dict:
    m = onnx.load(path)
    per_arch: dict = {}
    for node in m.graph.node:
        for a in node.attribute:
            if a.name.startswith("plus_images_"):
                blob = numpy_helper.to_array(a.t).tobytes()
                images = pack.parse(blob)
                bare = pack.write([im.cubin for im in images])
                d = per_arch.setdefault(a.name[12:], {"packs_bytes": 0, "packs_without_ptx_bytes": 0,
                                                      "cubin_bytes": 0, "ptx_bytes": 0, "images": 0})
                d["packs_bytes"] += len(blob)
                d["packs_without_ptx_bytes"] += len(bare)
                d["cubin_bytes"] += sum(len(im.cubin) for im in images)
                d["ptx_bytes"] += sum(len(im.ptx or "") for im in images)
                d["images"] += len(images)
    with_ptx = sum(d["packs_bytes"] for d in per_arch.values())
    without = sum(d["packs_without_ptx_bytes"] for d in per_arch.values())
    size = os.path.getsize(path)
    return {"model": os.path.basename(path), "file_bytes": size, "file_bytes_without_ptx": size - (with_ptx - without),
            "ptx_share_of_file": round((with_ptx - without) / size, 3), "per_arch": per_arch}


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(pack_sizes(p)))
