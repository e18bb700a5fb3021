//===- Zero.cpp - --zplan-zero --------------------------------------------===//
//
// ZeRO over the dp axis, for inference:
//  - with dp > 1 (any stage) every dp group takes its rows of the global
//    batch: function arguments are divided along dimension 0 and the batch
//    dimension is followed through the graph, dividing every type that
//    carries it;
//  - stage 3 partitions each parameter of at least persist-threshold bytes
//    into flat dp shards, gathers it before its first use (earlier, within
//    the prefetch window and the cap on live gathered bytes) and releases it
//    after its last use.
//
//===----------------------------------------------------------------------===//

#include "compiler/sharding/BatchSplit.h"
#include "compiler/sharding/Passes.h"
#include "compiler/sharding/Sharding.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace zplan::sharding {
#define GEN_PASS_DEF_ZPLANZERO
#include "compiler/sharding/Passes.h.inc"
} // namespace zplan::sharding

using namespace mlir;
using namespace zplan;
using namespace zplan::sharding;
namespace zg = zplan::graph;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

//===----------------------------------------------------------------------===//
// Batch split
//===----------------------------------------------------------------------===//

class BatchSplitter {
public:
  BatchSplitter(func::FuncOp func, int64_t dp) : func(func), dp(dp) {}
  LogicalResult run();

private:
  int64_t bd(Value v) const {
    auto it = batchDim.find(v);
    return it == batchDim.end() ? -1 : it->second;
  }
  /// Gives operand `i` of `op`, which lacks the batch dimension but has the
  /// full batch at result dimension `rd`, this dp group's rows. Such values
  /// come from constants and shapes only, so every row is the same and the
  /// first rows serve every dp group.
  LogicalResult sliceOperand(Operation *op, unsigned i, int64_t rd,
                             ArrayRef<int64_t> resultShape);
  FailureOr<SmallVector<int64_t>> resultDims(Operation *op,
                                             ArrayRef<int64_t> resultShape);

  func::FuncOp func;
  int64_t dp;
  DenseMap<Value, int64_t> batchDim;
};

LogicalResult BatchSplitter::sliceOperand(Operation *op, unsigned i, int64_t rd,
                                          ArrayRef<int64_t> resultShape) {
  Value v = op->getOperand(i);
  auto type = rtt(v);
  int64_t local = rd - ((int64_t)resultShape.size() - type.getRank());
  if (local < 0 || type.getDimSize(local) == 1)
    return success();
  if (type.getDimSize(local) != resultShape[rd])
    return op->emitError("cannot split the batch: operand ")
           << i << " has " << type.getDimSize(local) << " rows, expected "
           << resultShape[rd];
  OpBuilder b(op);
  SmallVector<int64_t> shape(type.getShape());
  shape[local] /= dp;
  SmallVector<int64_t> starts(shape.size(), 0), steps(shape.size(), 1);
  Value sliced =
      zg::SliceOp::create(
          b, op->getLoc(), RankedTensorType::get(shape, type.getElementType()),
          v, b.getDenseI64ArrayAttr(starts), b.getDenseI64ArrayAttr(steps))
          .getResult();
  op->setOperand(i, sliced);
  batchDim[sliced] = local;
  return success();
}

// The result dimension carrying the batch for each result (-1: none), or an
// error when the op cannot keep the batch split.
FailureOr<SmallVector<int64_t>>
BatchSplitter::resultDims(Operation *op, ArrayRef<int64_t> resultShape) {
  unsigned nres = op->getNumResults();
  SmallVector<int64_t> none(nres, -1);
  bool any =
      llvm::any_of(op->getOperands(), [&](Value v) { return bd(v) >= 0; });
  if (!any)
    return none;
  int64_t rank = resultShape.size();
  auto fail = [&](const Twine &why) -> FailureOr<SmallVector<int64_t>> {
    op->emitError("cannot split the batch over dp = ") << dp << ": " << why;
    return failure();
  };
  auto aligned = [&](Value v) {
    return bd(v) < 0 ? -1 : bd(v) + rank - rtt(v).getRank();
  };
  // Ops whose operands align to the result from the right.
  auto alignedOp = [&](int64_t excluded) -> FailureOr<SmallVector<int64_t>> {
    int64_t rd = -1;
    for (Value v : op->getOperands()) {
      int64_t a = aligned(v);
      if (a < 0)
        continue;
      if (rd >= 0 && a != rd)
        return fail("operands carry the batch in different dimensions");
      rd = a;
    }
    if (rd == excluded)
      return fail("the op works along the batch dimension");
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      if (bd(op->getOperand(i)) < 0 &&
          failed(sliceOperand(op, i, rd, resultShape)))
        return failure();
    return SmallVector<int64_t>(nres, rd);
  };

  if (isa<zg::NegOp, zg::ExpOp, zg::LogOp, zg::SqrtOp, zg::ReciprocalOp,
          zg::TanhOp, zg::ErfOp, zg::SigmoidOp, zg::ReluOp, zg::CosOp,
          zg::SinOp, zg::AbsOp, zg::SiluOp, zg::NotOp, zg::IsNanOp, zg::CastOp,
          zg::GeluOp, zg::AddOp, zg::SubOp, zg::MulOp, zg::DivOp, zg::PowOp,
          zg::MaxOp, zg::MinOp, zg::EqualOp, zg::LessOp, zg::GreaterOp,
          zg::LessEqualOp, zg::GreaterEqualOp, zg::AndOp, zg::OrOp, zg::WhereOp,
          zg::FloorOp, zg::ModOp, dist::AllReduceOp, dist::BroadcastOp,
          dist::PrefetchOp, dist::EvictOp>(op))
    return alignedOp(-1);
  // A rotary embedding mixes elements of its last dim only.
  if (isa<zg::RotaryOp>(op))
    return alignedOp(rank - 1);
  if (auto cat = dyn_cast<zg::ConcatOp>(op))
    return alignedOp(cat.getAxis());
  if (auto ag = dyn_cast<dist::AllGatherOp>(op))
    return alignedOp(ag.getDim());
  if (auto lin = dyn_cast<zg::LinearOp>(op)) {
    int64_t d = bd(lin.getInput());
    if (d < 0 || d == rank - 1)
      return fail("the batch is not a leading dimension of the input");
    return SmallVector<int64_t>{d};
  }
  if (auto mm = dyn_cast<zg::MatmulOp>(op)) {
    Value a = mm.getLhs(), bv = mm.getRhs();
    int64_t ra = rtt(a).getRank(), rb = rtt(bv).getRank();
    if (ra < 2 || rb < 2)
      return fail("a 1-D matmul operand");
    int64_t da = bd(a), db = bd(bv);
    if (da == ra - 1 || db == rb - 2)
      return fail("the batch is in the contracted dimension");
    if (db == rb - 1 && da < 0)
      return SmallVector<int64_t>{rank - 1};
    if (da == ra - 2 && db < 0)
      return SmallVector<int64_t>{rank - 2};
    return alignedOp(-1);
  }
  if (auto att = dyn_cast<zg::AttentionOp>(op)) {
    for (Value v : {att.getQ(), att.getK(), att.getV()})
      if (bd(v) != 0)
        return fail("q, k and v must carry the batch in dimension 0");
    if (Value mask = att.getMask())
      if (bd(mask) < 0) {
        SmallVector<int64_t> scores(rtt(att.getQ()).getShape());
        scores[0] *= dp;
        scores[3] = rtt(att.getK()).getDimSize(2);
        if (failed(sliceOperand(op, 3, 0, scores)))
          return failure();
      }
    return SmallVector<int64_t>{0};
  }
  if (isa<zg::SoftmaxOp, zg::LayerNormOp, zg::RmsNormOp>(op)) {
    int64_t d = bd(op->getOperand(0));
    int64_t first = rank - 1;
    if (auto sm = dyn_cast<zg::SoftmaxOp>(op))
      first = sm.getAxis() == d ? d : rank;
    if (auto ln = dyn_cast<zg::LayerNormOp>(op))
      first = ln.getAxis();
    if (d >= first)
      return fail("the batch dimension is normalised over");
    return SmallVector<int64_t>{d};
  }
  if (isa<zg::ReduceSumOp, zg::ReduceMeanOp, zg::ReduceMaxOp, zg::ReduceMinOp,
          zg::ReduceProdOp>(op)) {
    auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
    bool keep = op->getAttrOfType<BoolAttr>("keepdims").getValue();
    int64_t d = bd(op->getOperand(0));
    if (llvm::is_contained(axes, d))
      return fail("the batch dimension is reduced");
    if (!keep)
      d -= llvm::count_if(axes, [&](int64_t a) { return a < d; });
    return SmallVector<int64_t>{d};
  }
  if (auto tr = dyn_cast<zg::TransposeOp>(op)) {
    int64_t d = bd(tr.getInput());
    return SmallVector<int64_t>{
        (int64_t)(llvm::find(tr.getPerm(), d) - tr.getPerm().begin())};
  }
  if (auto rs = dyn_cast<zg::ReshapeOp>(op)) {
    auto in = rtt(rs.getInput()).getShape();
    SmallVector<int64_t> globalIn(in);
    globalIn[bd(rs.getInput())] *= dp;
    int64_t d =
        mapReshapeDim(globalIn, resultShape, bd(rs.getInput()), dp, false);
    if (d < 0 || resultShape[d] % dp)
      return fail("the reshape moves the batch out of an outermost dimension");
    return SmallVector<int64_t>{d};
  }
  if (auto sl = dyn_cast<zg::SliceOp>(op)) {
    int64_t d = bd(sl.getInput());
    if (sl.getStarts()[d] != 0 || sl.getSteps()[d] != 1 ||
        resultShape[d] != rtt(sl.getInput()).getDimSize(d) * dp)
      return fail("the slice takes part of the batch");
    return SmallVector<int64_t>{d};
  }
  if (auto sp = dyn_cast<zg::SplitOp>(op)) {
    int64_t d = bd(sp.getInput());
    if (d == sp.getAxis())
      return fail("the split cuts the batch dimension");
    return SmallVector<int64_t>(nres, d);
  }
  if (auto ex = dyn_cast<zg::ExpandOp>(op)) {
    int64_t d = aligned(ex.getInput());
    return SmallVector<int64_t>{d};
  }
  if (auto emb = dyn_cast<zg::EmbeddingOp>(op)) {
    if (bd(emb.getTable()) >= 0)
      return fail("the embedding table carries the batch");
    return SmallVector<int64_t>{bd(emb.getIds())};
  }
  if (auto cs = dyn_cast<zg::CumSumOp>(op)) {
    if (bd(cs.getInput()) == cs.getAxis())
      return fail("the cumulative sum runs along the batch dimension");
    return SmallVector<int64_t>{bd(cs.getInput())};
  }
  if (auto tile = dyn_cast<zg::TileOp>(op)) {
    int64_t d = bd(tile.getInput());
    if (tile.getRepeats()[d] != 1)
      return fail("the tile repeats the batch dimension");
    return SmallVector<int64_t>{d};
  }
  if (auto ge = dyn_cast<zg::GatherElementsOp>(op)) {
    int64_t d = bd(ge.getData()), k = bd(ge.getIndices());
    if (d != k)
      return fail("data and indices carry the batch in different dimensions");
    if (d == ge.getAxis())
      return fail("the gather indexes the batch dimension");
    return SmallVector<int64_t>{d};
  }
  if (auto g = dyn_cast<zg::GatherOp>(op)) {
    int64_t axis = g.getAxis();
    int64_t d = bd(g.getData()), k = bd(g.getIndices());
    int64_t idxRank = rtt(g.getIndices()).getRank();
    if (d >= 0 && k >= 0)
      return fail("both data and indices carry the batch");
    if (d == axis)
      return fail("the gather indexes the batch dimension");
    if (d >= 0)
      return SmallVector<int64_t>{d < axis ? d : d + idxRank - 1};
    return SmallVector<int64_t>{axis + k};
  }
  return fail("no batch rule for this op");
}

LogicalResult BatchSplitter::run() {
  Block &body = func.getBody().front();
  OpBuilder b(func.getContext());
  for (BlockArgument arg : body.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.getRank() == 0)
      continue;
    int64_t n = type.getDimSize(0);
    if (n % dp != 0) {
      auto name =
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "zg.name");
      return func.emitError("the global batch ")
             << n << " of input '" << (name ? name.getValue() : StringRef("#"))
             << "' does not divide over dp = " << dp
             << " data-parallel ranks; pick --batch as a multiple of " << dp;
    }
    SmallVector<int64_t> shape(type.getShape());
    shape[0] /= dp;
    arg.setType(RankedTensorType::get(shape, type.getElementType()));
    func.setArgAttr(arg.getArgNumber(), kBatchSplit, b.getUnitAttr());
    batchDim[arg] = 0;
  }

  SmallVector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);
  for (Operation *op : ops) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        if (bd(v) < 0)
          continue;
        if (bd(v) != 0)
          return ret.emitError("result ")
                 << i << " carries the batch in dimension " << bd(v)
                 << ", not 0";
        func.setResultAttr(i, kBatchSplit, b.getUnitAttr());
      }
      continue;
    }
    if (op->getNumResults() == 0)
      continue;
    SmallVector<int64_t> shape(rtt(op->getResult(0)).getShape());
    FailureOr<SmallVector<int64_t>> dims = resultDims(op, shape);
    if (failed(dims))
      return failure();
    for (auto [r, d] : llvm::zip(op->getResults(), *dims)) {
      if (d < 0)
        continue;
      auto type = rtt(r);
      SmallVector<int64_t> local(type.getShape());
      if (local[d] % dp != 0)
        return op->emitError("cannot split dimension ")
               << d << " of size " << local[d] << " over dp = " << dp;
      local[d] /= dp;
      r.setType(RankedTensorType::get(local, type.getElementType()));
      batchDim[r] = d;
    }
  }
  auto ret = body.getTerminator();
  func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                 ret->getOperandTypes()));
  return success();
}

} // namespace

LogicalResult zplan::sharding::splitBatch(func::FuncOp func, int64_t parts) {
  return BatchSplitter(func, parts).run();
}

namespace {

//===----------------------------------------------------------------------===//
// Stage 3: parameter partition
//===----------------------------------------------------------------------===//

struct Param {
  zg::WeightOp weight;
  int64_t bytes;
  int64_t firstUse, lastUse;
};

} // namespace

namespace {
/// Marks the rank-local batch inputs of a training program (integer
/// arguments of rank >= 1: token ids and labels) as split over dp: the
/// runtime hands each dp group its own rows of the global batch.
void markTrainingBatchInputs(func::FuncOp func) {
  Builder b(func.getContext());
  for (BlockArgument arg : func.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (type && type.getRank() >= 1 && isa<IntegerType>(type.getElementType()))
      func.setArgAttr(arg.getArgNumber(), kBatchSplit, b.getUnitAttr());
  }
}

/// Marks every argument and result of rank >= 1 of a generation program
/// (token ids, prompt lengths, positions; next tokens, logits) as split over
/// dp: the program was built for this rank's rows.
void markGenerationBatch(func::FuncOp func) {
  Builder b(func.getContext());
  for (BlockArgument arg : func.getArguments())
    if (cast<RankedTensorType>(arg.getType()).getRank() >= 1)
      func.setArgAttr(arg.getArgNumber(), kBatchSplit, b.getUnitAttr());
  for (auto [i, t] : llvm::enumerate(func.getResultTypes()))
    if (cast<RankedTensorType>(t).getRank() >= 1)
      func.setResultAttr(i, kBatchSplit, b.getUnitAttr());
}

struct ZplanZeroPass : zplan::sharding::impl::ZplanZeroBase<ZplanZeroPass> {
  using Base::Base;
  void runOnOperation() override;
  LogicalResult shardParams(func::FuncOp func, int64_t dp);
};
} // namespace

LogicalResult ZplanZeroPass::shardParams(func::FuncOp func, int64_t dp) {
  Block &body = func.getBody().front();
  DenseMap<Operation *, int64_t> index;
  SmallVector<Operation *> order;
  for (Operation &op : body) {
    index[&op] = order.size();
    order.push_back(&op);
  }
  SmallVector<Param> params;
  for (auto w : body.getOps<zg::WeightOp>()) {
    if (w->use_empty())
      continue;
    int64_t bytes = byteSize(rtt(w.getResult()));
    if (bytes < persistThreshold) {
      ++numPersistent;
      continue;
    }
    Param p{w, bytes, INT64_MAX, -1};
    for (Operation *user : w->getUsers()) {
      Operation *top = body.findAncestorOpInBlock(*user);
      p.firstUse = std::min(p.firstUse, index[top]);
      p.lastUse = std::max(p.lastUse, index[top]);
    }
    params.push_back(p);
  }
  llvm::stable_sort(params, [](const Param &a, const Param &b) {
    return a.firstUse < b.firstUse;
  });

  // Where each gather goes: before op gatherAt[i]. Gathered bytes alive at
  // every op index, to respect max-live-bytes.
  int64_t n = order.size();
  SmallVector<int64_t> live(n + 1, 0);
  SmallVector<int64_t> gatherAt(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    Param &p = params[i];
    if (maxLiveBytes > 0 && p.bytes > maxLiveBytes)
      return p.weight.emitError("parameter '")
             << p.weight.getName() << "' needs " << p.bytes
             << " bytes gathered, more than --max-live-bytes = "
             << (int64_t)maxLiveBytes;
    auto fits = [&](int64_t from) {
      if (maxLiveBytes <= 0)
        return true;
      for (int64_t k = from; k <= p.lastUse; ++k)
        if (live[k] + p.bytes > maxLiveBytes)
          return false;
      return true;
    };
    int64_t pos = p.firstUse;
    int64_t floor = i ? gatherAt[i - 1] : 0;
    // Hoist one parameter at a time while the bytes gathered ahead of use
    // stay within the window.
    int64_t ahead = p.bytes;
    for (int64_t j = (int64_t)i - 1; j >= 0 && prefetchBytes > 0; --j) {
      int64_t cand = params[j].firstUse;
      if (cand < floor || ahead > prefetchBytes || !fits(cand))
        break;
      pos = cand;
      ahead += params[j].bytes;
    }
    if (!fits(pos)) {
      return p.weight.emitError(
                 "gathered parameters exceed --max-live-bytes = ")
             << (int64_t)maxLiveBytes << " when '" << p.weight.getName()
             << "' is gathered (" << p.bytes
             << " bytes); raise the cap or lower --persist-threshold";
    }
    if (pos < p.firstUse)
      ++numHoisted;
    gatherAt[i] = pos;
    for (int64_t k = pos; k <= p.lastUse; ++k)
      live[k] += p.bytes;
  }

  OpBuilder b(func.getContext());
  for (auto [i, p] : llvm::enumerate(params)) {
    zg::WeightOp w = p.weight;
    auto type = rtt(w.getResult());
    int64_t elements = type.getNumElements();
    int64_t shard = (elements + dp - 1) / dp;
    b.setInsertionPoint(w);
    Value shardValue = createWeightShard(b, w, dp, shard);
    b.setInsertionPoint(order[gatherAt[i]]);
    auto gather =
        dist::GatherParamOp::create(b, w.getLoc(), type, shardValue);
    gather->setAttr("zd.bucket", b.getI64IntegerAttr(i));
    b.setInsertionPointAfter(order[p.lastUse]);
    dist::ReleaseOp::create(b, w.getLoc(), gather.getResult());
    w.getResult().replaceAllUsesWith(gather.getResult());
    w->erase();
    ++numSharded;
  }
  return success();
}

void ZplanZeroPass::runOnOperation() {
  ModuleOp module = getOperation();
  int64_t dp = dist::getMeshAxisSize(module, "dp");
  if (stage < 0 || stage > 3) {
    module.emitError("ZeRO stage must be 0, 1, 2 or 3, got ") << (int64_t)stage;
    return signalPassFailure();
  }
  if (persistThreshold < 0 || prefetchBytes < 0 || maxLiveBytes < 0) {
    module.emitError("persist-threshold, prefetch-bytes and max-live-bytes "
                     "must not be negative");
    return signalPassFailure();
  }
  bool hasTraining = false;
  module.walk([&](zg::AdamwOp) { hasTraining = true; });
  if ((stage == 1 || stage == 2) && !hasTraining)
    module.emitRemark("ZeRO stage ")
        << (int64_t)stage
        << " only shards training state (gradients, optimizer state); "
           "inference parameters stay replicated";
  if (stage == 3 && dp == 1)
    module.emitRemark("ZeRO stage 3 with dp = 1 partitions nothing: every "
                      "parameter stays whole on its rank");
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    // Training programs are built from the rank-local batch and partitioned
    // by --zplan-zero-train; only their batch inputs are marked here.
    bool training = false, generation = false;
    func.walk([&](Operation *op) {
      auto st = dyn_cast<zg::StateOp>(op);
      generation |= st && st.getKind() == "kv_cache";
      training |= isa<zg::AdamwOp, zg::AccumulateOp>(op) ||
                  (st && st.getKind() != "kv_cache");
    });
    // Generation programs (docs/generation.md) are built from the rank-local
    // batch too, and every one of their arguments and results carries it in
    // dimension 0; their parameters are sharded like any forward's.
    if (generation && !training) {
      if (dp > 1)
        markGenerationBatch(func);
      if (stage == 3 && dp > 1 && failed(shardParams(func, dp)))
        return signalPassFailure();
      continue;
    }
    if (training) {
      if (dp > 1)
        markTrainingBatchInputs(func);
      continue;
    }
    if (dp > 1) {
      BatchSplitter split(func, dp);
      if (failed(split.run()))
        return signalPassFailure();
    }
    if (stage == 3 && dp > 1 && failed(shardParams(func, dp)))
      return signalPassFailure();
  }
}
