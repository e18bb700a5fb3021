// Tests plan emission end to end on small zg/zd modules: the FlatBuffer passes
// the generated verifier, every table holds what plan.fbs documents (tensor
// kinds and offsets from the IR, rank slices by tp and dp index, opcodes and
// their ints/floats, streams and events), and the collective hash equals an
// FNV-1a 64 computed here byte by byte.

#include <gtest/gtest.h>

#include "compiler/plan/EmitPlan.h"
#include "compiler/plan/Passes.h"
#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "zrt/plan_file.h"
#include "zrt/plan_generated.h"

#include "plan.h"  // runtime/src: the runtime's verifier

#include <cstring>
#include <map>

using namespace mlir;
using namespace zplan::plan;

namespace {

struct Compiled {
  std::vector<uint8_t> payload;
  PlanSummary summary;
  const zrt::fb::Plan* plan = nullptr;
};

bool compile(const std::string& source, const std::string& dtype, Compiled& out, uint64_t gpuMem = 0) {
  DialectRegistry registry;
  registry.insert<func::FuncDialect, zplan::graph::GraphDialect, zplan::dist::ZdDialect>();
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &ctx);
  if (!module) return false;
  PassManager pm(&ctx, ModuleOp::getOperationName());
  ZplanScheduleOptions s;
  s.dtype = dtype;
  pm.addPass(createZplanSchedule(s));
  ZplanMemoryPlanOptions m;
  m.dtype = dtype;
  m.gpuMem = gpuMem;
  pm.addPass(createZplanMemoryPlan(m));
  if (failed(pm.run(*module))) return false;
  EmitOptions opts;
  opts.planPath = "/tmp/plans/x.zplan";
  opts.modelDir = "/tmp/models/m";
  opts.producer = "test";
  if (failed(emitPlan(*module, opts, out.payload, out.summary))) return false;
  flatbuffers::Verifier verifier(out.payload.data(), out.payload.size());
  EXPECT_TRUE(zrt::fb::VerifyPlanBuffer(verifier));
  out.plan = zrt::fb::GetPlan(out.payload.data());
  return true;
}

uint64_t fnv(const std::vector<std::tuple<uint16_t, uint8_t, uint8_t, uint64_t>>& items) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (auto [op, axis, dtype, count] : items) {
    uint8_t bytes[12] = {uint8_t(op), uint8_t(op >> 8), axis, dtype};
    for (int i = 0; i < 8; ++i) bytes[4 + i] = uint8_t(count >> (8 * i));
    for (uint8_t b : bytes) {
      h ^= b;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

const char* kTpZero = R"mlir(
module attributes {zd.tp = 2 : i64, zd.dp = 2 : i64} {
  func.func @main(%x: tensor<1x8x64xf32> {zg.name = "hidden", zd.batch_split}) -> (tensor<1x8x64xf32> {zg.name = "out", zd.batch_split}) {
    %s = zd.weight_shard {name = "w1", file = "data.bin", offset = 64 : i64, length = 32768 : i64, source_shape = array<i64: 64, 128>, local_shape = array<i64: 64, 64>, pieces = [[{src_start = array<i64: 0, 0>, dst_start = array<i64: 0, 0>, size = array<i64: 64, 64>}], [{src_start = array<i64: 0, 64>, dst_start = array<i64: 0, 0>, size = array<i64: 64, 64>}]], dp = 2 : i64, space = "device"} : tensor<2048xf32>
    %b = zg.weight {name = "b", file = "", offset = 0 : i64, length = 0 : i64, value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
    %w = zd.gather_param %s : tensor<2048xf32> -> tensor<64x64xf32>
    %y = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = true} : (tensor<1x8x64xf32>, tensor<64x64xf32>) -> tensor<1x8x64xf32>
    zd.release %w : tensor<64x64xf32>
    %r = zd.all_reduce %y {axis = "tp"} : tensor<1x8x64xf32>
    %v = zg.reshape %r : (tensor<1x8x64xf32>) -> tensor<8x64xf32>
    %sm = zg.softmax %v {axis = 1 : i64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
    %o = zg.reshape %sm : (tensor<8x64xf32>) -> tensor<1x8x64xf32>
    return %o : tensor<1x8x64xf32>
  }
}
)mlir";

TEST(EmitPlan, TensorParallelZeroThree) {
  Compiled c;
  ASSERT_TRUE(compile(kTpZero, "bf16", c));
  const zrt::fb::Plan* p = c.plan;
  EXPECT_EQ(p->version_major(), zrt::kPlanVersionMajor);
  EXPECT_EQ(p->fingerprint()->world(), 4);
  EXPECT_EQ(p->fingerprint()->tp(), 2);
  EXPECT_EQ(p->fingerprint()->dp(), 2);
  EXPECT_EQ(int(p->fingerprint()->dtype()), 1);  // bf16
  // Format 2: one program, @main; the 1.x single-stream fields stay empty.
  ASSERT_EQ(p->programs()->size(), 1u);
  const auto* prog = p->programs()->Get(0);
  EXPECT_EQ(prog->name()->str(), "main");
  EXPECT_FALSE(p->instrs() && p->instrs()->size());

  // Instructions: gather_param, linear, release, all_reduce, reshape,
  // softmax, reshape (storage ops run nothing).
  ASSERT_EQ(prog->instrs()->size(), 7u);
  std::vector<int> ops;
  for (const auto* i : *prog->instrs()) ops.push_back(int(i->op()));
  EXPECT_EQ(ops, (std::vector<int>{144, 65, 145, 128, 97, 80, 97}));
  const auto* linear = prog->instrs()->Get(1);
  ASSERT_EQ(linear->ints()->size(), 1u);
  EXPECT_EQ(linear->ints()->Get(0), 1);  // trans_w
  ASSERT_EQ(linear->floats()->size(), 1u);
  EXPECT_EQ(linear->floats()->Get(0), 1.0);
  EXPECT_EQ(prog->instrs()->Get(5)->ints()->Get(0), 1);  // softmax axis
  EXPECT_EQ(int(prog->instrs()->Get(0)->stream()), 1);   // gather on comm
  EXPECT_EQ(int(prog->instrs()->Get(0)->axis()), 2);     // over dp
  EXPECT_EQ(int(prog->instrs()->Get(3)->axis()), 1);     // all_reduce over tp
  EXPECT_EQ(prog->instrs()->Get(2)->outputs()->size(), 0u);
  // The linear waits for the gather's event.
  int gatherEvent = prog->instrs()->Get(0)->signal();
  ASSERT_GE(gatherEvent, 0);
  ASSERT_TRUE(linear->waits());
  EXPECT_NE(std::find(linear->waits()->begin(), linear->waits()->end(), gatherEvent), linear->waits()->end());
  EXPECT_LT(gatherEvent, prog->num_events());

  // The hash, computed here: gather_param (144, dp, bf16, 2048 elements of
  // the shard), then all_reduce (128, tp, bf16, 512 elements).
  EXPECT_EQ(prog->collective_hash(), fnv({{144, 2, 1, 2048}, {128, 1, 1, 512}}));

  // Tensors: kinds and the aliases of the two reshapes.
  const auto* tensors = p->tensors();
  int shard = -1, weight = -1, gathered = -1, input = -1, output = -1;
  for (unsigned i = 0; i < tensors->size(); ++i) {
    const auto* t = tensors->Get(i);
    switch (int(t->kind())) {
      case 1:
        input = int(i);
        break;
      case 2:
        output = int(i);
        break;
      case 3:
        weight = int(i);
        break;
      case 4:
        shard = int(i);
        break;
      case 5:
        gathered = int(i);
        break;
    }
    EXPECT_EQ(t->offset() % 256, 0u);
    if (t->alias_of() >= 0) {
      const auto* base = tensors->Get(t->alias_of());
      EXPECT_EQ(t->offset(), base->offset());
      EXPECT_EQ(t->bytes(), base->bytes());
      EXPECT_LT(base->alias_of(), 0);
    }
  }
  ASSERT_GE(shard, 0);
  ASSERT_GE(weight, 0);
  ASSERT_GE(gathered, 0);
  ASSERT_GE(input, 0);
  ASSERT_GE(output, 0);
  EXPECT_EQ(tensors->Get(shard)->bytes(), 4096u);  // 2048 bf16
  EXPECT_EQ(int(tensors->Get(shard)->dtype()), 1);
  EXPECT_GE(tensors->Get(output)->alias_of(), 0);  // the final reshape

  // IO: global shapes with the batch multiplied by dp.
  ASSERT_EQ(prog->inputs()->size(), 1u);
  EXPECT_EQ(prog->inputs()->Get(0)->name()->str(), "hidden");
  EXPECT_TRUE(prog->inputs()->Get(0)->batch_split());
  EXPECT_EQ(prog->inputs()->Get(0)->global_shape()->Get(0), 2);
  EXPECT_EQ(prog->outputs()->Get(0)->name()->str(), "out");
  EXPECT_EQ(prog->outputs()->Get(0)->tensor(), output);

  // Weights: the external file relative to the plan's folder, the inline
  // bias in its own dtype.
  ASSERT_EQ(p->weights()->size(), 2u);
  const auto* w1 = p->weights()->Get(p->bindings()->Get(0)->source());
  EXPECT_EQ(w1->file()->str(), "../models/m/data.bin");
  EXPECT_EQ(w1->offset(), 64u);
  EXPECT_EQ(int(w1->dtype()), 0);  // f32 as stored
  const auto* bias = p->weights()->Get(p->bindings()->Get(1)->source());
  EXPECT_EQ(bias->file()->str(), "");
  ASSERT_EQ(bias->inline_data()->size(), 8u);

  // Rank slices: rank r has tp index r % 2 (which piece) and dp index r / 2
  // (which flat range of 2048 elements).
  const auto* binding = p->bindings()->Get(0);
  EXPECT_EQ(binding->tensor(), shard);
  ASSERT_EQ(binding->ranks()->size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const auto* slice = binding->ranks()->Get(r);
    EXPECT_EQ(slice->flat_begin(), uint64_t(r / 2) * 2048);
    EXPECT_EQ(slice->flat_end(), uint64_t(r / 2 + 1) * 2048);
    ASSERT_EQ(slice->pieces()->size(), 1u);
    EXPECT_EQ(slice->pieces()->Get(0)->src_start()->Get(1), (r % 2) * 64);
  }
  const auto* biasBinding = p->bindings()->Get(1);
  for (const auto* slice : *biasBinding->ranks()) {
    EXPECT_EQ(slice->flat_begin(), 0u);
    EXPECT_EQ(slice->flat_end(), 2u);
  }

  // Memory: one entry per rank, the device arena as planned peak.
  ASSERT_EQ(p->memory()->size(), 4u);
  const auto* m = p->memory()->Get(3);
  EXPECT_EQ(m->rank(), 3);
  EXPECT_EQ(m->planned_peak_bytes(), m->arena_bytes()->Get(0));
  EXPECT_EQ(m->resident_weight_bytes(), 4096u + 4u);
  EXPECT_EQ(m->peak_gathered_param_bytes(), 8192u);  // 64x64 bf16
  uint64_t top = 0;
  for (const auto* t : *tensors)
    if (int(t->space()) == 0) top = std::max<uint64_t>(top, t->offset() + t->bytes());
  EXPECT_EQ(top, m->arena_bytes()->Get(0));

  // The report's communication figures: all_reduce of 512 bf16 over tp = 2
  // sends 2 (n-1)/n x 1024 bytes; the gather sends (dp-1) x 4096 bytes.
  EXPECT_EQ(c.summary.comm["all_reduce"]["tp"].sentBytes, 1024u);
  EXPECT_EQ(c.summary.comm["gather_param"]["dp"].sentBytes, 4096u);
  EXPECT_EQ(c.summary.comm["gather_param"]["dp"].payloadBytes, 8192u);
}

TEST(EmitPlan, SplitBecomesSlices) {
  const char* src = R"mlir(
module {
  func.func @main(%x: tensor<2x6xf32>) -> (tensor<2x2xf32>, tensor<2x4xf32>) {
    %a:2 = zg.split %x {axis = 1 : i64} : (tensor<2x6xf32>) -> (tensor<2x2xf32>, tensor<2x4xf32>)
    %b = zg.neg %a#0 : (tensor<2x2xf32>) -> tensor<2x2xf32>
    %c = zg.neg %a#1 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    return %b, %c : tensor<2x2xf32>, tensor<2x4xf32>
  }
}
)mlir";
  Compiled c;
  ASSERT_TRUE(compile(src, "fp32", c));
  const auto* instrs = c.plan->programs()->Get(0)->instrs();
  ASSERT_EQ(instrs->size(), 4u);
  EXPECT_EQ(int(instrs->Get(0)->op()), 99);
  EXPECT_EQ(int(instrs->Get(1)->op()), 99);
  std::vector<int64_t> ints0(instrs->Get(0)->ints()->begin(), instrs->Get(0)->ints()->end());
  std::vector<int64_t> ints1(instrs->Get(1)->ints()->begin(), instrs->Get(1)->ints()->end());
  EXPECT_EQ(ints0, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(ints1, (std::vector<int64_t>{0, 2, 1, 1}));
  EXPECT_EQ(c.plan->programs()->Get(0)->collective_hash(), 0xcbf29ce484222325ull);
}

TEST(EmitPlan, ConstantsTakeThePlanDType) {
  const char* src = R"mlir(
module {
  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
    %c = zg.constant {value = dense<[1.0, -2.0, 0.5]> : tensor<3xf32>} : () -> tensor<3xf32>
    %y = zg.add %x, %c : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    return %y : tensor<3xf32>
  }
}
)mlir";
  Compiled c;
  ASSERT_TRUE(compile(src, "fp16", c));
  ASSERT_EQ(c.plan->constants()->size(), 1u);
  const auto* k = c.plan->constants()->Get(0);
  EXPECT_EQ(int(k->dtype()), 2);
  // IEEE half: 1.0 = 0x3C00, -2.0 = 0xC000, 0.5 = 0x3800, little endian.
  std::vector<uint8_t> data(k->data()->begin(), k->data()->end());
  EXPECT_EQ(data, (std::vector<uint8_t>{0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38}));
  int constantTensors = 0;
  for (const auto* t : *c.plan->tensors())
    if (int(t->kind()) == 6) {
      EXPECT_EQ(t->constant(), 0);
      ++constantTensors;
    }
  EXPECT_EQ(constantTensors, 1);
}

// bf16 rounds to nearest, ties to even: 1 + 2^-8 lies halfway between 0x3F80
// and 0x3F81 and goes to the even 0x3F80; 1 + 3 * 2^-8 goes up to 0x3F82.
TEST(EmitPlan, ConstantsRoundToBf16TiesToEven) {
  const char* src = R"mlir(
module {
  func.func @main(%x: tensor<5xf32>) -> tensor<5xf32> {
    %c = zg.constant {value = dense<[1.0, -2.0, 0.5, 1.00390625, 1.01171875]> : tensor<5xf32>} : () -> tensor<5xf32>
    %y = zg.add %x, %c : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
    return %y : tensor<5xf32>
  }
}
)mlir";
  Compiled c;
  ASSERT_TRUE(compile(src, "bf16", c));
  const auto* k = c.plan->constants()->Get(0);
  EXPECT_EQ(int(k->dtype()), 1);
  std::vector<uint8_t> data(k->data()->begin(), k->data()->end());
  EXPECT_EQ(data, (std::vector<uint8_t>{0x80, 0x3F, 0x00, 0xC0, 0x00, 0x3F, 0x80, 0x3F, 0x82, 0x3F}));
}

TEST(EmitPlan, WrittenFilePassesTheRuntimeHeaderCheck) {
  Compiled c;
  ASSERT_TRUE(compile(kTpZero, "fp32", c));
  std::string path = ::testing::TempDir() + "/emit-test.zplan";
  ASSERT_EQ(zrt::write_plan_file(path, c.payload.data(), c.payload.size()), "");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_TRUE(f);
  std::vector<uint8_t> file(c.payload.size() + 64);
  size_t n = std::fread(file.data(), 1, file.size(), f);
  std::fclose(f);
  const uint8_t* payload = nullptr;
  uint64_t payloadBytes = 0;
  EXPECT_EQ(zrt::check_plan_header(file.data(), n, &payload, &payloadBytes), "");
  EXPECT_EQ(payloadBytes, c.payload.size());
  std::remove(path.c_str());
}

}  // namespace

// Two programs that name the same parameter and state: one tensor each, one
// state entry each; a moment that belongs to the parameter takes its layout;
// the write ops become the registry's in-place ops with the targets as
// outputs; rank-0 arguments with zg.default become scalar inputs.
TEST(EmitPlan, ProgramsShareStateAndWriteIt) {
  const char* src = R"mlir(
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
  func.func @init() {
    %w = zg.weight {file = "data.bin", length = 32 : i64, name = "w", offset = 0 : i64} : () -> tensor<8xf32>
    %master = zg.state {init = "copy_of_param", kind = "master", name = "w.master", of = "w"} : () -> tensor<8xf32>
    zg.assign %master, %w : (tensor<8xf32>, tensor<8xf32>) -> ()
    return
  }
  func.func @train_step(%g: tensor<8xf32> {zg.name = "g"}, %lr: tensor<f32> {zg.name = "lr", zg.default = 1.0e-3 : f64},
                        %step: tensor<i64> {zg.name = "step", zg.default = 1 : i64}) -> (tensor<f32> {zg.name = "norm"}) {
    %w = zg.weight {file = "data.bin", length = 32 : i64, name = "w", offset = 0 : i64} : () -> tensor<8xf32>
    %master = zg.state {init = "copy_of_param", kind = "master", name = "w.master", of = "w"} : () -> tensor<8xf32>
    %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<8xf32>
    %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<8xf32>
    %s = zg.state {init = 1.0 : f64, kind = "scalar", name = "scale"} : () -> tensor<f32>
    %n = zg.sum_squares %g : (tensor<8xf32>) -> tensor<f32>
    zg.adamw %master, %g, %m, %v, %lr, %step, %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
    zg.assign %w, %master : (tensor<8xf32>, tensor<8xf32>) -> ()
    return %n : tensor<f32>
  }
}
)mlir";
  Compiled c;
  ASSERT_TRUE(compile(src, "bf16", c));
  const zrt::fb::Plan* p = c.plan;
  // The runtime's verifier accepts the plan as written.
  {
    zrt::PlanHeader h = zrt::make_plan_header(c.payload.data(), c.payload.size());
    std::vector<uint8_t> file(sizeof(h) + c.payload.size());
    std::memcpy(file.data(), &h, sizeof(h));
    std::memcpy(file.data() + sizeof(h), c.payload.data(), c.payload.size());
    zrt::Launch launch;
    const zrt::fb::Plan* verified = nullptr;
    uint64_t hash = 0;
    zrt::Status st = zrt::verify_plan(file.data(), file.size(), launch, &verified, &hash);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  ASSERT_EQ(p->programs()->size(), 2u);
  const auto* init = p->programs()->Get(0);
  const auto* step = p->programs()->Get(1);
  EXPECT_EQ(init->name()->str(), "init");
  EXPECT_EQ(step->name()->str(), "train_step");

  // init: master = cast(w): the bf16 parameter (--dtype bf16) into the f32
  // master (zg.state keeps its own element type).
  ASSERT_EQ(init->instrs()->size(), 1u);
  const auto* assign = init->instrs()->Get(0);
  EXPECT_EQ(assign->op(), uint16_t(zrt::Op::cast));
  ASSERT_EQ(assign->inputs()->size(), 1u);
  ASSERT_EQ(assign->outputs()->size(), 1u);
  const int w = assign->inputs()->Get(0), master = assign->outputs()->Get(0);
  EXPECT_EQ(int(p->tensors()->Get(w)->dtype()), 1);       // bf16
  EXPECT_EQ(int(p->tensors()->Get(master)->dtype()), 0);  // f32
  EXPECT_EQ(int(p->tensors()->Get(master)->kind()), int(zrt::fb::TensorKind::master));

  // train_step: sum_squares, adamw (in place on master, m, v), then
  // w = cast(master); the same w and master tensors as in init.
  ASSERT_EQ(step->instrs()->size(), 3u);
  const auto* adamw = step->instrs()->Get(1);
  EXPECT_EQ(adamw->op(), uint16_t(zrt::Op::adamw));
  ASSERT_EQ(adamw->inputs()->size(), 7u);
  ASSERT_EQ(adamw->outputs()->size(), 3u);
  EXPECT_EQ(adamw->outputs()->Get(0), master);
  EXPECT_EQ(adamw->outputs()->Get(1), adamw->inputs()->Get(2));
  EXPECT_EQ(adamw->outputs()->Get(2), adamw->inputs()->Get(3));
  ASSERT_EQ(adamw->floats()->size(), 4u);
  EXPECT_DOUBLE_EQ(adamw->floats()->Get(1), 0.999);
  const auto* back = step->instrs()->Get(2);
  EXPECT_EQ(back->op(), uint16_t(zrt::Op::cast));
  EXPECT_EQ(back->outputs()->Get(0), w);
  EXPECT_EQ(back->inputs()->Get(0), master);
  EXPECT_EQ(int(p->tensors()->Get(step->instrs()->Get(0)->outputs()->Get(0))->dtype()), 0);  // norm f32

  // Scalars: lr (f32) and step (i64) with their defaults; g is the only input.
  ASSERT_EQ(step->scalars()->size(), 2u);
  EXPECT_EQ(step->scalars()->Get(0)->name()->str(), "lr");
  EXPECT_DOUBLE_EQ(step->scalars()->Get(0)->default_value(), 1.0e-3);
  EXPECT_EQ(int(step->scalars()->Get(1)->dtype()), int(zrt::fb::DType::i64));
  EXPECT_EQ(step->inputs()->size(), 1u);

  // State: every persistent tensor once, the moment in the parameter's layout.
  std::map<std::string, const zrt::fb::StateEntry*> state;
  for (const auto* e : *p->state()) state[e->name()->str()] = e;
  ASSERT_EQ(state.size(), 5u);
  EXPECT_EQ(state["w"]->kind(), zrt::fb::StateKind::param);
  EXPECT_EQ(state["w"]->tensor(), w);
  EXPECT_EQ(state["w.master"]->tensor(), master);
  EXPECT_EQ(state["w.master"]->init(), zrt::fb::StateInit::copy_of_param);
  EXPECT_EQ(state["w.m"]->kind(), zrt::fb::StateKind::moment1);
  EXPECT_EQ(state["w.m"]->param()->str(), "w");
  EXPECT_EQ(state["w.m"]->full_shape()->Get(0), 8);
  EXPECT_EQ(state["scale"]->init(), zrt::fb::StateInit::constant);
  EXPECT_DOUBLE_EQ(state["scale"]->init_value(), 1.0);

  // Memory by kind: exact bytes of the persistent kinds.
  const auto* m = p->memory()->Get(0);
  EXPECT_EQ(m->param_bytes(), 16u);   // 8 bf16
  EXPECT_EQ(m->master_bytes(), 32u);  // 8 f32
  EXPECT_EQ(m->moment_bytes(), 64u);  // m and v
  EXPECT_EQ(m->state_bytes(), 4u);    // the scale

  // Persistent tensors never share bytes with anything.
  std::vector<std::pair<uint64_t, uint64_t>> persistent;
  for (const auto* t : *p->tensors())
    if (int(t->kind()) >= 8 || t->kind() == zrt::fb::TensorKind::weight)
      persistent.push_back({t->offset(), t->offset() + t->bytes()});
  for (const auto* t : *p->tensors()) {
    if (t->alias_of() >= 0) continue;
    for (auto [b, e] : persistent)
      if (!(t->offset() == b && t->offset() + t->bytes() == e))
        EXPECT_TRUE(t->offset() + t->bytes() <= b || e <= t->offset()) << t->name()->str();
  }
}
