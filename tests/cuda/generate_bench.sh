#!/usr/bin/env bash
# Generation on the GPU machine (issue 14), in one device call on nvidia-h200:
#   build zrun (compiler off) -> the sampler's GPU test (ids equal to the CPU reference) -> the device copy rate
#   -> llama-1b bf16, prompt 512, 256 new tokens, batch 1, 8, 64: zrun --generate's time to first token and
#   decode tokens/s -> Hugging Face generate on the same architecture (random weights, bf16), eager and
#   static cache + torch.compile, timed the same way -> one table with the batch-1 memory-bandwidth floor.
#
#   bash tests/cuda/generate_bench.sh [--batches "1 8 64"] [--modes "zrun eager compile"] [--no-test] [--model llama-1b]
#                                     [--profile] [--kernels] [--ab] [--ab-vars "V..."] [--ab-late "V..."]
# --kernels: one decode step's kernels at batch 1 under Nsight Compute (ncu, each kernel's own duration, graphs
# off), as a per-kernel table, after the peers. --ab: batch 1 again with the programmatic launches off
# (ZK_PDL=0) and with cuBLASLt for every product (ZK_SKINNY=0), after the peers. --ab-vars: zrun again with
# each setting (VAR=VALUE, several joined by commas; a setting may end in @B1+B2 for the batches to run it at,
# default 1) before the peers, --ab-late after them; each run's tokens are compared with the first run's at
# that batch and its decode tokens/s joins the table's rows (config = the setting).
# --modes picks the rows (zrun; Hugging Face eager; Hugging Face static cache + torch.compile), so that a call
# that would outlast the 10-minute limit can be split in two (the table joins what each call measured only
# within one call: run the modes to compare in the same call).
#
# Plans come from tests/cuda/make_generate_plans.sh (run on the compiling machine, into .gpu-gen); FlatBuffers,
# CLI11 and GoogleTest from .gpu-deps (scripts/gpu-deps.sh). Logs travel back as $OUT/gen-logs.tgz, the table
# as $OUT/generate.json and on stdout.
#
# Timing. zrun: the figures zrun --generate prints (its own clock around prefill and the decode loop, after
# the plan is loaded). Hugging Face: one generate() per setting after warm-up runs, with a streamer that
# synchronises the device and stamps the time at each new token (generate already synchronises every step to
# test its stopping criteria, so the stamps add no stall): time to first token = first stamp - call start,
# decode tokens/s = batch * 255 / (last stamp - first stamp). min_new_tokens = 256 so that no run stops early.
#
# The floor at batch 1: every decode step reads every weight but the embedding table (one row) and the whole
# KV cache written so far. bytes/step = weight bytes + 2 (K, V) * layers * kv_heads * head_dim * 2 B * the mean
# cache length over the 255 decode steps (512 + 128); floor = bytes / copy rate, the copy rate being what a
# 1 GiB device-to-device cudaMemcpy moves (bytes read + bytes written, per second). The report gives
# floor / measured step time (the issue's bar: >= 0.6).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
batches="1 8 64" modes="zrun eager compile" test=1 model=llama-1b profile=0 kernels=0 ab=0 ab_vars="" ab_late=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --batches) batches=$2; shift ;;
    --modes) modes=$2; shift ;;
    --no-test) test=0 ;;
    --model) model=$2; shift ;;
    --profile) profile=1 ;;
    --kernels) kernels=1 ;;
    --ab) ab=1 ;;
    --ab-vars) ab_vars=$2; shift ;;
    --ab-late) ab_late=$2; shift ;;
    *) echo "generate_bench: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
budget=${ZPLAN_CALL_BUDGET_S:-580}
left() { [[ $SECONDS -lt $1 ]]; }
step_width=18
logs_to /tmp/zplan-gen gen-logs.tgz generate.json
cd "$top"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader
gpu_env
[[ " $modes " != *" zrun "* || -d .gpu-gen ]] || { echo "generate_bench: .gpu-gen missing (run tests/cuda/make_generate_plans.sh and carry .gpu-gen)"; exit 1; }
targets=(zrun)
[[ $test == 1 ]] && targets+=(zplan_cuda_sample_test zplan_cuda_generate_kernels_test zplan_cuda_kernels_test)
gpu_build "${targets[@]}"
if [[ $test == 1 ]]; then
  step sample_test "$b/bin/zplan_cuda_sample_test"
  grep -E "^\[  (PASSED|FAILED) |Failure|row " "$out/sample_test.log" | head -20
  step generate_kernels "$b/bin/zplan_cuda_generate_kernels_test"
  grep -E "^\[  (PASSED|FAILED) |Failure|error|decode attention|splits|few-row|^skinny" "$out/generate_kernels.log" | head -60
  step kernels_test "$b/bin/zplan_cuda_kernels_test"
  grep -E "^\[  (PASSED|FAILED) |Failure" "$out/kernels_test.log" | head -20
fi

# The device copy rate and the model's byte counts (weights without the embedding table; K/V bytes per cached
# token), from the Hugging Face model of the same configuration.
step copy_rate python3 - "$out/rate.json" "$model" <<'PY'
import json, sys, torch
sys.path.insert(0, "bench/gpu")
from torch_baseline import CONFIGS
path, name = sys.argv[1], sys.argv[2]
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda")
c = torch.empty_like(a)
for _ in range(3):
    c.copy_(a)
torch.cuda.synchronize()
times = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); c.copy_(a); e.record(); e.synchronize()
    times.append(s.elapsed_time(e) / 1e3)
times.sort()
t = times[len(times) // 2]
kind, cfg = CONFIGS[name]
L, d, h = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
kv = cfg.get("num_key_value_heads", h)
V, f = cfg["vocab_size"], cfg["intermediate_size"]
hd = d // h
per_layer = d * (h * hd) + 2 * d * (kv * hd) + (h * hd) * d + 3 * d * f + 2 * d
weights = L * per_layer + d + V * d  # layers, final norm, lm_head (untied); the embedding table is not read whole
r = dict(copy_GBps=2 * n / t / 1e9, copy_bytes=n, weight_bytes=2 * weights, kv_bytes_per_token=2 * L * kv * hd * 2,
         layers=L, kv_heads=kv, head_dim=hd, vocab=V)
json.dump(r, open(path, "w"))
print(json.dumps(r))
PY
cat "$out/copy_rate.log"

# Prompts: [B, 512] ids uniform in the vocabulary, the same for zrun and Hugging Face.
python3 - "$out" "$batches" <<'PY'
import sys, numpy as np
out, batches = sys.argv[1], [int(x) for x in sys.argv[2].split()]
rng = np.random.default_rng(0)
for b in batches:
    np.save(f"{out}/prompt-b{b}.npy", rng.integers(3, 32000, size=(b, 512), dtype=np.int64))
PY

# zrun --generate, one process per batch size.
: > "$out/zrun.jsonl"
for bs in $batches; do
  [[ " $modes " == *" zrun "* ]] || break
  plan=.gpu-gen/$model-b$bs.zplan
  [[ -f $plan ]] || { echo "zrun b$bs: $plan missing"; continue; }
  left $((budget - 60)) || { echo "zrun b$bs: skipped (call budget)"; continue; }
  # ZRT_CUDA_REPORT: the decode graph's node count (the few-row kernel choice is the plan's, plan 2.9).
  # Should a run fail, it is repeated without the programmatic launches, then also without the few-row
  # products (the row says which).
  config=default
  for cfg in default "ZK_PDL=0" "ZK_PDL=0 ZK_SKINNY=0"; do
    vars=()
    [[ $cfg == default ]] || read -ra vars <<< "$cfg"
    config=$cfg
    step zrun-b$bs env ZRT_CUDA_REPORT=1 "${vars[@]}" timeout 240 "$b/bin/zrun" "$plan" \
      --backend cuda --init random --generate --warmup 1 --prompt "$out/prompt-b$bs.npy" --max-new-tokens 256 \
      --tokens-out "$out/tokens-b$bs.npy" && break
    echo "zrun b$bs ($cfg) failed:"; tail -5 "$out/zrun-b$bs.log"
    cp -f "$out/zrun-b$bs.log" "$out/zrun-b$bs-failed-${cfg// /_}.log"
    left $((budget - 60)) || break
  done
  grep -iE "first token|tokens/s|error|captured program 1|few-row kernel|cuBLASLt" "$out/zrun-b$bs.log" | sort | uniq -c | head -24
  python3 - "$out/zrun-b$bs.log" "$bs" "$out/tokens-b$bs.npy" "$config" >> "$out/zrun.jsonl" <<'PY'
import json, re, sys, os
log, bs, tok = sys.argv[1], int(sys.argv[2]), sys.argv[3]
text = open(log).read()
def grab(pat):
    m = re.search(pat, text, re.I)
    return float(m.group(1)) if m else None
# "zrun: time to first token T ms (or s), prefill X tokens/s, decode Y tokens/s"
m = re.search(r"time to first token ([0-9.]+) (ms|s)\b", text)
r = dict(impl="zrun", batch=bs, config=sys.argv[4],
         ttft_ms=(float(m.group(1)) * (1.0 if m.group(2) == "ms" else 1e3)) if m else None,
         prefill_tok_s=grab(r"prefill[^\n]*?([0-9.]+)\s*tokens/s"),
         decode_tok_s=grab(r"decode[^\n]*?([0-9.]+)\s*tokens/s"))
if os.path.exists(tok):
    import numpy as np
    t = np.load(tok)
    r["tokens_shape"] = list(t.shape)
print(json.dumps(r))
PY
done
cat "$out/zrun.jsonl"
# --ab: batch 1 with the programmatic launches off (the same kernels in the same order: its tokens must equal
# the first run's, a check that no early-launched kernel read its input too soon; before the peers) and with
# cuBLASLt for every product (after the peers).
ab_run() {
  local v=$1
  [[ $ab == 1 && " $modes " == *" zrun "* ]] || return 0
  left $((budget - 60)) || { echo "ab $v: skipped (call budget)"; return 0; }
  step "ab-$v" env "$v" timeout 100 "$b/bin/zrun" .gpu-gen/$model-b1.zplan --backend cuda --init random --generate \
    --warmup 1 --prompt "$out/prompt-b1.npy" --max-new-tokens 256 --tokens-out "$out/tokens-ab-$v.npy"
  echo "b1 with $v: $(grep -E 'tokens/s' "$out/ab-$v.log")"
  python3 -c "
import numpy as np
a, b = np.load('$out/tokens-b1.npy'), np.load('$out/tokens-ab-$v.npy')
print('b1 tokens with $v equal to the first run:', bool((a == b).all()), '(differing new tokens: %d of %d)' % (int((a != b).sum()), a.shape[1] - 512))
" 2>&1 | tail -1
}
ab_run ZK_PDL=0
# --ab-vars / --ab-late: SETTING[@B1+B2] at each of its batches, tokens against the first run's at that batch.
ab_set() {
  local spec=$1 v bs_list bs
  v=${spec%@*}
  bs_list=1
  [[ $spec == *@* ]] && bs_list=${spec#*@}
  for bs in ${bs_list//+/ }; do
    [[ -f $out/tokens-b$bs.npy ]] || { echo "ab $v b$bs: no first run"; continue; }
    left $((budget - 50)) || { echo "ab $v b$bs: skipped (call budget)"; continue; }
    local name="abv-b$bs-${v//[,=]/_}"
    step "$name" env ${v//,/ } timeout 100 "$b/bin/zrun" .gpu-gen/$model-b$bs.zplan --backend cuda --init random \
      --generate --warmup 1 --prompt "$out/prompt-b$bs.npy" --max-new-tokens 256 --tokens-out "$out/tok-$name.npy"
    echo "b$bs with $v: $(grep -E 'tokens/s' "$out/$name.log")"
    python3 - "$out/$name.log" "$bs" "$v" "$out/tokens-b$bs.npy" "$out/tok-$name.npy" >> "$out/zrun.jsonl" <<'PY'
import json, re, sys, os
import numpy as np
log, bs, v, first, mine = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
text = open(log).read()
m = re.search(r"time to first token ([0-9.]+) (ms|s)\b", text)
d = re.search(r"decode[^\n]*?([0-9.]+)\s*tokens/s", text)
r = dict(impl="zrun", batch=bs, config=v, ttft_ms=(float(m.group(1)) * (1.0 if m.group(2) == "ms" else 1e3)) if m else None,
         decode_tok_s=float(d.group(1)) if d else None)
if os.path.exists(mine):
    a, b = np.load(first), np.load(mine)
    r["tokens_equal_first_run"] = bool((a == b).all())
    r["tokens_differing"] = int((a != b).sum())
print(json.dumps(r))
print(f"ab {v} b{bs}: {json.dumps(r)}", file=sys.stderr)
PY
  done
}
for spec in $ab_vars; do ab_set "$spec"; done

# Hugging Face generate, eager then static cache + torch.compile, in this call.
: > "$out/hf.jsonl"
hf_modes=$(for m in $modes; do [[ $m == eager || $m == compile ]] && echo $m; done)
if [[ -n $hf_modes ]]; then
  # One process per mode (the model is built once), every batch size in it; each batch's line is printed as
  # soon as it is measured, so that a budget cut keeps the batches done.
  for mode in $hf_modes; do
    left $((budget - 40)) || { echo "hf $mode: skipped (call budget)"; continue; }
    step hf-$mode env PYTHONUNBUFFERED=1 timeout $((budget - SECONDS - 20)) python3 - "$model" "$mode" "$out" \
      $batches <<'PY'
import json, sys, time
import numpy as np, torch
sys.path.insert(0, "bench/gpu")
from torch_baseline import build
name, mode, out, batches = sys.argv[1], sys.argv[2], sys.argv[3], [int(b) for b in sys.argv[4:]]
NEW = 256
torch.manual_seed(0)
model, layers, width, vocab = build(name)
model = model.to("cuda", torch.bfloat16).eval()
if mode == "compile":
    # Hugging Face's recipe for a compiled generate (transformers 5): a static cache, and generate compiles the
    # decoding step itself (torch.compile, mode reduce-overhead: CUDA graphs) while the prefill runs eager.
    # Compiling model.forward by hand instead fails there: the static cache is allocated lazily inside the
    # first compiled call and the CUDA graph trees then overwrite it ("accessing tensor output of CUDAGraphs
    # that has been overwritten by a subsequent run").
    model.generation_config.cache_implementation = "static"
    try:
        from transformers import CompileConfig
        model.generation_config.compile_config = CompileConfig(fullgraph=True, mode="reduce-overhead")
    except ImportError:
        pass

class Stamps:
    """generate()'s streamer: put() gets the prompt first, then each step's tokens."""
    def __init__(self):
        self.t = []
    def put(self, value):
        torch.cuda.synchronize()
        self.t.append(time.perf_counter())
    def end(self):
        pass

def once(ids, bs):
    s = Stamps()
    mask = torch.ones_like(ids)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        o = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                           pad_token_id=0, streamer=s)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    assert o.shape == (bs, 512 + NEW), o.shape
    first, last = s.t[1], s.t[-1]
    return dict(ttft_ms=(first - t0) * 1e3, decode_tok_s=bs * (NEW - 1) / (last - first), total_s=t1 - t0)

for bs in batches:
    ids = torch.from_numpy(np.load(f"{out}/prompt-b{bs}.npy")).cuda()
    t0 = time.perf_counter()
    once(ids, bs)  # compiles (compile mode) and warms the allocator
    warm_s = time.perf_counter() - t0
    if mode == "compile":
        once(ids, bs)  # the CUDA graphs are recorded on the second run
    r = once(ids, bs)
    r.update(impl=f"hf-{mode}", batch=bs, warmup_s=round(warm_s, 1))
    if mode == "compile":
        # Evidence that the step was compiled: the graphs dynamo produced so far.
        from torch._dynamo.utils import counters
        r["compiled_graphs"] = int(counters["stats"]["unique_graphs"])
    print(json.dumps(r), flush=True)
PY
    grep '^{' "$out/hf-$mode.log" >> "$out/hf.jsonl" || tail -5 "$out/hf-$mode.log"
  done
  cat "$out/hf.jsonl"
fi

# --profile: where a decode step's time goes, per op (CUDA graphs off, which ZRT_CUDA_PROFILE needs; 32 new
# tokens), at each batch size (or those in $profile_batches).
for bs in ${profile_batches:-$batches}; do
  [[ $profile == 1 ]] || break
  left $((budget - 90)) || { echo "profile b$bs: skipped (call budget)"; continue; }
  step profile-b$bs env ZRT_CUDA_GRAPH=0 ZRT_CUDA_PROFILE=1 ZRT_CUDA_PROFILE_TOP=14 timeout 120 "$b/bin/zrun" \
    .gpu-gen/$model-b$bs.zplan --backend cuda --init random --generate --prompt "$out/prompt-b$bs.npy" \
    --max-new-tokens 32
  grep -E "zrt cuda: profile|decode" "$out/profile-b$bs.log" | head -20
done

ab_run ZK_SKINNY=0
for spec in $ab_late; do ab_set "$spec"; done

# --kernels: one decode step's kernels at batch 1 under Nsight Compute (graphs off: a kernel per launch; each
# kernel's own duration and DRAM bytes read, the L2 flushed before each, so the sum is the step's GPU busy time
# and the rest of the measured step is gaps). Two new tokens: the prefill, then two decode steps; the table is
# the kernels between the last two samples, in launch order and by kernel. A second pass profiles that step's
# kernels alone (--launch-skip) with the sections that say why a kernel waits (warp states, occupancy, launch,
# memory), into $OUT/ncu-step.csv.
if [[ $kernels == 1 ]] && left $((budget - 60)); then
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
  if [[ -n $ncu_bin ]]; then
    ncu_zrun=("$b/bin/zrun" .gpu-gen/$model-b1.zplan --backend cuda --init random --generate
              --prompt "$out/prompt-b1.npy" --max-new-tokens 2)
    step ncu-b1 env ZRT_CUDA_GRAPH=0 timeout $((budget - SECONDS - 15)) "$ncu_bin" --clock-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw --print-units base \
      --log-file "$out/ncu-b1.txt" "${ncu_zrun[@]}"
    python3 - "$out/ncu-b1.txt" "$out/kernels-b1.txt" "$out/ncu-skip.txt" <<'PY'
import csv, io, re, sys
text = open(sys.argv[1]).read()
start = text.find('"ID"')
rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
def num(r, k):
    v = (r.get(k) or "").replace(",", "")
    try:
        return float(v)
    except ValueError:
        return None
rows = [r for r in rows if num(r, "gpu__time_duration.sum") is not None and r.get("Kernel Name")]
def short(n):
    # "void zk::cuda::(anonymous namespace)::skinny_kn_kernel<__nv_bfloat16, 1, true>(const T1 *, ...)"
    # ncu's form: "void zk::<unnamed>::norm_packed_kernel<__nv_bfloat16, 1, 0, 1>(const T1 *, ...)"
    for a in ("(anonymous namespace)::", "{anonymous}::", "<unnamed>::"):
        n = n.replace(a, "")
    n = re.split(r"[<(]", n, maxsplit=1)[0].strip()
    return n.split("::")[-1].split(" ")[-1][:48]
names = [short(r["Kernel Name"]) for r in rows]
marks = [i for i, n in enumerate(names) if n == "sample_kernel"]
out = []
if len(marks) >= 2:
    first = marks[-2] + 1
    step = rows[first: marks[-1] + 1]
    open(sys.argv[3], "w").write(f"{first} {len(step)}\n")
    agg = {}
    out.append(f"{'#':>3} {'kernel':<40} {'grid':>12} {'us':>7} {'MB read':>8} {'GB/s':>6}")
    for i, r in enumerate(step):
        n = short(r["Kernel Name"])
        t = num(r, "gpu__time_duration.sum") / 1e3  # ns -> us
        by = num(r, "dram__bytes_read.sum") or 0.0
        c, s, bb = agg.get(n, (0, 0.0, 0.0))
        agg[n] = (c + 1, s + t, bb + by)
        grid = (r.get("Grid Size") or "").replace(" ", "")
        out.append(f"{i:>3} {n:<40} {grid:>12} {t:>7.2f} {by / 1e6:>8.2f} {by / t / 1e3:>6.0f}")
    total = sum(s for _, s, _ in agg.values())
    tb = sum(b for _, _, b in agg.values())
    out.insert(0, f"one decode step at batch 1: {len(step)} kernels, {total:.1f} us of kernel time, "
                  f"{tb / 1e6:.1f} MB read from DRAM ({tb / total / 1e3:.0f} GB/s over the kernel time)")
    out.append(f"{'kernel':<40} {'count':>5} {'total us':>9} {'mean us':>8} {'share':>6} {'GB/s':>6}")
    for n, (c, s, bb) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        out.append(f"{n:<40} {c:>5} {s:>9.1f} {s / c:>8.2f} {100 * s / total:>5.1f}% {bb / s / 1e3:>6.0f}")
else:
    out.append(f"ncu: {len(rows)} kernels read, fewer than two sample kernels: no decode step found")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out[:12]))
PY
    cp -f "$out/kernels-b1.txt" "$OUT/" 2>/dev/null
    if [[ -s $out/ncu-skip.txt ]] && left $((budget - 60)); then
      read -r skip count < "$out/ncu-skip.txt"
      step ncu-step env ZRT_CUDA_GRAPH=0 timeout $((budget - SECONDS - 15)) "$ncu_bin" --clock-control none \
        --launch-skip "$skip" --launch-count "$count" --section SpeedOfLight --section WarpStateStats \
        --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --csv --page details \
        --print-units base --log-file "$out/ncu-step.csv" "${ncu_zrun[@]}"
      cp -f "$out/ncu-step.csv" "$OUT/" 2>/dev/null
    fi
  else
    echo "kernels: ncu not found"
  fi
fi

# The table: zrun next to Hugging Face per batch, the ratios the issue sets bars on, the batch-1 floor.
python3 - "$out" "$batches" <<'PY'
import json, sys
out, batches = sys.argv[1], [int(x) for x in sys.argv[2].split()]
rows = [json.loads(l) for f in ("zrun.jsonl", "hf.jsonl") for l in open(f"{out}/{f}") if l.startswith("{")]
rate = json.load(open(f"{out}/rate.json"))
by = {}
for r in rows:
    by.setdefault((r["impl"], r["batch"]), r)  # the first run of each batch (default settings) is the row
variants = [r for r in rows if r["impl"] == "zrun" and r is not by.get(("zrun", r["batch"]))]
kv_mean = rate["kv_bytes_per_token"] * (512 + 128)
table = []
print(f"copy rate {rate['copy_GBps']:.0f} GB/s (read + write); weights read per step {rate['weight_bytes'] / 1e9:.3f} GB;"
      f" K/V per cached token {rate['kv_bytes_per_token']} B")
print(f"{'batch':>5} {'impl':>12} {'TTFT ms':>9} {'decode tok/s':>13} {'vs eager':>9} {'vs compile':>10} {'floor tok/s':>12} {'floor/meas':>10}")
for b in batches:
    floor_s = (rate["weight_bytes"] + b * kv_mean) / (rate["copy_GBps"] * 1e9)
    for impl in ("zrun", "hf-eager", "hf-compile"):
        r = by.get((impl, b))
        if not r:
            continue
        d = r.get("decode_tok_s")
        e, c = by.get(("hf-eager", b), {}).get("decode_tok_s"), by.get(("hf-compile", b), {}).get("decode_tok_s")
        row = dict(r, floor_tok_s=b / floor_s, floor_step_ms=floor_s * 1e3)
        if d:
            row["floor_over_measured"] = floor_s * d / b  # floor step time / measured step time
            if e: row["x_eager"] = d / e
            if c: row["x_compile"] = d / c
        table.append(row)
        f = lambda k, fmt: (fmt % row[k]) if row.get(k) is not None else "-"
        print(f"{b:>5} {impl:>12} {f('ttft_ms', '%.1f'):>9} {f('decode_tok_s', '%.1f'):>13} {f('x_eager', '%.2fx'):>9}"
              f" {f('x_compile', '%.2fx'):>10} {f('floor_tok_s', '%.0f'):>12} {f('floor_over_measured', '%.2f'):>10}")
for r in variants:
    b = r["batch"]
    floor_s = (rate["weight_bytes"] + b * kv_mean) / (rate["copy_GBps"] * 1e9)
    d = r.get("decode_tok_s")
    r["floor_over_measured"] = floor_s * d / b if d else None
    c = by.get(("hf-compile", b), {}).get("decode_tok_s")
    if d and c: r["x_compile"] = d / c
    fm = r["floor_over_measured"]
    xc = r.get("x_compile")
    print(f"{b:>5} {'zrun ' + r['config']:>40} decode {d if d else '-':>10} tok/s, floor/meas "
          f"{'%.3f' % fm if fm else '-'}, vs compile {'%.2fx' % xc if xc else '-'}, "
          f"tokens equal to the first run: {r.get('tokens_equal_first_run')} ({r.get('tokens_differing')} differ)")
json.dump(dict(rate=rate, rows=table, variants=variants), open(f"{out}/generate.json", "w"), indent=1)
PY
printf '%s\n' "${summary[@]}"
