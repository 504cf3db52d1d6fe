#!/usr/bin/env bash
# The GPU lease: one command for a lent GPU machine exactly as it is (CPU onnxruntime, no CUDA EP, no
# network), most valuable step first, each under its own timeout, results written to $OUT as it goes.
#
#   bash bench/lease/gpu_lease.sh             the lease, on the GPU machine, from the repository root
#   bash bench/lease/gpu_lease.sh --prepare   here, before: build the carry folder .gpu/ (git-ignored):
#                                             rewritten models, their inputs and CPU-interpreter outputs,
#                                             float64 references, BERT-base's kernel cache, prebuilt .so
#   bash bench/lease/gpu_lease.sh --rehearse  here: the whole lease on the emulated CUDA driver (the plugin
#                                             EP on an emulated GPU device); steps that need a CUDA torch
#                                             or compute-sanitizer say `skipped` with the reason
# Options: --short (CI: a one-model carry, tiny shapes), --carry DIR (default .gpu), --budget SECONDS
# (default 480 for the lease: 8 minutes of a 10-minute command).
#
# Steps (seconds each at most on the GPU): preflight 30 -> install 45 (pip install --no-deps --no-index -e .
# built from the carried setuptools wheel; without pip when that fails: bench/lease/install.py) -> correctness 85
# (every carried model, per node: vs the CPU interpreter's bits and vs float64) -> sanitizer 100
# (compute-sanitizer memcheck, racecheck, synccheck on the cluster GEMM+norm and attention kernels) ->
# kernels 110 (BERT-base layer, fp16/fp32, batch 1 and 16 x seq 128: PlusEP's kernels vs torch eager and
# torch.compile) -> e2e 105 (12-layer BERT-base through onnxruntime + PlusEP on the GPU device, with and
# without CUDA graphs, vs torch eager and torch.compile).
#
# Out ($OUT, default ./gpu-lease-out; at most 7 files, one folder): summary.json (rewritten after every
# step: {"steps": [{"name", "status", "seconds", "detail"}], "environment"}), lease.log, correctness.json,
# sanitizer.log, kernels.json, e2e.json, report.md. `python -m bench.lease.ledger collect $OUT` puts a
# compact copy under bench/results/. Exit status: 0 when no step failed.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
what=lease short=0 carry=.gpu budget=
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) what=prepare ;;
    --rehearse) what=rehearse ;;
    --short) short=1 ;;
    --carry) carry=$2; shift ;;
    --budget) budget=$2; shift ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) echo "gpu_lease.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
py=${PYTHON:-python3}
short_arg=()
[ "$short" = 1 ] && short_arg=(--short)
export PYTHONUNBUFFERED=1
say() { echo "[gpu_lease $(date +%H:%M:%S)] $*"; }

emulated() {   # the launcher's CUDA library: the emulated driver, its device described as a GPU
  PLUS_EP_CUDA_LIBRARY=$("$py" -c 'import plus_ep.verification.emulator as e; print(e.library_path())') || return 1
  export PLUS_EP_CUDA_LIBRARY PLUS_EP_VIRTUAL_GPU=1
  say "the emulated CUDA driver: $PLUS_EP_CUDA_LIBRARY (its device described as a GPU)"
}

if [ "$what" = prepare ]; then
  emulated || { say "the emulated driver is not built: pip install -e . first"; exit 1; }
  say "preparing $carry on the emulated driver (progress per case)"
  "$py" -m bench.lease.prepare "$carry" "${short_arg[@]}"
  rc=$?
  "$py" -m bench.lease.install pack "$carry"   # prebuilt libraries, the build requirement's wheel
  carry_kb=$(du -sk "$carry" | cut -f1)
  tree_kb=$(git ls-files -z | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
  say "carry $((carry_kb / 1024)) MiB + tracked tree $((tree_kb / 1024)) MiB = $(((carry_kb + tree_kb) / 1024)) MiB (limit 60)"
  if [ $((carry_kb + tree_kb)) -gt $((60 * 1024)) ]; then say "too large to travel"; exit 1; fi
  exit $rc
fi

out=${OUT:-$root/gpu-lease-out}
export OUT=$out
mkdir -p "$out"
rm -f "$out"/summary.json "$out"/correctness.json "$out"/kernels.json "$out"/e2e.json "$out"/sanitizer.log \
  "$out"/report.md
exec > >(tee -a "$out/lease.log") 2>&1
work=$(mktemp -d "${TMPDIR:-/tmp}/plus_ep_lease.XXXXXX")
scale=1
if [ "$what" = rehearse ]; then
  scale=8                      # the PTX interpreter is slow: the same steps, longer limits
  budget=${budget:-3600}
  emulated || { say "the emulated driver is not built: pip install -e . first"; exit 1; }
else
  budget=${budget:-480}
fi
start=$(date +%s)
deadline=$((start + budget))
say "$what: budget ${budget}s, carry $carry, out $out"

step() {   # step NAME SECONDS COMMAND...: run with a timeout, then record it in summary.json
  local name=$1 limit=$(($2 * scale)) left t0 t1 rc
  shift 2
  left=$((deadline - $(date +%s)))
  if [ "$left" -lt 15 ]; then
    "$py" -m bench.lease.ledger skip "$name" "no time left of the ${budget}s budget"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  export LEASE_STATUS="$work/$name.json" LEASE_STEP_DEADLINE=$(($(date +%s) + limit))
  rm -f "$LEASE_STATUS"
  say "step $name (at most ${limit}s)"
  t0=$(date +%s%N)
  timeout --kill-after=5 "$limit" "$@"
  rc=$?
  t1=$(date +%s%N)
  "$py" -m bench.lease.ledger record "$name" "$(((t1 - t0) / 1000000))e-3" "$rc"
}

step preflight 30 "$py" -m bench.lease.ledger preflight "$carry"
if [ "$what" = rehearse ]; then
  # both install paths on purpose, in a fresh environment made like the GPU machine's python3 (a venv
  # holding the packages); the later steps run in it
  step install 90 "$py" -m bench.lease.install rehearse "$carry" "$work" "${short_arg[@]}"
  [ -x "$work/venv/bin/python" ] && py=$work/venv/bin/python
else
  step install 45 "$py" -m bench.lease.install run "$carry"
fi
step correctness 85 "$py" -m bench.lease.correctness "$carry" "$out/correctness.json"
step sanitizer 100 "$py" -m bench.lease.sanitizer "$carry" "$out/sanitizer.log"
step kernels 110 "$py" -m bench.lease.kernel_times "$carry" "$out/kernels.json" "${short_arg[@]}"
step e2e 105 "$py" -m bench.lease.e2e "$carry" "$out/e2e.json" "${short_arg[@]}"
"$py" -m bench.lease.ledger report
say "done in $(($(date +%s) - start))s; files in $out:"
ls -la "$out"
"$py" - "$out/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
for r in s["steps"]:
    print(f"  {r['name']:<12} {r['status']:<8} {r['seconds']:>6.1f}s  {r['detail'][:150]}")
sys.exit(1 if any(r["status"] == "failed" for r in s["steps"]) else 0)
EOF
rc=$?
rm -rf "$work"
exit $rc
