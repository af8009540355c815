#!/usr/bin/env bash
# Installs everything placer needs: Debian packages and the pinned LibTorch (PyPI torch wheel, in a
# virtual environment cached outside the clone). Idempotent: seconds when everything is present.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

APT_PACKAGES=(
  cmake ninja-build g++ ccache pkg-config python3-venv
  libyaml-cpp-dev libprotobuf-dev protobuf-compiler libgtest-dev libgmock-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev zlib1g-dev libboost-dev
  libmetis-dev libscotch-dev libglpk-dev
  libjemalloc-dev  # the programs' allocator (CMakeLists.txt: placer_allocator)
  libssl-dev  # OpenSSL's libcrypto: the cluster messages' HMAC-SHA256 (proto/message_auth.h)
  libgloo-dev  # headers only, for c10d's ProcessGroupGloo (runtime/cluster/process_group.h)
  dataset-fashion-mnist
  libonnx-dev libonnx-testdata
  clang libclang-rt-dev  # scripts/fuzz.sh (run by .ci/run): clang, libFuzzer and the sanitizers
)

# The headless browser that renders the comparison report in a test (scripts/check_report.py),
# without its recommended packages (they would bring systemd and avahi; 122 MB of packages
# instead).
BROWSER_PACKAGES=(chromium)

SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
updated=0
install_missing() {  # install_missing [apt-get options --] PACKAGE...
  local options=() missing=() package
  if [[ "${1:-}" == -* ]]; then
    while [[ "$1" != -- ]]; do options+=("$1"); shift; done
    shift
  fi
  for package in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$package")
    fi
  done
  if ((${#missing[@]})); then
    placer_log "installing Debian packages: ${missing[*]}"
    ((updated)) || $SUDO apt-get update -qq
    updated=1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${options[@]}" "${missing[@]}" \
      >/dev/null
  fi
}
install_missing "${APT_PACKAGES[@]}"
install_missing --no-install-recommends -- "${BROWSER_PACKAGES[@]}"

# The project's Python packages besides torch: torchvision, onnx and transformers (a small T5
# built from its config, no weights downloaded) export the ONNX fixtures of the tests
# (scripts/export_onnx.py), timm and transformers give the model sweep its architectures
# (bench/model_sweep.py, random weights, nothing downloaded), PyYAML reads placement files in placer_torch (python/), and wheel lets
# the tests `pip install ./python` without network (the setuptools of a fresh venv is older than
# 70.1, which builds wheels by itself).
PYTHON_PACKAGES=("torchvision==$PLACER_TORCHVISION_VERSION" "onnx==$PLACER_ONNX_VERSION"
  "pyyaml==$PLACER_PYYAML_VERSION" "wheel==$PLACER_WHEEL_VERSION"
  "transformers==$PLACER_TRANSFORMERS_VERSION" "timm==$PLACER_TIMM_VERSION")
# Wheels that only GPU work loads: Triton (compiled GPU kernels), cuSOLVER (dlopened by
# libtorch_cuda_linalg), NVRTC (runtime compilation), NVTX, the CUDA Python bindings. Every other
# nvidia-* wheel stays even without a GPU: `import torch` loads libtorch_cuda.so, which links
# cuBLAS, cuDNN, cuFFT, cuSPARSE, NCCL, ... (placer's C++ needs only cudart and cupti of them).
GPU_ONLY_WHEELS="triton nvidia-cusolver nvidia-cuda-nvrtc nvidia-nvtx cuda-bindings cuda-pathfinder cuda-toolkit"

if [[ -z "${PLACER_PYTHON:-}" ]]; then
  venv="$PLACER_CACHE/venv-torch-$PLACER_TORCH_VERSION"
  if [[ ! -f "$venv/.complete" ]]; then
    # PLACER_TORCH_WHEELS: all (torch as PyPI resolves it; the default) or cpu (without the
    # GPU-only wheels: 1.1 GB less on disk). cpu resolves the set with a dry run first, which
    # downloads every wheel where the index serves no separate metadata and pip keeps no cache,
    # as here: 5.1 GB received instead of 2.8 GB (bench/RESULTS.md), so it is not the default.
    wheels="${PLACER_TORCH_WHEELS:-all}"
    [[ "$wheels" == all || "$wheels" == cpu ]] || {
      placer_log "error: PLACER_TORCH_WHEELS must be 'all' or 'cpu', not '$wheels'"
      exit 1
    }
    placer_log "installing torch==$PLACER_TORCH_VERSION ($wheels wheels) into $venv"
    mkdir -p "$PLACER_CACHE"
    rm -rf "$venv"
    python3 -m venv "$venv"
    pip=("$venv/bin/pip" install -q --disable-pip-version-check)
    requested=("torch==$PLACER_TORCH_VERSION" "${PYTHON_PACKAGES[@]}")
    if [[ "$wheels" == all ]]; then
      "${pip[@]}" "${requested[@]}"
    else
      # pip resolves the whole set as usual; everything it chose but the GPU-only wheels is
      # installed at the versions it chose.
      report="$PLACER_CACHE/pip-report.$$.json"
      "${pip[@]}" --dry-run --ignore-installed --report "$report" "${requested[@]}"
      mapfile -t chosen < <(python3 -c '
import json, sys
skip = set(sys.argv[2].split())
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    if meta["name"].lower().replace("_", "-") not in skip:
        print(meta["name"] + "==" + meta["version"])
' "$report" "$GPU_ONLY_WHEELS")
      rm -f "$report"
      if ((${#chosen[@]} == 0)); then
        placer_log "error: pip's resolution of ${requested[*]} could not be read"
        exit 1
      fi
      "${pip[@]}" --no-deps "${chosen[@]}"
    fi
    echo "$wheels" >"$venv/.complete"
  fi
  # Venvs made before a package was added get it added. The check reads package metadata only:
  # milliseconds.
  if ! "$venv/bin/python" -c "
import importlib.metadata as m, sys
sys.exit(any(m.version(p) != v for p, v in [('torchvision', '$PLACER_TORCHVISION_VERSION'),
    ('onnx', '$PLACER_ONNX_VERSION'), ('pyyaml', '$PLACER_PYYAML_VERSION'),
    ('wheel', '$PLACER_WHEEL_VERSION'), ('transformers', '$PLACER_TRANSFORMERS_VERSION'),
    ('timm', '$PLACER_TIMM_VERSION')]))
" 2>/dev/null; then
    placer_log "installing ${PYTHON_PACKAGES[*]} into $venv"
    # In a cpu venv, --no-deps: its GPU-only wheels would come back as torch's requirements.
    "$venv/bin/pip" install -q --disable-pip-version-check \
      $(grep -qx cpu "$venv/.complete" && echo --no-deps) "${PYTHON_PACKAGES[@]}"
    # transformers and timm need their own requirements (huggingface-hub, tokenizers,
    # safetensors, ...), which --no-deps left out; none of them is torch or a GPU wheel (timm's
    # torch and torchvision are installed at their pins already).
    "$venv/bin/pip" install -q --disable-pip-version-check \
      "transformers==$PLACER_TRANSFORMERS_VERSION" "timm==$PLACER_TIMM_VERSION"
  fi
fi

python="$(placer_python)"
if ! "$python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('${PLACER_TORCH_VERSION%.*}'))" 2>/dev/null; then
  placer_log "error: $python does not hold torch ${PLACER_TORCH_VERSION%.*}"
  exit 1
fi
