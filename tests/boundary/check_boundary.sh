#!/usr/bin/env bash
# The runtime boundary (docs/design.md): runtime/ and kernels/ include nothing of the compiler, MLIR, LLVM,
# protobuf or ONNX, and the binaries an app links (zrun, libzrt) load none of those libraries.
# Usage: check_boundary.sh SOURCE_DIR [BINARY...]
set -u
src=$1; shift
status=0
# What is scanned must be there: a wrong SOURCE_DIR, or a grep that cannot read, finds no include and would pass.
for d in runtime kernels; do
  n=$(find "$src/$d" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | wc -l)
  if [ "$n" -lt 10 ]; then echo "boundary: $src/$d holds $n C++ sources: not the runtime's folder"; exit 1; fi
  echo "boundary: $n C++ sources under $d/"
done
bad=$(grep -rnE '^\s*#\s*include\s*[<"](mlir/|llvm/|llvm-c/|onnx/|google/protobuf|compiler/|dialects/)' \
        "$src/runtime" "$src/kernels")
rc=$?
if [ $rc -gt 1 ]; then echo "boundary: grep failed ($rc)"; status=1; fi
if [ -n "$bad" ]; then
  echo "boundary: runtime/ or kernels/ include compiler-side headers:"; echo "$bad"; status=1
fi
bad=$(grep -rniE 'MLIR|LLVM[A-Z]|protobuf|onnx' --include=CMakeLists.txt "$src/runtime" "$src/kernels" \
        | grep -vE '^\S+:\s*#' )
if [ -n "$bad" ]; then
  echo "boundary: runtime/ or kernels/ CMake mentions compiler-side libraries:"; echo "$bad"; status=1
fi
for bin in "$@"; do
  if [ ! -e "$bin" ]; then echo "boundary: $bin was not built"; status=1; continue; fi
  deps=$(ldd "$bin") || { echo "boundary: ldd $bin failed"; status=1; continue; }
  libs=$(grep -iE 'libMLIR|libLLVM|protobuf|onnx' <<<"$deps")
  if [ -n "$libs" ]; then echo "boundary: $bin links compiler-side libraries:"; echo "$libs"; status=1; fi
done
[ $status -eq 0 ] && echo "boundary: ok (includes, CMake, ldd of $*)"
exit $status
