// Plans shared by the runtime's tests: a tensor-parallel / ZeRO MLP with its float64 reference, and a
// plan that exercises every collective along several dims and mesh axes.
#ifndef ZRT_TESTS_TEST_PLANS_H
#define ZRT_TESTS_TEST_PLANS_H

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "plan_builder.h"

namespace zrt_test {

/// Deterministic values in [-1, 1) (a 64-bit LCG), independent of anything under test.
inline std::vector<float> lcg(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<float>(static_cast<double>(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return v;
}

/// y = gelu_tanh(x W1 + b1) W2 + b2, x [B, S, D], W1 [D, F], W2 [F, D].
struct Mlp {
  int64_t B = 4, S = 3, D = 8, F = 16;
  std::vector<float> x, w1, b1, w2, b2;
  explicit Mlp(uint64_t seed = 1) {
    x = lcg(B * S * D, seed);
    w1 = lcg(D * F, seed + 1);
    b1 = lcg(F, seed + 2);
    w2 = lcg(F * D, seed + 3);
    b2 = lcg(D, seed + 4);
  }
  /// The float64 reference, [B, S, D].
  std::vector<double> expected() const {
    std::vector<double> y(B * S * D);
    for (int64_t r = 0; r < B * S; ++r) {
      std::vector<double> h(F);
      for (int64_t f = 0; f < F; ++f) {
        double acc = b1[f];
        for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(x[r * D + d]) * w1[d * F + f];
        h[f] = 0.5 * acc * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (acc + 0.044715 * acc * acc * acc)));
      }
      for (int64_t d = 0; d < D; ++d) {
        double acc = b2[d];
        for (int64_t f = 0; f < F; ++f) acc += h[f] * w2[f * D + d];
        y[r * D + d] = acc;
      }
    }
    return y;
  }
  /// The weights file: W1, b1, W2, b2 as consecutive little-endian f32 (offsets as in plan()).
  bool write_weights(const std::string &path, size_t truncate_to = 0) const {
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    std::vector<float> all;
    for (const auto *v : {&w1, &b1, &w2, &b2}) all.insert(all.end(), v->begin(), v->end());
    size_t bytes = all.size() * 4;
    if (truncate_to) bytes = truncate_to;
    bool ok = std::fwrite(all.data(), 1, bytes, f) == bytes;
    return std::fclose(f) == 0 && ok;
  }

  /// The plan: W1 column-split and b1 split over tp, W2 row-split, an all_reduce over tp, b2 whole;
  /// with `zero` every parameter is a dp shard gathered before use and released after. `file` empty
  /// carries the weights inline.
  PlanBuilder plan(int tp, int dp, bool zero, fb::DType dt = fb::DType::f32, const std::string &file = "weights.bin") const {
    PlanBuilder p(tp, dp, dt);
    auto bytes_of = [](const std::vector<float> &v) {
      std::vector<uint8_t> b(v.size() * 4);
      std::memcpy(b.data(), v.data(), b.size());
      return b;
    };
    const uint64_t o1 = 0, o2 = o1 + w1.size() * 4, o3 = o2 + b1.size() * 4, o4 = o3 + w2.size() * 4;
    const bool inl = file.empty();
    int xin = p.input("x", dt, {B, S, D}, true);
    int W1 = p.param("w1", {D, F}, 1, zero, file, o1, fb::DType::f32, inl ? bytes_of(w1) : std::vector<uint8_t>{});
    int B1 = p.param("b1", {F}, 0, zero, file, o2, fb::DType::f32, inl ? bytes_of(b1) : std::vector<uint8_t>{});
    int W2 = p.param("w2", {F, D}, 0, zero, file, o3, fb::DType::f32, inl ? bytes_of(w2) : std::vector<uint8_t>{});
    int B2 = p.param("b2", {D}, -1, zero, file, o4, fb::DType::f32, inl ? bytes_of(b2) : std::vector<uint8_t>{});
    const int64_t Bl = B / dp, Fl = F / tp;
    auto use = [&](int t, const Shape &local, const std::string &n) {
      if (!zero) return t;
      // Gathered tensors reserve the padded flat size so that the gather lands in place.
      const int64_t shard = p.tensors[t].shape[0];
      const uint64_t pad = static_cast<uint64_t>(shard * dp - numel(local)) * esize(dt);
      int g = p.tensor(n + ".gathered", dt, local, fb::TensorKind::gathered, fb::MemSpace::device, pad);
      p.op(zrt::Op::gather_param, {t}, {g}, {}, {}, fb::Axis::dp, "gather " + n);
      return g;
    };
    int w1g = use(W1, {D, Fl}, "w1"), b1g = use(B1, {Fl}, "b1");
    int h = p.act("h", {Bl, S, Fl});
    p.op(zrt::Op::linear, {xin, w1g, b1g}, {h}, {0}, {1.0}, fb::Axis::none, "fc1");
    if (zero) {
      p.op(zrt::Op::release, {w1g}, {});
      p.op(zrt::Op::release, {b1g}, {});
    }
    int a = p.act("a", {Bl, S, Fl});
    p.op(zrt::Op::gelu_tanh, {h}, {a});
    int w2g = use(W2, {Fl, D}, "w2");
    int pr = p.act("partial", {Bl, S, D});
    p.op(zrt::Op::linear, {a, w2g, -1}, {pr}, {0}, {1.0}, fb::Axis::none, "fc2");
    if (zero) p.op(zrt::Op::release, {w2g}, {});
    if (tp > 1) p.op(zrt::Op::all_reduce, {pr}, {pr}, {}, {}, fb::Axis::tp, "fc2 all_reduce");
    int b2g = use(B2, {D}, "b2");
    int y = p.output("y", {B, S, D}, true);
    p.op(zrt::Op::add, {pr, b2g}, {y}, {}, {}, fb::Axis::none, "bias2");
    if (zero) p.op(zrt::Op::release, {b2g}, {});
    return p;
  }
};

/// Every collective on a world of tp x dp ranks:
///   a = x * s_local (s [T*C] split over tp, x [N, C] batch-split over dp)
///   g = all_gather(tp, dim 1, a)            [N/dp, T*C]
///   r = reduce_scatter(tp, dim 1, g)        [N/dp, C]  == tp * a
///   b = broadcast(dp, root dp-1, r)         every dp rank gets the last dp group's r
///   w = all_reduce(world, a)                sum over every rank's a
///   c = all_gather(dp, dim 0, a)            [N, C]: a of every dp group, tp index of this rank
/// Outputs r (batch-split), b, w, c (whole).
struct Collectives {
  int64_t N = 4, C = 3;
  std::vector<float> x, s;
  int tp, dp;
  Collectives(int tp_, int dp_) : tp(tp_), dp(dp_) {
    x = lcg(N * C, 11);
    s = lcg(tp * C, 12);
  }
  PlanBuilder plan() const {
    PlanBuilder p(tp, dp);
    std::vector<uint8_t> sb(s.size() * 4);
    std::memcpy(sb.data(), s.data(), sb.size());
    const int64_t Nl = N / dp;
    int xin = p.input("x", fb::DType::f32, {N, C}, true);
    int sl = p.param("s", {tp * C}, 0, false, "", 0, fb::DType::f32, sb);
    int a = p.act("a", {Nl, C});
    p.op(zrt::Op::mul, {xin, sl}, {a});
    int g = p.act("g", {Nl, tp * C});
    p.op(zrt::Op::all_gather, {a}, {g}, {1}, {}, fb::Axis::tp);
    int r = p.output("r", {N, C}, true);
    p.op(zrt::Op::reduce_scatter, {g}, {r}, {1}, {}, fb::Axis::tp);
    int b = p.output("b", {Nl, C}, false);
    p.op(zrt::Op::broadcast, {r}, {b}, {dp - 1}, {}, fb::Axis::dp);
    int w = p.output("w", {Nl, C}, false);
    p.op(zrt::Op::all_reduce, {a}, {w}, {}, {}, fb::Axis::world);
    p.op(zrt::Op::barrier, {}, {}, {}, {}, fb::Axis::world);
    int c = p.output("c", {N, C}, false);
    p.op(zrt::Op::all_gather, {a}, {c}, {0}, {}, fb::Axis::dp);
    return p;
  }
  /// a of the rank with tp index t and dp index d, element (i, j) of its [N/dp, C].
  double a(int t, int d, int64_t i, int64_t j) const {
    return static_cast<double>(x[(d * (N / dp) + i) * C + j]) * s[t * C + j];
  }
};

}  // namespace zrt_test

#endif  // ZRT_TESTS_TEST_PLANS_H
