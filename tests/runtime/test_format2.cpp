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

// Plan 2.17: decode_layer writes the two caches and the sync state in place (outputs 2, 3, 4 over inputs 1, 2, 3),
// takes an optional residual (input 16), one int (the activation's opcode) and two floats (epsilon, scale), and
// checks the layer's shapes against one another: x [B, 1, d], caches [B, Hkv, L, Dh], wq [d, Hq Dh] with Hq a
// multiple of Hkv, wo [Hq Dh, d], w_gate and w_up [d, F], w_down [F, d], norms [d], tables [1 or B, 1, 1, Dh].
TEST(Format2, DecodeLayer) {
  struct Case {
    int64_t hq = 4, wo_rows = 32, down_cols = 16, table_dh = 8, d = 16, f = 24;
    bool residual = true, sync_i32 = true;
    int64_t act = static_cast<int64_t>(zrt::Op::silu);
    std::vector<double> floats = {1e-5, 0.35};
  };
  auto with = [](const Case &c) {
    PlanBuilder p{1, 1};
    const int kc = p.state_tensor("kv_cache.0.k", fb::StateKind::kv_cache, "", fb::DType::f32, {2, 2, 16, 8});
    const int vc = p.state_tensor("kv_cache.0.v", fb::StateKind::kv_cache, "", fb::DType::f32, {2, 2, 16, 8});
    const int sync = p.state_tensor("decode_layer.sync", fb::StateKind::scalar, "",
                                    c.sync_i32 ? fb::DType::i32 : fb::DType::f32, {8});
    p.program_name = "decode";
    const int64_t d = c.d, f = c.f;
    uint64_t at = 0;
    auto param = [&](const std::string &n, const Shape &shape) {
      const int t = p.param(n, shape, -1, false, "w.bin", at);
      at += static_cast<uint64_t>(numel(shape)) * 4;
      return t;
    };
    auto w = [&](const std::string &n, int64_t k, int64_t m) { return param(n, {k, m}); };
    const int x = p.input("x", fb::DType::f32, {2, 1, d}, false);
    const int r = p.input("r", fb::DType::f32, {2, 1, d}, false);
    const int pos = p.input("pos", fb::DType::i64, {2}, false);
    const int cs = p.input("cos", fb::DType::f32, {1, 1, 1, c.table_dh}, false);
    const int sn = p.input("sin", fb::DType::f32, {1, 1, 1, c.table_dh}, false);
    const int n1 = param("n1", {d}), n2 = param("n2", {d});
    const int wq = w("wq", d, c.hq * 8), wk = w("wk", d, 16), wv = w("wv", d, 16), wo = w("wo", c.wo_rows, d);
    const int wg = w("wg", d, f), wu = w("wu", d, f), wd = w("wd", f, c.down_cols);
    const int y = p.output("y", {2, 1, d}, false), s = p.output("s", {2, 1, d}, false);
    std::vector<int32_t> in = {x, kc, vc, sync, pos, cs, sn, n1, wq, wk, wv, wo, n2, wg, wu, wd};
    if (c.residual) in.push_back(r);
    p.op(zrt::Op::decode_layer, in, {y, s, kc, vc, sync}, {c.act}, c.floats);
    return p;
  };
  EXPECT_TRUE(verify(with({})).ok()) << verify(with({})).message();
  Case none;
  none.residual = false;
  EXPECT_TRUE(verify(with(none)).ok()) << verify(with(none)).message();
  Case heads;
  heads.hq = 3, heads.wo_rows = 24;
  expect_reject(verify(with(heads)), "query heads (3) are not a multiple of kv heads (2)");
  Case wo;
  wo.wo_rows = 16;
  expect_reject(verify(with(wo)), "wo must be [heads x Dh, d]");
  Case down;
  down.down_cols = 8;
  expect_reject(verify(with(down)), "w_up must be w_gate's shape and w_down [ffn, d]");
  Case table;
  table.table_dh = 4;
  expect_reject(verify(with(table)), "cos and sin must be one float dtype [1 or B, 1, 1, Dh]");
  Case sync;
  sync.sync_i32 = false;
  expect_reject(verify(with(sync)), "sync must be i32 [n]");
  Case act;
  act.act = static_cast<int64_t>(zrt::Op::relu);
  expect_reject(verify(with(act)), "act must be the opcode of silu, gelu_tanh or gelu_erf");
  Case noheads;
  noheads.hq = 0, noheads.wo_rows = 0;
  expect_reject(verify(with(noheads)), "query heads (0) are not a multiple of kv heads (2)");
  Case width;
  width.d = 0, width.down_cols = 0;
  expect_reject(verify(with(width)), "x's rows and width and the caches' length must be at least 1");
  Case ffn;
  ffn.f = 0;
  expect_reject(verify(with(ffn)), "w_gate must be [d, ffn] with ffn at least 1");
  Case floats;
  floats.floats = {1e-5};
  expect_reject(verify(with(floats)), "has 1 floats, expects 2");
}

// Plan 2.18: Instr.early, the compiler's claim that a step's kernel may load its weights (rope_attention: its
// caches and positions) before it waits for the previous kernel. The verifier holds the claim against the
// plan's writes, compared as byte ranges: no instruction of any program may write a product's weight; no other
// instruction of its own program may write rope_attention's caches or positions, and the step must follow one of
// its program's instructions on its stream. A claim that fails is refused, naming the step and the writer.
TEST(Format2, EarlyLoadsOnlyOfWhatNoStepWrites) {
  // A decode program whose few-row product and fused pair read inference weights w and u; `write` adds a
  // program that writes w (a trained parameter's cast from its master, or any copy into it).
  auto products = [](bool early, bool write) {
    PlanBuilder p{1, 1};
    const int w = p.param("w", {8, 8}, -1, false, "", 0, fb::DType::f32, std::vector<uint8_t>(256, 0));
    const int u = p.param("u", {8, 8}, -1, false, "", 0, fb::DType::f32, std::vector<uint8_t>(256, 0));
    if (write) {
      const int master = p.state_tensor("w.master", fb::StateKind::master, "w", fb::DType::f32, {8, 8});
      p.program_name = "train_step";
      p.op(zrt::Op::cast, {master}, {w}, {}, {}, fb::Axis::none, "w = cast(w.master)");
      p.new_program("decode");
    } else {
      p.program_name = "decode";
    }
    const int x = p.input("x", fb::DType::f32, {1, 8}, false);
    const int h = p.act("h", {1, 8});
    const int y = p.output("y", {1, 8}, false), z = p.output("z", {1, 8}, false);
    p.op(zrt::Op::linear, {x, w}, {h}, {0, 2}, {1.0}, fb::Axis::none, "o_proj");
    p.instrs.back().early = early;
    p.op(zrt::Op::linear_multi, {h, u, w}, {y, z}, {0}, {1.0}, fb::Axis::none, "qkv");
    p.instrs.back().early = early;
    return p;
  };
  EXPECT_TRUE(verify(products(true, false)).ok()) << verify(products(true, false)).message();
  EXPECT_TRUE(verify(products(false, true)).ok()) << verify(products(false, true)).message();
  expect_reject(verify(products(true, true)),
                "program 'decode' instruction 0 (linear 'o_proj'): is marked early, but its input 1 (tensor 0 'w') "
                "is written by instruction 0 (cast 'w = cast(w.master)') of program 'train_step'");
  // The fused product too (its second weight is w), once the linear claims nothing.
  PlanBuilder multi = products(true, true);
  multi.instrs[0].early = false;
  expect_reject(verify(multi), "instruction 1 (linear_multi 'qkv'): is marked early, but its input 2");

  // An op whose kernels load nothing before their wait cannot claim it.
  PlanBuilder add{1, 1};
  const int a = add.input("a", fb::DType::f32, {4}, false), b = add.output("b", {4}, false);
  add.op(zrt::Op::add, {a, a}, {b});
  add.instrs.back().early = true;
  expect_reject(verify(add), "instruction 0 (add 'add0'): is marked early (plan 2.18), but a add step loads nothing");

  // rope_attention: the prefill program writes the caches (kv_write), which is fine; `writer` adds a write of the
  // v cache in the decode program itself; `first` puts the step first on its stream.
  auto rope = [](bool writer, bool first) {
    PlanBuilder p{1, 1};
    const int kc = p.state_tensor("kv_cache.0.k", fb::StateKind::kv_cache, "", fb::DType::f32, {1, 2, 16, 8});
    const int vc = p.state_tensor("kv_cache.0.v", fb::StateKind::kv_cache, "", fb::DType::f32, {1, 2, 16, 8});
    p.program_name = "prefill";
    const int pk = p.input("k", fb::DType::f32, {1, 2, 1, 8}, false);
    const int pp = p.input("pos", fb::DType::i64, {1}, false);
    p.op(zrt::Op::kv_write, {kc, pk, pp}, {kc}, {}, {}, fb::Axis::none, "prefill kv_write");
    p.new_program("decode");
    const int q = p.input("q", fb::DType::f32, {1, 4, 1, 8}, false);
    const int k = p.input("k", fb::DType::f32, {1, 2, 1, 8}, false);
    const int v = p.input("v", fb::DType::f32, {1, 2, 1, 8}, false);
    const int cs = p.input("cos", fb::DType::f32, {1, 1, 1, 8}, false);
    const int sn = p.input("sin", fb::DType::f32, {1, 1, 1, 8}, false);
    const int pos = p.input("pos", fb::DType::i64, {1}, false);
    const int qn = p.act("qn", {1, 4, 1, 8});
    const int y = p.output("y", {1, 4, 1, 8}, false);
    if (writer) p.op(zrt::Op::kv_write, {vc, v, pos}, {vc}, {}, {}, fb::Axis::none, "v cache write");
    if (!first) p.op(zrt::Op::neg, {q}, {qn});
    p.op(zrt::Op::rope_attention, {first ? q : qn, k, v, cs, sn, kc, vc, pos}, {y, kc, vc}, {}, {0.35},
         fb::Axis::none, "rope");
    p.instrs.back().early = true;
    return p;
  };
  EXPECT_TRUE(verify(rope(false, false)).ok()) << verify(rope(false, false)).message();
  expect_reject(verify(rope(true, false)),
                "program 'decode' instruction 2 (rope_attention 'rope'): is marked early, but its input 6 (tensor 1 "
                "'kv_cache.0.v') is written by instruction 0 (kv_write 'v cache write') of program 'decode'");
  expect_reject(verify(rope(false, true)),
                "instruction 0 (rope_attention 'rope'): is marked early, but no instruction of its program runs "
                "before it on its stream");
}

// Plan 2.18 is a minor bump: a 2.17 plan (no early field: every load after the wait) still loads.
TEST(Format2, PlansOfTheMinorBeforeEarlyLoadsStillLoad) {
  PlanBuilder p = Mlp().plan(1, 1, false);
  p.version_minor = 17;
  EXPECT_TRUE(verify(p).ok()) << verify(p).message();
}
