#!/usr/bin/env bash
# The GPU job: one call on a GPU machine runs the project's GPU tests, then the GPU benchmark.
#
#   bash bench/gpu_job.sh [ONNXRUNTIME_GPU_WHEEL]        # from the repository root
#
# In:
#   $1 or $PLUS_EP_ORT_WHEEL  the onnxruntime-gpu wheel (a .whl file, or a folder holding one); it is
#                             installed with `pip install --no-index --no-deps --target` into a
#                             temporary folder put first on PYTHONPATH (the machine's own onnxruntime,
#                             if any, stays installed but is shadowed)
#   $PLUS_EP_WHEELS           optional folder of more wheels to install the same way (default: .whl/
#                             if it exists); never more than one version of a package
#   $PLUS_EP_JOB_BUDGET_S     seconds for the whole job (default 570: a 10-minute command less a margin)
#   $PLUS_EP_PYTEST_BUDGET_S  at most this much of it for `pytest -m gpu` (default 150)
#   $PYTHON                   the interpreter (default python3)
# Out, in $OUT (default ./gpu-job-out): job.log, junit-gpu.xml, and results/<date>-gpu-<device>.json
#   with its .md table and .png chart (6 files, 2 folders deep at most).
# The benchmark gets what is left of the budget less 30 s; it writes its JSON after every unit, so
# a cut-off run still leaves a valid partial result (complete: false), and the report is made again
# at the end from whatever JSON is there.
# Exit status: 0 when the tests passed and the benchmark finished, 1 otherwise, 2 for bad input.
set -uo pipefail

start=$(date +%s)
budget=${PLUS_EP_JOB_BUDGET_S:-570}
deadline=$((start + budget))
out=${OUT:-$PWD/gpu-job-out}
py=${PYTHON:-python3}
mkdir -p "$out/results"
exec > >(tee -a "$out/job.log") 2>&1
export PYTHONUNBUFFERED=1

left() { echo $((deadline - $(date +%s))); }
say() { echo "[gpu_job $(($(date +%s) - start))s] $*"; }

if [ ! -f setup.py ] || [ ! -d bench ]; then
  say "run me from the repository root (no setup.py or bench/ in $PWD)"
  exit 2
fi

wheel=${1:-${PLUS_EP_ORT_WHEEL:-}}
if [ -d "$wheel" ]; then
  wheel=$(find "$wheel" -maxdepth 1 -name 'onnxruntime_gpu-*.whl' | sort | tail -n 1)
fi
if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
  say "no onnxruntime-gpu wheel: pass its path as \$1 or set PLUS_EP_ORT_WHEEL"
  exit 2
fi
extra=${PLUS_EP_WHEELS:-}
if [ -z "$extra" ] && [ -d .whl ]; then extra=.whl; fi
wheels=("$wheel")
if [ -n "$extra" ]; then
  while IFS= read -r w; do
    [ "$(basename "$w")" = "$(basename "$wheel")" ] || wheels+=("$w")
  done < <(find "$extra" -maxdepth 1 -name '*.whl' | sort)
fi

site="${TMPDIR:-/tmp}/plus_ep_site"
rm -rf "$site"
say "installing ${wheels[*]} into $site"
if ! "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${wheels[@]}"; then
  say "pip install failed"
  exit 1
fi
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"

say "building the native launcher for $("$py" --version 2>&1)"
if ! "$py" setup.py -q build_ext --inplace; then
  say "launcher build failed"
  exit 1
fi

"$py" - <<'EOF' || { say "environment check failed"; exit 1; }
import torch  # first: ONNX Runtime then finds the CUDA libraries torch loaded
import onnxruntime as ort
import plus_ep
print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.is_available() and torch.cuda.get_device_name(0))
print("onnxruntime", ort.__version__, ort.__file__, ort.get_available_providers())
print("plus_ep", plus_ep.__version__, plus_ep.get_library_path())
if "CUDAExecutionProvider" not in ort.get_available_providers():
    raise SystemExit("this onnxruntime has no CUDAExecutionProvider")
EOF
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; fi

tests_s=${PLUS_EP_PYTEST_BUDGET_S:-150}
if [ "$tests_s" -gt $(($(left) - 120)) ]; then tests_s=$(($(left) - 120)); fi
rc_tests=1
if [ "$tests_s" -gt 10 ]; then
  say "pytest -m gpu, at most ${tests_s}s"
  timeout --signal=INT --kill-after=15 "$tests_s" "$py" -m pytest -m gpu -q -ra \
    --continue-on-collection-errors --junitxml="$out/junit-gpu.xml"
  rc_tests=$?
  say "pytest exit code $rc_tests"
else
  say "no time left for the GPU tests"
fi

bench_s=$(($(left) - 30))
rc_bench=1
if [ "$bench_s" -gt 30 ]; then
  say "python -m bench gpu --budget-s $bench_s"
  timeout --kill-after=10 $((bench_s + 20)) "$py" -m bench gpu --budget-s "$bench_s" --out "$out/results"
  rc_bench=$?
  say "bench exit code $rc_bench"
else
  say "no time left for the benchmark"
fi

for j in "$out"/results/*.json; do
  [ -f "$j" ] && "$py" -m bench report "$j"
done
say "done: tests $rc_tests, bench $rc_bench; files in $out"
ls -la "$out" "$out/results"
if [ "$rc_tests" -eq 0 ] && [ "$rc_bench" -eq 0 ]; then exit 0; fi
exit 1
