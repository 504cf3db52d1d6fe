"""``python -m plus_ep.zoo``: export zoo models and print their paths."""

from __future__ import annotations

import argparse
import sys
import time

from . import EXPORTERS, FAMILIES, SIZES, export


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m plus_ep.zoo",
                                 description="Export random-weight transformer models to ONNX.")
    ap.add_argument("--size", choices=SIZES, default="small")
    ap.add_argument("--family", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    ap.add_argument("--exporter", nargs="+", choices=EXPORTERS, default=list(EXPORTERS))
    ap.add_argument("--layers", type=int, default=None, help="override the layer count")
    ap.add_argument("--out", default=None,
                    help="cache directory (default: $PLUS_EP_ZOO_DIR or <cache root>/zoo)")
    ap.add_argument("--force", action="store_true", help="re-export even if cached")
    ap.add_argument("--no-verify", action="store_true",
                    help="skip the ORT-vs-torch check (done by default for size small)")
    args = ap.parse_args(argv)
    failed = 0
    for family in args.family:
        for exporter in args.exporter:
            t0 = time.perf_counter()
            try:
                path = export(family, exporter, args.size, args.layers, args.out,
                              verify=False if args.no_verify else None, force=args.force)
            except Exception as exc:  # keep going; report at the end
                failed += 1
                print(f"FAILED {family} {exporter}: {type(exc).__name__}: {exc}",
                      file=sys.stderr, flush=True)
                continue
            print(f"{path}\t# {family} {exporter} {args.size} "
                  f"({time.perf_counter() - t0:.1f}s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
