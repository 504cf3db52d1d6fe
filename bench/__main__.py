"""python -m bench [all|cpu|gpu|report] ...

    all     the GPU run (with its table and chart), then the CPU fusion tables (bench/harness/fusion.py);
            takes the gpu options, e.g. ``python -m bench all --budget-s 900 --out DIR``
    cpu     the fusion benchmark alone: ``python -m bench cpu [bench.harness.fusion options]``
    gpu     the GPU benchmark alone: ``python -m bench gpu --help``
    report  markdown + PNG from a GPU-run JSON: ``python -m bench report FILE.json``
"""
from __future__ import annotations

import sys


def _fusion_argv(gpu_args, gpu_json) -> list[str]:
    """The fusion tables that match a GPU run: same size and layers, results beside its JSON."""
    argv = ["--size", gpu_args.size, "--out", str(gpu_json.parent)]
    if gpu_args.layers:
        argv += ["--layers", str(gpu_args.layers)]
    return argv


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("all", "cpu", "gpu", "report"):
        asked = bool(argv) and argv[0] in ("-h", "--help")
        print(__doc__.strip(), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "report":
        from bench.charts import gpu_table
        return gpu_table.main(rest)
    if cmd == "cpu":
        from bench.harness import fusion                 # the CPU mode; imported only when asked for
        return fusion.main(rest)
    from bench.harness import gpu
    if cmd == "gpu":
        return gpu.main(rest)
    path = gpu.run(rest)                     # all: GPU run first (it has the budget), then the CPU tables
    from bench.harness import fusion
    rc = fusion.main(_fusion_argv(gpu.parse_args(rest), path))
    print(f"bench all: GPU results {path}; fusion tables exit code {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
