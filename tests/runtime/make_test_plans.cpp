// Writes the plans, weights, inputs and float64-derived expected outputs that the zrun tests run,
// including deliberately broken ones (truncated, bit-flipped, wrong world size, missing or short weights).
//   zrt_make_test_plans OUTDIR
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "test_plans.h"
#include "zrt/npy.h"

using namespace zrt_test;

namespace {

bool put(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(f);
}

int fail(const std::string &m) {
  std::fprintf(stderr, "zrt_make_test_plans: %s\n", m.c_str());
  return 1;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) return fail("usage: zrt_make_test_plans OUTDIR");
  const std::string out = argv[1];
  mkdir(out.c_str(), 0755);
  Mlp m;
  if (!m.write_weights(out + "/weights.bin")) return fail("cannot write weights.bin");
  std::vector<double> want = m.expected();
  std::vector<float> wantf(want.begin(), want.end());
  zrt::Status s = zrt::write_npy(out + "/x.npy", zrt::DType::f32, {m.B, m.S, m.D}, m.x.data());
  if (s.ok()) s = zrt::write_npy(out + "/expected.npy", zrt::DType::f32, {m.B, m.S, m.D}, wantf.data());
  if (s.ok()) s = zrt::write_npy(out + "/x_wrong.npy", zrt::DType::f32, {2, 8}, m.x.data());
  if (!s.ok()) return fail(s.message());
  struct P { const char *name; int tp, dp; bool zero; };
  for (const P &p : {P{"mlp_tp1", 1, 1, false}, P{"mlp_tp2", 2, 1, false}, P{"mlp_dp2_zero3", 1, 2, true},
                     P{"mlp_tp2_dp2_zero3", 2, 2, true}, P{"mlp_tp4", 4, 1, false}}) {
    const std::string e = m.plan(p.tp, p.dp, p.zero).write(out + "/" + p.name + ".zplan");
    if (!e.empty()) return fail(e);
  }
  // Broken copies of mlp_tp2.
  std::vector<uint8_t> f = m.plan(2, 1, false).file();
  put(out + "/truncated.zplan", std::vector<uint8_t>(f.begin(), f.begin() + f.size() / 2));
  std::vector<uint8_t> flipped = f;
  flipped[flipped.size() / 3] ^= 0x04;
  put(out + "/bitflip.zplan", flipped);
  std::string e = m.plan(2, 1, false, fb::DType::f32, "no_such_weights.bin").write(out + "/missing_weights.zplan");
  if (!e.empty()) return fail(e);
  mkdir((out + "/short").c_str(), 0755);
  if (!m.write_weights(out + "/short/weights.bin", 300)) return fail("cannot write short/weights.bin");
  e = m.plan(2, 1, false).write(out + "/short/mlp_tp2.zplan");
  if (!e.empty()) return fail(e);
  // A long-running plan for the kill test: 64 rounds of a 256 x 256 matmul and an all_reduce over tp.
  {
    PlanBuilder p(2, 1);
    const int64_t n = 256;
    int x = p.input("x", fb::DType::f32, {n, n}, false);
    int a = p.act("a", {n, n}), b = p.act("b", {n, n});
    p.op(zrt::Op::copy, {x}, {a});
    for (int i = 0; i < 64; ++i) {
      p.op(zrt::Op::matmul, {a, a}, {b}, {0, 0});
      p.op(zrt::Op::all_reduce, {b}, {b}, {}, {}, fb::Axis::tp);
      p.op(zrt::Op::tanh, {b}, {a});
    }
    int y = p.output("y", {n, n}, false);
    p.op(zrt::Op::copy, {a}, {y});
    e = p.write(out + "/slow_tp2.zplan");
    if (!e.empty()) return fail(e);
  }
  return 0;
}
