// Every CUDA kernel against the CPU reference kernels, on fresh random inputs, for several shapes (ragged
// ones included: sizes that are not multiples of any tile or block) and for each storage dtype. Outputs are
// poisoned with NaN before each launch, so an element the kernel never writes fails the comparison.
#include <cmath>
#include <cstring>
#include <memory>
#include <cstdlib>
#include <limits>

#include "gpu_test_util.h"
#include "zk/attention_kernels.h"
#include "zk/cuda_train_kernels.h"

namespace zt {
namespace {

using zk::cpu::Binary;
using zk::cpu::Reduce;
using zk::cpu::Unary;
namespace zc = zk::cuda;

const DType kFloats[] = {DType::f32, DType::bf16, DType::f16};

TEST(CudaElementwise, UnaryMatchesReference) {
  const Unary ops[] = {Unary::copy, Unary::neg,  Unary::exp,  Unary::log,       Unary::sqrt,     Unary::reciprocal,
                       Unary::tanh, Unary::erf,  Unary::sigmoid, Unary::relu,   Unary::cos,      Unary::sin,
                       Unary::abs,  Unary::gelu_tanh, Unary::gelu_erf, Unary::silu};
  const Dims shapes[] = {Dims{7}, Dims{3, 5, 33}, Dims{2, 1, 1000}, Dims{}};
  for (DType t : kFloats)
    for (const Dims &s : shapes)
      for (Unary op : ops) {
        SCOPED_TRACE(std::string(zk::dtype_name(t)) + " " + dims_str(s) + " op " + std::to_string(int(op)));
        const bool positive = op == Unary::log || op == Unary::sqrt || op == Unary::reciprocal;
        HostT x = positive ? random_tensor(t, s, 0.1f, 3.0f) : random_tensor(t, s);
        HostT ref(t, s);
        ZT_CPU_OK(zk::cpu::unary(op, x.in(), ref.out()));
        DevT dx(x), dy(t, s);
        ZT_GPU_OK(zc::unary(op, dx.in(), dy.out(), nullptr));
        EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
      }
}

TEST(CudaElementwise, IntegerUnaryAndNot) {
  HostT x = random_tensor(DType::i64, Dims{5, 9}, -50, 50);
  for (Unary op : {Unary::neg, Unary::abs, Unary::relu}) {
    HostT ref(DType::i64, x.shape);
    ZT_CPU_OK(zk::cpu::unary(op, x.in(), ref.out()));
    DevT dx(x), dy(DType::i64, x.shape);
    ZT_GPU_OK(zc::unary(op, dx.in(), dy.out(), nullptr));
    EXPECT_TRUE(close(dy.download(), ref, 0));
  }
  HostT b = random_tensor(DType::bool8, Dims{17}, 0, 2);
  HostT ref(DType::bool8, b.shape);
  ZT_CPU_OK(zk::cpu::unary(Unary::not_, b.in(), ref.out()));
  DevT db(b), dy(DType::bool8, b.shape);
  ZT_GPU_OK(zc::unary(Unary::not_, db.in(), dy.out(), nullptr));
  EXPECT_TRUE(close(dy.download(), ref, 0));
  // A float op on integers is refused with a message, not launched.
  DevT dx(x), dz(DType::i64, x.shape);
  EXPECT_FALSE(zc::unary(Unary::exp, dx.in(), dz.out(), nullptr).ok());
}

TEST(CudaElementwise, CastMatchesReference) {
  const DType all[] = {DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::bool8};
  for (DType from : all)
    for (DType to : all) {
      // [3, 37]: one element at a time; [4, 40]: whole 8-element groups (the vector path between floats).
      for (const Dims &shape : {Dims{3, 37}, Dims{4, 40}}) {
        SCOPED_TRACE(std::string(zk::dtype_name(from)) + " -> " + zk::dtype_name(to) + " " + dims_str(shape));
        HostT x = random_tensor(from, shape, -300.0f, 300.0f);
        HostT ref(to, x.shape);
        ZT_CPU_OK(zk::cpu::cast(x.in(), ref.out()));
        DevT dx(x), dy(to, x.shape);
        ZT_GPU_OK(zc::cast(dx.in(), dy.out(), nullptr));
        EXPECT_TRUE(close(dy.download(), ref, 0));  // conversions are exact or identically rounded
      }
    }
}

TEST(CudaElementwise, BinaryBroadcastMatchesReference) {
  struct Case { Dims a, b, out; };
  const Case cases[] = {{Dims{4, 1, 5}, Dims{3, 1}, Dims{4, 3, 5}},
                        {Dims{2, 3, 129}, Dims{129}, Dims{2, 3, 129}},
                        {Dims{6, 7}, Dims{6, 7}, Dims{6, 7}},
                        {Dims{4, 64}, Dims{4, 64}, Dims{4, 64}},  // dense and packable: the 16-byte path
                        {Dims{2, 3, 16, 64}, Dims{1, 1, 16, 64}, Dims{2, 3, 16, 64}},  // suffix broadcast, packed
                        {Dims{1, 3, 64}, Dims{2, 3, 64}, Dims{2, 3, 64}},              // suffix on the left
                        {Dims{}, Dims{2, 5}, Dims{2, 5}},
                        {Dims{6, 64}, Dims{6, 1}, Dims{6, 64}},                    // one value per row, packed
                        {Dims{3, 1, 1}, Dims{3, 4, 16}, Dims{3, 4, 16}},           // per row on the left
                        {Dims{5, 3}, Dims{5, 1}, Dims{5, 3}},                      // per row, not packable
                        {Dims{5, 1}, Dims{5, 3}, Dims{5, 3}},                      // the same on the left
                        {Dims{2, 1, 3, 1, 2, 1}, Dims{1, 4, 1, 5, 1, 3}, Dims{2, 4, 3, 5, 2, 3}}};
  const Binary ops[] = {Binary::add, Binary::sub,  Binary::mul,     Binary::div,        Binary::pow,
                        Binary::max, Binary::min,  Binary::equal,   Binary::less,       Binary::greater,
                        Binary::less_equal, Binary::greater_equal};
  for (DType t : kFloats)
    for (const Case &c : cases)
      for (Binary op : ops) {
        SCOPED_TRACE(std::string(zk::dtype_name(t)) + " " + dims_str(c.a) + " op " + std::to_string(int(op)) + " " +
                     dims_str(c.b));
        HostT a = op == Binary::pow ? random_tensor(t, c.a, 0.5f, 2.0f) : random_tensor(t, c.a);
        HostT b = op == Binary::div ? random_tensor(t, c.b, 0.5f, 2.0f) : random_tensor(t, c.b);
        if (op == Binary::equal) b = a.shape == c.b ? a : b;  // some equal elements
        HostT ref(t, c.out);
        ZT_CPU_OK(zk::cpu::binary(op, a.in(), b.in(), ref.out()));
        DevT da(a), db(b), dy(t, c.out);
        ZT_GPU_OK(zc::binary(op, da.in(), db.in(), dy.out(), nullptr));
        EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
      }
  // Integers and logical ops, comparisons into bool8.
  HostT a = random_tensor(DType::i64, Dims{3, 4}, -9, 9), b = random_tensor(DType::i64, Dims{4}, -9, 9);
  for (Binary op : {Binary::add, Binary::sub, Binary::mul, Binary::div, Binary::max, Binary::and_, Binary::or_}) {
    HostT ref(DType::i64, Dims{3, 4});
    ZT_CPU_OK(zk::cpu::binary(op, a.in(), b.in(), ref.out()));
    DevT da(a), db(b), dy(DType::i64, Dims{3, 4});
    ZT_GPU_OK(zc::binary(op, da.in(), db.in(), dy.out(), nullptr));
    EXPECT_TRUE(close(dy.download(), ref, 0));
  }
  HostT fa = random_tensor(DType::f32, Dims{3, 4}), fb = random_tensor(DType::f32, Dims{3, 1});
  HostT ref(DType::bool8, Dims{3, 4});
  ZT_CPU_OK(zk::cpu::binary(Binary::less, fa.in(), fb.in(), ref.out()));
  DevT da(fa), db(fb), dy(DType::bool8, Dims{3, 4});
  ZT_GPU_OK(zc::binary(Binary::less, da.in(), db.in(), dy.out(), nullptr));
  EXPECT_TRUE(close(dy.download(), ref, 0));
  // Shapes that do not broadcast are refused.
  DevT bad(DType::f32, Dims{5});
  EXPECT_FALSE(zc::binary(Binary::add, da.in(), bad.in(), dy.out(), nullptr).ok());
}

TEST(CudaElementwise, WhereExpandFill) {
  for (DType t : kFloats) {
    HostT c = random_tensor(DType::bool8, Dims{3, 1, 5}, 0, 2);
    HostT a = random_tensor(t, Dims{4, 5}), b = random_tensor(t, Dims{1});
    HostT ref(t, Dims{3, 4, 5});
    ZT_CPU_OK(zk::cpu::where(c.in(), a.in(), b.in(), ref.out()));
    DevT dc(c), da(a), db(b), dy(t, Dims{3, 4, 5});
    ZT_GPU_OK(zc::where(dc.in(), da.in(), db.in(), dy.out(), nullptr));
    EXPECT_TRUE(close(dy.download(), ref, 0));

    // Element by element ([.., 7]); widened moves ([.., 32] contiguous: 16-byte units for every dtype
    // here); the innermost dim itself broadcast (no widening).
    struct ECase { Dims in, out; };
    // One value per row (the loss backward's [rows, 1] -> [rows, V]): [4, 1] and [3, 5, 1]; [1, 5, 1] is not
    // (its first dim broadcasts too).
    for (const ECase &e : {ECase{Dims{3, 1, 7}, Dims{2, 3, 5, 7}}, ECase{Dims{3, 1, 32}, Dims{2, 3, 5, 32}},
                           ECase{Dims{4, 1}, Dims{4, 24}}, ECase{Dims{3, 5, 1}, Dims{3, 5, 33}},
                           ECase{Dims{1, 5, 1}, Dims{3, 5, 4}}}) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " expand " + dims_str(e.in) + " -> " + dims_str(e.out));
      HostT x = random_tensor(t, e.in);
      HostT eref(t, e.out);
      ZT_CPU_OK(zk::cpu::expand(x.in(), eref.out()));
      DevT dx(x), de(t, e.out);
      ZT_GPU_OK(zc::expand(dx.in(), de.out(), nullptr));
      EXPECT_TRUE(close(de.download(), eref, 0));
    }

    HostT fref(t, Dims{33, 3});
    ZT_CPU_OK(zk::cpu::fill(-1.25, fref.out()));
    DevT df(t, Dims{33, 3});
    ZT_GPU_OK(zc::fill(-1.25, df.out(), nullptr));
    EXPECT_TRUE(close(df.download(), fref, 0));
  }
}

TEST(CudaElementwise, FusedBiasActivationAndGatedProduct) {
  for (DType t : kFloats)
    // Packed (16-byte) and plain paths; llama2-7b's width (the packed path's two-pack steps and its tail);
    // a single pack.
    for (Dims s : {Dims{5, 96}, Dims{2, 3, 1000}, Dims{4, 33}, Dims{3, 11008}, Dims{1, 8}}) {
      const int64_t n = s.d[s.rank - 1];
      HostT x = random_tensor(t, s), bias = random_tensor(t, Dims{n}), up = random_tensor(t, s);
      for (Unary act : {Unary::gelu_tanh, Unary::gelu_erf, Unary::silu, Unary::relu}) {
        SCOPED_TRACE(std::string(zk::dtype_name(t)) + " " + dims_str(s) + " act " + std::to_string(int(act)));
        // Reference: the unfused composition, in fp32 storage so that only the fused kernel rounds once.
        HostT xf(DType::f32, s), bf(DType::f32, Dims{n}), sum(DType::f32, s), ref32(DType::f32, s), ref(t, s);
        ZT_CPU_OK(zk::cpu::cast(x.in(), xf.out()));
        ZT_CPU_OK(zk::cpu::cast(bias.in(), bf.out()));
        ZT_CPU_OK(zk::cpu::binary(Binary::add, xf.in(), bf.in(), sum.out()));
        ZT_CPU_OK(zk::cpu::unary(act, sum.in(), ref32.out()));
        ZT_CPU_OK(zk::cpu::cast(ref32.in(), ref.out()));
        DevT dx(x), db(bias), dy(t, s);
        ZT_GPU_OK(zc::bias_act(act, dx.in(), db.in(), dy.out(), nullptr));
        EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
        if (act == Unary::relu) continue;
        HostT g32(DType::f32, s), u32(DType::f32, s), p32(DType::f32, s), gref(t, s);
        ZT_CPU_OK(zk::cpu::unary(act, xf.in(), g32.out()));
        ZT_CPU_OK(zk::cpu::cast(up.in(), u32.out()));
        ZT_CPU_OK(zk::cpu::binary(Binary::mul, g32.in(), u32.in(), p32.out()));
        ZT_CPU_OK(zk::cpu::cast(p32.in(), gref.out()));
        DevT du(up), dg(t, s);
        ZT_GPU_OK(zc::gated(act, dx.in(), du.in(), dg.out(), nullptr));
        EXPECT_TRUE(close(dg.download(), gref, tol_for(t)));
      }
    }
}

// linear_residual (plan 2.13): the product with the residual added in cuBLASLt's epilogue (C, beta = 1)
// against the CPU kernel's fp32 sum rounded once; with and without a bias, both weight layouts, a 3-D x,
// few rows (still cuBLASLt), and an N whose rows are not 16-byte aligned in the 16-bit types.
TEST(CudaLinear, ResidualEpilogueMatchesReference) {
  std::unique_ptr<zc::Blas> blas;
  ZT_GPU_OK(zc::Blas::create(&blas));
  DevT ws(DType::f32, Dims{static_cast<int64_t>(zc::kGemmWorkspaceBytes / 4)});
  struct Shape {
    Dims x;
    int64_t N;
  };
  const Shape shapes[] = {{Dims{300, 96}, 64}, {Dims{2, 17, 128}, 256}, {Dims{4, 64}, 40}, {Dims{257, 64}, 50}};
  for (DType t : kFloats)
    for (const Shape &sh : shapes)
      for (bool tw : {false, true})
        for (bool with_bias : {false, true}) {
          const int64_t K = sh.x.d[sh.x.rank - 1], N = sh.N;
          Dims os = sh.x;
          os.d[os.rank - 1] = N;
          SCOPED_TRACE(std::string(zk::dtype_name(t)) + " x " + dims_str(sh.x) + " N " + std::to_string(N) +
                       (tw ? " W [N, K]" : " W [K, N]") + (with_bias ? " bias" : ""));
          HostT x = random_tensor(t, sh.x), w = random_tensor(t, tw ? Dims{N, K} : Dims{K, N}, -0.2f, 0.2f);
          HostT bias = random_tensor(t, Dims{N}), r = random_tensor(t, os);
          HostT ref32(DType::f32, os), ref(t, os);
          std::vector<float> scratch(zk::cpu::linear_scratch(x.in(), w.in(), ref32.out(), tw) + 1);
          ZT_CPU_OK(zk::cpu::linear_residual(x.in(), w.in(), with_bias ? bias.in() : zk::In{}, r.in(), ref32.out(), tw,
                                             0.5f, scratch.data()));
          ZT_CPU_OK(zk::cpu::cast(ref32.in(), ref.out()));
          DevT dx(x), dw(w), db(bias), dr(r), dy(t, os);
          ZT_GPU_OK(zc::linear_residual(*blas, dx.in(), dw.in(), with_bias ? db.in() : zk::In{}, dr.in(), dy.out(), tw,
                                        0.5f, ws.ptr, zc::kGemmWorkspaceBytes, nullptr));
          EXPECT_TRUE(close(dy.download(), ref, t == DType::f32 ? 1e-4f : tol_for(t)));
          EXPECT_TRUE(close(dr.download(), r, 0.0f)) << "the residual must be left as it was";
        }
}

// Plan 2.15: the plan's cuBLASLt algorithm runs as given. Every row of the tuning table (zk/gemm_algos.h) for
// this device at its shape, against the CPU kernel on a slice of rows (the first and last 64; the whole
// product would take the CPU too long) and against the heuristic's own answer; an algorithm cuBLASLt does not
// have is refused with a message that says to recompile, and nothing runs.
TEST(CudaLinear, PlanAlgorithmRunsOrIsRefused) {
  std::unique_ptr<zc::Blas> blas;
  ZT_GPU_OK(zc::Blas::create(&blas));
  DevT ws(DType::f32, Dims{static_cast<int64_t>(zc::kGemmWorkspaceBytes / 4)});
  int major = 0, minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  int rows = 0;
  for (const zc::TunedGemm &t : zc::kTunedGemms) {
    if (t.arch != major * 10 + minor) continue;
    const DType dt = t.bf16 ? DType::bf16 : DType::f16;
    SCOPED_TRACE("tuned " + std::to_string(t.M) + "x" + std::to_string(t.K) + "x" + std::to_string(t.N));
    HostT x = random_tensor(dt, Dims{t.M, t.K}), w = random_tensor(dt, t.trans_w ? Dims{t.N, t.K} : Dims{t.K, t.N}, -0.05f, 0.05f);
    HostT bias = random_tensor(dt, Dims{t.N}), r = random_tensor(dt, Dims{t.M, t.N});
    DevT dx(x), dw(w), db(bias), dr(r), dy(dt, Dims{t.M, t.N}), dh(dt, Dims{t.M, t.N});
    const zk::In b = t.bias ? db.in() : zk::In{};
    if (t.residual) {
      ZT_GPU_OK(zc::linear_residual(*blas, dx.in(), dw.in(), b, dr.in(), dy.out(), t.trans_w, 1.0f, ws.ptr,
                                    zc::kGemmWorkspaceBytes, nullptr, &t.algo));
      ZT_GPU_OK(zc::linear_residual(*blas, dx.in(), dw.in(), b, dr.in(), dh.out(), t.trans_w, 1.0f, ws.ptr,
                                    zc::kGemmWorkspaceBytes, nullptr));
    } else {
      const zc::Epilogue e = t.bias ? zc::Epilogue::bias : zc::Epilogue::none;
      ZT_GPU_OK(zc::linear(*blas, dx.in(), dw.in(), b, dy.out(), t.trans_w, 1.0f, e, ws.ptr, zc::kGemmWorkspaceBytes,
                           nullptr, zc::FewRows::library, &t.algo));
      ZT_GPU_OK(zc::linear(*blas, dx.in(), dw.in(), b, dh.out(), t.trans_w, 1.0f, e, ws.ptr, zc::kGemmWorkspaceBytes,
                           nullptr));
    }
    HostT y = dy.download();
    EXPECT_TRUE(close(y, dh.download(), tol_for(dt))) << "against the heuristic's answer";
    const size_t es = zk::dtype_size(dt);
    for (int64_t r0 : {int64_t{0}, t.M - 64}) {
      HostT xs(dt, Dims{64, t.K}), rs(dt, Dims{64, t.N}), ys(dt, Dims{64, t.N}), ref32(DType::f32, Dims{64, t.N}),
          ref(dt, Dims{64, t.N});
      std::memcpy(xs.bytes.data(), x.bytes.data() + r0 * t.K * es, xs.bytes.size());
      std::memcpy(rs.bytes.data(), r.bytes.data() + r0 * t.N * es, rs.bytes.size());
      std::memcpy(ys.bytes.data(), y.bytes.data() + r0 * t.N * es, ys.bytes.size());
      std::vector<float> scratch(zk::cpu::linear_scratch(xs.in(), w.in(), ref32.out(), t.trans_w) + 1);
      ZT_CPU_OK(zk::cpu::linear_residual(xs.in(), w.in(), t.bias ? bias.in() : zk::In{},
                                         t.residual ? rs.in() : zk::In{}, ref32.out(), t.trans_w, 1.0f, scratch.data()));
      ZT_CPU_OK(zk::cpu::cast(ref32.in(), ref.out()));
      EXPECT_TRUE(close(ys, ref, tol_for(dt))) << "rows " << r0 << ".." << r0 + 64;
    }
    ++rows;
  }
  std::printf("tuned products of this device checked: %d\n", rows);
  // An algorithm id no cuBLASLt has: refused, the output untouched (still the poison).
  HostT x = random_tensor(DType::bf16, Dims{256, 128}), w = random_tensor(DType::bf16, Dims{128, 256});
  DevT dx(x), dw(w), dy(DType::bf16, Dims{256, 256});
  const zc::GemmAlgo bogus{100000, 29, 35, 1, 0, 1, 0};
  zc::GpuStatus st = zc::linear(*blas, dx.in(), dw.in(), zk::In{}, dy.out(), false, 1.0f, zc::Epilogue::none, ws.ptr,
                                zc::kGemmWorkspaceBytes, nullptr, zc::FewRows::library, &bogus);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message.find("recompile the plan"), std::string::npos) << st.message;
  HostT y = dy.download();
  EXPECT_TRUE(std::isnan(y.at(0)) && std::isnan(y.at(y.numel() - 1)));
}

TEST(CudaRows, SoftmaxAnyAxis) {
  struct Case { Dims s; int axis; };
  const Case cases[] = {{Dims{4, 1000}, -1}, {Dims{3, 7, 5}, 1}, {Dims{2, 3, 33}, 2}, {Dims{5, 4100}, 1}, {Dims{9, 1}, 1}};
  for (DType t : kFloats)
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " " + dims_str(c.s) + " axis " + std::to_string(c.axis));
      HostT x = random_tensor(t, c.s, -8.0f, 8.0f), ref(t, c.s);
      ZT_CPU_OK(zk::cpu::softmax(x.in(), ref.out(), c.axis));
      DevT dx(x), dy(t, c.s);
      ZT_GPU_OK(zc::softmax(dx.in(), dy.out(), c.axis, nullptr));
      EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
    }
}

TEST(CudaRows, MaskedCausalSoftmax) {
  for (DType t : kFloats)
    for (Dims s : {Dims{2, 3, 17, 17}, Dims{1, 2, 5, 130}}) {
      const int64_t S = s.d[2], T = s.d[3];
      HostT x = random_tensor(t, s), mask = random_tensor(DType::f32, Dims{s.d[0], 1, 1, T}, -3.0f, 0.0f);
      // One key is padding for every query: an additive -inf.
      zk::store_f32(mask.bytes.data(), DType::f32, T - 1, -std::numeric_limits<float>::infinity());
      const float scale = 0.125f;
      for (bool causal : {false, true}) {
        SCOPED_TRACE(std::string(zk::dtype_name(t)) + " " + dims_str(s) + (causal ? " causal" : ""));
        // Reference: scores formed in fp32 on the host, then the reference softmax.
        HostT sc(DType::f32, s), ref32(DType::f32, s), ref(t, s);
        for (int64_t i = 0; i < s.numel(); ++i) {
          const int64_t j = i % T, q = (i / T) % S, b = i / (T * S * s.d[1]);
          float v = x.at(i) * scale + mask.at(b * T + j);
          if (causal && j > q + (T - S)) v = -std::numeric_limits<float>::infinity();
          zk::store_f32(sc.bytes.data(), DType::f32, i, v);
        }
        ZT_CPU_OK(zk::cpu::softmax(sc.in(), ref32.out(), -1));
        ZT_CPU_OK(zk::cpu::cast(ref32.in(), ref.out()));
        DevT dx(x), dm(mask), dy(t, s);
        ZT_GPU_OK(zc::masked_softmax(dx.in(), dm.in(), dy.out(), causal, scale, nullptr));
        EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
      }
    }
}

TEST(CudaRows, LayerNormRmsNormAndResidualFusion) {
  struct Case { Dims s; int axis; };
  const Case cases[] = {{Dims{4, 1024}, -1}, {Dims{3, 5, 77}, 2}, {Dims{2, 3, 4, 5}, 2}, {Dims{7, 3000}, 1},
                        {Dims{1, 1}, 1},      {Dims{2, 4096}, 1},   {Dims{3, 11008}, 1}, {Dims{600, 4096}, 1}};
  for (DType t : kFloats)
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " " + dims_str(c.s) + " axis " + std::to_string(c.axis));
      int ax = c.axis < 0 ? c.axis + c.s.rank : c.axis;
      Dims ns;
      for (int i = ax; i < c.s.rank; ++i) ns.d[ns.rank++] = c.s.d[i];
      // A mean far from zero checks that the variance does not cancel away.
      HostT x = random_tensor(t, c.s, 3.0f, 7.0f), g = random_tensor(t, ns), b = random_tensor(t, ns);
      HostT ref(t, c.s);
      ZT_CPU_OK(zk::cpu::layer_norm(x.in(), g.in(), b.in(), ref.out(), c.axis, 1e-5f));
      DevT dx(x), dg(g), db(b), dy(t, c.s);
      ZT_GPU_OK(zc::layer_norm(dx.in(), dg.in(), db.in(), dy.out(), c.axis, 1e-5f, nullptr));
      EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
      // Without scale and bias.
      HostT ref2(t, c.s);
      ZT_CPU_OK(zk::cpu::layer_norm(x.in(), zk::In{}, zk::In{}, ref2.out(), c.axis, 1e-5f));
      dy.poison();
      ZT_GPU_OK(zc::layer_norm(dx.in(), zk::In{}, zk::In{}, dy.out(), c.axis, 1e-5f, nullptr));
      EXPECT_TRUE(close(dy.download(), ref2, tol_for(t)));
    }
  for (DType t : kFloats)
    // The 16-byte kernel at 1 and 2 packs a thread (2048, llama2-7b's 4096, one decode row of it, 6144 in
    // bf16 and f16; 4096 in f32), over more rows than the device holds blocks (each block then walks several
    // rows); rows longer than it takes (11008, 20000), which the element-wise kernel reads once per pass, and
    // rows that are not whole packs (77; 4100 and 36 in bf16 and f16, whose packs are 8 elements), which it
    // keeps in registers; a single element.
    for (Dims s : {Dims{4, 2048}, Dims{2, 4096}, Dims{1, 4096}, Dims{2, 6144}, Dims{1500, 2048}, Dims{3, 4100},
                   Dims{2, 11008}, Dims{1, 20000}, Dims{3, 5, 77}, Dims{2, 36}, Dims{1, 1}}) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " rms " + dims_str(s));
      const int64_t n = s.d[s.rank - 1];
      HostT x = random_tensor(t, s), r = random_tensor(t, s), g = random_tensor(t, Dims{n}), b = random_tensor(t, Dims{n});
      HostT ref(t, s);
      ZT_CPU_OK(zk::cpu::rms_norm(x.in(), g.in(), ref.out(), 1e-6f));
      DevT dx(x), dr(r), dg(g), db(b), dy(t, s), dsum(t, s);
      ZT_GPU_OK(zc::rms_norm(dx.in(), dg.in(), dy.out(), 1e-6f, nullptr));
      EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
      // Residual fusion against the unfused reference: add (rounded to storage), then norm.
      HostT sum(t, s), lref(t, s), rref(t, s);
      ZT_CPU_OK(zk::cpu::binary(Binary::add, x.in(), r.in(), sum.out()));
      ZT_CPU_OK(zk::cpu::layer_norm(sum.in(), g.in(), b.in(), lref.out(), -1, 1e-5f));
      ZT_CPU_OK(zk::cpu::rms_norm(sum.in(), g.in(), rref.out(), 1e-6f));
      dy.poison();
      ZT_GPU_OK(zc::residual_norm(dx.in(), dr.in(), dg.in(), db.in(), dsum.out(), dy.out(), false, 1e-5f, nullptr));
      EXPECT_TRUE(close(dsum.download(), sum, 0));
      EXPECT_TRUE(close(dy.download(), lref, tol_for(t)));
      dy.poison();
      ZT_GPU_OK(zc::residual_norm(dx.in(), dr.in(), dg.in(), zk::In{}, zk::Out{}, dy.out(), true, 1e-6f, nullptr));
      EXPECT_TRUE(close(dy.download(), rref, tol_for(t)));
    }
}

TEST(CudaRows, NormsOnMisalignedOperandsTakeTheElementPath) {
  // x, the residual and both outputs start one element into their buffers, so the 16-byte kernel is refused
  // and the element-wise one must agree with the reference (llama2-7b's width, bf16 and f32).
  const Dims s{3, 4096};
  const int64_t n = s.d[1];
  for (DType t : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(zk::dtype_name(t));
    HostT x = random_tensor(t, s), r = random_tensor(t, s), g = random_tensor(t, Dims{n});
    HostT sum(t, s), ref(t, s);
    ZT_CPU_OK(zk::cpu::binary(Binary::add, x.in(), r.in(), sum.out()));
    ZT_CPU_OK(zk::cpu::rms_norm(sum.in(), g.in(), ref.out(), 1e-6f));
    const size_t es = zk::dtype_size(t);
    const Dims wide{s.numel() + 1};
    DevT bx(t, wide), br(t, wide), bs(t, wide), by(t, wide), dg(g);
    auto at = [&](DevT &b) { return static_cast<char *>(b.ptr) + es; };
    ASSERT_EQ(cudaMemcpy(at(bx), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(at(br), r.bytes.data(), r.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ZT_GPU_OK(zc::residual_norm(zk::In{at(bx), t, s}, zk::In{at(br), t, s}, dg.in(), zk::In{}, zk::Out{at(bs), t, s},
                                zk::Out{at(by), t, s}, true, 1e-6f, nullptr));
    auto part = [&](const DevT &b) {
      HostT all = b.download(), got(t, s);
      std::memcpy(got.bytes.data(), all.bytes.data() + es, got.bytes.size());
      return got;
    };
    EXPECT_TRUE(close(part(bs), sum, 0));
    EXPECT_TRUE(close(part(by), ref, tol_for(t)));
  }
}

TEST(CudaRows, Reductions) {
  struct Case { Dims s; std::vector<int64_t> axes; };
  const Case cases[] = {{Dims{4, 1000}, {1}}, {Dims{3, 7, 5}, {0, 2}}, {Dims{2, 3, 33}, {0}}, {Dims{5, 6}, {0, 1}},
                        {Dims{2, 3, 4, 5, 6}, {1, 3}},
                        // Trailing dense rows (the row kernel): one long axis, and two trailing axes.
                        {Dims{3, 5, 777}, {2}}, {Dims{2, 3, 130}, {1, 2}}};
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i64})
    for (const Case &c : cases)
      for (Reduce op : {Reduce::sum, Reduce::mean, Reduce::max})
        for (bool keep : {false, true}) {
          SCOPED_TRACE(std::string(zk::dtype_name(t)) + " " + dims_str(c.s) + " op " + std::to_string(int(op)));
          Dims os;
          for (int i = 0; i < c.s.rank; ++i) {
            bool red = false;
            for (int64_t a : c.axes) red |= a == i;
            if (!red) os.d[os.rank++] = c.s.d[i];
            else if (keep) os.d[os.rank++] = 1;
          }
          HostT x = random_tensor(t, c.s, -20.0f, 20.0f), ref(t, os);
          ZT_CPU_OK(zk::cpu::reduce(op, x.in(), ref.out(), c.axes.data(), static_cast<int>(c.axes.size()), keep));
          DevT dx(x), dy(t, os);
          ZT_GPU_OK(zc::reduce(op, dx.in(), dy.out(), c.axes.data(), static_cast<int>(c.axes.size()), keep, nullptr));
          EXPECT_TRUE(close(dy.download(), ref, zk::is_float(t) ? tol_for(t) : 0));
        }
}

TEST(CudaMovement, TransposeConcatSlice) {
  struct TCase { Dims s; std::vector<int64_t> perm; };
  const TCase tcases[] = {{Dims{5, 7}, {1, 0}},
                          {Dims{2, 33, 4, 64}, {0, 2, 1, 3}},
                          {Dims{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},
                          {Dims{2, 1, 3, 2, 5, 3}, {5, 4, 3, 2, 1, 0}}};
  for (DType t : {DType::f32, DType::bf16, DType::i64, DType::bool8})
    for (const TCase &c : tcases) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " transpose " + dims_str(c.s));
      Dims os;
      os.rank = c.s.rank;
      for (int i = 0; i < c.s.rank; ++i) os.d[i] = c.s.d[c.perm[i]];
      HostT x = random_tensor(t, c.s, -100.0f, 100.0f), ref(t, os);
      ZT_CPU_OK(zk::cpu::transpose(x.in(), ref.out(), c.perm.data()));
      DevT dx(x), dy(t, os);
      ZT_GPU_OK(zc::transpose(dx.in(), dy.out(), c.perm.data(), nullptr));
      EXPECT_TRUE(close(dy.download(), ref, 0));
    }
  for (DType t : {DType::f32, DType::f16, DType::i64})
    for (int axis : {0, 1, 2, -1}) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " concat axis " + std::to_string(axis));
      const int ax = axis < 0 ? axis + 3 : axis;
      Dims s1{3, 4, 5}, s2{3, 4, 5}, s3{3, 4, 5};
      s1.d[ax] = 1;
      s2.d[ax] = 6;
      s3.d[ax] = 2;
      Dims os{3, 4, 5};
      os.d[ax] = 9;
      HostT a = random_tensor(t, s1, -9, 9), b = random_tensor(t, s2, -9, 9), c = random_tensor(t, s3, -9, 9), ref(t, os);
      zk::In hs[3] = {a.in(), b.in(), c.in()};
      ZT_CPU_OK(zk::cpu::concat(hs, 3, ref.out(), axis));
      DevT da(a), db(b), dc(c), dy(t, os);
      zk::In ds[3] = {da.in(), db.in(), dc.in()};
      ZT_GPU_OK(zc::concat(ds, 3, dy.out(), axis, nullptr));
      EXPECT_TRUE(close(dy.download(), ref, 0));
    }
  // 16-byte units (the rotary embedding's two [.., 32] bf16 halves), 8-byte units, and more operands than
  // one kernel takes (the per-operand 2-D copies).
  for (const std::vector<int64_t> &widths : {std::vector<int64_t>{32, 32}, std::vector<int64_t>{4, 12, 8},
                                             std::vector<int64_t>(9, 8)}) {
    SCOPED_TRACE("bf16 concat of " + std::to_string(widths.size()) + " operands, first width " + std::to_string(widths[0]));
    std::vector<HostT> hs;
    std::vector<std::unique_ptr<DevT>> ds;  // DevT owns device memory and does not move
    std::vector<zk::In> hin, din;
    int64_t total = 0;
    for (int64_t w : widths) {
      hs.push_back(random_tensor(DType::bf16, Dims{2, 3, 17, w}));
      total += w;
    }
    for (const HostT &h : hs) ds.push_back(std::make_unique<DevT>(h));
    for (size_t k = 0; k < hs.size(); ++k) {
      hin.push_back(hs[k].in());
      din.push_back(ds[k]->in());
    }
    HostT ref(DType::bf16, Dims{2, 3, 17, total});
    ZT_CPU_OK(zk::cpu::concat(hin.data(), static_cast<int>(hin.size()), ref.out(), 3));
    DevT dy(DType::bf16, Dims{2, 3, 17, total});
    ZT_GPU_OK(zc::concat(din.data(), static_cast<int>(din.size()), dy.out(), 3, nullptr));
    EXPECT_TRUE(close(dy.download(), ref, 0));
  }
  {
    HostT x = random_tensor(DType::bf16, Dims{6, 10, 7});
    const int64_t starts[] = {1, 9, 0}, steps[] = {2, -3, 1};
    Dims os{3, 4, 7};
    HostT ref(DType::bf16, os);
    ZT_CPU_OK(zk::cpu::slice(x.in(), ref.out(), starts, steps));
    DevT dx(x), dy(DType::bf16, os);
    ZT_GPU_OK(zc::slice(dx.in(), dy.out(), starts, steps, nullptr));
    EXPECT_TRUE(close(dy.download(), ref, 0));
    const int64_t bad[] = {5, 9, 0};
    EXPECT_FALSE(zc::slice(dx.in(), dy.out(), bad, steps, nullptr).ok());
  }
}

TEST(CudaMovement, GatherAndVocabParallelEmbedding) {
  for (DType t : {DType::f32, DType::bf16, DType::i64})
    for (int axis : {0, 1}) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " gather axis " + std::to_string(axis));
      Dims ds{7, 9, 3};
      HostT data = random_tensor(t, ds, -50, 50);
      const int64_t dim = ds.d[axis];
      HostT idx = ids_tensor(DType::i64, Dims{2, 5}, -dim, dim);  // negative ids count from the end
      Dims os;
      for (int i = 0; i < axis; ++i) os.d[os.rank++] = ds.d[i];
      os.d[os.rank++] = 2;
      os.d[os.rank++] = 5;
      for (int i = axis + 1; i < 3; ++i) os.d[os.rank++] = ds.d[i];
      HostT ref(t, os);
      ZT_CPU_OK(zk::cpu::gather(data.in(), idx.in(), ref.out(), axis));
      DevT dd(data), di(idx), dy(t, os);
      ZT_GPU_OK(zc::gather(dd.in(), di.in(), dy.out(), axis, nullptr));
      EXPECT_TRUE(close(dy.download(), ref, 0));
    }
  for (DType t : kFloats)
    for (int64_t row_start : {0, 50, 100}) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " embedding from row " + std::to_string(row_start));
      HostT table = random_tensor(t, Dims{50, 129});
      HostT ids = ids_tensor(DType::i64, Dims{3, 17}, 0, 150);  // a third of them on this "rank"
      HostT ref(t, Dims{3, 17, 129});
      ZT_CPU_OK(zk::cpu::embedding(table.in(), ids.in(), ref.out(), row_start));
      DevT dt(table), di(ids), dy(t, Dims{3, 17, 129});
      ZT_GPU_OK(zc::embedding(dt.in(), di.in(), dy.out(), row_start, nullptr));
      EXPECT_TRUE(close(dy.download(), ref, 0));
    }
}

struct AttnCase {
  int64_t B, Hq, Hkv, S, T, Dh;
  bool causal;
  int mask;  // 0 none, 1 [B, 1, 1, T] padding, 2 full [B, Hq, S, T]
};

/// `kernel` >= 0: through the plan's overload with that code of zk/attention_kernels.h (0: none named).
void check_attention(DType t, const AttnCase &c, int kernel = -1) {
  SCOPED_TRACE(std::string(zk::dtype_name(t)) + " B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" +
               std::to_string(c.Hkv) + " S" + std::to_string(c.S) + " T" + std::to_string(c.T) + " Dh" +
               std::to_string(c.Dh) + (c.causal ? " causal" : "") + " mask" + std::to_string(c.mask));
  HostT q = random_tensor(t, Dims{c.B, c.Hq, c.S, c.Dh}), k = random_tensor(t, Dims{c.B, c.Hkv, c.T, c.Dh});
  HostT v = random_tensor(t, Dims{c.B, c.Hkv, c.T, c.Dh});
  HostT mask;
  if (c.mask == 1) {
    mask = random_tensor(DType::f32, Dims{c.B, 1, 1, c.T}, -2.0f, 0.0f);
    // Padding: the last three keys of batch 0 are masked out entirely.
    for (int64_t j = std::max<int64_t>(0, c.T - 3); j < c.T; ++j)
      zk::store_f32(mask.bytes.data(), DType::f32, j, -std::numeric_limits<float>::infinity());
  } else if (c.mask == 2) {
    mask = random_tensor(t, Dims{c.B, c.Hq, c.S, c.T}, -4.0f, 4.0f);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.Dh));
  HostT ref(t, q.shape);
  std::vector<float> scratch(zk::cpu::attention_scratch(q.in(), k.in()) + 1);
  ZT_CPU_OK(zk::cpu::attention(q.in(), k.in(), v.in(), c.mask ? mask.in() : zk::In{}, ref.out(), c.causal, scale,
                               scratch.data()));
  DevT dq(q), dk(k), dv(v), dy(t, q.shape);
  DevT dm(c.mask ? mask : HostT(DType::f32, Dims{1}));
  if (kernel >= 0)
    ZT_GPU_OK(zc::attention(dq.in(), dk.in(), dv.in(), c.mask ? dm.in() : zk::In{}, dy.out(), zk::Out{}, c.causal, scale,
                            0, nullptr, kernel, nullptr));
  else
    ZT_GPU_OK(zc::attention(dq.in(), dk.in(), dv.in(), c.mask ? dm.in() : zk::In{}, dy.out(), c.causal, scale, nullptr));
  EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
}

// The tensor-core kernels that ZK_CUDA_ATTENTION selects: the default, the first register kernel (old = its
// default shape; mma64, mma128, mma128r force one), the second register kernel's shapes (fa*), and the WMMA
// one. The wgmma kernel (sm_90a) has tests of its own below, so that a fault there cannot hide these results.
const std::vector<const char *> kAttnPaths = {"", "old", "mma64", "mma128", "mma128r", "fa4x1", "fa4x1r", "fa4x2",
                                              "fa8x1", "fa8x1r", "fa4x2s", "wmma"};
const std::vector<const char *> kWgmmaPaths = {"wgp"};
// wg1 and wg2 (the two-buffer wgmma kernels) failed these checks on the H200 at head dim 64 with two or more key
// tiles (docs/gpu-plan-runs.md, "Attention forward kernels"): ptxas gave Q's loop-carried A fragments the
// registers of P. They read Q per tile since; their tests run apart from wgp's so that each names its kernels
// (wg2r: wg2 held to 128 registers). wg2pp (wg2 with named barriers between its warpgroups) has its own tests.
const std::vector<const char *> kWgmmaTwoBufferPaths = {"wg1", "wg2", "wg2r"};
const std::vector<const char *> kWgmmaPingPongPaths = {"wg2pp"};
// wg3 (a producer warpgroup issuing tensor copies into an mbarrier ring for two consumer warpgroups).
const std::vector<const char *> kWgmmaWsPaths = {"wg3"};

void attention_matches_reference(const std::vector<const char *> &paths) {
  const AttnCase cases[] = {
      {2, 4, 2, 37, 37, 64, true, 0},     // ragged tiles, GQA, causal
      {1, 2, 2, 100, 150, 128, true, 1},  // S < T (queries are the last S positions), padding mask
      {2, 8, 2, 64, 64, 64, false, 0},    // exact tiles
      {1, 3, 1, 70, 70, 64, false, 2},    // full additive mask, multi-query
      {1, 2, 2, 1, 77, 64, true, 0},      // one query (decode)
      {1, 2, 1, 20, 33, 32, true, 1},     // head dim off the tensor-core path
      {1, 1, 1, 130, 130, 128, true, 2},  // causal plus full mask, Dh 128
      {1, 2, 1, 300, 300, 64, true, 0},   // many key tiles through the double buffer
      {1, 2, 2, 200, 1000, 128, true, 1}, // long keys, S < T, padding
  };
  // Every tensor-core kernel: the default (mma.sync, registers, the head dim's block shape), each block shape
  // forced (64 rows, 128 rows, 128 rows held to 128 registers), each also without longest-first order and the
  // interior-tile fast path (plain), and the WMMA one.
  for (const char *path : paths)
    for (const char *plain : {"0", "1"}) {
      // Plain changes only the first register kernel.
      if (std::string(plain) == "1" && std::string(path).rfind("mma", 0) != 0 && std::string(path) != "old") continue;
      SCOPED_TRACE(std::string("path '") + path + "' plain " + plain);
      setenv("ZK_CUDA_ATTENTION", path, 1);
      setenv("ZK_CUDA_ATTENTION_PLAIN", plain, 1);
      for (DType t : kFloats)
        for (const AttnCase &c : cases) check_attention(t, c);
    }
  unsetenv("ZK_CUDA_ATTENTION");
  unsetenv("ZK_CUDA_ATTENTION_PLAIN");
}

TEST(CudaAttention, MatchesReference) { attention_matches_reference(kAttnPaths); }

// Sequence-major operands (the seq_major bits: the plan's folded head transposes): q, k, v laid out
// [B, S, H, Dh] by the CPU transpose kernel, the GPU result (transposed back where out is sequence-major)
// against the CPU reference on the head-major tensors, with the lse. Every bit pattern, every kernel path.
const std::vector<AttnCase> kSequenceMajorCases = {
    {2, 8, 2, 300, 300, 64, true, 0},    // GQA, causal, several 128-row blocks with a ragged last one
    {1, 4, 4, 100, 150, 128, true, 1},   // S < T, padding mask, Dh 128
    {2, 4, 1, 64, 96, 64, false, 2},     // full mask, multi-query
    {1, 2, 2, 20, 33, 32, true, 0},      // head dim off the tensor-core path (exact kernel)
};

void attention_sequence_major(const std::vector<const char *> &paths,
                              const std::vector<AttnCase> &cases = kSequenceMajorCases) {
  const int64_t perm[4] = {0, 2, 1, 3};
  auto swap12 = [&](const HostT &x) {
    HostT y(x.dtype, Dims{x.shape.d[0], x.shape.d[2], x.shape.d[1], x.shape.d[3]});
    EXPECT_TRUE(zk::cpu::transpose(x.in(), y.out(), perm).ok());
    return y;
  };
  for (DType t : kFloats)
    for (const AttnCase &c : cases) {
      // One reference per dtype and shape (the CPU kernel is the slow part); every path and layout against it.
      HostT q = random_tensor(t, Dims{c.B, c.Hq, c.S, c.Dh}), k = random_tensor(t, Dims{c.B, c.Hkv, c.T, c.Dh});
      HostT v = random_tensor(t, Dims{c.B, c.Hkv, c.T, c.Dh});
      HostT mask;
      if (c.mask == 1) mask = random_tensor(DType::f32, Dims{c.B, 1, 1, c.T}, -2.0f, 0.0f);
      else if (c.mask == 2) mask = random_tensor(t, Dims{c.B, c.Hq, c.S, c.T}, -4.0f, 4.0f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.Dh));
      HostT ref(t, q.shape), ref_lse(DType::f32, Dims{c.B, c.Hq, c.S});
      std::vector<float> scratch(zk::cpu::attention_scratch(q.in(), k.in()) + 1);
      ZT_CPU_OK(zk::cpu::attention(q.in(), k.in(), v.in(), c.mask ? mask.in() : zk::In{}, ref.out(), ref_lse.out(),
                                   c.causal, scale, scratch.data()));
      const HostT qs = swap12(q), ks = swap12(k), vs = swap12(v);
      for (const char *path : paths)
        for (int bits : {zk::cpu::kAttnSeqMajorAll, zk::cpu::kAttnSeqMajorV | zk::cpu::kAttnSeqMajorOut,
                         zk::cpu::kAttnSeqMajorQ, zk::cpu::kAttnSeqMajorK | zk::cpu::kAttnSeqMajorOut}) {
          SCOPED_TRACE(std::string("path '") + path + "' " + zk::dtype_name(t) + " seq_major " + std::to_string(bits) +
                       " S" + std::to_string(c.S) + " T" + std::to_string(c.T) + " Dh" + std::to_string(c.Dh));
          setenv("ZK_CUDA_ATTENTION", path, 1);
          DevT dq(bits & zk::cpu::kAttnSeqMajorQ ? qs : q), dk(bits & zk::cpu::kAttnSeqMajorK ? ks : k);
          DevT dv(bits & zk::cpu::kAttnSeqMajorV ? vs : v);
          const bool om = bits & zk::cpu::kAttnSeqMajorOut;
          DevT dy(t, om ? Dims{c.B, c.S, c.Hq, c.Dh} : q.shape), dl(DType::f32, Dims{c.B, c.Hq, c.S});
          DevT dm(c.mask ? mask : HostT(DType::f32, Dims{1}));
          ZT_GPU_OK(zc::attention(dq.in(), dk.in(), dv.in(), c.mask ? dm.in() : zk::In{}, dy.out(), dl.out(), c.causal,
                                  scale, bits, nullptr));
          HostT got = dy.download();
          EXPECT_TRUE(close(om ? swap12(got) : got, ref, tol_for(t)));
          EXPECT_TRUE(close(dl.download(), ref_lse, 1e-3));
        }
      // Packed operands (plan 2.8, zk::cpu::AttnPacked, the plan's folded q/k/v split): q read out of a
      // [B, S, Wq] tensor and k, v out of one [B, T, Wkv] tensor at element offsets, rows padded by `pad`
      // elements before each part. A pad of 8 keeps every part 16-byte aligned (the tensor-core paths); 3
      // does not (the exact kernel). Against the same reference, every path.
      for (int64_t pad : {8, 3}) {
        const int64_t qw = c.Hq * c.Dh, kw = c.Hkv * c.Dh;
        const int64_t Wq = pad + qw, Wkv = 2 * (pad + kw);
        HostT pq = random_tensor(t, Dims{c.B, c.S, Wq}), pkv = random_tensor(t, Dims{c.B, c.T, Wkv});
        const size_t es = zk::dtype_size(t);
        auto pack = [&](HostT &dst, int64_t w, const HostT &src, int64_t off, int64_t rows, int64_t part) {
          for (int64_t r = 0; r < rows; ++r)
            std::memcpy(dst.bytes.data() + (r * w + off) * es, src.bytes.data() + r * part * es, part * es);
        };
        pack(pq, Wq, qs, pad, c.B * c.S, qw);
        pack(pkv, Wkv, ks, pad, c.B * c.T, kw);
        pack(pkv, Wkv, vs, 2 * pad + kw, c.B * c.T, kw);
        const zk::cpu::AttnPacked pk[3] = {{pad, Wq, c.Hq}, {pad, Wkv, c.Hkv}, {2 * pad + kw, Wkv, c.Hkv}};
        DevT dq(pq), dkv(pkv);
        for (const char *path : paths)
          for (int bits : {zk::cpu::kAttnSeqMajorAll, zk::cpu::kAttnSeqMajorAll & ~zk::cpu::kAttnSeqMajorOut}) {
            SCOPED_TRACE(std::string("packed, pad ") + std::to_string(pad) + " path '" + path + "' " +
                         zk::dtype_name(t) + " seq_major " + std::to_string(bits) + " S" + std::to_string(c.S) +
                         " T" + std::to_string(c.T) + " Dh" + std::to_string(c.Dh));
            setenv("ZK_CUDA_ATTENTION", path, 1);
            const bool om = bits & zk::cpu::kAttnSeqMajorOut;
            DevT dy(t, om ? Dims{c.B, c.S, c.Hq, c.Dh} : q.shape), dl(DType::f32, Dims{c.B, c.Hq, c.S});
            DevT dm(c.mask ? mask : HostT(DType::f32, Dims{1}));
            ZT_GPU_OK(zc::attention(dq.in(), dkv.in(), dkv.in(), c.mask ? dm.in() : zk::In{}, dy.out(), dl.out(),
                                    c.causal, scale, bits, pk, nullptr));
            HostT got = dy.download();
            EXPECT_TRUE(close(om ? swap12(got) : got, ref, tol_for(t)));
            EXPECT_TRUE(close(dl.download(), ref_lse, 1e-3));
          }
      }
    }
  unsetenv("ZK_CUDA_ATTENTION");
}

TEST(CudaAttention, SequenceMajorOperands) { attention_sequence_major(kAttnPaths); }

// The wgmma kernels (attention_sm90a.cu) through the same checks: every shape, dtype, mask, layout, packing
// and the lse against the CPU reference.
TEST(CudaAttentionWgmma, MatchesReference) { attention_matches_reference(kWgmmaPaths); }
TEST(CudaAttentionWgmma, SequenceMajorOperands) { attention_sequence_major(kWgmmaPaths); }
TEST(CudaAttentionWgmma, TwoBufferMatchesReference) { attention_matches_reference(kWgmmaTwoBufferPaths); }
TEST(CudaAttentionWgmma, TwoBufferSequenceMajorOperands) { attention_sequence_major(kWgmmaTwoBufferPaths); }
TEST(CudaAttentionWgmma, PingPongMatchesReference) { attention_matches_reference(kWgmmaPingPongPaths); }
TEST(CudaAttentionWgmma, PingPongSequenceMajorOperands) { attention_sequence_major(kWgmmaPingPongPaths); }
TEST(CudaAttentionWgmma, WarpSpecialisedMatchesReference) { attention_matches_reference(kWgmmaWsPaths); }
TEST(CudaAttentionWgmma, WarpSpecialisedSequenceMajorOperands) { attention_sequence_major(kWgmmaWsPaths); }
// The benchmark models' sequence length: eight 128-row blocks of up to eight key tiles each, so every buffer of
// wg3's ring is reused several times (its barriers' phases wrap), in every layout a plan gives it (sequence-major
// and packed, GQA), at both head dims.
TEST(CudaAttentionWgmma, WarpSpecialisedLongSequences) {
  attention_sequence_major(kWgmmaWsPaths, {{2, 4, 2, 1024, 1024, 64, true, 0}, {1, 2, 2, 1024, 1024, 128, true, 0}});
}

// Plan 2.11: the plan's kernel code runs that kernel. Each kernel of zk/attention_kernels.h but the wgmma ones
// other than wg2 (the default on sm_90; the others have their own tests above, run by name) and those the
// device cannot run, through the plan's overload, against the CPU reference: bf16 and f16, head dims 64 and
// 128, GQA, causal, a padding mask, S < T. Code 0 (plans before 2.11) too. A tensor-core kernel on an
// attention it cannot take (fp32; head dim 32) is an error naming the kernel, where the direct callers'
// overload runs the exact kernel instead; an unknown code is an error.
TEST(CudaAttention, PlanKernelCodes) {
  int major = 0, minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  const AttnCase cases[] = {{2, 4, 2, 130, 130, 64, true, 1}, {1, 2, 2, 70, 100, 128, true, 0}};
  std::vector<int> codes = {0};
  for (const zk::cuda::AttentionKernel &k : zk::cuda::kAttentionKernels)
    if (zk::cuda::attention_kernel_runs_on(k, major, minor) &&
        (k.family != zk::cuda::AttnFamily::wg || std::string(k.name) == "wg2"))
      codes.push_back(k.code);
  for (int code : codes) {
    SCOPED_TRACE("kernel code " + std::to_string(code));
    for (DType t : {DType::bf16, DType::f16})
      for (const AttnCase &c : cases) check_attention(t, c, code);
  }
  const int fa = zk::cuda::attention_kernel("fa4x1r")->code, rows = zk::cuda::attention_kernel("rows")->code;
  check_attention(DType::f32, {1, 2, 1, 20, 33, 64, true, 0}, rows);
  check_attention(DType::bf16, {1, 2, 1, 20, 33, 32, true, 0}, rows);
  for (auto [t, dh] : {std::pair{DType::f32, int64_t{64}}, std::pair{DType::bf16, int64_t{32}}}) {
    HostT q = random_tensor(t, Dims{1, 2, 20, dh});
    DevT dq(q), dy(t, q.shape);
    const zk::cuda::GpuStatus st =
        zc::attention(dq.in(), dq.in(), dq.in(), zk::In{}, dy.out(), zk::Out{}, true, 0.125f, 0, nullptr, fa, nullptr);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message.find("the plan's kernel 'fa4x1r' needs bf16 or f16, head dim 64 or 128"), std::string::npos)
        << st.message;
  }
  HostT q = random_tensor(DType::bf16, Dims{1, 2, 20, 64});
  DevT dq(q), dy(DType::bf16, q.shape);
  const zk::cuda::GpuStatus st =
      zc::attention(dq.in(), dq.in(), dq.in(), zk::In{}, dy.out(), zk::Out{}, true, 0.125f, 0, nullptr, 99, nullptr);
  EXPECT_NE(st.message.find("unknown kernel code 99"), std::string::npos) << st.message;
}

TEST(CudaAttention, FullyMaskedRowIsZero) {
  for (DType t : kFloats) {
    HostT q = random_tensor(t, Dims{1, 1, 3, 64}), k = random_tensor(t, Dims{1, 1, 5, 64}), v = random_tensor(t, Dims{1, 1, 5, 64});
    HostT mask(DType::f32, Dims{1, 1, 3, 5});
    for (int64_t i = 0; i < 15; ++i)
      zk::store_f32(mask.bytes.data(), DType::f32, i, i < 5 ? -std::numeric_limits<float>::infinity() : 0.0f);
    HostT ref(t, q.shape);
    std::vector<float> scratch(8);
    ZT_CPU_OK(zk::cpu::attention(q.in(), k.in(), v.in(), mask.in(), ref.out(), false, 0.125f, scratch.data()));
    DevT dq(q), dk(k), dv(v), dm(mask), dy(t, q.shape);
    ZT_GPU_OK(zc::attention(dq.in(), dk.in(), dv.in(), dm.in(), dy.out(), false, 0.125f, nullptr));
    HostT got = dy.download();
    for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(got.at(i), 0.0f);
    EXPECT_TRUE(close(got, ref, tol_for(t)));
  }
}

class CudaGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    auto st = zc::Blas::create(&blas);
    ASSERT_TRUE(st.ok()) << st.message;
    ASSERT_EQ(cudaMalloc(&ws, zc::kGemmWorkspaceBytes), cudaSuccess);
  }
  void TearDown() override { cudaFree(ws); }
  std::unique_ptr<zc::Blas> blas;
  void *ws = nullptr;
};

TEST_F(CudaGemm, MatmulBroadcastAndTransposes) {
  struct Case { Dims a, b, out; bool ta, tb; };
  const Case cases[] = {
      {Dims{5, 7}, Dims{7, 3}, Dims{5, 3}, false, false},
      {Dims{2, 3, 33, 65}, Dims{65, 17}, Dims{2, 3, 33, 17}, false, false},   // folded into one product
      {Dims{2, 3, 33, 65}, Dims{2, 3, 65, 17}, Dims{2, 3, 33, 17}, false, false},
      {Dims{2, 1, 5, 7}, Dims{1, 3, 7, 9}, Dims{2, 3, 5, 9}, false, false},  // general broadcast
      {Dims{4, 7, 5}, Dims{4, 9, 7}, Dims{4, 5, 9}, true, true},
      {Dims{3, 64, 64}, Dims{64, 64}, Dims{3, 64, 64}, false, true},
      {Dims{7}, Dims{7, 3}, Dims{3}, false, false},
      {Dims{2, 5, 7}, Dims{7}, Dims{2, 5}, false, false},
      {Dims{1, 300}, Dims{300, 1000}, Dims{1, 1000}, false, false},
  };
  for (DType t : kFloats)
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(zk::dtype_name(t)) + " " + dims_str(c.a) + " x " + dims_str(c.b) + (c.ta ? " ta" : "") +
                   (c.tb ? " tb" : ""));
      HostT a = random_tensor(t, c.a), b = random_tensor(t, c.b), ref(t, c.out);
      std::vector<float> scratch(zk::cpu::matmul_scratch(a.in(), b.in(), ref.out(), c.ta, c.tb) + 1);
      ZT_CPU_OK(zk::cpu::matmul(a.in(), b.in(), ref.out(), c.ta, c.tb, scratch.data()));
      DevT da(a), db(b), dy(t, c.out);
      ZT_GPU_OK(zc::matmul(*blas, da.in(), db.in(), dy.out(), c.ta, c.tb, ws, zc::kGemmWorkspaceBytes, nullptr));
      EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
    }
}

TEST_F(CudaGemm, LinearWithEpilogues) {
  struct Case { Dims x; int64_t N; bool tw; };
  const Case cases[] = {{Dims{2, 37, 64}, 96, false}, {Dims{130, 256}, 1000, true}, {Dims{3, 1, 48}, 24, true}};
  for (DType t : kFloats)
    for (const Case &c : cases)
      for (zc::Epilogue e : {zc::Epilogue::none, zc::Epilogue::bias, zc::Epilogue::gelu, zc::Epilogue::gelu_bias}) {
        SCOPED_TRACE(std::string(zk::dtype_name(t)) + " " + dims_str(c.x) + " N " + std::to_string(c.N) + " epi " +
                     std::to_string(int(e)));
        const int64_t K = c.x.d[c.x.rank - 1];
        Dims ws_shape = c.tw ? Dims{c.N, K} : Dims{K, c.N};
        Dims os = c.x;
        os.d[os.rank - 1] = c.N;
        HostT x = random_tensor(t, c.x), w = random_tensor(t, ws_shape, -0.2f, 0.2f), bias = random_tensor(t, Dims{c.N});
        const bool with_bias = e == zc::Epilogue::bias || e == zc::Epilogue::gelu_bias;
        const bool with_gelu = e == zc::Epilogue::gelu || e == zc::Epilogue::gelu_bias;
        // Reference: fp32 linear, then gelu (tanh form, as cuBLASLt's epilogue), rounded once.
        HostT ref32(DType::f32, os), ref(t, os);
        std::vector<float> scratch(zk::cpu::linear_scratch(x.in(), w.in(), ref32.out(), c.tw) + 1);
        ZT_CPU_OK(zk::cpu::linear(x.in(), w.in(), with_bias ? bias.in() : zk::In{}, ref32.out(), c.tw, 0.5f, scratch.data()));
        if (with_gelu) ZT_CPU_OK(zk::cpu::unary(Unary::gelu_tanh, ref32.in(), ref32.out()));
        ZT_CPU_OK(zk::cpu::cast(ref32.in(), ref.out()));
        DevT dx(x), dw(w), db(bias), dy(t, os);
        ZT_GPU_OK(zc::linear(*blas, dx.in(), dw.in(), with_bias ? db.in() : zk::In{}, dy.out(), c.tw, 0.5f, e, ws,
                             zc::kGemmWorkspaceBytes, nullptr));
        // cuBLASLt's GELU epilogue may use a faster tanh than the reference; allow 1e-4 on fp32 there.
        const float tol = t == DType::f32 && with_gelu ? 1e-4f : tol_for(t);
        EXPECT_TRUE(close(dy.download(), ref, tol));
      }
}

TEST_F(CudaGemm, LinearWithMisalignedRowsInRowBlocks) {
  // N = 1001: output rows are not 16-byte multiples, so the product runs as transposed row blocks through
  // the workspace; a small workspace forces several blocks and a ragged last one.
  for (DType t : kFloats) {
    SCOPED_TRACE(zk::dtype_name(t));
    const int64_t M = 1000, K = 64, N = 1001;
    HostT x = random_tensor(t, Dims{2, M / 2, K}), w = random_tensor(t, Dims{N, K}, -0.2f, 0.2f), ref(t, Dims{2, M / 2, N});
    std::vector<float> scratch(zk::cpu::linear_scratch(x.in(), w.in(), ref.out(), true) + 1);
    ZT_CPU_OK(zk::cpu::linear(x.in(), w.in(), zk::In{}, ref.out(), true, 1.0f, scratch.data()));
    DevT dx(x), dw(w), dy(t, ref.shape);
    ZT_GPU_OK(zc::linear(*blas, dx.in(), dw.in(), zk::In{}, dy.out(), true, 1.0f, zc::Epilogue::none, ws,
                         200 * 1001 * 4, nullptr));
    EXPECT_TRUE(close(dy.download(), ref, tol_for(t)));
  }
}

TEST(CudaDevice, ReportsMissingOrSmallDevice) {
  std::string why;
  EXPECT_TRUE(zc::device_usable(1 << 20, &why)) << why;
  // No GPU has an exabyte free: the message names the shortfall.
  EXPECT_FALSE(zc::device_usable(size_t{1} << 60, &why));
  EXPECT_NE(why.find("MiB free"), std::string::npos) << why;
}

}  // namespace
}  // namespace zt
