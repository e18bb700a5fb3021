//===- TpShardingOpInterface.h - tp rules of zg ops -------------*- C++ -*-===//
//
// The types through which each zg op states its tensor-parallel rule
// (TpShardingOpInterface.td describes the contract): the sharding of one
// tensor over the tp axis, a rule, and the context the propagation hands a
// rule. The `#zd.sharding` attribute form of a TpShard lives with the tp
// passes (compiler/sharding/Sharding.h): the graph dialect does not depend on
// the distribution dialect.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_GRAPH_TPSHARDINGOPINTERFACE_H
#define ZPLAN_DIALECTS_GRAPH_TPSHARDINGOPINTERFACE_H

#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace zplan::graph {

/// The sharding of one tensor over tp: at most one dimension is split (a mesh
/// axis can split one dimension only), possibly into fewer blocks than ranks
/// (GQA K/V head replication) and possibly as fused segments (QKV), or the
/// tensor is a partial sum.
struct TpShard {
  int64_t rank = 0;
  /// The tp-split dimension, or -1 when the tensor is whole on every rank.
  int64_t dim = -1;
  /// Number of blocks along `dim` (tp, or fewer: block = tp index / (tp /
  /// blocks)).
  int64_t blocks = 1;
  /// Global sizes of fused segments along `dim`, each split on its own.
  llvm::SmallVector<int64_t> segments;
  /// A partial sum over tp (every rank holds an addend).
  bool partial = false;

  static TpShard replicated(int64_t rank) {
    TpShard s;
    s.rank = rank;
    return s;
  }
  static TpShard split(int64_t rank, int64_t dim, int64_t blocks,
                       llvm::ArrayRef<int64_t> segments = {}) {
    TpShard s;
    s.rank = rank;
    s.dim = dim;
    s.blocks = blocks;
    s.segments.assign(segments.begin(), segments.end());
    return s;
  }
  bool isReplicated() const { return dim < 0 && !partial; }
  bool operator==(const TpShard &o) const {
    return rank == o.rank && dim == o.dim && blocks == o.blocks &&
           segments == o.segments && partial == o.partial;
  }
  bool operator!=(const TpShard &o) const { return !(*this == o); }
};

/// An op's rule: the sharding it needs of each operand and the sharding it
/// gives each result, one entry each.
struct TpRule {
  llvm::SmallVector<TpShard> operands;
  llvm::SmallVector<TpShard> results;
};

/// The decisions --zplan-tp-propagate counts for its statistics.
enum class TpSplitKind { Column, Row, Vocab };

/// What a rule may ask of the propagation walk.
class TpRuleContext {
public:
  virtual ~TpRuleContext() = default;
  /// The number of ranks of the tp axis.
  virtual int64_t tp() const = 0;
  /// Whether the function is a training step (it writes persistent state):
  /// trained parameters have one sharding, and whole values may be sliced.
  virtual bool training() const = 0;
  /// The sharding the walk gave `v` so far, a partial sum included.
  virtual TpShard get(mlir::Value v) const = 0;
  /// What a consumer sees of `v`: a partial sum is reduced right after its
  /// producer.
  TpShard eff(mlir::Value v) const {
    TpShard s = get(v);
    return s.partial ? TpShard::replicated(s.rank) : s;
  }
  /// Whether an operand whose consumer wants it as `want` can be made so: it
  /// already is, it is a weight or constant sliced at load time, or (in a
  /// training step) it is whole on every rank and can be sliced locally.
  virtual bool canProvide(mlir::Value v, const TpShard &want) const = 0;
  /// A trained parameter's one sharding once its first consumer decided it;
  /// nullopt for anything else, and outside training steps.
  virtual std::optional<TpShard> paramShard(mlir::Value v) const = 0;
  /// The sharding a program of the module fixed for the zg.state `name`.
  virtual std::optional<TpShard> stateShard(llvm::StringRef name) const = 0;
  /// The sharding a program fixed for the trained parameter `name`, when its
  /// global shape is `shape`.
  virtual std::optional<TpShard>
  paramShardByName(llvm::StringRef name,
                   llvm::ArrayRef<int64_t> shape) const = 0;
  /// Gives `v` a sharding during the walk, before its consumers' rules run
  /// (a KV cache takes the sharding of what its writer stores).
  virtual void setShard(mlir::Value v, const TpShard &s) = 0;
  /// Counts a decision for the pass statistics.
  virtual void count(TpSplitKind kind) = 0;
};

/// The rule of an op computed whole on every rank.
TpRule wholeTpRule(mlir::Operation *op);

/// The elementwise rule (numpy broadcasting): the result is split where a
/// non-broadcast operand is; every other operand must be split the same way,
/// be broadcast along that dimension, or be one the context can provide
/// split. `excludedDim` is a result dimension that must stay whole (a
/// concatenation's axis).
TpRule elementwiseTpRule(mlir::Operation *op, TpRuleContext &ctx,
                         int64_t excludedDim = -1);

/// Maps dimension `d` of a reshape's input to the result dimension that
/// carries its split into `blocks` parts, or -1 when the split cannot pass
/// (it is not the outermost dimension of its reshape group, or the result
/// dimension does not divide). Groups are the runs of input and result
/// dimensions with equal element counts. ZeRO's batch split uses it too.
int64_t mapReshapeDim(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> out,
                      int64_t d, int64_t blocks, bool hasSegments);

/// The trait behind ZG_TpElementwise: the op's rule is elementwiseTpRule.
template <typename ConcreteType>
class TpElementwise
    : public mlir::OpTrait::TraitBase<ConcreteType, TpElementwise> {
public:
  mlir::FailureOr<TpRule> getTpRule(TpRuleContext &ctx) {
    return elementwiseTpRule(this->getOperation(), ctx);
  }
};

/// The trait behind ZG_TpWhole: the op is computed whole on every rank.
template <typename ConcreteType>
class TpWhole : public mlir::OpTrait::TraitBase<ConcreteType, TpWhole> {
public:
  mlir::FailureOr<TpRule> getTpRule(TpRuleContext &) {
    return wholeTpRule(this->getOperation());
  }
};

} // namespace zplan::graph

#include "dialects/graph/TpShardingOpInterface.h.inc"

#endif // ZPLAN_DIALECTS_GRAPH_TPSHARDINGOPINTERFACE_H
