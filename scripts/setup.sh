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
  dataset-fashion-mnist
  libonnx-dev libonnx-testdata
  clang libclang-rt-dev  # scripts/fuzz.sh (run by .ci/run): clang, libFuzzer and the sanitizers
)

missing=()
for package in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  placer_log "installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ -z "${PLACER_PYTHON:-}" ]]; then
  venv="$PLACER_CACHE/venv-torch-$PLACER_TORCH_VERSION"
  if [[ ! -f "$venv/.complete" ]]; then
    placer_log "installing torch==$PLACER_TORCH_VERSION (LibTorch with CUDA 13) into $venv"
    mkdir -p "$PLACER_CACHE"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "torch==$PLACER_TORCH_VERSION"
    touch "$venv/.complete"
  fi
  # scripts/export_onnx.py (ONNX fixtures of the tests) needs torchvision and onnx; venvs made
  # before it existed get them added. The check reads package metadata only: milliseconds.
  if ! "$venv/bin/python" -c "
import importlib.metadata as m, sys
sys.exit(m.version('torchvision') != '$PLACER_TORCHVISION_VERSION' or m.version('onnx') != '$PLACER_ONNX_VERSION')
" 2>/dev/null; then
    placer_log "installing torchvision==$PLACER_TORCHVISION_VERSION onnx==$PLACER_ONNX_VERSION into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "torch==$PLACER_TORCH_VERSION" \
      "torchvision==$PLACER_TORCHVISION_VERSION" "onnx==$PLACER_ONNX_VERSION"
  fi
fi

python="$(placer_python)"
if ! "$python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('${PLACER_TORCH_VERSION%.*}'))" 2>/dev/null; then
  placer_log "error: $python does not hold torch ${PLACER_TORCH_VERSION%.*}"
  exit 1
fi
