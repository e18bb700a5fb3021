// The executor decodes every opcode's operands and attributes (ints / floats layouts of plan.fbs) as the
// reference kernels expect: one-instruction plans run through a Session, compared with a direct call of
// the kernel (itself checked against float64 in test_kernels.cpp). Runs under mpirun -np 1
// (main: mpi_gtest_main.cpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <cmath>
#include <cstring>
#include <functional>

#include "plan_builder.h"
#include "test_plans.h"
#include "zk/cpu_kernels.h"
#include "zrt/zrt.h"

using namespace zrt_test;

namespace {

struct Arg {
  fb::DType dt;
  Shape shape;
};

std::vector<uint8_t> make_data(const Arg &a, uint64_t seed) {
  const int64_t n = numel(a.shape);
  std::vector<uint8_t> b(static_cast<size_t>(n) * esize(a.dt));
  std::vector<float> v = lcg(static_cast<size_t>(n), seed);
  for (int64_t i = 0; i < n; ++i) {
    if (a.dt == fb::DType::f32) std::memcpy(b.data() + i * 4, &v[i], 4);
    else if (a.dt == fb::DType::i64) { int64_t x = (i * 7 + static_cast<int64_t>(seed)) % 3; std::memcpy(b.data() + i * 8, &x, 8); }
    else if (a.dt == fb::DType::bool8) b[i] = v[i] > 0;
  }
  return b;
}

zk::Dims dims(const Shape &s) {
  zk::Dims d;
  zk::Dims::from(s.data(), static_cast<int>(s.size()), &d);
  return d;
}

using Oracle = std::function<zk::Result(const std::vector<zk::In> &, const zk::Out &)>;

/// Runs `op` on inputs `ins` (random data; -1 marks an absent optional operand) and compares with `oracle`.
void check(zrt::Op op, const std::vector<Arg> &ins, const Arg &out, std::vector<int64_t> ints, std::vector<double> floats,
           const Oracle &oracle, bool optional_last_absent = false) {
  PlanBuilder p(1, 1);
  std::vector<int32_t> idx;
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < ins.size(); ++i) {
    idx.push_back(p.input("in" + std::to_string(i), ins[i].dt, ins[i].shape, false));
    data.push_back(make_data(ins[i], 100 + i));
  }
  if (optional_last_absent) idx.push_back(-1);
  PlanBuilder::IO o{"out", 0, out.shape, false};
  o.tensor = p.tensor("out", out.dt, out.shape, fb::TensorKind::output);
  p.outputs.push_back(o);
  p.op(op, idx, {o.tensor}, ints, floats);
  std::vector<uint8_t> f = p.file();
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), ".", {}, &s);
  ASSERT_TRUE(st.ok()) << zrt::op_name(op) << ": " << st.message();
  for (size_t i = 0; i < ins.size(); ++i) ASSERT_TRUE(s->bind_input("in" + std::to_string(i), data[i].data(), data[i].size()).ok());
  st = s->run();
  ASSERT_TRUE(st.ok()) << zrt::op_name(op) << ": " << st.message();
  std::vector<uint8_t> got(static_cast<size_t>(numel(out.shape)) * esize(out.dt)), want(got.size() + 64, 0);
  ASSERT_TRUE(s->read_output("out", got.data(), got.size()).ok());
  std::vector<zk::In> kin;
  for (size_t i = 0; i < ins.size(); ++i) kin.push_back(zk::In{data[i].data(), static_cast<zk::DType>(ins[i].dt), dims(ins[i].shape)});
  zk::Out kout{want.data(), static_cast<zk::DType>(out.dt), dims(out.shape)};
  ASSERT_TRUE(oracle(kin, kout).ok()) << zrt::op_name(op);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << zrt::op_name(op) << " differs from the kernel";
}

const fb::DType F = fb::DType::f32, I64 = fb::DType::i64, B8 = fb::DType::bool8;

}  // namespace

TEST(World1, OpcodeDecoding) {
  using namespace zk::cpu;
  check(zrt::Op::gelu_erf, {{F, {3, 4}}}, {F, {3, 4}}, {}, {}, [](auto &i, auto &o) { return unary(Unary::gelu_erf, i[0], o); });
  check(zrt::Op::silu, {{F, {5}}}, {F, {5}}, {}, {}, [](auto &i, auto &o) { return unary(Unary::silu, i[0], o); });
  check(zrt::Op::cast, {{F, {6}}}, {I64, {6}}, {}, {}, [](auto &i, auto &o) { return cast(i[0], o); });
  check(zrt::Op::pow, {{F, {2, 3}}, {F, {3}}}, {F, {2, 3}}, {}, {}, [](auto &i, auto &o) { return binary(Binary::pow, i[0], i[1], o); });
  check(zrt::Op::less, {{F, {2, 3}}, {F, {2, 1}}}, {B8, {2, 3}}, {}, {}, [](auto &i, auto &o) { return binary(Binary::less, i[0], i[1], o); });
  check(zrt::Op::where, {{B8, {2, 1}}, {F, {2, 3}}, {F, {3}}}, {F, {2, 3}}, {}, {}, [](auto &i, auto &o) { return where(i[0], i[1], i[2], o); });
  check(zrt::Op::matmul, {{F, {2, 5, 4}}, {F, {3, 5}}}, {F, {2, 4, 3}}, {1, 1}, {},
        [](auto &i, auto &o) { std::vector<float> s(100); return matmul(i[0], i[1], o, true, true, s.data()); });
  check(zrt::Op::linear, {{F, {2, 3, 4}}, {F, {5, 4}}, {F, {5}}}, {F, {2, 3, 5}}, {1}, {0.5},
        [](auto &i, auto &o) { return linear(i[0], i[1], i[2], o, true, 0.5f, nullptr); });
  check(zrt::Op::linear, {{F, {3, 4}}, {F, {4, 5}}}, {F, {3, 5}}, {0}, {2.0},
        [](auto &i, auto &o) { return linear(i[0], i[1], zk::In{}, o, false, 2.0f, nullptr); }, true);
  check(zrt::Op::softmax, {{F, {2, 3, 4}}}, {F, {2, 3, 4}}, {1}, {}, [](auto &i, auto &o) { return softmax(i[0], o, 1); });
  check(zrt::Op::layer_norm, {{F, {2, 3, 4}}, {F, {3, 4}}, {F, {3, 4}}}, {F, {2, 3, 4}}, {1}, {1e-3},
        [](auto &i, auto &o) { return layer_norm(i[0], i[1], i[2], o, 1, 1e-3f); });
  check(zrt::Op::rms_norm, {{F, {2, 6}}, {F, {6}}}, {F, {2, 6}}, {}, {1e-4},
        [](auto &i, auto &o) { return rms_norm(i[0], i[1], o, 1e-4f); });
  check(zrt::Op::rotary, {{F, {2, 3, 4, 8}}, {F, {1, 1, 4, 8}}, {F, {1, 1, 4, 8}}}, {F, {2, 3, 4, 8}}, {1}, {},
        [](auto &i, auto &o) { return rotary(i[0], i[1], i[2], o, true); });
  // Plan 2.10: the second int, seq_major, reaches the kernel (x [B, S, H, D], tables of the head-major view).
  check(zrt::Op::rotary, {{F, {2, 4, 3, 8}}, {F, {1, 1, 4, 8}}, {F, {1, 1, 4, 8}}}, {F, {2, 4, 3, 8}}, {0, 1}, {},
        [](auto &i, auto &o) { return rotary(i[0], i[1], i[2], o, false, true); });
  const int64_t axes[] = {0, 2};
  check(zrt::Op::reduce_mean, {{F, {2, 3, 4}}}, {F, {3}}, {0, 0, 2}, {},
        [&](auto &i, auto &o) { return reduce(Reduce::mean, i[0], o, axes, 2, false); });
  check(zrt::Op::reduce_max, {{F, {2, 3, 4}}}, {F, {1, 3, 1}}, {1, 0, 2}, {},
        [&](auto &i, auto &o) { return reduce(Reduce::max, i[0], o, axes, 2, true); });
  const int64_t perm[] = {2, 0, 1};
  check(zrt::Op::transpose, {{F, {2, 3, 4}}}, {F, {4, 2, 3}}, {2, 0, 1}, {}, [&](auto &i, auto &o) { return transpose(i[0], o, perm); });
  const int64_t starts[] = {1, 0, 3}, steps[] = {1, 2, -1};
  check(zrt::Op::slice, {{F, {2, 3, 4}}}, {F, {1, 2, 3}}, {1, 0, 3, 1, 2, -1}, {},
        [&](auto &i, auto &o) { return slice(i[0], o, starts, steps); });
  check(zrt::Op::concat, {{F, {1, 3}}, {F, {2, 3}}, {F, {1, 3}}}, {F, {4, 3}}, {0}, {},
        [](auto &i, auto &o) { return concat(i.data(), 3, o, 0); });
  check(zrt::Op::gather, {{F, {4, 3}}, {I64, {2, 2}}}, {F, {4, 2, 2}}, {1}, {}, [](auto &i, auto &o) { return gather(i[0], i[1], o, 1); });
  check(zrt::Op::embedding, {{F, {3, 4}}, {I64, {2, 5}}}, {F, {2, 5, 4}}, {3}, {},
        [](auto &i, auto &o) { return embedding(i[0], i[1], o, 0); });
  check(zrt::Op::expand, {{F, {3, 1}}}, {F, {2, 3, 4}}, {}, {}, [](auto &i, auto &o) { return expand(i[0], o); });
  check(zrt::Op::fill, {}, {F, {2, 2}}, {}, {0.25}, [](auto &, auto &o) { return fill(0.25, o); });
  check(zrt::Op::reshape, {{F, {2, 6}}}, {F, {3, 4}}, {}, {}, [](auto &i, auto &o) {
    std::memcpy(o.data, i[0].data, 48);
    return zk::Result{};
  });
  check(zrt::Op::attention, {{F, {1, 4, 3, 2}}, {F, {1, 2, 5, 2}}, {F, {1, 2, 5, 2}}, {F, {1, 1, 3, 5}}}, {F, {1, 4, 3, 2}},
        {1}, {0.7}, [](auto &i, auto &o) {
          std::vector<float> s(8);
          return attention(i[0], i[1], i[2], i[3], o, true, 0.7f, s.data());
        });
}

TEST(World1, CorruptPlansThatPassVerificationRunSafely) {
  // Flip bits behind a valid CRC; whatever the verifier accepts must then load and run without touching
  // memory outside the arenas (meaningful under the sanitizers).
  Mlp m;
  const std::vector<uint8_t> f = m.plan(1, 1, false, fb::DType::f32, "").file();
  uint64_t s = 777;
  int accepted = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::vector<uint8_t> b = f;
    for (int k = 0; k < 1 + iter % 3; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const size_t at = sizeof(zrt::PlanHeader) + (s >> 33) % (b.size() - sizeof(zrt::PlanHeader));
      b[at] ^= static_cast<uint8_t>(1u << ((s >> 20) % 8));
    }
    zrt::PlanHeader h = zrt::make_plan_header(b.data() + sizeof(h), b.size() - sizeof(h));
    std::memcpy(b.data(), &h, sizeof(h));
    std::unique_ptr<zrt::Session> ses;
    if (!zrt::Session::open_buffer(b.data(), b.size(), ".", {}, &ses).ok()) continue;
    ++accepted;
    for (const zrt::IOInfo &io : ses->inputs()) {
      std::vector<uint8_t> in(io.global_bytes());
      (void)ses->bind_input(io.name, in.data(), in.size());
    }
    (void)ses->run();
  }
  std::printf("%d of 1500 corrupted plans passed verification and ran\n", accepted);
  EXPECT_GT(accepted, 0);
}

// Format 2 through a Session: named programs share persistent state across runs, scalar inputs take their
// defaults or the caller's values, state is read and written by name. The oracle is AdamW's formula
// (docs/training-contract.md, section 3) in double precision.
TEST(Programs, InitThenTrainStepsUpdateSharedState) {
  PlanBuilder p(1, 1);
  std::vector<float> w0 = {0.5f, -1.0f, 2.0f, 0.25f};
  std::vector<uint8_t> wbytes(16);
  std::memcpy(wbytes.data(), w0.data(), 16);
  const int w = p.param("w", {4}, -1, false, "", 0, fb::DType::f32, wbytes);
  const int master = p.state_tensor("w.master", fb::StateKind::master, "w", fb::DType::f32, {4});
  const int m = p.state_tensor("w.m", fb::StateKind::moment1, "w", fb::DType::f32, {4});
  const int v = p.state_tensor("w.v", fb::StateKind::moment2, "w", fb::DType::f32, {4});
  const int scale = p.state_tensor("scale", fb::StateKind::scalar, "", fb::DType::f32, {});
  p.program_name = "init";
  p.op(zrt::Op::copy, {w}, {master});
  p.op(zrt::Op::fill, {}, {scale}, {}, {1.0});
  p.new_program("train_step");
  const int g = p.input("g", fb::DType::f32, {4}, false);
  const int lr = p.scalar("lr", fb::DType::f32, 0.1);
  const int step = p.scalar("step", fb::DType::i64, 1);
  const int norm = p.output("norm", {}, false);
  p.tensors[norm].dtype = fb::DType::f32;
  p.op(zrt::Op::sum_squares, {g}, {norm});
  p.op(zrt::Op::adamw, {master, g, m, v, lr, step, scale}, {master, m, v}, {}, {0.9, 0.999, 1e-8, 0.01});
  p.op(zrt::Op::copy, {master}, {w});
  const std::vector<uint8_t> f = p.file();
  std::unique_ptr<zrt::Session> ses;
  zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), ".", {}, &ses);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(ses->programs().size(), 2u);
  EXPECT_EQ(ses->programs()[1].scalars.size(), 2u);
  EXPECT_EQ(ses->state().size(), 5u);  // w (param) and the four states
  st = ses->run("nope");
  EXPECT_NE(st.message().find("no program named 'nope' (it has 'init', 'train_step')"), std::string::npos) << st.message();
  EXPECT_FALSE(ses->set_scalar("beta", 1.0).ok());
  ASSERT_TRUE(ses->run("init").ok());

  std::vector<double> wd(w0.begin(), w0.end()), md(4, 0.0), vd(4, 0.0);
  const std::vector<float> grads[3] = {{0.1f, -0.2f, 0.3f, 0.0f}, {1.0f, 1.0f, -1.0f, 0.5f}, {0.0f, 0.3f, 0.2f, -0.1f}};
  for (int t = 1; t <= 3; ++t) {
    // lr: the default 0.1 for step 1, then set by the caller.
    const double lrv = t == 1 ? 0.1 : 0.05 * t;
    if (t > 1) ASSERT_TRUE(ses->set_scalar("lr", lrv).ok());
    ASSERT_TRUE(ses->set_scalar("step", t).ok());
    ASSERT_TRUE(ses->bind_input("g", grads[t - 1].data(), 16).ok());
    st = ses->run("train_step");
    ASSERT_TRUE(st.ok()) << st.message();
    double want_norm = 0.0;
    for (int i = 0; i < 4; ++i) {
      const double gi = grads[t - 1][i];
      want_norm += gi * gi;
      wd[i] -= static_cast<double>(static_cast<float>(lrv)) * 0.01 * wd[i];
      md[i] = 0.9 * md[i] + 0.1 * gi;
      vd[i] = 0.999 * vd[i] + 0.001 * gi * gi;
      const double mh = md[i] / (1 - std::pow(0.9, t)), vh = vd[i] / (1 - std::pow(0.999, t));
      wd[i] -= static_cast<double>(static_cast<float>(lrv)) * mh / (std::sqrt(vh) + 1e-8);
    }
    float got_norm = 0;
    ASSERT_TRUE(ses->read_output("norm", &got_norm, 4).ok());
    EXPECT_NEAR(got_norm, want_norm, 1e-6 * want_norm + 1e-7);
    std::vector<float> got(4), gm(4);
    ASSERT_TRUE(ses->read_state("w", got.data(), 16).ok());
    ASSERT_TRUE(ses->read_state("w.m", gm.data(), 16).ok());
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(got[i], wd[i], 1e-5) << "step " << t << " element " << i;
      EXPECT_NEAR(gm[i], md[i], 1e-6) << "step " << t << " element " << i;
    }
  }
  // State can be written back (a checkpoint restore) and is what the next run sees.
  std::vector<float> zeros(4, 0.0f);
  ASSERT_TRUE(ses->write_state("w.master", zeros.data(), 16).ok());
  // A buffer of the wrong size, and a name the plan lacks, are refused with messages naming them.
  const zrt::Status short_write = ses->write_state("w.master", zeros.data(), 12);
  EXPECT_NE(short_write.message().find("state 'w.master' holds 16 bytes on this rank, got a buffer of 12"),
            std::string::npos)
      << short_write.message();
  const zrt::Status unknown = ses->read_state("w.nope", zeros.data(), 16);
  EXPECT_NE(unknown.message().find("the plan has no state named 'w.nope'"), std::string::npos)
      << unknown.message();
  std::vector<float> back(4, 1.0f);
  ASSERT_TRUE(ses->read_state("w.master", back.data(), 16).ok());
  EXPECT_EQ(back, zeros);
}
