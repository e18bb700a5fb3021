#!/usr/bin/env python3
"""The PyTorch training peers for the zplan training benchmark, run in the same device call as zrun.

One GPU (python3 bench/gpu/torch_train.py --models gpt2-350m llama-1b --modes eager compile):
    Hugging Face model from the config in ../shared/BASELINES.md, random weights, fp32 parameters, bf16
    autocast, fused AdamW (lr 1e-4, weight decay 0.01), gradient clipping at 1.0, batch 8 x seq 1024 of random
    token ids, loss = the model's causal-LM loss (labels = input ids).
Two GPUs (torchrun --nproc-per-node 2 bench/gpu/torch_train.py --dist ddp fsdp2 ...): the same step with a
    global batch of 8 (4 samples per rank), DDP with autocast, and FSDP2 (fully_shard per layer, bf16
    parameters, fp32 reduction).
Timing: CUDA events around each step, median of --steps after --warmup steps. Memory: the allocator's peak
(max_memory_allocated) and the process's device use at the end (cudaMemGetInfo total - free, which includes
the CUDA context and the allocator's cached segments: the figure zrun's "measured process peak" compares
with). One JSON line per configuration on stdout (rank 0).
"""
import argparse
import json
import os
import statistics
import time

import torch
import transformers

CONFIGS = {
    "gpt2-350m": lambda: transformers.GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024,
                                                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "llama-1b": lambda: transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                                 num_hidden_layers=16, num_attention_heads=32,
                                                 num_key_value_heads=8, max_position_embeddings=2048),
}


def build(name, device):
    cfg = CONFIGS[name]()
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).to(device), cfg.vocab_size


def run(name, mode, dist, batch, seq, warmup, steps, rank, world):
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model, vocab = build(name, device)
    model.train()
    if dist == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    elif dist == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        inner = model.model if hasattr(model, "model") else model.transformer
        layers = inner.layers if hasattr(inner, "layers") else inner.h
        for layer in layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    per_rank = batch // world
    g = torch.Generator(device="cpu").manual_seed(1 + rank)
    ids = torch.randint(0, vocab, (per_rank, seq), generator=g).to(device)

    def step(x):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dist != "fsdp2"):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    fn = torch.compile(step) if mode == "compile" else step
    t0 = time.time()
    for _ in range(warmup):
        fn(ids)
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = fn(ids)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    free, total = torch.cuda.mem_get_info()
    ms = statistics.median(times)
    out = dict(peer="pytorch", model=name, mode=mode, dist=dist or "none", world=world, batch=batch, seq=seq,
               median_ms=round(ms, 3), tokens_per_s=round(batch * seq / (ms / 1e3)),
               alloc_peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3),
               process_gib=round((total - free) / 2**30, 3), warmup_s=round(warm_s, 1),
               loss=round(float(loss), 4))
    del model, opt, fn
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=list(CONFIGS))
    ap.add_argument("--modes", nargs="+", default=["eager", "compile"])
    ap.add_argument("--dist", nargs="+", default=[None])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    rank, world = 0, 1
    if "WORLD_SIZE" in os.environ:
        torch.distributed.init_process_group("nccl")
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    for name in a.models:
        for dist in a.dist:
            for mode in a.modes:
                try:
                    r = run(name, mode, dist, a.batch, a.seq, a.warmup, a.steps, rank, world)
                except Exception as e:  # one failing peer must not hide the others' figures
                    r = dict(peer="pytorch", model=name, mode=mode, dist=dist or "none", error=repr(e)[:300])
                if rank == 0:
                    print(json.dumps(r), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
