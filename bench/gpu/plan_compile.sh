# Sourced (not run) by bench/gpu/make_{plans,fwd_plans,memory_plans,attention_plans}.sh: the one way they compile a plan,
# so that every plan a GPU call carries is compiled with the same target and fails the same way.
#   plans_init ZPLAN OUTDIR [FLAGS...]   zplan, out (created), top (the repository root), bm (the bench
#                                        models) and extra (FLAGS, added to every plan)
#   c NAME ARGS...                       compiles ARGS with --target cuda into OUTDIR/NAME; on failure prints
#                                        zplan's messages and stops the script
#   test_model_plans                     the test models (tests/models: gpt2, llama, bert; batch 2, seq 16) in
#                                        fp32 and bf16 at tp 1, named MODEL-DTYPE.zplan, the correctness plans
#                                        tests/cuda/check_models.sh reads
#   plans_done NAME                      removes the logs and prints how many files and bytes OUTDIR holds
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bm=$top/tests/models/bench

plans_init() {
  zplan=$1 out=$2
  shift 2
  extra=("$@")
  mkdir -p "$out"
}

c() {
  local o=$1
  shift
  "$zplan" "$@" --target cuda "${extra[@]}" -o "$out/$o" 2> "$out/$o.log" || { cat "$out/$o.log"; exit 1; }
}

test_model_plans() {
  local model dt
  for model in gpt2 llama bert; do
    for dt in fp32 bf16; do
      c $model-$dt.zplan "$top/tests/models/$model/model.onnx" --batch 2 --seq 16 --dtype $dt --tp 1
    done
  done
}

plans_done() {
  rm -f "$out"/*.zplan.log
  ls -la "$out" | awk '{s += $5} END {print "'"$1"': " NR - 3 " files, " s " bytes in '"$out"'"}'
}
