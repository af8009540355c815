# Shared settings of the project's scripts (sourced, not run).
PLACER_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLACER_CACHE="${PLACER_CACHE:-$HOME/.cache/placer}"
PLACER_TORCH_VERSION="2.11.0"
PLACER_TORCHVISION_VERSION="0.26.0"  # the release that matches torch 2.11
PLACER_ONNX_VERSION="1.23.2"
PLACER_PYYAML_VERSION="6.0.3"  # placer_torch reads placement files with it
PLACER_WHEEL_VERSION="0.45.1"  # the last that builds wheels with setuptools < 70.1
PLACER_TRANSFORMERS_VERSION="5.23.0"  # the t5 ONNX fixture (scripts/export_onnx.py)
PLACER_TIMM_VERSION="1.0.31"  # the model sweep's vision architectures (bench/model_sweep.py)
PLACER_BUILD_DIR="${PLACER_BUILD_DIR:-$PLACER_ROOT/build}"

# The Python that holds LibTorch: PLACER_PYTHON if set (the GPU machine's own python3 with its
# torch), otherwise the project's cached virtual environment outside the clone.
placer_python() {
  if [[ -n "${PLACER_PYTHON:-}" ]]; then
    echo "$PLACER_PYTHON"
  else
    echo "$PLACER_CACHE/venv-torch-$PLACER_TORCH_VERSION/bin/python"
  fi
}

placer_log() { echo "[placer] $*" >&2; }
