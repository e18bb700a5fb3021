// The plan verifier rejects every kind of bad plan with a clear message, before anything is allocated.
#include <gtest/gtest.h>

#include <cstring>

#include "plan.h"
#include "test_plans.h"
#include "verify_helpers.h"
#include "zk/attention_kernels.h"
#include "zrt/plan_file.h"

using namespace zrt_test;

namespace {

PlanBuilder good() { return Mlp().plan(2, 1, false); }

}  // namespace

TEST(Verifier, AcceptsWellFormedPlans) {
  EXPECT_TRUE(verify(good().file(), 2).ok()) << verify(good().file(), 2).message();
  EXPECT_TRUE(verify(Mlp().plan(2, 2, true).file(), 4).ok()) << verify(Mlp().plan(2, 2, true).file(), 4).message();
  EXPECT_TRUE(verify(Collectives(2, 2).plan().file(), 4, zrt::BackendKind::cpu, 3).ok());
}

TEST(Verifier, HeaderChecks) {
  std::vector<uint8_t> f = good().file();
  expect_reject(verify(std::vector<uint8_t>(f.begin(), f.begin() + 10), 2), "shorter than the 24-byte plan header");
  std::vector<uint8_t> m = f;
  m[0] = 'X';
  expect_reject(verify(m, 2), "bad magic");
  expect_reject(verify(std::vector<uint8_t>(f.begin(), f.end() - 5), 2), "truncated");
  for (size_t at : {f.size() / 2, f.size() - 1, size_t{30}}) {
    std::vector<uint8_t> b = f;
    b[at] ^= 0x10;
    expect_reject(verify(b, 2), "CRC-32 mismatch");
  }
}

TEST(Verifier, CorruptFlatBufferWithValidCrc) {
  // A payload that is garbage but carries a correct CRC still fails the FlatBuffers verifier.
  std::vector<uint8_t> payload(256, 0xAB);
  std::memcpy(payload.data() + 4, "ZPLN", 4);
  zrt::PlanHeader h = zrt::make_plan_header(payload.data(), payload.size());
  std::vector<uint8_t> f(sizeof(h) + payload.size());
  std::memcpy(f.data(), &h, sizeof(h));
  std::memcpy(f.data() + sizeof(h), payload.data(), payload.size());
  expect_reject(verify(f, 2), "FlatBuffers verifier");
  std::memcpy(f.data() + sizeof(h) + 4, "ABCD", 4);
  h = zrt::make_plan_header(f.data() + sizeof(h), payload.size());
  std::memcpy(f.data(), &h, sizeof(h));
  expect_reject(verify(f, 2), "file identifier");
}

TEST(Verifier, VersionAndFingerprint) {
  PlanBuilder p = good();
  p.version_major = zrt::kPlanVersionMajor + 1;
  expect_reject(verify(p.file(), 2), "is not supported");
  p = good();
  p.version_minor = zrt::kPlanVersionMinor + 1;
  expect_reject(verify(p.file(), 2), "newer than this runtime");
  expect_reject(verify(good().file(), 4), "the plan is for 2 ranks (tp 2 x dp 1) but the job has 4");
  expect_reject(verify(good().file(), 2, zrt::BackendKind::cuda), "backend 'cpu'");
  p = good();
  p.world_override = 3;
  expect_reject(verify(p.file(), 3), "fingerprint mesh is inconsistent");
}

TEST(Verifier, IndicesRangesAndCounts) {
  PlanBuilder p = good();
  p.instrs[1].in[0] = 999;
  expect_reject(verify(p.file(), 2), "tensor index 999, out of range");
  p = good();
  p.instrs[0].out[0] = -3;
  expect_reject(verify(p.file(), 2), "out of range");
  p = good();
  p.arena_shrink = 16;
  expect_reject(verify(p.file(), 2), "overflows the device arena");
  p = good();
  p.instrs[0].ints.push_back(7);
  expect_reject(verify(p.file(), 2), "ints[1] (kernel) 7 is not 0 (cuBLASLt), 1 (the few-row kernels) or 2");
  p = good();
  p.instrs[0].ints.insert(p.instrs[0].ints.end(), {0, 66, 29, 35, 1, 0, 1, 0, 0});
  expect_reject(verify(p.file(), 2), "has 10 ints, expects 1 to 9");
  p = good();
  p.instrs[0].floats.clear();
  expect_reject(verify(p.file(), 2), "has 0 floats, expects 1");
  p = good();
  p.tensors[p.instrs[1].out[0]].shape = {4, 3, 9};
  expect_reject(verify(p.file(), 2), "reserves");
  p = good();
  p.hash_override = true;
  expect_reject(verify(p.file(), 2), "collective hash mismatch");
  p = good();
  p.instrs[0].op = static_cast<zrt::Op>(250);
  expect_reject(verify(p.file(), 2), "unknown opcode 250");
}

TEST(Verifier, ShapesAndBindings) {
  PlanBuilder p = good();
  // fc1's output does not have W's N.
  const int h = p.instrs[0].out[0];
  p.tensors[h].shape = {4, 3, 9};
  p.tensors[h].bytes = 4 * 3 * 9 * 4;
  p.arena[0] += 1024;
  expect_reject(verify(p.file(), 2), "output shape [4, 3, 9] should be [4, 3, 8]");
  p = good();
  p.bindings[0].ranks[1].pieces[0].src[1] = 12;  // box [12, 20) of a 16-wide source
  expect_reject(verify(p.file(), 2), "is outside the source");
  p = good();
  p.bindings[0].ranks.pop_back();
  expect_reject(verify(p.file(), 2), "needs one RankSlice per rank");
  p = good();
  p.weights[0].length -= 4;
  expect_reject(verify(p.file(), 2), "length");
  p = good();
  p.inputs[0].global = {5, 3, 8};
  expect_reject(verify(p.file(), 2), "does not match global shape");
  // Several bindings may fill one tensor (a merged weight's parts), but only adjacent ones: the runtime
  // assembles a run of them into one buffer.
  p = good();
  ASSERT_GE(p.bindings.size(), 3u);
  p.bindings.insert(p.bindings.begin() + 1, p.bindings[0]);
  EXPECT_TRUE(verify(p.file(), 2).ok());
  p = good();
  p.bindings.push_back(p.bindings[0]);
  expect_reject(verify(p.file(), 2), "the bindings of one tensor must be adjacent");
  PlanBuilder z = Mlp().plan(1, 2, true);
  z.bindings[0].ranks[1].fb = 0;
  z.bindings[0].ranks[1].fe = z.tensors[z.bindings[0].tensor].shape[0];
  expect_reject(verify(z.file(), 2), "a ZeRO shard of dp index 1 must keep");
}

// Plan 2.8: an attention's packed operands (offset, row stride, heads per q, k, v) must fit their tensor's
// rows, keep the row stride at the tensor's last dim, and be sequence-major.
TEST(Verifier, AttentionPackedOperands) {
  auto with = [](std::vector<int64_t> ints) {
    PlanBuilder p = good();
    const int x = p.act("qkv", {4, 3, 48}), y = p.act("att", {4, 3, 2, 8});
    p.op(zrt::Op::attention, {x, x, x}, {y}, std::move(ints), {1.0});
    return p;
  };
  EXPECT_TRUE(verify(with({1, 15, 0, 48, 2, 16, 48, 2, 32, 48, 2}).file(), 2).ok());
  expect_reject(verify(with({1, 15, 0, 48, 2, 16, 48, 2, 40, 48, 2}).file(), 2),
                "packed operand at offset 40 with 2 heads of 8 does not fit rows of 48");
  expect_reject(verify(with({1, 15, 0, 48, 2, 16, 48, 2, 32, 32, 2}).file(), 2),
                "packed row stride 32 is not the tensor's last dim 48");
  expect_reject(verify(with({1, 14, 0, 48, 2, 16, 48, 2, 32, 48, 2}).file(), 2),
                "a packed operand must be sequence-major");
  expect_reject(verify(with({1, 15, 0, 48, 2, 16, 48, 2, 32, 48}).file(), 2), "ints");
}

// Plans 2.9 / 2.14: the few-row kernel codes of zk/few_rows_kernels.h on linear (ints[1]), matmul (ints[2]),
// linear_multi (ints[1]) and linear_gated (ints[2]): a code that names no kernel is refused, and so is the
// streaming kernel (2) for a product it does not hold (more than 4 rows, a width not a multiple of 8, W [N, K]).
TEST(Verifier, FewRowsKernelCodes) {
  auto lin = [](std::vector<int64_t> ints, int64_t rows, int64_t n, bool tw = false) {
    PlanBuilder p = good();
    const int x = p.act("x1", {rows, 64}), w = p.act("w1", tw ? Shape{n, 64} : Shape{64, n}), y = p.act("y1", {rows, n});
    p.op(zrt::Op::linear, {x, w}, {y}, std::move(ints), {1.0});
    return p;
  };
  EXPECT_TRUE(verify(lin({0, 0}, 4, 16).file(), 2).ok());
  EXPECT_TRUE(verify(lin({0, 1}, 16, 12).file(), 2).ok());
  EXPECT_TRUE(verify(lin({0, 2}, 4, 16).file(), 2).ok()) << verify(lin({0, 2}, 4, 16).file(), 2).message();
  expect_reject(verify(lin({0, 3}, 1, 16).file(), 2), "ints[1] (kernel) 3 is not 0 (cuBLASLt)");
  expect_reject(verify(lin({0, 1}, 17, 16).file(), 2), "not of 1 to 16 rows");
  expect_reject(verify(lin({0, 2}, 5, 16).file(), 2), "the streaming kernel does not hold this product");
  expect_reject(verify(lin({0, 2}, 1, 12).file(), 2), "the streaming kernel does not hold this product");
  expect_reject(verify(lin({1, 2}, 1, 16, true).file(), 2), "the streaming kernel does not hold this product");
  auto mm = [](std::vector<int64_t> ints, int64_t rows, int64_t n) {
    PlanBuilder p = good();
    const int a = p.act("a1", {rows, 64}), b = p.act("b1", {64, n}), y = p.act("y1", {rows, n});
    p.op(zrt::Op::matmul, {a, b}, {y}, std::move(ints), {});
    return p;
  };
  EXPECT_TRUE(verify(mm({0, 0, 2}, 2, 16).file(), 2).ok());
  expect_reject(verify(mm({0, 0, 5}, 2, 16).file(), 2), "ints[2] (kernel) 5 is not 0 (cuBLASLt)");
  expect_reject(verify(mm({0, 0, 2}, 8, 16).file(), 2), "the streaming kernel does not hold this product");
  auto multi = [](std::vector<int64_t> ints, int64_t rows, int64_t n) {
    PlanBuilder p = good();
    const int x = p.act("x1", {rows, 64}), w1 = p.act("w1", {64, n}), w2 = p.act("w2", {64, 16});
    const int y1 = p.act("y1", {rows, n}), y2 = p.act("y2", {rows, 16});
    p.op(zrt::Op::linear_multi, {x, w1, w2}, {y1, y2}, std::move(ints), {1.0});
    return p;
  };
  EXPECT_TRUE(verify(multi({0}, 8, 12).file(), 2).ok());
  EXPECT_TRUE(verify(multi({0, 1}, 8, 12).file(), 2).ok());
  EXPECT_TRUE(verify(multi({0, 2}, 3, 24).file(), 2).ok());
  expect_reject(verify(multi({0, 0}, 1, 16).file(), 2), "ints[1] (kernel) 0 is not 1 (the few-row kernels) or 2");
  expect_reject(verify(multi({0, 2}, 1, 12).file(), 2), "the streaming kernel does not hold this product");
  auto gated = [](std::vector<int64_t> ints, int64_t rows) {
    PlanBuilder p = good();
    const int x = p.act("x1", {rows, 64}), wg = p.act("wg", {64, 32}), wu = p.act("wu", {64, 32});
    const int y = p.act("y1", {rows, 32});
    p.op(zrt::Op::linear_gated, {x, wg, wu}, {y}, std::move(ints), {1.0});
    return p;
  };
  EXPECT_TRUE(verify(gated({0, 15}, 16).file(), 2).ok());
  EXPECT_TRUE(verify(gated({0, 15, 2}, 1).file(), 2).ok());
  expect_reject(verify(gated({0, 15, 9}, 1).file(), 2), "ints[2] (kernel) 9 is not 1");
  expect_reject(verify(gated({0, 15, 2}, 16).file(), 2), "the streaming kernel does not hold this product");
}

// Plan 2.11: an attention's twelfth int and an attention_grad's second are kernel codes of
// zk/attention_kernels.h; a code the table does not have is refused before anything runs.
TEST(Verifier, AttentionKernelCodes) {
  auto fwd = [](int64_t code) {
    PlanBuilder p = good();
    const int q = p.act("q", {4, 2, 3, 8}), y = p.act("att", {4, 2, 3, 8});
    p.op(zrt::Op::attention, {q, q, q}, {y}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, code}, {1.0});
    return p;
  };
  for (const zk::cuda::AttentionKernel &k : zk::cuda::kAttentionKernels)
    EXPECT_TRUE(verify(fwd(k.code).file(), 2).ok()) << k.name;
  expect_reject(verify(fwd(0).file(), 2), "attention kernel code 0 is not one of zk/attention_kernels.h");
  expect_reject(verify(fwd(99).file(), 2), "attention kernel code 99 is not one of zk/attention_kernels.h");
  auto bwd = [](int64_t code) {
    PlanBuilder p = good();
    const int q = p.act("q", {4, 2, 3, 8}), l = p.act("lse", {4, 2, 3});
    const int dq = p.act("dq", {4, 2, 3, 8}), dk = p.act("dk", {4, 2, 3, 8}), dv = p.act("dv", {4, 2, 3, 8});
    p.op(zrt::Op::attention_grad, {q, q, q, q, q, l}, {dq, dk, dv}, {1, code}, {1.0});
    return p;
  };
  for (const zk::cuda::AttentionKernel &k : zk::cuda::kAttentionGradKernels)
    EXPECT_TRUE(verify(bwd(k.code).file(), 2).ok()) << k.name;
  expect_reject(verify(bwd(7).file(), 2), "attention_grad kernel code 7 is not one of zk/attention_kernels.h");
}

// The table's device rule, which the CUDA backend applies at load to every attention kernel of a plan: the
// wgmma kernels (sm_90a code) run on compute capability 9.0 alone, every other kernel anywhere; and the
// compiler's defaults per arch and head dim.
TEST(AttentionKernels, DeviceRuleAndDefaults) {
  const zk::cuda::AttentionKernel *wg2 = zk::cuda::attention_kernel("wg2");
  ASSERT_NE(wg2, nullptr);
  EXPECT_TRUE(zk::cuda::attention_kernel_runs_on(*wg2, 9, 0));
  EXPECT_FALSE(zk::cuda::attention_kernel_runs_on(*wg2, 8, 0));
  EXPECT_FALSE(zk::cuda::attention_kernel_runs_on(*wg2, 10, 0));
  for (const zk::cuda::AttentionKernel &k : zk::cuda::kAttentionKernels) {
    EXPECT_EQ(zk::cuda::attention_kernel(k.code), &k);
    EXPECT_EQ(zk::cuda::attention_kernel(k.name), &k);
    EXPECT_EQ(zk::cuda::attention_kernel_runs_on(k, 8, 6), k.family != zk::cuda::AttnFamily::wg) << k.name;
  }
  EXPECT_STREQ(zk::cuda::default_attention_kernel(90, 64, true)->name, "wg3");
  EXPECT_STREQ(zk::cuda::default_attention_kernel(90, 128, true)->name, "wg3");
  EXPECT_STREQ(zk::cuda::default_attention_kernel(80, 64, true)->name, "fa4x1r");
  EXPECT_STREQ(zk::cuda::default_attention_kernel(80, 128, true)->name, "fa4x1");
  EXPECT_STREQ(zk::cuda::default_attention_kernel(90, 32, false)->name, "rows");
  EXPECT_STREQ(zk::cuda::default_attention_grad_kernel(64, true)->name, "mma");
  EXPECT_STREQ(zk::cuda::default_attention_grad_kernel(128, true)->name, "wmma");
  EXPECT_STREQ(zk::cuda::default_attention_grad_kernel(64, false)->name, "exact");
}

// Plan 2.10: a rotary's second int, seq_major, must be 1 and needs a rank-4 x whose head-major view the
// tables broadcast to.
TEST(Verifier, RotarySequenceMajor) {
  auto with = [](std::vector<int64_t> x, std::vector<int64_t> t, std::vector<int64_t> ints) {
    PlanBuilder p = good();
    const int xi = p.act("x", x), c = p.act("cos", t), y = p.act("y", x);
    p.op(zrt::Op::rotary, {xi, c, c}, {y}, std::move(ints), {});
    return p;
  };
  EXPECT_TRUE(verify(with({2, 4, 3, 8}, {1, 1, 4, 8}, {0, 1}).file(), 2).ok());
  expect_reject(verify(with({2, 4, 3, 8}, {1, 1, 4, 8}, {0}).file(), 2), "must broadcast to x [2, 4, 3, 8]");
  expect_reject(verify(with({2, 4, 3, 8}, {1, 1, 4, 8}, {0, 2}).file(), 2), "ints[1] (seq_major) must be 1");
  expect_reject(verify(with({4, 3, 8}, {4, 1, 8}, {0, 1}).file(), 2), "seq_major needs a rank-4");
}

// Plan 2.13: linear_residual is linear's shape rule plus a residual of the output's shape and dtype.
TEST(Verifier, LinearResidual) {
  auto with = [](std::vector<int64_t> r, bool bias) {
    PlanBuilder p = good();
    const int x = p.act("x", {4, 6}), w = p.act("w", {5, 6}), ri = p.act("r", r), b = p.act("b", {5}),
              y = p.act("y", {4, 5});
    p.op(zrt::Op::linear_residual, bias ? std::vector<int32_t>{x, w, ri, b} : std::vector<int32_t>{x, w, ri}, {y},
         {1}, {1.0});
    return p;
  };
  EXPECT_TRUE(verify(with({4, 5}, false).file(), 2).ok());
  EXPECT_TRUE(verify(with({4, 5}, true).file(), 2).ok());
  expect_reject(verify(with({20}, false).file(), 2), "the residual must have the output's shape and dtype");
}

// Plan 2.15: a product's cuBLASLt algorithm, seven non-negative ints after [trans_w, kernel 0].
TEST(Verifier, GemmAlgorithmInts) {
  auto with = [](zrt::Op op, std::vector<int64_t> ints) {
    PlanBuilder p = good();
    const int x = p.act("x", {4, 6}), w = p.act("w", {5, 6}), r = p.act("r", {4, 5}), y = p.act("y", {4, 5});
    p.op(op, op == zrt::Op::linear ? std::vector<int32_t>{x, w} : std::vector<int32_t>{x, w, r}, {y}, std::move(ints),
         {1.0});
    return p;
  };
  for (zrt::Op op : {zrt::Op::linear, zrt::Op::linear_residual}) {
    EXPECT_TRUE(verify(with(op, {1, 0, 66, 29, 35, 1, 0, 1, 0}).file(), 2).ok());
    expect_reject(verify(with(op, {1, 0, 66, 29, 35}).file(), 2), "followed by the seven ints of a cuBLASLt algorithm");
    expect_reject(verify(with(op, {1, 0, 66, -29, 35, 1, 0, 1, 0}).file(), 2), "must not be negative");
  }
  expect_reject(verify(with(zrt::Op::linear, {1, 1, 66, 29, 35, 1, 0, 1, 0}).file(), 2), "(kernel 0)");
  expect_reject(verify(with(zrt::Op::linear_residual, {1, 0}).file(), 2), "ints must be [trans_w] or");
}

TEST(PlanFile, WriterRoundTripAndNoPartialFile) {
  std::string dir = ::testing::TempDir();
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  PlanBuilder p = good();
  ASSERT_EQ(p.write(dir + "/ok.zplan"), "");
  std::unique_ptr<zrt::PlanFile> pf;
  zrt::Launch l;
  l.world = 2;
  zrt::Status s = zrt::PlanFile::load(dir + "/ok.zplan", l, &pf);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(pf->plan().programs()->Get(0)->instrs()->size(), p.instrs.size());
  EXPECT_EQ(pf->base_dir(), dir);
  // Writing into a folder that does not exist fails with the path and leaves nothing behind.
  std::vector<uint8_t> pay = p.payload();
  const std::string e = zrt::write_plan_file(dir + "/no/such/dir/x.zplan", pay.data(), pay.size());
  EXPECT_NE(e.find("no/such/dir"), std::string::npos);
  s = zrt::PlanFile::load(dir + "/missing.zplan", l, &pf);
  expect_reject(s, "cannot open plan file");
  EXPECT_EQ(zrt::crc32("123456789", 9), 0xCBF43926u);  // the standard CRC-32 check value
}

TEST(Verifier, SurvivesCorruptPayloadsWithValidCrc) {
  // Random corruption behind a correct CRC must be rejected or accepted cleanly, never crash (this test
  // is most useful under the sanitizers).
  const std::vector<uint8_t> f = Mlp().plan(2, 2, true).file();
  uint64_t s = 12345;
  int rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> b = f;
    const int flips = 1 + iter % 4;
    for (int k = 0; k < flips; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const size_t at = sizeof(zrt::PlanHeader) + (s >> 33) % (b.size() - sizeof(zrt::PlanHeader));
      b[at] ^= static_cast<uint8_t>(1u << ((s >> 20) % 8));
    }
    zrt::PlanHeader h = zrt::make_plan_header(b.data() + sizeof(h), b.size() - sizeof(h));
    std::memcpy(b.data(), &h, sizeof(h));
    for (int r = 0; r < 4; ++r) rejected += !verify(b, 4, zrt::BackendKind::cpu, r).ok();
  }
  EXPECT_GT(rejected, 0);
}
