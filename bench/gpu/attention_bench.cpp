// Times the fused attention forward (zk::cuda::attention) under each kernel that ZK_CUDA_ATTENTION selects, on
// the one-GPU benchmark models' shapes (bf16, causal, sequence 1024): gpt2-350m (batch 8, 16 heads, head dim
// 64; q, k and v read out of the fused projection, as its plan does), llama-1b (batch 8, 32 query heads over 8
// key/value heads, head dim 64) and llama2-7b (batch 4, 32 heads, head dim 128). Prints one line per kernel
// and shape: the median of 30 timed launches after 5 warm-ups (CUDA events), and TFLOP/s counting the causal
// products as half of 4 B H S^2 D. Inputs are random. Correctness is the kernel tests' business
// (tests/cuda/kernels_test.cpp, CudaAttention*); this binary only times.
//   zplan_cuda_attention_bench [PATH...]   (PATH: a ZK_CUDA_ATTENTION value; "default" leaves it unset)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_check.h"
#include "zk/cuda_kernels.h"
#include "zk/cuda_train_kernels.h"

namespace {

namespace zc = zk::cuda;
using zk::Dims;
using zk::DType;

/// A device buffer of n bf16 values drawn uniformly from [-1, 1).
void *random_bf16(size_t n, unsigned seed) {
  std::vector<__nv_bfloat16> h(n);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto &x : h) x = __float2bfloat16(u(g));
  void *p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * 2));
  CHECK_CUDA(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
  return p;
}

struct Shape {
  const char *name;
  int64_t B, Hq, Hkv, S, D;
  bool packed;  // q, k, v out of one [B, S, (Hq + 2 Hkv) D] tensor, out sequence-major (gpt2's plan)
};

}  // namespace

int main(int argc, char **argv) {
  std::string why;
  if (!zc::device_usable(size_t{4} << 30, &why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) paths.push_back(argv[i]);
  if (paths.empty()) paths = {"default"};
  const Shape shapes[] = {{"gpt2-350m", 8, 16, 16, 1024, 64, true},
                          {"gpt2-350m head-major", 8, 16, 16, 1024, 64, false},
                          {"llama-1b", 8, 32, 8, 1024, 64, false},
                          {"llama2-7b", 4, 32, 32, 1024, 128, false}};
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::printf("%-22s %-10s %9s %9s\n", "shape", "kernel", "ms", "TFLOP/s");
  for (const Shape &sh : shapes) {
    const int64_t B = sh.B, S = sh.S, D = sh.D;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const double flops = 0.5 * 4.0 * B * sh.Hq * S * S * D;
    void *q, *k = nullptr, *v = nullptr, *o;
    zk::In qi, ki, vi;
    zk::Out oo;
    zk::cpu::AttnPacked pk[3];
    int seq_major = 0;
    if (sh.packed) {
      const int64_t W = (sh.Hq + 2 * sh.Hkv) * D;
      q = random_bf16(static_cast<size_t>(B * S * W), 1);
      qi = ki = vi = zk::In{q, DType::bf16, Dims{B, S, W}};
      pk[0] = {0, W, sh.Hq};
      pk[1] = {sh.Hq * D, W, sh.Hkv};
      pk[2] = {(sh.Hq + sh.Hkv) * D, W, sh.Hkv};
      seq_major = zk::cpu::kAttnSeqMajorAll;
      CHECK_CUDA(cudaMalloc(&o, static_cast<size_t>(B * S * sh.Hq * D) * 2));
      oo = zk::Out{o, DType::bf16, Dims{B, S, sh.Hq, D}};
    } else {
      q = random_bf16(static_cast<size_t>(B * sh.Hq * S * D), 1);
      k = random_bf16(static_cast<size_t>(B * sh.Hkv * S * D), 2);
      v = random_bf16(static_cast<size_t>(B * sh.Hkv * S * D), 3);
      qi = zk::In{q, DType::bf16, Dims{B, sh.Hq, S, D}};
      ki = zk::In{k, DType::bf16, Dims{B, sh.Hkv, S, D}};
      vi = zk::In{v, DType::bf16, Dims{B, sh.Hkv, S, D}};
      CHECK_CUDA(cudaMalloc(&o, static_cast<size_t>(B * sh.Hq * S * D) * 2));
      oo = zk::Out{o, DType::bf16, Dims{B, sh.Hq, S, D}};
    }
    for (const std::string &p : paths) {
      if (p == "default") unsetenv("ZK_CUDA_ATTENTION");
      else setenv("ZK_CUDA_ATTENTION", p.c_str(), 1);
      auto run = [&] {
        zc::GpuStatus st = zc::attention(qi, ki, vi, zk::In{}, oo, zk::Out{}, true, scale, seq_major,
                                         sh.packed ? pk : nullptr, s);
        if (!st.ok()) {
          std::fprintf(stderr, "%s %s: %s\n", sh.name, p.c_str(), st.message.c_str());
          std::exit(1);
        }
      };
      for (int i = 0; i < 5; ++i) run();
      CHECK_CUDA(cudaStreamSynchronize(s));
      std::vector<float> ms;
      for (int i = 0; i < 30; ++i) {
        CHECK_CUDA(cudaEventRecord(e0, s));
        run();
        CHECK_CUDA(cudaEventRecord(e1, s));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float x = 0;
        CHECK_CUDA(cudaEventElapsedTime(&x, e0, e1));
        ms.push_back(x);
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      std::printf("%-22s %-10s %9.4f %9.1f\n", sh.name, p.c_str(), med, flops / (med * 1e-3) / 1e12);
      std::fflush(stdout);
    }
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
  }
  unsetenv("ZK_CUDA_ATTENTION");
  return 0;
}
