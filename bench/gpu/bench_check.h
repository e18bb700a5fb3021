// The GPU benchmarks' error checks: a benchmark has nothing to recover, so a failed CUDA call or kernel
// launch prints where and why and ends the process.
#ifndef ZPLAN_BENCH_GPU_BENCH_CHECK_H
#define ZPLAN_BENCH_GPU_BENCH_CHECK_H

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "zk/cuda_kernels.h"

#define CHECK_CUDA(x)                                                                                   \
  do {                                                                                                  \
    cudaError_t e_ = (x);                                                                               \
    if (e_ != cudaSuccess) {                                                                            \
      std::fprintf(stderr, "%s failed at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)

#define CHECK_GPU(x)                                      \
  do {                                                    \
    zk::cuda::GpuStatus s_ = (x);                         \
    if (!s_.ok()) {                                       \
      std::fprintf(stderr, "%s\n", s_.message.c_str());   \
      std::exit(1);                                       \
    }                                                     \
  } while (0)

#endif  // ZPLAN_BENCH_GPU_BENCH_CHECK_H
