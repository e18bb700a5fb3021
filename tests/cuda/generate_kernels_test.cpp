// The generation kernels against the CPU reference kernels, and their timings at llama-1b's shapes.
//
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
//
// The few-row products (kernels/cuda/skinny_gemm.cu) against the CPU reference linear: every row count 1..16,
// odd and even K and N, both weight layouts, every epilogue, three dtypes; chained launches (the programmatic
// launch must still wait for its input); linear's timed choice; and the timing table against cuBLASLt.
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
  const Case cases[] = {
      {1, 32, 8, 1, 768, 64},   // llama-1b, batch 1: 6 chunks, combined in a cluster
      {3, 32, 8, 1, 300, 64},   // a cache that is not a whole number of tiles
      {64, 32, 8, 1, 768, 64},  // llama-1b, batch 64: 3 chunks of 256 positions
      {2, 32, 32, 1, 1000, 128},  // llama2-7b's heads (no grouping), head dim 128: 8 chunks, one full cluster
      {2, 16, 2, 1, 2049, 128},   // 8 query heads per K/V head; 17 chunks: the workspace and the combine kernel
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
  for (DType t : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(zk::dtype_name(t));
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
                                  true, s));
      ZT_GPU_OK(zc::skinny_linear(a.in(), dws[1]->in(), zk::In{}, b.out(), false, 1.0f, zc::Epilogue::none,
                                  true, s));
      ZT_GPU_OK(zc::skinny_linear(b.in(), dws[2]->in(), zk::In{}, a.out(), false, 1.0f, zc::Epilogue::none,
                                  true, s));
      ZT_GPU_OK(zc::unary(zk::cpu::Unary::tanh, a.in(), b.out(), s));
      ZT_GPU_OK(zc::skinny_linear(b.in(), dws[3]->in(), zk::In{}, a.out(), false, 1.0f, zc::Epilogue::none,
                                  true, s));
      // A cuBLASLt product (no workspace) between two of ours.
      zc::set_skinny_mode(0);
      ZT_GPU_OK(zc::linear(*blas, a.in(), dws[4]->in(), zk::In{}, b.out(), false, 1.0f, zc::Epilogue::none,
                           nullptr, 0, s));
      zc::set_skinny_mode(-1);
      ZT_GPU_OK(zc::skinny_linear(b.in(), dws[5]->in(), zk::In{}, a.out(), false, 1.0f, zc::Epilogue::none,
                                  true, s));
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      ASSERT_TRUE(close(a.download(), y, 4 * tol_for(t))) << "repeat " << rep;
    }
    cudaStreamDestroy(s);
  }
}

// linear() picks the few-row kernel or cuBLASLt by timing them on the shape; either way the result is the
// product (checked against the reference after the choice, and on the run that makes it).
TEST(CudaSkinnyLinear, LinearChoosesByMeasurement) {
  std::unique_ptr<zc::Blas> blas;
  ZT_GPU_OK(zc::Blas::create(&blas));
  DevBytes ws(zc::kGemmWorkspaceBytes);
  zc::set_skinny_mode(-1);
  for (int64_t M : {1, 8, 16, 17}) {
    SCOPED_TRACE("M " + std::to_string(M));
    const DType t = DType::bf16;
    const int64_t K = 2048, N = 2048;
    HostT x = random_tensor(t, Dims{M, K}), w = random_tensor(t, Dims{K, N}, -0.05f, 0.05f),
          bias = random_tensor(t, Dims{N});
    HostT ref = linear_ref(x, w, &bias, false, 1.0f, zc::Epilogue::gelu_bias, Dims{M, N});
    DevT dx(x), dw(w), db(bias), dy(t, ref.shape);
    for (int run = 0; run < 2; ++run) {
      dy.poison();
      ZT_GPU_OK(zc::linear(*blas, dx.in(), dw.in(), db.in(), dy.out(), false, 1.0f, zc::Epilogue::gelu_bias,
                           ws.ptr, zc::kGemmWorkspaceBytes, nullptr));
      EXPECT_TRUE(close(dy.download(), ref, tol_for(t))) << "run " << run;
    }
    // matmul with one weight matrix goes the same way.
    HostT ref2 = linear_ref(x, w, nullptr, false, 1.0f, zc::Epilogue::none, Dims{M, N});
    dy.poison();
    ZT_GPU_OK(zc::matmul(*blas, dx.in(), dw.in(), dy.out(), false, false, ws.ptr, zc::kGemmWorkspaceBytes,
                         nullptr));
    EXPECT_TRUE(close(dy.download(), ref2, tol_for(t)));
  }
}

// The timing table of the decode products at llama-1b's shapes (bf16): the few-row kernel against cuBLASLt at
// 1, 8 and 16 rows, cuBLASLt alone at 64 (beyond the kernel's rows), each the median of 21 runs with the L2
// cleared before each (a decode step finds its weights in HBM), and the rate at which the weight is read.
// Not a pass/fail figure; what the runtime runs is chosen per shape by the same kind of timing.
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
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::printf("skinny %-8s %4s %10s %10s %10s %10s %8s\n", "product", "rows", "ours us", "ours GB/s",
              "cublas us", "cublas GB/s", "faster");
  for (const Shape& sh : shapes) {
    const DType t = DType::bf16;
    HostT w = random_tensor(t, Dims{sh.K, sh.N}, -0.05f, 0.05f);
    DevT dw(w);
    for (int64_t M : {1, 8, 16, 64}) {
      HostT x = random_tensor(t, Dims{M, sh.K});
      DevT dx(x), dy(t, Dims{M, sh.N});
      auto time = [&](bool ours) {
        zc::set_skinny_mode(ours ? 1 : 0);
        std::vector<float> ts;
        for (int it = 0; it < 24; ++it) {
          cudaMemsetAsync(flush.ptr, it & 1, size_t{256} << 20, nullptr);
          cudaEventRecord(e0);
          (void)zc::linear(*blas, dx.in(), dw.in(), zk::In{}, dy.out(), false, 1.0f, zc::Epilogue::none,
                           ws.ptr, zc::kGemmWorkspaceBytes, nullptr);
          cudaEventRecord(e1);
          cudaEventSynchronize(e1);
          float ms = 0;
          cudaEventElapsedTime(&ms, e0, e1);
          if (it >= 3) ts.push_back(ms);
        }
        std::sort(ts.begin(), ts.end());
        return ts[ts.size() / 2] * 1e3f;
      };
      const double bytes = 2.0 * sh.K * sh.N;
      const bool fits = M <= zc::kSkinnyMaxRows;
      const float ours = fits ? time(true) : 0.0f, lt = time(false);
      char o_us[32] = "-", o_rate[32] = "-";
      if (fits) {
        std::snprintf(o_us, sizeof o_us, "%.2f", ours);
        std::snprintf(o_rate, sizeof o_rate, "%.0f", bytes / (ours * 1e-6) / 1e9);
      }
      std::printf("skinny %-8s %4lld %10s %10s %10.2f %10.0f %8s\n", sh.name, static_cast<long long>(M), o_us,
                  o_rate, lt, bytes / (lt * 1e-6) / 1e9,
                  !fits        ? "cublas"
                  : ours <= lt ? "ours"
                               : "cublas");
    }
  }
  zc::set_skinny_mode(-1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace zt
