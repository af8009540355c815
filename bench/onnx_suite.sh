#!/usr/bin/env bash
# The ONNX model suite (scripts/onnx_suite.py) end to end, and its table for bench/RESULTS.md:
# every model is exported, loaded, trained one step under a random placement over two CPU workers
# and compared with PyTorch's own step (tests/onnx_suite_test.cc), printed by `placer inspect`
# (timed: load and grouping) and run through `placer compare` on a simulated 4-GPU PCIe machine.
#
#   bench/onnx_suite.sh [MODEL ...]        (after ./scripts/build.sh; all models by default)
#
# Exports go to build/bench_onnx_suite (kept: a re-run only re-exports what changed), runs to a
# temporary folder that is removed at the end.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
build="$PLACER_BUILD_DIR"
suite="$build/bench_onnx_suite"
python="$(placer_python)"
models=("$@")
if ((${#models[@]} == 0)); then
  mapfile -t models < <(cd "$PLACER_ROOT/scripts" && "$python" -c \
    'import onnx_suite; print("\n".join(onnx_suite.SUITE))')
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" "$PLACER_ROOT/scripts/export_onnx.py" --suite --out "$suite" "${models[@]}"
filter="$(printf 'Suite/OnnxSuiteTest.OneStep*/%s:' "${models[@]}")"
PLACER_ONNX_SUITE_DIR="$suite" "$build/tests/onnx_suite_test" --gtest_filter="${filter%:}" \
  >"$work/steps.txt" 2>&1 || true

echo "| model | opset | ops (training step) | parameters | loads | step equals PyTorch's: loss (PyTorch's), worst gradient / tolerance | compare on 4 simulated GPUs: best single, data parallel, best placement | load + grouping |"
echo "| --- | ---: | ---: | ---: | --- | --- | --- | ---: |"
for model in "${models[@]}"; do
  opset="$(cd "$PLACER_ROOT/scripts" && "$python" -c \
    "import onnx_suite; print(onnx_suite.SUITE['$model']['opset'])")"
  mkdir -p "$work/$model"
  cat >"$work/$model/c.yaml" <<EOF
model:
  onnx: $suite/$model.onnx
  batch_size: 8
devices: [cuda:0, cuda:1, cuda:2, cuda:3]
search: {evaluator: simulated, policy_steps: 4, samples_per_step: 2, max_evaluations: 8, max_wall_seconds: 10}
simulation: {gpu_link: pcie}
output: {directory: run}
EOF
  loads=no
  start=$(date +%s.%N)
  if "$build/placer" inspect --config "$work/$model/c.yaml" >"$work/$model/inspect.txt" 2>&1; then
    loads=yes
  fi
  seconds=$(echo "$(date +%s.%N) - $start" | bc)
  ops="$(sed -n 's/^ops: \([0-9]*\) .*/\1/p' "$work/$model/inspect.txt" | head -1)"
  step_line="$(grep "^suite $model:" "$work/steps.txt" || true)"
  if grep -q "OK \] Suite/OnnxSuiteTest.OneStep.*/$model\$\|OK \] Suite/OnnxSuiteTest.OneStep.*/$model " "$work/steps.txt"; then
    step="yes: $(sed -n 's/.*loss \([0-9.]*\) (PyTorch \([0-9.]*\)), worst gradient \([^ ]*\) at \([0-9.]*\) of.*/\1 (\2), \4/p' <<<"$step_line")"
  else
    step="NO (see onnx_suite_test)"
  fi
  params="$(sed -n 's/.* ops, \([0-9]*\) parameters,.*/\1/p' <<<"$step_line")"
  compare="NO"
  if (cd "$work/$model" && "$build/placer" compare --config c.yaml >compare.txt 2>&1); then
    report="$work/$model/run/report.md"
    # Step times in ms, whatever unit the report chose; the fastest single device, data
    # parallelism, and the fastest of all rows.
    summary="$(awk -F'|' '
      function ms(t,  v, u) { split(t, p, " "); v = p[1]; u = p[2];
        return u == "s" ? v * 1000 : u == "us" ? v / 1000 : v }
      /^\| (single device|data parallel|m-|HEFT|METIS|Scotch|learned|random)/ && $8 ~ /yes/ {
        name = $2; gsub(/^ +| +$/, "", name); t = ms($3)
        if (name ~ /^single device/ && (single == "" || t < single)) single = t
        if (name ~ /^data parallel/) dp = t
        if (best == "" || t < best) { best = t; best_name = name }
      }
      END { printf "%.2f ms, %.2f ms, %.2f ms (%s)", single, dp, best, best_name }' "$report")"
    compare="yes: $summary"
  fi
  printf '| `%s` | %s | %s | %s | %s | %s | %s | %.1f s |\n' "$model" "$opset" "${ops:-?}" \
    "${params:-?}" "$loads" "$step" "$compare" "$seconds"
done
