#!/usr/bin/env bash
# Replicated pipelines in the search, side by side: `placer compare` of each config with the
# default space (replicated pipelines on) and with `search.pipeline_replicas: [1]` (off),
# interleaved per seed, on the same binary. Prints each run's table rows for learned, refinement
# alone, the pipeline baseline (its DP x PP grid), data parallelism and the expert.
#
# Usage: [FIRST_SEED=1] bench/replicated_pipelines_ab.sh [last seed=1] [configs...]
#   (default configs: compare_transformer_sim_8gpu compare_transformer_sim_2x8gpu)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seeds="${1:-1}"
shift || true
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(compare_transformer_sim_8gpu compare_transformer_sim_2x8gpu)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$root/configs/experts" "$work/experts"
for config in "${configs[@]}"; do
  for seed in $(seq "${FIRST_SEED:-1}" "$seeds"); do
    for arm in on off; do
      file="$work/$config.$arm.$seed.yaml"
      extra="  seed: $seed"
      [ "$arm" = off ] && extra="$extra"$'\n'"  pipeline_replicas: [1]"
      awk -v extra="$extra" '{print} /^search:/{print extra}' "$root/configs/$config.yaml" > "$file"
      out="$work/out.$config.$arm.$seed"
      echo "== $config, seed $seed, replicated pipelines $arm"
      "$root/build/placer" compare --config "$file" -o "$out" > "$out.log" 2>&1 || {
        echo "compare failed:"; tail -5 "$out.log"; continue; }
      grep -E "^(learned|refinement alone|pipeline \(|data parallel|expert)" "$out.log" |
        cut -c1-160 || true
    done
  done
done
