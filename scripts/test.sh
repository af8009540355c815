#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite. Tests that need a GPU skip, visibly, without one.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$PLACER_ROOT/scripts/build.sh"
cd "$PLACER_BUILD_DIR"
ctest --output-on-failure -j "${PLACER_TEST_JOBS:-2}" "$@"
