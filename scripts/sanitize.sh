#!/usr/bin/env bash
# The sanitizer stage of CI (.ci/run calls it after scripts/test.sh): the unit tests and the fuzz replays,
# built with clang-22 under AddressSanitizer + UndefinedBehaviorSanitizer in their own build folder
# (build-asan, or ZPLAN_SAN_BUILD_DIR), then run through ctest. Only what those tests need is built (no CUDA,
# no tools, no models): the stage must keep the whole of .ci/run within an hour on a cold 2-core machine.
# Extra arguments go to cmake's configure step.
#
# Two failures of its first runs are settled: the compile replay's UBSan report (llvm::Statistic's layout
# differs from Debian's NDEBUG libMLIR, hence -DNDEBUG below) and runtime/Registry (the op table had one copy
# per translation unit under clang; it is one inline object now).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${ZPLAN_SAN_BUILD_DIR:-$top/build-asan}
jobs=${ZPLAN_JOBS:-$(nproc)}
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -O1 -g1: ASan's usual optimisation level, and line numbers in its reports at a small cost in build time.
# -DNDEBUG as Debian's LLVM/MLIR were built: without it their headers change the layout of classes the
# libraries construct (llvm::Statistic in MLIR passes), which UBSan then reports as garbage.
cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 -DZPLAN_CUDA=OFF \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_C_FLAGS="$san" -DCMAKE_CXX_FLAGS="$san -Wno-c++11-narrowing" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  "$@" >/dev/null
targets=(zrt_kernel_tests zrt_train_kernel_tests zrt_verifier_tests zrt_mpi_tests zrt_decode_tests zrt_train_plan_tests
         zplan-import-tests zplan-sharding-tests zplan-plan-tests zplan-emit-tests zplan-autodiff-tests
         fuzz_npy_read_replay fuzz_plan_load_replay fuzz_onnx_import_replay fuzz_compile_replay)
start=$(date +%s)
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
echo "sanitize: built ${#targets[@]} targets in $(( $(date +%s) - start )) s"
# Leaks are not checked: MPI and the MLIR context's global registries allocate once and never free.
# allocator_may_return_null: a refused huge allocation must come back to the code under test as null.
# allow_user_poisoning=0: LLVM's allocator, inlined into our instrumented code, poisons slabs that the
# uninstrumented libMLIR later hands out without unpoisoning (false reports: fuzz/FINDINGS.md F33).
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:abort_on_error=1:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd "$build"
# Each group the selection names must select something: a renamed test would otherwise drop out of the stage
# unseen (ctest passes a selection that matches nothing, and one that matches only part of what it meant).
groups=(runtime/kernels/ runtime/Verifier runtime/Registry runtime/Npy runtime/PlanFile runtime/mpi_np
        runtime/decode_np runtime/train_plan_np fuzz/replay/)
for g in "${groups[@]}"; do
  n=$(ctest -N -R "^$g" | sed -n 's/^Total Tests: //p')
  [ "${n:-0}" -gt 0 ] || { echo "sanitize: no test named $g* in $build"; exit 1; }
done
ctest --output-on-failure -j "${ZPLAN_TEST_JOBS:-2}" --timeout 600 --no-tests=error \
  -R "^($(IFS='|'; echo "${groups[*]}"))"
# The compiler units run too, except two groups that ASan stops with use-after-poison in memmove inside LLVM
# containers (SmallVector growth) when the test code, compiled with ASan, shares those containers with the
# uninstrumented libMLIR: the shared-model sharding cases and the float64 train-step evaluations. A
# heap-use-after-free this stage found in the evaluator (tests/compiler/autodiff/Evaluator.cpp) is fixed; the
# two groups come back once MLIR is built with ASan too.
ctest --output-on-failure -j "${ZPLAN_TEST_JOBS:-2}" --timeout 600 --no-tests=error -L unit -E '^(Shared/Models|TrainStep)\.'
