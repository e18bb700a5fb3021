#!/usr/bin/env bash
# Training on the GPU machine: builds zrun (compiler off), runs the fp32 training plans compiled on the CPU
# machine (.gpu-train/*.zplan, --target cuda) for 5 steps and compares every loss and gradient norm with
# PyTorch's (tests/models/<model>/train_*.npy): tp 1 on one GPU, ZeRO 1-3 over dp 2 on two GPUs (NCCL).
set -uo pipefail
cd "$(dirname "$0")/../.."
b=build-gpu
nvidia-smi -L
cmake -S . -B $b -G Ninja -DZPLAN_BUILD_COMPILER=OFF -DZPLAN_BUILD_TESTS=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  -DZPLAN_FLATBUFFERS_ROOT=$PWD/.gpu-deps -DZPLAN_GTEST_SOURCE_DIR=$PWD/.gpu-deps/googletest-src > /tmp/cfg.log 2>&1 ||
  { tail -30 /tmp/cfg.log; exit 1; }
t0=$SECONDS
ninja -C $b -j"$(nproc)" zrun > /tmp/build.log 2>&1 || { grep -B2 -A10 -E "error|FAILED" /tmp/build.log | head -60; exit 1; }
echo "build: $((SECONDS - t0)) s"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
ngpu=$(nvidia-smi -L | wc -l)
for p in .gpu-train/*.zplan; do
  name=$(basename "$p" .zplan); model=${name%%-*}; world=${name##*-w}
  [[ -n ${ZPLAN_TRAIN_ONLY:-} && $name != $ZPLAN_TRAIN_ONLY ]] && continue
  [[ $world -gt $ngpu ]] && { echo "$name: skipped ($ngpu GPU)"; continue; }
  o=/tmp/$name; mkdir -p "$o"
  cmd=("$b/bin/zrun" "$p" --backend cuda --train --data tests/models/$model/input_ids.npy --steps 5
       --losses-out "$o/l.npy" --grad-norms-out "$o/n.npy" --timeout 120)
  if [[ $world -gt 1 ]]; then cmd=(mpirun --allow-run-as-root --oversubscribe -np "$world" -x NCCL_NVLS_ENABLE=0 "${cmd[@]}"); fi
  t0=$SECONDS
  "${cmd[@]}" > "$o/log" 2>&1; rc=$?
  [[ $rc -ne 0 ]] && { echo "$name: zrun rc=$rc"; tail -8 "$o/log"; continue; }
  grep -iE "tokens/s|peak" "$o/log" | tail -2
  python3 - "$o" "tests/models/$model" "$name" "$((SECONDS - t0))" <<'PY'
import sys, numpy as np
o, m, name, secs = sys.argv[1:5]
for f, r, w in (("l.npy", "train_losses.npy", "loss"), ("n.npy", "train_grad_norms.npy", "norm")):
    g, ref = np.load(f"{o}/{f}"), np.load(f"{m}/{r}")
    rel = float(np.max(np.abs(g - ref) / np.abs(ref)))
    tol = 2e-2 if "-bf16-" in name else 1e-4  # bf16 compute: the issue's bar; fp32: as on CPU ranks
    print(f"{name}: {w} {np.array2string(g, precision=6)} PyTorch {np.array2string(ref, precision=6)} max rel {rel:.2e} (tol {tol:g}) {'ok' if rel <= tol else 'FAIL'} ({secs} s)")
PY
done
