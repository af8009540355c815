#!/usr/bin/env bash
# The GPU check, in one device call: builds placer on the GPU machine against that machine's own
# PyTorch (python3's torch, CUDA 13) and the Debian packages carried in .gpu-debs/, measures
# with plain PyTorch the models and kernels the simulator's GPU model prices (bench/gpu_models.py:
# ResNet-50 and BERT-large steps at fp32, tf32, bf16 and fp16; GEMMs, convolutions, memory-bound
# ops, launches, host copies), runs the CUDA tests (tests/cuda_test.cc) and the GPU benchmarks
# (the placer program on cpu:0 + cuda:0), and logs everything to $OUT/gpu_check.log, ending with
# one summary line.
#
#   here:  bash scripts/gpu_debs.sh                      (downloads the packages, once)
#   there: device run, command "bash scripts/gpu_check.sh", carry [".gpu-debs"], timeout_s 590
#
# It never touches /: the packages are unpacked with dpkg-deb -x into a private prefix (no dpkg -i,
# no apt), and the build goes to build-gpu/ (ignored), which a warm machine keeps for the next call.
# Stages have time limits within PLACER_GPU_BUDGET_S (default 560 s, under the device's 10-minute
# command limit); a stage that fails or runs out of time is reported, and the stages that need it
# are skipped. Settings (environment): PLACER_GPU_STAGES (comma-separated subset of
# preflight,models,unpack,configure,build_tests,cuda_tests,build_placer,benchmarks,fidelity; default
# all; a second call on the warm machine can run PLACER_GPU_STAGES=build_placer,fidelity),
# PLACER_GPU_PREFIX, PLACER_GPU_BUILD_DIR, PLACER_GPU_DEBS_DIR, PLACER_PYTHON (default python3),
# PLACER_JOBS (default: every core).
# Stage functions run through `stage` (indirectly), which shellcheck cannot see.
# shellcheck disable=SC2317
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="${OUT:-$ROOT/build-gpu-out}"  # $OUT exists on the device machine only
BUDGET="${PLACER_GPU_BUDGET_S:-560}"
ALL_STAGES=preflight,models,unpack,configure,build_tests,cuda_tests,build_placer,benchmarks,fidelity
STAGES=",${PLACER_GPU_STAGES:-$ALL_STAGES},"
PREFIX="${PLACER_GPU_PREFIX:-/tmp/placer-prefix}"
DEBS="${PLACER_GPU_DEBS_DIR:-$ROOT/.gpu-debs}"
BUILD="${PLACER_GPU_BUILD_DIR:-$ROOT/build-gpu}"
PYTHON="${PLACER_PYTHON:-python3}"
JOBS="${PLACER_JOBS:-$(nproc)}"
BENCH_DIR=/tmp/placer-gpu-bench
START=$SECONDS

declare -a SUMMARY=()
declare -A RESULT=()

elapsed() { echo $((SECONDS - START)); }
header() { printf '\n======== %s  (t=%ss of %ss) ========\n' "$*" "$(elapsed)" "$BUDGET"; }
wanted() { [[ "$STAGES" == *",$1,"* ]]; }

# stage NAME LIMIT_SECONDS NEEDS FUNCTION: runs FUNCTION under a time limit cut to what is left of
# the budget (less 15 s for the summary), unless a stage named in NEEDS (comma-separated) did not
# pass. Records PASS, FAIL(rc), TIMEOUT, SKIP (not run: a need failed or no time left) or OFF (not
# in PLACER_GPU_STAGES).
stage() {
  local name=$1 limit=$2 needs=$3 fn=$4 need left rc begin
  if ! wanted "$name"; then
    RESULT[$name]=OFF
    return
  fi
  for need in ${needs//,/ }; do
    if [[ "${RESULT[$need]:-OFF}" != PASS && "${RESULT[$need]:-OFF}" != OFF ]]; then
      header "$name: SKIPPED ($need did not pass)"
      RESULT[$name]=SKIP
      SUMMARY+=("$name=SKIP")
      return
    fi
  done
  left=$((BUDGET - $(elapsed) - 15))
  ((limit > left)) && limit=$left
  if ((limit < 20)); then
    header "$name: SKIPPED (${left}s of the budget left)"
    RESULT[$name]=SKIP
    SUMMARY+=("$name=SKIP(time)")
    return
  fi
  header "$name (limit ${limit}s)"
  begin=$SECONDS
  # A function cannot run under timeout(1) directly: export it into a child bash.
  export -f "${fn?}"
  timeout --kill-after=10 "$limit" bash -c "set -o pipefail; $fn"
  rc=$?
  if ((rc == 0)); then
    RESULT[$name]=PASS
  elif ((rc == 124 || rc == 137)); then
    RESULT[$name]=TIMEOUT
    echo "!!! $name ran out of its ${limit}s"
  else
    RESULT[$name]="FAIL($rc)"
    echo "!!! $name failed: exit code $rc"
  fi
  SUMMARY+=("$name=${RESULT[$name]}($((SECONDS - begin))s)")
}

# ---- the prefix's environment (exported: every stage's child bash and ninja inherit it) ----
# Headers go on CPLUS_INCLUDE_PATH, not CPATH: the compiler then searches them after every
# -isystem directory, as it does /usr/include, and CMake treats them as implicit (it passes no
# flag for them). So LibTorch's bundled fmt 12 still shadows Debian's fmt 9, as on a Debian
# machine with the packages installed; CPATH (a late -I) would put Debian's first.
LIB_DIRS="$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu"
export PATH="$PREFIX/usr/bin:$PATH"
export CPLUS_INCLUDE_PATH="$PREFIX/usr/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
export C_INCLUDE_PATH="$PREFIX/usr/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
export LIBRARY_PATH="$LIB_DIRS${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$LIB_DIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# CMake 4 refuses packages that declare policies older than 3.5; this lets such a file through.
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
export ROOT OUT_DIR PREFIX DEBS BUILD PYTHON JOBS BENCH_DIR
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi

preflight() {
  echo "date: $(date -u +%FT%TZ)  host: $(uname -srm)  cores: $(nproc)  jobs: $JOBS"
  grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release 2>/dev/null
  ldd --version 2>&1 | head -1
  free -g 2>/dev/null | head -2
  df -h /tmp "$ROOT" 2>/dev/null | tail -n +2
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader \
    2>/dev/null ||
    echo "nvidia-smi: not available"
  local tool missing=0
  for tool in c++ cmake ninja "$PYTHON" nvcc dpkg-deb ar; do
    if command -v "$tool" >/dev/null; then
      printf '%-9s %s: %s\n' "$tool" "$(command -v "$tool")" \
        "$("$tool" --version 2>&1 | grep -m1 -iE 'version|[0-9]+\.[0-9]+' | head -c 100)"
    else
      printf '%-9s MISSING\n' "$tool"
      [[ "$tool" == dpkg-deb || "$tool" == ar ]] || missing=1
    fi
  done
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
    "available", torch.cuda.is_available(), "devices", torch.cuda.device_count(),
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' || missing=1
  if [[ ! -f "$DEBS/MANIFEST" ]]; then
    echo "no $DEBS/MANIFEST: run scripts/gpu_debs.sh here and carry .gpu-debs"
    missing=1
  fi
  return "$missing"
}

# What the simulator's GPU model predicts, measured with plain PyTorch (no placer build needed, so
# it runs first): two CSV files beside the log, read into bench/RESULTS.md's issue 28 section.
# On the H200 (2026-12-04) it took 205 s at --steps 15; 10 steps keep the spread (0.2-1%).
models() { "$PYTHON" "$ROOT/bench/gpu_models.py" --out "$OUT_DIR" --steps 10; }

# Unpacks every carried .deb into the prefix (once per set of packages) and repairs the links that
# pointed into the Debian root: into the prefix where the target is there, else (an absolute link
# such as zlib1g-dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) to this system's library
# of that name; links left dangling (libonnx.so: libonnx1 is not carried) are removed.
unpack() {
  local stamp deb member link target base system
  stamp="$(cd "$DEBS" && sha256sum ./*.deb | sha256sum | cut -c1-16)"
  if [[ -f "$PREFIX/.placer-stamp" && "$(cat "$PREFIX/.placer-stamp")" == "$stamp" ]]; then
    echo "$PREFIX is up to date ($stamp)"
  else
    rm -rf "$PREFIX"
    mkdir -p "$PREFIX"
    for deb in "$DEBS"/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$deb" "$PREFIX" || return 1
      else
        member="$(ar t "$deb" | grep '^data\.tar')" || return 1
        case "$member" in
          *.xz) ar p "$deb" "$member" | tar -xJf - -C "$PREFIX" ;;
          *.zst) ar p "$deb" "$member" | zstd -dcq | tar -xf - -C "$PREFIX" ;;
          *.gz) ar p "$deb" "$member" | tar -xzf - -C "$PREFIX" ;;
          *) ar p "$deb" "$member" | tar -xf - -C "$PREFIX" ;;
        esac || return 1
      fi
    done
    while IFS= read -r -d '' link; do
      target="$(readlink "$link")"
      if [[ "$target" == /* && -e "$PREFIX$target" ]]; then
        ln -sfn "$PREFIX$target" "$link"
        continue
      fi
      [[ -e "$link" ]] && continue
      base="$(basename "$link")" system=""
      if [[ "$target" == /* ]]; then
        system="$(ldconfig -p 2>/dev/null | awk -v n="$base" \
          'index($1, n ".") == 1 && /x86-64/ { print $NF; exit }')"
      fi
      if [[ -n "$system" ]]; then
        ln -sfn "$system" "$link"
        echo "relinked $link -> $system (was $target)"
      else
        rm -f "$link"
        echo "removed dangling $link -> $target"
      fi
    done < <(find "$PREFIX" -type l -print0)
    echo "$stamp" >"$PREFIX/.placer-stamp"
  fi
  cat "$DEBS/MANIFEST"
  du -sh "$PREFIX"
  protoc --version || return 1
  # Every carried library must load here (system libraries it needs included).
  local lib bad=0
  for lib in "$PREFIX"/usr/lib/x86_64-linux-gnu/*.so.*; do
    [[ -L "$lib" ]] && continue
    if ldd "$lib" 2>&1 | grep -E 'not found|version .* not found'; then
      echo "  ^ needed by $lib"
      bad=1
    fi
  done
  ((bad == 0)) && echo "every carried library resolves its dependencies"
  return "$bad"
}

configure() {
  local torch_prefix cuda_root
  if ! command -v nvcc >/dev/null; then
    echo "nvcc not found (PATH, /usr/local/cuda/bin): PLACER_WITH_CUDA needs the CUDA toolkit"
    return 1
  fi
  torch_prefix="$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" ||
    return 1
  cuda_root="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
  echo "torch: $torch_prefix  CUDA toolkit: $cuda_root"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX/usr;$torch_prefix" -DCUDAToolkit_ROOT="$cuda_root" \
    -DPLACER_ONNX_PROTO_SOURCE="$PREFIX/usr/include/onnx/onnx.proto" || return 1
  # Where each dependency was found: into the prefix, not the system.
  grep -E '^(yaml-cpp_DIR|fmt_DIR|CLI11_DIR|nlohmann_json_DIR|GTest_DIR|Boost_DIR|Protobuf_PROTOC_EXECUTABLE|Protobuf_INCLUDE_DIR|Protobuf_LIBRARY_RELEASE|ZLIB_INCLUDE_DIR|ZLIB_LIBRARY_RELEASE|METIS_LIBRARY|SCOTCH_LIBRARY|GLPK_LIBRARY|Torch_DIR|CUDAToolkit_NVCC_EXECUTABLE|CMAKE_CXX_COMPILER):' \
    "$BUILD/CMakeCache.txt"
}

build_tests() { cmake --build "$BUILD" --target cuda_test -j "$JOBS"; }

cuda_tests() {
  # Not --gtest_brief: the skips' and the tests' own lines (sizes, link speeds) belong in the log.
  "$BUILD/tests/cuda_test" --gtest_color=no --gtest_output="xml:$OUT_DIR/cuda_test.xml"
}

build_placer() { cmake --build "$BUILD" --target placer runtime_bench fidelity_bench -j "$JOBS"; }

# The GPU benchmarks: runtime_bench (its CPU ratios, then the executor's overhead on cuda:0 against
# the plain LibTorch step there), and the placer program itself on LeNet (the d2l chapter's batch
# of 256) over cpu:0 (8 threads) + cuda:0.
benchmarks() {
  local placer="$BUILD/placer" config="$BENCH_DIR/lenet_gpu.yaml" rc=0
  rm -rf "$BENCH_DIR"
  mkdir -p "$BENCH_DIR"
  cp -r "$ROOT/configs/experts" "$BENCH_DIR/"
  cat >"$config" <<'EOF'
model:
  builtin: lenet
  batch_size: 256
devices:
  - name: cpu:0
    threads: 8
  - name: cuda:0
measurement:
  warmup_steps: 5
  timed_steps: 20
  time_limit_seconds: 60
search:
  evaluator: measured
  policy_steps: 10
  samples_per_step: 4
  max_evaluations: 40
  max_wall_seconds: 45
output:
  directory: lenet_gpu
EOF
  cat >"$BENCH_DIR/convs_on_gpu.yaml" <<'EOF'
devices: [cpu:0, cuda:0]
default: cuda:0
placement:
  fc1: cpu:0
  relu3: cpu:0
  fc2: cpu:0
EOF
  # BERT-large (the zoo's transformer at its sizes, sequence 384, batch 32) on cuda:0 alone:
  # placer's executor (fp32) beside the simulator's h200 fp32 prediction, for bench/gpu_models.py's
  # PyTorch rows of the same model.
  cat >"$BENCH_DIR/bert_large_gpu.yaml" <<'EOF'
model:
  builtin: transformer
  batch_size: 32
  transformer: {seq_length: 384, layers: 24, hidden: 1024, heads: 16, ffn: 4096}
devices: [cuda:0]
measurement:
  warmup_steps: 3
  timed_steps: 10
  time_limit_seconds: 60
search:
  evaluator: measured
output:
  directory: bert_large_gpu
EOF
  run() {  # run SECONDS ARGS...: placer ARGS under a time limit of its own
    local limit=$1
    shift
    echo
    echo "---- placer $* ----"
    timeout "$limit" "$placer" "$@" || {
      echo "!!! placer $* failed: exit code $?"
      rc=1
    }
  }
  echo
  echo "---- runtime_bench 5 ----"
  timeout 120 "$BUILD/bench/runtime_bench" 5 || {
    echo "!!! runtime_bench failed: exit code $?"
    rc=1
  }
  run 60 evaluate --config "$config" --device cuda:0
  run 60 evaluate --config "$config" --device cpu:0
  run 60 evaluate --config "$config" --placement "$BENCH_DIR/convs_on_gpu.yaml" \
    --trace "$OUT_DIR/lenet_split_trace.json"
  run 60 evaluate --config "$config" --data-parallel
  run 60 evaluate --config "$config" --device cuda:0 --simulate
  run 90 profile --config "$config" --output "$OUT_DIR/lenet_gpu_profile.json"
  run 90 evaluate --config "$BENCH_DIR/bert_large_gpu.yaml" --device cuda:0 --simulate
  # Last: the whole comparison (baselines, a 45-second learned search, random search) on cuda:0.
  run 200 compare --config "$config"
  cp "$BENCH_DIR/lenet_gpu/report.md" "$OUT_DIR/lenet_gpu_compare.md" 2>/dev/null
  return "$rc"
}

# The simulator's fidelity over cpu:0 + cuda:0 (issue 5): 15 random placements of LeNet and of the
# branching MLP, 4 rounds, each round profiling the devices first; per-placement numbers in CSV.
fidelity() {
  "$BUILD/bench/fidelity_bench" 15 4 "$OUT_DIR/fidelity_gpu.csv" cpu:0,cuda:0
}

main() {
  echo "placer GPU check: $(git -C "$ROOT" log -1 --format='%h %s' 2>/dev/null || echo 'no git')"
  git -C "$ROOT" status --short 2>/dev/null | head -20
  stage preflight 60 "" preflight
  stage models 240 preflight models
  stage unpack 90 preflight unpack
  stage configure 150 unpack configure
  stage build_tests 330 configure build_tests
  stage cuda_tests 150 build_tests cuda_tests
  stage build_placer 300 configure build_placer
  stage benchmarks 240 build_placer benchmarks
  stage fidelity 120 build_placer fidelity
  local verdict=OK name
  for name in ${ALL_STAGES//,/ }; do
    case "${RESULT[$name]:-OFF}" in
      PASS | OFF) ;;
      SKIP) [[ "$verdict" == OK ]] && verdict=INCOMPLETE ;;
      *) verdict=FAILED ;;
    esac
  done
  header "summary"
  echo "GPU CHECK $verdict in $(elapsed)s: ${SUMMARY[*]}"
  [[ "$verdict" == OK ]]
}

mkdir -p "$OUT_DIR"
main 2>&1 | tee "$OUT_DIR/gpu_check.log"
exit "${PIPESTATUS[0]}"
