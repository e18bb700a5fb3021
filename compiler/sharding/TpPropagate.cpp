//===- TpPropagate.cpp - --zplan-tp-propagate -----------------------------===//
//
// Seeds Megatron shardings on weights and carries them through the graph, in
// one forward walk (SSA order is a topological order of the graph). Each op
// states its rule through TpShardingOpInterface (dialects/graph/
// GraphTpRules.cpp); this pass is the walk that asks for the rules, keeps
// what they decided, and is the TpRuleContext they read. Nothing changes but
// attributes: every op with a split or partial result gets
// `zd.result_shardings`, every op that needs an operand in another sharding
// than its producer gives gets `zd.operand_shardings`, and weights get the
// sharding their first consumer asks for.
//
// An op without a rule (not a zg op, or a zg op added without one) is
// refused when a split operand reaches it: the planner cannot know whether
// computing it whole is right (it may write state, or depend on the rank),
// and gathering for it would spend memory and bandwidth no rule chose. An op
// that is right whole says so with the ZG_TpWhole rule. Whole operands reach
// such an op unchanged: it computes whole results, as it would without tp.
//
// A training step (a function holding zg.adamw) is planned by the same walk:
// the backward ops come after the forward ones in SSA order. There, a
// trained parameter is one tensor with one sharding (its first consumer's):
// zg.adamw updates it in place, so a second, differently sliced load would go
// stale after the first step. Other consumers get it through a collective or
// a rank-local slice (zd.local_slice), which partition inserts; any whole
// activation may be asked for split that way too, since every rank holds it.
// Moments (zg.state) take their parameter's sharding, in every function.
//
//===----------------------------------------------------------------------===//

#include "compiler/sharding/Passes.h"
#include "compiler/sharding/Sharding.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace zplan::sharding {
#define GEN_PASS_DEF_ZPLANTPPROPAGATE
#include "compiler/sharding/Passes.h.inc"
} // namespace zplan::sharding

using namespace mlir;
using namespace zplan;
using namespace zplan::sharding;
namespace zg = zplan::graph;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }
int64_t rankOf(Value v) { return rtt(v).getRank(); }

bool isSliceable(Value v) {
  Operation *def = v.getDefiningOp();
  return def && isa<zg::WeightOp, zg::ConstantOp>(def);
}

/// The shardings every program of a module must agree on: a persistent
/// tensor (parameter or state) has one local type in all of them, since two
/// programs that name it mean the same bytes.
struct ModulePlan {
  /// Names of the trained parameters (zg.weight written by some program).
  llvm::StringSet<> params;
  /// Parameter shardings (and global shapes) by name, once decided.
  llvm::StringMap<std::pair<Shard, SmallVector<int64_t>>> weights;
  /// zg.state shardings by name.
  llvm::StringMap<Shard> states;
};

/// The walk over one function, and the context the ops' rules read.
class Propagator : public zg::TpRuleContext {
public:
  Propagator(func::FuncOp func, int64_t tp, ModulePlan &plan)
      : func(func), tpSize(tp), ctx(func.getContext()), plan(plan) {
    func.walk([&](Operation *op) {
      // A generation program's KV cache (docs/generation.md) is state, but
      // its program is a forward pass: the inference rules apply.
      auto st = dyn_cast<zg::StateOp>(op);
      if (isa<zg::AdamwOp, zg::AccumulateOp>(op) ||
          (st && st.getKind() != "kv_cache"))
        train = true;
    });
    // Parameters another program already decided keep that sharding.
    func.walk([&](zg::WeightOp w) {
      auto it = plan.weights.find(w.getName());
      if (!train || !isParam(w.getResult()) || it == plan.weights.end())
        return;
      decided.insert(w.getResult());
      if (!it->second.first.isReplicated())
        state[w.getResult()] = it->second.first;
    });
  }

  LogicalResult run();

  /// What the walk decided, for the pass statistics.
  struct Counts {
    int64_t column = 0, row = 0, vocab = 0, reshards = 0;
  } counts;

  // TpRuleContext.
  int64_t tp() const override { return tpSize; }
  bool training() const override { return train; }
  Shard get(Value v) const override {
    auto it = state.find(v);
    return it == state.end() ? Shard::replicated(rankOf(v)) : it->second;
  }
  bool canProvide(Value v, const Shard &want) const override {
    Shard e = eff(v);
    if (e == want)
      return true;
    if (isSliceable(v) && !(train && decided.count(v)))
      return true;
    return train && e.isReplicated() && !want.partial && want.blocks == tpSize;
  }
  std::optional<Shard> paramShard(Value v) const override {
    if (!train || !decided.count(v))
      return std::nullopt;
    return get(v);
  }
  std::optional<Shard> stateShard(StringRef name) const override {
    auto it = plan.states.find(name);
    if (it == plan.states.end())
      return std::nullopt;
    return it->second;
  }
  std::optional<Shard>
  paramShardByName(StringRef name, ArrayRef<int64_t> shape) const override {
    auto it = plan.weights.find(name);
    if (it == plan.weights.end() ||
        ArrayRef<int64_t>(it->second.second) != shape)
      return std::nullopt;
    return it->second.first;
  }
  void setShard(Value v, const Shard &s) override {
    if (s.isReplicated())
      state.erase(v);
    else
      state[v] = s;
  }
  void count(zg::TpSplitKind kind) override {
    switch (kind) {
    case zg::TpSplitKind::Column:
      ++counts.column;
      break;
    case zg::TpSplitKind::Row:
      ++counts.row;
      break;
    case zg::TpSplitKind::Vocab:
      ++counts.vocab;
      break;
    }
  }

private:
  FailureOr<zg::TpRule> ruleFor(Operation *op);

  /// Whether `v` is a trained parameter of the module.
  bool isParam(Value v) const {
    auto w = v.getDefiningOp<zg::WeightOp>();
    return w && plan.params.contains(w.getName());
  }
  /// Fixes a parameter's sharding for every program.
  void decide(Value v, const Shard &s) {
    decided.insert(v);
    if (!s.isReplicated())
      state[v] = s;
    plan.weights[v.getDefiningOp<zg::WeightOp>().getName()] = {
        s, SmallVector<int64_t>(rtt(v).getShape())};
  }

  func::FuncOp func;
  int64_t tpSize;
  MLIRContext *ctx;
  DenseMap<Value, Shard> state;
  llvm::MapVector<Operation *, SmallVector<Shard>> requirements;
  ModulePlan &plan;
  /// Whether the function is a training program (it writes state).
  bool train = false;
  /// Parameters whose one sharding is fixed (by their first consumer).
  llvm::DenseSet<Value> decided;
};

} // namespace

namespace {
struct ZplanTpPropagatePass
    : zplan::sharding::impl::ZplanTpPropagateBase<ZplanTpPropagatePass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

// The op's own rule, checked to give one sharding per operand and result; for
// an op without a rule, whole operands and results when nothing reaches it
// split, an error otherwise.
FailureOr<zg::TpRule> Propagator::ruleFor(Operation *op) {
  auto iface = dyn_cast<zg::TpShardingOpInterface>(op);
  if (!iface) {
    for (OpOperand &use : op->getOpOperands()) {
      Shard e = eff(use.get());
      if (e.isReplicated())
        continue;
      return op->emitOpError("has no tensor-parallel rule, but its operand ")
             << use.getOperandNumber() << " arrives split as "
             << toAttr(e, ctx, tpSize) << " at tp = " << tpSize
             << "; give the op a rule (TpShardingOpInterface), or keep the "
                "value whole before it";
    }
    return zg::wholeTpRule(op);
  }
  FailureOr<zg::TpRule> rule = iface.getTpRule(*this);
  if (failed(rule))
    return failure();
  if (rule->operands.size() != op->getNumOperands() ||
      rule->results.size() != op->getNumResults())
    return op->emitOpError("tensor-parallel rule gives ")
           << rule->operands.size() << " operand and " << rule->results.size()
           << " result shardings for " << op->getNumOperands()
           << " operands and " << op->getNumResults() << " results";
  return rule;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

LogicalResult Propagator::run() {
  bool failed = false;
  func.walk([&](Operation *op) {
    if (failed || op == func.getOperation())
      return;
    if (isa<func::ReturnOp>(op)) {
      SmallVector<Shard> req;
      for (Value v : op->getOperands())
        req.push_back(Shard::replicated(rankOf(v)));
      requirements[op] = req;
      return;
    }
    if (!llvm::all_of(op->getOperandTypes(), llvm::IsaPred<RankedTensorType>) ||
        !llvm::all_of(op->getResultTypes(), llvm::IsaPred<RankedTensorType>))
      return;
    FailureOr<zg::TpRule> rule = ruleFor(op);
    if (mlir::failed(rule)) {
      failed = true;
      return;
    }
    for (auto [v, s] : llvm::zip(op->getResults(), rule->results))
      if (!s.isReplicated())
        state[v] = s;
    if (op->getNumOperands())
      requirements[op] = rule->operands;
    // A trained parameter is fixed by its first consumer, before the next
    // op's rule reads it.
    if (train && op->getNumOperands() && !writtenTarget(op))
      for (auto [v, req] : llvm::zip(op->getOperands(), rule->operands))
        if (isParam(v) && !decided.count(v))
          decide(v, req);
  });
  if (failed)
    return failure();

  // A weight takes the sharding its first consumer asks for; consumers that
  // ask for another get their own copy in partition.
  func.walk([&](Operation *op) {
    auto it = requirements.find(op);
    if (it == requirements.end())
      return;
    for (auto [v, req] : llvm::zip(op->getOperands(), it->second)) {
      bool persistent = isSliceable(v) || v.getDefiningOp<zg::StateOp>();
      if (persistent && !state.count(v) && !decided.count(v) &&
          !req.isReplicated())
        state[v] = req;
    }
  });
  // Moments and other state take the sharding their writer asked for; later
  // functions (@init) read it from here, and parameters that only a write
  // used are decided now.
  func.walk([&](zg::StateOp st) {
    if (!plan.states.count(st.getName()))
      plan.states[st.getName()] = get(st.getResult());
  });
  func.walk([&](zg::WeightOp w) {
    if (train && isParam(w.getResult()) && !decided.count(w.getResult()))
      decide(w.getResult(), get(w.getResult()));
  });

  Builder b(ctx);
  func.walk([&](Operation *op) {
    if (op == func.getOperation())
      return;
    SmallVector<Attribute> results;
    bool anySplit = false;
    for (Value v : op->getResults()) {
      if (!isa<RankedTensorType>(v.getType()))
        continue;
      Shard s = get(v);
      anySplit |= !s.isReplicated();
      results.push_back(toAttr(s, ctx, tpSize));
    }
    if (anySplit)
      op->setAttr(kResultShardings, b.getArrayAttr(results));
    auto it = requirements.find(op);
    if (it == requirements.end())
      return;
    SmallVector<Attribute> operands;
    bool differs = false;
    for (auto [v, req] : llvm::zip(op->getOperands(), it->second)) {
      if (req != eff(v)) {
        differs = true;
        if (!isSliceable(v) || decided.count(v))
          ++counts.reshards;
      }
      operands.push_back(toAttr(req, ctx, tpSize));
    }
    if (differs)
      op->setAttr(kOperandShardings, b.getArrayAttr(operands));
  });
  return success();
}

void ZplanTpPropagatePass::runOnOperation() {
  ModuleOp module = getOperation();
  int64_t tp = dist::getMeshAxisSize(module, "tp");
  if (tp < 1) {
    module.emitError("zd.tp must be at least 1, got ") << tp;
    return signalPassFailure();
  }
  // With one tp rank every tensor is whole: nothing to annotate.
  if (tp == 1)
    return;
  // The trained parameters: weights some program writes.
  ModulePlan plan;
  module.walk([&](Operation *op) {
    if (Value t = writtenTarget(op))
      if (auto w = t.getDefiningOp<zg::WeightOp>())
        plan.params.insert(w.getName());
  });
  // Programs that run the forward (the train step, the micro-step) go first:
  // a parameter takes its first forward consumer's sharding, and the state
  // of the update and @init programs follows.
  SmallVector<func::FuncOp> funcs;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal())
      funcs.push_back(func);
  auto readsParams = [&](func::FuncOp f) {
    bool reads = false;
    f.walk([&](zg::WeightOp w) {
      if (plan.params.contains(w.getName()))
        for (Operation *u : w->getUsers())
          reads |= writtenTarget(u) != w.getResult();
    });
    return reads;
  };
  llvm::stable_sort(funcs, [&](func::FuncOp a, func::FuncOp b) {
    return readsParams(a) && !readsParams(b);
  });
  for (auto func : funcs) {
    Propagator prop(func, tp, plan);
    if (failed(prop.run()))
      return signalPassFailure();
    numColumnSplit += prop.counts.column;
    numRowSplit += prop.counts.row;
    numVocabSplit += prop.counts.vocab;
    numReshards += prop.counts.reshards;
  }
}
