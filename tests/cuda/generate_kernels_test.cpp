// The decode attention kernel (kernels/cuda/decode_attention.cu) against the CPU reference kernel
// cached_attention (kernels/cpu/generate.cpp), on random queries and caches in every float storage dtype:
// head dims 64 and 128; 1, 4 and 8 query heads per K/V head; one and two query rows per step; batches that
// split the cache into many chunks (the combine pass) and batches that take one chunk (no workspace);
// positions at 0, mid-tile, at a tile boundary and at the cache's end. Outputs are poisoned with NaN first,
// so a row the kernel never writes fails. Tolerances: fp32 1e-4 relative (fp32 sums and exp2 against the
// reference's double sums), bf16/f16 their storage rounding (tol_for).
//
// Then the timing of one decode step's attention at llama-1b's shapes (32 query heads, 8 K/V heads, head dim
// 64, cache 768, 640 positions filled), decode kernel against the simple kernel, printed with the rate at
// which the step reads the cache (not a pass/fail figure: the generation benchmark is the decode step's).
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "zk/cuda_decode.h"
#include "zk/cuda_train_kernels.h"
#include "zk/cuda_workspace.h"

namespace zt {
namespace {

namespace zc = zk::cuda;

struct DevBytes {
  void *ptr = nullptr;
  explicit DevBytes(size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 16), cudaSuccess); }
  ~DevBytes() { cudaFree(ptr); }
};

struct Case {
  int64_t B, Hq, Hkv, S, L, D;
};

HostT positions(int64_t B, int64_t L, int64_t S) {
  HostT pos(DType::i64, Dims{B});
  // 0, mid-tile, a tile boundary, the last position a step of S rows can start at, then spread.
  const int64_t fixed[] = {0, 77, 128, L - S};
  for (int64_t b = 0; b < B; ++b) {
    int64_t p = b < 4 ? fixed[b] : (b * 131) % (L - S + 1);
    p = std::min<int64_t>(std::max<int64_t>(p, 0), L - S);
    zk::store_i64(pos.bytes.data(), DType::i64, b, p);
  }
  return pos;
}

TEST(CudaDecodeAttention, MatchesCpuReference) {
  const Case cases[] = {
      {1, 32, 8, 1, 768, 64},   // llama-1b, batch 1: 6 chunks, combined
      {3, 32, 8, 1, 300, 64},   // a cache that is not a whole number of tiles
      {64, 32, 8, 1, 768, 64},  // llama-1b, batch 64: one chunk, no workspace
      {2, 32, 32, 1, 1000, 128},  // llama2-7b's heads (no grouping), head dim 128
      {2, 16, 2, 1, 2049, 128},   // 8 query heads per K/V head
      {3, 8, 2, 2, 517, 64},      // two query rows per step (each sees one more key than the last)
      {5, 12, 12, 1, 40, 64},     // gpt2's heads, a short cache
  };
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" +
                   std::to_string(c.Hkv) + " S" + std::to_string(c.S) + " L" + std::to_string(c.L) + " D" +
                   std::to_string(c.D));
      HostT q = random_tensor(t, Dims{c.B, c.Hq, c.S, c.D}), k = random_tensor(t, Dims{c.B, c.Hkv, c.L, c.D}),
            v = random_tensor(t, Dims{c.B, c.Hkv, c.L, c.D}), ref(t, q.shape);
      HostT pos = positions(c.B, c.L, c.S);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      std::vector<float> scratch(zk::cpu::cached_attention_scratch(k.in()));
      ZT_CPU_OK(zk::cpu::cached_attention(q.in(), k.in(), v.in(), pos.in(), ref.out(), scale, scratch.data()));
      DevT gq(q), gk(k), gv(v), gp(pos), go(t, q.shape);
      ASSERT_TRUE(zc::decode_attention_supported(gq.in(), gk.in(), gv.in(), gp.in(), go.out()));
      const uint64_t ws = zk::cuda::workspace::cached_attention(c.B, c.Hq, c.S, c.D, c.Hkv, c.L);
      DevBytes w(ws);
      ZT_GPU_OK(zc::decode_attention(gq.in(), gk.in(), gv.in(), gp.in(), go.out(), scale, ws ? w.ptr : nullptr,
                                     nullptr));
      EXPECT_TRUE(close(go.download(), ref, t == DType::f32 ? 1e-4f : tol_for(t)))
          << "splits " << zk::cuda::workspace::decode_attention_splits(c.B, c.Hkv, c.L);
    }
}

TEST(CudaDecodeAttention, RefusesWhatItDoesNotCover) {
  HostT q = random_tensor(DType::bf16, Dims{1, 4, 1, 24}), k = random_tensor(DType::bf16, Dims{1, 2, 16, 24});
  HostT pos(DType::i64, Dims{1});
  DevT gq(q), gk(k), gp(pos), go(DType::bf16, q.shape);
  EXPECT_FALSE(zc::decode_attention_supported(gq.in(), gk.in(), gk.in(), gp.in(), go.out()));  // head dim 24
  EXPECT_FALSE(zc::decode_attention(gq.in(), gk.in(), gk.in(), gp.in(), go.out(), 1.0f, nullptr, nullptr).ok());
}

TEST(CudaDecodeAttention, TimingAtLlama1bShapes) {
  const int64_t Hq = 32, Hkv = 8, L = 768, D = 64, filled = 640;
  for (int64_t B : {1, 8, 64}) {
    const DType t = DType::bf16;
    HostT q = random_tensor(t, Dims{B, Hq, 1, D}), k = random_tensor(t, Dims{B, Hkv, L, D});
    HostT pos(DType::i64, Dims{B});
    for (int64_t b = 0; b < B; ++b) zk::store_i64(pos.bytes.data(), DType::i64, b, filled - 1);
    DevT gq(q), gk(k), gv(k), gp(pos), go(t, q.shape);
    DevBytes w(zk::cuda::workspace::cached_attention(B, Hq, 1, D, Hkv, L));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    auto time = [&](bool fast) {
      for (int it = 0; it < 3; ++it)
        fast ? (void)zc::decode_attention(gq.in(), gk.in(), gv.in(), gp.in(), go.out(), 0.125f, w.ptr, nullptr)
             : (void)zc::cached_attention(gq.in(), gk.in(), gv.in(), gp.in(), go.out(), 0.125f, nullptr);
      const int n = 50;
      cudaEventRecord(e0);
      for (int it = 0; it < n; ++it)
        fast ? (void)zc::decode_attention(gq.in(), gk.in(), gv.in(), gp.in(), go.out(), 0.125f, w.ptr, nullptr)
             : (void)zc::cached_attention(gq.in(), gk.in(), gv.in(), gp.in(), go.out(), 0.125f, nullptr);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      return ms / n;
    };
    const float fast = time(true), simple = time(false);
    const double bytes = 2.0 * B * Hkv * filled * D * 2;  // K and V read once
    std::printf("decode attention B=%lld: decode kernel %.2f us (%.0f GB/s of cache), simple kernel %.2f us\n",
                static_cast<long long>(B), fast * 1e3, bytes / (fast * 1e-3) / 1e9, simple * 1e3);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
}

}  // namespace
}  // namespace zt
