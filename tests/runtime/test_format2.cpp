// Plan format 2 in the verifier: a 1.x plan is refused with a message to recompile; programs, scalar inputs,
// the state table and writes to persistent state are checked before anything runs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "plan.h"
#include "plan_builder.h"
#include "test_plans.h"
#include "verify_helpers.h"

using namespace zrt_test;

namespace {

/// A small training-shaped plan: a parameter with its master copy and moments, a gradient buffer, programs
/// "init" (master = cast(w)) and "train_step" (grad += g; adamw on the master; w = cast(master)).
struct Train {
  PlanBuilder p{1, 1};
  int w, master, m, v, grad, g, lr, step, scale, norm;
  Train() {
    w = p.param("w", {8}, -1, false, "", 0, fb::DType::f32, std::vector<uint8_t>(32, 0));
    master = p.state_tensor("w.master", fb::StateKind::master, "w", fb::DType::f32, {8});
    m = p.state_tensor("w.m", fb::StateKind::moment1, "w", fb::DType::f32, {8});
    v = p.state_tensor("w.v", fb::StateKind::moment2, "w", fb::DType::f32, {8});
    grad = p.state_tensor("w.grad", fb::StateKind::grad, "w", fb::DType::f32, {8});
    scale = p.state_tensor("scale", fb::StateKind::scalar, "", fb::DType::f32, {});
    p.program_name = "init";
    p.op(zrt::Op::cast, {w}, {master});
    p.op(zrt::Op::fill, {}, {scale}, {}, {1.0});
    p.new_program("train_step");
    g = p.input("g", fb::DType::f32, {8}, false);
    lr = p.scalar("lr", fb::DType::f32, 1e-3);
    step = p.scalar("step", fb::DType::i64, 1);
    norm = p.output("norm", {}, false);
    p.op(zrt::Op::accumulate, {grad, g}, {grad});
    p.op(zrt::Op::sum_squares, {grad}, {norm});
    p.op(zrt::Op::adamw, {master, grad, m, v, lr, step, scale}, {master, m, v}, {}, {0.9, 0.999, 1e-8, 0.01});
    p.op(zrt::Op::cast, {master}, {w});
  }
};

}  // namespace

TEST(Format2, AcceptsATrainingShapedPlan) {
  Train t;
  EXPECT_TRUE(verify(t.p).ok()) << verify(t.p).message();
}

TEST(Format2, RefusesVersionOnePlansWithAMessageToRecompile) {
  PlanBuilder p = Mlp().plan(1, 1, false);
  p.version_major = 1;
  p.version_minor = 1;
  p.legacy_layout = true;
  expect_reject(verify(p), "plan format version 1.1 is older than this runtime's 2.");
  expect_reject(verify(p), "recompile the model");
}

TEST(Format2, Programs) {
  PlanBuilder p = Mlp().plan(1, 1, false);
  p.legacy_layout = true;  // a 2.0 header over the 1.x layout
  expect_reject(verify(p), "must be empty in format 2");
  Train t;
  t.p.program_name = "init";  // two programs named init
  expect_reject(verify(t.p), "program 1 'init': the name is used twice");
  Train e;
  e.p.instrs[0].in = {e.grad, e.grad};  // not in place: output 0 differs from input 0
  e.p.instrs[0].out = {e.m};
  expect_reject(verify(e.p), "writes it in place over input 0");
}

TEST(Format2, WritesToPersistentState) {
  // copy, cast, fill and the state-writing ops may write persistent tensors; nothing else may.
  Train t;
  t.p.op(zrt::Op::add, {t.g, t.g}, {t.m});
  expect_reject(verify(t.p), "writes tensor " + std::to_string(t.m) + " 'w.m', which is persistent moment state");
  Train u;
  u.p.op(zrt::Op::neg, {u.master}, {u.w});
  expect_reject(verify(u.p), "which is persistent weight state; only state-writing ops (adamw, accumulate) and copy, cast or fill may");
  Train c;
  c.p.op(zrt::Op::copy, {c.g}, {c.grad});
  c.p.op(zrt::Op::fill, {}, {c.v}, {}, {0.0});
  EXPECT_TRUE(verify(c.p).ok()) << verify(c.p).message();
  // Inputs and constants stay unwritable.
  Train d;
  d.p.op(zrt::Op::copy, {d.grad}, {d.g});
  expect_reject(verify(d.p), "which is a bound input tensor");
}

TEST(Format2, StateTable) {
  Train t;
  t.p.state.erase(t.p.state.begin() + 2);  // w.m loses its entry (0 is w, 1 the master)
  expect_reject(verify(t.p), "'w.m' of kind moment has no state entry");
  Train k;
  k.p.state[1].kind = fb::StateKind::grad;  // the master called a gradient
  expect_reject(verify(k.p), "a state of kind grad must name a tensor of kind grad");
  Train s;
  s.p.state[1].ranks[0].pieces[0].src = {4};  // [4, 12) of an 8-element tensor
  expect_reject(verify(s.p), "is outside the source [8]");
  Train f;
  f.p.state[1].ranks[0].fe = 4;  // keeps 4 of 8 elements
  expect_reject(verify(f.p), "keeps 4 elements, the tensor holds 8");
  Train n;
  n.p.state[2].name = n.p.state[1].name;
  expect_reject(verify(n.p), "the name is used twice");
}

TEST(Format2, ScalarInputs) {
  Train t;
  t.p.tensors[t.lr].shape = {1};
  expect_reject(verify(t.p), "scalar input 'lr': tensor " + std::to_string(t.lr) + " 'lr' must be a numeric rank-0 input");
  Train n;
  n.p.scalars[0].def = std::numeric_limits<double>::quiet_NaN();
  expect_reject(verify(n.p), "the default value is not finite");
  Train d;
  d.p.scalars[0].name = "g";
  expect_reject(verify(d.p), "scalar input 'g': the name is used twice among the program's inputs");
}

// Plan 2.16: rope_attention writes its two caches in place (outputs 1 and 2 over inputs 5 and 6) and takes
// rope_kv_write's shape rules and the attention's: query heads a multiple of the K/V heads, one float (scale).
TEST(Format2, RopeAttention) {
  auto with = [](int64_t hq, std::vector<double> floats) {
    PlanBuilder p{1, 1};
    const int kc = p.state_tensor("kv_cache.0.k", fb::StateKind::kv_cache, "", fb::DType::f32, {1, 2, 16, 8});
    const int vc = p.state_tensor("kv_cache.0.v", fb::StateKind::kv_cache, "", fb::DType::f32, {1, 2, 16, 8});
    p.program_name = "decode";
    const int q = p.input("q", fb::DType::f32, {1, hq, 1, 8}, false);
    const int k = p.input("k", fb::DType::f32, {1, 2, 1, 8}, false);
    const int v = p.input("v", fb::DType::f32, {1, 2, 1, 8}, false);
    const int cs = p.input("cos", fb::DType::f32, {1, 1, 1, 8}, false);
    const int sn = p.input("sin", fb::DType::f32, {1, 1, 1, 8}, false);
    const int pos = p.input("pos", fb::DType::i64, {1}, false);
    const int y = p.output("y", {1, hq, 1, 8}, false);
    p.op(zrt::Op::rope_attention, {q, k, v, cs, sn, kc, vc, pos}, {y, kc, vc}, {}, std::move(floats));
    return p;
  };
  EXPECT_TRUE(verify(with(4, {0.35})).ok()) << verify(with(4, {0.35})).message();
  expect_reject(verify(with(3, {0.35})), "query heads (3) are not a multiple of kv heads (2)");
  expect_reject(verify(with(4, {})), "has 0 floats, expects 1");
}
