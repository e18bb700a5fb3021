# The set-up that the one-call GPU scripts share (gpu_session.sh, gpu_issue12.sh, generate_bench.sh,
# train_gpu.sh, train_bench.sh): source it, then call what the script needs. Sourcing only sets variables and
# defines functions:
#   top         the repository root
#   b           the runtime's build folder on the GPU machine (it has no MLIR: compiler off)
#   summary     one line per step (step), for the script to print last
#   step_width  the width of a step's name in the summary
# shellcheck shell=bash
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
b=$top/build-gpu
summary=()
step_width=16

# logs_to DIR ARCHIVE [FILE...]: the steps log into DIR ($out); on exit the folder travels back as
# $OUT/ARCHIVE (the device tool returns only a few files), with each FILE of DIR copied beside it if present.
logs_to() {
  out=$1 logs_archive=$2
  shift 2
  logs_extra=("$@")
  mkdir -p "$out"
  trap '[[ -n ${OUT:-} ]] && { tar czf "$OUT/$logs_archive" -C "$out" .
         for f in "${logs_extra[@]}"; do cp -f "$out/$f" "$OUT/" 2>/dev/null; done; }' EXIT
}

# step NAME COMMAND...: runs COMMAND with its output in $out/NAME.log, adds its exit status and seconds to
# the summary, and returns its exit status.
step() {
  local name=$1
  shift
  local t0=$SECONDS
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf "%-${step_width}s rc=%-3s %4ss" "$name" "$rc" "$((SECONDS - t0))")")
  return $rc
}

# gpu_env: Open MPI run as root, and NCCL with NVLink multicast off (NCCL_NVLS_ENABLE=0), as the lent GPU
# machines ask.
gpu_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
}

# gpu_build [--no-tests] TARGET...: configures $b with the compiler off (FlatBuffers, CLI11 and GoogleTest
# from .gpu-deps, made by scripts/gpu-deps.sh; --no-tests leaves the test targets out) and builds the
# targets, as the steps "configure" and "build". On a failure it prints the log's errors and exits 1.
# With .gpu-bin/runtime.tar.xz in the tree (tests/cuda/pack_runtime.sh, made on the compiling machine and
# carried), nothing is built: the packed binaries are unpacked into $b (step "unpack"), each TARGET must be
# among them, and LD_LIBRARY_PATH finds their libzrt (it is searched before the binaries' RUNPATH). That
# spares a call the ~120 s a build takes on the GPU machine.
gpu_build() {
  local tests=()
  if [[ ${1:-} == --no-tests ]]; then
    tests=(-DZPLAN_BUILD_TESTS=OFF)
    shift
  fi
  if [[ -f $top/.gpu-bin/runtime.tar.xz ]]; then
    mkdir -p "$b/bin"
    step unpack tar xJf "$top/.gpu-bin/runtime.tar.xz" -C "$b/bin" || { tail -5 "$out/unpack.log"; exit 1; }
    export LD_LIBRARY_PATH="$b/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu_build: nothing built; the runtime packed from $(cat "$top/.gpu-bin/runtime.commit" 2>/dev/null || echo '?')"
    local t
    for t in "$@"; do
      [[ -x $b/bin/$t ]] || { echo "gpu_build: $t is not in .gpu-bin/runtime.tar.xz (tests/cuda/pack_runtime.sh)"; exit 1; }
    done
    return 0
  fi
  step configure cmake -S "$top" -B "$b" -G Ninja -DZPLAN_BUILD_COMPILER=OFF "${tests[@]}" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DZPLAN_FLATBUFFERS_ROOT="$top/.gpu-deps" \
    -DZPLAN_GTEST_SOURCE_DIR="$top/.gpu-deps/googletest-src" ||
    { tail -30 "$out/configure.log"; exit 1; }
  step build ninja -C "$b" -j"$(nproc)" "$@" ||
    { grep -B2 -A12 -E "error|FAILED" "$out/build.log" | head -60; exit 1; }
}
