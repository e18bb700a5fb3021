// The CUDA training kernels and run-time ops against the CPU reference kernels, on random inputs, ragged
// shapes and every storage dtype. Outputs are poisoned with NaN first, so an element a kernel never writes
// fails. Tolerances (relative to max(|ref|, rms(ref))): data movement, range, floor, fmod, cumsum and the
// fp32 AdamW are exact; fp32 math that sums in a different order than the reference's double sums is
// within 1e-4 (attention backward: fp32 dot products of Dh terms inside exp) or 5e-5; 16-bit storage
// within its rounding step (tol_for).
#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "gpu_test_util.h"
#include "zk/attention_kernels.h"
#include "zk/cuda_train_kernels.h"

namespace zt {
namespace {

using zk::cpu::Reduce;
using zk::cpu::Unary;
namespace zc = zk::cuda;

const DType kFloats[] = {DType::f32, DType::bf16, DType::f16};

/// Device scratch of `bytes` (at least 16), freed on scope exit.
struct DevBytes {
  void *ptr = nullptr;
  explicit DevBytes(size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 16), cudaSuccess); }
  ~DevBytes() { cudaFree(ptr); }
};

float grad_tol(DType t) { return t == DType::f32 ? 5e-5f : tol_for(t); }

TEST(CudaTrain, ActivationAndSoftmaxGrads) {
  for (DType t : kFloats) {
    // [7, 129]: the element-wise kernel; [6, 128]: whole 16-byte vectors, the vector kernel.
    for (const Dims &shape : {Dims{7, 129}, Dims{6, 128}})
      for (Unary act : {Unary::gelu_tanh, Unary::gelu_erf, Unary::silu}) {
        HostT x = random_tensor(t, shape, -4, 4), dy = random_tensor(t, shape), ref(t, x.shape);
        ZT_CPU_OK(zk::cpu::act_grad(act, x.in(), dy.in(), ref.out()));
        DevT dx(x), ddy(dy), out(t, x.shape);
        ZT_GPU_OK(zc::act_grad(act, dx.in(), ddy.in(), out.out(), nullptr));
        EXPECT_TRUE(close(out.download(), ref, grad_tol(t))) << zk::dtype_name(t) << " " << dims_str(shape);
      }
    for (int axis : {-1, 1}) {
      HostT x = random_tensor(t, Dims{3, 37, 300}), y(t, x.shape), dy = random_tensor(t, x.shape), ref(t, x.shape);
      ZT_CPU_OK(zk::cpu::softmax(x.in(), y.out(), axis));
      ZT_CPU_OK(zk::cpu::softmax_grad(y.in(), dy.in(), ref.out(), axis));
      DevT dyv(y), ddy(dy), out(t, x.shape);
      ZT_GPU_OK(zc::softmax_grad(dyv.in(), ddy.in(), out.out(), axis, nullptr));
      EXPECT_TRUE(close(out.download(), ref, grad_tol(t))) << zk::dtype_name(t) << " axis " << axis;
    }
  }
}

TEST(CudaTrain, NormGrads) {
  for (DType t : kFloats)
    for (int64_t n : {8, 100, 1024, 3000}) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " n" + std::to_string(n));
      const Dims xs{5, 33, n};
      HostT x = random_tensor(t, xs), dy = random_tensor(t, xs), scale = random_tensor(t, Dims{n}, 0.5f, 1.5f);
      HostT rdx(t, xs), rds(t, Dims{n}), rdb(t, Dims{n});
      std::vector<float> scratch(zk::cpu::layer_norm_grad_scratch(x.in(), 2) + zk::cpu::rms_norm_grad_scratch(x.in()));
      ZT_CPU_OK(zk::cpu::layer_norm_grad(x.in(), scale.in(), dy.in(), rdx.out(), rds.out(), rdb.out(), 2, 1e-5f,
                                         scratch.data()));
      DevT gx(x), gdy(dy), gs(scale), gdx(t, xs), gds(t, Dims{n}), gdb(t, Dims{n});
      DevBytes ws(zc::layer_norm_grad_workspace(gx.in(), 2));
      ZT_GPU_OK(zc::layer_norm_grad(gx.in(), gs.in(), gdy.in(), gdx.out(), gds.out(), gdb.out(), 2, 1e-5f, ws.ptr, nullptr));
      EXPECT_TRUE(close(gdx.download(), rdx, grad_tol(t))) << "layer_norm dx";
      EXPECT_TRUE(close(gds.download(), rds, grad_tol(t))) << "layer_norm dscale";
      EXPECT_TRUE(close(gdb.download(), rdb, grad_tol(t))) << "layer_norm dbias";
      ZT_CPU_OK(zk::cpu::rms_norm_grad(x.in(), scale.in(), dy.in(), rdx.out(), rds.out(), 1e-6f, scratch.data()));
      gdx.poison();
      gds.poison();
      DevBytes ws2(zc::rms_norm_grad_workspace(gx.in()));
      ZT_GPU_OK(zc::rms_norm_grad(gx.in(), gs.in(), gdy.in(), gdx.out(), gds.out(), 1e-6f, ws2.ptr, nullptr));
      EXPECT_TRUE(close(gdx.download(), rdx, grad_tol(t))) << "rms_norm dx";
      EXPECT_TRUE(close(gds.download(), rds, grad_tol(t))) << "rms_norm dscale";
    }
}

struct AttnCase {
  int64_t B, Hq, Hkv, S, T, Dh;
  bool causal;
  int mask;  // 0 none, 1 [B, 1, 1, T] padding, 2 full [B, Hq, S, T]
};

/// `kernel` > 0: the backward through the plan's overload with that code of zk/attention_kernels.h.
void check_attention_grad(DType t, const AttnCase &c, int kernel = 0) {
  SCOPED_TRACE(std::string(zk::dtype_name(t)) + " B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" +
               std::to_string(c.Hkv) + " S" + std::to_string(c.S) + " T" + std::to_string(c.T) + " Dh" +
               std::to_string(c.Dh) + (c.causal ? " causal" : "") + " mask" + std::to_string(c.mask));
  const Dims qs{c.B, c.Hq, c.S, c.Dh}, ks{c.B, c.Hkv, c.T, c.Dh}, ls{c.B, c.Hq, c.S};
  HostT q = random_tensor(t, qs), k = random_tensor(t, ks), v = random_tensor(t, ks), dout = random_tensor(t, qs);
  HostT mask;
  if (c.mask == 1) {
    mask = random_tensor(DType::f32, Dims{c.B, 1, 1, c.T}, -2.0f, 0.0f);
    for (int64_t j = std::max<int64_t>(0, c.T - 3); j < c.T; ++j)
      zk::store_f32(mask.bytes.data(), DType::f32, j, -std::numeric_limits<float>::infinity());
  } else if (c.mask == 2) {
    mask = random_tensor(t, Dims{c.B, c.Hq, c.S, c.T}, -4.0f, 4.0f);
  }
  const zk::In cm = c.mask ? mask.in() : zk::In{};
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.Dh));
  HostT out(t, qs), lse(DType::f32, ls);
  std::vector<float> fs(zk::cpu::attention_scratch(q.in(), k.in()) + 1);
  ZT_CPU_OK(zk::cpu::attention(q.in(), k.in(), v.in(), cm, out.out(), lse.out(), c.causal, scale, fs.data()));
  // The forward's lse on every GPU path (the tensor-core path for bf16/f16 with Dh 64 or 128).
  DevT gq(q), gk(k), gv(v), gm(c.mask ? mask : HostT(DType::f32, Dims{1})), gout(t, qs), glse(DType::f32, ls);
  const zk::In gmi = c.mask ? gm.in() : zk::In{};
  // Both tensor-core forward kernels write the lse (ZK_CUDA_ATTENTION selects them; f32 runs the row path).
  for (const char *fwd : {"wmma", ""}) {
    setenv("ZK_CUDA_ATTENTION", fwd, 1);
    gout.poison();
    glse.poison();
    ZT_GPU_OK(zc::attention(gq.in(), gk.in(), gv.in(), gmi, gout.out(), glse.out(), c.causal, scale, nullptr));
    EXPECT_TRUE(close(gout.download(), out, tol_for(t))) << "attention out, forward path '" << fwd << "'";
    EXPECT_TRUE(close(glse.download(), lse, t == DType::f32 ? 1e-5f : 2e-3f)) << "attention lse, forward path '" << fwd << "'";
  }
  unsetenv("ZK_CUDA_ATTENTION");
  // The backward from the reference's out and lse, so that only the backward is compared.
  HostT rdq(t, qs), rdk(t, ks), rdv(t, ks);
  std::vector<float> bs(zk::cpu::attention_grad_scratch(q.in(), k.in()) + 1);
  ZT_CPU_OK(zk::cpu::attention_grad(q.in(), k.in(), v.in(), out.in(), dout.in(), lse.in(), cm, rdq.out(), rdk.out(),
                                    rdv.out(), c.causal, scale, bs.data()));
  DevT gro(out), grl(lse), gdo(dout), gdq(t, qs), gdk(t, ks), gdv(t, ks);
  DevBytes ws(zc::attention_grad_workspace(gq.in()));
  if (kernel > 0)
    ZT_GPU_OK(zc::attention_grad(gq.in(), gk.in(), gv.in(), gro.in(), gdo.in(), grl.in(), gmi, gdq.out(), gdk.out(),
                                 gdv.out(), c.causal, scale, ws.ptr, kernel, nullptr));
  else
    ZT_GPU_OK(zc::attention_grad(gq.in(), gk.in(), gv.in(), gro.in(), gdo.in(), grl.in(), gmi, gdq.out(), gdk.out(),
                                 gdv.out(), c.causal, scale, ws.ptr, nullptr));
  // The tensor-core paths round P and dS to the 16-bit type before their products, as FlashAttention does,
  // which adds a rounding step per term on top of the outputs' own. dQ's terms cancel (each row of dS sums
  // to zero), so its worst element relative to rms(dQ) grows with the row length: a float64 model of that
  // rounding (the reference's math with P and dS rounded to bf16) gave up to 3.9e-2 over 20 draws of the
  // 256 x 256 causal case. bf16 therefore gets 5e-2; f16, with three more mantissa bits, keeps tol_for's
  // 1e-2 (that model: at most 4.2e-3), and is the tight check of the same kernels (they are templates on
  // the 16-bit type).
  const float tol = t == DType::f32 ? 1e-4f : t == DType::bf16 ? 5e-2f : tol_for(t);
  EXPECT_TRUE(close(gdq.download(), rdq, tol)) << "dq";
  EXPECT_TRUE(close(gdk.download(), rdk, tol)) << "dk";
  EXPECT_TRUE(close(gdv.download(), rdv, tol)) << "dv";
}

TEST(CudaTrain, AttentionLseAndFlashBackward) {
  const AttnCase cases[] = {
      {2, 4, 2, 37, 37, 64, true, 0},     // ragged tiles, GQA, causal
      {1, 2, 2, 50, 90, 128, true, 1},    // S < T, padding mask
      {2, 4, 4, 64, 64, 64, false, 0},    // exact tiles
      {1, 3, 1, 40, 70, 64, false, 2},    // full additive mask, multi-query
      {1, 2, 2, 1, 77, 64, true, 0},      // one query
      {1, 2, 1, 20, 33, 32, true, 1},     // head dim off the tensor-core path
      {1, 2, 2, 256, 256, 64, true, 0},   // many tiles each way
      {1, 8, 2, 200, 200, 64, true, 0},   // GQA group 4, ragged last tile
      {1, 4, 2, 130, 300, 64, false, 1},  // S < T, not causal, padding mask, ragged both ways
  };
  // Every backward path: the default (register-level tensor cores for bf16/f16 with Dh 64, WMMA with Dh
  // 128), the WMMA one at Dh 64 too, and the exact one.
  for (const char *path : {"", "wmma", "exact"}) {
    SCOPED_TRACE(std::string("backward path '") + path + "'");
    setenv("ZK_CUDA_ATTENTION_GRAD", path, 1);
    for (DType t : kFloats)
      for (const AttnCase &c : cases) check_attention_grad(t, c);
  }
  unsetenv("ZK_CUDA_ATTENTION_GRAD");
}

// Plan 2.11: the plan's backward kernel code runs that kernel; mma only at head dim 64, the exact kernel at
// every head dim; a kernel that cannot take the attention (mma at 128, wmma on fp32) is an error naming it.
TEST(CudaTrain, AttentionGradPlanKernelCodes) {
  const AttnCase at64 = {1, 8, 2, 200, 200, 64, true, 1}, at128 = {1, 2, 2, 50, 90, 128, true, 0};
  for (const zk::cuda::AttentionKernel &k : zk::cuda::kAttentionGradKernels) {
    SCOPED_TRACE(std::string("backward kernel ") + k.name);
    for (DType t : {DType::bf16, DType::f16}) {
      check_attention_grad(t, at64, k.code);
      if (k.family != zk::cuda::AttnFamily::mma) check_attention_grad(t, at128, k.code);
    }
  }
  check_attention_grad(DType::f32, at64, zk::cuda::attention_grad_kernel("exact")->code);
  for (auto [t, dh, name] : {std::tuple{DType::bf16, int64_t{128}, "mma"}, std::tuple{DType::f32, int64_t{64}, "wmma"}}) {
    const Dims qs{1, 2, 20, dh}, ls{1, 2, 20};
    HostT q = random_tensor(t, qs), l = random_tensor(DType::f32, ls);
    DevT gq(q), gl(l), gdq(t, qs), gdk(t, qs), gdv(t, qs);
    DevBytes ws(zc::attention_grad_workspace(gq.in()));
    const zk::cuda::GpuStatus st =
        zc::attention_grad(gq.in(), gq.in(), gq.in(), gq.in(), gq.in(), gl.in(), zk::In{}, gdq.out(), gdk.out(), gdv.out(),
                           true, 0.125f, ws.ptr, zk::cuda::attention_grad_kernel(name)->code, nullptr);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message.find(std::string("the plan's kernel '") + name + "' cannot take"), std::string::npos)
        << st.message;
  }
}

/// Times one call of `f` (median of 5 after a warm-up) with CUDA events on the default stream.
template <class F>
float time_ms(F &&f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  f();
  std::vector<float> ts;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    ts.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ts.begin(), ts.end());
  return ts[2];
}

TEST(CudaTrain, AttentionTimingsAtGpt2MediumShape) {
  // Not a check: the figures behind the choice of the default backward path (B 8, 16 heads, S 1024,
  // Dh 64, bf16, causal: one layer of gpt2-350m at the benchmark's shape). FLOPs: forward 2 products,
  // backward 5, each 2 B H S^2 Dh, halved by causality.
  const DType t = DType::bf16;
  const Dims qs{8, 16, 1024, 64}, ls{8, 16, 1024};
  HostT q = random_tensor(t, qs), k = random_tensor(t, qs), v = random_tensor(t, qs), dout = random_tensor(t, qs);
  DevT gq(q), gk(k), gv(v), gdo(dout), gout(t, qs), glse(DType::f32, ls), gdq(t, qs), gdk(t, qs), gdv(t, qs);
  DevBytes ws(zc::attention_grad_workspace(gq.in()));
  const double flop = 2.0 * 8 * 16 * 1024.0 * 1024.0 * 64 / 2;
  const float fwd = time_ms([&] { (void)zc::attention(gq.in(), gk.in(), gv.in(), zk::In{}, gout.out(), glse.out(), true, 0.125f, nullptr); });
  std::printf("attention forward with lse: %.3f ms (%.1f TFLOP/s)\n", fwd, 2 * flop / fwd / 1e9);
  for (const char *path : {"", "wmma", "exact"}) {
    setenv("ZK_CUDA_ATTENTION_GRAD", path, 1);
    const float bwd = time_ms([&] {
      (void)zc::attention_grad(gq.in(), gk.in(), gv.in(), gout.in(), gdo.in(), glse.in(), zk::In{}, gdq.out(), gdk.out(),
                               gdv.out(), true, 0.125f, ws.ptr, nullptr);
    });
    std::printf("attention backward, path '%s': %.3f ms (%.1f TFLOP/s)\n", path, bwd, 5 * flop / bwd / 1e9);
  }
  unsetenv("ZK_CUDA_ATTENTION_GRAD");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaTrain, AttentionTimingsAtLlama1bShape) {
  // Not a check: one layer of llama-1b at the benchmark's shape (B 8, 32 query heads over 8 kv heads,
  // S 1024, Dh 64, bf16, causal), where the dK/dV kernel walks four query heads per key tile.
  const DType t = DType::bf16;
  const Dims qs{8, 32, 1024, 64}, ks{8, 8, 1024, 64}, ls{8, 32, 1024};
  HostT q = random_tensor(t, qs), k = random_tensor(t, ks), v = random_tensor(t, ks), dout = random_tensor(t, qs);
  DevT gq(q), gk(k), gv(v), gdo(dout), gout(t, qs), glse(DType::f32, ls), gdq(t, qs), gdk(t, ks), gdv(t, ks);
  DevBytes ws(zc::attention_grad_workspace(gq.in()));
  const double flop = 2.0 * 8 * 32 * 1024.0 * 1024.0 * 64 / 2;
  const float fwd = time_ms([&] { (void)zc::attention(gq.in(), gk.in(), gv.in(), zk::In{}, gout.out(), glse.out(), true, 0.125f, nullptr); });
  std::printf("llama-1b attention forward with lse: %.3f ms (%.1f TFLOP/s)\n", fwd, 2 * flop / fwd / 1e9);
  for (const char *path : {"", "wmma"}) {
    setenv("ZK_CUDA_ATTENTION_GRAD", path, 1);
    const float bwd = time_ms([&] {
      (void)zc::attention_grad(gq.in(), gk.in(), gv.in(), gout.in(), gdo.in(), glse.in(), zk::In{}, gdq.out(), gdk.out(),
                               gdv.out(), true, 0.125f, ws.ptr, nullptr);
    });
    std::printf("llama-1b attention backward, path '%s': %.3f ms (%.1f TFLOP/s)\n", path, bwd, 5 * flop / bwd / 1e9);
  }
  unsetenv("ZK_CUDA_ATTENTION_GRAD");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaTrain, EmbeddingAndLabelPick) {
  for (DType t : kFloats) {
    const int64_t V = 50, D = 129, start = 50;
    HostT ids = ids_tensor(DType::i64, Dims{3, 40}, 0, 150);  // a third on this rank, many repeats
    HostT dy = random_tensor(t, Dims{3, 40, D}), ref(t, Dims{V, D});
    std::vector<float> scratch(zk::cpu::embedding_grad_scratch(ref.out()));
    ZT_CPU_OK(zk::cpu::embedding_grad(ids.in(), dy.in(), ref.out(), start, scratch.data()));
    DevT gi(ids), gdy(dy), gt(t, Dims{V, D});
    DevBytes ws(zc::embedding_grad_workspace(gt.out()));
    ZT_GPU_OK(zc::embedding_grad(gi.in(), gdy.in(), gt.out(), start, ws.ptr, nullptr));
    // The same fp32 additions in the same order as the reference: exact.
    EXPECT_TRUE(close(gt.download(), ref, 0)) << "embedding_grad " << zk::dtype_name(t);

    // Vl 33: element by element; 36: whole float4 rows for f32 (the vector path).
    for (const int64_t Vl : {int64_t{33}, int64_t{36}}) {
    const int64_t N = 37;
    SCOPED_TRACE("label pick over " + std::to_string(Vl) + " columns");
    HostT logits = random_tensor(t, Dims{N, Vl}), labels = ids_tensor(DType::i64, Dims{N}, -1, 100);
    zk::store_i64(labels.bytes.data(), DType::i64, 3, -100);
    HostT rp(t, Dims{N}), rg(t, Dims{N, Vl}), g = random_tensor(t, Dims{N});
    ZT_CPU_OK(zk::cpu::label_pick(logits.in(), labels.in(), rp.out(), 33, -100));
    ZT_CPU_OK(zk::cpu::label_pick_grad(labels.in(), g.in(), rg.out(), 33, -100));
    DevT gl(logits), glb(labels), gg(g), gp(t, Dims{N}), ggr(t, Dims{N, Vl});
    ZT_GPU_OK(zc::label_pick(gl.in(), glb.in(), gp.out(), 33, -100, nullptr));
    ZT_GPU_OK(zc::label_pick_grad(glb.in(), gg.in(), ggr.out(), 33, -100, nullptr));
    EXPECT_TRUE(close(gp.download(), rp, 0)) << "label_pick";
    EXPECT_TRUE(close(ggr.download(), rg, 0)) << "label_pick_grad";
    }
  }
}

// Generation (docs/generation.md): the KV-cache write and take_rows move bytes (exact), argmax picks the
// reference's index (exact, ties and all), and the attention over the cache sums in fp32 where the reference
// sums in double (5e-5 at f32).
TEST(CudaGenerate, KvWriteCachedAttentionArgmaxTakeRows) {
  for (DType t : kFloats) {
    SCOPED_TRACE(zk::dtype_name(t));
    const int64_t B = 3, Hq = 4, Hkv = 2, L = 37, D = 24, S = 2;
    HostT cache = random_tensor(t, Dims{B, Hkv, L, D}), value = random_tensor(t, Dims{B, Hkv, S, D});
    HostT pos(DType::i64, Dims{B});
    const int64_t p[B] = {0, 17, L - 1};  // the last one drops its second row
    for (int64_t b = 0; b < B; ++b) zk::store_i64(pos.bytes.data(), DType::i64, b, p[b]);
    DevT gc(cache), gv(value), gp(pos);
    ZT_CPU_OK(zk::cpu::kv_write(cache.out(), value.in(), pos.in()));
    ZT_GPU_OK(zc::kv_write(gc.out(), gv.in(), gp.in(), nullptr));
    EXPECT_TRUE(close(gc.download(), cache, 0)) << "kv_write";

    HostT q = random_tensor(t, Dims{B, Hq, S, D}), v = random_tensor(t, Dims{B, Hkv, L, D}), ref(t, q.shape);
    HostT pos2(DType::i64, Dims{B});
    const int64_t p2[B] = {0, 17, L - 2};
    for (int64_t b = 0; b < B; ++b) zk::store_i64(pos2.bytes.data(), DType::i64, b, p2[b]);
    std::vector<float> scratch(zk::cpu::cached_attention_scratch(cache.in()));
    ZT_CPU_OK(zk::cpu::cached_attention(q.in(), cache.in(), v.in(), pos2.in(), ref.out(), 0.2f, scratch.data()));
    DevT gq(q), gk(cache), gvv(v), gp2(pos2), go(t, q.shape);
    ZT_GPU_OK(zc::cached_attention(gq.in(), gk.in(), gvv.in(), gp2.in(), go.out(), 0.2f, nullptr));
    EXPECT_TRUE(close(go.download(), ref, grad_tol(t))) << "cached_attention";

    HostT x = random_tensor(t, Dims{5, 1000}), am(DType::i64, Dims{5}), gam_ref(DType::i64, Dims{5});
    // Row 1: a tie between two maxima (the first wins); row 2: a NaN (it wins).
    zk::store_f32(x.bytes.data(), t, 1 * 1000 + 10, 50.0f);
    zk::store_f32(x.bytes.data(), t, 1 * 1000 + 900, 50.0f);
    zk::store_f32(x.bytes.data(), t, 2 * 1000 + 333, std::numeric_limits<float>::quiet_NaN());
    ZT_CPU_OK(zk::cpu::argmax(x.in(), am.out()));
    EXPECT_EQ(zk::load_i64(am.bytes.data(), DType::i64, 1), 10);
    EXPECT_EQ(zk::load_i64(am.bytes.data(), DType::i64, 2), 333);
    DevT gx(x), gam(DType::i64, Dims{5});
    ZT_GPU_OK(zc::argmax(gx.in(), gam.out(), nullptr));
    EXPECT_TRUE(close(gam.download(), am, 0)) << "argmax";

    HostT rows = random_tensor(t, Dims{B, 7, 33}), idx(DType::i64, Dims{B}), tr(t, Dims{B, 33});
    for (int64_t b = 0; b < B; ++b) zk::store_i64(idx.bytes.data(), DType::i64, b, (b * 5) % 7);
    ZT_CPU_OK(zk::cpu::take_rows(rows.in(), idx.in(), tr.out()));
    DevT grows(rows), gidx(idx), gtr(t, Dims{B, 33});
    ZT_GPU_OK(zc::take_rows(grows.in(), gidx.in(), gtr.out(), nullptr));
    EXPECT_TRUE(close(gtr.download(), tr, 0)) << "take_rows";
  }
}

TEST(CudaTrain, AdamWAccumulateSumSquares) {
  const zk::cpu::AdamWParams hp{0.9, 0.999, 1e-8, 0.01};
  for (DType t : kFloats) {
    const Dims s{1000, 37};
    HostT p = random_tensor(t, s), m(DType::f32, s), v(DType::f32, s);
    std::memset(m.bytes.data(), 0, m.bytes.size());
    std::memset(v.bytes.data(), 0, v.bytes.size());
    DevT gp(p), gm(m), gv(v);
    HostT lr(DType::f32, Dims{}), step(DType::i64, Dims{}), gs(DType::f32, Dims{});
    zk::store_f32(lr.bytes.data(), DType::f32, 0, 1e-3f);
    zk::store_f32(gs.bytes.data(), DType::f32, 0, 0.25f);
    DevT glr(lr), ggs(gs);
    for (int it = 1; it <= 3; ++it) {
      zk::store_i64(step.bytes.data(), DType::i64, 0, it);
      HostT grad = random_tensor(t, s);
      DevT gstep(step), gg(grad);
      ZT_CPU_OK(zk::cpu::adamw(p.out(), grad.in(), m.out(), v.out(), lr.in(), step.in(), gs.in(), hp));
      ZT_GPU_OK(zc::adamw(gp.out(), gg.in(), gm.out(), gv.out(), glr.in(), gstep.in(), ggs.in(), hp, nullptr));
    }
    // fp32: the same operations in the same order with correctly rounded intrinsics: bit for bit.
    const float tol = t == DType::f32 ? 0.0f : tol_for(t);
    EXPECT_TRUE(close(gp.download(), p, tol)) << "adamw param " << zk::dtype_name(t);
    EXPECT_TRUE(close(gm.download(), m, t == DType::f32 ? 0.0f : 1e-5f)) << "adamw m";
    EXPECT_TRUE(close(gv.download(), v, t == DType::f32 ? 0.0f : 1e-5f)) << "adamw v";

    HostT target = random_tensor(t, Dims{6, 70}), val = random_tensor(DType::f32, Dims{70});
    DevT gt(target), gval(val);
    ZT_CPU_OK(zk::cpu::accumulate(target.out(), val.in()));
    ZT_GPU_OK(zc::accumulate(gt.out(), gval.in(), nullptr));
    EXPECT_TRUE(close(gt.download(), target, t == DType::f32 ? 0.0f : tol_for(t))) << "accumulate";

    // [3, 100003]: element by element; [4, 100000]: float4 vectors for f32.
    for (const Dims &xs : {Dims{3, 100003}, Dims{4, 100000}}) {
      HostT x = random_tensor(t, xs), ref(DType::f32, Dims{});
      ZT_CPU_OK(zk::cpu::sum_squares(x.in(), ref.out()));
      DevT gx(x), go(DType::f32, Dims{});
      DevBytes ws(zc::sum_squares_workspace());
      ZT_GPU_OK(zc::sum_squares(gx.in(), go.out(), ws.ptr, nullptr));
      EXPECT_TRUE(close(go.download(), ref, 1e-6f)) << "sum_squares " << dims_str(xs);
    }
  }
}

TEST(CudaRuntimeOps, RangeCumsumFloorModTile) {
  HostT st(DType::i64, Dims{}), de(DType::i64, Dims{});
  zk::store_i64(st.bytes.data(), DType::i64, 0, 5);
  zk::store_i64(de.bytes.data(), DType::i64, 0, -2);
  for (DType t : {DType::i64, DType::i32}) {
    HostT ref(t, Dims{1000});
    HostT s2(t, Dims{}), d2(t, Dims{});
    zk::store_i64(s2.bytes.data(), t, 0, 5);
    zk::store_i64(d2.bytes.data(), t, 0, -2);
    ZT_CPU_OK(zk::cpu::range(s2.in(), d2.in(), ref.out()));
    DevT gs(s2), gd(d2), go(t, Dims{1000});
    ZT_GPU_OK(zc::range(gs.in(), gd.in(), go.out(), nullptr));
    EXPECT_TRUE(close(go.download(), ref, 0)) << "range";
  }
  {
    HostT s2 = random_tensor(DType::f32, Dims{}), d2 = random_tensor(DType::f32, Dims{}, 0.1f, 0.5f), ref(DType::f32, Dims{777});
    ZT_CPU_OK(zk::cpu::range(s2.in(), d2.in(), ref.out()));
    DevT gs(s2), gd(d2), go(DType::f32, Dims{777});
    ZT_GPU_OK(zc::range(gs.in(), gd.in(), go.out(), nullptr));
    EXPECT_TRUE(close(go.download(), ref, 0)) << "range f32";
  }
  for (DType t : {DType::f32, DType::bf16, DType::i64})
    for (int axis : {0, 1, 2})
      for (int flags = 0; flags < 4; ++flags) {
        HostT x = random_tensor(t, Dims{4, 33, 9}, -5, 5), ref(t, x.shape);
        ZT_CPU_OK(zk::cpu::cumsum(x.in(), ref.out(), axis, flags & 1, flags & 2));
        DevT gx(x), go(t, x.shape);
        ZT_GPU_OK(zc::cumsum(gx.in(), go.out(), axis, flags & 1, flags & 2, nullptr));
        EXPECT_TRUE(close(go.download(), ref, 0)) << "cumsum " << zk::dtype_name(t) << " axis " << axis << " flags " << flags;
      }
  for (DType t : kFloats) {
    HostT x = random_tensor(t, Dims{5, 301}, -20, 20), ref(t, x.shape);
    ZT_CPU_OK(zk::cpu::floor(x.in(), ref.out()));
    DevT gx(x), go(t, x.shape);
    ZT_GPU_OK(zc::floor(gx.in(), go.out(), nullptr));
    EXPECT_TRUE(close(go.download(), ref, 0)) << "floor";
  }
  for (DType t : kFloats) {
    // log of values in [-1, 1]: NaN for the negative half, finite (or -inf) for the rest.
    HostT r = random_tensor(t, Dims{5, 301}, -1, 1), x(t, r.shape), ref(DType::bool8, r.shape);
    ZT_CPU_OK(zk::cpu::unary(zk::cpu::Unary::log, r.in(), x.out()));
    ZT_CPU_OK(zk::cpu::is_nan(x.in(), ref.out()));
    DevT gx(x), go(DType::bool8, x.shape);
    ZT_GPU_OK(zc::is_nan(gx.in(), go.out(), nullptr));
    EXPECT_TRUE(close(go.download(), ref, 0)) << "is_nan " << zk::dtype_name(t);
  }
  for (DType t : {DType::i64, DType::i32, DType::f32}) {
    for (bool fm : {false, true}) {
      if (zk::is_float(t) && !fm) continue;
      HostT a = random_tensor(t, Dims{7, 50}, -100, 100), b = random_tensor(t, Dims{50}, -9, 9), ref(t, Dims{7, 50});
      ZT_CPU_OK(zk::cpu::mod(a.in(), b.in(), ref.out(), fm));
      DevT ga(a), gb(b), go(t, ref.shape);
      ZT_GPU_OK(zc::mod(ga.in(), gb.in(), go.out(), fm, nullptr));
      EXPECT_TRUE(close(go.download(), ref, 0)) << "mod " << zk::dtype_name(t) << " fmod " << fm;
    }
  }
  for (DType t : {DType::f16, DType::i64}) {
    HostT x = random_tensor(t, Dims{3, 1, 5}, -9, 9), ref(t, Dims{6, 4, 15});
    ZT_CPU_OK(zk::cpu::tile(x.in(), ref.out()));
    DevT gx(x), go(t, ref.shape);
    ZT_GPU_OK(zc::tile(gx.in(), go.out(), nullptr));
    EXPECT_TRUE(close(go.download(), ref, 0)) << "tile";
  }
}

TEST(CudaRuntimeOps, GathersAndMinProdReductions) {
  for (DType t : {DType::f32, DType::bf16, DType::i64}) {
    HostT data = random_tensor(t, Dims{4, 6, 5}, -9, 9);
    {
      HostT idx = ids_tensor(DType::i64, Dims{7, 2}, -4, 4), ref(t, Dims{7, 5});
      // The second coordinate indexes a dim of 6: keep it in range.
      for (int i = 0; i < 7; ++i)
        zk::store_i64(idx.bytes.data(), DType::i64, 2 * i + 1, zk::load_i64(idx.bytes.data(), DType::i64, 2 * i + 1) % 6);
      ZT_CPU_OK(zk::cpu::gather_nd(data.in(), idx.in(), ref.out(), 0));
      DevT gd(data), gi(idx), go(t, ref.shape);
      ZT_GPU_OK(zc::gather_nd(gd.in(), gi.in(), go.out(), 0, nullptr));
      EXPECT_TRUE(close(go.download(), ref, 0)) << "gather_nd";
    }
    {
      HostT idx = ids_tensor(DType::i32, Dims{4, 3, 1}, -6, 6), ref(t, Dims{4, 3, 5});
      ZT_CPU_OK(zk::cpu::gather_nd(data.in(), idx.in(), ref.out(), 1));
      DevT gd(data), gi(idx), go(t, ref.shape);
      ZT_GPU_OK(zc::gather_nd(gd.in(), gi.in(), go.out(), 1, nullptr));
      EXPECT_TRUE(close(go.download(), ref, 0)) << "gather_nd batch_dims 1";
    }
    for (int axis : {0, 1, 2}) {
      Dims is{3, 4, 5};
      is.d[axis] = 9;
      const int64_t dim = data.shape.d[axis];
      HostT idx = ids_tensor(DType::i64, is, -dim, dim), ref(t, is);
      ZT_CPU_OK(zk::cpu::gather_elements(data.in(), idx.in(), ref.out(), axis));
      DevT gd(data), gi(idx), go(t, is);
      ZT_GPU_OK(zc::gather_elements(gd.in(), gi.in(), go.out(), axis, nullptr));
      EXPECT_TRUE(close(go.download(), ref, 0)) << "gather_elements axis " << axis;
    }
    for (Reduce op : {Reduce::min, Reduce::prod, Reduce::max}) {
      // The empty set reduces to the identity (ONNX): +inf / the largest int64, 1, -inf / the lowest int64.
      HostT e(t, Dims{0, 3}), ref(t, Dims{3});
      const int64_t axes[] = {0};
      ZT_CPU_OK(zk::cpu::reduce(op, e.in(), ref.out(), axes, 1, false));
      DevT ge(e), go(t, ref.shape);
      ZT_GPU_OK(zc::reduce(op, ge.in(), go.out(), axes, 1, false, nullptr));
      EXPECT_TRUE(close(go.download(), ref, 0)) << "empty reduction " << zk::dtype_name(t);
    }
    for (Reduce op : {Reduce::min, Reduce::prod}) {
      HostT x = t == DType::i64 ? random_tensor(t, Dims{5, 40, 3}, -3, 3) : random_tensor(t, Dims{5, 40, 3}, 0.8f, 1.2f);
      const int64_t axes[] = {1};
      HostT ref(t, Dims{5, 3});
      ZT_CPU_OK(zk::cpu::reduce(op, x.in(), ref.out(), axes, 1, false));
      DevT gx(x), go(t, ref.shape);
      // Through cuda::reduce, which forwards min and prod.
      ZT_GPU_OK(zc::reduce(op, gx.in(), go.out(), axes, 1, false, nullptr));
      EXPECT_TRUE(close(go.download(), ref, op == Reduce::min || t == DType::i64 ? 0.0f : grad_tol(t)))
          << (op == Reduce::min ? "reduce_min " : "reduce_prod ") << zk::dtype_name(t);
    }
  }
}

}  // namespace
}  // namespace zt
