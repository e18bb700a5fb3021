#!/usr/bin/env bash
# End-to-end checkpoint cases on CPU ranks (fp32), each against an independent run of the same training:
#   resume  TP ZERO WORLD: 5 steps with --save-every 5, then --resume for steps 6-10; the 10 losses equal
#           10 straight steps of the same plan within 1e-6 (relative).
#   reshard: save at (tp 2, zero 3, world 4) after 5 steps, resume steps 6-10 under (tp, zero, world) =
#           (1, 1, 2), (1, 0, 1), (2, 0, 2), (1, 3, 2) with --offload-optimizer cpu, (2, 3, 4) itself, and
#           (4, 2, 4) for gpt2; every run's 10 losses equal 10 straight steps of the one-rank plan within 1e-5.
#   errors: a flipped bit in a rank file and in the manifest, a truncated rank file, a manifest of another
#           model, a missing rank file, a pointer to a missing folder: each exits non-zero before any step,
#           with a message naming the file.
#   kill:   a save paused between files (ZRT_CHECKPOINT_PAUSE_MS) is killed with SIGKILL while rank files
#           are half written; `latest` still names the previous checkpoint, which resumes to the same losses.
#   state:  what a resume restores besides the tensors: the data position and the schedule's step. Six distinct
#           samples (three global batches of 2, so step k's batch depends on where the data stands) and a
#           warmup-decay schedule (a different rate every step): 5 steps saved at (tp 1, zero 1, world 2), resumed
#           there and at (tp 2, zero 3, world 2); the 10 losses equal 10 straight steps within 1e-6 and 1e-5.
#   durable: a save of 2 ranks under strace (system calls with absolute times): every file of the checkpoint
#           (rank files, manifest, `latest`) is written under NAME.tmp, fsynced, then renamed, never opened for
#           writing under its own name; the folder is fsynced after the manifest's rename and the root after
#           latest's; every rank file is renamed before rank 0 creates the manifest, and the manifest before
#           `latest`. Skipped (exit 77) where strace cannot trace.
#   bf16:   a --dtype bf16 checkpoint resumes exactly under its plan, and under zero 3 within 2e-2.
#   kill-random: runs saving after every step, each with a rank killed at a random moment after its first save
#           (at least three kills of a running job); every restart loads what `latest` names, and the last one
#           continues with the straight run's losses.
# Usage: checkpoint.sh BIN_DIR MODELS_DIR WORK_DIR "MPIRUN..." MODE [MODEL] [ARGS...]
set -euo pipefail
bin=$1 models=$2 work=$3 mpirun=$4 mode=$5; shift 5
model=${1:-gpt2}
[ $# -gt 0 ] && shift
source "$(dirname "$0")/../lib.sh"
m=$models/$model
ids=$m/input_ids.npy
flags=(--train --seq 16 --clip-grad 1.0)
read -ra model_flags <<< "$(train_flags "$model")"
flags+=("${model_flags[@]}")
rm -rf "$work"
mkdir -p "$work"
cd "$work"

compile() {  # NAME TP ZERO WORLD [extra zplan flags]; the global batch is $batch (2)
  local name=$1 tp=$2 zero=$3 world=$4
  shift 4
  "$bin/zplan" "$m/model.onnx" "${flags[@]}" --batch "${batch:-2}" --tp "$tp" --zero "$zero" --world "$world" "$@" \
    -o "$name.zplan" 2>/dev/null
}
train() {  # PLAN WORLD ZRUN_FLAGS...
  local plan=$1 world=$2
  shift 2
  $mpirun -np "$world" "$bin/zrun" "$plan.zplan" --train --data "$ids" --timeout 120 "$@"
}
compare() {  # TOLERANCE REFERENCE.npy FIRST.npy SECOND.npy
  "$python" - "$@" <<'PY'
import sys
import numpy as np
tol, ref, a, b = float(sys.argv[1]), np.load(sys.argv[2]), np.load(sys.argv[3]), np.load(sys.argv[4])
got = np.concatenate([a, b])
assert got.shape == ref.shape, f"{got.shape} losses, expected {ref.shape}"
rel = np.abs(got - ref) / np.abs(ref)
print(f"losses {np.array2string(got, precision=6)}\n  straight {np.array2string(ref, precision=6)}\n"
      f"  max relative difference {rel.max():.3g} (tolerance {tol:g}; {sys.argv[3]} + {sys.argv[4]})")
if not rel.max() <= tol:
    sys.exit("FAIL: the resumed losses differ from the straight run's")
PY
}
save_first() {  # STEPS PLAN WORLD: straight.npy, 10 steps of PLAN; first.npy, STEPS steps saved into ck
  local steps=$1 plan=$2 world=$3
  train "$plan" "$world" --steps 10 --losses-out straight.npy >/dev/null
  train "$plan" "$world" --steps "$steps" --save-dir ck --save-every "$steps" --losses-out first.npy >/dev/null
}
resume_ck() {  # TOLERANCE PLAN WORLD OUT.npy: the steps after ck's resumed under PLAN, against the straight run
  local tol=$1 plan=$2 world=$3 out=$4
  train "$plan" "$world" --steps 10 --resume ck --losses-out "$out" | grep resumed
  compare "$tol" straight.npy first.npy "$out"
}
resume_here_and_at() {  # TP ZERO TOLERANCE: 5 steps saved at (tp 1, zero 1, world 2), resumed by the same
  # plan within 1e-6 and by one of (TP, ZERO, world 2) within TOLERANCE
  compile src 1 1 2
  save_first 5 src 2
  resume_ck 1e-6 src 2 same.npy
  compile dst "$1" "$2" 2
  resume_ck "$3" dst 2 other.npy
}
expect_fail() {  # WHAT FILE-NAME-IN-MESSAGE PLAN WORLD FLAGS...
  local what=$1 needle=$2 plan=$3 world=$4
  shift 4
  set +e
  train "$plan" "$world" "$@" >out.log 2>err.log
  local rc=$?
  set -e
  if [ $rc -eq 0 ]; then echo "FAIL: $what: zrun exited 0"; cat out.log err.log; exit 1; fi
  if grep -q "zrun: step" out.log; then echo "FAIL: $what: a step ran before the error"; cat out.log; exit 1; fi
  if ! grep -qF -- "$needle" err.log; then echo "FAIL: $what: the message does not name '$needle'"; cat err.log; exit 1; fi
  echo "ok: $what (exit $rc): $(grep -m1 'error' err.log)"
}

case "$mode" in
resume)
  tp=$1 zero=$2 world=$3
  compile p "$tp" "$zero" "$world"
  save_first 5 p "$world"
  resume_ck 1e-6 p "$world" second.npy
  ;;
reshard)
  compile one 1 0 1
  train one 1 --steps 10 --losses-out straight.npy >/dev/null
  compile src 2 3 4
  train src 4 --steps 5 --save-dir ck --save-every 5 --losses-out first.npy
  meshes=("1 1 2" "1 0 1" "2 0 2" "1 3 2 cpu" "2 3 4")
  # zplan plans tp 4 for gpt2 (4 heads); llama's 2 key/value heads do not split over 4 ranks.
  [ "$model" = gpt2 ] && meshes+=("4 2 4")
  for mesh in "${meshes[@]}"; do
    set -- $mesh
    compile "dst$1$2$3${4:-}" "$1" "$2" "$3" --offload-optimizer "${4:-none}"
    echo "== resume at tp $1 zero $2 world $3 offload-optimizer ${4:-none}"
    resume_ck 1e-5 "dst$1$2$3${4:-}" "$3" "second$1$2$3${4:-}.npy"
  done
  # dp 3 does not divide the tensors evenly: the last ZeRO partition of every moment and shard is padded.
  # Steps 6-7 at (1, 3, 3) with a global batch of 6 (the two samples three times: the same mean loss and
  # gradients), saved there, then steps 8-10 on one rank from that padded checkpoint.
  "$python" -c "
import sys, numpy as np; a = np.load(sys.argv[1]); np.save('ids6.npy', np.concatenate([a, a, a]))" "$ids"
  batch=6 compile dp3 1 3 3
  echo "== resume at tp 1 zero 3 world 3 (padded partitions), save at step 7, resume that at tp 1 zero 0 world 1"
  $mpirun -np 3 "$bin/zrun" dp3.zplan --train --data ids6.npy --timeout 120 --steps 7 --resume ck --save-dir ck3 \
    --save-every 7 --losses-out dp3.npy
  train one 1 --steps 10 --resume ck3 --losses-out after_dp3.npy
  "$python" -c "
import sys, numpy as np; np.save('dp3_all.npy', np.concatenate([np.load('dp3.npy'), np.load('after_dp3.npy')]))"
  compare 1e-5 straight.npy first.npy dp3_all.npy
  ;;
errors)
  compile p 1 1 2
  train p 2 --steps 2 --save-dir ck --save-every 2 >/dev/null
  step=ck/$(cat ck/latest)
  cp -r "$step" pristine
  restore() { rm -rf "$step"; cp -r pristine "$step"; }
  # A flipped bit in the middle of rank 1's data.
  "$python" -c "
import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[len(b) // 2] ^= 0x10; open(p, 'wb').write(b)" "$step/rank-00001.bin"
  expect_fail "bit flip in a rank file" "$step/rank-00001.bin" p 2 --steps 4 --resume ck
  restore
  "$python" -c "
import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[len(b) - 9] ^= 0x01; open(p, 'wb').write(b)" "$step/manifest.zckpt"
  expect_fail "bit flip in the manifest" "$step/manifest.zckpt" p 2 --steps 4 --resume ck
  restore
  truncate -s -100 "$step/rank-00000.bin"
  expect_fail "truncated rank file" "$step/rank-00000.bin" p 2 --steps 4 --resume ck
  restore
  rm "$step/rank-00001.bin"
  expect_fail "missing rank file" "$step/rank-00001.bin" p 2 --steps 4 --resume ck
  restore
  # The manifest (and data) of a checkpoint of another model in this one's folder.
  other=$([ "$model" = gpt2 ] && echo llama || echo gpt2)
  oflags=(--train --seq 16 --clip-grad 1.0 --batch 2 --tp 2 --zero 1 --world 2)
  "$bin/zplan" "$models/$other/model.onnx" "${oflags[@]}" -o other.zplan >/dev/null
  $mpirun -np 2 "$bin/zrun" other.zplan --train --data "$models/$other/input_ids.npy" --steps 1 --save-dir ock \
    --save-every 1 >/dev/null
  cp "ock/$(cat ock/latest)/manifest.zckpt" "$step/manifest.zckpt"
  expect_fail "manifest of another model" "$step/manifest.zckpt" p 2 --steps 4 --resume ck
  restore
  echo "step-99999999" > ck/latest
  expect_fail "pointer to a missing checkpoint" "ck/latest" p 2 --steps 4 --resume ck
  expect_fail "no checkpoint at all" "nowhere" p 2 --steps 4 --resume nowhere
  ;;
kill)
  compile p 1 1 2
  save_first 4 p 2
  before=$(cat ck/latest)
  # The second save pauses 100 ms after every slice: kill a rank once a rank file is half written.
  ZRT_CHECKPOINT_PAUSE_MS=100 $mpirun -x ZRT_CHECKPOINT_PAUSE_MS -np 2 "$bin/zrun" p.zplan --train --data "$ids" \
    --timeout 120 --steps 8 --resume ck --save-dir ck --save-every 8 >kill.log 2>&1 &
  job=$!
  victim=""
  for _ in $(seq 1 600); do
    if ls ck/step-00000008*/rank-*.bin.tmp >/dev/null 2>&1; then
      # A rank is a child of this test's mpirun; only that process is killed.
      victim=$(pgrep -P "$job" -f "zrun p.zplan" | tail -1 || true)
      [ -n "$victim" ] && break
    fi
    sleep 0.05
  done
  [ -n "$victim" ] || { echo "FAIL: the save never started"; cat kill.log; exit 1; }
  kill -9 "$victim"
  set +e
  wait "$job"
  rc=$?
  set -e
  echo "killed rank process $victim during the save; mpirun exited $rc"
  [ "$rc" -ne 0 ] || { echo "FAIL: the killed job exited 0"; exit 1; }
  ls -la ck ck/step-00000008* || true
  [ "$(cat ck/latest)" = "$before" ] || { echo "FAIL: latest moved to $(cat ck/latest)"; exit 1; }
  [ ! -e "ck/step-00000008/manifest.zckpt" ] || { echo "FAIL: the killed save has a manifest"; exit 1; }
  echo "ok: latest still names $before"
  resume_ck 1e-6 p 2 second.npy
  ;;
state)
  # The rows differ from each other: the token rows, rolled and reversed along the sequence (the same ids,
  # so every one is inside the vocabulary). A resume that restarted the data at sample 0, or the schedule at
  # step 1, would train steps 6-10 on other batches or at other rates.
  "$python" -c "
import sys, numpy as np; a = np.load(sys.argv[1])
np.save('ids6.npy', np.concatenate([a, np.roll(a, 5, axis=1), a[:, ::-1]]))" "$ids"
  ids=$PWD/ids6.npy
  flags+=(--lr 0.002 --lr-schedule warmup-decay --warmup-steps 3 --total-steps 12)
  resume_here_and_at 2 3 1e-5
  ;;
durable)
  if ! strace -qq -o /dev/null true 2>/dev/null; then echo "SKIP: strace cannot trace here"; exit 77; fi
  compile p 1 1 2
  # Each rank traces itself into trace.RANK: the file system calls of the save, with absolute times. The
  # single quotes are meant: the rank's own shell expands its rank variable.
  # shellcheck disable=SC2016
  $mpirun -np 2 sh -c 'exec strace -f -y -ttt -qq -e trace=openat,open,creat,fsync,fdatasync,rename,renameat,renameat2 \
    -o "trace.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" "$@"' zrun "$bin/zrun" p.zplan --train --data "$ids" \
    --timeout 120 --steps 2 --save-dir ck --save-every 2 >/dev/null
  "$python" - "$(cat ck/latest)" trace.0 trace.1 <<'PY'
import re, sys
step, traces = sys.argv[1], sys.argv[2:]
events = []  # (time, rank, call, args, result)
for rank, path in enumerate(traces):
    pending = {}  # pid -> (time, call, first part of the arguments): a call another thread's call interrupted
    for line in open(path):
        line = line.rstrip()  # "PID TIME call(args) = result"; strace pads the pid to a width
        m = re.match(r"(\d+)\s+(\d+\.\d+) (\w+)\((.*) <unfinished \.\.\.>$", line)
        if m:
            pending[m[1]] = (m[2], m[3], m[4])
            continue
        m = re.match(r"(\d+)\s+\d+\.\d+ <\.\.\. (\w+) resumed>(.*)\) += (.*)$", line)
        if m and m[1] in pending:
            t, call, head = pending.pop(m[1])
            events.append((float(t), rank, call, head + m[3], m[4]))
            continue
        m = re.match(r"\d+\s+(\d+\.\d+) (\w+)\((.*)\) += (.*)$", line)
        if m:
            events.append((float(m[1]), rank, m[2], m[3], m[4]))
events.sort()
d = f"ck/{step}"
finals = [f"{d}/rank-00000.bin", f"{d}/rank-00001.bin", f"{d}/manifest.zckpt", "ck/latest"]
problems = []
def find(pred, after=-1.0):
    return next((e for e in events if e[0] > after and pred(e)), None)
done = {}
for f in finals:
    tmp = f + ".tmp"
    direct = [e for e in events if e[2] in ("openat", "open", "creat") and f'"{f}"' in e[3]
              and re.search(r"O_WRONLY|O_RDWR|O_CREAT", e[3])]
    if direct:
        problems.append(f"{f} was opened for writing under its own name")
    opened = find(lambda e: e[2] in ("openat", "open") and f'"{tmp}"' in e[3] and "O_CREAT" in e[3])
    renamed = find(lambda e: e[2].startswith("rename") and f'"{tmp}", "{f}"' in e[3] and e[4].startswith("0"))
    if not opened or not renamed:
        problems.append(f"{f}: not created as {tmp} and renamed")
        continue
    synced = find(lambda e: e[2] in ("fsync", "fdatasync") and tmp + ">" in e[3] and e[4].startswith("0"), opened[0])
    if not synced or synced[0] > renamed[0]:
        problems.append(f"{f}: no fsync of {tmp} before its rename")
    done[f] = (opened, renamed)
    print(f"{f}: rank {renamed[1]}: created as .tmp, fsync {'ok' if synced else 'MISSING'}, renamed at {renamed[0]:.6f}")
if len(done) == len(finals):
    m_open = done[f"{d}/manifest.zckpt"][0][0]
    for f in finals[:2]:
        if done[f][1][0] > m_open:
            problems.append(f"{f} renamed after the manifest was begun")
    m_ren = done[f"{d}/manifest.zckpt"][1][0]
    dsync = find(lambda e: e[2] == "fsync" and f"{d}>" in e[3] and "O_" not in e[3], m_ren)
    if not dsync or dsync[0] > done["ck/latest"][0][0]:
        problems.append(f"no fsync of the folder {d} between the manifest's rename and latest")
    rsync = find(lambda e: e[2] == "fsync" and e[3].endswith("/ck>"), done["ck/latest"][1][0])
    if not rsync:
        problems.append("no fsync of the checkpoint root after latest's rename")
    if done["ck/latest"][0][0] < m_ren:
        problems.append("latest was begun before the manifest's rename")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
PY
  echo "ok: every file of $(cat ck/latest) written as .tmp, fsynced and renamed, in order"
  # The checkpoint the traced run wrote loads.
  train p 2 --steps 3 --resume ck | grep resumed
  ;;
bf16)
  # --dtype bf16: bf16 parameters beside fp32 master parts and moments. The same plan resumes exactly; a
  # zero-3 plan (bf16 shards, fp32 masters) loads the zero-1 checkpoint within the tolerance of the bf16
  # training tests (its own reduction order differs).
  flags+=(--dtype bf16)
  resume_here_and_at 1 3 2e-2
  ;;
kill-random)
  # Saves after every step, each paused 10 ms per slice; a rank is killed at a random moment (a seeded
  # sequence), round after round. Every restart resumes from whatever `latest` names, which must always load;
  # the run that finally completes gives the straight run's losses from its checkpoint on. The rounds stop at
  # step 8 and the last run goes on to 10, so that the comparison always covers at least two steps, however
  # far the rounds got. A round's kill comes at a random moment (0-600 ms) after the round has saved a step of
  # its own, so that it lands in a step's compute or in its paused save rather than before the resume or after
  # the end; at least three rounds must have killed a running job, or the case has tested no recovery at all
  # (before, a round that outlived a delay counted from its start was "killed" after it had ended).
  compile p 1 1 2
  save_first 1 p 2
  RANDOM=20261130
  kills=0
  for round in 1 2 3 4 5 6 7 8; do
    from=$(cat ck/latest)
    [ "${from%%.*}" = step-00000008 ] && break
    ZRT_CHECKPOINT_PAUSE_MS=10 $mpirun -x ZRT_CHECKPOINT_PAUSE_MS -np 2 "$bin/zrun" p.zplan --train --data "$ids" \
      --timeout 120 --steps 8 --resume ck --save-dir ck --save-every 1 >"round$round.log" 2>&1 &
    job=$!
    for _ in $(seq 1 1200); do
      [ "$(cat ck/latest)" != "$from" ] && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.05
    done
    delay=$((RANDOM % 600))
    sleep "0.$(printf %03d "$delay")"
    victim=$(pgrep -P "$job" -f "zrun p.zplan" | sed -n "$((1 + RANDOM % 2))p" || true)
    killed=""
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null && killed=$victim
    set +e
    wait "$job"
    rc=$?
    set -e
    [ -n "$killed" ] && [ "$rc" -ne 0 ] && kills=$((kills + 1))
    echo "round $round: from $from, killed ${killed:-nothing} ${delay} ms after its first save (exit $rc);" \
      "$(grep -o 'resumed from [^:]*' "round$round.log" || echo '?'); latest is now $(cat ck/latest)"
    grep -q "error" "round$round.log" && grep "error" "round$round.log" | grep -v "MPI_ABORT\|mpirun" | head -3 || true
    if grep -q -- "--resume:" "round$round.log"; then echo "FAIL: latest did not load"; cat "round$round.log"; exit 1; fi
    # The round saved a step, so it resumed, and from what latest named when it started.
    if ! grep -q "zrun: resumed from ck/$from:" "round$round.log"; then
      echo "FAIL: round $round did not report resuming from ck/$from"; cat "round$round.log"; exit 1
    fi
  done
  echo "$kills rounds killed a running job"
  [ "$kills" -ge 3 ] || { echo "FAIL: only $kills rounds killed a running job (at least 3 are needed)"; exit 1; }
  at=$(sed 's/step-0*//; s/\..*//' ck/latest)
  train p 2 --steps 10 --resume ck --losses-out tail.npy | grep resumed
  "$python" - "$at" <<'PY'
import sys
import numpy as np
at = int(sys.argv[1])
ref, got = np.load("straight.npy")[at:], np.load("tail.npy")
assert got.shape == ref.shape, (got.shape, ref.shape)
assert got.size >= 2, f"FAIL: only {got.size} steps after the kills to compare (latest at step {at})"
rel = np.abs(got - ref) / np.abs(ref)
print(f"steps {at + 1}-10 after the kills: max relative difference {rel.max():.3g} from the straight run (tolerance 1e-6)")
sys.exit(0 if rel.max() <= 1e-6 else "FAIL: the losses after the kills differ")
PY
  ;;
*)
  echo "unknown mode $mode"
  exit 2
  ;;
esac
