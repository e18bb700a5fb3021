#!/usr/bin/env python3
"""The PyTorch peers of bench/gpu/run.sh: Hugging Face models built from config with random weights, batch 8,
sequence 1024, bf16 inference (model cast to bf16, no KV cache, one forward), in eager mode and under
torch.compile. Median of 6 timed forwards after 2 warm-ups, timed with CUDA events (configs and method as in
../shared/BASELINES.md). Prints one JSON object per line and writes them all to --json.

TFLOP/s counts (6 N + 12 L d s) / 3 = 2 N + 4 L d s FLOP per token (N parameters, L layers, d width,
s sequence), the convention BASELINES.md uses.

--tp-peers (under `torchrun --nproc-per-node 2`): the 2-GPU peers of zplan's tp 2 and ZeRO-3 rows, llama-1b,
global batch 8: DTensor tensor parallel (q/k/v/gate/up colwise, o/down rowwise, the whole batch on both
ranks) and FSDP2 (fully_shard per decoder layer and the root, 4 samples per rank), each eager and under
torch.compile; median of 10 timed forwards after 3 warm-ups; rank 0 prints the JSON lines.
"""
import argparse
import json
import statistics
import sys
import time

import torch

CONFIGS = {
    "gpt2-350m": ("gpt2", dict(n_layer=24, n_embd=1024, n_head=16, n_positions=1024)),
    # tests/models/bench/gpt2-1.3b's config (tests/models/export_bench_graph.py).
    "gpt2-1.3b": ("gpt2", dict(n_layer=24, n_embd=2048, n_head=16, n_positions=1024)),
    "llama-1b": ("llama", dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                               num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=2048)),
    "llama2-7b": ("llama", dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096)),
}


def build(name, device=None):
    """The model with random weights; with `device` ("cuda"), built there in bf16, so that llama2-7b's 6.7 B
    parameters are initialised on the GPU in seconds instead of on the host in minutes."""
    import transformers as tf
    kind, cfg = CONFIGS[name]
    old = torch.get_default_dtype()
    if device is not None:
        torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device or "cpu"):
            if kind == "gpt2":
                c = tf.GPT2Config(**cfg)
                m = tf.GPT2LMHeadModel(c)
                layers, width, vocab = c.n_layer, c.n_embd, c.vocab_size
            else:
                c = tf.LlamaConfig(**cfg)
                m = tf.LlamaForCausalLM(c)
                layers, width, vocab = c.num_hidden_layers, c.hidden_size, c.vocab_size
    finally:
        torch.set_default_dtype(old)
    return m, layers, width, vocab


def kernel_table(fn, ids, top=25):
    """Where one forward's GPU time goes: torch.profiler's CUDA kernels, summed by name, largest first."""
    from torch.profiler import ProfilerActivity, profile
    fn(ids)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn(ids)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = getattr(e, "cuda_time_total", 0)
        if t > 0:
            rows.append((t / 3 / 1e3, e.count // 3, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    return total, rows[:top]


def h2d_rate(gib=2):
    """Pinned host -> device copy rate (bytes/s): the PCIe floor of --offload-param cpu."""
    n = gib << 30
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    h.fill_(1)
    d = torch.empty(n, dtype=torch.uint8, device="cuda")
    times = []
    for i in range(6):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        d.copy_(h, non_blocking=True)
        b.record()
        b.synchronize()
        if i:
            times.append(a.elapsed_time(b))
    ms = statistics.median(times)
    return n / (ms / 1e3), ms


def flop_per_token(params, layers, width, seq):
    return 2.0 * params + 4.0 * layers * width * seq


def time_forward(fn, ids, warm=2, reps=6):
    for _ in range(warm):
        fn(ids)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(ids)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def tp_peers(a):
    """DTensor tensor parallel and FSDP2 over the torchrun group (see the module docstring)."""
    import os
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.distributed.fsdp import fully_shard
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    mesh = init_device_mesh("cuda", (world,))
    out = []
    for kind in ("dtensor-tp", "fsdp2"):
        for mode in a.modes:
            torch.manual_seed(0)
            model, layers, width, vocab = build("llama-1b")
            params = sum(p.numel() for p in model.parameters())
            model = model.to(device="cuda", dtype=torch.bfloat16).eval()
            if kind == "dtensor-tp":
                plan = {}
                for i in range(layers):
                    pre = f"model.layers.{i}."
                    for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
                        plan[pre + n] = ColwiseParallel()
                    for n in ("self_attn.o_proj", "mlp.down_proj"):
                        plan[pre + n] = RowwiseParallel()
                # The attention's reshapes take the head count from the local tensors (view(..., -1, head_dim)).
                parallelize_module(model, mesh, plan)
                batch = a.batch
            else:
                for layer in model.model.layers:
                    fully_shard(layer, mesh=mesh)
                fully_shard(model, mesh=mesh)
                batch = a.batch // world
            g = torch.Generator(device="cuda").manual_seed(1 + (rank if kind == "fsdp2" else 0))
            ids = torch.randint(0, vocab, (batch, a.seq), device="cuda", generator=g)
            fwd = model if mode == "eager" else torch.compile(model)

            @torch.inference_mode()
            def step(x, f=fwd):
                return f(input_ids=x, use_cache=False).logits

            t0 = time.time()
            step(ids)
            torch.cuda.synchronize()
            warm_s = time.time() - t0
            ms = time_forward(step, ids, warm=3, reps=10)
            tok = a.batch * a.seq / (ms / 1e3)
            r = dict(model="llama-1b", impl=f"torch-{kind}-{mode}", gpus=world, ms=ms, tokens_per_s=tok,
                     peak_gib=torch.cuda.max_memory_allocated() / 2**30, first_call_s=warm_s)
            if rank == 0:
                print(json.dumps(r), flush=True)
            out.append(r)
            del fwd, model
            torch.cuda.empty_cache()
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    dist.destroy_process_group()
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=list(CONFIGS))
    ap.add_argument("--modes", nargs="+", default=["eager", "compile"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--json", default=None)
    ap.add_argument("--tp-peers", action="store_true")
    ap.add_argument("--batch-of", nargs="*", default=[], metavar="MODEL=B",
                    help="another batch for one model (llama2-7b=4: issue 12's one-GPU row)")
    ap.add_argument("--profile", action="store_true",
                    help="also print each model's CUDA kernels under each mode (torch.profiler), largest first")
    ap.add_argument("--h2d", action="store_true", help="first measure the pinned host-to-device copy rate")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_baseline: no CUDA device", file=sys.stderr)
        return 77
    if a.tp_peers:
        return tp_peers(a)
    out = []
    if a.h2d:
        rate, ms = h2d_rate()
        r = dict(impl="h2d-pinned", bytes_per_s=rate, ms_2gib=ms)
        print(json.dumps(r), flush=True)
        out.append(r)
    batches = dict(kv.split("=") for kv in a.batch_of)
    torch.manual_seed(0)
    for name in a.models:
        model, layers, width, vocab = build(name, device="cuda")
        params = sum(p.numel() for p in model.parameters())
        model = model.to(device="cuda", dtype=torch.bfloat16).eval()
        batch = int(batches.get(name, a.batch))
        ids = torch.randint(0, vocab, (batch, a.seq), device="cuda")
        for mode in a.modes:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            fwd = model if mode == "eager" else torch.compile(model)

            @torch.inference_mode()
            def step(x, f=fwd):
                return f(input_ids=x, use_cache=False).logits

            t0 = time.time()
            step(ids)  # compile (or first-call) cost, outside the timed region
            torch.cuda.synchronize()
            warm_s = time.time() - t0
            ms = time_forward(step, ids)
            tok = batch * a.seq / (ms / 1e3)
            tflops = tok * flop_per_token(params, layers, width, a.seq) / 1e12
            r = dict(model=name, impl="torch-" + mode, batch=batch, ms=ms, tokens_per_s=tok, tflops=tflops,
                     peak_gib=torch.cuda.max_memory_allocated() / 2**30,
                     reserved_gib=torch.cuda.max_memory_reserved() / 2**30, params=params, layers=layers,
                     width=width, first_call_s=warm_s)
            print(json.dumps(r), flush=True)
            out.append(r)
            if a.profile:
                total, rows = kernel_table(step, ids)
                print(f"== kernels {name} torch-{mode}: {total:.3f} ms of GPU time per forward", flush=True)
                for t, n, k in rows:
                    print(f"   {t:8.3f} ms {n:5d}x  {k[:110]}", flush=True)
            del fwd
        del model
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
