//===- TpPartition.cpp - --zplan-tp-partition -----------------------------===//
//
// Rewrites an annotated graph (--zplan-tp-propagate) to rank-local shapes:
// every result type becomes its rank-local type, a partial sum gets its
// all_reduce right after the producer, an operand that its consumer needs in
// another sharding is converted (an all_gather for activations, a differently
// sliced copy for weights and constants), and weights record how each tp
// index assembles its local tensor (zd.source_shape, zd.pieces).
//
// In a training step a trained parameter and its state are one tensor each:
// a consumer that needs another sharding gets a collective or a rank-local
// slice (zd.local_slice) of it, never a second load, and so does any whole
// activation a consumer needs split.
//
//===----------------------------------------------------------------------===//

#include "compiler/sharding/Passes.h"
#include "compiler/sharding/Sharding.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"

namespace zplan::sharding {
#define GEN_PASS_DEF_ZPLANTPPARTITION
#include "compiler/sharding/Passes.h.inc"
} // namespace zplan::sharding

using namespace mlir;
using namespace zplan;
using namespace zplan::sharding;
namespace zg = zplan::graph;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

RankedTensorType withShape(RankedTensorType t, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, t.getElementType());
}

/// The global (unsharded) shape of a weight or constant, before or after it
/// was made local.
SmallVector<int64_t> sourceShape(Operation *op) {
  if (auto s = op->getAttrOfType<DenseI64ArrayAttr>(kSourceShape))
    return SmallVector<int64_t>(s.asArrayRef());
  return SmallVector<int64_t>(rtt(op->getResult(0)).getShape());
}

class Partitioner {
public:
  Partitioner(func::FuncOp func, int64_t tp, bool keepLogits,
              const llvm::StringSet<> &params)
      : func(func), tp(tp), keepLogits(keepLogits), params(params),
        ctx(func.getContext()), b(func.getContext()) {}

  LogicalResult run();

  struct Counts {
    int64_t allReduce = 0, allGather = 0, weights = 0;
  } counts;

private:
  Shard have(Value v) const {
    auto it = current.find(v);
    return it == current.end() ? Shard::replicated(rtt(v).getRank())
                               : it->second;
  }
  FailureOr<Value> convert(Operation *user, Value v, const Shard &need);
  Value makeWeight(Operation *source, const Shard &s);
  void localizeWeight(Operation *op, const Shard &s);
  FailureOr<Value> gather(Operation *user, Value v, const Shard &s);
  FailureOr<Value> localSlice(Operation *user, Value v, const Shard &s);
  Value allReduceAfter(Operation *op, Value v);

  func::FuncOp func;
  int64_t tp;
  bool keepLogits;
  /// Names of the trained parameters (written by some program of the module).
  const llvm::StringSet<> &params;
  MLIRContext *ctx;
  OpBuilder b;
  /// The sharding of every rewritten value that is not whole.
  DenseMap<Value, Shard> current;
  /// Conversions made so far, by value and target sharding.
  DenseMap<std::pair<Value, Attribute>, Value> converted;
  /// Global shapes of values before they were made local.
  DenseMap<Value, SmallVector<int64_t>> globalShape;
};

} // namespace

void Partitioner::localizeWeight(Operation *op, const Shard &s) {
  SmallVector<int64_t> global = sourceShape(op);
  auto type = rtt(op->getResult(0));
  op->getResult(0).setType(withShape(type, localShape(global, s)));
  if (s.dim >= 0) {
    op->setAttr(kSourceShape, b.getDenseI64ArrayAttr(global));
    op->setAttr(kPieces, buildPieces(b, global, s, tp));
    ++counts.weights;
  } else {
    op->removeAttr(kSourceShape);
    op->removeAttr(kPieces);
  }
  op->removeAttr(kResultShardings);
}

// A weight or constant asked for in another sharding than it was made in:
// a copy of the op with its own pieces. A constant that must be split becomes
// an inline weight, since only weights carry per-rank slices.
Value Partitioner::makeWeight(Operation *source, const Shard &s) {
  b.setInsertionPointAfter(source);
  Operation *copy;
  auto cst = dyn_cast<zg::ConstantOp>(source);
  if (cst && isa<SplatElementsAttr>(cst.getValue())) {
    // A splat is the same on every rank: a constant of the local shape (the
    // zero moments @init assigns stay constants that ZeRO can re-make).
    auto type = withShape(rtt(cst.getResult()),
                          localShape(rtt(cst.getResult()).getShape(), s));
    auto splat = cast<SplatElementsAttr>(cst.getValue());
    Value local = zg::ConstantOp::create(
        b, source->getLoc(), type,
        DenseElementsAttr::get(type, splat.getSplatValue<Attribute>()));
    if (!s.isReplicated())
      current[local] = s;
    return local;
  }
  if (cst) {
    NamedAttribute attrs[] = {
        b.getNamedAttr("name", b.getStringAttr("constant")),
        b.getNamedAttr("file", b.getStringAttr("")),
        b.getNamedAttr("offset", b.getI64IntegerAttr(0)),
        b.getNamedAttr("length", b.getI64IntegerAttr(0)),
        b.getNamedAttr("value", cst.getValue())};
    copy = zg::WeightOp::create(b, source->getLoc(),
                                TypeRange{cst.getResult().getType()},
                                ValueRange{}, attrs);
  } else {
    copy = b.clone(*source);
    SmallVector<int64_t> global = sourceShape(source);
    copy->getResult(0).setType(withShape(rtt(source->getResult(0)), global));
  }
  localizeWeight(copy, s);
  if (!s.isReplicated())
    current[copy->getResult(0)] = s;
  return copy->getResult(0);
}

Value Partitioner::allReduceAfter(Operation *op, Value v) {
  b.setInsertionPointAfter(op);
  ++counts.allReduce;
  // A row maximum over a split vocabulary is a partial maximum.
  StringAttr reduction = b.getStringAttr("sum");
  if (auto r = op->getAttrOfType<StringAttr>("zd.partial_reduction"))
    reduction = r;
  op->removeAttr("zd.partial_reduction");
  return dist::AllReduceOp::create(b, op->getLoc(), v.getType(), v,
                                   b.getStringAttr("tp"), reduction)
      .getResult();
}

// Makes a split activation whole: all_gather over tp along the split
// dimension, then undo what the split did to the element order (fused
// segments interleave per rank; a dimension cut into fewer blocks than ranks
// arrives with every block repeated) and drop vocabulary padding.
FailureOr<Value> Partitioner::gather(Operation *user, Value v, const Shard &s) {
  Location loc = v.getLoc();
  auto type = rtt(v);
  SmallVector<int64_t> local(type.getShape());
  int64_t d = s.dim;
  SmallVector<int64_t> global = globalShape.count(v)
                                    ? globalShape[v]
                                    : SmallVector<int64_t>(type.getShape());
  if (Operation *def = v.getDefiningOp())
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(v.getParentBlock());
  SmallVector<int64_t> gathered(local);
  gathered[d] = local[d] * tp;
  ++counts.allGather;
  Value cur =
      dist::AllGatherOp::create(b, loc, withShape(type, gathered), v,
                                b.getStringAttr("tp"), b.getI64IntegerAttr(d))
          .getResult();
  auto reshape = [&](ArrayRef<int64_t> shape) {
    cur =
        zg::ReshapeOp::create(b, loc, withShape(type, shape), cur).getResult();
  };
  SmallVector<int64_t> pre(local.begin(), local.begin() + d);
  SmallVector<int64_t> post(local.begin() + d + 1, local.end());
  auto build = [&](ArrayRef<int64_t> mid) {
    SmallVector<int64_t> out(pre);
    out.append(mid.begin(), mid.end());
    out.append(post.begin(), post.end());
    return out;
  };
  if (s.blocks < tp) {
    // [tp * L] = [blocks, tp / blocks, L]: keep copy 0 of every block.
    int64_t rep = tp / s.blocks;
    SmallVector<int64_t> split3 = build({s.blocks, rep, local[d]});
    reshape(split3);
    SmallVector<int64_t> starts(split3.size(), 0), steps(split3.size(), 1);
    SmallVector<int64_t> taken(split3);
    taken[d + 1] = 1;
    cur = zg::SliceOp::create(b, loc, withShape(type, taken), cur,
                              b.getDenseI64ArrayAttr(starts),
                              b.getDenseI64ArrayAttr(steps))
              .getResult();
    reshape(build({s.blocks * local[d]}));
  }
  if (!s.segments.empty()) {
    int64_t nseg = s.segments.size();
    if (llvm::any_of(s.segments,
                     [&](int64_t x) { return x != s.segments.front(); })) {
      user->emitError("cannot make a value of unequal fused segments whole "
                      "(segments of different sizes)");
      return failure();
    }
    int64_t part = s.segments.front() / s.blocks;
    // [blocks, nseg, part] -> [nseg, blocks, part].
    SmallVector<int64_t> three = build({s.blocks, nseg, part});
    reshape(three);
    SmallVector<int64_t> perm;
    for (int64_t i = 0; i < (int64_t)three.size(); ++i)
      perm.push_back(i);
    std::swap(perm[d], perm[d + 1]);
    SmallVector<int64_t> swapped(three);
    std::swap(swapped[d], swapped[d + 1]);
    cur = zg::TransposeOp::create(b, loc, withShape(type, swapped), cur,
                                  b.getDenseI64ArrayAttr(perm))
              .getResult();
    reshape(build({nseg * s.blocks * part}));
  }
  int64_t whole = rtt(cur).getDimSize(d);
  if (whole != global[d]) {
    // Vocabulary padding: keep the first global[d] entries.
    SmallVector<int64_t> starts(local.size(), 0), steps(local.size(), 1);
    SmallVector<int64_t> out(rtt(cur).getShape());
    out[d] = global[d];
    cur = zg::SliceOp::create(b, loc, withShape(type, out), cur,
                              b.getDenseI64ArrayAttr(starts),
                              b.getDenseI64ArrayAttr(steps))
              .getResult();
  }
  return cur;
}

// Keeps this rank's part of a value that every rank holds whole: one
// zd.local_slice per fused segment (concatenated back), the tail of a
// dimension tp does not divide padded with zeros first, as a weight's
// padding rows are.
FailureOr<Value> Partitioner::localSlice(Operation *user, Value v,
                                         const Shard &s) {
  if (s.blocks != tp) {
    user->emitError("cannot keep one of ")
        << s.blocks << " blocks of a whole value over tp = " << tp
        << " ranks (blocks shared by several ranks)";
    return failure();
  }
  Location loc = v.getLoc();
  auto type = rtt(v);
  int64_t d = s.dim;
  if (Operation *def = v.getDefiningOp())
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(v.getParentBlock());
  auto withDim = [&](int64_t size) {
    SmallVector<int64_t> shape(type.getShape());
    shape[d] = size;
    return withShape(type, shape);
  };
  auto sliceOne = [&](Value x) -> Value {
    int64_t n = rtt(x).getDimSize(d);
    int64_t local = (n + tp - 1) / tp;
    if (local * tp != n) {
      auto padType = withDim(local * tp - n);
      Value zeros = zg::ConstantOp::create(
          b, loc, padType,
          DenseElementsAttr::get(padType,
                                 b.getZeroAttr(type.getElementType())));
      x = zg::ConcatOp::create(b, loc, withDim(local * tp),
                               ValueRange{x, zeros}, d)
              .getResult();
    }
    return dist::LocalSliceOp::create(b, loc, withDim(local), x,
                                      b.getStringAttr("tp"),
                                      b.getI64IntegerAttr(d))
        .getResult();
  };
  if (s.segments.empty())
    return sliceOne(v);
  SmallVector<Value> parts;
  int64_t offset = 0, total = 0;
  for (int64_t seg : s.segments) {
    SmallVector<int64_t> starts(type.getRank(), 0), steps(type.getRank(), 1);
    starts[d] = offset;
    Value part = zg::SliceOp::create(b, loc, withDim(seg), v,
                                     b.getDenseI64ArrayAttr(starts),
                                     b.getDenseI64ArrayAttr(steps))
                     .getResult();
    parts.push_back(sliceOne(part));
    offset += seg;
    total += seg / tp;
  }
  return zg::ConcatOp::create(b, loc, withDim(total), parts, d).getResult();
}

FailureOr<Value> Partitioner::convert(Operation *user, Value v,
                                      const Shard &need) {
  Shard cur = have(v);
  if (cur == need)
    return v;
  auto key = std::make_pair(v, (Attribute)toAttr(need, ctx, tp));
  if (auto it = converted.find(key); it != converted.end())
    return it->second;
  Value result;
  Operation *def = v.getDefiningOp();
  // A trained parameter is one tensor: never a second, differently sliced
  // load that its in-place update would leave stale.
  bool written = false;
  if (auto w = dyn_cast_or_null<zg::WeightOp>(def))
    written = params.contains(w.getName());
  if (def && isa<zg::WeightOp, zg::ConstantOp>(def) && !written) {
    result = makeWeight(def, need);
  } else if (need.isReplicated() && cur.dim >= 0) {
    FailureOr<Value> g = gather(user, v, cur);
    if (failed(g))
      return failure();
    result = *g;
  } else if (!need.partial && need.dim >= 0 && !cur.partial) {
    // Whole on every rank (or made whole first): each keeps its part.
    Value whole = v;
    if (cur.dim >= 0) {
      FailureOr<Value> g = gather(user, v, cur);
      if (failed(g))
        return failure();
      whole = *g;
    }
    FailureOr<Value> sl = localSlice(user, whole, need);
    if (failed(sl))
      return failure();
    result = *sl;
  } else {
    user->emitError("cannot convert an operand split as ")
        << toAttr(cur, ctx, tp) << " to " << toAttr(need, ctx, tp)
        << ": an activation can only be gathered, not re-split";
    return failure();
  }
  converted[key] = result;
  return result;
}

LogicalResult Partitioner::run() {
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front())
    ops.push_back(&op);

  for (Operation *op : ops) {
    // Operands first: they may need a conversion inserted before `op`.
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      Value v = op->getOperand(i);
      if (!isa<RankedTensorType>(v.getType()))
        continue;
      Shard need = have(v);
      if (isa<func::ReturnOp>(op)) {
        if (!keepLogits)
          need = Shard::replicated(rtt(v).getRank());
      } else if (auto req = readShard(op, kOperandShardings, i, tp)) {
        need = *req;
      }
      FailureOr<Value> conv = convert(op, v, need);
      if (failed(conv))
        return failure();
      if (*conv != v)
        op->setOperand(i, *conv);
    }
    op->removeAttr(kOperandShardings);
    if (isa<func::ReturnOp>(op))
      continue;

    SmallVector<Shard> results;
    for (auto [j, r] : llvm::enumerate(op->getResults()))
      results.push_back(readShard(op, kResultShardings, j, tp)
                            .value_or(Shard::replicated(rtt(r).getRank())));
    op->removeAttr(kResultShardings);

    if (isa<zg::WeightOp, zg::ConstantOp>(op)) {
      if (results[0].isReplicated())
        continue;
      Value local = makeWeight(op, results[0]);
      globalShape[local] = sourceShape(op);
      op->getResult(0).replaceAllUsesWith(local);
      // Conversions keyed on the old value now start from the new one.
      current[local] = results[0];
      op->erase();
      continue;
    }

    for (auto [r, s] : llvm::zip(op->getResults(), results)) {
      globalShape[r] = SmallVector<int64_t>(rtt(r).getShape());
      r.setType(withShape(rtt(r), localShape(rtt(r).getShape(), s)));
    }

    // Ops that index a vocabulary split over tp offset their ids by this
    // rank's block of rows.
    auto rule = dyn_cast<zg::TpShardingOpInterface>(op);
    if (int64_t stride = rule ? rule.getTpVocabStride(results) : 0)
      op->setAttr(kVocabStride, b.getI64IntegerAttr(stride));

    // A partial sum is reduced right after its producer, so every consumer
    // sees a whole value.
    if (results.size() == 1 && results[0].partial) {
      Value res = op->getResult(0);
      // An addend the op must not add on every rank (a linear's bias) is
      // added once, after the sum.
      Value addend;
      std::optional<unsigned> i;
      if (rule && (i = rule.getTpAddendAfterSum())) {
        addend = op->getOperand(*i);
        op->eraseOperand(*i);
      }
      Value reduced = allReduceAfter(op, res);
      Value final = reduced;
      if (addend) {
        b.setInsertionPointAfter(reduced.getDefiningOp());
        final =
            zg::AddOp::create(b, op->getLoc(), res.getType(), reduced, addend)
                .getResult();
      }
      res.replaceAllUsesExcept(final, reduced.getDefiningOp());
      continue;
    }
    for (auto [r, s] : llvm::zip(op->getResults(), results))
      if (!s.isReplicated())
        current[r] = s;
  }

  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  func.setType(
      FunctionType::get(ctx, func.getArgumentTypes(), ret.getOperandTypes()));
  return success();
}

namespace {
struct ZplanTpPartitionPass
    : zplan::sharding::impl::ZplanTpPartitionBase<ZplanTpPartitionPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t tp = dist::getMeshAxisSize(module, "tp");
    llvm::StringSet<> params;
    module.walk([&](Operation *op) {
      if (Value t = writtenTarget(op))
        if (auto w = t.getDefiningOp<zg::WeightOp>())
          params.insert(w.getName());
    });
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      Partitioner part(func, tp, keepLogitsSharded, params);
      if (failed(part.run()))
        return signalPassFailure();
      numAllReduce += part.counts.allReduce;
      numAllGather += part.counts.allGather;
      numWeightsSplit += part.counts.weights;
    }
    // Every op must be consistent with its rank-local operands now.
    if (failed(verify(module)))
      return signalPassFailure();
  }
};
} // namespace
