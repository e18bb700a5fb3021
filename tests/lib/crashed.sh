# Sourced by the scripts whose command must fail cleanly (a refusal, a detected fault): a non-zero exit is not
# enough, since a crash after the right message is still a crash.
# crashed RC OUTPUT: succeeds, printing why, when a command that exited RC with OUTPUT ended on a signal (mpirun
# passes a rank's signal on as 128 + N, or says so in its report) or printed a crash report; fails otherwise.
crashed() {
  local rc=$1 output=$2 report
  if [ "$rc" -gt 128 ]; then echo "ended on signal $((rc - 128))"; return 0; fi
  report=$(grep -Eo "terminate called|Process received signal|exited on signal [0-9]*|Segmentation fault|Aborted" \
           <<<"$output" | head -n 1)
  [ -n "$report" ] || return 1
  echo "crashed ($report)"
}
