//===- Sharding.h - tp sharding of one tensor -------------------*- C++ -*-===//
//
// The in-memory form of a `#zd.sharding` used by the tensor-parallel passes:
// at most one dimension of a tensor is split over tp (a mesh axis can split
// one dimension only), possibly into fewer blocks than ranks (GQA K/V head
// replication) and possibly as fused segments (QKV), or the tensor is a
// partial sum. Also the shape arithmetic every tp pass shares: rank-local
// shapes and the weight pieces of docs/dist-contract.md.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_SHARDING_SHARDING_H
#define ZPLAN_COMPILER_SHARDING_SHARDING_H

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

namespace zplan::sharding {

/// Attribute names the tp passes use (docs/dist-contract.md).
inline constexpr llvm::StringLiteral kResultShardings = "zd.result_shardings";
inline constexpr llvm::StringLiteral kOperandShardings = "zd.operand_shardings";
inline constexpr llvm::StringLiteral kSourceShape = "zd.source_shape";
inline constexpr llvm::StringLiteral kPieces = "zd.pieces";
inline constexpr llvm::StringLiteral kVocabStride = "zd.vocab_stride";
inline constexpr llvm::StringLiteral kSpace = "zd.space";
inline constexpr llvm::StringLiteral kBatchSplit = "zd.batch_split";

struct Shard {
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

  static Shard replicated(int64_t rank) {
    Shard s;
    s.rank = rank;
    return s;
  }
  static Shard split(int64_t rank, int64_t dim, int64_t blocks,
                     llvm::ArrayRef<int64_t> segments = {}) {
    Shard s;
    s.rank = rank;
    s.dim = dim;
    s.blocks = blocks;
    s.segments.assign(segments.begin(), segments.end());
    return s;
  }
  bool isReplicated() const { return dim < 0 && !partial; }
  bool operator==(const Shard &o) const {
    return rank == o.rank && dim == o.dim && blocks == o.blocks &&
           segments == o.segments && partial == o.partial;
  }
  bool operator!=(const Shard &o) const { return !(*this == o); }

  dist::ShardingAttr toAttr(mlir::MLIRContext *ctx, int64_t tp) const;
  static Shard fromAttr(dist::ShardingAttr attr, int64_t tp);
};

/// The rank-local shape of a tensor of global shape `shape` under `s`: the
/// split dimension becomes ceil(size / blocks) (padding for vocabularies), or
/// the sum of the segments' blocks.
llvm::SmallVector<int64_t> localShape(llvm::ArrayRef<int64_t> shape,
                                      const Shard &s);

/// The `zd.pieces` attribute of a weight of global shape `shape` under `s`
/// for a tp group of `tp` ranks: one list of boxes per tp index.
mlir::ArrayAttr buildPieces(mlir::Builder &b, llvm::ArrayRef<int64_t> shape,
                            const Shard &s, int64_t tp);

/// Reads the `i`th entry of an op's `zd.result_shardings` (or
/// `zd.operand_shardings`); nullopt when absent.
std::optional<Shard> readShard(mlir::Operation *op, llvm::StringRef attrName,
                               unsigned i, int64_t tp);

/// Maps dimension `d` of a reshape's input to the result dimension that
/// carries its split into `blocks` parts, or -1 when the split cannot pass
/// (it is not the outermost dimension of its reshape group, or the result
/// dimension does not divide). Groups are the runs of input and result
/// dimensions with equal element counts.
int64_t mapReshapeDim(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> out,
                      int64_t d, int64_t blocks, bool hasSegments);

/// Byte size of a tensor type.
int64_t byteSize(mlir::RankedTensorType type);

/// A zd.weight_shard of `w` at the builder's point: this dp rank's flat part
/// of `shard` elements, loaded from w's source (file or inline value, tp
/// pieces). `role` ("param", "master") becomes zd.role when not empty.
mlir::Value createWeightShard(mlir::OpBuilder &b, graph::WeightOp w,
                              int64_t dp, int64_t shard,
                              llvm::StringRef role = "", bool onHost = false);

} // namespace zplan::sharding

#endif // ZPLAN_COMPILER_SHARDING_SHARDING_H
