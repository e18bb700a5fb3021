// The generation kernels against the CPU reference kernels, and their timings at llama-1b's shapes.
//
// The decode attention kernel (kernels/cuda/decode_attention.cu) against the CPU reference kernel
// cached_attention (kernels/cpu/generate.cpp), on random queries and caches in every float storage dtype:
// head dims 64 and 128; 1, 2, 4 and 8 query heads per K/V head; one and two query rows per step; batches that
// split the cache into chunks combined in a cluster, a long cache whose chunks go through the workspace and
// the combine kernel, and a batch that takes one chunk; positions at 0, 77, 128 and at the cache's end. Outputs
// are poisoned with NaN first, so a row the kernel never writes fails, and each case runs twice (the second
// time into a poisoned output again: nothing may depend on what a launch left behind). Tolerances: fp32 1e-4 relative (fp32 sums and exp2 against the
// reference's double sums), bf16/f16 their storage rounding (tol_for).
//
// Then the timing of one decode step's attention at llama-1b's shapes (32 query heads, 8 K/V heads, head dim
// 64, cache 768, 640 positions filled), against the simple kernel, with the cache in L2 and outside it,
// printed with the rate at which the step reads the cache (not a pass/fail figure: the generation benchmark
// is the decode step's).
//
// The few-row products (kernels/cuda/skinny_gemm.cu) against the CPU reference linear: every row count 1..16,
// odd and even K and N, both weight layouts, every epilogue, three dtypes; chained launches (the programmatic
// launch must still wait for its input); linear and matmul running the plan's choice; the fused products
// (linear_multi, linear_gated) against the CPU reference kernels; the streaming kernel in every launch shape
// (strip width x K split) against the CPU reference; and the timing tables against cuBLASLt.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <memory>
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
  // The chunks of each case (zk/cuda_workspace.h) in the comments: up to 8 combine inside a cluster, more
  // through the workspace and the combine kernel, 1 writes the output itself.
  const Case cases[] = {
      {1, 32, 8, 1, 768, 64},     // llama-1b, batch 1: 8 chunks of 96 positions, one full cluster
      {8, 32, 8, 1, 768, 64},     // llama-1b, batch 8: 5 chunks of 160
      {3, 32, 8, 1, 300, 64},     // a cache that is not a whole number of chunks: 7 chunks of 48
      {64, 32, 8, 1, 768, 64},    // llama-1b, batch 64: one chunk, no combine
      {2, 32, 32, 1, 1000, 128},  // llama2-7b's heads (no grouping: one query row), head dim 128: 5 chunks
      {2, 8, 4, 1, 300, 128},     // two query heads per K/V head: 7 chunks
      {2, 16, 2, 1, 1000, 128},   // 8 query heads per K/V head, 8 chunks: over 48 KiB of shared memory
      {4, 16, 2, 1, 5000, 128},   // 8 query heads per K/V head; 10 chunks: the workspace and the combine kernel
      {3, 8, 2, 2, 517, 64},      // two query rows per step (each sees one more key than the last): 8 rows
      {5, 12, 12, 1, 40, 64},     // gpt2's heads, a short cache: 3 chunks of 16
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
      for (int rep = 0; rep < 2; ++rep) {
        go.poison();
        ZT_GPU_OK(zc::decode_attention(gq.in(), gk.in(), gv.in(), gp.in(), go.out(), scale, ws ? w.ptr : nullptr,
                                       nullptr));
        EXPECT_TRUE(close(go.download(), ref, t == DType::f32 ? 1e-4f : tol_for(t)))
            << "splits " << zk::cuda::workspace::decode_attention_splits(c.B, c.Hkv, c.L) << ", run " << rep;
      }
    }
}

// rope_kv_write (a decode layer's two rotaries and two cache writes as one kernel) against the CPU reference
// (the composition of rotary and kv_write): q's rotated rows and both whole caches compared, in f32, bf16 and
// f16, with tables of one row and of one row per sequence ([1 or B, 1, 1, D]), two rows per step, and
// positions at 0, mid-cache and the last rows (where the second row falls past the cache and is dropped).
TEST(CudaRopeKvWrite, MatchesCpuReference) {
  struct RCase {
    int64_t B, Hq, Hkv, S, L, D, tb;
  };
  const RCase cases[] = {{1, 32, 8, 1, 768, 64, 1}, {3, 8, 2, 2, 40, 64, 3}, {4, 12, 12, 1, 33, 128, 1},
                         {2, 4, 4, 2, 9, 16, 2}};
  int n = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const RCase& c : cases) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) +
                   " S" + std::to_string(c.S) + " L" + std::to_string(c.L) + " D" + std::to_string(c.D));
      HostT q = random_tensor(t, Dims{c.B, c.Hq, c.S, c.D}), k = random_tensor(t, Dims{c.B, c.Hkv, c.S, c.D}),
            v = random_tensor(t, Dims{c.B, c.Hkv, c.S, c.D});
      HostT cs = random_tensor(t, Dims{c.tb, 1, 1, c.D}, -1.0f, 1.0f), sn = random_tensor(t, Dims{c.tb, 1, 1, c.D}, -1.0f, 1.0f);
      HostT kc = random_tensor(t, Dims{c.B, c.Hkv, c.L, c.D}), vc = random_tensor(t, Dims{c.B, c.Hkv, c.L, c.D});
      HostT pos(DType::i64, Dims{c.B});
      for (int64_t b = 0; b < c.B; ++b)
        zk::store_i64(pos.bytes.data(), DType::i64, b, b == 0 ? 0 : b == 1 ? c.L - 1 : (c.L / 2 + b) % c.L);
      DevT gq(q), gk(k), gv(v), gc(cs), gs(sn), gkc(kc), gvc(vc), gp(pos), go(t, q.shape);
      go.poison();
      HostT qo(t, q.shape);
      std::vector<float> scratch(zk::cpu::rope_kv_write_scratch(k.in()) + 1);
      ZT_CPU_OK(zk::cpu::rope_kv_write(q.in(), k.in(), v.in(), cs.in(), sn.in(), pos.in(), qo.out(), kc.out(),
                                       vc.out(), scratch.data()));
      ZT_GPU_OK(zc::rope_kv_write(gq.in(), gk.in(), gv.in(), gc.in(), gs.in(), gp.in(), go.out(), gkc.out(),
                                  gvc.out(), nullptr));
      // The same formula and rounding on both sides: equal but for fp32 rounding of the two products.
      const float tol = t == DType::f32 ? 1e-5f : tol_for(t);
      EXPECT_TRUE(close(go.download(), qo, tol)) << "q";
      EXPECT_TRUE(close(gkc.download(), kc, tol)) << "k cache";
      EXPECT_TRUE(close(gvc.download(), vc, 0.0f)) << "v cache";
      ++n;
    }
  std::printf("rope_kv_write: %d cases against the CPU reference\n", n);
}

// rope_attention (plan 2.16: the rotary of q and of the new keys, the cache writes and the decode attention as
// one kernel) against the CPU reference (rope_kv_write, then cached_attention of the rotated q): the output and
// both whole caches, in f32, bf16 and f16; the fused kernel in a full cluster (llama-1b's batch 1), in several
// chunks with two rows a step and tables of one row per sequence and step ([B, 1, S, D]), through the workspace
// and the combine kernel (a long cache), in one chunk, at head dim 128; then the operands the fused kernel does
// not take (head dim 32; 16 query rows a K/V head), which go through the rotary step and the attention as two
// kernels. Positions at 0, mid-cache and the cache's last row (where a second row of the step is dropped). The
// output is poisoned first and each case runs twice on fresh caches, the second time with the cache's rows
// loaded before the wait for the previous kernel (early).
TEST(CudaRopeAttention, MatchesCpuReference) {
  struct RCase {
    int64_t B, Hq, Hkv, S, L, D, t0, t2;
    bool fused;
  };
  const RCase cases[] = {{1, 32, 8, 1, 768, 64, 1, 1, true},   {3, 8, 2, 2, 300, 64, 3, 2, true},
                         {1, 16, 2, 1, 5000, 128, 1, 1, true}, {64, 32, 8, 1, 768, 64, 1, 1, true},
                         {2, 32, 32, 1, 100, 128, 2, 1, true}, {2, 4, 2, 2, 40, 32, 1, 1, false},
                         {2, 16, 1, 1, 40, 64, 1, 1, false}};
  int n = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const RCase &c : cases) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) +
                   " Hkv" + std::to_string(c.Hkv) + " S" + std::to_string(c.S) + " L" + std::to_string(c.L) + " D" +
                   std::to_string(c.D));
      HostT q = random_tensor(t, Dims{c.B, c.Hq, c.S, c.D}), k = random_tensor(t, Dims{c.B, c.Hkv, c.S, c.D}),
            v = random_tensor(t, Dims{c.B, c.Hkv, c.S, c.D});
      HostT cs = random_tensor(t, Dims{c.t0, 1, c.t2, c.D}, -1.0f, 1.0f),
            sn = random_tensor(t, Dims{c.t0, 1, c.t2, c.D}, -1.0f, 1.0f);
      const HostT kc0 = random_tensor(t, Dims{c.B, c.Hkv, c.L, c.D}), vc0 = random_tensor(t, Dims{c.B, c.Hkv, c.L, c.D});
      HostT pos(DType::i64, Dims{c.B});
      for (int64_t b = 0; b < c.B; ++b)
        zk::store_i64(pos.bytes.data(), DType::i64, b, b == 0 ? 0 : b == 1 ? c.L - 1 : (c.L / 2 + 37 * b) % c.L);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      HostT kc = kc0, vc = vc0, ref(t, q.shape);
      std::vector<float> scratch(zk::cpu::rope_attention_scratch(q.in(), k.in(), kc.in()));
      ZT_CPU_OK(zk::cpu::rope_attention(q.in(), k.in(), v.in(), cs.in(), sn.in(), pos.in(), ref.out(), kc.out(),
                                        vc.out(), scale, scratch.data()));
      DevT gq(q), gk(k), gv(v), gc(cs), gs(sn), gp(pos), go(t, q.shape);
      const uint64_t ws = zk::cuda::workspace::rope_attention(c.B, c.Hq, c.S, c.D, c.Hkv, c.L,
                                                              static_cast<int64_t>(zk::dtype_size(t)));
      DevBytes w(ws);
      const float tol = t == DType::f32 ? 1e-4f : tol_for(t);
      for (int rep = 0; rep < 2; ++rep) {
        DevT gkc(kc0), gvc(vc0);
        go.poison();
        EXPECT_EQ(zc::decode_attention_supported(gq.in(), gkc.in(), gvc.in(), gp.in(), go.out()), c.fused);
        ZT_GPU_OK(zc::rope_attention(gq.in(), gk.in(), gv.in(), gc.in(), gs.in(), gp.in(), go.out(), gkc.out(),
                                     gvc.out(), scale, w.ptr, rep == 1, nullptr));
        EXPECT_TRUE(close(go.download(), ref, tol)) << "out, run " << rep;
        EXPECT_TRUE(close(gkc.download(), kc, t == DType::f32 ? 1e-5f : tol_for(t))) << "k cache, run " << rep;
        EXPECT_TRUE(close(gvc.download(), vc, 0.0f)) << "v cache, run " << rep;
      }
      ++n;
    }
  std::printf("rope_attention: %d cases against the CPU reference\n", n);
}

TEST(CudaDecodeAttention, RefusesWhatItDoesNotCover) {
  HostT q = random_tensor(DType::bf16, Dims{1, 4, 1, 24}), k = random_tensor(DType::bf16, Dims{1, 2, 16, 24});
  HostT pos(DType::i64, Dims{1});
  DevT gq(q), gk(k), gp(pos), go(DType::bf16, q.shape);
  EXPECT_FALSE(zc::decode_attention_supported(gq.in(), gk.in(), gk.in(), gp.in(), go.out()));  // head dim 24
  EXPECT_FALSE(zc::decode_attention(gq.in(), gk.in(), gk.in(), gp.in(), go.out(), 1.0f, nullptr, nullptr).ok());
}

// One decode step's attention at llama-1b's shapes (bf16, 32 query heads, 8 K/V heads, head dim 64, cache
// 768, 640 positions filled) at batch 1, 8 and 64, against the simple kernel. "hot": 50 launches back to
// back on one cache (it stays in L2 below batch 64); "cold": 64 launches back to back, each on the next of
// enough copies of the cache that every launch finds its cache outside the L2 (as in a decode step, whose
// weights sweep the L2 between layers). Printed with the rate at which the step reads the cache; not a
// pass/fail figure. Session 9's call (docs/generation.md) ran this against main's kernel before it.
TEST(CudaDecodeAttention, TimingAtLlama1bShapes) {
  const int64_t Hq = 32, Hkv = 8, L = 768, D = 64, filled = 640;
  for (int64_t B : {1, 8, 64}) {
    const DType t = DType::bf16;
    const size_t cache_bytes = static_cast<size_t>(B * Hkv * L * D) * 2;
    const int copies = static_cast<int>(
        std::min<size_t>(64, std::max<size_t>(2, (size_t{256} << 20) / (2 * cache_bytes) + 1)));
    HostT q = random_tensor(t, Dims{B, Hq, 1, D});
    std::vector<std::unique_ptr<DevT>> ks, vs;
    for (int c = 0; c < copies; ++c) {
      ks.push_back(std::make_unique<DevT>(random_tensor(t, Dims{B, Hkv, L, D})));
      vs.push_back(std::make_unique<DevT>(random_tensor(t, Dims{B, Hkv, L, D})));
    }
    HostT pos(DType::i64, Dims{B});
    for (int64_t b = 0; b < B; ++b) zk::store_i64(pos.bytes.data(), DType::i64, b, filled - 1);
    DevT gq(q), gp(pos), go(t, q.shape);
    DevBytes w(zk::cuda::workspace::cached_attention(B, Hq, 1, D, Hkv, L));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    auto run = [&](bool decode, int c) {
      const DevT &gk = *ks[static_cast<size_t>(c)], &gv = *vs[static_cast<size_t>(c)];
      if (decode)
        ZT_GPU_OK(zc::decode_attention(gq.in(), gk.in(), gv.in(), gp.in(), go.out(), 0.125f, w.ptr, nullptr));
      else
        ZT_GPU_OK(zc::cached_attention(gq.in(), gk.in(), gv.in(), gp.in(), go.out(), 0.125f, nullptr));
    };
    auto time = [&](bool decode, bool cold) {
      for (int it = 0; it < 3; ++it) run(decode, 0);
      const int n = cold ? 64 : 50;
      cudaEventRecord(e0);
      for (int it = 0; it < n; ++it) run(decode, cold ? (it + 1) % copies : 0);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      return ms / n * 1e3f;
    };
    const float hot = time(true, false), cold = time(true, true), simple = time(false, false);
    const double bytes = 2.0 * B * Hkv * filled * D * 2;  // K and V read once
    std::printf("decode attention B=%-3lld chunks %lld: hot %.2f us, cold %.2f us (%.0f GB/s of cache), simple "
                "kernel %.2f us\n",
                static_cast<long long>(B),
                static_cast<long long>(zk::cuda::workspace::decode_attention_splits(B, Hkv, L)), hot, cold,
                bytes / (cold * 1e-6) / 1e9, simple);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
}

// --- the few-row products (kernels/cuda/skinny_gemm.cu) ---------------------------------------------------

/// The CPU reference of linear's contract: fp32 alpha x W + bias, gelu (tanh form) for the gelu epilogues,
/// rounded once to the storage type.
HostT linear_ref(const HostT& x, const HostT& w, const HostT* bias, bool tw, float alpha, zc::Epilogue e,
                 Dims os) {
  HostT ref32(DType::f32, os), ref(x.dtype, os);
  std::vector<float> scratch(zk::cpu::linear_scratch(x.in(), w.in(), ref32.out(), tw) + 1);
  EXPECT_TRUE(
      zk::cpu::linear(x.in(), w.in(), bias ? bias->in() : zk::In{}, ref32.out(), tw, alpha, scratch.data())
          .ok());
  if (e == zc::Epilogue::gelu || e == zc::Epilogue::gelu_bias)
    EXPECT_TRUE(zk::cpu::unary(zk::cpu::Unary::gelu_tanh, ref32.in(), ref32.out()).ok());
  EXPECT_TRUE(zk::cpu::cast(ref32.in(), ref.out()).ok());
  return ref;
}

// Every row count 1..16, odd and even K and N (odd N and K take the kernels' element-wise loads, a K over
// 2048 splits over a cluster), both weight layouts, every epilogue, in f32, bf16 and f16; outputs poisoned
// first.
TEST(CudaSkinnyLinear, MatchesCpuReference) {
  struct Shape {
    int64_t K, N;
  };
  const Shape shapes[] = {{37, 53}, {64, 24}, {300, 1000}, {2051, 129}, {2048, 520}};
  int cases = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& sh : shapes)
      for (bool tw : {false, true})
        for (int64_t M = 1; M <= zc::kSkinnyMaxRows; ++M) {
          const auto e = static_cast<zc::Epilogue>(M % 4);
          SCOPED_TRACE(std::string(zk::dtype_name(t)) + " M " + std::to_string(M) + " K " +
                       std::to_string(sh.K) + " N " + std::to_string(sh.N) +
                       (tw ? " W [N, K]" : " W [K, N]") + " epilogue " + std::to_string(M % 4));
          ASSERT_TRUE(zc::skinny_linear_fits(t, M, sh.K, sh.N, tw));
          // x [M, K] as [M, 1, K] for odd M, so that leading dims other than rows are covered.
          const Dims xs = M % 2 ? Dims{M, 1, sh.K} : Dims{M, sh.K};
          Dims os = xs;
          os.d[os.rank - 1] = sh.N;
          HostT x = random_tensor(t, xs),
                w = random_tensor(t, tw ? Dims{sh.N, sh.K} : Dims{sh.K, sh.N}, -0.2f, 0.2f);
          HostT bias = random_tensor(t, Dims{sh.N});
          const bool with_bias = e == zc::Epilogue::bias || e == zc::Epilogue::gelu_bias;
          HostT ref = linear_ref(x, w, with_bias ? &bias : nullptr, tw, 0.5f, e, os);
          DevT dx(x), dw(w), db(bias), dy(t, os);
          ZT_GPU_OK(zc::skinny_linear(dx.in(), dw.in(), with_bias ? db.in() : zk::In{}, dy.out(), tw, 0.5f, e,
                                      M % 3 == 0, nullptr));
          EXPECT_TRUE(close(dy.download(), ref, t == DType::f32 ? 1e-4f : tol_for(t)));
          ++cases;
        }
  std::printf("few-row products: %d cases against the CPU reference\n", cases);
}

// llama-1b's decode products in bf16 at 1, 8 and 16 rows (the cluster split of K over 2, 4 and 8 blocks).
TEST(CudaSkinnyLinear, Llama1bShapes) {
  struct Shape {
    int64_t K, N;
  };
  for (const Shape& sh : {Shape{2048, 2048}, Shape{2048, 512}, Shape{2048, 5632}, Shape{5632, 2048}})
    for (int64_t M : {1, 8, 16}) {
      SCOPED_TRACE("M " + std::to_string(M) + " K " + std::to_string(sh.K) + " N " + std::to_string(sh.N));
      const DType t = DType::bf16;
      HostT x = random_tensor(t, Dims{M, sh.K}), w = random_tensor(t, Dims{sh.K, sh.N}, -0.05f, 0.05f);
      HostT ref = linear_ref(x, w, nullptr, false, 1.0f, zc::Epilogue::none, Dims{M, sh.N});
      DevT dx(x), dw(w), dy(t, ref.shape);
      ZT_GPU_OK(zc::skinny_linear(dx.in(), dw.in(), zk::In{}, dy.out(), false, 1.0f, zc::Epilogue::none, true,
                                  nullptr));
      EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
    }
}

// Launched back to back without synchronising, each product reading the previous one's output, with other
// kernels in between (an elementwise kernel, a cuBLASLt product): each waits for its input (the programmatic
// launch lets it start early; it must not read x before the previous kernel has finished).
TEST(CudaSkinnyLinear, ChainedLaunchesWaitForTheirInput) {
  for (zc::FewRows kernel : {zc::FewRows::cluster, zc::FewRows::stream})
  for (DType t : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(std::string(zk::dtype_name(t)) + " kernel " + std::to_string(static_cast<int>(kernel)));
    const int64_t M = 4, D = 1024;
    std::unique_ptr<zc::Blas> blas;
    ZT_GPU_OK(zc::Blas::create(&blas));
    HostT x = random_tensor(t, Dims{M, D});
    std::vector<HostT> ws;
    for (int i = 0; i < 6; ++i) ws.push_back(random_tensor(t, Dims{D, D}, -0.06f, 0.06f));
    // Reference: y <- y W_i, then tanh between the third and the fourth product, all rounded per step.
    HostT y = x;
    for (int i = 0; i < 6; ++i) {
      y = linear_ref(y, ws[i], nullptr, false, 1.0f, zc::Epilogue::none, Dims{M, D});
      if (i == 2) {
        HostT z(t, y.shape);
        ASSERT_TRUE(zk::cpu::unary(zk::cpu::Unary::tanh, y.in(), z.out()).ok());
        y = z;
      }
    }
    DevT dx(x), a(t, Dims{M, D}), b(t, Dims{M, D});
    std::vector<std::unique_ptr<DevT>> dws;
    for (const HostT& w : ws) dws.push_back(std::make_unique<DevT>(w));
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    for (int rep = 0; rep < 20; ++rep) {
      a.poison();
      b.poison();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ZT_GPU_OK(zc::skinny_linear(dx.in(), dws[0]->in(), zk::In{}, a.out(), false, 1.0f, zc::Epilogue::none,
                                  true, s, kernel));
      ZT_GPU_OK(zc::skinny_linear(a.in(), dws[1]->in(), zk::In{}, b.out(), false, 1.0f, zc::Epilogue::none,
                                  true, s, kernel));
      ZT_GPU_OK(zc::skinny_linear(b.in(), dws[2]->in(), zk::In{}, a.out(), false, 1.0f, zc::Epilogue::none,
                                  true, s, kernel));
      ZT_GPU_OK(zc::unary(zk::cpu::Unary::tanh, a.in(), b.out(), s));
      ZT_GPU_OK(zc::skinny_linear(b.in(), dws[3]->in(), zk::In{}, a.out(), false, 1.0f, zc::Epilogue::none,
                                  true, s, kernel));
      // A cuBLASLt product (no workspace) between two of ours.
      ZT_GPU_OK(zc::linear(*blas, a.in(), dws[4]->in(), zk::In{}, b.out(), false, 1.0f, zc::Epilogue::none,
                           nullptr, 0, s, zc::FewRows::library));
      ZT_GPU_OK(zc::skinny_linear(b.in(), dws[5]->in(), zk::In{}, a.out(), false, 1.0f, zc::Epilogue::none,
                                  true, s, kernel));
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      ASSERT_TRUE(close(a.download(), y, 4 * tol_for(t))) << "repeat " << rep;
    }
    cudaStreamDestroy(s);
  }
}

// linear() and matmul() run the kernel the plan chose (plans 2.9 / 2.14: the kernel code, from the compiler's
// rule): cuBLASLt for FewRows::library, the cluster kernels where chosen and the shape fits (cuBLASLt beyond
// 16 rows), the streaming kernel where chosen: it holds 1 to 4 rows, and beyond them the call is an error
// (the plan verifier refuses such a plan), not another kernel. Every product that runs is the product.
TEST(CudaSkinnyLinear, LinearRunsThePlansChoice) {
  std::unique_ptr<zc::Blas> blas;
  ZT_GPU_OK(zc::Blas::create(&blas));
  DevBytes ws(zc::kGemmWorkspaceBytes);
  for (zc::FewRows kernel : {zc::FewRows::library, zc::FewRows::cluster, zc::FewRows::stream})
    for (int64_t M : {1, 3, 4, 8, 16, 17}) {
      SCOPED_TRACE("kernel " + std::to_string(static_cast<int>(kernel)) + " M " + std::to_string(M));
      const DType t = DType::bf16;
      const int64_t K = 2048, N = 2048;
      HostT x = random_tensor(t, Dims{M, K}), w = random_tensor(t, Dims{K, N}, -0.05f, 0.05f),
            bias = random_tensor(t, Dims{N});
      DevT dx(x), dw(w), db(bias), dy(t, Dims{M, N});
      const bool runs = kernel != zc::FewRows::stream || M <= 4;
      dy.poison();
      const zk::cuda::GpuStatus st = zc::linear(*blas, dx.in(), dw.in(), db.in(), dy.out(), false, 1.0f,
                                                zc::Epilogue::gelu_bias, ws.ptr, zc::kGemmWorkspaceBytes, nullptr,
                                                kernel);
      EXPECT_EQ(st.ok(), runs) << st.message;
      if (runs)
        EXPECT_TRUE(close(dy.download(), linear_ref(x, w, &bias, false, 1.0f, zc::Epilogue::gelu_bias, Dims{M, N}),
                          tol_for(t)));
      dy.poison();
      const zk::cuda::GpuStatus sm = zc::matmul(*blas, dx.in(), dw.in(), dy.out(), false, false, ws.ptr,
                                                zc::kGemmWorkspaceBytes, nullptr, kernel);
      EXPECT_EQ(sm.ok(), runs) << sm.message;
      if (runs)
        EXPECT_TRUE(close(dy.download(), linear_ref(x, w, nullptr, false, 1.0f, zc::Epilogue::none, Dims{M, N}),
                          tol_for(t)));
    }
  // A code that names no kernel is refused.
  HostT x = random_tensor(DType::bf16, Dims{1, 64}), w = random_tensor(DType::bf16, Dims{64, 64});
  DevT dx(x), dw(w), dy(DType::bf16, Dims{1, 64});
  EXPECT_FALSE(zc::linear(*blas, dx.in(), dw.in(), zk::In{}, dy.out(), false, 1.0f, zc::Epilogue::none, ws.ptr,
                          zc::kGemmWorkspaceBytes, nullptr, static_cast<zc::FewRows>(3))
                   .ok());
}

// --- the fused few-row products (plan 2.9: linear_multi, linear_gated) -----------------------------------

/// The CPU reference of linear_gated, in f32 storage for the products (the CUDA kernel rounds each product to
/// the storage type, then computes act(gate) * up in fp32 and rounds once, as its unfused gated kernel; the
/// CPU reference rounds the activation too, as its unfused steps): the comparison tolerance covers both.
HostT gated_ref(zk::cpu::Unary act, const HostT& x, const HostT& wg, const HostT& wu, bool tw, float alpha,
                Dims os) {
  HostT ref(x.dtype, os);
  std::vector<float> scratch(zk::cpu::linear_gated_scratch(x.in(), wg.in(), ref.out(), tw) + 1);
  EXPECT_TRUE(zk::cpu::linear_gated(act, x.in(), wg.in(), wu.in(), ref.out(), tw, alpha, scratch.data()).ok());
  return ref;
}

// linear_multi (two to four weights of different widths, odd widths included) and linear_gated (each
// activation) against the CPU reference kernels: rows 1, 2, 3, 5, 8, 13 and 16, both weight layouts, K that
// splits over a cluster and K that does not, f32 / bf16 / f16; every output poisoned first.
TEST(CudaSkinnyFused, MatchesCpuReference) {
  std::unique_ptr<zc::Blas> blas;
  ZT_GPU_OK(zc::Blas::create(&blas));
  const std::vector<std::vector<int64_t>> widths = {{64, 24}, {520, 128, 128}, {53, 8, 136, 64}};
  const zk::cpu::Unary acts[] = {zk::cpu::Unary::silu, zk::cpu::Unary::gelu_tanh, zk::cpu::Unary::gelu_erf};
  int cases = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (int64_t K : {64, 300, 2056})
      for (bool tw : {false, true})
        for (int64_t M : {1, 2, 3, 5, 8, 13, 16}) {
          const float tol = t == DType::f32 ? 1e-4f : 2 * tol_for(t);
          const Dims xs = M % 2 ? Dims{M, 1, K} : Dims{M, K};
          HostT x = random_tensor(t, xs);
          DevT dx(x);
          auto out_shape = [&](int64_t N) {
            Dims os = xs;
            os.d[os.rank - 1] = N;
            return os;
          };
          for (const auto& ns : widths) {
            SCOPED_TRACE(std::string(zk::dtype_name(t)) + " multi M " + std::to_string(M) + " K " +
                         std::to_string(K) + " weights " + std::to_string(ns.size()) +
                         (tw ? " W [N, K]" : " W [K, N]"));
            std::vector<HostT> w, ref;
            std::vector<std::unique_ptr<DevT>> dw, dy;
            zk::In win[4];
            zk::Out yout[4];
            for (size_t i = 0; i < ns.size(); ++i) {
              w.push_back(random_tensor(t, tw ? Dims{ns[i], K} : Dims{K, ns[i]}, -0.2f, 0.2f));
              ref.push_back(HostT(t, out_shape(ns[i])));
            }
            {
              std::vector<zk::In> rin;
              std::vector<zk::Out> rout;
              size_t need = 0;
              for (size_t i = 0; i < ns.size(); ++i) {
                rin.push_back(w[i].in());
                rout.push_back(ref[i].out());
                need = std::max(need, zk::cpu::linear_scratch(x.in(), w[i].in(), ref[i].out(), tw));
              }
              std::vector<float> scratch(need + 1);
              ZT_CPU_OK(zk::cpu::linear_multi(x.in(), rin.data(), rout.data(), static_cast<int>(ns.size()), tw,
                                              0.5f, scratch.data()));
            }
            for (size_t i = 0; i < ns.size(); ++i) {
              dw.push_back(std::make_unique<DevT>(w[i]));
              dy.push_back(std::make_unique<DevT>(t, out_shape(ns[i])));
              dy.back()->poison();
              win[i] = dw.back()->in();
              yout[i] = dy.back()->out();
            }
            ZT_GPU_OK(zc::linear_multi(*blas, dx.in(), win, yout, static_cast<int>(ns.size()), tw, 0.5f, nullptr));
            for (size_t i = 0; i < ns.size(); ++i) EXPECT_TRUE(close(dy[i]->download(), ref[i], tol)) << "output " << i;
            ++cases;
            // The streaming kernel too, where it holds the product (the plan's code 2).
            if (zc::stream_holds(tw, M, K, ns.data(), static_cast<int>(ns.size()))) {
              for (auto& y : dy) y->poison();
              ZT_GPU_OK(zc::linear_multi(*blas, dx.in(), win, yout, static_cast<int>(ns.size()), tw, 0.5f, nullptr,
                                         zc::FewRows::stream));
              for (size_t i = 0; i < ns.size(); ++i)
                EXPECT_TRUE(close(dy[i]->download(), ref[i], tol)) << "streaming kernel, output " << i;
              ++cases;
            }
          }
          for (zk::cpu::Unary act : acts)
            for (int64_t N : {176, 45}) {
              SCOPED_TRACE(std::string(zk::dtype_name(t)) + " gated M " + std::to_string(M) + " K " +
                           std::to_string(K) + " N " + std::to_string(N) + " act " +
                           std::to_string(static_cast<int>(act)) + (tw ? " W [N, K]" : " W [K, N]"));
              HostT wg = random_tensor(t, tw ? Dims{N, K} : Dims{K, N}, -0.2f, 0.2f),
                    wu = random_tensor(t, tw ? Dims{N, K} : Dims{K, N}, -0.2f, 0.2f);
              HostT ref = gated_ref(act, x, wg, wu, tw, 0.5f, out_shape(N));
              DevT dwg(wg), dwu(wu), dy(t, out_shape(N));
              dy.poison();
              ZT_GPU_OK(zc::linear_gated(*blas, act, dx.in(), dwg.in(), dwu.in(), dy.out(), tw, 0.5f, nullptr));
              EXPECT_TRUE(close(dy.download(), ref, tol));
              ++cases;
              if (zc::stream_holds(tw, M, K, &N, 1)) {
                dy.poison();
                ZT_GPU_OK(zc::linear_gated(*blas, act, dx.in(), dwg.in(), dwu.in(), dy.out(), tw, 0.5f, nullptr,
                                           zc::FewRows::stream));
                EXPECT_TRUE(close(dy.download(), ref, tol)) << "streaming kernel";
                ++cases;
              }
            }
        }
  std::printf("fused few-row products: %d cases against the CPU reference\n", cases);
}

/// The launch shapes a test can force on the streaming kernel: its own choice ({0, 0}), then every strip width
/// (2, 4, 8 and 16 pieces of 16 bytes) by the K splits 1, 2, 3, 5 and 8 whose last block still has rows (the
/// launcher refuses the others).
std::vector<zc::StreamShape> stream_shapes(DType t, int64_t K) {
  const int ep = static_cast<int>(16 / zk::dtype_size(t));
  std::vector<zc::StreamShape> v{zc::StreamShape{}};
  for (int pieces : {2, 4, 8, 16})
    for (int splits : {1, 2, 3, 5, 8}) {
      const int64_t rl = 256 / pieces, kc = ((K + splits - 1) / splits + rl - 1) / rl * rl;
      if (splits > 1 && (splits - 1) * kc >= K) continue;
      v.push_back(zc::StreamShape{pieces * ep, splits});
    }
  return v;
}

std::string shape_name(const zc::StreamShape& sh) {
  return sh.cols == 0 ? std::string("its choice") : std::to_string(sh.cols) + " columns x " + std::to_string(sh.splits) + " splits";
}

/// Session 7's launch shape of the streaming kernel, kept here to time it against: the widest strip of 8, 4
/// and 2 pieces that still gives two strips an SM (else 2 pieces), K unsplit (one block over the whole of K).
zc::StreamShape session7_shape(DType t, const std::vector<int64_t>& n, bool gated) {
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int ep = static_cast<int>(16 / zk::dtype_size(t));
  for (int pieces : {8, 4, 2}) {
    const int64_t cols = gated ? pieces * ep / 2 : pieces * ep;
    int64_t strips = 0;
    for (int64_t w : n) strips += (w + cols - 1) / cols;
    if (strips >= 2 * sms) return zc::StreamShape{pieces * ep, 1};
  }
  return zc::StreamShape{2 * ep, 1};
}

/// The median of 21 timed runs (3 more untimed first) of `run`, the L2 cleared before each by a 256 MiB memset
/// (a decode step finds its weights in HBM), in microseconds.
template <class F>
float median_cold_us(F&& run, void* flush) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int it = 0; it < 24; ++it) {
    cudaMemsetAsync(flush, it & 1, size_t{256} << 20, nullptr);
    cudaEventRecord(e0);
    (void)run();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (it >= 3) ts.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2] * 1e3f;
}

// llama-1b's decode products at one row as the default plan runs them (q/k/v one launch of three weights, o,
// gate/up with SiLU one launch, down), through the streaming kernel in every launch shape it can take: its
// own choice, session 7's shape (whole-K strips) and each strip width x K split, each the median of 21 cold
// runs, with the rate at which the weights are read. Printed, not a pass/fail figure: the table the launch
// shape rule (choose_stream_shape) is checked against. Each output is checked against the first shape's.
// llama-1b's four decode products of a layer: K, the widths of the weights, gate/up (two weights of one width,
// SiLU), and whether a decode step runs it as norm_products (the residual add and RMS norm in the product).
struct Llama1bProduct {
  const char* name;
  int64_t K;
  std::vector<int64_t> n;
  bool gated, norm;
};
const Llama1bProduct kLlama1bProducts[] = {{"q/k/v", 2048, {2048, 512, 512}, false, true},
                                           {"o", 2048, {2048}, false, false},
                                           {"gate/up", 2048, {5632}, true, true},
                                           {"down", 5632, {2048}, false, false}};

TEST(CudaSkinnyStream, LaunchShapesAtLlama1bShapes) {
  DevBytes flush(size_t{256} << 20);
  const DType t = DType::bf16;
  for (const Llama1bProduct& p : kLlama1bProducts) {
    HostT x = random_tensor(t, Dims{1, p.K});
    DevT dx(x);
    std::vector<std::unique_ptr<DevT>> dw, dy;
    zk::In win[4];
    zk::Out yout[4];
    double bytes = 0;
    const int nw = p.gated ? 2 : static_cast<int>(p.n.size());
    for (int i = 0; i < nw; ++i) {
      const int64_t N = p.gated ? p.n[0] : p.n[static_cast<size_t>(i)];
      dw.push_back(std::make_unique<DevT>(random_tensor(t, Dims{p.K, N}, -0.05f, 0.05f)));
      win[i] = dw.back()->in();
      bytes += 2.0 * p.K * N;
    }
    for (int64_t N : p.n) {
      dy.push_back(std::make_unique<DevT>(t, Dims{1, N}));
      yout[dy.size() - 1] = dy.back()->out();
    }
    auto run = [&](const zc::StreamShape& sh) {
      if (p.gated)
        return zc::skinny_linear_gated(zk::cpu::Unary::silu, dx.in(), win[0], win[1], yout[0], false, 1.0f, true,
                                       nullptr, zc::FewRows::stream, sh);
      if (nw > 1) return zc::skinny_linear_multi(dx.in(), win, yout, nw, false, 1.0f, true, nullptr, zc::FewRows::stream, sh);
      return zc::skinny_linear(dx.in(), win[0], zk::In{}, yout[0], false, 1.0f, zc::Epilogue::none, true, nullptr,
                               zc::FewRows::stream, sh);
    };
    const zc::StreamShape chosen = zc::skinny_stream_shape(t, p.K, p.n.data(), static_cast<int>(p.n.size()), p.gated);
    std::vector<zc::StreamShape> shapes = {chosen, session7_shape(t, p.n, p.gated)};
    for (const zc::StreamShape& sh : stream_shapes(t, p.K))
      if (sh.cols != 0) shapes.push_back(sh);
    ZT_GPU_OK(run(shapes[0]));
    std::vector<HostT> first;
    for (auto& y : dy) first.push_back(y->download());
    float best = 1e30f;
    zc::StreamShape best_shape{};
    for (size_t k = 0; k < shapes.size(); ++k) {
      const zc::StreamShape& sh = shapes[k];
      ZT_GPU_OK(run(sh));
      for (size_t i = 0; i < dy.size(); ++i)
        EXPECT_TRUE(close(dy[i]->download(), first[i], 2 * tol_for(t))) << p.name << " " << shape_name(sh);
      const float us = median_cold_us([&] { return run(sh); }, flush.ptr);
      if (us < best) {
        best = us;
        best_shape = sh;
      }
      std::printf("stream shape %-8s %3d cols x %d splits %8.2f us %6.0f GB/s%s\n", p.name, sh.cols, sh.splits, us,
                  bytes / (us * 1e-6) / 1e9, k == 0 ? "  (its choice)" : k == 1 ? "  (session 7's)" : "");
    }
    std::printf("stream shape %-8s best %d cols x %d splits %.2f us; its choice %d x %d\n", p.name, best_shape.cols,
                best_shape.splits, best, chosen.cols, chosen.splits);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// llama-1b's decode products at one row as a decode step runs them through the streaming kernel in its own
// launch shape: q/k/v and gate/up as norm_products (the residual add and RMS norm in every block), o and down
// plain. Each product alone (the median of 21 cold runs), then four layers' products back to back as
// programmatic launches with the weights read before the wait (the median of 11 chains, the L2 cleared before
// each). Printed, not a pass/fail figure: what the prologue and the reduction cost where a kernel waits for the
// one before it.
TEST(CudaSkinnyStream, NormLayerChainTiming) {
  DevBytes flush(size_t{256} << 20);
  const DType t = DType::bf16;
  const Llama1bProduct* products = kLlama1bProducts;
  constexpr int kLayers = 4;
  struct Bufs {
    std::unique_ptr<DevT> x, res, scale, sum;
    std::vector<std::unique_ptr<DevT>> w, y;
    zk::In win[4];
    zk::Out yout[4];
  };
  std::vector<std::vector<Bufs>> bufs(kLayers);  // [layer][product]
  std::vector<double> bytes(4, 0.0);
  for (int l = 0; l < kLayers; ++l)
    for (size_t pi = 0; pi < 4; ++pi) {
      const Llama1bProduct& p = products[pi];
      Bufs b;
      b.x = std::make_unique<DevT>(random_tensor(t, Dims{1, p.K}));
      b.res = std::make_unique<DevT>(random_tensor(t, Dims{1, p.K}));
      b.scale = std::make_unique<DevT>(random_tensor(t, Dims{p.K}, 0.5f, 1.5f));
      b.sum = std::make_unique<DevT>(t, Dims{1, p.K});
      const int nw = p.gated ? 2 : static_cast<int>(p.n.size());
      for (int i = 0; i < nw; ++i) {
        const int64_t N = p.gated ? p.n[0] : p.n[static_cast<size_t>(i)];
        b.w.push_back(std::make_unique<DevT>(random_tensor(t, Dims{p.K, N}, -0.05f, 0.05f)));
        b.win[i] = b.w.back()->in();
        if (l == 0) bytes[pi] += 2.0 * p.K * N;
      }
      for (int64_t N : p.n) {
        b.y.push_back(std::make_unique<DevT>(t, Dims{1, N}));
        b.yout[b.y.size() - 1] = b.y.back()->out();
      }
      bufs[static_cast<size_t>(l)].push_back(std::move(b));
    }
  auto run = [&](size_t pi, int l) {
    const Llama1bProduct& p = products[pi];
    Bufs& b = bufs[static_cast<size_t>(l)][pi];
    const int nw = p.gated ? 2 : static_cast<int>(p.n.size());
    if (p.norm)
      return zc::skinny_norm_products(b.x->in(), b.res->in(), b.scale->in(), b.win, b.sum->out(), b.yout, nw,
                                      zk::cpu::Unary::silu, p.gated, 1.0f, 1e-5f, true, nullptr);
    return zc::skinny_linear(b.x->in(), b.win[0], zk::In{}, b.yout[0], false, 1.0f, zc::Epilogue::none, true,
                             nullptr, zc::FewRows::stream);
  };
  double layer_bytes = 0;
  for (size_t pi = 0; pi < 4; ++pi) {
    const Llama1bProduct& p = products[pi];
    ZT_GPU_OK(run(pi, 0));
    const float us = median_cold_us([&] { return run(pi, 0); }, flush.ptr);
    const zc::StreamShape sh = zc::skinny_stream_shape(t, p.K, p.n.data(), static_cast<int>(p.n.size()), p.gated);
    std::printf("norm chain product %-8s %3d cols x %d splits %8.2f us %6.0f GB/s\n", p.name, sh.cols, sh.splits, us,
                bytes[pi] / (us * 1e-6) / 1e9);
    layer_bytes += bytes[pi];
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int it = 0; it < 14; ++it) {
    cudaMemsetAsync(flush.ptr, it & 1, size_t{256} << 20, nullptr);
    cudaEventRecord(e0);
    for (int l = 0; l < kLayers; ++l)
      for (size_t pi = 0; pi < 4; ++pi) EXPECT_TRUE(run(pi, l).ok());
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (it >= 3) ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  const float us = ts[ts.size() / 2] * 1e3f;
  std::printf("norm chain (%d layers, 1 row, its shapes) %8.2f us, %6.2f us a layer, %5.0f GB/s\n", kLayers, us,
              us / kLayers, kLayers * layer_bytes / (us * 1e-6) / 1e9);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The streaming kernel (the plan's kernel code 2) in every launch shape it can take (strip width x K split:
// one block per strip unsplit, a cluster of 2 to 8 blocks whose partial sums are added in distributed shared
// memory otherwise) against the CPU reference kernels: the plain product with each epilogue, three weights of
// different widths in one launch (linear_multi), the gated pair (linear_gated, SiLU); rows 1-4; K 64, 1000,
// 1003 (rows of x not 16-byte aligned: the prologue's element loads) and 2056 (K-slabs that end mid-tile); f32,
// bf16 and f16; every output poisoned first.
TEST(CudaSkinnyStream, EveryLaunchShapeMatchesCpuReference) {
  int cases = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (int64_t K : {64, 1000, 1003, 2056})
      for (int64_t M : {1, 2, 3, 4}) {
        const float tol = t == DType::f32 ? 1e-4f : 2 * tol_for(t);
        HostT x = random_tensor(t, Dims{M, K});
        DevT dx(x);
        const auto e = static_cast<zc::Epilogue>((M + K) % 4);
        const bool with_bias = e == zc::Epilogue::bias || e == zc::Epilogue::gelu_bias;
        HostT w = random_tensor(t, Dims{K, 520}, -0.2f, 0.2f), bias = random_tensor(t, Dims{520});
        HostT ref = linear_ref(x, w, with_bias ? &bias : nullptr, false, 0.5f, e, Dims{M, 520});
        DevT dw(w), db(bias), dy(t, Dims{M, 520});
        const std::vector<int64_t> ns = {136, 64, 264};
        std::vector<HostT> mw, mref;
        std::vector<std::unique_ptr<DevT>> dmw, dmy;
        zk::In win[3], wdev[3];
        zk::Out rout[3], yout[3];
        size_t need = 0;
        for (size_t i = 0; i < ns.size(); ++i) {
          mw.push_back(random_tensor(t, Dims{K, ns[i]}, -0.2f, 0.2f));
          mref.emplace_back(t, Dims{M, ns[i]});
        }
        for (size_t i = 0; i < ns.size(); ++i) {
          win[i] = mw[i].in();
          rout[i] = mref[i].out();
          need = std::max(need, zk::cpu::linear_scratch(x.in(), win[i], rout[i], false));
          dmw.push_back(std::make_unique<DevT>(mw[i]));
          dmy.push_back(std::make_unique<DevT>(t, Dims{M, ns[i]}));
          wdev[i] = dmw.back()->in();
          yout[i] = dmy.back()->out();
        }
        std::vector<float> scratch(need + 1);
        ZT_CPU_OK(zk::cpu::linear_multi(x.in(), win, rout, 3, false, 0.5f, scratch.data()));
        HostT wg = random_tensor(t, Dims{K, 264}, -0.2f, 0.2f), wu = random_tensor(t, Dims{K, 264}, -0.2f, 0.2f);
        HostT gref = gated_ref(zk::cpu::Unary::silu, x, wg, wu, false, 0.5f, Dims{M, 264});
        DevT dwg(wg), dwu(wu), dh(t, Dims{M, 264});
        for (const zc::StreamShape& sh : stream_shapes(t, K)) {
          SCOPED_TRACE(std::string(zk::dtype_name(t)) + " M " + std::to_string(M) + " K " + std::to_string(K) + ", " +
                       shape_name(sh));
          dy.poison();
          ZT_GPU_OK(zc::skinny_linear(dx.in(), dw.in(), with_bias ? db.in() : zk::In{}, dy.out(), false, 0.5f, e,
                                      (M + K) % 2 == 0, nullptr, zc::FewRows::stream, sh));
          EXPECT_TRUE(close(dy.download(), ref, tol)) << "plain, epilogue " << static_cast<int>(e);
          for (auto& y : dmy) y->poison();
          ZT_GPU_OK(zc::skinny_linear_multi(dx.in(), wdev, yout, 3, false, 0.5f, true, nullptr, zc::FewRows::stream, sh));
          for (size_t i = 0; i < ns.size(); ++i) EXPECT_TRUE(close(dmy[i]->download(), mref[i], tol)) << "multi " << i;
          dh.poison();
          ZT_GPU_OK(zc::skinny_linear_gated(zk::cpu::Unary::silu, dx.in(), dwg.in(), dwu.in(), dh.out(), false, 0.5f,
                                            false, nullptr, zc::FewRows::stream, sh));
          EXPECT_TRUE(close(dh.download(), gref, tol)) << "gated";
          cases += 3;
        }
      }
  std::printf("streaming kernel: %d products in every launch shape against the CPU reference\n", cases);
  // What it does not hold is refused, not run wrong: W [N, K], five rows, a width not a multiple of 8.
  HostT x = random_tensor(DType::bf16, Dims{5, 64}), w = random_tensor(DType::bf16, Dims{64, 64}),
        w12 = random_tensor(DType::bf16, Dims{64, 12});
  DevT dx(x), dw(w), dw12(w12), dy(DType::bf16, Dims{5, 64}), dy1(DType::bf16, Dims{1, 64}), dy12(DType::bf16, Dims{1, 12});
  const zk::In x1{dx.ptr, DType::bf16, Dims{1, 64}};
  EXPECT_FALSE(zc::skinny_linear(x1, dw.in(), zk::In{}, dy1.out(), true, 1.0f, zc::Epilogue::none, false, nullptr,
                                 zc::FewRows::stream).ok());
  EXPECT_FALSE(zc::skinny_linear(dx.in(), dw.in(), zk::In{}, dy.out(), false, 1.0f, zc::Epilogue::none, false,
                                 nullptr, zc::FewRows::stream).ok());
  EXPECT_FALSE(zc::skinny_linear(x1, dw12.in(), zk::In{}, dy12.out(), false, 1.0f, zc::Epilogue::none, false,
                                 nullptr, zc::FewRows::stream).ok());
}

// llama-1b's fused decode products in bf16 (q / k / v: 2048 -> 2048, 512, 512; gate / up: 2048 -> 5632 with
// SiLU) at 1, 8 and 16 rows against the CPU reference, then their time against the unfused steps they replace
// (three cuBLASLt products; two cuBLASLt products and the gated kernel), each the median of 21 runs with the
// L2 cleared before each. Printed, not a pass/fail figure.
TEST(CudaSkinnyFused, Llama1bShapesAndTiming) {
  std::unique_ptr<zc::Blas> blas;
  ZT_GPU_OK(zc::Blas::create(&blas));
  DevBytes ws(zc::kGemmWorkspaceBytes), flush(size_t{256} << 20);
  const DType t = DType::bf16;
  const int64_t K = 2048, F = 5632;
  const int64_t qkv[3] = {2048, 512, 512};
  HostT wq = random_tensor(t, Dims{K, qkv[0]}, -0.05f, 0.05f), wk = random_tensor(t, Dims{K, qkv[1]}, -0.05f, 0.05f),
        wv = random_tensor(t, Dims{K, qkv[2]}, -0.05f, 0.05f);
  HostT wg = random_tensor(t, Dims{K, F}, -0.05f, 0.05f), wu = random_tensor(t, Dims{K, F}, -0.05f, 0.05f);
  DevT dwq(wq), dwk(wk), dwv(wv), dwg(wg), dwu(wu);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int64_t M : {1, 8, 16}) {
    SCOPED_TRACE("M " + std::to_string(M));
    HostT x = random_tensor(t, Dims{M, K});
    DevT dx(x), dq(t, Dims{M, qkv[0]}), dk(t, Dims{M, qkv[1]}), dv(t, Dims{M, qkv[2]}), dh(t, Dims{M, F}),
        dg(t, Dims{M, F}), du(t, Dims{M, F});
    const zk::In w3[3] = {dwq.in(), dwk.in(), dwv.in()};
    const zk::Out o3[3] = {dq.out(), dk.out(), dv.out()};
    auto fused_qkv = [&] { return zc::linear_multi(*blas, dx.in(), w3, o3, 3, false, 1.0f, nullptr); };
    auto fused_mlp = [&] {
      return zc::linear_gated(*blas, zk::cpu::Unary::silu, dx.in(), dwg.in(), dwu.in(), dh.out(), false, 1.0f,
                              nullptr);
    };
    dq.poison();
    dk.poison();
    dv.poison();
    dh.poison();
    ZT_GPU_OK(fused_qkv());
    ZT_GPU_OK(fused_mlp());
    const HostT* ws3[3] = {&wq, &wk, &wv};
    DevT* outs3[3] = {&dq, &dk, &dv};
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(close(outs3[i]->download(),
                        linear_ref(x, *ws3[i], nullptr, false, 1.0f, zc::Epilogue::none, Dims{M, qkv[i]}),
                        tol_for(t)))
          << "q/k/v output " << i;
    EXPECT_TRUE(close(dh.download(), gated_ref(zk::cpu::Unary::silu, x, wg, wu, false, 1.0f, Dims{M, F}),
                      2 * tol_for(t)));
    auto median_us = [&](auto&& run) {
      std::vector<float> ts;
      for (int it = 0; it < 24; ++it) {
        cudaMemsetAsync(flush.ptr, it & 1, size_t{256} << 20, nullptr);
        cudaEventRecord(e0);
        (void)run();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (it >= 3) ts.push_back(ms);
      }
      std::sort(ts.begin(), ts.end());
      return ts[ts.size() / 2] * 1e3f;
    };
    auto lt = [&](const DevT& w, DevT& y) {
      return zc::linear(*blas, dx.in(), w.in(), zk::In{}, y.out(), false, 1.0f, zc::Epilogue::none, ws.ptr,
                        zc::kGemmWorkspaceBytes, nullptr, zc::FewRows::library);
    };
    const float f_qkv = median_us(fused_qkv), f_mlp = median_us(fused_mlp);
    const float u_qkv = median_us([&] {
      (void)lt(dwq, dq);
      (void)lt(dwk, dk);
      return lt(dwv, dv);
    });
    const float u_mlp = median_us([&] {
      (void)lt(dwg, dg);
      (void)lt(dwu, du);
      return zc::gated(zk::cpu::Unary::silu, dg.in(), du.in(), dh.out(), nullptr);
    });
    const double b_qkv = 2.0 * K * (qkv[0] + qkv[1] + qkv[2]), b_mlp = 2.0 * 2 * K * F;
    std::printf("fused rows %2lld: q/k/v one launch %.2f us (%.0f GB/s), three cuBLASLt %.2f us; gate/up+silu one "
                "launch %.2f us (%.0f GB/s), two cuBLASLt + gated %.2f us\n",
                static_cast<long long>(M), f_qkv, b_qkv / (f_qkv * 1e-6) / 1e9, u_qkv, f_mlp,
                b_mlp / (f_mlp * 1e-6) / 1e9, u_mlp);
    if (M <= 4) {
      // The streaming kernel (the plan's code 2), checked and timed the same way.
      dq.poison();
      dh.poison();
      ZT_GPU_OK(zc::linear_multi(*blas, dx.in(), w3, o3, 3, false, 1.0f, nullptr, zc::FewRows::stream));
      ZT_GPU_OK(zc::linear_gated(*blas, zk::cpu::Unary::silu, dx.in(), dwg.in(), dwu.in(), dh.out(), false, 1.0f,
                                 nullptr, zc::FewRows::stream));
      EXPECT_TRUE(close(dq.download(), linear_ref(x, wq, nullptr, false, 1.0f, zc::Epilogue::none, Dims{M, qkv[0]}),
                        tol_for(t)));
      EXPECT_TRUE(close(dh.download(), gated_ref(zk::cpu::Unary::silu, x, wg, wu, false, 1.0f, Dims{M, F}),
                        2 * tol_for(t)));
      const float s_qkv = median_us([&] { return zc::linear_multi(*blas, dx.in(), w3, o3, 3, false, 1.0f, nullptr,
                                                                  zc::FewRows::stream); });
      const float s_mlp = median_us([&] {
        return zc::linear_gated(*blas, zk::cpu::Unary::silu, dx.in(), dwg.in(), dwu.in(), dh.out(), false, 1.0f,
                                nullptr, zc::FewRows::stream);
      });
      std::printf("fused rows %2lld, streaming kernel: q/k/v %.2f us (%.0f GB/s); gate/up+silu %.2f us (%.0f GB/s)\n",
                  static_cast<long long>(M), s_qkv, b_qkv / (s_qkv * 1e-6) / 1e9, s_mlp, b_mlp / (s_mlp * 1e-6) / 1e9);
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

// The timing table of the decode products at llama-1b's shapes (bf16): cuBLASLt, the cluster kernels (1 to 16
// rows) and the streaming kernel (1 to 4 rows; in its launch shape and in session 7's), at 1, 4, 8, 16 and 64
// rows, each the median of 21 runs with the L2 cleared before each (a decode step finds its weights in HBM),
// and the rate at which the weight is read. Not a pass/fail figure; the compiler's rule
// (--few-rows-max-rows / --few-rows-max-bytes / --few-rows-kernel) follows it.
TEST(CudaSkinnyLinear, TimingAtLlama1bShapes) {
  std::unique_ptr<zc::Blas> blas;
  ZT_GPU_OK(zc::Blas::create(&blas));
  DevBytes ws(zc::kGemmWorkspaceBytes), flush(size_t{256} << 20);
  struct Shape {
    const char* name;
    int64_t K, N;
  };
  const Shape shapes[] = {{"q/o", 2048, 2048},
                          {"k/v", 2048, 512},
                          {"gate/up", 2048, 5632},
                          {"down", 5632, 2048},
                          {"lm_head", 2048, 32000}};
  std::printf("skinny %-8s %4s %10s %10s %10s %10s %10s %8s\n", "product", "rows", "cublas us", "cluster us",
              "stream us", "GB/s", "s7 shape", "fastest");
  for (const Shape& sh : shapes) {
    const DType t = DType::bf16;
    HostT w = random_tensor(t, Dims{sh.K, sh.N}, -0.05f, 0.05f);
    DevT dw(w);
    for (int64_t M : {1, 4, 8, 16, 64}) {
      HostT x = random_tensor(t, Dims{M, sh.K});
      DevT dx(x), dy(t, Dims{M, sh.N});
      auto lin = [&](zc::FewRows k) {
        return zc::linear(*blas, dx.in(), dw.in(), zk::In{}, dy.out(), false, 1.0f, zc::Epilogue::none, ws.ptr,
                          zc::kGemmWorkspaceBytes, nullptr, k);
      };
      const double bytes = 2.0 * sh.K * sh.N;
      const bool cluster = M <= zc::kSkinnyMaxRows, stream = zc::stream_holds(false, M, sh.K, &sh.N, 1);
      const float lt = median_cold_us([&] { return lin(zc::FewRows::library); }, flush.ptr);
      const float cl = cluster ? median_cold_us([&] { return lin(zc::FewRows::cluster); }, flush.ptr) : 0.0f;
      const float st = stream ? median_cold_us([&] { return lin(zc::FewRows::stream); }, flush.ptr) : 0.0f;
      const zc::StreamShape s7 = session7_shape(t, {sh.N}, false);
      const float old = stream ? median_cold_us([&] {
        return zc::skinny_linear(dx.in(), dw.in(), zk::In{}, dy.out(), false, 1.0f, zc::Epilogue::none, false, nullptr,
                                 zc::FewRows::stream, s7);
      }, flush.ptr) : 0.0f;
      char c_us[32] = "-", s_us[32] = "-", s_rate[32] = "-", o_us[32] = "-";
      if (cluster) std::snprintf(c_us, sizeof c_us, "%.2f", cl);
      if (stream) {
        std::snprintf(s_us, sizeof s_us, "%.2f", st);
        std::snprintf(s_rate, sizeof s_rate, "%.0f", bytes / (st * 1e-6) / 1e9);
        std::snprintf(o_us, sizeof o_us, "%.2f", old);
      }
      const char* fastest = "cublas";
      float f = lt;
      if (cluster && cl < f) f = cl, fastest = "cluster";
      if (stream && st < f) f = st, fastest = "stream";
      std::printf("skinny %-8s %4lld %10.2f %10s %10s %10s %10s %8s   (cublas %.0f GB/s)\n", sh.name,
                  static_cast<long long>(M), lt, c_us, s_us, s_rate, o_us, fastest, bytes / (lt * 1e-6) / 1e9);
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// norm_products (the residual add and RMS norm folded into the few-row products) against the CPU reference
// (the add, rms_norm and linear_multi / linear_gated kernels in a row): one to three weights and the gated
// pair, rows 1-4, K 64 / 1003 (rows not 16-byte aligned: the prologue's element loads) / 2048 / 5632, f32 / bf16
// / f16; the sum and every product poisoned first.
TEST(CudaSkinnyFused, NormProductsMatchCpuReference) {
  std::unique_ptr<zc::Blas> blas;
  ZT_GPU_OK(zc::Blas::create(&blas));
  int cases = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (int64_t K : {64, 1003, 2048, 5632})
      for (int64_t M : {1, 2, 3, 4}) {
        if (M * K * 4 > 64 * 1024 || (M == 3 && K * 4 * 4 > 64 * 1024)) continue;
        for (int form = 0; form < 3; ++form) {
          // form 0: one weight; 1: three weights of different widths; 2: the gated pair with SiLU.
          const bool gated = form == 2;
          const std::vector<int64_t> ns = form == 0 ? std::vector<int64_t>{1024}
                                          : form == 1 ? std::vector<int64_t>{512, 128, 136}
                                                      : std::vector<int64_t>{264, 264};
          SCOPED_TRACE(std::string(zk::dtype_name(t)) + " M " + std::to_string(M) + " K " + std::to_string(K) +
                       " form " + std::to_string(form));
          HostT x = random_tensor(t, Dims{M, 1, K}), r = random_tensor(t, Dims{M, 1, K}),
                g = random_tensor(t, Dims{K}, 0.5f, 1.5f);
          std::vector<HostT> ws, refs;
          std::vector<std::unique_ptr<DevT>> dws, douts;
          zk::In win[4], wdev[4];
          zk::Out rout[4], dout[4];
          const int nout = gated ? 1 : static_cast<int>(ns.size());
          for (size_t i = 0; i < ns.size(); ++i) ws.push_back(random_tensor(t, Dims{K, ns[i]}, -0.1f, 0.1f));
          for (int i = 0; i < nout; ++i) refs.emplace_back(t, Dims{M, 1, ns[static_cast<size_t>(i)]});
          for (size_t i = 0; i < ns.size(); ++i) {
            win[i] = ws[i].in();
            dws.push_back(std::make_unique<DevT>(ws[i]));
            wdev[i] = dws.back()->in();
          }
          for (int i = 0; i < nout; ++i) {
            rout[i] = refs[static_cast<size_t>(i)].out();
            douts.push_back(std::make_unique<DevT>(t, refs[static_cast<size_t>(i)].shape));
            douts.back()->poison();
            dout[i] = douts.back()->out();
          }
          HostT sum(t, x.shape);
          std::vector<float> scratch(zk::cpu::norm_products_scratch(x.in(), win, rout, static_cast<int>(ns.size()),
                                                                   false, zk::cpu::Unary::silu, gated) + 1);
          ZT_CPU_OK(zk::cpu::norm_products(x.in(), r.in(), g.in(), win, sum.out(), rout, static_cast<int>(ns.size()),
                                           false, zk::cpu::Unary::silu, gated, 0.5f, 1e-5f, scratch.data()));
          DevT dx(x), dr(r), dg(g), dsum(t, x.shape);
          dsum.poison();
          ZT_GPU_OK(zc::norm_products(*blas, dx.in(), dr.in(), dg.in(), wdev, dsum.out(), dout,
                                      static_cast<int>(ns.size()), zk::cpu::Unary::silu, gated, 0.5f, 1e-5f, nullptr));
          EXPECT_TRUE(close(dsum.download(), sum, 0.0f)) << "sum";
          for (int i = 0; i < nout; ++i)
            EXPECT_TRUE(close(douts[static_cast<size_t>(i)]->download(), refs[static_cast<size_t>(i)],
                              t == DType::f32 ? 1e-4f : 2 * tol_for(t)))
                << "product " << i;
          ++cases;
          // Forced launch shapes: every block normalises the whole rows and keeps its K-slab; the K split's
          // partial sums meet in the cluster.
          const int ep = static_cast<int>(16 / zk::dtype_size(t));
          for (zc::StreamShape sh : {zc::StreamShape{2 * ep, 3}, zc::StreamShape{16 * ep, 5}, zc::StreamShape{8 * ep, 8}}) {
            const int64_t rl = 256 / (sh.cols / ep), kc = ((K + sh.splits - 1) / sh.splits + rl - 1) / rl * rl;
            if ((sh.splits - 1) * kc >= K) continue;
            SCOPED_TRACE(shape_name(sh));
            dsum.poison();
            for (auto& o : douts) o->poison();
            ZT_GPU_OK(zc::skinny_norm_products(dx.in(), dr.in(), dg.in(), wdev, dsum.out(), dout,
                                               static_cast<int>(ns.size()), zk::cpu::Unary::silu, gated, 0.5f, 1e-5f,
                                               true, nullptr, sh));
            EXPECT_TRUE(close(dsum.download(), sum, 0.0f)) << "sum";
            for (int i = 0; i < nout; ++i)
              EXPECT_TRUE(close(douts[static_cast<size_t>(i)]->download(), refs[static_cast<size_t>(i)],
                                t == DType::f32 ? 1e-4f : 2 * tol_for(t)))
                  << "product " << i;
            ++cases;
          }
        }
      }
  std::printf("norm_products: %d cases against the CPU reference\n", cases);
  // Outside the streaming kernel's cases (N not a multiple of 8): refused, not run wrong.
  HostT x = random_tensor(DType::bf16, Dims{1, 64}), w = random_tensor(DType::bf16, Dims{64, 12}),
        g = random_tensor(DType::bf16, Dims{64});
  DevT dx(x), dw(w), dg(g), ds(DType::bf16, x.shape), dy(DType::bf16, Dims{1, 12});
  const zk::In w1[1] = {dw.in()};
  const zk::Out o1[1] = {dy.out()};
  EXPECT_FALSE(zc::norm_products(*blas, dx.in(), dx.in(), dg.in(), w1, ds.out(), o1, 1, zk::cpu::Unary::silu, false,
                                 1.0f, 1e-5f, nullptr)
                   .ok());
}

// Four llama-1b layers' decode products at one row (bf16), launched back to back as a decode step launches
// them, each product reading the previous one's output: q/k/v (one linear_multi), o, gate/up with SiLU (one
// linear_gated), down. The weights (4 x 89 MiB, more than the L2) are read once per chain, after the L2 is
// cleared. Four ways: the streaming few-row kernel in its launch shape (the plan's code 2), the same kernel
// in session 7's shape (whole-K strips), the cluster kernels (code 1), and cuBLASLt for every product with
// the gated kernel after gate and up. No kernel writes the weights (early_weights, as a plan's Instr.early
// says), so the few-row kernels issue their weight loads before waiting for the previous kernel. The median of 11 chains; the outputs of the few-row ways are compared with each
// other. Printed, not a pass/fail figure.
TEST(CudaSkinnyFused, Llama1bLayerChainTiming) {
  std::unique_ptr<zc::Blas> blas;
  ZT_GPU_OK(zc::Blas::create(&blas));
  DevBytes ws(zc::kGemmWorkspaceBytes), flush(size_t{256} << 20);
  const DType t = DType::bf16;
  const int64_t H = 2048, KV = 512, F = 5632, M = 1;
  constexpr int kLayers = 4;
  HostT wq = random_tensor(t, Dims{H, H}, -0.03f, 0.03f), wk = random_tensor(t, Dims{H, KV}, -0.03f, 0.03f),
        wv = random_tensor(t, Dims{H, KV}, -0.03f, 0.03f), wo = random_tensor(t, Dims{H, H}, -0.03f, 0.03f),
        wg = random_tensor(t, Dims{H, F}, -0.03f, 0.03f), wu = random_tensor(t, Dims{H, F}, -0.03f, 0.03f),
        wd = random_tensor(t, Dims{F, H}, -0.02f, 0.02f);
  struct Layer {
    std::unique_ptr<DevT> q, k, v, o, g, u, d;
  };
  std::vector<Layer> layers(kLayers);
  for (Layer& l : layers) {
    l.q = std::make_unique<DevT>(wq);
    l.k = std::make_unique<DevT>(wk);
    l.v = std::make_unique<DevT>(wv);
    l.o = std::make_unique<DevT>(wo);
    l.g = std::make_unique<DevT>(wg);
    l.u = std::make_unique<DevT>(wu);
    l.d = std::make_unique<DevT>(wd);
  }
  HostT x = random_tensor(t, Dims{M, H});
  DevT dx(x), yq(t, Dims{M, H}), yk(t, Dims{M, KV}), yv(t, Dims{M, KV}), yo(t, Dims{M, H}), yg(t, Dims{M, F}),
      yu(t, Dims{M, F}), ya(t, Dims{M, F}), yd(t, Dims{M, H});
  // No kernel of the chain writes a weight: the products read theirs before the wait (early_weights).
  auto lin = [&](const DevT& in, const DevT& w, DevT& out, zc::FewRows few) {
    return zc::linear(*blas, in.in(), w.in(), zk::In{}, out.out(), false, 1.0f, zc::Epilogue::none, ws.ptr,
                      zc::kGemmWorkspaceBytes, nullptr, few, nullptr, true);
  };
  // The chain: x -> q/k/v; q -> o; o -> gate/up -> a; a -> down -> next layer's x (yd, then back through x).
  // way 0: the streaming kernel in its shape; 1: in session 7's; 2: the cluster kernels; 3: cuBLASLt.
  const zc::StreamShape s7_qkv = session7_shape(t, {H, KV, KV}, false), s7_o = session7_shape(t, {H}, false),
                        s7_mlp = session7_shape(t, {F}, true), s7_d = session7_shape(t, {H}, false);
  auto chain = [&](int way) {
    for (int i = 0; i < kLayers; ++i) {
      const Layer& l = layers[static_cast<size_t>(i)];
      const DevT& in = i == 0 ? dx : yd;
      const zk::In w3[3] = {l.q->in(), l.k->in(), l.v->in()};
      const zk::Out o3[3] = {yq.out(), yk.out(), yv.out()};
      if (way == 0 || way == 2) {
        const zc::FewRows k = way == 0 ? zc::FewRows::stream : zc::FewRows::cluster;
        ZT_GPU_OK(zc::linear_multi(*blas, in.in(), w3, o3, 3, false, 1.0f, nullptr, k, true));
        ZT_GPU_OK(lin(yq, *l.o, yo, k));
        ZT_GPU_OK(zc::linear_gated(*blas, zk::cpu::Unary::silu, yo.in(), l.g->in(), l.u->in(), ya.out(), false,
                                   1.0f, nullptr, k, true));
        ZT_GPU_OK(lin(ya, *l.d, yd, k));
      } else if (way == 1) {
        ZT_GPU_OK(zc::skinny_linear_multi(in.in(), w3, o3, 3, false, 1.0f, true, nullptr, zc::FewRows::stream, s7_qkv));
        ZT_GPU_OK(zc::skinny_linear(yq.in(), l.o->in(), zk::In{}, yo.out(), false, 1.0f, zc::Epilogue::none, true,
                                    nullptr, zc::FewRows::stream, s7_o));
        ZT_GPU_OK(zc::skinny_linear_gated(zk::cpu::Unary::silu, yo.in(), l.g->in(), l.u->in(), ya.out(), false, 1.0f,
                                          true, nullptr, zc::FewRows::stream, s7_mlp));
        ZT_GPU_OK(zc::skinny_linear(ya.in(), l.d->in(), zk::In{}, yd.out(), false, 1.0f, zc::Epilogue::none, true,
                                    nullptr, zc::FewRows::stream, s7_d));
      } else {
        ZT_GPU_OK(lin(in, *l.q, yq, zc::FewRows::library));
        ZT_GPU_OK(lin(in, *l.k, yk, zc::FewRows::library));
        ZT_GPU_OK(lin(in, *l.v, yv, zc::FewRows::library));
        ZT_GPU_OK(lin(yq, *l.o, yo, zc::FewRows::library));
        ZT_GPU_OK(lin(yo, *l.g, yg, zc::FewRows::library));
        ZT_GPU_OK(lin(yo, *l.u, yu, zc::FewRows::library));
        ZT_GPU_OK(zc::gated(zk::cpu::Unary::silu, yg.in(), yu.in(), ya.out(), nullptr));
        ZT_GPU_OK(lin(ya, *l.d, yd, zc::FewRows::library));
      }
    }
  };
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto median_us = [&](int way) {
    std::vector<float> ts;
    for (int it = 0; it < 14; ++it) {
      cudaMemsetAsync(flush.ptr, it & 1, size_t{256} << 20, nullptr);
      cudaEventRecord(e0);
      chain(way);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (it >= 3) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2] * 1e3f;
  };
  const double bytes = 2.0 * kLayers * (H * H + 2 * H * KV + H * H + 2 * H * F + F * H);
  const float stream_us = median_us(0);
  HostT out_stream = yd.download();
  const float s7_us = median_us(1);
  HostT out_s7 = yd.download();
  const float old_us = median_us(2);
  HostT out_old = yd.download();
  const float lt_us = median_us(3);
  EXPECT_TRUE(close(out_stream, out_old, 4 * tol_for(t)));
  EXPECT_TRUE(close(out_stream, out_s7, 4 * tol_for(t)));
  for (auto [name, us] : {std::pair<const char*, float>{"streaming kernel, its shape", stream_us},
                          {"streaming, session 7's shape", s7_us},
                          {"cluster kernels", old_us},
                          {"cuBLASLt + gated", lt_us}})
    std::printf("layer chain (%d layers, 1 row): %-26s %8.2f us, %6.2f us a layer, %5.0f GB/s\n", kLayers, name, us,
                us / kLayers, bytes / (us * 1e-6) / 1e9);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace zt
