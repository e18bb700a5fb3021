# What the end-to-end scripts share (run_model.sh, run_generate.sh, run_train.sh, run_train_overflow.sh,
# run_schedule.sh, run_nvme.sh and the others beside them): source it after reading the positional arguments.
# Sourcing only sets variables and defines functions:
#   src     the repository root
#   python  the Python with the test packages (ZPLAN_PYTHON, which CMake sets; python3 otherwise)
# shellcheck shell=bash
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${ZPLAN_PYTHON:-python3}

# flag_value FLAG DEFAULT ZPLAN_FLAGS...: prints the word after the last FLAG in ZPLAN_FLAGS (the one zplan
# takes), or DEFAULT when FLAG is not there.
flag_value() {
  local flag=$1 value=$2 prev="" a
  shift 2
  for a in "$@"; do
    if [ "$prev" = "$flag" ]; then value=$a; fi
    prev=$a
  done
  echo "$value"
}

# train_flags MODEL: the flags every training compile of the shared model MODEL (gpt2, llama, ...) needs. The
# gpt2 export dropped the zero-initialised Conv1D biases that PyTorch trains (see compiler/autodiff):
# --restore-zero-biases gives them back.
train_flags() {
  if [ "$1" = gpt2 ]; then echo --restore-zero-biases; fi
}

# check_plan PLAN [ARGS...]: the plan checker (tests/lit/plan/check_plan.py) on PLAN against the runtime's
# schema.
check_plan() {
  "$python" "$src/tests/lit/plan/check_plan.py" "$1" --schema "$src/runtime/schema/plan.fbs" "${@:2}"
}
