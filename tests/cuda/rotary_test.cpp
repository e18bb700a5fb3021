// The rotary kernel (kernels/cuda/rotary.cu) against the CPU reference kernel: every float dtype of x, tables in
// x's dtype and in fp32, the forward and the transposed (inverse) map, llama's prefill and decode table
// shapes, halves that the 16-byte path takes and ragged ones that it cannot, a misaligned pointer, out
// written over x, and the sequence-major form (plan 2.10). Both kernels round the same products and sums in the same order, so the results must be
// identical (tolerance 0). Outputs are poisoned with NaN first, so an element never written fails.
#include "gpu_test_util.h"
#include "zk/cuda_rotary.h"

namespace zt {
namespace {

namespace zc = zk::cuda;

struct Case {
  Dims x, table;
};

const Case kCases[] = {
    {Dims{2, 4, 8, 16}, Dims{1, 1, 8, 16}},    // the test llama's prefill: [B, H, S, D], tables [1, 1, S, D]
    {Dims{1, 32, 5, 64}, Dims{1, 1, 5, 64}},   // llama-1b heads, five positions
    {Dims{2, 4, 16, 128}, Dims{1, 1, 16, 128}},  // llama2-7b's head dim
    {Dims{3, 4, 1, 128}, Dims{3, 1, 1, 128}},  // a decode step: one table row per sequence (gathered)
    {Dims{3, 5, 6}, Dims{5, 6}},               // h = 3: no 16-byte group fits, one element per thread
    {Dims{2, 7, 12}, Dims{2, 7, 12}},          // h = 6: no 16-byte group of bf16 / f16 fits; tables unbroadcast
    {Dims{8}, Dims{8}},                        // one row
};

TEST(CudaRotary, MatchesReference) {
  for (DType xt : {DType::f32, DType::bf16, DType::f16})
    for (DType tt : {xt, DType::f32})
      for (const Case &c : kCases)
        for (bool inverse : {false, true}) {
          SCOPED_TRACE(std::string("x ") + zk::dtype_name(xt) + dims_str(c.x) + " tables " + zk::dtype_name(tt) +
                       dims_str(c.table) + (inverse ? " inverse" : ""));
          HostT x = random_tensor(xt, c.x), co = random_tensor(tt, c.table, -1, 1), si = random_tensor(tt, c.table, -1, 1);
          HostT ref(xt, c.x);
          ZT_CPU_OK(zk::cpu::rotary(x.in(), co.in(), si.in(), ref.out(), inverse));
          DevT dx(x), dc(co), ds(si), dy(xt, c.x);
          ZT_GPU_OK(zc::rotary(dx.in(), dc.in(), ds.in(), dy.out(), inverse, nullptr));
          EXPECT_TRUE(close(dy.download(), ref, 0));
          // In place: out over x.
          ZT_GPU_OK(zc::rotary(dx.in(), dc.in(), ds.in(), zk::Out{dx.ptr, xt, c.x}, inverse, nullptr));
          EXPECT_TRUE(close(dx.download(), ref, 0));
        }
}

TEST(CudaRotary, SequenceMajorMatchesReference) {
  // seq_major (plan 2.10): x [B, S, H, D] with the tables broadcast to its head-major view [B, H, S, D]. The
  // test llama's folded q and k (shared tables), llama-1b's heads, per-sequence tables, and a half that the
  // 16-byte path cannot take; out also written over x.
  const Case cases[] = {
      {Dims{2, 8, 4, 16}, Dims{1, 1, 8, 16}},
      {Dims{1, 5, 32, 64}, Dims{1, 1, 5, 64}},
      {Dims{3, 4, 2, 128}, Dims{3, 1, 4, 128}},
      {Dims{2, 3, 5, 6}, Dims{1, 1, 3, 6}},
  };
  for (DType xt : {DType::f32, DType::bf16, DType::f16})
    for (DType tt : {xt, DType::f32})
      for (const Case &c : cases)
        for (bool inverse : {false, true}) {
          SCOPED_TRACE(std::string("seq_major x ") + zk::dtype_name(xt) + dims_str(c.x) + " tables " +
                       zk::dtype_name(tt) + dims_str(c.table) + (inverse ? " inverse" : ""));
          HostT x = random_tensor(xt, c.x), co = random_tensor(tt, c.table, -1, 1), si = random_tensor(tt, c.table, -1, 1);
          HostT ref(xt, c.x);
          ZT_CPU_OK(zk::cpu::rotary(x.in(), co.in(), si.in(), ref.out(), inverse, /*seq_major=*/true));
          DevT dx(x), dc(co), ds(si), dy(xt, c.x);
          ZT_GPU_OK(zc::rotary(dx.in(), dc.in(), ds.in(), dy.out(), inverse, nullptr, /*seq_major=*/true));
          EXPECT_TRUE(close(dy.download(), ref, 0));
          ZT_GPU_OK(zc::rotary(dx.in(), dc.in(), ds.in(), zk::Out{dx.ptr, xt, c.x}, inverse, nullptr, true));
          EXPECT_TRUE(close(dx.download(), ref, 0));
        }
  // Refused as the reference refuses: a rank-3 x, and tables that fit x's shape but not its head-major view.
  DevT x3(DType::f32, Dims{4, 2, 8}), c3(DType::f32, Dims{8}), x4(DType::f32, Dims{1, 4, 2, 8}),
      fit(DType::f32, Dims{1, 4, 1, 8});
  EXPECT_FALSE(zc::rotary(x3.in(), c3.in(), c3.in(), x3.out(), false, nullptr, true).ok());
  EXPECT_FALSE(zc::rotary(x4.in(), fit.in(), fit.in(), x4.out(), false, nullptr, true).ok());
}

TEST(CudaRotary, MisalignedPointersTakeTheElementPath) {
  // x starts one element into its buffer, so the 16-byte path is refused and the plain one must agree.
  const Dims s{2, 3, 4, 32}, t{1, 1, 4, 32};
  for (DType xt : {DType::f32, DType::bf16}) {
    HostT x = random_tensor(xt, s), co = random_tensor(xt, t, -1, 1), si = random_tensor(xt, t, -1, 1);
    HostT ref(xt, s);
    ZT_CPU_OK(zk::cpu::rotary(x.in(), co.in(), si.in(), ref.out(), false));
    const Dims wide{s.numel() + 1};
    DevT buf(xt, wide), dy(xt, wide), dc(co), ds(si);
    const size_t es = zk::dtype_size(xt);
    ASSERT_EQ(cudaMemcpy(static_cast<char *>(buf.ptr) + es, x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    ZT_GPU_OK(zc::rotary(zk::In{static_cast<char *>(buf.ptr) + es, xt, s}, dc.in(), ds.in(),
                         zk::Out{static_cast<char *>(dy.ptr) + es, xt, s}, false, nullptr));
    HostT all = dy.download(), got(xt, s);
    std::memcpy(got.bytes.data(), all.bytes.data() + es, got.bytes.size());
    EXPECT_TRUE(close(got, ref, 0));
  }
}

TEST(CudaRotary, RefusesWhatTheReferenceRefuses) {
  DevT x(DType::f32, Dims{2, 6}), odd(DType::f32, Dims{2, 5}), c(DType::f32, Dims{6}), c1(DType::f32, Dims{2, 1}),
      y(DType::f32, Dims{2, 6}), yb(DType::bf16, Dims{2, 6});
  EXPECT_FALSE(zc::rotary(odd.in(), c.in(), c.in(), zk::Out{y.ptr, DType::f32, Dims{2, 5}}, false, nullptr).ok());
  EXPECT_FALSE(zc::rotary(x.in(), c1.in(), c1.in(), y.out(), false, nullptr).ok());
  EXPECT_FALSE(zc::rotary(x.in(), c.in(), c.in(), yb.out(), false, nullptr).ok());
}

}  // namespace
}  // namespace zt
