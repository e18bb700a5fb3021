//===- Sharding.h - tp sharding of one tensor -------------------*- C++ -*-===//
//
// The tp passes' view of a `#zd.sharding` (the in-memory form, TpShard, is
// declared with the ops' tp rules in dialects/graph), and the shape
// arithmetic every tp pass shares: rank-local shapes and the weight pieces of
// docs/dist-contract.md.
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

/// The tp sharding of one tensor; ops state their rules in these terms
/// (dialects/graph/TpShardingOpInterface.h).
using Shard = graph::TpShard;
using graph::mapReshapeDim;

/// The `#zd.sharding` form of `s` for a tp group of `tp` ranks, and back.
dist::ShardingAttr toAttr(const Shard &s, mlir::MLIRContext *ctx, int64_t tp);
Shard fromAttr(dist::ShardingAttr attr, int64_t tp);

/// The persistent value an op writes in place (zg.adamw's parameter,
/// zg.assign's and zg.accumulate's target), or null: a weight written so is
/// a trained parameter, one tensor with one sharding in every program.
mlir::Value writtenTarget(mlir::Operation *op);

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

/// Byte size of a tensor type.
int64_t byteSize(mlir::RankedTensorType type);

/// A zd.weight_shard of `w` at the builder's point: this dp rank's flat part
/// of `shard` elements, loaded from w's source (file or inline value, tp
/// pieces). `role` ("param", "master") becomes zd.role when not empty.
mlir::Value createWeightShard(mlir::OpBuilder &b, graph::WeightOp w, int64_t dp,
                              int64_t shard, llvm::StringRef role = "",
                              bool onHost = false);

} // namespace zplan::sharding

#endif // ZPLAN_COMPILER_SHARDING_SHARDING_H
