#!/usr/bin/env python3
"""The PyTorch peers of bench/gpu/attention_bench.cpp: torch.nn.functional.scaled_dot_product_attention on the
same shapes (bf16, causal, sequence 1024; gpt2-350m batch 8, 16 heads, head dim 64; llama-1b batch 8, 32 query
heads over 8 key/value heads, head dim 64; llama2-7b batch 4, 32 heads, head dim 128), [B, H, S, D] operands,
under each of SDPA's flash and cuDNN backends. Median of 30 timed calls after 5 warm-ups (CUDA events);
TFLOP/s counts the causal products as half of 4 B H S^2 D, as the C++ bench does. Where a backend refuses
grouped-query operands (enable_gqa), k and v are expanded to the query heads first, outside the timing.
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from cuda_timing import median_ms

SHAPES = [("gpt2-350m", 8, 16, 16, 1024, 64), ("llama-1b", 8, 32, 8, 1024, 64), ("llama2-7b", 4, 32, 32, 1024, 128)]
BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'shape':22s} {'kernel':10s} {'ms':>9s} {'TFLOP/s':>9s}")
    for name, B, hq, hkv, S, D in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        mk = lambda h: torch.rand(B, h, S, D, device="cuda", generator=g, dtype=torch.float32).mul_(2).sub_(1).bfloat16()
        q, k, v = mk(hq), mk(hkv), mk(hkv)
        flops = 0.5 * 4 * B * hq * S * S * D
        for label, backend in BACKENDS:
            with sdpa_kernel(backend):
                try:
                    if hkv != hq:
                        try:
                            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                            fn()
                        except Exception:
                            ke, ve = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
                            fn = lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=True)
                            label += "*"
                    else:
                        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    ms = median_ms(fn, reps=30)
                    print(f"{name:22s} {label:10s} {ms:9.4f} {flops / ms / 1e9:9.1f}", flush=True)
                except Exception as e:  # a backend this build or GPU does not offer
                    print(f"{name:22s} {label:10s} unavailable: {str(e).splitlines()[0][:80]}", flush=True)


if __name__ == "__main__":
    main()
