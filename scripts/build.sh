#!/usr/bin/env bash
# Configures and builds zplan into build/ (binaries in build/bin). Runs the set-up step first, so it works on a
# fresh machine. Extra arguments go to cmake's configure step (e.g. -DZPLAN_BUILD_COMPILER=OFF).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$top/scripts/setup.sh"
build=${ZPLAN_BUILD_DIR:-$top/build}
jobs=${ZPLAN_JOBS:-$(nproc)}
cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$jobs"
