"""The timing rule of the PyTorch peers (bench/gpu/elementwise_peers.py, bench/gpu/sdpa_bench.py), kept in one
place so that every peer row is measured the same way as the others it is printed beside."""
import statistics

import torch


def median_ms(fn, warm=5, reps=50):
    """Median milliseconds of `reps` calls of `fn` after `warm` untimed ones, each call bracketed by its own
    pair of CUDA events and waited for before the next, so that no call overlaps the one timed after it."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms)
