// The CUDA backend end to end through zrt::Session: the same plan executed by the CPU backend (the
// reference kernels) and by the CUDA backend, outputs compared; the MLP plan also against its float64
// formula. Covers the fused opcodes the compiler writes (linear_gelu, gated, residual_norm) against their
// parts, CUDA graph replay, and a plan whose fingerprint names another backend. Runs as one MPI rank (singleton MPI start).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_plans.h"
#include "zk/cpu_kernels.h"
#include "zrt/zrt.h"

namespace {

using zrt_test::lcg;
using zrt_test::PlanBuilder;
namespace fb = zrt::fb;

float tol_for(fb::DType t) { return t == fb::DType::f32 ? 1e-5f : t == fb::DType::bf16 ? 2e-2f : 1e-2f; }

std::vector<uint8_t> to_dtype(const std::vector<float> &v, fb::DType t) {
  const auto zt = static_cast<zk::DType>(t);
  std::vector<uint8_t> b(v.size() * zk::dtype_size(zt));
  for (size_t i = 0; i < v.size(); ++i) zk::store_f32(b.data(), zt, static_cast<int64_t>(i), v[i]);
  return b;
}

std::vector<float> to_f32(const std::vector<uint8_t> &b, fb::DType t) {
  const auto zt = static_cast<zk::DType>(t);
  std::vector<float> v(b.size() / zk::dtype_size(zt));
  for (size_t i = 0; i < v.size(); ++i) v[i] = zk::load_f32(b.data(), zt, static_cast<int64_t>(i));
  return v;
}

/// Opens `p` for `backend` (the fingerprint follows), binds inputs, runs `runs` times, returns output `out`.
std::vector<float> run_plan(PlanBuilder p, zrt::BackendKind backend, const std::vector<std::pair<std::string, std::vector<float>>> &ins,
                            const std::string &out, int runs = 1, std::vector<std::vector<float>> *each = nullptr) {
  p.backend = backend == zrt::BackendKind::cuda ? fb::Backend::cuda : fb::Backend::cpu;
  std::vector<uint8_t> file = p.file();
  zrt::Options o;
  o.backend = backend;
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open_buffer(file.data(), file.size(), "/tmp", o, &s);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return {};
  for (const auto &in : ins) {
    fb::DType dt = p.dtype;
    for (const auto &io : p.inputs)
      if (io.name == in.first) dt = p.tensors[io.tensor].dtype;
    std::vector<uint8_t> b = to_dtype(in.second, dt);
    st = s->bind_input(in.first, b.data(), b.size());
    EXPECT_TRUE(st.ok()) << st.message();
  }
  size_t bytes = 0;
  for (const auto &io : s->outputs())
    if (io.name == out) bytes = io.global_bytes();
  std::vector<uint8_t> buf(bytes);
  for (int r = 0; r < runs; ++r) {
    st = s->run();
    EXPECT_TRUE(st.ok()) << st.message();
    std::fill(buf.begin(), buf.end(), 0xff);  // NaN: a run that writes nothing fails
    st = s->read_output(out, buf.data(), buf.size());
    EXPECT_TRUE(st.ok()) << st.message();
    if (each) each->push_back(to_f32(buf, p.dtype));
  }
  return to_f32(buf, p.dtype);
}

::testing::AssertionResult close(const std::vector<float> &g, const std::vector<double> &r, double tol) {
  if (g.size() != r.size()) return ::testing::AssertionFailure() << "sizes " << g.size() << " vs " << r.size();
  double ss = 0;
  for (double v : r) ss += v * v;
  const double rms = r.empty() ? 0 : std::sqrt(ss / r.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return ::testing::AssertionFailure() << "element " << i << " is " << g[i];
    const double e = std::fabs(g[i] - r[i]) / std::max(std::fabs(r[i]), rms);
    if (e > tol) return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << r[i] << " (rel " << e << ")";
  }
  return ::testing::AssertionSuccess();
}

std::vector<double> widen(const std::vector<float> &v) { return std::vector<double>(v.begin(), v.end()); }

TEST(CudaBackend, MlpMatchesFloat64AndCpuBackend) {
  for (fb::DType dt : {fb::DType::f32, fb::DType::bf16, fb::DType::f16}) {
    SCOPED_TRACE(fb::EnumNameDType(dt));
    zrt_test::Mlp m;
    PlanBuilder p = m.plan(1, 1, false, dt, "");
    std::vector<float> gpu = run_plan(p, zrt::BackendKind::cuda, {{"x", m.x}}, "y");
    std::vector<float> cpu = run_plan(p, zrt::BackendKind::cpu, {{"x", m.x}}, "y");
    EXPECT_TRUE(close(gpu, widen(cpu), tol_for(dt)));
    if (dt == fb::DType::f32) EXPECT_TRUE(close(gpu, m.expected(), 1e-5));
  }
}

/// A pre-norm attention block on [B, 1, S, 64] (one head): s = x + r; n = layer_norm(s) (or rms_norm);
/// a = attention(n, n, n, causal); y = a + s.
PlanBuilder block_plan(fb::DType dt, bool rms, int64_t B, int64_t S, std::vector<float> *g, std::vector<float> *b) {
  const int64_t D = 64;
  PlanBuilder p(1, 1, dt);
  *g = lcg(D, 5);
  *b = lcg(D, 6);
  auto bytes_of = [](const std::vector<float> &v) {
    std::vector<uint8_t> o(v.size() * 4);
    std::memcpy(o.data(), v.data(), o.size());
    return o;
  };
  int x = p.input("x", dt, {B, 1, S, D}, true), r = p.input("r", dt, {B, 1, S, D}, true);
  int G = p.param("g", {D}, -1, false, "", 0, fb::DType::f32, bytes_of(*g));
  int Bi = p.param("b", {D}, -1, false, "", 0, fb::DType::f32, bytes_of(*b));
  int s = p.act("s", {B, 1, S, D}), n = p.act("n", {B, 1, S, D}), a = p.act("a", {B, 1, S, D});
  p.op(zrt::Op::add, {x, r}, {s});
  if (rms) p.op(zrt::Op::rms_norm, {s, G}, {n}, {}, {1e-6});
  else p.op(zrt::Op::layer_norm, {s, G, Bi}, {n}, {3}, {1e-5});
  p.op(zrt::Op::attention, {n, n, n}, {a}, {1}, {0.125});
  int y = p.output("y", {B, 1, S, D}, true);
  p.op(zrt::Op::add, {a, s}, {y});
  return p;
}

TEST(CudaBackend, AttentionBlockWithResidualNormFusionMatchesCpuBackend) {
  for (fb::DType dt : {fb::DType::f32, fb::DType::bf16, fb::DType::f16})
    for (bool rms : {false, true}) {
      SCOPED_TRACE(std::string(fb::EnumNameDType(dt)) + (rms ? " rms" : " layer_norm"));
      std::vector<float> g, b;
      PlanBuilder p = block_plan(dt, rms, 2, 77, &g, &b);
      std::vector<float> x = lcg(2 * 77 * 64, 21), r = lcg(2 * 77 * 64, 22);
      std::vector<float> gpu = run_plan(p, zrt::BackendKind::cuda, {{"x", x}, {"r", r}}, "y");
      std::vector<float> cpu = run_plan(p, zrt::BackendKind::cpu, {{"x", x}, {"r", r}}, "y");
      EXPECT_TRUE(close(gpu, widen(cpu), tol_for(dt)));
    }
}

/// A llama MLP: g = x Wg; a = silu(g); u = x Wu; y = (a * u) Wd.
PlanBuilder gated_plan(fb::DType dt, int64_t B, int64_t S, int64_t D, int64_t F) {
  PlanBuilder p(1, 1, dt);
  auto bytes_of = [](const std::vector<float> &v) {
    std::vector<uint8_t> o(v.size() * 4);
    std::memcpy(o.data(), v.data(), o.size());
    return o;
  };
  int x = p.input("x", dt, {B, S, D}, true);
  int Wg = p.param("wg", {D, F}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(D * F, 41)));
  int Wu = p.param("wu", {D, F}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(D * F, 42)));
  int Wd = p.param("wd", {F, D}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(F * D, 43)));
  int g = p.act("g", {B, S, F}), a = p.act("a", {B, S, F}), u = p.act("u", {B, S, F}), h = p.act("h", {B, S, F});
  p.op(zrt::Op::linear, {x, Wg}, {g}, {0}, {1.0});
  p.op(zrt::Op::silu, {g}, {a});
  p.op(zrt::Op::linear, {x, Wu}, {u}, {0}, {1.0});
  p.op(zrt::Op::mul, {a, u}, {h});
  int y = p.output("y", {B, S, D}, true);
  p.op(zrt::Op::linear, {h, Wd}, {y}, {0}, {1.0});
  return p;
}

TEST(CudaBackend, GatedMlpFusionMatchesCpuBackend) {
  for (fb::DType dt : {fb::DType::f32, fb::DType::bf16}) {
    SCOPED_TRACE(fb::EnumNameDType(dt));
    PlanBuilder p = gated_plan(dt, 2, 9, 64, 172);
    std::vector<float> x = lcg(2 * 9 * 64, 44);
    std::vector<float> gpu = run_plan(p, zrt::BackendKind::cuda, {{"x", x}}, "y");
    std::vector<float> cpu = run_plan(p, zrt::BackendKind::cpu, {{"x", x}}, "y");
    EXPECT_TRUE(close(gpu, widen(cpu), tol_for(dt)));
  }
}

/// Offloaded weights: W1 and W2 live in the pinned host arena and are prefetched, one after the other, into
/// the SAME device buffer (the copy of W2 must wait until the first product has read W1, and the second
/// product must wait for the copy): y = gelu(x W1) W2.
PlanBuilder offload_plan(fb::DType dt, int64_t B, int64_t D) {
  PlanBuilder p(1, 1, dt);
  auto bytes_of = [](const std::vector<float> &v) {
    std::vector<uint8_t> o(v.size() * 4);
    std::memcpy(o.data(), v.data(), o.size());
    return o;
  };
  int x = p.input("x", dt, {B, D}, true);
  int W[2];
  for (int i = 0; i < 2; ++i) {
    W[i] = p.param("w" + std::to_string(i), {D, D}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(D * D, 51 + i)));
    auto &t = p.tensors[W[i]];
    t.space = fb::MemSpace::host;
    t.offset = (p.arena[1] + 63) / 64 * 64;
    p.arena[1] = t.offset + t.bytes;
  }
  int wd = p.act("w_device", {D, D});
  int h = p.act("h", {B, D}), a = p.act("a", {B, D});
  p.op(zrt::Op::prefetch, {W[0]}, {wd});
  p.op(zrt::Op::linear, {x, wd}, {h}, {0}, {1.0});
  p.op(zrt::Op::prefetch, {W[1]}, {wd});
  p.op(zrt::Op::gelu_erf, {h}, {a});
  int y = p.output("y", {B, D}, true);
  p.op(zrt::Op::linear, {a, wd}, {y}, {0}, {1.0});
  return p;
}

TEST(CudaBackend, OffloadedWeightsPrefetchOnTheCopyStream) {
  for (fb::DType dt : {fb::DType::f32, fb::DType::bf16}) {
    SCOPED_TRACE(fb::EnumNameDType(dt));
    PlanBuilder p = offload_plan(dt, 4096, 256);
    std::vector<float> x = lcg(4096 * 256, 55);
    std::vector<std::vector<float>> each;
    run_plan(p, zrt::BackendKind::cuda, {{"x", x}}, "y", 3, &each);
    std::vector<float> cpu = run_plan(p, zrt::BackendKind::cpu, {{"x", x}}, "y");
    for (const auto &gpu : each) EXPECT_TRUE(close(gpu, widen(cpu), tol_for(dt)));
  }
}

TEST(CudaBackend, CudaGraphReplayGivesTheSameOutputs) {
  setenv("ZRT_CUDA_GRAPH", "1", 1);
  std::vector<float> g, b;
  PlanBuilder p = block_plan(fb::DType::bf16, false, 2, 130, &g, &b);
  std::vector<float> x = lcg(2 * 130 * 64, 31), r = lcg(2 * 130 * 64, 32);
  std::vector<std::vector<float>> each;
  run_plan(p, zrt::BackendKind::cuda, {{"x", x}, {"r", r}}, "y", 4, &each);
  unsetenv("ZRT_CUDA_GRAPH");
  ASSERT_EQ(each.size(), 4u);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(each[i], each[0]) << "run " << i;  // run 0 eager, 1 captured, 2-3 replayed
  std::vector<float> cpu = run_plan(p, zrt::BackendKind::cpu, {{"x", x}, {"r", r}}, "y");
  EXPECT_TRUE(close(each[3], widen(cpu), 2e-2));
}

/// The fused opcodes that --zplan-fuse writes (linear_gelu, gated, residual_norm) against their parts:
///   a = gelu_tanh(x W1 + b1); m = silu(a) * (x W2) (GELU for `gelu_gate`); y0 = m W3;
///   s = y0 + r; n = norm(s); y = n + s.
/// `fused` writes the three fused steps, otherwise the six separate ones (which the CPU backend runs).
PlanBuilder fused_plan(fb::DType dt, bool fused, bool rms, int64_t B, int64_t S, int64_t D, int64_t F) {
  PlanBuilder p(1, 1, dt);
  auto bytes_of = [](const std::vector<float> &v) {
    std::vector<uint8_t> o(v.size() * 4);
    std::memcpy(o.data(), v.data(), o.size());
    return o;
  };
  int x = p.input("x", dt, {B, S, D}, true), r = p.input("r", dt, {B, S, D}, true);
  int W1 = p.param("w1", {F, D}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(F * D, 61)));
  int b1 = p.param("b1", {F}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(F, 62)));
  int W2 = p.param("w2", {D, F}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(D * F, 63)));
  int W3 = p.param("w3", {F, D}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(F * D, 64)));
  int G = p.param("g", {D}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(D, 65)));
  int Bn = p.param("bn", {D}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(D, 66)));
  int h = p.act("h", {B, S, F}), a = p.act("a", {B, S, F}), u = p.act("u", {B, S, F}), sa = p.act("sa", {B, S, F});
  int m = p.act("m", {B, S, F}), y0 = p.act("y0", {B, S, D}), sum = p.act("s", {B, S, D}), n = p.act("n", {B, S, D});
  if (fused) {
    p.op(zrt::Op::linear_gelu, {x, W1, b1}, {a}, {1}, {1.0});
    p.op(zrt::Op::linear, {x, W2}, {u}, {0}, {1.0});
    p.op(zrt::Op::gated, {a, u}, {m}, {static_cast<int64_t>(zrt::Op::silu)});
    p.op(zrt::Op::linear, {m, W3}, {y0}, {0}, {1.0});
    if (rms) p.op(zrt::Op::residual_norm, {y0, r, G}, {sum, n}, {1}, {1e-6});
    else p.op(zrt::Op::residual_norm, {y0, r, G, Bn}, {sum, n}, {0}, {1e-5});
  } else {
    p.op(zrt::Op::linear, {x, W1, b1}, {h}, {1}, {1.0});
    p.op(zrt::Op::gelu_tanh, {h}, {a});
    p.op(zrt::Op::linear, {x, W2}, {u}, {0}, {1.0});
    p.op(zrt::Op::silu, {a}, {sa});
    p.op(zrt::Op::mul, {sa, u}, {m});
    p.op(zrt::Op::linear, {m, W3}, {y0}, {0}, {1.0});
    p.op(zrt::Op::add, {y0, r}, {sum});
    if (rms) p.op(zrt::Op::rms_norm, {sum, G}, {n}, {}, {1e-6});
    else p.op(zrt::Op::layer_norm, {sum, G, Bn}, {n}, {2}, {1e-5});
  }
  int y = p.output("y", {B, S, D}, true);
  p.op(zrt::Op::add, {n, sum}, {y});
  return p;
}

TEST(CudaBackend, FusedOpcodesMatchTheirPartsOnTheCpuBackend) {
  for (fb::DType dt : {fb::DType::f32, fb::DType::bf16})
    for (bool rms : {false, true}) {
      SCOPED_TRACE(std::string(fb::EnumNameDType(dt)) + (rms ? " rms" : " layer_norm"));
      std::vector<float> x = lcg(2 * 33 * 64, 67), r = lcg(2 * 33 * 64, 68);
      std::vector<float> gpu =
          run_plan(fused_plan(dt, true, rms, 2, 33, 64, 96), zrt::BackendKind::cuda, {{"x", x}, {"r", r}}, "y");
      std::vector<float> cpu =
          run_plan(fused_plan(dt, false, rms, 2, 33, 64, 96), zrt::BackendKind::cpu, {{"x", x}, {"r", r}}, "y");
      EXPECT_TRUE(close(gpu, widen(cpu), tol_for(dt)));
    }
}

/// linear_residual (plan 2.13, --zplan-fuse) against its parts: s = x W^T (+ b) + r, n = rms_norm(s), y = n + s
/// (llama's o_proj / down_proj, the residual add after them and the plain norm that follows).
PlanBuilder residual_plan(fb::DType dt, bool fused, bool bias, int64_t B, int64_t S, int64_t D, int64_t F) {
  PlanBuilder p(1, 1, dt);
  auto bytes_of = [](const std::vector<float> &v) {
    std::vector<uint8_t> o(v.size() * 4);
    std::memcpy(o.data(), v.data(), o.size());
    return o;
  };
  int x = p.input("x", dt, {B, S, F}, true), r = p.input("r", dt, {B, S, D}, true);
  int W = p.param("w", {D, F}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(D * F, 71)));
  int b = p.param("b", {D}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(D, 72)));
  int G = p.param("g", {D}, -1, false, "", 0, fb::DType::f32, bytes_of(lcg(D, 73)));
  int y0 = p.act("y0", {B, S, D}), sum = p.act("s", {B, S, D}), n = p.act("n", {B, S, D});
  std::vector<int32_t> lin_in = bias ? std::vector<int32_t>{x, W, b} : std::vector<int32_t>{x, W};
  if (fused) {
    p.op(zrt::Op::linear_residual, bias ? std::vector<int32_t>{x, W, r, b} : std::vector<int32_t>{x, W, r}, {sum}, {1},
         {0.5});
  } else {
    p.op(zrt::Op::linear, lin_in, {y0}, {1}, {0.5});
    p.op(zrt::Op::add, {y0, r}, {sum});
  }
  p.op(zrt::Op::rms_norm, {sum, G}, {n}, {}, {1e-6});
  int y = p.output("y", {B, S, D}, true);
  p.op(zrt::Op::add, {n, sum}, {y});
  return p;
}

TEST(CudaBackend, LinearResidualMatchesItsPartsOnTheCpuBackend) {
  for (fb::DType dt : {fb::DType::f32, fb::DType::bf16})
    for (bool bias : {false, true}) {
      SCOPED_TRACE(std::string(fb::EnumNameDType(dt)) + (bias ? " bias" : ""));
      std::vector<float> x = lcg(2 * 33 * 96, 74), r = lcg(2 * 33 * 64, 75);
      const std::vector<std::pair<std::string, std::vector<float>>> ins = {{"x", x}, {"r", r}};
      std::vector<float> gpu = run_plan(residual_plan(dt, true, bias, 2, 33, 64, 96), zrt::BackendKind::cuda, ins, "y");
      std::vector<float> cpu_fused = run_plan(residual_plan(dt, true, bias, 2, 33, 64, 96), zrt::BackendKind::cpu, ins, "y");
      std::vector<float> cpu = run_plan(residual_plan(dt, false, bias, 2, 33, 64, 96), zrt::BackendKind::cpu, ins, "y");
      EXPECT_TRUE(close(gpu, widen(cpu), tol_for(dt)));
      EXPECT_TRUE(close(cpu_fused, widen(cpu), tol_for(dt)));
    }
}

TEST(CudaBackend, PlanForTheCpuIsRefusedBeforeAllocating) {
  zrt_test::Mlp m;
  PlanBuilder p = m.plan(1, 1, false, fb::DType::f32, "");
  p.backend = fb::Backend::cpu;
  std::vector<uint8_t> file = p.file();
  zrt::Options o;
  o.backend = zrt::BackendKind::cuda;
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open_buffer(file.data(), file.size(), "/tmp", o, &s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cpu"), std::string::npos) << st.message();
}

}  // namespace
