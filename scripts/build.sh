#!/usr/bin/env bash
# Sets up (scripts/setup.sh), configures once and builds placer into build/ with ccache.
# Extra arguments go to the first CMake configure, e.g. -DPLACER_SANITIZE=ON.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$PLACER_ROOT/scripts/setup.sh"

# Precompiled headers and ccache need these to share cached objects.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"

if [[ ! -f "$PLACER_BUILD_DIR/build.ninja" ]]; then
  torch_prefix="$("$(placer_python)" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  cmake -S "$PLACER_ROOT" -B "$PLACER_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix" "$@" >"$PLACER_BUILD_DIR.configure.log" 2>&1 || {
    cat "$PLACER_BUILD_DIR.configure.log" >&2
    exit 1
  }
fi
cmake --build "$PLACER_BUILD_DIR" -j "${PLACER_JOBS:-2}" >&2
