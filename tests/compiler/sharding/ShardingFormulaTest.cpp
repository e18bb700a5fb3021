//===- ShardingFormulaTest.cpp - sharding against closed forms ------------===//
//
// Imports the shared test models (real Hugging Face exports), runs the
// recognition and sharding pipelines and checks what the passes produced
// against formulas computed from the models' configurations
// (tests/models/README.md), not from the passes' own numbers:
//  - Megatron: a forward pass all-reduces 2 * b * s * h elements per
//    transformer layer (attention output and MLP output), plus b * s * h for
//    the vocabulary-parallel embedding;
//  - ZeRO-3: every parameter is gathered exactly once, and each rank receives
//    (dp - 1) / dp of it;
//  - resident parameter bytes per rank are the tp-split parameters divided by
//    tp * dp plus the tp-replicated ones divided by dp.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "compiler/import/Import.h"
#include "compiler/sharding/Pipeline.h"
#include "compiler/transforms/Passes.h"
#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphDialect.h"
#include "dialects/graph/GraphOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

using namespace mlir;
using namespace zplan;
namespace zg = zplan::graph;

namespace {

/// The configurations of the shared models (tests/models/README.md).
struct ModelConfig {
  const char* name;
  int64_t layers, hidden, heads, kvHeads, ffn, vocab, positions;
  /// SiLU-gated MLP (three matrices); whether a token-type table exists.
  bool gated, tokenTypes;
  /// [V, d] matrices: the embedding, plus the LM head unless it is tied or
  /// absent.
  int64_t vocabTables;
};

/// GoogleTest prints a parameter it cannot print as its bytes, pointer
/// included, and that text becomes part of each case's ctest name: print the
/// model's name so that the names stay the same from build to build.
void PrintTo(const ModelConfig& config, std::ostream* os) { *os << config.name; }

const ModelConfig kGpt2{"gpt2", 2, 64, 4, 4, 256, 512, 128, false, false, 1};
const ModelConfig kLlama{"llama", 2, 64, 4, 2, 172, 512, 0, true, false, 2};
const ModelConfig kBert{"bert", 2, 64, 4, 4, 256, 512, 128, false, true, 1};

constexpr int64_t kBatch = 4, kSeq = 16;

struct Compiled {
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

std::unique_ptr<Compiled> compile(const ModelConfig& m, const sharding::ShardingOptions& opts) {
  auto c = std::make_unique<Compiled>();
  DialectRegistry registry;
  registry.insert<func::FuncDialect, zg::GraphDialect, dist::ZdDialect>();
  c->context.appendDialectRegistry(registry);
  c->context.loadAllAvailableDialects();
  import::ImportOptions io;
  io.batch = kBatch;
  io.seq = kSeq;
  std::string path = std::string(ZPLAN_MODELS_DIR) + "/" + m.name + "/model.onnx";
  c->module = import::importOnnxFile(c->context, path, io);
  if (!c->module) return nullptr;
  PassManager pm(&c->context);
  transforms::buildRecognitionPipeline(pm);
  sharding::buildShardingPipeline(pm, opts);
  if (failed(pm.run(*c->module))) return nullptr;
  return c;
}

int64_t elements(Type t) { return cast<RankedTensorType>(t).getNumElements(); }

/// Weight-matrix elements one rank holds after tensor parallelism, from the
/// configuration: every linear and the vocabulary tables are split over tp,
/// except K/V projections with fewer heads than ranks (one head per rank),
/// position and token-type tables, which stay whole.
int64_t expectedMatrixElementsPerTpRank(const ModelConfig& m, int64_t tp) {
  int64_t d = m.hidden, dh = d / m.heads;
  int64_t perLayerSplit = 2 * d * d;               // q, o
  int64_t kv = 2 * d * dh * m.kvHeads;             // k, v
  perLayerSplit += (m.gated ? 3 : 2) * d * m.ffn;  // MLP
  int64_t perLayerKv = kv / std::min(tp, m.kvHeads);
  int64_t split = m.layers * perLayerSplit / tp + m.layers * perLayerKv;
  split += m.vocabTables * m.vocab * d / tp;
  int64_t whole = m.positions * d + (m.tokenTypes ? 2 * d : 0);
  return split + whole;
}

struct Param {
  int64_t localElements;     // tp-local elements of the parameter
  int64_t residentElements;  // what one rank keeps
  bool matrix;
};

std::vector<Param> params(ModuleOp module) {
  std::vector<Param> out;
  module.walk([&](Operation* op) {
    if (auto w = dyn_cast<zg::WeightOp>(op)) {
      auto t = cast<RankedTensorType>(w.getResult().getType());
      out.push_back({t.getNumElements(), t.getNumElements(), t.getRank() == 2});
    } else if (auto s = dyn_cast<dist::WeightShardOp>(op)) {
      int64_t local = 1;
      for (int64_t x : s.getLocalShape()) local *= x;
      out.push_back({local, elements(s.getResult().getType()), s.getLocalShape().size() == 2});
    }
  });
  return out;
}

class Models : public ::testing::TestWithParam<ModelConfig> {};

// Megatron's communication volume: 2 b s h per layer, b s h for the
// vocabulary-parallel embedding.
TEST_P(Models, TpAllReduceVolumePerLayer) {
  const ModelConfig& m = GetParam();
  for (int tp : {2, 4}) {
    sharding::ShardingOptions o;
    o.tp = tp;
    auto c = compile(m, o);
    ASSERT_TRUE(c) << m.name << " tp=" << tp;
    int64_t reduced = 0, count = 0;
    c->module->walk([&](dist::AllReduceOp ar) {
      reduced += elements(ar.getInput().getType());
      ++count;
    });
    int64_t bsh = kBatch * kSeq * m.hidden;
    EXPECT_EQ(count, 2 * m.layers + 1) << m.name << " tp=" << tp;
    EXPECT_EQ(reduced, m.layers * 2 * bsh + bsh) << m.name << " tp=" << tp;
  }
}

// Without tensor parallelism nothing is communicated.
TEST_P(Models, NoCollectivesAtTp1) {
  const ModelConfig& m = GetParam();
  auto c = compile(m, {});
  ASSERT_TRUE(c);
  int64_t n = 0;
  c->module->walk(
      [&](Operation* op) { n += isa<dist::AllReduceOp, dist::AllGatherOp, dist::GatherParamOp>(op); });
  EXPECT_EQ(n, 0);
}

// ZeRO-3: one gather per parameter; each rank keeps 1/dp and receives the
// other (dp - 1)/dp.
TEST_P(Models, Zero3GathersEveryParameterOnce) {
  const ModelConfig& m = GetParam();
  for (auto [tp, dp] : {std::pair{1, 2}, {2, 2}, {1, 4}}) {
    sharding::ShardingOptions o;
    o.tp = tp;
    o.dp = dp;
    o.zeroStage = 3;
    auto c = compile(m, o);
    ASSERT_TRUE(c) << m.name;
    int64_t shards = 0, gathers = 0, received = 0, localTotal = 0;
    c->module->walk([&](dist::WeightShardOp s) {
      ++shards;
      int64_t uses = std::distance(s->use_begin(), s->use_end());
      EXPECT_EQ(uses, 1) << "shard " << s.getName().str();
    });
    c->module->walk([&](dist::GatherParamOp g) {
      ++gathers;
      int64_t shard = elements(g.getShard().getType());
      received += (dp - 1) * shard;
      localTotal += elements(g.getResult().getType());
    });
    int64_t zgLeft = 0;
    c->module->walk([&](zg::WeightOp) { ++zgLeft; });
    EXPECT_EQ(zgLeft, 0) << "no persist threshold: every parameter is sharded";
    EXPECT_EQ(shards, gathers);
    // (dp - 1) / dp of every parameter, up to dp - 1 padding elements each.
    double expected = double(localTotal) * (dp - 1) / dp;
    EXPECT_GE(received, expected);
    EXPECT_LE(received, expected + gathers * (dp - 1));
    // Releases pair with gathers.
    int64_t releases = 0;
    c->module->walk([&](dist::ReleaseOp) { ++releases; });
    EXPECT_EQ(releases, gathers);
  }
}

// Resident matrix bytes per rank: split ones over tp * dp, whole ones over dp.
TEST_P(Models, ResidentWeightsPerRank) {
  const ModelConfig& m = GetParam();
  for (auto [tp, dp] : {std::pair{1, 1}, {2, 1}, {4, 1}, {1, 2}, {2, 2}, {1, 4}}) {
    sharding::ShardingOptions o;
    o.tp = tp;
    o.dp = dp;
    o.zeroStage = dp > 1 ? 3 : 0;
    auto c = compile(m, o);
    ASSERT_TRUE(c) << m.name;
    int64_t resident = 0, matrices = 0;
    for (const Param& p : params(*c->module))
      if (p.matrix) {
        resident += p.residentElements;
        ++matrices;
      }
    double expected = double(expectedMatrixElementsPerTpRank(m, tp)) / dp;
    EXPECT_GE(resident, expected) << m.name << " tp=" << tp << " dp=" << dp;
    EXPECT_LE(resident, expected + matrices * (dp - 1)) << m.name << " tp=" << tp << " dp=" << dp;
  }
}

// Offload keeps every parameter in host memory and copies each to the
// device once.
TEST_P(Models, OffloadPrefetchesEachParameterOnce) {
  const ModelConfig& m = GetParam();
  sharding::ShardingOptions o;
  o.tp = 2;
  o.dp = 2;
  o.zeroStage = 3;
  o.offload = sharding::ShardingOptions::Offload::Cpu;
  auto c = compile(m, o);
  ASSERT_TRUE(c);
  int64_t shards = 0, prefetches = 0;
  c->module->walk([&](dist::WeightShardOp s) {
    ++shards;
    EXPECT_EQ(s.getSpace(), "host");
  });
  c->module->walk([&](dist::PrefetchOp) { ++prefetches; });
  EXPECT_EQ(prefetches, shards);
}

INSTANTIATE_TEST_SUITE_P(Shared, Models, ::testing::Values(kGpt2, kLlama, kBert),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
