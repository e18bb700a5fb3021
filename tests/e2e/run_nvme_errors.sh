#!/usr/bin/env bash
# NVMe offload: a folder the runtime cannot use is refused at load, before any run, with a message naming it
# (docs/nvme.md). One plan, compiled with --nvme-path pointing nowhere, is run with zrun --nvme-path set to:
# a missing folder, a regular file, a folder without room for the rank's file (/proc: no free blocks), and,
# when not running as root (root may write anywhere), a read-only folder. Then the compile-time errors: the
# flags that need each other.
# Usage: run_nvme_errors.sh BIN_DIR MODEL_DIR WORK_DIR "MPIRUN..."
set -uo pipefail
bin=$1 model=$2 work=$3 mpirun=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
# clean RC WHAT: a refusal is an ordinary error exit, not a signal (mpirun passes a rank's on as 128 + N) nor a
# crash after the right message.
source "$(dirname "${BASH_SOURCE[0]}")/../lib/crashed.sh"
clean() {
  local why
  if why=$(crashed "$1" "$(cat "$work/log")"); then cat "$work/log"; fail "$2 $why"; fi
}
"$bin/zplan" "$model/model.onnx" --seq 16 --world 2 --zero 3 --batch 2 --offload-param nvme \
  --nvme-path "$work/never-made" -o "$work/p.zplan" >/dev/null || fail "the plan did not compile"

# zrun with --nvme-path $1 must exit non-zero before any run, printing $2.
refused() {
  local dir=$1 want=$2
  $mpirun -np 2 "$bin/zrun" "$work/p.zplan" --nvme-path "$dir" --input input_ids="$model/input_ids.npy" \
    --output "logits=$work/out.npy" --timeout 60 > "$work/log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] || fail "zrun --nvme-path $dir succeeded"
  clean $rc "zrun --nvme-path $dir"
  grep -qF -- "$want" "$work/log" || { cat "$work/log"; fail "no '$want' in zrun's message"; }
  [ ! -e "$work/out.npy" ] || fail "zrun --nvme-path $dir wrote an output"
  grep -q "run .* ms" "$work/log" && fail "zrun --nvme-path $dir ran the plan"
  echo "ok: $dir: $(grep -m1 -F -- "$want" "$work/log")"
}
# The plan's own folder does not exist.
$mpirun -np 2 "$bin/zrun" "$work/p.zplan" --input input_ids="$model/input_ids.npy" --timeout 60 > "$work/log" 2>&1 \
  && fail "zrun with the plan's missing folder succeeded"
clean $? "zrun with the plan's missing folder"
grep -qF "NVMe path '$work/never-made'" "$work/log" || { cat "$work/log"; fail "the plan's folder is not named"; }
echo "ok: the plan's folder: $(grep -m1 -F "NVMe path" "$work/log")"
refused "$work/missing" "NVMe path '$work/missing': No such file or directory (it must be an existing folder)"
touch "$work/a-file"
refused "$work/a-file" "NVMe path '$work/a-file' is not a folder"
refused /proc "NVMe path '/proc' has 0 bytes free; this rank's file needs"
if [ "$(id -u)" != 0 ]; then
  mkdir -p "$work/read-only" && chmod a-w "$work/read-only"
  refused "$work/read-only" "NVMe path '$work/read-only' is not writable"
fi

# A bf16 training plan with its parameters and optimizer state on NVMe: the same refusals, before any step.
"$bin/zplan" "$model/model.onnx" --seq 16 --train --world 2 --zero 3 --batch 2 --dtype bf16 --restore-zero-biases \
  --offload-param nvme --offload-optimizer nvme --nvme-path "$work/never-made" -o "$work/t.zplan" >/dev/null \
  || fail "the bf16 training plan did not compile"
refused_train() {
  local dir=$1 want=$2
  $mpirun -np 2 "$bin/zrun" "$work/t.zplan" --train --nvme-path "$dir" --data "$model/input_ids.npy" --steps 2 \
    --losses-out "$work/losses.npy" --timeout 60 > "$work/log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] || fail "zrun --train --nvme-path $dir succeeded"
  clean $rc "zrun --train --nvme-path $dir"
  grep -qF -- "$want" "$work/log" || { cat "$work/log"; fail "no '$want' in zrun's message"; }
  [ ! -e "$work/losses.npy" ] || fail "zrun --train --nvme-path $dir wrote losses"
  grep -q "zrun: step" "$work/log" && fail "zrun --train --nvme-path $dir ran a step"
  echo "ok: bf16 training, $dir: $(grep -m1 -F -- "$want" "$work/log")"
}
refused_train "$work/missing" "NVMe path '$work/missing': No such file or directory (it must be an existing folder)"
refused_train "$work/a-file" "NVMe path '$work/a-file' is not a folder"
refused_train /proc "NVMe path '/proc' has 0 bytes free; this rank's file needs"
if [ "$(id -u)" != 0 ]; then
  refused_train "$work/read-only" "NVMe path '$work/read-only' is not writable"
fi

# Compile-time errors, each naming the flag.
compile_refused() {
  local want=$1; shift
  "$bin/zplan" "$model/model.onnx" --seq 16 "$@" -o "$work/bad.zplan" > "$work/log" 2>&1 && fail "zplan $* succeeded"
  clean $? "zplan $*"
  grep -qF -- "$want" "$work/log" || { cat "$work/log"; fail "no '$want' in zplan's message"; }
  [ ! -e "$work/bad.zplan" ] || fail "zplan $* wrote a plan"
  echo "ok: zplan $*: $(grep -m1 -F -- "$want" "$work/log")"
}
compile_refused "--offload-param 'nvme' needs --nvme-path DIR" --world 2 --zero 3 --batch 2 --offload-param nvme
compile_refused "--nvme-path '$work' needs --offload-param nvme or --offload-optimizer nvme" --nvme-path "$work"
compile_refused "--offload-param 'nvme' with --train needs --zero 3 over dp > 1" --train --world 2 --zero 2 --batch 2 \
  --offload-param nvme --offload-optimizer nvme --nvme-path "$work"
compile_refused "--offload-param 'nvme' with --train needs --zero 3 over dp > 1" --train --world 2 --zero 3 --batch 2 \
  --offload-param nvme --nvme-path "$work"
compile_refused "--nvme-bandwidth must be more than 0" --world 2 --zero 3 --batch 2 --offload-param nvme \
  --nvme-path "$work" --nvme-bandwidth 0
