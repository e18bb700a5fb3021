//===- ZeroTrain.cpp - --zplan-zero-train ---------------------------------===//
//
// ZeRO for a training step: what each stage keeps whole and what it
// partitions over the dp axis, made explicit as collectives and shards.
//
// Every rank runs the train step on its own rows of the global batch (the
// driver imports the model at the local batch), so each rank's loss is the
// mean over its rows and each rank's gradients are those of that mean. The
// global mean is the average over dp, hence every reduction below is a sum
// followed by a multiply by 1/dp.
//
//  - stage 0: every gradient is all-reduced over dp right after backward
//    produces it; the optimizer updates whole parameters on every rank;
//  - stage 1: the optimizer state (fp32 master copy, both moments) keeps only
//    this rank's flat part of each parameter; gradients stay whole until the
//    end of backward, then are reduce-scattered; after the update the master
//    parts are all-gathered back into the whole parameter;
//  - stage 2: as stage 1, but each gradient is reduce-scattered as soon as
//    backward produces it, so whole gradients do not outlive their producer;
//  - stage 3: as stage 2, and the parameters themselves are shards: gathered
//    before their forward uses, released, gathered again before their
//    backward uses and released; the optimizer updates the shard in place.
//
// The squared gradient norm (sum_squares over the gradients) is a partial sum
// over dp once the gradients are partitioned: an all-reduce is inserted before
// its square root so that clipping sees the global norm.
//
//===----------------------------------------------------------------------===//

#include "compiler/sharding/Passes.h"
#include "compiler/sharding/Sharding.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

namespace zplan::sharding {
#define GEN_PASS_DEF_ZPLANZEROTRAIN
#include "compiler/sharding/Passes.h.inc"
} // namespace zplan::sharding

using namespace mlir;
using namespace zplan;
using namespace zplan::sharding;
namespace zg = zplan::graph;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A scalar f32 constant with the element type of `like`.
Value scalarConstant(OpBuilder &b, Location loc, Type elementType,
                     double value) {
  auto type = RankedTensorType::get({}, elementType);
  Attribute attr;
  if (auto ft = dyn_cast<FloatType>(elementType))
    attr = DenseElementsAttr::get(type, b.getFloatAttr(ft, value));
  return zg::ConstantOp::create(b, loc, type, cast<ElementsAttr>(attr))
      .getResult();
}

/// v * (1 / dp), in v's element type (exact for a power-of-two dp).
Value scaleByInverse(OpBuilder &b, Location loc, Value v, int64_t dp) {
  Value k = scalarConstant(b, loc, rtt(v).getElementType(), 1.0 / double(dp));
  return zg::MulOp::create(b, loc, v.getType(), v, k).getResult();
}

Value allReduce(OpBuilder &b, Location loc, Value v, StringRef axis) {
  auto op = dist::AllReduceOp::create(b, loc, v.getType(), v,
                                      b.getStringAttr(axis));
  return op.getResult();
}

/// Marks the op defining `v` to store its results in their own element type
/// (fp32) whatever --dtype says, as planDTypeOfValue reads it.
void keepOwnDType(Value v) {
  if (Operation *def = v.getDefiningOp())
    def->setAttr("zplan.own_dtype", UnitAttr::get(v.getContext()));
}

/// An fp32 copy of `v` (a gradient, stored in --dtype): the start of its
/// fp32 reduction.
Value castToF32(OpBuilder &b, Location loc, Value v) {
  Value c = zg::CastOp::create(b, loc, v.getType(), v).getResult();
  keepOwnDType(c);
  return c;
}

/// Keeps every op between `from` and `v` (and the constants they read) in
/// fp32: the reshape, padding, reduction and scaling built on a gradient
/// that castToF32 made.
void keepChainOwnDType(Value v, Value from) {
  SmallVector<Value> work = {v};
  while (!work.empty()) {
    Value x = work.pop_back_val();
    Operation *def = x.getDefiningOp();
    if (x == from || !def || def->hasAttr("zplan.own_dtype"))
      continue;
    keepOwnDType(x);
    llvm::append_range(work, def->getOperands());
  }
}

/// The flat, zero-padded form of `v`: [dp * shard] elements.
Value flatPadded(OpBuilder &b, Location loc, Value v, int64_t shard,
                 int64_t dp) {
  auto type = rtt(v);
  int64_t n = type.getNumElements();
  Type et = type.getElementType();
  Value flat =
      zg::ReshapeOp::create(b, loc, RankedTensorType::get({n}, et), v)
          .getResult();
  int64_t padded = shard * dp;
  if (padded == n)
    return flat;
  auto padType = RankedTensorType::get({padded - n}, et);
  Value zeros =
      zg::ConstantOp::create(
          b, loc, padType,
          cast<ElementsAttr>(DenseElementsAttr::get(
              padType, b.getFloatAttr(cast<FloatType>(et), 0.0))))
          .getResult();
  return zg::ConcatOp::create(b, loc, RankedTensorType::get({padded}, et),
                              ValueRange{flat, zeros}, b.getI64IntegerAttr(0))
      .getResult();
}

/// One parameter's optimizer step, as the builder of the train step left it.
struct ParamUpdate {
  zg::AdamwOp adamw;
  zg::WeightOp weight; // the parameter (null when it is already a shard)
  Value grad;
};

class TrainZero {
public:
  TrainZero(func::FuncOp func, ModuleOp module, int64_t dp, int64_t stage,
            int64_t persistThreshold, bool offload, bool mixed)
      : func(func), module(module), dp(dp), stage(stage),
        persistThreshold(persistThreshold), offload(offload), mixed(mixed) {}

  LogicalResult run();
  /// In a program without updates (@micro_step, @eval): gathers every
  /// parameter that the update programs sharded, from the same shard.
  LogicalResult gatherShardedParams(const llvm::StringSet<> &sharded);
  int64_t numReduced = 0, numPartitioned = 0, numSharded = 0;
  /// Names of the parameters this program replaced by shards (stage 3).
  llvm::StringSet<> shardedNames;

private:
  LogicalResult collect();
  void reduceLoss();
  Value reduceGradWhole(ParamUpdate &u);
  Value reduceGradShard(ParamUpdate &u, int64_t shard, Operation *at);
  LogicalResult partitionState(ParamUpdate &u, int64_t shard, Value gradShard,
                               Value paramShard);
  void reduceNormOverDp();
  void gatherForUses(zg::WeightOp w, Value shard);
  void numberOps();
  LogicalResult updateOnHost(ParamUpdate &u, Value gradPart, Value master,
                             Value deviceTarget);
  void gatherMasterInto(ParamUpdate &u, Value master, Value param);
  Value wholeMaster(zg::WeightOp w);
  int64_t indexOf(Operation *op) {
    return index.lookup(func.getBody().front().findAncestorOpInBlock(*op));
  }

  func::FuncOp func;
  ModuleOp module;
  int64_t dp, stage, persistThreshold;
  bool offload;
  /// --dtype bf16: parameters and activations in bf16; master parts, moments
  /// and the gradient reduction in fp32.
  bool mixed;
  SmallVector<ParamUpdate> updates;
  DenseMap<Operation *, int64_t> index;
  Operation *lossDef = nullptr;
  Operation *firstOptimizerOp = nullptr;
};

void TrainZero::numberOps() {
  Block &body = func.getBody().front();
  index.clear();
  int64_t i = 0;
  for (Operation &op : body)
    index[&op] = i++;
  // The loss: the result named "loss" (else the first result). Uses of a
  // parameter up to it are forward, later ones backward.
  lossDef = nullptr;
  Operation *ret = body.getTerminator();
  for (unsigned r = 0; r < ret->getNumOperands(); ++r) {
    auto name = func.getResultAttrOfType<StringAttr>(r, "zg.name");
    if (!lossDef || (name && name.getValue() == "loss"))
      lossDef = ret->getOperand(r).getDefiningOp();
  }
}

LogicalResult TrainZero::gatherShardedParams(const llvm::StringSet<> &sharded) {
  numberOps();
  SmallVector<zg::WeightOp> weights;
  for (auto w : func.getBody().front().getOps<zg::WeightOp>())
    if (sharded.contains(w.getName()))
      weights.push_back(w);
  for (zg::WeightOp w : weights) {
    auto type = rtt(w.getResult());
    int64_t shard = (type.getNumElements() + dp - 1) / dp;
    OpBuilder b(w);
    Value paramShard = createWeightShard(b, w, dp, shard, "param");
    gatherForUses(w, paramShard);
    if (!w->use_empty())
      return w.emitError("zplan-zero-train: parameter '")
             << w.getName() << "' is sharded but written here";
    w->erase();
  }
  return success();
}

LogicalResult TrainZero::collect() {
  Block &body = func.getBody().front();
  numberOps();
  for (auto adamw : body.getOps<zg::AdamwOp>()) {
    ParamUpdate u;
    u.adamw = adamw;
    u.grad = adamw.getGrad();
    u.weight = adamw.getParam().getDefiningOp<zg::WeightOp>();
    if (!u.weight)
      return adamw.emitError("zplan-zero-train: the parameter of zg.adamw "
                             "must be a zg.weight before ZeRO partitions it");
    if (!adamw.getM().getDefiningOp<zg::StateOp>() ||
        !adamw.getV().getDefiningOp<zg::StateOp>())
      return adamw.emitError("zplan-zero-train: the moments of zg.adamw must "
                             "be zg.state values");
    updates.push_back(u);
  }
  // The earliest optimizer-phase op: the first sum_squares of a gradient,
  // else the first update. Stage 1 reduces whole gradients right before it.
  for (Operation &op : body) {
    if (isa<zg::SumSquaresOp, zg::AdamwOp>(&op)) {
      firstOptimizerOp = &op;
      break;
    }
  }
  return success();
}

void TrainZero::reduceLoss() {
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  for (unsigned r = 0; r < ret->getNumOperands(); ++r) {
    auto name = func.getResultAttrOfType<StringAttr>(r, "zg.name");
    if (!name || name.getValue() != "loss")
      continue;
    Value loss = ret->getOperand(r);
    OpBuilder b(ret);
    Value mean =
        scaleByInverse(b, loss.getLoc(), allReduce(b, loss.getLoc(), loss, "dp"),
                       dp);
    // A loss stored in its own dtype (fp32 under mixed precision: the mean
    // of the accumulated loss_sum in @optimizer_step) is averaged in it too:
    // the all-reduce moves the bytes it is given.
    Operation *def = loss.getDefiningOp();
    if (def && (def->hasAttr("zplan.own_dtype") || isa<zg::StateOp>(def)))
      keepChainOwnDType(mean, loss);
    ret->setOperand(r, mean);
  }
}

Value TrainZero::reduceGradWhole(ParamUpdate &u) {
  OpBuilder b(func.getContext());
  b.setInsertionPointAfterValue(u.grad);
  Location loc = u.grad.getLoc();
  // Mixed precision all-reduces in fp32: the bf16 gradient is widened first.
  Value grad = mixed ? castToF32(b, loc, u.grad) : u.grad;
  Value summed = allReduce(b, loc, grad, "dp");
  Value mean = scaleByInverse(b, loc, summed, dp);
  if (mixed)
    keepChainOwnDType(mean, grad);
  // Every read of the gradient takes the mean; a write to it does not. With
  // gradient accumulation the gradient is the persistent sum (zg.state
  // <param>.grad), which @optimizer_step clears after the update: that
  // zg.assign (and a zg.accumulate) must keep the state as its target.
  Operation *widen = grad == u.grad ? summed.getDefiningOp()
                                    : grad.getDefiningOp();
  u.grad.replaceUsesWithIf(mean, [&](OpOperand &use) {
    Operation *owner = use.getOwner();
    if (owner == widen)
      return false;
    if (auto assign = dyn_cast<zg::AssignOp>(owner))
      return assign.getTarget() != u.grad;
    if (auto acc = dyn_cast<zg::AccumulateOp>(owner))
      return acc.getTarget() != u.grad;
    return true;
  });
  ++numReduced;
  return mean;
}

Value TrainZero::reduceGradShard(ParamUpdate &u, int64_t shard,
                                 Operation *at) {
  OpBuilder b(func.getContext());
  if (at)
    b.setInsertionPoint(at);
  else
    b.setInsertionPointAfterValue(u.grad);
  Location loc = u.grad.getLoc();
  Type et = rtt(u.grad).getElementType();
  // Mixed precision reduces in fp32: the bf16 gradient is widened first.
  Value grad = mixed ? castToF32(b, loc, u.grad) : u.grad;
  Value flat = flatPadded(b, loc, grad, shard, dp);
  auto rs = dist::ReduceScatterOp::create(
      b, loc, RankedTensorType::get({shard}, et), flat, b.getStringAttr("dp"),
      b.getI64IntegerAttr(0));
  Value mean = scaleByInverse(b, loc, rs.getResult(), dp);
  if (mixed)
    keepChainOwnDType(mean, grad);
  // The norm and the update read this rank's part; the padding is zeros, so
  // the sums of squares over the parts add up to the whole gradient's.
  u.grad.replaceUsesWithIf(mean, [](OpOperand &use) {
    return isa<zg::SumSquaresOp, zg::AdamwOp>(use.getOwner());
  });
  return mean;
}

/// Shrinks a moment (zg.state) to this rank's flat part, in every program
/// that names it.
void shrinkState(ModuleOp module, zg::StateOp state, int64_t shard,
                 bool onHost) {
  StringRef name = state.getName();
  Type et = rtt(state.getResult()).getElementType();
  auto type = RankedTensorType::get({shard}, et);
  SmallVector<Operation *> dead;
  module.walk([&](zg::StateOp other) {
    if (other.getName() != name)
      return;
    other.getResult().setType(type);
    if (onHost)
      other->setAttr(kSpace, StringAttr::get(other.getContext(), "host"));
    // Programs that write the state (init) write a value of the new shape:
    // a constant fill keeps its value; other writers are left to fail the
    // verifier, which names them.
    for (Operation *user : other->getUsers()) {
      auto assign = dyn_cast<zg::AssignOp>(user);
      if (!assign || assign.getTarget() != other.getResult())
        continue;
      auto cst = assign.getValue().getDefiningOp<zg::ConstantOp>();
      auto dense = cst ? dyn_cast<DenseElementsAttr>(cst.getValue()) : nullptr;
      if (!dense || !dense.isSplat())
        continue;
      OpBuilder b(assign);
      Value fill =
          zg::ConstantOp::create(
              b, cst.getLoc(), type,
              cast<ElementsAttr>(DenseElementsAttr::get(
                  type, dense.getSplatValue<Attribute>())))
              .getResult();
      assign->setOperand(1, fill);
      dead.push_back(cst);
    }
  });
  for (Operation *op : dead)
    if (op->use_empty())
      op->erase();
}

LogicalResult TrainZero::partitionState(ParamUpdate &u, int64_t shard,
                                        Value gradShard, Value paramShard) {
  zg::AdamwOp adamw = u.adamw;
  shrinkState(module, adamw.getM().getDefiningOp<zg::StateOp>(), shard,
              offload);
  shrinkState(module, adamw.getV().getDefiningOp<zg::StateOp>(), shard,
              offload);
  adamw->setOperand(1, gradShard);
  adamw->setOperand(0, paramShard);
  ++numPartitioned;
  return success();
}

void TrainZero::reduceNormOverDp() {
  // The first square root fed by a sum of squares is the gradient norm.
  Block &body = func.getBody().front();
  llvm::SetVector<Value> fromSquares;
  for (Operation &op : body) {
    bool fed = isa<zg::SumSquaresOp>(&op) ||
               llvm::any_of(op.getOperands(),
                            [&](Value v) { return fromSquares.contains(v); });
    if (!fed)
      continue;
    if (auto sqrt = dyn_cast<zg::SqrtOp>(&op)) {
      OpBuilder b(sqrt);
      Value total = allReduce(b, sqrt.getLoc(), sqrt.getInput(), "dp");
      // The squared norm is fp32 (zg.sum_squares), and so is its sum.
      keepOwnDType(total);
      sqrt->setOperand(0, total);
      return;
    }
    for (Value r : op.getResults())
      fromSquares.insert(r);
  }
}

void TrainZero::gatherForUses(zg::WeightOp w, Value shard) {
  // Uses up to the loss are forward, later ones backward: one gather window
  // each, released after the window's last use.
  int64_t lossIndex = lossDef ? indexOf(lossDef) : INT64_MAX;
  SmallVector<OpOperand *> fwd, bwd;
  for (OpOperand &use : w.getResult().getUses()) {
    if (isa<zg::AdamwOp>(use.getOwner()))
      continue;
    (indexOf(use.getOwner()) <= lossIndex ? fwd : bwd).push_back(&use);
  }
  auto type = rtt(w.getResult());
  for (auto *window : {&fwd, &bwd}) {
    if (window->empty())
      continue;
    Operation *first = nullptr, *last = nullptr;
    for (OpOperand *use : *window) {
      Operation *top =
          func.getBody().front().findAncestorOpInBlock(*use->getOwner());
      if (!first || index[top] < index[first])
        first = top;
      if (!last || index[top] > index[last])
        last = top;
    }
    OpBuilder b(first);
    auto gather = dist::GatherParamOp::create(b, w.getLoc(), type, shard);
    for (OpOperand *use : *window)
      use->set(gather.getResult());
    b.setInsertionPointAfter(last);
    dist::ReleaseOp::create(b, w.getLoc(), gather.getResult());
  }
}

/// The optimizer step of one parameter on the host: the device part of the
/// gradient goes down (evict), the update runs on the host master part and
/// moments, and the updated part comes back up (prefetch) into
/// `deviceTarget`: the parameter's shard (stage 3), else gathered over dp
/// into the whole parameter.
///
/// The part goes down as soon as it exists, not when the update runs: at
/// stages 2 and 3 (and on one rank) that is during the backward, so the copy
/// stream moves each gradient while the backward computes the next ones, and
/// its device bytes are free from then on (DeepSpeed's ZeRO-Offload copies
/// gradients to its pinned buffer the same way). The host holds every part
/// until the updates, which the host arena plans anyway. The gradient norm
/// still reads the device part, before it is released.
LogicalResult TrainZero::updateOnHost(ParamUpdate &u, Value gradPart,
                                      Value master, Value deviceTarget) {
  zg::AdamwOp adamw = u.adamw;
  OpBuilder b(adamw);
  Location loc = adamw.getLoc();
  b.setInsertionPointAfterValue(gradPart);
  Value gradHost = dist::EvictOp::create(b, loc, gradPart).getResult();
  if (mixed)
    keepOwnDType(gradHost);
  b.setInsertionPoint(adamw);
  adamw->setOperand(1, gradHost);
  adamw->setOperand(0, master);
  adamw->setAttr("zd.on_host", b.getUnitAttr());
  b.setInsertionPointAfter(adamw);
  Value up = dist::PrefetchOp::create(b, loc, master).getResult();
  if (mixed)
    keepOwnDType(up);
  if (rtt(deviceTarget) == rtt(up)) {
    // zg.assign converts the fp32 part into a bf16 target.
    zg::AssignOp::create(b, loc, deviceTarget, up);
    return success();
  }
  // The gather moves bytes, so it needs the part in the parameter's dtype.
  if (mixed)
    up = zg::CastOp::create(b, loc, up.getType(), up).getResult();
  auto gather =
      dist::GatherParamOp::create(b, loc, deviceTarget.getType(), up);
  zg::AssignOp::create(b, loc, deviceTarget, gather.getResult());
  dist::ReleaseOp::create(b, loc, gather.getResult());
  return success();
}

/// The whole fp32 master weight of `w` on every rank (mixed precision at
/// stage 0 over dp): a zg.state of kind master laid out like the parameter,
/// which @init fills from the parameter (converted from --dtype, as DeepSpeed
/// makes its fp32 copies from the model's 16-bit parameters). A master
/// zd.weight_shard cannot say this: its parts are dp blocks.
Value TrainZero::wholeMaster(zg::WeightOp w) {
  auto type = RankedTensorType::get(rtt(w.getResult()).getShape(),
                                    Float32Type::get(w.getContext()));
  std::string name = (w.getName() + ".master").str();
  auto make = [&](OpBuilder &b) {
    return zg::StateOp::create(b, w.getLoc(), type, name, "master", w.getName(),
                               b.getStringAttr("copy_of_param"))
        .getResult();
  };
  if (auto init = module.lookupSymbol<func::FuncOp>("init")) {
    Block &body = init.getBody().front();
    OpBuilder b(body.getTerminator());
    Value param = cast<zg::WeightOp>(b.clone(*w)).getResult();
    zg::AssignOp::create(b, w.getLoc(), make(b), param);
  }
  OpBuilder b(w);
  b.setInsertionPointAfter(w);
  return make(b);
}

/// After the update: gathers the master parts over dp into `param` (bf16
/// under mixed precision, so the fp32 part is narrowed before the gather,
/// which moves bytes).
void TrainZero::gatherMasterInto(ParamUpdate &u, Value master, Value param) {
  OpBuilder b(u.adamw);
  b.setInsertionPointAfter(u.adamw);
  Location loc = u.weight.getLoc();
  Value part = master;
  if (mixed)
    part = zg::CastOp::create(b, loc, master.getType(), master).getResult();
  auto gather = dist::GatherParamOp::create(b, loc, param.getType(), part);
  zg::AssignOp::create(b, loc, param, gather.getResult());
  dist::ReleaseOp::create(b, loc, gather.getResult());
}

LogicalResult TrainZero::run() {
  if (failed(collect()))
    return failure();
  if (updates.empty())
    return success();
  if (offload && stage == 0 && dp > 1)
    return updates.front().adamw.emitError(
               "zplan-zero-train: optimizer offload over dp = ")
           << dp
           << " needs ZeRO stage 1 or more (each rank updates its part on "
              "its host); pass --zero 1";
  if (dp > 1)
    reduceLoss();
  for (ParamUpdate &u : updates) {
    zg::WeightOp w = u.weight;
    auto type = rtt(w.getResult());
    int64_t elements = type.getNumElements();
    int64_t shard = (elements + dp - 1) / dp;
    bool shardParam =
        stage == 3 && dp > 1 && byteSize(type) >= persistThreshold;
    if (stage == 0 || dp == 1) {
      Value grad = dp > 1 ? reduceGradWhole(u) : u.grad;
      if (!offload && !mixed)
        continue;
      if (dp > 1) {
        // Mixed precision at stage 0 over dp (offload needs stage 1): every
        // rank updates the whole fp32 master from the whole fp32 mean.
        Value master = wholeMaster(w);
        u.adamw->setOperand(0, master);
        u.adamw->setOperand(1, grad);
        OpBuilder after(u.adamw);
        after.setInsertionPointAfter(u.adamw);
        zg::AssignOp::create(after, w.getLoc(), w.getResult(), master);
        continue;
      }
      // The whole parameter's master copy, moments and update (on the host
      // with offload), the gradient widened to fp32 under mixed precision.
      OpBuilder b(w);
      Value master = createWeightShard(b, w, dp, shard, "master", offload);
      b.setInsertionPointAfterValue(grad);
      Value wide = mixed ? castToF32(b, grad.getLoc(), grad) : grad;
      Value flat = flatPadded(b, grad.getLoc(), wide, shard, dp);
      if (mixed)
        keepChainOwnDType(flat, wide);
      if (failed(partitionState(u, shard, flat, master)))
        return failure();
      if (offload) {
        if (failed(updateOnHost(u, flat, master, w.getResult())))
          return failure();
        continue;
      }
      gatherMasterInto(u, master, w.getResult());
      continue;
    }
    // Stage 1 reduces once backward is over; stages 2-3 as soon as the
    // gradient exists.
    Value gradShard =
        reduceGradShard(u, shard, stage == 1 ? firstOptimizerOp : nullptr);
    OpBuilder b(w);
    if (shardParam) {
      Value paramShard = createWeightShard(b, w, dp, shard, "param");
      // Under mixed precision the bf16 shard is not the master: an fp32
      // part beside it takes the update and is copied (converted) back.
      Value master = offload || mixed
                         ? createWeightShard(b, w, dp, shard, "master", offload)
                         : paramShard;
      if (failed(partitionState(u, shard, gradShard, master)))
        return failure();
      if (offload && failed(updateOnHost(u, gradShard, master, paramShard)))
        return failure();
      if (mixed && !offload) {
        OpBuilder after(u.adamw);
        after.setInsertionPointAfter(u.adamw);
        zg::AssignOp::create(after, w.getLoc(), paramShard, master);
      }
      gatherForUses(w, paramShard);
      shardedNames.insert(w.getName());
      if (w->use_empty())
        w->erase();
      ++numSharded;
      continue;
    }
    // The master part lives beside the whole parameter; after the update it
    // is gathered back into the parameter.
    Value master = createWeightShard(b, w, dp, shard, "master", offload);
    if (failed(partitionState(u, shard, gradShard, master)))
      return failure();
    if (offload) {
      if (failed(updateOnHost(u, gradShard, master, w.getResult())))
        return failure();
      continue;
    }
    gatherMasterInto(u, master, w.getResult());
  }
  if (stage >= 1 && dp > 1)
    reduceNormOverDp();
  return success();
}

/// fp16 dynamic loss scaling (zg-build-train-step) marks the scalar that says
/// whether this rank's gradients overflowed. Every rank must decide the same
/// (skip the step and lower the scale, or update): its uses take the maximum
/// over tp and over dp. The flag derives from the global norm, so the ranks
/// agree already when the norm's reductions carry an inf or a nan through;
/// the maximum makes the decision not depend on how a backend's sum treats
/// them, at the cost of two one-element all-reduces.
void reduceOverflowFlags(ModuleOp module, int64_t dp) {
  int64_t tp = dist::getMeshAxisSize(module, "tp");
  SmallVector<Operation *> flags;
  module.walk([&](Operation *op) {
    if (op->hasAttr("zplan.overflow_flag"))
      flags.push_back(op);
  });
  for (Operation *op : flags) {
    Value flag = op->getResult(0);
    OpBuilder b(op->getContext());
    b.setInsertionPointAfter(op);
    Value global = flag;
    Operation *first = nullptr;
    for (auto [axis, size] : {std::pair<StringRef, int64_t>{"tp", tp},
                              std::pair<StringRef, int64_t>{"dp", dp}}) {
      if (size <= 1)
        continue;
      auto ar = dist::AllReduceOp::create(b, op->getLoc(), flag.getType(),
                                          global, b.getStringAttr(axis),
                                          b.getStringAttr("max"));
      keepOwnDType(ar.getResult());
      global = ar.getResult();
      if (!first)
        first = ar;
    }
    if (first)
      flag.replaceAllUsesExcept(global, first);
  }
}

/// Under mixed precision the tensor-parallel passes all-reduce partial sums
/// that are stored in fp32 (a sum of squares, the fp32 optimizer scalars):
/// the collective moves the bytes it is given, so its result keeps the fp32
/// of its operand instead of taking --dtype.
void keepReductionsOwnDType(ModuleOp module) {
  module.walk([](dist::AllReduceOp ar) {
    Operation *def = ar.getInput().getDefiningOp();
    if (def && (isa<zg::SumSquaresOp, zg::StateOp>(def) ||
                def->hasAttr("zplan.own_dtype")))
      keepOwnDType(ar.getResult());
  });
}

struct ZplanZeroTrainPass
    : zplan::sharding::impl::ZplanZeroTrainBase<ZplanZeroTrainPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t dp = dist::getMeshAxisSize(module, "dp");
    if (stage < 0 || stage > 3) {
      module.emitError("ZeRO stage must be 0, 1, 2 or 3, got ")
          << (int64_t)stage;
      return signalPassFailure();
    }
    bool offload = offloadOptimizer == "cpu";
    if (!offload && offloadOptimizer != "none") {
      module.emitError("offload-optimizer must be none or cpu, got '")
          << offloadOptimizer << "'";
      return signalPassFailure();
    }
    reduceOverflowFlags(module, dp);
    if (mixedPrecision)
      keepReductionsOwnDType(module);
    if (dp == 1 && !offload && !mixedPrecision)
      return;
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    // The programs that update parameters decide the partition; the others
    // (micro-steps that accumulate gradients, evaluation) then gather the
    // same shards.
    llvm::StringSet<> sharded;
    SmallVector<func::FuncOp> others;
    for (func::FuncOp func : funcs) {
      if (func.isExternal())
        continue;
      bool updates = false;
      func.walk([&](zg::AdamwOp) { updates = true; });
      if (!updates) {
        others.push_back(func);
        continue;
      }
      TrainZero z(func, module, dp, stage, persistThreshold, offload,
                  mixedPrecision);
      if (failed(z.run()))
        return signalPassFailure();
      numReduced += z.numReduced;
      numPartitioned += z.numPartitioned;
      numSharded += z.numSharded;
      for (auto &name : z.shardedNames)
        sharded.insert(name.getKey());
    }
    if (!sharded.empty())
      for (func::FuncOp func : others) {
        TrainZero z(func, module, dp, stage, persistThreshold, offload,
                    mixedPrecision);
        if (failed(z.gatherShardedParams(sharded)))
          return signalPassFailure();
      }
  }
};

} // namespace
