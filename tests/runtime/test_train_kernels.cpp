// The training kernels against independent oracles:
//  - every backward kernel against central finite differences of its forward reference kernel (fp32, step
//    h = 1e-2 on O(1) inputs: the truncation error h^2 f'''/6 and the fp32 rounding of the loss divided by
//    2h both stay below 1e-4, so the tolerance is 1e-3 relative-or-absolute);
//  - the attention forward's lse against a float64 formula;
//  - AdamW against a float64 implementation of the formula written here, and the threaded pool against
//    the reference bit for bit;
//  - embedding_grad, label_pick, label_pick_grad, accumulate and sum_squares against direct formulas;
//  - 16-bit storage: each kernel on bf16 (or f16) copies of the same values against its f32 run, within
//    the storage's rounding step.
#include <cstring>
#include <limits>

#include "kernel_test_util.h"

using namespace zk;
using namespace ktest;
using zk::cpu::Unary;

namespace {

constexpr double kFdStep = 1e-2;
constexpr double kFdTol = 1e-3;
constexpr double kBf16Tol = 1.6e-2;  // two bf16 rounding steps, relative-or-absolute
constexpr double kF16Tol = 2e-3;

}  // namespace

TEST(TrainKernels, ActivationGradsMatchFiniteDifferences) {
  std::mt19937 g(11);
  for (Unary act : {Unary::gelu_tanh, Unary::gelu_erf, Unary::silu}) {
    Buf x = rnd(DType::f32, {4, 9}, g, -4, 4), dy = rnd(DType::f32, {4, 9}, g), dx(DType::f32, {4, 9});
    ASSERT_TRUE(cpu::act_grad(act, x.in(), dy.in(), dx.out()).ok());
    Buf y(DType::f32, x.shape);
    auto loss = [&] {
      EXPECT_TRUE(cpu::unary(act, x.in(), y.out()).ok());
      return dot(dy, y);
    };
    expect_close(dx.values(), finite_diff(x, kFdStep, loss), kFdTol, "act_grad vs finite differences");
    // 16-bit storage: the same values through bf16 and f16 buffers.
    for (DType dt : {DType::bf16, DType::f16}) {
      Buf xr = x.as(dt).as(DType::f32), dyr = dy.as(dt).as(DType::f32), want(DType::f32, x.shape), got(dt, x.shape);
      ASSERT_TRUE(cpu::act_grad(act, xr.in(), dyr.in(), want.out()).ok());
      ASSERT_TRUE(cpu::act_grad(act, xr.as(dt).in(), dyr.as(dt).in(), got.out()).ok());
      expect_close(got.values(), want.values(), dt == DType::bf16 ? kBf16Tol : kF16Tol, "act_grad 16-bit");
    }
  }
  Buf x(DType::f32, {3}), dx(DType::f32, {3});
  EXPECT_FALSE(cpu::act_grad(Unary::exp, x.in(), x.in(), dx.out()).ok());
}

TEST(TrainKernels, SoftmaxGradMatchesFiniteDifferences) {
  std::mt19937 g(12);
  for (int axis : {1, -1}) {
    Buf x = rnd(DType::f32, {2, 5, 3}, g), dy = rnd(DType::f32, x.shape, g), y(DType::f32, x.shape), dx(DType::f32, x.shape);
    ASSERT_TRUE(cpu::softmax(x.in(), y.out(), axis).ok());
    ASSERT_TRUE(cpu::softmax_grad(y.in(), dy.in(), dx.out(), axis).ok());
    Buf yy(DType::f32, x.shape);
    auto loss = [&] {
      EXPECT_TRUE(cpu::softmax(x.in(), yy.out(), axis).ok());
      return dot(dy, yy);
    };
    expect_close(dx.values(), finite_diff(x, kFdStep, loss), kFdTol, "softmax_grad vs finite differences");
    Buf got(DType::bf16, x.shape), want(DType::f32, x.shape);
    Buf yr = y.as(DType::bf16), dyr = dy.as(DType::bf16);
    ASSERT_TRUE(cpu::softmax_grad(yr.as(DType::f32).in(), dyr.as(DType::f32).in(), want.out(), axis).ok());
    ASSERT_TRUE(cpu::softmax_grad(yr.in(), dyr.in(), got.out(), axis).ok());
    expect_close(got.values(), want.values(), kBf16Tol, "softmax_grad bf16");
  }
}

TEST(TrainKernels, LayerNormGradMatchesFiniteDifferences) {
  std::mt19937 g(13);
  for (int axis : {2, 1}) {
    for (bool with_scale : {true, false}) {
      const Dims xs{2, 3, 6};
      Dims ps;
      for (int i = axis; i < xs.rank; ++i) ps.d[ps.rank++] = xs.d[i];
      Buf x = rnd(DType::f32, xs, g), dy = rnd(DType::f32, xs, g);
      Buf scale = rnd(DType::f32, ps, g, 0.5, 1.5), bias = rnd(DType::f32, ps, g);
      Buf dx(DType::f32, xs), dscale(DType::f32, ps), dbias(DType::f32, ps);
      In sc = with_scale ? scale.in() : In{};
      std::vector<float> scratch(cpu::layer_norm_grad_scratch(x.in(), axis));
      ASSERT_TRUE(cpu::layer_norm_grad(x.in(), sc, dy.in(), dx.out(), dscale.out(), dbias.out(), axis, 1e-5f,
                                       scratch.data()).ok());
      Buf y(DType::f32, xs);
      auto loss = [&] {
        EXPECT_TRUE(cpu::layer_norm(x.in(), with_scale ? scale.in() : In{}, bias.in(), y.out(), axis, 1e-5f).ok());
        return dot(dy, y);
      };
      expect_close(dx.values(), finite_diff(x, kFdStep, loss), kFdTol, "layer_norm_grad dx");
      if (with_scale) expect_close(dscale.values(), finite_diff(scale, kFdStep, loss), kFdTol, "layer_norm_grad dscale");
      expect_close(dbias.values(), finite_diff(bias, kFdStep, loss), kFdTol, "layer_norm_grad dbias");
      // bf16 storage of every operand against the f32 run on the same values.
      Buf xr = x.as(DType::bf16), dyr = dy.as(DType::bf16), sr = scale.as(DType::bf16);
      Buf w1(DType::f32, xs), w2(DType::f32, ps), w3(DType::f32, ps), g1(DType::bf16, xs), g2(DType::bf16, ps), g3(DType::bf16, ps);
      ASSERT_TRUE(cpu::layer_norm_grad(xr.as(DType::f32).in(), with_scale ? sr.as(DType::f32).in() : In{},
                                       dyr.as(DType::f32).in(), w1.out(), w2.out(), w3.out(), axis, 1e-5f, scratch.data()).ok());
      ASSERT_TRUE(cpu::layer_norm_grad(xr.in(), with_scale ? sr.in() : In{}, dyr.in(), g1.out(), g2.out(), g3.out(), axis,
                                       1e-5f, scratch.data()).ok());
      expect_close(g1.values(), w1.values(), kBf16Tol, "layer_norm_grad bf16 dx");
      expect_close(g2.values(), w2.values(), kBf16Tol, "layer_norm_grad bf16 dscale");
      expect_close(g3.values(), w3.values(), kBf16Tol, "layer_norm_grad bf16 dbias");
    }
  }
  // The optional outputs may be left out.
  Buf x = rnd(DType::f32, {2, 4}, g), dx(DType::f32, {2, 4});
  std::vector<float> scratch(cpu::layer_norm_grad_scratch(x.in(), 1));
  EXPECT_TRUE(cpu::layer_norm_grad(x.in(), In{}, x.in(), dx.out(), Out{}, Out{}, 1, 1e-5f, scratch.data()).ok());
  Buf bad(DType::f32, {3});
  EXPECT_FALSE(cpu::layer_norm_grad(x.in(), In{}, x.in(), dx.out(), bad.out(), Out{}, 1, 1e-5f, scratch.data()).ok());
}

TEST(TrainKernels, RmsNormGradMatchesFiniteDifferences) {
  std::mt19937 g(14);
  for (bool with_scale : {true, false}) {
    const Dims xs{3, 2, 7};
    Buf x = rnd(DType::f32, xs, g), dy = rnd(DType::f32, xs, g), scale = rnd(DType::f32, {7}, g, 0.5, 1.5);
    Buf dx(DType::f32, xs), dscale(DType::f32, {7});
    std::vector<float> scratch(cpu::rms_norm_grad_scratch(x.in()));
    ASSERT_TRUE(cpu::rms_norm_grad(x.in(), with_scale ? scale.in() : In{}, dy.in(), dx.out(), dscale.out(), 1e-6f,
                                   scratch.data()).ok());
    Buf y(DType::f32, xs);
    auto loss = [&] {
      EXPECT_TRUE(cpu::rms_norm(x.in(), with_scale ? scale.in() : In{}, y.out(), 1e-6f).ok());
      return dot(dy, y);
    };
    expect_close(dx.values(), finite_diff(x, kFdStep, loss), kFdTol, "rms_norm_grad dx");
    if (with_scale) expect_close(dscale.values(), finite_diff(scale, kFdStep, loss), kFdTol, "rms_norm_grad dscale");
    Buf xr = x.as(DType::bf16), dyr = dy.as(DType::bf16), sr = scale.as(DType::bf16);
    Buf w1(DType::f32, xs), w2(DType::f32, {7}), g1(DType::bf16, xs), g2(DType::bf16, {7});
    ASSERT_TRUE(cpu::rms_norm_grad(xr.as(DType::f32).in(), sr.as(DType::f32).in(), dyr.as(DType::f32).in(), w1.out(),
                                   w2.out(), 1e-6f, scratch.data()).ok());
    ASSERT_TRUE(cpu::rms_norm_grad(xr.in(), sr.in(), dyr.in(), g1.out(), g2.out(), 1e-6f, scratch.data()).ok());
    expect_close(g1.values(), w1.values(), kBf16Tol, "rms_norm_grad bf16 dx");
    expect_close(g2.values(), w2.values(), kBf16Tol, "rms_norm_grad bf16 dscale");
  }
}

namespace {

struct AttnCase {
  const char *name;
  int64_t B, Hq, Hkv, S, T, Dh;
  bool causal;
  int mask;  // 0 none, 1 [1, 1, S, T] finite, 2 [B, 1, S, T] with some -inf entries
};

/// lse of row (b, h, i) in float64, straight from the definition.
double lse_formula(const Buf &q, const Buf &k, const Buf &mask, const AttnCase &c, float scale, int64_t b, int64_t h,
                   int64_t i) {
  const int64_t kh = h / (c.Hq / c.Hkv);
  std::vector<double> s;
  for (int64_t j = 0; j < c.T; ++j) {
    if (c.causal && j > i + (c.T - c.S)) continue;
    double dotv = 0;
    for (int64_t d = 0; d < c.Dh; ++d)
      dotv += q.get(((b * c.Hq + h) * c.S + i) * c.Dh + d) * k.get(((b * c.Hkv + kh) * c.T + j) * c.Dh + d);
    double v = dotv * scale;
    if (c.mask == 1) v += mask.get(i * c.T + j);
    if (c.mask == 2) v += mask.get((b * c.S + i) * c.T + j);
    if (std::isfinite(v)) s.push_back(v);
  }
  if (s.empty()) return -INFINITY;
  const double mx = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (double v : s) sum += std::exp(v - mx);
  return mx + std::log(sum);
}

}  // namespace

TEST(TrainKernels, AttentionGradMatchesFiniteDifferences) {
  const AttnCase cases[] = {
      {"mha", 1, 2, 2, 4, 4, 3, false, 0},
      {"mha_mask", 2, 2, 2, 3, 5, 4, false, 1},
      {"gqa_causal_offset", 2, 4, 2, 3, 5, 4, true, 0},
      {"gqa_causal_square", 1, 6, 2, 4, 4, 3, true, 2},
      {"mqa_causal_mask", 1, 3, 1, 2, 5, 4, true, 1},
  };
  std::mt19937 g(15);
  const float scale = 0.6f;
  for (const AttnCase &c : cases) {
    SCOPED_TRACE(c.name);
    const Dims qs{c.B, c.Hq, c.S, c.Dh}, ks{c.B, c.Hkv, c.T, c.Dh};
    Buf q = rnd(DType::f32, qs, g), k = rnd(DType::f32, ks, g), v = rnd(DType::f32, ks, g), dout = rnd(DType::f32, qs, g);
    Buf mask;
    if (c.mask == 1) mask = rnd(DType::f32, {1, 1, c.S, c.T}, g, -1, 1);
    if (c.mask == 2) {
      mask = rnd(DType::f32, {c.B, 1, c.S, c.T}, g, -1, 1);
      // Some keys hidden outright, but never a whole row (that case is tested below).
      for (int64_t i = 0; i < mask.n(); i += 3) if (i % c.T != 0) mask.set(i, -INFINITY);
    }
    const In min = c.mask ? mask.in() : In{};
    Buf out(DType::f32, qs), lse(DType::f32, {c.B, c.Hq, c.S});
    std::vector<float> fs(cpu::attention_scratch(q.in(), k.in()));
    ASSERT_TRUE(cpu::attention(q.in(), k.in(), v.in(), min, out.out(), lse.out(), c.causal, scale, fs.data()).ok());
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.Hq; ++h)
        for (int64_t i = 0; i < c.S; ++i)
          ASSERT_NEAR(lse.get((b * c.Hq + h) * c.S + i), lse_formula(q, k, mask, c, scale, b, h, i), 1e-5) << "lse";
    Buf dq(DType::f32, qs), dk(DType::f32, ks), dv(DType::f32, ks);
    std::vector<float> bs(cpu::attention_grad_scratch(q.in(), k.in()));
    ASSERT_TRUE(cpu::attention_grad(q.in(), k.in(), v.in(), out.in(), dout.in(), lse.in(), min, dq.out(), dk.out(), dv.out(),
                                    c.causal, scale, bs.data()).ok());
    Buf y(DType::f32, qs);
    auto loss = [&] {
      EXPECT_TRUE(cpu::attention(q.in(), k.in(), v.in(), min, y.out(), c.causal, scale, fs.data()).ok());
      return dot(dout, y);
    };
    expect_close(dq.values(), finite_diff(q, kFdStep, loss), kFdTol, "attention_grad dq");
    expect_close(dk.values(), finite_diff(k, kFdStep, loss), kFdTol, "attention_grad dk");
    expect_close(dv.values(), finite_diff(v, kFdStep, loss), kFdTol, "attention_grad dv");
    // bf16 storage: the same values, rounded to bf16 first, through bf16 buffers.
    Buf qr = q.as(DType::bf16), kr = k.as(DType::bf16), vr = v.as(DType::bf16), dor = dout.as(DType::bf16);
    Buf outr(DType::bf16, qs), lr(DType::f32, lse.shape);
    ASSERT_TRUE(cpu::attention(qr.in(), kr.in(), vr.in(), min, outr.out(), lr.out(), c.causal, scale, fs.data()).ok());
    Buf w1(DType::f32, qs), w2(DType::f32, ks), w3(DType::f32, ks), g1(DType::bf16, qs), g2(DType::bf16, ks), g3(DType::bf16, ks);
    ASSERT_TRUE(cpu::attention_grad(qr.as(DType::f32).in(), kr.as(DType::f32).in(), vr.as(DType::f32).in(),
                                    outr.as(DType::f32).in(), dor.as(DType::f32).in(), lr.in(), min, w1.out(), w2.out(),
                                    w3.out(), c.causal, scale, bs.data()).ok());
    ASSERT_TRUE(cpu::attention_grad(qr.in(), kr.in(), vr.in(), outr.in(), dor.in(), lr.in(), min, g1.out(), g2.out(),
                                    g3.out(), c.causal, scale, bs.data()).ok());
    expect_close(g1.values(), w1.values(), kBf16Tol, "attention_grad bf16 dq");
    expect_close(g2.values(), w2.values(), kBf16Tol, "attention_grad bf16 dk");
    expect_close(g3.values(), w3.values(), kBf16Tol, "attention_grad bf16 dv");
  }
}

TEST(TrainKernels, AttentionFullyMaskedRowHasZeroGradient) {
  // A row whose every key is masked has output 0 and lse -inf; its gradient is zero, not NaN.
  std::mt19937 g(16);
  const Dims qs{1, 1, 2, 3}, ks{1, 1, 3, 3};
  Buf q = rnd(DType::f32, qs, g), k = rnd(DType::f32, ks, g), v = rnd(DType::f32, ks, g), dout = rnd(DType::f32, qs, g);
  Buf mask(DType::f32, {1, 1, 2, 3});
  for (int j = 0; j < 3; ++j) mask.set(j, -INFINITY);
  Buf out(DType::f32, qs), lse(DType::f32, {1, 1, 2});
  std::vector<float> fs(3), bs(cpu::attention_grad_scratch(q.in(), k.in()));
  ASSERT_TRUE(cpu::attention(q.in(), k.in(), v.in(), mask.in(), out.out(), lse.out(), false, 1.0f, fs.data()).ok());
  EXPECT_TRUE(std::isinf(lse.get(0)) && lse.get(0) < 0);
  Buf dq(DType::f32, qs), dk(DType::f32, ks), dv(DType::f32, ks);
  ASSERT_TRUE(cpu::attention_grad(q.in(), k.in(), v.in(), out.in(), dout.in(), lse.in(), mask.in(), dq.out(), dk.out(),
                                  dv.out(), false, 1.0f, bs.data()).ok());
  for (int d = 0; d < 3; ++d) EXPECT_EQ(dq.get(d), 0.0);
  for (double x : dk.values()) EXPECT_TRUE(std::isfinite(x));
  Buf bad(DType::f32, {1, 1, 3});
  EXPECT_FALSE(cpu::attention_grad(q.in(), k.in(), v.in(), out.in(), dout.in(), bad.in(), mask.in(), dq.out(), dk.out(),
                                   dv.out(), false, 1.0f, bs.data()).ok());
}

TEST(TrainKernels, EmbeddingGradIsAScatterAddOfThisRanksRows) {
  std::mt19937 g(17);
  const int64_t V = 5, D = 6, start = 10;
  // Repeated ids, ids of other ranks on both sides, the first and last local rows.
  const int64_t idv[2][4] = {{12, 3, 12, 10}, {14, 15, 12, 9}};
  for (DType dt : {DType::f32, DType::bf16}) {
    Buf ids(DType::i64, {2, 4});
    for (int i = 0; i < 8; ++i) ids.set(i, static_cast<double>(idv[i / 4][i % 4]));
    Buf dy = rnd(DType::f32, {2, 4, D}, g).as(dt), dt_out(dt, {V, D});
    for (int64_t i = 0; i < dt_out.n(); ++i) dt_out.set(i, 7.0);  // must be overwritten, not added to
    std::vector<float> scratch(cpu::embedding_grad_scratch(dt_out.out()));
    ASSERT_TRUE(cpu::embedding_grad(ids.in(), dy.in(), dt_out.out(), start, scratch.data()).ok());
    std::vector<double> want(static_cast<size_t>(V * D), 0.0);
    for (int n = 0; n < 8; ++n) {
      const int64_t r = idv[n / 4][n % 4] - start;
      if (r < 0 || r >= V) continue;
      for (int64_t d = 0; d < D; ++d) want[r * D + d] += dy.get(n * D + d);
    }
    expect_close(dt_out.values(), want, dt == DType::f32 ? 1e-6 : kBf16Tol, "embedding_grad");
  }
  Buf ids(DType::f32, {2}), dy(DType::f32, {2, 3}), dtab(DType::f32, {4, 3});
  std::vector<float> scratch(3);
  EXPECT_FALSE(cpu::embedding_grad(ids.in(), dy.in(), dtab.out(), 0, scratch.data()).ok());
}

TEST(TrainKernels, LabelPickAndItsGrad) {
  std::mt19937 g(18);
  const int64_t N = 6, V = 4, start = 4, ignore = -100;
  const int64_t labels_v[N] = {4, 7, 3, 8, -100, 5};  // in range, last local, before, after, ignored, in range
  Buf labels(DType::i64, {N});
  for (int i = 0; i < N; ++i) labels.set(i, static_cast<double>(labels_v[i]));
  for (DType dt : {DType::f32, DType::bf16}) {
    Buf logits = rnd(DType::f32, {N, V}, g).as(dt), out(dt, {N});
    ASSERT_TRUE(cpu::label_pick(logits.in(), labels.in(), out.out(), start, ignore).ok());
    Buf dy = rnd(DType::f32, {N}, g).as(dt), dl(dt, {N, V});
    for (int64_t i = 0; i < dl.n(); ++i) dl.set(i, 3.0);
    ASSERT_TRUE(cpu::label_pick_grad(labels.in(), dy.in(), dl.out(), start, ignore).ok());
    for (int64_t n = 0; n < N; ++n) {
      const int64_t l = labels_v[n];
      const bool here = l != ignore && l >= start && l < start + V;
      EXPECT_EQ(out.get(n), here ? logits.get(n * V + l - start) : 0.0) << n;
      for (int64_t j = 0; j < V; ++j) EXPECT_EQ(dl.get(n * V + j), here && j == l - start ? dy.get(n) : 0.0) << n << "," << j;
    }
  }
  Buf logits(DType::f32, {N, V}), out(DType::f32, {N + 1});
  EXPECT_FALSE(cpu::label_pick(logits.in(), labels.in(), out.out(), start, ignore).ok());
}

namespace {

/// AdamW in float64, written from docs/training-contract.md section 3.
void adamw_double(std::vector<double> &p, const std::vector<double> &grad, std::vector<double> &m, std::vector<double> &v,
                  double lr, int t, double gs, double b1, double b2, double eps, double wd) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = grad[i] * gs;
    p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    p[i] -= lr * (m[i] / (1 - std::pow(b1, t))) / (std::sqrt(v[i] / (1 - std::pow(b2, t))) + eps);
  }
}

}  // namespace

TEST(TrainKernels, AdamWMatchesTheFormulaInDouble) {
  std::mt19937 g(19);
  const cpu::AdamWParams hp{0.9, 0.999, 1e-8, 0.01};
  for (DType pdt : {DType::f32, DType::bf16}) {
    const int64_t n = 257;
    Buf p = rnd(DType::f32, {n}, g).as(pdt), m(DType::f32, {n}), v(DType::f32, {n});
    std::vector<double> P = p.values(), M(n, 0.0), Vv(n, 0.0);
    Buf lr(DType::f32, {}), step(DType::i64, {}), gs(DType::f32, {});
    lr.set(0, 1e-3);
    gs.set(0, 0.5);
    for (int t = 1; t <= 5; ++t) {
      Buf grad = rnd(DType::f32, {n}, g);
      step.set(0, t);
      ASSERT_TRUE(cpu::adamw(p.out(), grad.in(), m.out(), v.out(), lr.in(), step.in(), gs.in(), hp).ok());
      adamw_double(P, grad.values(), M, Vv, lr.get(0), t, 0.5, hp.beta1, hp.beta2, hp.eps, hp.weight_decay);
      if (pdt == DType::bf16) P = p.values();  // the formula continues from the stored (rounded) parameter
    }
    // fp32: the update is ~1e-3 and rounds to ~1e-7 per step; m and v are relative 1e-6.
    if (pdt == DType::f32) expect_close(p.values(), P, 1e-6, "adamw param");
    expect_close(m.values(), M, 1e-5, "adamw m");
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(v.get(i), Vv[i], 1e-5 * Vv[i] + 1e-12) << "adamw v at " << i;
  }
  // Step 0 is a skipped step (fp16 dynamic loss scaling saw an overflow): nothing is written, even with a
  // gradient of infinities.
  Buf p(DType::f32, {3}), grad(DType::f32, {3}), m(DType::f32, {3}), v(DType::f32, {3}), lr(DType::f32, {}),
      step(DType::i64, {}), gs(DType::f32, {});
  for (int64_t i = 0; i < 3; ++i) {
    p.set(i, 1.0 + i);
    m.set(i, 0.5);
    v.set(i, 0.25);
    grad.set(i, std::numeric_limits<double>::infinity());
  }
  lr.set(0, 1e-3);
  gs.set(0, 1.0);
  step.set(0, 0);
  EXPECT_TRUE(cpu::adamw(p.out(), grad.in(), m.out(), v.out(), lr.in(), step.in(), gs.in(), hp).ok());
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(p.get(i), 1.0 + i);
    EXPECT_EQ(m.get(i), 0.5);
    EXPECT_EQ(v.get(i), 0.25);
  }
  // Bad scalars are refused: a float step.
  Buf fstep(DType::f32, {});
  fstep.set(0, 1.0);
  EXPECT_FALSE(cpu::adamw(p.out(), grad.in(), m.out(), v.out(), lr.in(), fstep.in(), gs.in(), hp).ok());
}

TEST(TrainKernels, AdamWPoolIsBitwiseTheReference) {
  std::mt19937 g(20);
  const int64_t n = (1 << 20) + 37;  // several slices, and an end that is not a multiple of 16
  std::vector<float> p(n), grad(n), m(n, 0.0f), v(n, 0.0f);
  std::normal_distribution<float> u(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) p[i] = u(g);
  std::vector<float> p2 = p, m2 = m, v2 = v;
  const cpu::AdamWParams hp{0.9, 0.95, 1e-8, 0.1};
  AdamWPool pool(4);
  EXPECT_EQ(pool.threads(), 4);
  for (int t = 1; t <= 3; ++t) {
    for (int64_t i = 0; i < n; ++i) grad[i] = u(g) * 1e-2f;
    Buf lr(DType::f32, {}), step(DType::i64, {}), gs(DType::f32, {});
    lr.set(0, 3e-4);
    step.set(0, t);
    gs.set(0, 0.7);
    ASSERT_TRUE(cpu::adamw(Out{p.data(), DType::f32, {n}}, In{grad.data(), DType::f32, {n}}, Out{m.data(), DType::f32, {n}},
                           Out{v.data(), DType::f32, {n}}, lr.in(), step.in(), gs.in(), hp).ok());
    pool.step(p2.data(), grad.data(), m2.data(), v2.data(), n, cpu::AdamWStep::from(hp, lr.get(0), t, gs.get(0)));
  }
  EXPECT_EQ(std::memcmp(p.data(), p2.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(m.data(), m2.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(v.data(), v2.data(), n * sizeof(float)), 0);
}

TEST(TrainKernels, AccumulateAndSumSquares) {
  std::mt19937 g(21);
  for (DType dt : {DType::f32, DType::bf16}) {
    Buf t = rnd(DType::f32, {3, 4}, g).as(dt), val = rnd(DType::f32, {3, 4}, g).as(dt), row = rnd(DType::f32, {4}, g);
    std::vector<double> want = t.values();
    for (int64_t i = 0; i < 12; ++i) want[i] += val.get(i) + row.get(i % 4);
    ASSERT_TRUE(cpu::accumulate(t.out(), val.in()).ok());
    ASSERT_TRUE(cpu::accumulate(t.out(), row.in()).ok());  // broadcast
    expect_close(t.values(), want, dt == DType::f32 ? 1e-6 : kBf16Tol, "accumulate");
    Buf x = rnd(DType::f32, {1000}, g).as(dt), out(DType::f32, {});
    ASSERT_TRUE(cpu::sum_squares(x.in(), out.out()).ok());
    double ss = 0;
    for (double e : x.values()) ss += e * e;
    EXPECT_NEAR(out.get(0), ss, 1e-7 * ss);
  }
  Buf t(DType::f32, {3}), bad(DType::f32, {4}), out(DType::bf16, {});
  EXPECT_FALSE(cpu::accumulate(t.out(), bad.in()).ok());
  EXPECT_FALSE(cpu::sum_squares(t.in(), out.out()).ok());
}
