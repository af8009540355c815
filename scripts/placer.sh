#!/usr/bin/env bash
# Sets up, builds, then runs the placer program with the given arguments.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$PLACER_ROOT/scripts/build.sh"
exec "$PLACER_BUILD_DIR/placer" "$@"
