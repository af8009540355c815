#!/usr/bin/env bash
# Fuzzes the parsers that read user files (YAML config, placements, ONNX models) and the cluster's
# wire format (tasks, verdicts, sealed envelopes) with libFuzzer,
# AddressSanitizer and UBSan, for SECONDS each (default 60):
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#     targets: config_fuzzer placement_fuzzer onnx_fuzzer wire_fuzzer
# Builds a torch-free clang build in build-fuzz/ (PLACER_FUZZ=ON). Working corpora grow in
# build-fuzz/corpus/<target>, seeded from fuzz/corpus/<target> (committed), configs/ and
# libonnx-testdata's models. A finding stops the run with exit 1 and leaves the input as
# build-fuzz/findings/<target>/crash-*: copy it to fuzz/regressions/<target>/ once fixed, where
# the ordinary test suite replays it. fuzz/README.md records the runs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$PLACER_ROOT/scripts/setup.sh"

seconds="${1:-60}"
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(config_fuzzer placement_fuzzer onnx_fuzzer wire_fuzzer)

build="$PLACER_ROOT/build-fuzz"
if [[ ! -f "$build/build.ninja" ]]; then
  CXX=clang++ cmake -S "$PLACER_ROOT" -B "$build" -G Ninja -DPLACER_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build.configure.log" 2>&1 || {
    cat "$build.configure.log" >&2
    exit 1
  }
fi
cmake --build "$build" -j "${PLACER_JOBS:-2}" >&2

seed_dirs() {
  echo "$PLACER_ROOT/fuzz/corpus/$1" "$PLACER_ROOT/fuzz/regressions/$1"
  case "$1" in
    config_fuzzer) echo "$PLACER_ROOT/configs" ;;
    onnx_fuzzer)
      # ONNX's own node and PyTorch-converted models: one seed per model, collected once.
      local testdata="$build/seeds/onnx_testdata"
      if [[ ! -d "$testdata" ]]; then
        mkdir -p "$testdata"
        find /usr/share/libonnx-testdata/data -name model.onnx -size -64k | while read -r m; do
          cp "$m" "$testdata/$(echo "${m#/usr/share/libonnx-testdata/data/}" | tr / _)"
        done
      fi
      echo "$testdata"
      ;;
  esac
}

for target in "${targets[@]}"; do
  corpus="$build/corpus/$target"
  findings="$build/findings/$target"
  mkdir -p "$corpus" "$findings"
  placer_log "fuzzing $target for ${seconds}s (corpus $corpus)"
  # shellcheck disable=SC2046
  "$build/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/" \
    "$corpus" $(seed_dirs "$target") 2>&1 | tee "$build/$target.log" | grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::|ERROR|SUMMARY" || true
  if ls "$findings"/crash-* "$findings"/leak-* "$findings"/timeout-* "$findings"/oom-* \
    >/dev/null 2>&1; then
    placer_log "$target: finding(s) in $findings (log: $build/$target.log)"
    exit 1
  fi
done
