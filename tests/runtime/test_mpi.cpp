// Multi-rank runs of plans built here, under mpirun: tensor parallelism, ZeRO-3 gathers, every collective
// along several dims and axes, start-up agreement, checked against float64 computations of the same math.
// ctest starts this binary with -np 1, 2 and 4; each test names the world size it needs.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "test_plans.h"
#include "weights.h"
#include "zrt/zrt.h"

using namespace zrt_test;

// 16-bit helpers over the kernels' conversions (the kernels library is linked into this test).
namespace zk {
uint16_t f32_to_bf16(float);
float bf16_to_f32(uint16_t);
uint16_t f32_to_f16(float);
float f16_to_f32(uint16_t);
}  // namespace zk
uint16_t zk_round(fb::DType dt, float v) { return dt == fb::DType::bf16 ? zk::f32_to_bf16(v) : zk::f32_to_f16(v); }
double zk_widen(fb::DType dt, uint16_t h) { return dt == fb::DType::bf16 ? zk::bf16_to_f32(h) : zk::f16_to_f32(h); }

namespace {

int world() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}
int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

#define NEED_WORLD(n)                                          \
  do {                                                         \
    if (world() != (n)) GTEST_SKIP() << "needs " << (n) << " ranks"; \
  } while (0)

/// A folder of this rank's own (no two ranks write the same file), holding the MLP's weights file.
std::string rank_dir(const Mlp &m, size_t truncate_to = 0) {
  const std::string d = ::testing::TempDir() + "/zrt_mpi_" + std::to_string(getppid()) + "_" + std::to_string(rank());
  mkdir(d.c_str(), 0755);
  EXPECT_TRUE(m.write_weights(d + "/weights.bin", truncate_to));
  return d;
}

std::unique_ptr<zrt::Session> open_ok(const PlanBuilder &p, const std::string &dir, zrt::Options o = {}) {
  std::vector<uint8_t> f = p.file();
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), dir, o, &s);
  EXPECT_TRUE(st.ok()) << st.message();
  return s;
}

/// Runs the MLP plan and checks this rank's rows and the global output on rank 0 against float64.
void run_mlp(const Mlp &m, const PlanBuilder &p, const std::string &dir, double tol, zrt::Options o = {},
             const std::vector<double> *want_override = nullptr) {
  auto s = open_ok(p, dir, o);
  ASSERT_TRUE(s);
  if (p.dtype == fb::DType::f32) {
    ASSERT_TRUE(s->bind_input("x", m.x.data(), m.x.size() * 4).ok());
  } else {
    // 16-bit plans take their input in the plan's dtype.
    std::vector<uint16_t> xs(m.x.size());
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = zk_round(p.dtype, m.x[i]);
    ASSERT_TRUE(s->bind_input("x", xs.data(), xs.size() * 2).ok());
  }
  zrt::Status st = s->run();
  ASSERT_TRUE(st.ok()) << st.message();
  const std::vector<double> want = want_override ? *want_override : m.expected();
  const size_t es = p.dtype == fb::DType::f32 ? 4 : 2;
  const int dp = p.dp, d = rank() / p.tp;
  const size_t local = want.size() / dp;
  std::vector<uint8_t> got(local * es);
  std::vector<int64_t> shape;
  st = s->read_local_output("y", got.data(), got.size(), &shape);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(shape, (std::vector<int64_t>{m.B / dp, m.S, m.D}));
  auto val = [&](const std::vector<uint8_t> &b, size_t i) {
    if (es == 4) {
      float f;
      std::memcpy(&f, b.data() + i * 4, 4);
      return static_cast<double>(f);
    }
    uint16_t h;
    std::memcpy(&h, b.data() + i * 2, 2);
    return zk_widen(p.dtype, h);
  };
  // std::max(worst, NaN) is worst: a NaN is kept by hand, and once kept std::max(NaN, x) keeps it.
  auto worse = [](double worst, double d) { return std::isnan(d) ? d : std::max(worst, d); };
  double worst = 0;
  for (size_t i = 0; i < local; ++i) worst = worse(worst, std::fabs(val(got, i) - want[d * local + i]));
  EXPECT_LE(worst, tol) << "rank " << rank() << " local rows";
  std::vector<uint8_t> all(rank() == 0 ? want.size() * es : 0);
  st = s->read_output("y", all.data(), all.size());
  ASSERT_TRUE(st.ok()) << st.message();
  if (rank() == 0) {
    worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = worse(worst, std::fabs(val(all, i) - want[i]));
    EXPECT_LE(worst, tol) << "global output";
  }
  // The report carries the plan's arena. (Its "measured" extents come from the plan's own offsets, so they
  // are not compared with it here; tests/memory measures the process from outside the runtime.)
  const zrt::MemoryReport r = s->memory_report();
  EXPECT_EQ(r.planned_arena_bytes[0], p.arena[0]);
}

}  // namespace


TEST(World1, MlpFromFile) {
  NEED_WORLD(1);
  Mlp m;
  run_mlp(m, m.plan(1, 1, false), rank_dir(m), 1e-5);
}

TEST(World2, MlpTensorParallel) {
  NEED_WORLD(2);
  Mlp m;
  run_mlp(m, m.plan(2, 1, false), rank_dir(m), 1e-5);
}

TEST(World2, MlpTensorParallelInlineBf16AndF16) {
  NEED_WORLD(2);
  Mlp m;
  run_mlp(m, m.plan(2, 1, false, fb::DType::bf16, ""), rank_dir(m), 0.08);
  run_mlp(m, m.plan(2, 1, false, fb::DType::f16, ""), rank_dir(m), 0.01);
}

TEST(World2, MlpZero3OverDp) {
  NEED_WORLD(2);
  Mlp m;
  run_mlp(m, m.plan(1, 2, true), rank_dir(m), 1e-5);
}

TEST(World2, RandomInitIsIndependentOfSharding) {
  NEED_WORLD(2);
  // Weights from --init random are a function of (seed, name, global index): the float64 reference built
  // from that function must match a tp=2 run and a ZeRO dp=2 run alike.
  Mlp m;
  Mlp r = m;
  auto fillv = [](std::vector<float> &v, const char *name) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = zrt::random_weight_value(42, name, i);
  };
  fillv(r.w1, "w1");
  fillv(r.b1, "b1");
  fillv(r.w2, "w2");
  fillv(r.b2, "b2");
  const std::vector<double> want = r.expected();
  zrt::Options o;
  o.init = zrt::InitMode::random;
  o.seed = 42;
  const std::string dir = ::testing::TempDir() + "/zrt_no_weights_here";  // graph-only: no weights file
  run_mlp(m, m.plan(2, 1, false), dir, 1e-5, o, &want);
  run_mlp(m, m.plan(1, 2, true), dir, 1e-5, o, &want);
}

void check_collectives(int tp, int dp) {
  Collectives c(tp, dp);
  PlanBuilder p = c.plan();
  auto s = open_ok(p, ".");
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->bind_input("x", c.x.data(), c.x.size() * 4).ok());
  zrt::Status st = s->run();
  ASSERT_TRUE(st.ok()) << st.message();
  const int t = rank() % tp, d = rank() / tp;
  const int64_t Nl = c.N / dp, C = c.C;
  auto local = [&](const char *name, int64_t n) {
    std::vector<float> v(n);
    EXPECT_TRUE(s->read_local_output(name, v.data(), n * 4, nullptr).ok());
    return v;
  };
  std::vector<float> r = local("r", Nl * C), b = local("b", Nl * C), w = local("w", Nl * C), cc = local("c", c.N * C);
  for (int64_t i = 0; i < Nl; ++i)
    for (int64_t j = 0; j < C; ++j) {
      EXPECT_NEAR(r[i * C + j], tp * c.a(t, d, i, j), 1e-5) << "reduce_scatter";
      EXPECT_NEAR(b[i * C + j], tp * c.a(t, dp - 1, i, j), 1e-5) << "broadcast";
      double sum = 0;
      for (int tt = 0; tt < tp; ++tt)
        for (int dd = 0; dd < dp; ++dd) sum += c.a(tt, dd, i, j);
      EXPECT_NEAR(w[i * C + j], sum, 1e-5) << "all_reduce";
    }
  for (int dd = 0; dd < dp; ++dd)
    for (int64_t i = 0; i < Nl; ++i)
      for (int64_t j = 0; j < C; ++j) EXPECT_NEAR(cc[(dd * Nl + i) * C + j], c.a(t, dd, i, j), 1e-6) << "all_gather dp";
  // The global batch-split output on rank 0: the rows of every dp group from its tp-index-0 rank.
  std::vector<float> g(rank() == 0 ? c.N * C : 0);
  ASSERT_TRUE(s->read_output("r", g.data(), g.size() * 4).ok());
  if (rank() == 0)
    for (int dd = 0; dd < dp; ++dd)
      for (int64_t i = 0; i < Nl; ++i)
        for (int64_t j = 0; j < C; ++j) EXPECT_NEAR(g[(dd * Nl + i) * C + j], tp * c.a(0, dd, i, j), 1e-5);
}

// all_reduce and reduce_scatter with the max and min reductions (the plan's reduction int) over dp: each
// rank holds its row of the global batch, the oracle is numpy-style max/min over the rows. f32 runs
// MPI's built-in operations, bf16 the communicator's own (decoded values, not bit patterns).
TEST(World2, MaxAndMinReductions) {
  NEED_WORLD(2);
  for (fb::DType dt : {fb::DType::f32, fb::DType::bf16}) {
    PlanBuilder p(1, 2, dt);
    const int x = p.input("x", dt, {2, 4}, true);
    const int mx = p.output("max", {1, 4}, false), mn = p.output("min", {1, 4}, false);
    const int e = p.act("e", {2, 4}), rs = p.output("rs", {2, 4}, true);
    p.op(zrt::Op::all_reduce, {x}, {mx}, {1}, {}, fb::Axis::dp);
    p.op(zrt::Op::all_reduce, {x}, {mn}, {2}, {}, fb::Axis::dp);
    p.op(zrt::Op::expand, {x}, {e});
    p.op(zrt::Op::reduce_scatter, {e}, {rs}, {0, 1}, {}, fb::Axis::dp);
    const std::vector<uint8_t> f = p.file();
    std::unique_ptr<zrt::Session> s;
    zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), ".", {}, &s);
    ASSERT_TRUE(st.ok()) << st.message();
    // Values exact in bf16; negatives so that bit-pattern comparison would give the wrong answer.
    const float xv[8] = {1.5f, -2.0f, 3.0f, -0.25f, -1.0f, -3.0f, 2.5f, 0.5f};
    std::vector<uint8_t> in(8 * esize(dt));
    for (int i = 0; i < 8; ++i) {
      if (dt == fb::DType::f32) std::memcpy(in.data() + 4 * i, &xv[i], 4);
      else { const uint16_t h = zk_round(dt, xv[i]); std::memcpy(in.data() + 2 * i, &h, 2); }
    }
    ASSERT_TRUE(s->bind_input("x", in.data(), in.size()).ok());
    st = s->run();
    ASSERT_TRUE(st.ok()) << st.message();
    auto read = [&](const char *name, size_t n) {
      std::vector<uint8_t> b(rank() == 0 ? n * esize(dt) : 0);
      EXPECT_TRUE(s->read_output(name, b.data(), b.size()).ok());
      std::vector<double> v;
      for (size_t i = 0; rank() == 0 && i < n; ++i) {
        if (dt == fb::DType::f32) { float f; std::memcpy(&f, b.data() + 4 * i, 4); v.push_back(f); }
        else { uint16_t h; std::memcpy(&h, b.data() + 2 * i, 2); v.push_back(zk_widen(dt, h)); }
      }
      return v;
    };
    const std::vector<double> gmax = read("max", 4), gmin = read("min", 4), grs = read("rs", 8);
    if (rank() != 0) continue;
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(gmax[j], std::max(xv[j], xv[4 + j])) << j;
      EXPECT_EQ(gmin[j], std::min(xv[j], xv[4 + j])) << j;
      EXPECT_EQ(grs[j], std::max(xv[j], xv[4 + j])) << j;      // rank 0's part: row 0 of the max
      EXPECT_EQ(grs[4 + j], std::max(xv[j], xv[4 + j])) << j;  // rank 1's part: row 1 of the max
    }
  }
}

TEST(World2, CollectivesTp2) { NEED_WORLD(2); check_collectives(2, 1); }
TEST(World2, CollectivesDp2) { NEED_WORLD(2); check_collectives(1, 2); }

TEST(World2, RanksWithDifferentPlansAllStop) {
  NEED_WORLD(2);
  Mlp m;
  PlanBuilder p = m.plan(2, 1, false);
  if (rank() == 1) p.instrs[0].floats[0] = 0.5;  // a different (valid) plan on rank 1
  std::vector<uint8_t> f = p.file();
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), rank_dir(m), {}, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ranks hold different plan files"), std::string::npos) << st.message();
}

TEST(World2, OneRankWithACorruptPlanStopsAll) {
  NEED_WORLD(2);
  Mlp m;
  std::vector<uint8_t> f = m.plan(2, 1, false).file();
  if (rank() == 1) f[f.size() / 2] ^= 1;
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), rank_dir(m), {}, &s);
  ASSERT_FALSE(st.ok());
  // Every rank reports rank 1's problem, so rank 0 can print it.
  EXPECT_NE(st.message().find("rank 1: plan '<memory>': CRC-32 mismatch"), std::string::npos) << st.message();
}

TEST(World2, OneRankWithAShortWeightsFileStopsAll) {
  NEED_WORLD(2);
  Mlp m;
  const std::string dir = rank_dir(m, rank() == 1 ? 100 : 0);
  std::vector<uint8_t> f = m.plan(2, 1, false).file();
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), dir, {}, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 1: loading weight"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("weights.bin' is 100 bytes"), std::string::npos) << st.message();
}

/// Vocabulary-parallel embedding with padding and a tied LM head, as the compiler lowers GPT-2 over tp:
/// the vocabulary (5) is padded to a multiple of tp, each rank holds V_local rows (padding rows zero, no
/// piece covers them), the embedding's partial rows are summed over tp, logits of the local vocabulary part
/// are gathered over tp along the last dim, and a slice drops the padding columns.
void check_vocab_parallel(int tp) {
  const int64_t V = 5, D = 4, B = 2, S = 3;
  const int64_t Vl = (V + tp - 1) / tp;
  std::vector<float> E = lcg(V * D, 21);
  std::vector<int64_t> ids = {0, 4, 2, 3, 1, 4};
  PlanBuilder p(tp, 1);
  std::vector<uint8_t> eb(E.size() * 4);
  std::memcpy(eb.data(), E.data(), eb.size());
  p.weights.push_back({"wte", "", 0, 0, fb::DType::f32, {V, D}, eb});
  const int et = p.tensor("wte", fb::DType::f32, {Vl, D}, fb::TensorKind::weight);
  PlanBuilder::B b{et, 0, {Vl, D}, {}};
  for (int r = 0; r < tp; ++r) {
    PlanBuilder::RS rs;
    const int64_t lo = r * Vl, hi = std::min(V, lo + Vl);
    if (hi > lo) rs.pieces.push_back({{lo, 0}, {0, 0}, {hi - lo, D}});
    rs.fb = 0;
    rs.fe = static_cast<uint64_t>(Vl * D);
    b.ranks.push_back(rs);
  }
  p.bindings.push_back(b);
  const int in = p.input("ids", fb::DType::i64, {B, S}, false);
  const int emb = p.act("emb", {B, S, D});
  p.op(zrt::Op::embedding, {et, in}, {emb}, {tp > 1 ? Vl : 0});
  if (tp > 1) p.op(zrt::Op::all_reduce, {emb}, {emb}, {}, {}, fb::Axis::tp);
  const int lg = p.act("logits_local", {B, S, Vl});
  p.op(zrt::Op::linear, {emb, et}, {lg}, {1}, {1.0});
  int full = lg;
  if (tp > 1) {
    full = p.act("logits_padded", {B, S, Vl * tp});
    p.op(zrt::Op::all_gather, {lg}, {full}, {2}, {}, fb::Axis::tp);
  }
  const int out = p.output("logits", {B, S, V}, false);
  p.op(zrt::Op::slice, {full}, {out}, {0, 0, 0, 1, 1, 1});
  auto s = open_ok(p, ".");
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->bind_input("ids", ids.data(), ids.size() * 8).ok());
  zrt::Status st = s->run();
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<float> got(B * S * V);
  ASSERT_TRUE(s->read_local_output("logits", got.data(), got.size() * 4, nullptr).ok());
  for (int64_t i = 0; i < B * S; ++i)
    for (int64_t v = 0; v < V; ++v) {
      double want = 0;
      for (int64_t d = 0; d < D; ++d) want += static_cast<double>(E[ids[i] * D + d]) * E[v * D + d];
      EXPECT_NEAR(got[i * V + v], want, 1e-5) << "tp " << tp << " row " << i << " vocab " << v;
    }
}

TEST(World1, VocabParallel) { NEED_WORLD(1); check_vocab_parallel(1); }
TEST(World2, VocabParallelPadded) { NEED_WORLD(2); check_vocab_parallel(2); }
TEST(World4, VocabParallelPadded) { NEED_WORLD(4); check_vocab_parallel(4); }

TEST(World4, MlpTp2Dp2Zero3) {
  NEED_WORLD(4);
  Mlp m;
  run_mlp(m, m.plan(2, 2, true), rank_dir(m), 1e-5);
  run_mlp(m, m.plan(2, 2, false), rank_dir(m), 1e-5);
  run_mlp(m, m.plan(4, 1, false), rank_dir(m), 1e-5);
}

TEST(World4, CollectivesTp2Dp2) { NEED_WORLD(4); check_collectives(2, 2); }
TEST(World4, CollectivesTp4) { NEED_WORLD(4); check_collectives(4, 1); }
TEST(World4, CollectivesDp4) { NEED_WORLD(4); check_collectives(1, 4); }
