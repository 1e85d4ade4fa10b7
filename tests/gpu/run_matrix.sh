#!/usr/bin/env bash
# The GPU leg of the support matrix (run by hand on a CUDA host; CI has no GPU):
#   1. the GPU tests (tests/runtime/test_gpu.py, tests/verify/test_gpu.py), compiled Triton;
#   2. `ckpt verify --device cuda` after `ckpt convert --tp N` for every preset x TP 1/2/4,
#      one line per cell, then a summary. Exit 0 when every test and every cell passed.
# Uses the host's python3 as it is (its torch, triton, numpy); ckpt runs from this checkout,
# and whatever else it needs (pydantic, typer, safetensors, pytest, ...) may come in PYTHONPATH:
#   PYTHONPATH=/path/to/wheels tests/gpu/run_matrix.sh
#   PRESETS="quark-mxfp4 deepseek-v3-fp8" TPS="1 2" tests/gpu/run_matrix.sh   # a smaller matrix
#   SKIP_TESTS=1 tests/gpu/run_matrix.sh                                        # the matrix only
#   DEVICE=cpu SKIP_TESTS=1 PRESETS=quark-mxfp4 TPS=2 tests/gpu/run_matrix.sh   # the script, on CPU
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# the presets the numeric check runs (moe-1024x80-mxfp4 is the header-only scale model)
PRESETS=${PRESETS:-"quark-mxfp4 quark-hybrid quark-nvfp4 deepseek-v3-fp8 modelopt-nvfp4 deepseek-v4"}
TPS=${TPS:-"1 2 4"}
export DEVICE=${DEVICE:-cuda}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-gpu-matrix.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
ckpt() { "$PY" -m checkpoint_tool "$@"; }

"$PY" - <<'PY' || exit 2
import os, platform, numpy, torch, triton
cuda = os.environ["DEVICE"] == "cuda"
assert torch.cuda.is_available() or not cuda, "no CUDA device is visible"
print(f"env: python {platform.python_version()}, numpy {numpy.__version__}, torch {torch.__version__},"
      f" triton {triton.__version__}, "
      + (f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})" if cuda else "CPU"))
PY

tests_rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  "$PY" -m pytest -p no:cacheprovider tests/runtime/test_gpu.py tests/verify/test_gpu.py \
    > "$WORK/tests.log" 2>&1
  tests_rc=$?
  echo "gpu tests: $(grep -E '^[0-9]+ (passed|failed|skipped|error)' "$WORK/tests.log" | tail -1) (exit $tests_rc)"
  [ $tests_rc -ne 0 ] && grep -E "^(FAILED|ERROR)" "$WORK/tests.log"
fi

cells=0; passed=0; failed=()
for preset in $PRESETS; do
  src="$WORK/$preset"
  if ! ckpt synth "$preset" "$src" > "$WORK/synth.log" 2>&1; then
    echo "$preset: synth failed: $(tail -1 "$WORK/synth.log")"; failed+=("$preset synth"); continue
  fi
  for tp in $TPS; do
    cells=$((cells + 1)); dst="$WORK/$preset-tp$tp"; t0=$(date +%s.%N)
    if ! ckpt convert "$src" "$dst" --tp "$tp" --no-progress > "$WORK/convert.log" 2>&1; then
      echo "$preset TP$tp: FAILED convert: $(tail -1 "$WORK/convert.log")"
      failed+=("$preset TP$tp"); continue
    fi
    ckpt verify "$dst" -s "$src" --device "$DEVICE" --no-progress --format json \
      > "$WORK/verify.json" 2> "$WORK/verify.err"
    rc=$?
    line=$("$PY" - "$WORK/verify.json" "$rc" "$t0" <<'PY'
import json, sys, time
path, rc, t0 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    r = json.load(open(path))
except ValueError:
    print(f"FAILED verify (exit {rc}, no report)"); sys.exit()
n = r["numeric"]
errs = [x.get("max_rel_error") or x.get("rel_error") or 0.0 for x in n["layers"]]
print(f"{'passed' if r['passed'] else 'FAILED'}: lossless {r['lossless']['status']}, numeric "
      f"{n['status']} ({n['backend']} on {n['device']}, layers {n['ran_layers']}, "
      f"max rel {max(errs, default=0.0):.2e}); {time.time() - t0:.1f} s")
PY
)
    echo "$preset TP$tp: $line"
    if [ $rc -eq 0 ] && [[ $line == passed* ]]; then passed=$((passed + 1)); else
      failed+=("$preset TP$tp"); [ -s "$WORK/verify.err" ] && tail -2 "$WORK/verify.err"; fi
  done
done
echo "summary: gpu tests exit $tests_rc; verify --device $DEVICE $passed/$cells cells passed${failed:+; failed: ${failed[*]}}"
[ $tests_rc -eq 0 ] && [ ${#failed[@]} -eq 0 ]
