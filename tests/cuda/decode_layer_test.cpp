// The persistent decode layer (kernels/cuda/decode_layer.cu) against the CPU reference kernels, and its timing
// against the six-kernel layer it would replace. WRITTEN WITHOUT A GPU (session 11): these tests compiled but
// have not run; the next session's first device call runs them (docs/generation.md, "Persistent decode layer
// kernel: written, not yet run").
//
// The oracle: the CPU reference kernels composed as a batch-1 decode layer runs its steps (norm_products of
// q/k/v, rope_kv_write, cached_attention, linear o, norm_products of gate/up with SiLU, linear down), each
// rounding where the step rounds. Compared: the layer's outputs (down's product and the residual after the
// attention), both caches whole (the rows at the positions written, every other row left bit for bit as it
// was), and, to say which phase went wrong when one does, the intermediate results the kernel leaves in its
// workspace (sum1, q, k, v before the rotary, the attention's output, h). Outputs are poisoned with NaN first
// and each case runs three times (the later launches find the grid barrier's and the strips' counts as the
// first left them; the third with the cooperative launch attribute), and the counts must be back at zero after
// each launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
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
using zk::cpu::Unary;

struct DevBytes {
  void *ptr = nullptr;
  explicit DevBytes(size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 16), cudaSuccess); }
  ~DevBytes() { cudaFree(ptr); }
};

struct LayerCase {
  const char *name;
  DType t;
  int64_t M, d, Hq, Hkv, Dh, F, L;
  std::vector<int64_t> pos;
  int64_t tb;    // rows of the rotary tables: 1 or M
  int64_t grid;  // 0: the kernel's own (every resident block)
};

/// One layer's operands on the host, random: weights scaled so that the products stay near unit size.
struct LayerHost {
  HostT x, res, g1, g2, wq, wk, wv, wo, wg, wu, wd, cos, sin, pos, kc, vc;
  LayerHost(const LayerCase &c) {
    const DType t = c.t;
    auto w = [&](int64_t k, int64_t n) {
      const float a = 1.5f / std::sqrt(static_cast<float>(k));
      return random_tensor(t, Dims{k, n}, -a, a);
    };
    x = random_tensor(t, Dims{c.M, c.d}, -1.0f, 1.0f);
    res = random_tensor(t, Dims{c.M, c.d}, -1.0f, 1.0f);
    g1 = random_tensor(t, Dims{c.d}, 0.5f, 1.5f);
    g2 = random_tensor(t, Dims{c.d}, 0.5f, 1.5f);
    wq = w(c.d, c.Hq * c.Dh);
    wk = w(c.d, c.Hkv * c.Dh);
    wv = w(c.d, c.Hkv * c.Dh);
    wo = w(c.Hq * c.Dh, c.d);
    wg = w(c.d, c.F);
    wu = w(c.d, c.F);
    wd = w(c.F, c.d);
    cos = random_tensor(t, Dims{c.tb, 1, 1, c.Dh}, -1.0f, 1.0f);
    sin = random_tensor(t, Dims{c.tb, 1, 1, c.Dh}, -1.0f, 1.0f);
    pos = HostT(DType::i64, Dims{c.M});
    for (int64_t b = 0; b < c.M; ++b) zk::store_i64(pos.bytes.data(), DType::i64, b, c.pos[static_cast<size_t>(b)]);
    kc = random_tensor(t, Dims{c.M, c.Hkv, c.L, c.Dh});
    vc = random_tensor(t, Dims{c.M, c.Hkv, c.L, c.Dh});
  }
};

/// The layer through the CPU reference kernels, in the decode step's order; the caches are written in place.
struct LayerRef {
  HostT sum1, q, k, v, attn, o, sum2, h, out;
};
void reference_layer(const LayerCase &c, LayerHost &hl, float eps, float scale, LayerRef &r) {
  const DType t = c.t;
  r = LayerRef{HostT(t, Dims{c.M, c.d}),          HostT(t, Dims{c.M, c.Hq * c.Dh}), HostT(t, Dims{c.M, c.Hkv * c.Dh}),
               HostT(t, Dims{c.M, c.Hkv * c.Dh}), HostT(t, Dims{c.M, c.Hq * c.Dh}), HostT(t, Dims{c.M, c.d}),
               HostT(t, Dims{c.M, c.d}),          HostT(t, Dims{c.M, c.F}),         HostT(t, Dims{c.M, c.d})};
  const zk::In w3[3] = {hl.wq.in(), hl.wk.in(), hl.wv.in()};
  const zk::Out o3[3] = {r.q.out(), r.k.out(), r.v.out()};
  const zk::In w2[2] = {hl.wg.in(), hl.wu.in()};
  const zk::Out o1[1] = {r.h.out()};
  const size_t need = std::max(
      {zk::cpu::norm_products_scratch(hl.x.in(), w3, o3, 3, false, Unary::silu, false),
       zk::cpu::norm_products_scratch(r.o.in(), w2, o1, 2, false, Unary::silu, true),
       zk::cpu::linear_scratch(r.attn.in(), hl.wo.in(), r.o.out(), false),
       zk::cpu::linear_scratch(r.h.in(), hl.wd.in(), r.out.out(), false),
       zk::cpu::rope_kv_write_scratch(zk::In{r.k.bytes.data(), t, Dims{c.M, c.Hkv, 1, c.Dh}}),
       zk::cpu::cached_attention_scratch(hl.kc.in())});
  std::vector<float> scratch(need + 16);
  ZT_CPU_OK(zk::cpu::norm_products(hl.x.in(), hl.res.in(), hl.g1.in(), w3, r.sum1.out(), o3, 3, false, Unary::silu, false,
                                   1.0f, eps, scratch.data()));
  HostT q_rot(t, Dims{c.M, c.Hq, 1, c.Dh});
  const zk::In q4{r.q.bytes.data(), t, Dims{c.M, c.Hq, 1, c.Dh}}, k4{r.k.bytes.data(), t, Dims{c.M, c.Hkv, 1, c.Dh}},
      v4{r.v.bytes.data(), t, Dims{c.M, c.Hkv, 1, c.Dh}};
  ZT_CPU_OK(zk::cpu::rope_kv_write(q4, k4, v4, hl.cos.in(), hl.sin.in(), hl.pos.in(), q_rot.out(), hl.kc.out(), hl.vc.out(),
                                   scratch.data()));
  const zk::Out attn4{r.attn.bytes.data(), t, Dims{c.M, c.Hq, 1, c.Dh}};
  ZT_CPU_OK(zk::cpu::cached_attention(q_rot.in(), hl.kc.in(), hl.vc.in(), hl.pos.in(), attn4, scale, scratch.data()));
  ZT_CPU_OK(zk::cpu::linear(r.attn.in(), hl.wo.in(), zk::In{}, r.o.out(), false, 1.0f, scratch.data()));
  ZT_CPU_OK(zk::cpu::norm_products(r.o.in(), r.sum1.in(), hl.g2.in(), w2, r.sum2.out(), o1, 2, false, Unary::silu, true,
                                   1.0f, eps, scratch.data()));
  ZT_CPU_OK(zk::cpu::linear(r.h.in(), hl.wd.in(), zk::In{}, r.out.out(), false, 1.0f, scratch.data()));
}

/// The layer's operands on the device.
struct LayerDev {
  DevT x, res, g1, g2, wq, wk, wv, wo, wg, wu, wd, cos, sin, pos, kc, vc, out, res_out;
  explicit LayerDev(const LayerHost &h)
      : x(h.x), res(h.res), g1(h.g1), g2(h.g2), wq(h.wq), wk(h.wk), wv(h.wv), wo(h.wo), wg(h.wg), wu(h.wu),
        wd(h.wd), cos(h.cos), sin(h.sin), pos(h.pos), kc(h.kc), vc(h.vc), out(h.x.dtype, h.x.shape),
        res_out(h.x.dtype, h.x.shape) {}
  zc::DecodeLayerArgs args(int64_t heads, float eps, float scale) {
    zc::DecodeLayerArgs a;
    a.x = x.in(), a.residual = res.in(), a.norm1 = g1.in(), a.norm2 = g2.in();
    a.wq = wq.in(), a.wk = wk.in(), a.wv = wv.in(), a.wo = wo.in();
    a.w_gate = wg.in(), a.w_up = wu.in(), a.w_down = wd.in();
    a.cos = cos.in(), a.sin = sin.in(), a.pos = pos.in();
    a.k_cache = kc.out(), a.v_cache = vc.out(), a.out = out.out(), a.residual_out = res_out.out();
    a.heads = heads, a.eps = eps, a.scale = scale, a.act = Unary::silu;
    a.early = true;  // the test's weights are written before the first launch and never again
    return a;
  }
};

zc::DecodeLayerShape shape_of(const LayerCase &c) {
  return zc::DecodeLayerShape{c.t, c.M, c.d, c.Hq, c.Hkv, c.Dh, c.F, c.L};
}

/// `bytes` of the workspace at `offset` as a host tensor of dtype t and shape s.
HostT slice_of(const DevBytes &ws, uint64_t offset, DType t, Dims s) {
  HostT h(t, s);
  EXPECT_EQ(cudaMemcpy(h.bytes.data(), static_cast<const uint8_t *>(ws.ptr) + offset, h.bytes.size(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  return h;
}

/// Every cache row other than the rows at the positions is bit for bit the input's.
::testing::AssertionResult rows_kept(const HostT &before, const HostT &after, const LayerCase &c) {
  const size_t row = static_cast<size_t>(c.Dh) * zk::dtype_size(c.t);
  for (int64_t b = 0; b < c.M; ++b)
    for (int64_t h = 0; h < c.Hkv; ++h)
      for (int64_t l = 0; l < c.L; ++l) {
        if (l == c.pos[static_cast<size_t>(b)]) continue;
        const size_t at = static_cast<size_t>((b * c.Hkv + h) * c.L + l) * row;
        if (std::memcmp(before.bytes.data() + at, after.bytes.data() + at, row) != 0)
          return ::testing::AssertionFailure() << "cache row b " << b << " h " << h << " l " << l << " changed";
      }
  return ::testing::AssertionSuccess();
}

/// The phases of one decode_layer launch from its timer readings (DecodeLayerLaunch::stamps, zeroed before):
/// for each stamp, the global timer over the blocks (min, median, max, us after the first block started), and
/// each block's own clock between stamps (median and max over the blocks, us at the SM clock rate).
void print_timeline(const std::vector<unsigned long long> &st, const char *label) {
  static const char *const names[zc::kDecodeLayerStamps] = {
      "start",           "after the wait",  "after norm 1",     "at barrier 1 (q/k/v done)",
      "past barrier 1",  "at barrier 2 (attention done)",     "past barrier 2",  "at barrier 3 (o done)",
      "past barrier 3",  "at barrier 4 (gate/up done)",       "past barrier 4",  "end (down done)"};
  constexpr int S = zc::kDecodeLayerStamps;
  const size_t blocks = st.size() / (2 * S);
  std::vector<size_t> live;
  for (size_t b = 0; b < blocks; ++b)
    if (st[b * S * 2] != 0) live.push_back(b);
  if (live.empty()) return;
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  unsigned long long t0 = ~0ull;
  for (size_t b : live) t0 = std::min(t0, st[b * S * 2]);
  std::printf("  %s timeline, %zu blocks (global timer: us after the first block's start; own: the block's clock"
              " since the stamp before, at %d MHz)\n",
              label, live.size(), khz / 1000);
  std::printf("  %-32s %8s %8s %8s | %8s %8s\n", "stamp", "min", "median", "max", "own med", "own max");
  for (int i = 0; i < S; ++i) {
    std::vector<double> g, own;
    for (size_t b : live) {
      g.push_back((st[(b * S + i) * 2] - t0) / 1e3);
      if (i > 0) own.push_back((st[(b * S + i) * 2 + 1] - st[(b * S + i - 1) * 2 + 1]) / (khz / 1e3));
    }
    std::sort(g.begin(), g.end());
    std::sort(own.begin(), own.end());
    std::printf("  %-32s %8.2f %8.2f %8.2f", names[i], g.front(), g[g.size() / 2], g.back());
    if (i > 0) std::printf(" | %8.2f %8.2f", own[own.size() / 2], own.back());
    std::printf("\n");
  }
}

TEST(CudaDecodeLayer, MatchesCpuReference) {
  const LayerCase cases[] = {
      // llama-1b (this repository's: ffn 5632) at batch 1, 640 of 768 positions cached; the kernel's grid.
      {"llama-1b", DType::bf16, 1, 2048, 32, 8, 64, 5632, 768, {640}, 1, 0},
      // the same with ffn 8192 (llama-3.2-1b's MLP), two rows (the four-row instantiation), one table a row.
      {"llama-1b ffn 8192, 2 rows", DType::bf16, 2, 2048, 32, 8, 64, 8192, 768, {640, 0}, 2, 0},
      // odd small shapes in f32: three rows, head dim 128, 3 query heads a K/V head, positions at 0, mid and
      // the cache's last row; a strip of q past its weight's end (6 x 128 = 768 columns: 24 strips of 32).
      {"small f32", DType::f32, 3, 136, 6, 2, 128, 264, 50, {0, 17, 49}, 3, 0},
      // f16, four rows, no grouping, a cache of 33 rows, d 64 (one K-slab).
      {"small f16", DType::f16, 4, 64, 4, 4, 64, 40, 33, {32, 1, 5, 0}, 1, 0},
      // 8 query heads a K/V head, a chunk of many tiles on one block: grid 1 (every item on one block, every
      // barrier a block's own) and grid 7 (items in turn).
      {"one block", DType::bf16, 1, 256, 16, 2, 64, 512, 300, {299}, 1, 1},
      {"seven blocks", DType::bf16, 1, 256, 16, 2, 128, 512, 300, {150}, 1, 7},
  };
  const float eps = 1e-5f;
  for (const LayerCase &c : cases) {
    SCOPED_TRACE(std::string(c.name) + " " + zk::dtype_name(c.t) + " M " + std::to_string(c.M));
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.Dh));
    LayerHost hl(c);
    LayerDev dl(hl);  // the caches as they were before the step
    const HostT kc0 = hl.kc, vc0 = hl.vc;
    LayerRef ref;
    ASSERT_NO_FATAL_FAILURE(reference_layer(c, hl, eps, scale, ref));  // writes hl.kc, hl.vc
    const zc::DecodeLayerShape sh = shape_of(c);
    const uint64_t wsb = zc::decode_layer_workspace(sh);
    const zc::DecodeLayerOffsets off = zc::decode_layer_offsets(sh);
    DevBytes ws(wsb);
    ASSERT_EQ(cudaMemset(ws.ptr, 0, wsb), cudaSuccess);
    const float tol = c.t == DType::f32 ? 1e-4f : 2 * tol_for(c.t);
    for (int rep = 0; rep < 3; ++rep) {
      // Twice as the kernel launches itself, then with the cooperative attribute as well.
      zc::DecodeLayerLaunch how;
      how.grid = c.grid;
      how.cooperative = rep == 2;
      SCOPED_TRACE("run " + std::to_string(rep) + (how.cooperative ? " (cooperative)" : ""));
      dl.out.poison();
      dl.res_out.poison();
      ZT_GPU_OK(zc::decode_layer(dl.args(c.Hq, eps, scale), ws.ptr, wsb, nullptr, how));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      // Where it went wrong, phase by phase.
      EXPECT_TRUE(close(slice_of(ws, off.sum1, c.t, Dims{c.M, c.d}), ref.sum1, 0.0f)) << "sum1 (phase A)";
      EXPECT_TRUE(close(slice_of(ws, off.q, c.t, Dims{c.M, c.Hq * c.Dh}), ref.q, tol)) << "q (phase A)";
      EXPECT_TRUE(close(slice_of(ws, off.k, c.t, Dims{c.M, c.Hkv * c.Dh}), ref.k, tol)) << "k (phase A)";
      EXPECT_TRUE(close(slice_of(ws, off.v, c.t, Dims{c.M, c.Hkv * c.Dh}), ref.v, tol)) << "v (phase A)";
      EXPECT_TRUE(close(dl.kc.download(), hl.kc, tol)) << "k cache (phase B)";
      EXPECT_TRUE(close(dl.vc.download(), hl.vc, tol)) << "v cache (phase B)";
      EXPECT_TRUE(rows_kept(kc0, dl.kc.download(), c)) << "k cache";
      EXPECT_TRUE(rows_kept(vc0, dl.vc.download(), c)) << "v cache";
      EXPECT_TRUE(close(slice_of(ws, off.attn, c.t, Dims{c.M, c.Hq * c.Dh}), ref.attn, tol)) << "attention (phase B)";
      EXPECT_TRUE(close(dl.res_out.download(), ref.sum2, tol)) << "residual_out (phase C)";
      EXPECT_TRUE(close(slice_of(ws, off.h, c.t, Dims{c.M, c.F}), ref.h, tol)) << "h (phase D)";
      EXPECT_TRUE(close(dl.out.download(), ref.out, tol)) << "out (phase E)";
      // The barrier's arrivals and every strip's and head's count back at zero (word 1 is the generation).
      std::vector<unsigned> sync(off.sync_bytes / 4);
      ASSERT_EQ(cudaMemcpy(sync.data(), ws.ptr, off.sync_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < sync.size(); ++i)
        if (i != 1) EXPECT_EQ(sync[i], 0u) << "sync word " << i;
    }
  }
}

// As a plan runs it (the CUDA backend's decode_layer step, plan 2.17): the barrier's counts in a buffer of their
// own (the plan's zero-initialised sync state) and a workspace of the intermediates alone; the weights' first
// pieces loaded after the wait (early off, as under ZeRO-3); and a first layer without a residual add (sum1 =
// x), whose reference is the same layer with a residual of zeros (x + 0 rounds to x).
TEST(CudaDecodeLayer, PlanOperandsOwnSyncNoResidual) {
  const LayerCase cases[] = {
      {"llama-1b", DType::bf16, 1, 2048, 32, 8, 64, 5632, 768, {640}, 1, 0},
      {"small f32", DType::f32, 3, 136, 6, 2, 128, 264, 50, {0, 17, 49}, 3, 0},
  };
  const float eps = 1e-5f;
  for (const LayerCase &c : cases) {
    SCOPED_TRACE(c.name);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.Dh));
    LayerHost hl(c);
    hl.res = HostT(c.t, Dims{c.M, c.d});  // zeros
    LayerDev dl(hl);
    LayerRef ref;
    ASSERT_NO_FATAL_FAILURE(reference_layer(c, hl, eps, scale, ref));
    const zk::cuda::workspace::DecodeLayerDims dims{c.M, c.d, c.Hq, c.Hkv, c.Dh, c.F,
                                                    static_cast<int64_t>(zk::dtype_size(c.t))};
    const uint64_t words = zk::cuda::workspace::decode_layer_sync_words(dims);
    const uint64_t wsb = zk::cuda::workspace::decode_layer(dims);
    DevBytes ws(wsb), sync(words * 4);
    ASSERT_EQ(cudaMemset(sync.ptr, 0, words * 4), cudaSuccess);
    const float tol = c.t == DType::f32 ? 1e-4f : 2 * tol_for(c.t);
    for (int rep = 0; rep < 2; ++rep) {
      SCOPED_TRACE("run " + std::to_string(rep));
      dl.out.poison();
      dl.res_out.poison();
      zc::DecodeLayerArgs a = dl.args(c.Hq, eps, scale);
      a.residual = zk::In{};
      a.sync = sync.ptr;
      a.early = false;
      ZT_GPU_OK(zc::decode_layer_check(a));
      ZT_GPU_OK(zc::decode_layer(a, ws.ptr, wsb, nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_TRUE(close(dl.kc.download(), hl.kc, tol)) << "k cache";
      EXPECT_TRUE(close(dl.vc.download(), hl.vc, tol)) << "v cache";
      EXPECT_TRUE(close(dl.res_out.download(), ref.sum2, tol)) << "residual_out";
      EXPECT_TRUE(close(dl.out.download(), ref.out, tol)) << "out";
      std::vector<unsigned> back(words);
      ASSERT_EQ(cudaMemcpy(back.data(), sync.ptr, words * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < back.size(); ++i)
        if (i != 1) EXPECT_EQ(back[i], 0u) << "sync word " << i;
    }
    // A workspace one byte short of the intermediates is refused.
    zc::DecodeLayerArgs a = dl.args(c.Hq, eps, scale);
    a.sync = sync.ptr;
    EXPECT_FALSE(zc::decode_layer(a, ws.ptr, wsb - 1, nullptr).ok());
  }
}

// A grid larger than the blocks that can be resident at once would leave its grid barriers waiting for blocks
// that never start: the launcher refuses it with an error that says so, and launches nothing.
TEST(CudaDecodeLayer, RefusesAGridThatCannotBeResident) {
  const LayerCase c{"small", DType::bf16, 1, 256, 4, 2, 64, 512, 64, {10}, 1, 0};
  LayerHost hl(c);
  LayerDev dl(hl);
  const zc::DecodeLayerShape sh = shape_of(c);
  const uint64_t wsb = zc::decode_layer_workspace(sh);
  DevBytes ws(wsb);
  ASSERT_EQ(cudaMemset(ws.ptr, 0, wsb), cudaSuccess);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  zc::DecodeLayerLaunch how;
  how.grid = int64_t{64} * sms;  // far more than fit: the ring alone is 64 KiB a block
  const zc::GpuStatus st = zc::decode_layer(dl.args(c.Hq, 1e-5f, 0.125f), ws.ptr, wsb, nullptr, how);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message.find("resident"), std::string::npos) << st.message;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // And the operands' checks: a workspace too small.
  how.grid = 0;
  const zc::GpuStatus small = zc::decode_layer(dl.args(c.Hq, 1e-5f, 0.125f), ws.ptr, wsb - 256, nullptr, how);
  EXPECT_FALSE(small.ok());
  EXPECT_NE(small.message.find("workspace"), std::string::npos) << small.message;
}

// Four llama-1b layers at batch 1 (bf16, 640 positions cached of 768) chained through decode_layer (4 launches)
// and through the six kernels a decode step runs today (24 launches: norm_products q/k/v, rope_kv_write, decode
// attention, o, norm_products gate/up, down, each a programmatic dependent with its weights read before the
// wait), each chain the median of 11 with the L2 cleared before it (then decode_layer once more with the
// cooperative launch attribute, and once with the phases stamped: the timeline of the first and last layer);
// printed side by side with the rate at
// which each reads the layers' weights and caches. Printed, not a pass/fail figure; the outputs of the two
// chains are compared (loosely: four layers of bf16 rounding) to catch a chain that times something else.
TEST(CudaDecodeLayer, ChainTimingAgainstSixKernels) {
  constexpr int kLayers = 4;
  const LayerCase c{"llama-1b", DType::bf16, 1, 2048, 32, 8, 64, 5632, 768, {640}, 1, 0};
  const DType t = c.t;
  const float eps = 1e-5f, scale = 0.125f;
  DevBytes flush(size_t{256} << 20);
  std::vector<std::unique_ptr<LayerDev>> layers;
  for (int l = 0; l < kLayers; ++l) {
    LayerHost hl(c);
    layers.push_back(std::make_unique<LayerDev>(hl));
  }
  const double weight_bytes = 2.0 * (c.d * (c.Hq + 2 * c.Hkv) * c.Dh + c.Hq * c.Dh * c.d + 3.0 * c.d * c.F);
  const double cache_bytes = 2.0 * 2.0 * c.Hkv * (c.pos[0] + 1) * c.Dh;
  const double bytes = kLayers * (weight_bytes + cache_bytes);
  // decode_layer: layer l + 1 reads layer l's out and residual_out.
  const zc::DecodeLayerShape sh = shape_of(c);
  const uint64_t wsb = zc::decode_layer_workspace(sh);
  DevBytes ws(wsb);
  ASSERT_EQ(cudaMemset(ws.ptr, 0, wsb), cudaSuccess);
  zc::DecodeLayerLaunch how;
  auto persistent = [&]() -> bool {
    for (int l = 0; l < kLayers; ++l) {
      zc::DecodeLayerArgs a = layers[static_cast<size_t>(l)]->args(c.Hq, eps, scale);
      if (l > 0) {
        a.x = layers[static_cast<size_t>(l - 1)]->out.in();
        a.residual = layers[static_cast<size_t>(l - 1)]->res_out.in();
      }
      if (!zc::decode_layer(a, ws.ptr, wsb, nullptr, how).ok()) return false;
    }
    return true;
  };
  // The six kernels: their own intermediates, layer by layer.
  struct Six {
    DevT sum1, q, k, v, qrot, attn, o, h;
    Six(DType t, const LayerCase &c)
        : sum1(t, Dims{c.M, c.d}), q(t, Dims{c.M, c.Hq * c.Dh}), k(t, Dims{c.M, c.Hkv * c.Dh}),
          v(t, Dims{c.M, c.Hkv * c.Dh}), qrot(t, Dims{c.M, c.Hq, 1, c.Dh}), attn(t, Dims{c.M, c.Hq, 1, c.Dh}),
          o(t, Dims{c.M, c.d}), h(t, Dims{c.M, c.F}) {}
  };
  std::vector<std::unique_ptr<Six>> six;
  for (int l = 0; l < kLayers; ++l) six.push_back(std::make_unique<Six>(t, c));
  const uint64_t attn_ws = zk::cuda::workspace::cached_attention(c.M, c.Hq, 1, c.Dh, c.Hkv, c.L);
  DevBytes aws(attn_ws);
  auto six_kernels = [&]() -> bool {
    for (int l = 0; l < kLayers; ++l) {
      LayerDev &d = *layers[static_cast<size_t>(l)];
      Six &s = *six[static_cast<size_t>(l)];
      const zk::In x = l > 0 ? layers[static_cast<size_t>(l - 1)]->out.in() : d.x.in();
      const zk::In res = l > 0 ? layers[static_cast<size_t>(l - 1)]->res_out.in() : d.res.in();
      const zk::In w3[3] = {d.wq.in(), d.wk.in(), d.wv.in()};
      const zk::Out o3[3] = {s.q.out(), s.k.out(), s.v.out()};
      if (!zc::skinny_norm_products(x, res, d.g1.in(), w3, s.sum1.out(), o3, 3, Unary::silu, false, 1.0f, eps, true,
                                    nullptr)
               .ok())
        return false;
      const zk::In q4{s.q.ptr, t, Dims{c.M, c.Hq, 1, c.Dh}}, k4{s.k.ptr, t, Dims{c.M, c.Hkv, 1, c.Dh}},
          v4{s.v.ptr, t, Dims{c.M, c.Hkv, 1, c.Dh}};
      if (!zc::rope_kv_write(q4, k4, v4, d.cos.in(), d.sin.in(), d.pos.in(), s.qrot.out(), d.kc.out(), d.vc.out(), nullptr)
               .ok())
        return false;
      if (!zc::decode_attention(s.qrot.in(), d.kc.in(), d.vc.in(), d.pos.in(), s.attn.out(), scale,
                                attn_ws ? aws.ptr : nullptr, nullptr)
               .ok())
        return false;
      const zk::In attn2{s.attn.ptr, t, Dims{c.M, c.Hq * c.Dh}};
      if (!zc::skinny_linear(attn2, d.wo.in(), zk::In{}, s.o.out(), false, 1.0f, zc::Epilogue::none, true, nullptr,
                             zc::FewRows::stream)
               .ok())
        return false;
      const zk::In w2[2] = {d.wg.in(), d.wu.in()};
      const zk::Out o1[1] = {s.h.out()};
      if (!zc::skinny_norm_products(s.o.in(), s.sum1.in(), d.g2.in(), w2, d.res_out.out(), o1, 2, Unary::silu, true,
                                    1.0f, eps, true, nullptr)
               .ok())
        return false;
      if (!zc::skinny_linear(s.h.in(), d.wd.in(), zk::In{}, d.out.out(), false, 1.0f, zc::Epilogue::none, true, nullptr,
                             zc::FewRows::stream)
               .ok())
        return false;
    }
    return true;
  };
  // Each chain once, its last layer's output kept, then the other's compared with it.
  ASSERT_TRUE(six_kernels());
  const HostT six_out = layers.back()->out.download(), six_res = layers.back()->res_out.download();
  ASSERT_TRUE(persistent());
  EXPECT_TRUE(close(layers.back()->out.download(), six_out, 4 * tol_for(t))) << "four layers: out";
  EXPECT_TRUE(close(layers.back()->res_out.download(), six_res, 4 * tol_for(t))) << "four layers: residual_out";
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto median_us = [&](auto chain) {
    std::vector<float> ts;
    for (int it = 0; it < 14; ++it) {
      cudaMemsetAsync(flush.ptr, it & 1, size_t{256} << 20, nullptr);
      cudaEventRecord(e0);
      EXPECT_TRUE(chain());
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (it >= 3) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2] * 1e3f;
  };
  // Alternated, so that a drift of the clocks shows in both.
  const float six_a = median_us(six_kernels), per_a = median_us(persistent);
  const float six_b = median_us(six_kernels), per_b = median_us(persistent);
  how.cooperative = true;
  ASSERT_TRUE(persistent());
  const float coop = median_us(persistent);
  how.cooperative = false;
  const float six_us = std::min(six_a, six_b), per_us = std::min(per_a, per_b);
  std::printf("decode layer chain (%d llama-1b layers, bf16, 1 row, 640 positions, %.1f MB):\n", kLayers, bytes / 1e6);
  std::printf("  six kernels   %8.2f us (%8.2f, %8.2f)  %6.2f us a layer  %5.0f GB/s\n", six_us, six_a, six_b,
              six_us / kLayers, bytes / (six_us * 1e-6) / 1e9);
  std::printf("  decode_layer  %8.2f us (%8.2f, %8.2f)  %6.2f us a layer  %5.0f GB/s  (%.2fx)\n", per_us, per_a, per_b,
              per_us / kLayers, bytes / (per_us * 1e-6) / 1e9, six_us / per_us);
  std::printf("  decode_layer, cooperative launch %8.2f us  %6.2f us a layer  %5.0f GB/s\n", coop, coop / kLayers,
              bytes / (coop * 1e-6) / 1e9);
  // One more chain, cold, each layer's phases stamped: where a layer's time goes.
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t nst = static_cast<size_t>(2 * sms) * zc::kDecodeLayerStamps * 2;
  DevBytes stamps(kLayers * nst * sizeof(unsigned long long));
  ASSERT_EQ(cudaMemset(stamps.ptr, 0, kLayers * nst * sizeof(unsigned long long)), cudaSuccess);
  cudaMemsetAsync(flush.ptr, 3, size_t{256} << 20, nullptr);
  for (int l = 0; l < kLayers; ++l) {
    zc::DecodeLayerArgs a = layers[static_cast<size_t>(l)]->args(c.Hq, eps, scale);
    if (l > 0) {
      a.x = layers[static_cast<size_t>(l - 1)]->out.in();
      a.residual = layers[static_cast<size_t>(l - 1)]->res_out.in();
    }
    zc::DecodeLayerLaunch stamped;
    stamped.stamps = static_cast<unsigned long long *>(stamps.ptr) + l * nst;
    ZT_GPU_OK(zc::decode_layer(a, ws.ptr, wsb, nullptr, stamped));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned long long> st(kLayers * nst);
  ASSERT_EQ(cudaMemcpy(st.data(), stamps.ptr, st.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int l = 0; l < kLayers; l += kLayers - 1) {
    const std::vector<unsigned long long> one(st.begin() + l * nst, st.begin() + (l + 1) * nst);
    print_timeline(one, l == 0 ? "layer 0 (after the L2 flush)" : "layer 3");
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace zt
