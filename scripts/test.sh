#!/usr/bin/env bash
# The test command: set-up, build, then the whole suite through ctest (GoogleTest units, lit tests of the
# compiler passes, end-to-end plans run under mpirun, the runtime/compiler boundary checks).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$top/scripts/build.sh" "$@"
build=${ZPLAN_BUILD_DIR:-$top/build}
cd "$build"
ctest --output-on-failure -j "${ZPLAN_TEST_JOBS:-2}" --timeout 600 --no-tests=error
