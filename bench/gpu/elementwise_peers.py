#!/usr/bin/env python3
"""The PyTorch peers of `zplan_cuda_kernel_bench --memory`: the llama forwards' memory-bound ops at the same
shapes (llama2-7b batch 4 and llama-1b batch 8, seq 1024, bf16), in eager mode and under torch.compile, with
the same byte counts, so that each zplan row has its peers beside it:
  residual + RMS norm  s = x + r; y = w * (s * rsqrt(mean(s^2) + eps))  (Hugging Face's LlamaRMSNorm, fp32
                       statistics), returning s and y
  RMS norm             the same without the residual
  gated SiLU product   silu(g) * u
  rotary               x * cos + rotate_half(x) * sin, tables [1, 1, S, D] (head-major x [B, H, S, D], and
                       sequence-major x [B, S, H, D] against tables viewed [1, S, 1, D])
Median of 50 timed calls after 5 warm-ups (CUDA events around each call), and the device-to-device copy
rate of 2 GiB measured here the same way. Prints one line per op and mode.
"""
import torch
import torch.nn.functional as F

from cuda_timing import median_ms

MODELS = [("llama2-7b", 4096, 4096, 11008, 32, 32, 128, 4, 1024),
          ("llama-1b", 8192, 2048, 5632, 32, 8, 64, 8, 1024)]


def residual_rms(x, r, w, eps: float = 1e-5):
    s = x + r
    v = s.float()
    v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    return s, w * v.to(s.dtype)


def rms(x, w, eps: float = 1e-5):
    v = x.float()
    v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    return w * v.to(x.dtype)


def gated(g, u):
    return F.silu(g) * u


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotary(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def main():
    dev = "cuda"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    n = 2 << 30
    c0 = torch.ones(n, dtype=torch.uint8, device=dev)
    c1 = torch.empty_like(c0)
    ms = median_ms(lambda: c1.copy_(c0), 3, 20)
    bw = 2 * n / (ms / 1e3) / 1e9
    print(f"{'copy d2d 2 GiB (read + write)':52s} {'':8s} {ms:10.4f} {bw:9.0f} GB/s   ceiling")
    del c0, c1
    g = torch.Generator(device=dev).manual_seed(0)
    rnd = lambda *s: (torch.rand(*s, device=dev, generator=g) * 2 - 1).bfloat16()
    compiled = {f: torch.compile(f, dynamic=False) for f in (residual_rms, rms, gated, rotary)}

    def row(name, mode, nbytes, fn):
        try:
            t = median_ms(fn)
            gbs = nbytes / (t / 1e3) / 1e9
            print(f"{name:52s} {mode:8s} {t:10.4f} {gbs:9.0f} GB/s {100 * gbs / bw:7.1f}%", flush=True)
        except Exception as e:  # a compile failure is reported, not fatal
            print(f"{name:52s} {mode:8s} failed: {str(e).splitlines()[0][:80]}", flush=True)

    for name, rows, hidden, inter, heads, kv, hd, batch, seq in MODELS:
        hs = f"{rows}x{hidden}"
        x, r, w = rnd(rows, hidden), rnd(rows, hidden), rnd(hidden)
        e = 2 * rows * hidden
        for mode, fns in (("eager", None), ("compile", compiled)):
            f = fns or {}
            rr, rm = f.get(residual_rms, residual_rms), f.get(rms, rms)
            row(f"{name} residual+rms_norm {hs}", mode, 4 * e, lambda: rr(x, r, w))
            row(f"{name} rms_norm {hs}", mode, 2 * e, lambda: rm(x, w))
        del x, r, w
        a, u = rnd(rows, inter), rnd(rows, inter)
        for mode, fns in (("eager", None), ("compile", compiled)):
            gf = (fns or {}).get(gated, gated)
            row(f"{name} gated silu {rows}x{inter}", mode, 3 * 2 * rows * inter, lambda: gf(a, u))
        del a, u
        cos, sin = rnd(1, 1, seq, hd), rnd(1, 1, seq, hd)
        cos_s, sin_s = cos.view(1, seq, 1, hd), sin.view(1, seq, 1, hd)
        for h in dict.fromkeys((heads, kv)):
            xh, xs = rnd(batch, h, seq, hd), rnd(batch, seq, h, hd)
            shp = f"[{batch},{h},{seq},{hd}]"
            e = 2 * batch * h * seq * hd
            for mode, fns in (("eager", None), ("compile", compiled)):
                rf = (fns or {}).get(rotary, rotary)
                row(f"{name} rotary head-major {shp}", mode, 2 * e, lambda: rf(xh, cos, sin))
                row(f"{name} rotary seq-major {shp}", mode, 2 * e, lambda: rf(xs, cos_s, sin_s))
            del xh, xs


if __name__ == "__main__":
    main()
