// Times the CUDA kernels and cuBLASLt products at the sizes of the benchmark models (batch 8, sequence
// 1024, bf16) and prints one line per kernel: median time, achieved TFLOP/s or GB/s, and the ceiling it is
// measured against (a device-to-device copy and an 8192^3 bf16 product, both timed here first).
// Inputs are random (never zeros: zeros run faster than real data on this hardware).
//
// `zplan_cuda_kernel_bench --memory` times only the copy ceiling and the memory-bound kernels of the llama
// forwards at their benchmark shapes (llama2-7b batch 4 and llama-1b batch 8, seq 1024, bf16): residual + RMS
// norm, RMS norm, the gated SiLU product and rotary (head-major and sequence-major), each with the bytes it
// must move at least (every operand read once, every output written once; the rotary tables, which stay
// in cache, not counted) and that rate as a share of the copy's. bench/gpu/elementwise_peers.py times
// PyTorch's eager and compiled forms of the same ops at the same shapes.
//
// `zplan_cuda_kernel_bench --gemm` times the llama forwards' products (row-major x [M, K] times W [K, N], as
// their plans hold them) as zk::cuda::linear runs them (cuBLASLt's first heuristic answer), then every
// algorithm of cuBLASLt's first 24 answers, with the configuration of each (what a fixed choice would name),
// and the residual add in the product's epilogue (beta = 1, C the residual, D another buffer) against the
// plain product: what choosing another algorithm, or folding the residual into the product, is worth.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_check.h"
#include "zk/cuda_kernels.h"
#include "zk/cuda_rotary.h"
#include "zk/cuda_train_kernels.h"

namespace {

namespace zc = zk::cuda;
using zk::Dims;
using zk::DType;

struct Buf {
  void *p = nullptr;
  DType t;
  Dims s;
  Buf(DType t_, Dims s_) : t(t_), s(s_) {
    const size_t n = static_cast<size_t>(s.numel());
    CHECK_CUDA(cudaMalloc(&p, n * zk::dtype_size(t)));
    std::vector<uint8_t> h(n * zk::dtype_size(t));
    std::mt19937 g(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) zk::store_f32(h.data(), t, static_cast<int64_t>(i), u(g));
    CHECK_CUDA(cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice));
  }
  ~Buf() { cudaFree(p); }
  zk::In in() const { return zk::In{p, t, s}; }
  zk::Out out() { return zk::Out{p, t, s}; }
};

/// Median milliseconds of `reps` runs of f after `warm` warm-up runs, timed with events on `s`.
double time_ms(cudaStream_t s, const std::function<void()> &f, int warm = 3, int reps = 20) {
  for (int i = 0; i < warm; ++i) f();
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<double> v;
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a, s));
    f();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    v.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Copy rate (read + write bytes per second, GB/s) of a 2 GiB device-to-device copy: the ceiling of the
/// memory-bound kernels.
double copy_ceiling(cudaStream_t s) {
  const size_t cb = size_t{2} << 30;
  void *c0, *c1;
  CHECK_CUDA(cudaMalloc(&c0, cb));
  CHECK_CUDA(cudaMalloc(&c1, cb));
  CHECK_CUDA(cudaMemset(c0, 1, cb));
  const double ms = time_ms(s, [&] { CHECK_CUDA(cudaMemcpyAsync(c1, c0, cb, cudaMemcpyDeviceToDevice, s)); });
  const double bw = 2.0 * cb / (ms * 1e-3) / 1e9;
  std::printf("%-52s %10.4f %9.0f GB/s %9s\n", "copy d2d 2 GiB (read + write)", ms, bw, "ceiling");
  cudaFree(c0);
  cudaFree(c1);
  return bw;
}

/// The llama forwards' memory-bound kernels at their shapes (see the file comment), against the copy rate bw.
void llama_memory_rows(cudaStream_t s, double bw) {
  auto mem = [&](const std::string &name, double bytes, const std::function<void()> &f) {
    const double t = time_ms(s, f, 5, 50);
    const double gbs = bytes / (t * 1e-3) / 1e9;
    std::printf("%-52s %10.4f %9.0f GB/s %8.1f%%\n", name.c_str(), t, gbs, 100.0 * gbs / bw);
  };
  struct Model {
    const char *name;
    int64_t rows, hidden, inter, heads, kv_heads, head_dim, batch, seq;
  };
  const Model models[] = {{"llama2-7b", 4096, 4096, 11008, 32, 32, 128, 4, 1024},
                          {"llama-1b", 8192, 2048, 5632, 32, 8, 64, 8, 1024}};
  for (const Model &m : models) {
    const std::string p = std::string(m.name) + " ";
    const std::string hs = std::to_string(m.rows) + "x" + std::to_string(m.hidden);
    {
      const Dims d{m.rows, m.hidden};
      Buf x(DType::bf16, d), r(DType::bf16, d), g(DType::bf16, Dims{m.hidden}), y(DType::bf16, d), sum(DType::bf16, d);
      const double e = 2.0 * m.rows * m.hidden;
      mem(p + "residual+rms_norm " + hs, 4 * e, [&] {
        CHECK_GPU(zc::residual_norm(x.in(), r.in(), g.in(), zk::In{}, sum.out(), y.out(), true, 1e-5f, s));
      });
      mem(p + "rms_norm " + hs, 2 * e, [&] { CHECK_GPU(zc::rms_norm(x.in(), g.in(), y.out(), 1e-5f, s)); });
    }
    {
      const Dims d{m.rows, m.inter};
      Buf a(DType::bf16, d), u(DType::bf16, d), o(DType::bf16, d);
      mem(p + "gated silu " + std::to_string(m.rows) + "x" + std::to_string(m.inter), 3 * 2.0 * m.rows * m.inter,
          [&] { CHECK_GPU(zc::gated(zk::cpu::Unary::silu, a.in(), u.in(), o.out(), s)); });
    }
    for (int64_t h : {m.heads, m.kv_heads}) {
      Buf c(DType::bf16, Dims{1, 1, m.seq, m.head_dim}), sn(DType::bf16, Dims{1, 1, m.seq, m.head_dim});
      Buf xh(DType::bf16, Dims{m.batch, h, m.seq, m.head_dim}), yh(DType::bf16, Dims{m.batch, h, m.seq, m.head_dim});
      Buf xs(DType::bf16, Dims{m.batch, m.seq, h, m.head_dim}), ys(DType::bf16, Dims{m.batch, m.seq, h, m.head_dim});
      const double e = 2.0 * m.batch * h * m.seq * m.head_dim;
      const std::string shp = "[" + std::to_string(m.batch) + "," + std::to_string(h) + "," + std::to_string(m.seq) +
                              "," + std::to_string(m.head_dim) + "]";
      mem(p + "rotary head-major " + shp, 2 * e,
          [&] { CHECK_GPU(zc::rotary(xh.in(), c.in(), sn.in(), yh.out(), false, s)); });
      mem(p + "rotary seq-major " + shp, 2 * e,
          [&] { CHECK_GPU(zc::rotary(xs.in(), c.in(), sn.in(), ys.out(), false, s, true)); });
      if (m.heads == m.kv_heads) break;  // k has q's shape: one row each
    }
  }
}

#define CHECK_LT(x)                                                                           \
  do {                                                                                        \
    cublasStatus_t e_ = (x);                                                                  \
    if (e_ != CUBLAS_STATUS_SUCCESS) {                                                        \
      std::fprintf(stderr, "%s failed at %s:%d: status %d\n", #x, __FILE__, __LINE__, (int)e_); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

/// The products of the llama forwards, each through zk::cuda::linear and through every candidate algorithm
/// of cuBLASLt's heuristic (see the file comment).
void gemm_candidates(cudaStream_t s, zc::Blas &blas, void *ws) {
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  struct Shape {
    const char *name;
    int64_t M, K, N;
    bool residual;  // the product a residual add follows (o and down)
  };
  const Shape shapes[] = {{"llama2-7b q/k/v/o", 4096, 4096, 4096, true},
                          {"llama2-7b gate/up", 4096, 4096, 11008, false},
                          {"llama2-7b down", 4096, 11008, 4096, true},
                          {"llama2-7b lm head", 4096, 4096, 32000, false},
                          {"llama-1b q/o", 8192, 2048, 2048, true},
                          {"llama-1b k/v", 8192, 2048, 512, false},
                          {"llama-1b gate/up", 8192, 2048, 5632, false},
                          {"llama-1b down", 8192, 5632, 2048, true}};
  std::printf("%-40s %4s %9s %7s  %s\n", "product MxKxN", "cand", "ms", "TF/s", "algo tile stages splitk swz custom cluster waves");
  for (const Shape &sh : shapes) {
    const int64_t M = sh.M, K = sh.K, N = sh.N;
    Buf x(DType::bf16, Dims{M, K}), w(DType::bf16, Dims{K, N}), y(DType::bf16, Dims{M, N}), r(DType::bf16, Dims{M, N});
    const double flop = 2.0 * M * K * N;
    const std::string nm = std::string(sh.name) + " " + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N);
    const double tl = time_ms(s, [&] {
      CHECK_GPU(zc::linear(blas, x.in(), w.in(), zk::In{}, y.out(), false, 1.0f, zc::Epilogue::none, ws, zc::kGemmWorkspaceBytes, s));
    }, 3, 20);
    std::printf("%-40s %4s %9.4f %7.1f  (zk::cuda::linear)\n", nm.c_str(), "lin", tl, flop / (tl * 1e-3) / 1e12);
    // Column-major: D^T [N, M] = W^T [N, K] x^T [K, M], as gemm.cpp issues it.
    cublasLtMatmulDesc_t op;
    CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t nt = CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &nt, sizeof(nt)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
    cublasLtMatrixLayout_t la, lb, lc;
    CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, N, K, N));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N));
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = zc::kGemmWorkspaceBytes;
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
    constexpr int kAsk = 24;
    cublasLtMatmulHeuristicResult_t res[kAsk] = {};
    int found = 0;
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, kAsk, res, &found));
    const float one = 1.0f, zero = 0.0f;
    double best = 1e30;
    int best_i = -1;
    for (int i = 0; i < found; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      bool ok = true;
      auto run = [&](const float *beta, const void *c) {
        if (cublasLtMatmul(lt, op, &one, w.p, la, x.p, lb, beta, c, lc, y.p, lc, &res[i].algo, ws, wsb, s) !=
            CUBLAS_STATUS_SUCCESS)
          ok = false;
      };
      const double t = time_ms(s, [&] { run(&zero, y.p); }, 2, 10);
      if (!ok) continue;
      int v[8] = {};
      const cublasLtMatmulAlgoConfigAttributes_t at[8] = {
          CUBLASLT_ALGO_CONFIG_ID,          CUBLASLT_ALGO_CONFIG_TILE_ID,       CUBLASLT_ALGO_CONFIG_STAGES_ID,
          CUBLASLT_ALGO_CONFIG_SPLITK_NUM,  CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
          CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID};
      for (int a = 0; a < 8; ++a) {
        size_t wr = 0;
        uint32_t u = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, at[a], &u, sizeof(u), &wr) == CUBLAS_STATUS_SUCCESS)
          v[a] = static_cast<int>(u);
      }
      std::printf("%-40s %4d %9.4f %7.1f  %d %d %d %d %d %d %d %.2f inner %d ws %zu\n", nm.c_str(), i, t,
                  flop / (t * 1e-3) / 1e12, v[0], v[1], v[2], v[3], v[4], v[5], v[6], res[i].wavesCount, v[7],
                  res[i].workspaceSize);
      if (t < best) {
        best = t;
        best_i = i;
      }
    }
    std::printf("%-40s %4s %9.4f %7.1f  best of %d: candidate %d (%.1f%% under the first)\n", nm.c_str(), "best",
                best, flop / (best * 1e-3) / 1e12, found, best_i, 100.0 * (1.0 - best / tl));
    if (sh.residual && found > 0) {
      // The residual in the epilogue: D = x W + 1 * C, C another buffer of D's layout.
      for (int i : {0, best_i}) {
        if (i < 0) continue;
        const double t0 = time_ms(s, [&] {
          CHECK_LT(cublasLtMatmul(lt, op, &one, w.p, la, x.p, lb, &zero, y.p, lc, y.p, lc, &res[i].algo, ws, wsb, s));
        }, 2, 20);
        const double t1 = time_ms(s, [&] {
          CHECK_LT(cublasLtMatmul(lt, op, &one, w.p, la, x.p, lb, &one, r.p, lc, y.p, lc, &res[i].algo, ws, wsb, s));
        }, 2, 20);
        std::printf("%-40s %4d beta 0 %.4f ms, beta 1 (C the residual) %.4f ms: +%.4f ms\n", nm.c_str(), i, t0, t1,
                    t1 - t0);
      }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
  }
  cublasLtDestroy(lt);
}

}  // namespace

int main(int argc, char **argv) {
  std::string why;
  if (!zc::device_usable(size_t{8} << 30, &why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  std::unique_ptr<zc::Blas> blas;
  CHECK_GPU(zc::Blas::create(&blas));
  void *ws;
  CHECK_CUDA(cudaMalloc(&ws, zc::kGemmWorkspaceBytes));

  if (argc > 1 && std::string(argv[1]) == "--memory") {
    std::printf("%-52s %10s %12s %10s\n", "kernel", "ms", "rate", "of copy");
    llama_memory_rows(s, copy_ceiling(s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "--gemm") {
    gemm_candidates(s, *blas, ws);
    CHECK_CUDA(cudaStreamSynchronize(s));
    return 0;
  }
  std::printf("%-44s %10s %12s %10s\n", "kernel", "ms", "rate", "of peak");
  // Ceilings.
  const size_t cb = size_t{2} << 30;
  void *c0, *c1;
  CHECK_CUDA(cudaMalloc(&c0, cb));
  CHECK_CUDA(cudaMalloc(&c1, cb));
  CHECK_CUDA(cudaMemset(c0, 1, cb));
  double ms = time_ms(s, [&] { CHECK_CUDA(cudaMemcpyAsync(c1, c0, cb, cudaMemcpyDeviceToDevice, s)); });
  const double bw = 2.0 * cb / (ms * 1e-3) / 1e9;
  std::printf("%-44s %10.3f %9.0f GB/s %9s\n", "copy d2d 2 GiB (read + write)", ms, bw, "ceiling");
  cudaFree(c0);
  cudaFree(c1);
  double peak = 0;
  {
    Buf a(DType::bf16, Dims{8192, 8192}), b(DType::bf16, Dims{8192, 8192}), c(DType::bf16, Dims{8192, 8192});
    ms = time_ms(s, [&] { CHECK_GPU(zc::matmul(*blas, a.in(), b.in(), c.out(), false, false, ws, zc::kGemmWorkspaceBytes, s)); });
    peak = 2.0 * 8192.0 * 8192 * 8192 / (ms * 1e-3) / 1e12;
    std::printf("%-44s %10.3f %9.1f TF/s %9s\n", "matmul bf16 8192^3", ms, peak, "ceiling");
  }
  auto gemm = [&](const char *name, int64_t M, int64_t K, int64_t N, bool tw, zc::Epilogue e) {
    Buf x(DType::bf16, Dims{M, K}), w(DType::bf16, tw ? Dims{N, K} : Dims{K, N}), y(DType::bf16, Dims{M, N}),
        bias(DType::bf16, Dims{N});
    const bool wb = e == zc::Epilogue::bias || e == zc::Epilogue::gelu_bias;
    double t = time_ms(s, [&] {
      CHECK_GPU(zc::linear(*blas, x.in(), w.in(), wb ? bias.in() : zk::In{}, y.out(), tw, 1.0f, e, ws,
                           zc::kGemmWorkspaceBytes, s));
    });
    const double tf = 2.0 * M * K * N / (t * 1e-3) / 1e12;
    std::printf("%-44s %10.3f %9.1f TF/s %8.0f%%\n", name, t, tf, 100.0 * tf / peak);
  };
  gemm("linear gpt2-350m qkv 8192x1024x3072 +bias", 8192, 1024, 3072, false, zc::Epilogue::bias);
  gemm("linear gpt2-350m fc 8192x1024x4096 gelu+bias", 8192, 1024, 4096, false, zc::Epilogue::gelu_bias);
  gemm("linear gpt2-350m proj 8192x4096x1024 +bias", 8192, 4096, 1024, false, zc::Epilogue::bias);
  gemm("linear gpt2-350m lm head 8192x1024x50257 tw", 8192, 1024, 50257, true, zc::Epilogue::none);
  // What padding the vocabulary to a multiple of 64 would give the same product (issue 12, item 5).
  gemm("linear gpt2-350m lm head padded 8192x1024x50304 tw", 8192, 1024, 50304, true, zc::Epilogue::none);
  gemm("linear llama-1b gate 8192x2048x5632 tw", 8192, 2048, 5632, true, zc::Epilogue::none);
  gemm("linear llama-1b down 8192x5632x2048 tw", 8192, 5632, 2048, true, zc::Epilogue::none);
  gemm("linear llama-1b lm head 8192x2048x32000 tw", 8192, 2048, 32000, true, zc::Epilogue::none);

  // Attention: the default kernel (mma.sync, the head dim's block shape, longest-first, unmasked interior
  // tiles), each block shape forced (ZK_CUDA_ATTENTION=mma64/mma128/mma128r), launch order with every tile
  // masked (ZK_CUDA_ATTENTION_PLAIN=1), head-major and sequence-major (seq_major 15, the folded plan's layout).
  auto attn = [&](const char *name, int64_t B, int64_t Hq, int64_t Hkv, int64_t S, int64_t Dh, bool causal, int bits) {
    const bool qs = bits & zk::cpu::kAttnSeqMajorQ, ks = bits & zk::cpu::kAttnSeqMajorK;
    Buf q(DType::bf16, qs ? Dims{B, S, Hq, Dh} : Dims{B, Hq, S, Dh}), k(DType::bf16, ks ? Dims{B, S, Hkv, Dh} : Dims{B, Hkv, S, Dh}),
        v(DType::bf16, bits & zk::cpu::kAttnSeqMajorV ? Dims{B, S, Hkv, Dh} : Dims{B, Hkv, S, Dh}),
        o(DType::bf16, bits & zk::cpu::kAttnSeqMajorOut ? Dims{B, S, Hq, Dh} : Dims{B, Hq, S, Dh});
    double t = time_ms(s, [&] {
      CHECK_GPU(zc::attention(q.in(), k.in(), v.in(), zk::In{}, o.out(), zk::Out{}, causal, 0.125f, bits, s));
    });
    const double flops = 4.0 * B * Hq * S * S * Dh * (causal ? 0.5 : 1.0);
    const double tf = flops / (t * 1e-3) / 1e12;
    std::printf("%-44s %10.3f %9.1f TF/s %8.0f%%\n", name, t, tf, 100.0 * tf / peak);
  };
  const struct {
    const char *label, *path, *plain;
  } variants[] = {{"", "", "0"}, {" mma64", "mma64", "0"}, {" plain", "", "1"}, {" mma64 plain", "mma64", "1"}, {" mma128", "mma128", "0"}, {" mma128r", "mma128r", "0"},
                  {" wmma", "wmma", "0"}};
  for (const auto &var : variants) {
    setenv("ZK_CUDA_ATTENTION", var.path, 1);
    setenv("ZK_CUDA_ATTENTION_PLAIN", var.plain, 1);
    const std::string sfx = var.label;
    attn(("attn gpt2-350m 8x16x1024x64 causal" + sfx).c_str(), 8, 16, 16, 1024, 64, true, 0);
    attn(("attn gpt2-350m seq-major" + sfx).c_str(), 8, 16, 16, 1024, 64, true, zk::cpu::kAttnSeqMajorAll);
    attn(("attn llama-1b 8x32/8x1024x64 causal" + sfx).c_str(), 8, 32, 8, 1024, 64, true, 0);
    attn(("attn llama-1b v,out seq-major" + sfx).c_str(), 8, 32, 8, 1024, 64, true,
         zk::cpu::kAttnSeqMajorV | zk::cpu::kAttnSeqMajorOut);
    attn(("attn llama2-7b 4x32x1024x128 causal" + sfx).c_str(), 4, 32, 32, 1024, 128, true, 0);
    attn(("attn 8x16x1024x64 full" + sfx).c_str(), 8, 16, 16, 1024, 64, false, 0);
  }
  unsetenv("ZK_CUDA_ATTENTION");
  unsetenv("ZK_CUDA_ATTENTION_PLAIN");

  auto mem = [&](const char *name, double bytes, const std::function<void()> &f) {
    double t = time_ms(s, f);
    const double gbs = bytes / (t * 1e-3) / 1e9;
    std::printf("%-44s %10.3f %9.0f GB/s %8.0f%%\n", name, t, gbs, 100.0 * gbs / bw);
  };
  {
    Buf x(DType::bf16, Dims{8192, 1024}), r(DType::bf16, Dims{8192, 1024}), g(DType::bf16, Dims{1024}),
        b(DType::bf16, Dims{1024}), y(DType::bf16, Dims{8192, 1024}), sum(DType::bf16, Dims{8192, 1024});
    const double e = 8192.0 * 1024 * 2;
    mem("layer_norm bf16 8192x1024", 2 * e, [&] { CHECK_GPU(zc::layer_norm(x.in(), g.in(), b.in(), y.out(), -1, 1e-5f, s)); });
    mem("residual+layer_norm bf16 8192x1024", 4 * e,
        [&] { CHECK_GPU(zc::residual_norm(x.in(), r.in(), g.in(), b.in(), sum.out(), y.out(), false, 1e-5f, s)); });
    mem("add bf16 8192x1024", 3 * e, [&] { CHECK_GPU(zc::binary(zk::cpu::Binary::add, x.in(), r.in(), y.out(), s)); });
    mem("bias+gelu bf16 8192x1024", 2 * e, [&] { CHECK_GPU(zc::bias_act(zk::cpu::Unary::gelu_tanh, x.in(), b.in(), y.out(), s)); });
    int64_t perm[4] = {0, 2, 1, 3};
    Buf t4(DType::bf16, Dims{8, 1024, 16, 64}), t5(DType::bf16, Dims{8, 16, 1024, 64});
    mem("transpose bf16 [8,1024,16,64] -> 0213", 2 * e, [&] { CHECK_GPU(zc::transpose(t4.in(), t5.out(), perm, s)); });
  }
  {
    Buf x(DType::bf16, Dims{8192, 2048}), g(DType::bf16, Dims{2048}), y(DType::bf16, Dims{8192, 2048});
    mem("rms_norm bf16 8192x2048", 2 * 8192.0 * 2048 * 2, [&] { CHECK_GPU(zc::rms_norm(x.in(), g.in(), y.out(), 1e-6f, s)); });
    Buf a(DType::bf16, Dims{8192, 5632}), u(DType::bf16, Dims{8192, 5632}), o(DType::bf16, Dims{8192, 5632});
    mem("gated silu bf16 8192x5632", 3 * 8192.0 * 5632 * 2,
        [&] { CHECK_GPU(zc::gated(zk::cpu::Unary::silu, a.in(), u.in(), o.out(), s)); });
    Buf sm(DType::bf16, Dims{8 * 16 * 1024, 1024}), so(DType::bf16, Dims{8 * 16 * 1024, 1024});
    mem("softmax bf16 [131072,1024]", 2 * 131072.0 * 1024 * 2, [&] { CHECK_GPU(zc::softmax(sm.in(), so.out(), -1, s)); });
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  cudaFree(ws);
  return 0;
}
