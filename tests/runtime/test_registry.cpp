// The op registry (zrt/ops.def) and the plan verifier agree: for every registered op, an instruction with one
// operand, result, int or float too few or too many is refused with a message naming the count the registry
// gives; results written in place must name their operand; the shared step decoder routes by the registry.
#include <gtest/gtest.h>

#include <string>

#include "plan.h"
#include "plan_builder.h"
#include "step_decoder.h"
#include "verify_helpers.h"
#include "zrt/ops.h"

using namespace zrt_test;

namespace {

/// A plan of one instruction of `op` with the given counts; every operand and result is its own f32 [2]
/// activation (the count checks come before any shape rule, so shapes do not matter here).
PlanBuilder one(const zrt::OpInfo &op, int nin, int nout, int nints, int nfloats) {
  PlanBuilder p(1, 1);
  std::vector<int32_t> in, out;
  for (int i = 0; i < nin; ++i) in.push_back(p.act("in" + std::to_string(i), {2}));
  for (int i = 0; i < nout; ++i) out.push_back(p.act("out" + std::to_string(i), {2}));
  // In-place results name their operand, so that only the count under test is wrong.
  for (int k = 0; k < nout; ++k) {
    const int src = op.in_place_input(k);
    if (src >= 0 && src < nin) out[k] = in[src];
  }
  p.op(op.op, in, out, std::vector<int64_t>(nints, 0), std::vector<double>(nfloats, 0.0),
       op.category == zrt::OpCategory::collective ? fb::Axis::world : fb::Axis::none);
  return p;
}

void expect_reject(const zrt::Status &s, const std::string &needle, const char *op) {
  ASSERT_FALSE(s.ok()) << op << ": expected a rejection mentioning '" << needle << "'";
  EXPECT_NE(s.message().find(needle), std::string::npos) << op << ": message was: " << s.message();
}

std::string expects(int lo, int hi) { return "expects " + std::to_string(lo) + (hi != lo ? " to " + std::to_string(hi) : ""); }

}  // namespace

TEST(Registry, EveryOpHasAUniqueNameAndNumber) {
  size_t n = 0;
  const zrt::OpInfo *t = zrt::op_table(&n);
  ASSERT_GT(n, 80u);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(zrt::op_info(t[i].code()), &t[i]) << t[i].name;
    EXPECT_EQ(zrt::op_info_by_name(t[i].name, std::strlen(t[i].name)), &t[i]) << t[i].name;
  }
  EXPECT_EQ(zrt::op_info(250), nullptr);
  EXPECT_EQ(zrt::op_info_by_name("not_", 4), nullptr);  // names, not C++ identifiers
  EXPECT_EQ(zrt::op_info_by_name("not", 3)->op, zrt::Op::not_);
  // The training contract's numbers live here and nowhere else; a few spot checks of the layout.
  EXPECT_EQ(zrt::op_info(zrt::Op::adamw).in_place_input(1), 2);
  EXPECT_EQ(zrt::op_info(zrt::Op::adamw).in_place_input(2), 3);
  EXPECT_EQ(zrt::op_info(zrt::Op::accumulate).in_place_input(0), 0);
  EXPECT_EQ(zrt::op_info(zrt::Op::linear).optional_input(2), true);
  EXPECT_EQ(zrt::op_info(zrt::Op::linear).optional_input(1), false);
  EXPECT_TRUE(zrt::op_info(zrt::Op::gather_param).communicates());
  EXPECT_FALSE(zrt::op_info(zrt::Op::release).communicates());
}

TEST(Registry, VerifierRefusesEveryWrongArity) {
  size_t n = 0;
  const zrt::OpInfo *t = zrt::op_table(&n);
  for (size_t i = 0; i < n; ++i) {
    const zrt::OpInfo &op = t[i];
    const int ints = op.min_ints == ZRT_PER_OP ? 0 : op.min_ints;
    if (op.min_in > 0)
      expect_reject(verify(one(op, op.min_in - 1, op.min_out, ints, op.floats)),
                    "has " + std::to_string(op.min_in - 1) + " inputs, " + expects(op.min_in, op.max_in), op.name);
    if (op.max_in < 64)
      expect_reject(verify(one(op, op.max_in + 1, op.min_out, ints, op.floats)),
                    "has " + std::to_string(op.max_in + 1) + " inputs, " + expects(op.min_in, op.max_in), op.name);
    if (op.min_out > 0)
      expect_reject(verify(one(op, op.min_in, op.min_out - 1, ints, op.floats)),
                    "has " + std::to_string(op.min_out - 1) + " outputs, " + expects(op.min_out, op.max_out), op.name);
    expect_reject(verify(one(op, op.min_in, op.max_out + 1, ints, op.floats)),
                  "has " + std::to_string(op.max_out + 1) + " outputs, " + expects(op.min_out, op.max_out), op.name);
    if (op.min_ints != ZRT_PER_OP) {
      if (op.min_ints > 0)
        expect_reject(verify(one(op, op.min_in, op.min_out, op.min_ints - 1, op.floats)),
                      "has " + std::to_string(op.min_ints - 1) + " ints, " + expects(op.min_ints, op.max_ints), op.name);
      expect_reject(verify(one(op, op.min_in, op.min_out, op.max_ints + 1, op.floats)),
                    "has " + std::to_string(op.max_ints + 1) + " ints, " + expects(op.min_ints, op.max_ints), op.name);
    }
    expect_reject(verify(one(op, op.min_in, op.min_out, ints, op.floats + 1)),
                  "has " + std::to_string(op.floats + 1) + " floats, expects " + std::to_string(op.floats), op.name);
  }
}

TEST(Registry, OptionalOperandsOnlyWhereTheRegistrySays) {
  // linear's bias may be absent; its weight may not.
  PlanBuilder p(1, 1);
  const int x = p.act("x", {3, 4}), w = p.act("w", {4, 5}), y = p.act("y", {3, 5});
  p.op(zrt::Op::linear, {x, w, -1}, {y}, {0}, {1.0});
  EXPECT_TRUE(verify(p).ok()) << verify(p).message();
  p.instrs[0].in = {x, -1, -1};
  expect_reject(verify(p), "input 1 is tensor index -1", "linear");
}

TEST(Registry, InPlaceResultsMustNameTheirOperand) {
  PlanBuilder p(1, 1);
  const int target = p.act("target", {4}), value = p.act("value", {4}), other = p.act("other", {4});
  p.op(zrt::Op::accumulate, {target, value}, {target});
  EXPECT_TRUE(verify(p).ok()) << verify(p).message();
  p.instrs[0].out = {other};
  expect_reject(verify(p), "writes it in place over input 0", "accumulate");
}

TEST(Registry, ReductionsOfCollectives) {
  for (int64_t red : {0, 1, 2, 3}) {
    PlanBuilder p(2, 1);
    const int a = p.act("a", {4});
    p.op(zrt::Op::all_reduce, {a}, {a}, {red}, {}, fb::Axis::tp);
    if (red <= 2) EXPECT_TRUE(verify(p).ok()) << verify(p).message();
    else expect_reject(verify(p), "reduction 3 is not 0 (sum), 1 (max) or 2 (min)", "all_reduce");
  }
}

TEST(Registry, DecoderRoutesByTheRegistry) {
  PlanBuilder p(1, 1);
  const int x = p.act("x", {3, 4}), w = p.act("w", {4, 5}), y = p.act("y", {3, 5});
  p.op(zrt::Op::linear, {x, w, -1}, {y}, {1}, {0.5}, fb::Axis::none, "fc");
  std::vector<uint8_t> f = p.file();
  const fb::Plan *plan = fb::GetPlan(f.data() + zrt::kPlanHeaderBytes);
  std::vector<zrt::TensorRef> ts(3);
  for (int i = 0; i < 3; ++i) {
    ts[i].index = i;
    ts[i].data = &ts[i];  // any distinct non-null address
  }
  zrt::Step s;
  ASSERT_TRUE(zrt::decode_step(*plan->programs()->Get(0)->instrs()->Get(0), 0, ts, &s).ok());
  EXPECT_EQ(s.op, zrt::Op::linear);
  EXPECT_EQ(s.category, zrt::OpCategory::compute);
  EXPECT_EQ(std::string(s.info->name), "linear");
  ASSERT_EQ(s.inputs.size(), 3u);
  EXPECT_EQ(s.inputs[1].index, w);
  EXPECT_EQ(s.inputs[2].data, nullptr);  // the absent bias
  EXPECT_EQ(s.ints, std::vector<int64_t>{1});
  EXPECT_EQ(s.floats, std::vector<double>{0.5});
  EXPECT_EQ(s.name, "fc");
}
