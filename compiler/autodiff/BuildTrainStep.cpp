//===- BuildTrainStep.cpp - zg-build-train-step ---------------------------===//
//
// Forward @main -> @init and @train_step: the loss, the reverse-mode backward
// (Reverse.cpp), the global gradient norm, clipping, the learning-rate
// schedule and one zg.adamw per parameter. Passes.td describes the result.
//
//===----------------------------------------------------------------------===//

#include "compiler/autodiff/Loss.h"
#include "compiler/autodiff/Passes.h"
#include "compiler/autodiff/Reverse.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>
#include <limits>

namespace zplan::autodiff {
#define GEN_PASS_DEF_BUILDTRAINSTEP
#include "compiler/autodiff/Passes.h.inc"
} // namespace zplan::autodiff

using namespace mlir;
using namespace zplan;
namespace zg = zplan::graph;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

Value scalar(OpBuilder &b, Location loc, Type elt, double v) {
  auto type = RankedTensorType::get({}, elt);
  Attribute a = isa<FloatType>(elt)
                    ? Attribute(b.getFloatAttr(elt, v))
                    : Attribute(b.getIntegerAttr(elt, int64_t(v)));
  return zg::ConstantOp::create(b, loc, type, DenseElementsAttr::get(type, a));
}

/// An elementwise op on rank-0 f32 tensors.
template <typename OpTy> Value scalarOp(OpBuilder &b, Location loc, Value x,
                                         Value y) {
  return OpTy::create(b, loc, x.getType(), x, y);
}

StringAttr nameOfResult(func::FuncOp f, unsigned i) {
  return f.getResultAttrOfType<StringAttr>(i, "zg.name");
}
StringAttr nameOfArgument(func::FuncOp f, unsigned i) {
  return f.getArgAttrOfType<StringAttr>(i, "zg.name");
}

/// One optimizer state tensor that @init fills.
struct StateSpec {
  std::string name, kind, of;
  RankedTensorType type;
  /// The value @init fills it with.
  double init = 0.0;
};

struct BuildTrainStepPass
    : autodiff::impl::BuildTrainStepBase<BuildTrainStepPass> {
  using BuildTrainStepBase::BuildTrainStepBase;

  void runOnOperation() override;

private:
  LogicalResult checkOptions(ModuleOp module);
  void splitSharedWeights(func::FuncOp f);
  void keepAttentionLse(func::FuncOp f);
  void restoreBiases(func::FuncOp f);
  void recomputeSelective(func::FuncOp f, Operation *lastForward);
  void recomputeFull(func::FuncOp f, Operation *lastForward);
  FailureOr<autodiff::Loss> buildLoss(OpBuilder &b, func::FuncOp f);
  Value learningRate(OpBuilder &b, Location loc, Value lr, Value step);
  Value buildUpdate(OpBuilder &b, Location loc, ArrayRef<zg::WeightOp> params,
                    ArrayRef<Value> grads, Value lr, Value step,
                    Value inverseCount);
  Value buildUpdateOps(OpBuilder &b, Location loc,
                       ArrayRef<zg::WeightOp> params, ArrayRef<Value> grads,
                       Value lr, Value step, Value inverseCount);
  Value makeState(OpBuilder &b, Location loc, const Twine &name, StringRef kind,
                  StringRef of, RankedTensorType type, double init = 0.0);
  Value lossScaleSeed(OpBuilder &b, Location loc);
  Value updateLossScale(OpBuilder &b, Location loc, Value scaledNorm,
                        Value scale);
  SmallVector<StateSpec> states;
  /// (state, new value) pairs of the loss scaler, written after the updates.
  SmallVector<std::pair<Value, Value>> scalarWrites;
};

LogicalResult BuildTrainStepPass::checkOptions(ModuleOp module) {
  auto bad = [&](const Twine &msg) {
    return module.emitError("zg-build-train-step: ") << msg;
  };
  if (lossOutput.empty() && loss != "causal-lm")
    return bad("unknown loss '" + loss + "' (expected causal-lm, or "
                                         "loss-output=NAME)");
  if (lrSchedule != "constant" && lrSchedule != "warmup" &&
      lrSchedule != "warmup-decay")
    return bad("unknown lr-schedule '" + lrSchedule +
               "' (expected constant, warmup or warmup-decay)");
  if (lrSchedule == "warmup" && (warmupSteps < 0 || totalSteps != 0))
    return bad("warmup needs warmup-steps >= 0 and no total-steps (got " +
               Twine(warmupSteps) + " and " + Twine(totalSteps) + ")");
  if (lrSchedule == "warmup-decay" &&
      (warmupSteps < 0 || totalSteps <= warmupSteps))
    return bad("warmup-decay needs 0 <= warmup-steps < total-steps (got " +
               Twine(warmupSteps) + " and " + Twine(totalSteps) + ")");
  if (!(lr >= 0) || !(weightDecay >= 0) || !(eps >= 0) || !(clipGrad >= 0))
    return bad("lr, weight-decay, eps and clip-grad must be >= 0");
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return bad("beta1 and beta2 must be in [0, 1)");
  if (recompute != "none" && recompute != "selective" && recompute != "full")
    return bad("recompute '" + recompute +
               "' is not built (expected none, selective or full)");
  if (microBatches < 1)
    return bad("micro-batches must be at least 1 (got " + Twine(microBatches) +
               ")");
  if (lossScaling != "none" && lossScaling != "static" &&
      lossScaling != "dynamic")
    return bad("unknown loss-scaling '" + lossScaling +
               "' (expected none, static or dynamic)");
  if (lossScaling != "none" && !(lossScale > 0 && std::isfinite(lossScale)))
    return bad("loss-scale must be a positive finite number (got " +
               std::to_string(double(lossScale)) + ")");
  if (lossScaling == "dynamic" &&
      (lossScaleWindow < 1 || !(lossScaleMin > 0) || lossScaleMin > lossScale))
    return bad("dynamic loss scaling needs loss-scale-window >= 1 and "
               "0 < loss-scale-min <= loss-scale");
  return success();
}

void BuildTrainStepPass::splitSharedWeights(func::FuncOp f) {
  OpBuilder b(f.getContext());
  for (auto w : llvm::make_early_inc_range(f.getOps<zg::WeightOp>())) {
    if (w->hasAttr("zg.tied"))
      continue;
    SmallVector<Operation *> users;
    for (Operation *u : w->getUsers())
      if (!llvm::is_contained(users, u))
        users.push_back(u);
    if (users.size() < 2)
      continue;
    llvm::sort(users, [](Operation *x, Operation *y) {
      return x->isBeforeInBlock(y);
    });
    b.setInsertionPointAfter(w);
    for (size_t k = 1; k < users.size(); ++k) {
      Operation *copy = b.clone(*w);
      copy->setAttr("name",
                    b.getStringAttr(w.getName() + "#" + Twine(k)));
      users[k]->replaceUsesOfWith(w.getResult(), copy->getResult(0));
    }
  }
}

void BuildTrainStepPass::keepAttentionLse(func::FuncOp f) {
  OpBuilder b(f.getContext());
  for (auto att : llvm::make_early_inc_range(f.getOps<zg::AttentionOp>())) {
    if (att.getLse())
      continue;
    auto q = rtt(att.getQ()).getShape();
    auto lseType =
        RankedTensorType::get({q[0], q[1], q[2]}, b.getF32Type());
    b.setInsertionPoint(att);
    auto kept = zg::AttentionOp::create(
        b, att.getLoc(), TypeRange{att.getResult().getType(), lseType},
        att->getOperands(), att->getAttrs());
    att.getResult().replaceAllUsesWith(kept.getResult());
    att.erase();
  }
}

void BuildTrainStepPass::restoreBiases(func::FuncOp f) {
  OpBuilder b(f.getContext());
  for (auto linear : llvm::make_early_inc_range(f.getOps<zg::LinearOp>())) {
    auto w = linear.getWeight().getDefiningOp<zg::WeightOp>();
    if (linear.getBias() || !w || w->hasAttr("zg.tied"))
      continue;
    StringRef name = w.getName();
    std::string biasName = name.ends_with(".weight")
                               ? (name.drop_back(6) + "bias").str()
                               : (name + ".bias").str();
    auto type = RankedTensorType::get({rtt(linear).getShape().back()},
                                      rtt(linear).getElementType());
    b.setInsertionPoint(linear);
    auto zero = DenseElementsAttr::get(
        type, b.getFloatAttr(type.getElementType(), 0.0));
    int64_t bytes = type.getNumElements() *
                    ((type.getElementTypeBitWidth() + 7) / 8);
    auto bias = zg::WeightOp::create(b, linear.getLoc(), type, biasName, "",
                                     0, bytes, zero);
    linear->insertOperands(2, ValueRange{bias});
  }
}

void BuildTrainStepPass::recomputeSelective(func::FuncOp f,
                                            Operation *lastForward) {
  SmallVector<Operation *> forward;
  for (Operation &op : f.getBody().front()) {
    forward.push_back(&op);
    if (&op == lastForward)
      break;
  }
  OpBuilder b(f.getContext());
  for (Operation *op : forward) {
    if (!isa<zg::LayerNormOp, zg::RmsNormOp, zg::GeluOp, zg::SiluOp>(op))
      continue;
    Value out = op->getResult(0);
    SmallVector<OpOperand *> late;
    Operation *first = nullptr;
    for (OpOperand &use : out.getUses()) {
      Operation *user = use.getOwner();
      if (!lastForward->isBeforeInBlock(user))
        continue;
      late.push_back(&use);
      if (!first || user->isBeforeInBlock(first))
        first = user;
    }
    if (late.empty())
      continue;
    b.setInsertionPoint(first);
    Operation *again = b.clone(*op);
    for (OpOperand *use : late)
      use->set(again->getResult(0));
    ++numRecomputed;
  }
}

/// recompute=full (activation checkpointing of whole layers, as Megatron's
/// "full" recomputation): the backward keeps only what crosses a layer
/// boundary, the layers' inputs and outputs; every other forward value the
/// backward reads is recomputed by a clone of its layer's forward, placed
/// right before the first backward use of any of them.
///
/// Layers are found from the structure, not from names (exporters name
/// parameters "val_114"): a pre-norm transformer layer opens with a norm of
/// the residual stream and has two (attention and MLP), and a final norm
/// follows the last layer, so with 2L + 1 norms the inputs of norms 0, 2,
/// ..., 2L are the layer boundaries. With an even count every norm's input
/// is one (each sublayer is recomputed from its own input). The ops up to
/// the first boundary (embedding) and after the last (final norm, LM head,
/// loss) are kept as before; so is any value that a later layer reads
/// (masks, rotary tables, the residual stream itself).
void BuildTrainStepPass::recomputeFull(func::FuncOp f, Operation *lastForward) {
  SmallVector<Operation *> forward;
  for (Operation &op : f.getBody().front()) {
    forward.push_back(&op);
    if (&op == lastForward)
      break;
  }
  SmallVector<Operation *> norms;
  for (Operation *op : forward)
    if (isa<zg::LayerNormOp, zg::RmsNormOp>(op))
      norms.push_back(op);
  // The ops that define the boundaries, in forward order.
  llvm::SmallPtrSet<Operation *, 16> boundary;
  size_t stride = norms.size() % 2 == 1 ? 2 : 1;
  for (size_t i = 0; i < norms.size(); i += stride)
    if (Operation *def = norms[i]->getOperand(0).getDefiningOp())
      boundary.insert(def);
  DenseMap<Operation *, int64_t> layer;
  int64_t current = -1, seen = 0, numLayers = 0;
  for (Operation *op : forward) {
    // Storage and constants are not activations: never recomputed.
    bool storage = isa<zg::WeightOp, zg::ConstantOp, zg::StateOp>(op) ||
                   op->getNumResults() == 0;
    layer[op] = storage ? -1 : current;
    if (boundary.contains(op)) {
      ++seen;
      // After the last boundary: the tail, kept.
      current = seen < int64_t(boundary.size()) ? seen - 1 : -1;
      numLayers = std::max(numLayers, current + 1);
    }
  }
  auto isBackward = [&](Operation *user) {
    return lastForward->isBeforeInBlock(user);
  };
  OpBuilder b(f.getContext());
  for (int64_t l = numLayers - 1; l >= 0; --l) {
    // A value of layer l is kept when a forward op of another layer (or of
    // none) reads it: it is a layer's output. The others that the backward
    // reads are recomputed.
    llvm::SetVector<Value> again;
    llvm::SmallPtrSet<Operation *, 32> ops;
    for (Operation *op : forward) {
      if (layer.lookup(op) != l)
        continue;
      ops.insert(op);
      for (Value r : op->getResults()) {
        bool crosses = false, late = false;
        for (Operation *user : r.getUsers()) {
          if (isBackward(user))
            late = true;
          else if (layer.lookup(user) != l)
            crosses = true;
        }
        if (late && !crosses)
          again.insert(r);
      }
    }
    if (again.empty())
      continue;
    // The clones: every op of the layer that a recomputed value depends on
    // through values that are themselves recomputed, in forward order.
    llvm::SmallPtrSet<Operation *, 32> needed;
    SmallVector<Value> work(again.begin(), again.end());
    llvm::DenseSet<Value> recomputed(again.begin(), again.end());
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || !needed.insert(def).second)
        continue;
      for (Value v : def->getOperands()) {
        Operation *d = v.getDefiningOp();
        if (!d || !ops.contains(d) || layer.lookup(d) != l)
          continue;
        bool crosses = llvm::any_of(v.getUsers(), [&](Operation *u) {
          return !isBackward(u) && layer.lookup(u) != l;
        });
        if (!crosses && recomputed.insert(v).second)
          work.push_back(v);
      }
    }
    Operation *first = nullptr;
    for (Value v : again)
      for (Operation *user : v.getUsers())
        if (isBackward(user) && (!first || user->isBeforeInBlock(first)))
          first = user;
    b.setInsertionPoint(first);
    IRMapping map;
    for (Operation *op : forward) {
      if (!needed.contains(op))
        continue;
      Operation *copy = b.clone(*op, map);
      for (auto [from, to] : llvm::zip(op->getResults(), copy->getResults()))
        map.map(from, to);
      ++numRecomputed;
    }
    for (Value v : recomputed)
      v.replaceUsesWithIf(map.lookup(v), [&](OpOperand &use) {
        return isBackward(use.getOwner()) && !needed.contains(use.getOwner());
      });
  }
}

FailureOr<autodiff::Loss> BuildTrainStepPass::buildLoss(OpBuilder &b,
                                                        func::FuncOp f) {
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  Location loc = ret.getLoc();
  if (!lossOutput.empty()) {
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      StringAttr name = nameOfResult(f, i);
      if (!name || name.getValue() != lossOutput)
        continue;
      Value v = ret.getOperand(i);
      if (!isa<FloatType>(rtt(v).getElementType()) ||
          rtt(v).getNumElements() != 1)
        return f.emitError("zg-build-train-step: output '")
               << lossOutput << "' is not a single float value";
      autodiff::Loss l;
      l.value = v;
      if (rtt(v).getRank() != 0)
        l.value = zg::ReshapeOp::create(
            b, loc, RankedTensorType::get({}, rtt(v).getElementType()), v);
      return l;
    }
    return f.emitError("zg-build-train-step: @main has no output named '")
           << lossOutput << "'";
  }

  // causal-lm: the logits [B, S, V] (the only rank-3 float output, or the
  // one named "logits") against the integer input of shape [B, S].
  Value logits;
  int candidates = 0;
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    Value v = ret.getOperand(i);
    if (rtt(v).getRank() != 3 || !isa<FloatType>(rtt(v).getElementType()))
      continue;
    StringAttr name = nameOfResult(f, i);
    if (name && name.getValue() == "logits") {
      logits = v;
      candidates = 1;
      break;
    }
    logits = v;
    ++candidates;
  }
  if (candidates != 1)
    return f.emitError("zg-build-train-step: --loss causal-lm needs one "
                       "[batch, seq, vocab] float output (or one named "
                       "'logits'); @main has ")
           << candidates;
  auto lt = rtt(logits).getShape();
  Value ids;
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    Value a = f.getArgument(i);
    auto t = rtt(a);
    if (!isa<IntegerType>(t.getElementType()) || t.getRank() != 2 ||
        t.getDimSize(0) != lt[0] || t.getDimSize(1) != lt[1])
      continue;
    StringAttr name = nameOfArgument(f, i);
    if (!ids || (name && name.getValue() == "input_ids"))
      ids = a;
  }
  if (!ids)
    return f.emitError("zg-build-train-step: --loss causal-lm needs an "
                       "integer input of shape [")
           << lt[0] << ", " << lt[1] << "] (the token ids)";
  return autodiff::buildCausalLmLoss(b, loc, logits, ids, ignoreIndex);
}

/// lr * factor(step): the constant schedule; a linear warmup over
/// warmup-steps followed by a linear decay reaching 0 at total-steps (the
/// linear form of DeepSpeed's WarmupDecayLR with a warmup floor of 0):
///   factor(t) = t / W                      for t < W
///             = max(0, (T - t) / (T - W))  otherwise;
/// or the same warmup followed by the constant rate (the linear form of
/// DeepSpeed's WarmupLR): factor(t) = t / W for t < W, else 1.
Value BuildTrainStepPass::learningRate(OpBuilder &b, Location loc, Value lr,
                                       Value step) {
  if (lrSchedule == "constant" || (lrSchedule == "warmup" && warmupSteps == 0))
    return lr;
  Type f32 = b.getF32Type();
  Value t = zg::CastOp::create(b, loc, RankedTensorType::get({}, f32), step);
  double w = double(warmupSteps), total = double(totalSteps);
  // The factor after the warmup: 1 (warmup), or the linear decay.
  Value factor = scalar(b, loc, f32, 1.0);
  if (lrSchedule == "warmup-decay") {
    Value decay = scalarOp<zg::DivOp>(
        b, loc, scalarOp<zg::SubOp>(b, loc, scalar(b, loc, f32, total), t),
        scalar(b, loc, f32, total - w));
    factor = scalarOp<zg::MaxOp>(b, loc, decay, scalar(b, loc, f32, 0.0));
  }
  if (warmupSteps > 0) {
    Value warm = scalarOp<zg::DivOp>(b, loc, t, scalar(b, loc, f32, w));
    Value warming =
        zg::LessOp::create(b, loc, RankedTensorType::get({}, b.getI1Type()), t,
                           scalar(b, loc, f32, w));
    factor = zg::WhereOp::create(b, loc, t.getType(), warming, warm, factor);
  }
  return scalarOp<zg::MulOp>(b, loc, lr, factor);
}

/// The optimizer half shared by @train_step and @optimizer_step: the global
/// norm of the mean gradients (each `grads` entry is `divisor` times the
/// mean), the clipping scale, the scheduled rate and one zg.adamw per
/// parameter. Returns the norm.
Value BuildTrainStepPass::buildUpdate(OpBuilder &b, Location loc,
                                      ArrayRef<zg::WeightOp> params,
                                      ArrayRef<Value> grads, Value lr,
                                      Value step, Value inverseCount) {
  Block *block = b.getInsertionBlock();
  llvm::SmallPtrSet<Operation *, 32> existing;
  for (Operation &op : *block)
    existing.insert(&op);
  Value norm = buildUpdateOps(b, loc, params, grads, lr, step, inverseCount);
  // The optimizer's scalar math (norm, clipping scale, scheduled rate) stays
  // fp32 whatever --dtype says: zg.adamw reads these as fp32 scalars, and a
  // bf16 rate or norm would lose digits the update needs.
  for (Operation &op : *block) {
    // A zg.state keeps its element type anyway, and its attributes are part
    // of its identity (the same state read elsewhere must match).
    if (existing.contains(&op) || op.getNumResults() != 1 ||
        isa<zg::StateOp>(op))
      continue;
    auto t = dyn_cast<RankedTensorType>(op.getResult(0).getType());
    if (t && t.getRank() == 0 && isa<FloatType>(t.getElementType()))
      op.setAttr("zplan.own_dtype", b.getUnitAttr());
  }
  return norm;
}

Value BuildTrainStepPass::buildUpdateOps(OpBuilder &b, Location loc,
                                         ArrayRef<zg::WeightOp> params,
                                         ArrayRef<Value> grads, Value lr,
                                         Value step, Value inverseCount) {
  Type f32 = b.getF32Type();
  auto f32Scalar = RankedTensorType::get({}, f32);
  Value sumSquares;
  for (Value g : grads) {
    Value s = zg::SumSquaresOp::create(b, loc, f32Scalar, g);
    sumSquares = sumSquares ? scalarOp<zg::AddOp>(b, loc, sumSquares, s) : s;
  }
  Value norm = zg::SqrtOp::create(b, loc, f32Scalar, sumSquares);
  if (inverseCount)
    norm = scalarOp<zg::MulOp>(b, loc, norm, inverseCount);
  // Under loss scaling the gradients carry the scale: the norm read so far
  // is scaled, the true one is divided by it, and so is every update.
  Value scale = lossScaling == "none" ? Value() : lossScaleSeed(b, loc);
  Value scaledNorm = norm, inverse;
  if (scale) {
    inverse = scalarOp<zg::DivOp>(b, loc, scalar(b, loc, f32, 1.0), scale);
    norm = scalarOp<zg::MulOp>(b, loc, norm, inverse);
  }
  Value gradScale = inverseCount ? inverseCount : scalar(b, loc, f32, 1.0);
  if (clipGrad > 0) {
    Value denom = scalarOp<zg::AddOp>(b, loc, norm, scalar(b, loc, f32, 1e-6));
    gradScale = scalarOp<zg::MinOp>(
        b, loc, scalar(b, loc, f32, 1.0),
        scalarOp<zg::DivOp>(b, loc, scalar(b, loc, f32, clipGrad), denom));
    if (inverseCount)
      gradScale = scalarOp<zg::MulOp>(b, loc, gradScale, inverseCount);
  }
  if (inverse)
    gradScale = scalarOp<zg::MulOp>(b, loc, gradScale, inverse);
  // Dynamic scaling: AdamW's step becomes the persistent count of applied
  // steps, 0 (no update) on an overflowing step.
  if (lossScaling == "dynamic")
    step = updateLossScale(b, loc, scaledNorm, scale);
  Value stepLr = learningRate(b, loc, lr, step);
  for (auto [constW, g] : llvm::zip(params, grads)) {
    zg::WeightOp w = constW;
    auto momentType = RankedTensorType::get(rtt(w).getShape(), f32);
    Value m = makeState(b, loc, w.getName() + ".exp_avg", "moment1",
                        w.getName(), momentType);
    Value v = makeState(b, loc, w.getName() + ".exp_avg_sq", "moment2",
                        w.getName(), momentType);
    zg::AdamwOp::create(b, loc, w.getResult(), g, m, v, stepLr, step,
                        gradScale, b.getF64FloatAttr(beta1),
                        b.getF64FloatAttr(beta2), b.getF64FloatAttr(eps),
                        b.getF64FloatAttr(weightDecay));
  }
  for (auto [target, value] : scalarWrites)
    zg::AssignOp::create(b, loc, target, value);
  scalarWrites.clear();
  return norm;
}

Value BuildTrainStepPass::makeState(OpBuilder &b, Location loc,
                                    const Twine &name, StringRef kind,
                                    StringRef of, RankedTensorType type,
                                    double init) {
  StateSpec spec{name.str(), kind.str(), of.str(), type, init};
  if (llvm::none_of(states,
                    [&](const StateSpec &s) { return s.name == spec.name; }))
    states.push_back(spec);
  Attribute initAttr = init == 0.0 ? Attribute(b.getStringAttr("zeros"))
                                   : Attribute(b.getF64FloatAttr(init));
  return zg::StateOp::create(b, loc, type, spec.name, spec.kind, spec.of,
                             initAttr);
}

/// The loss scale the backward is seeded with (null without loss scaling):
/// the constant of static scaling, or a read of the persistent `loss_scale`.
/// Both fp32 whatever --dtype says: 65536 does not even fit in fp16.
Value BuildTrainStepPass::lossScaleSeed(OpBuilder &b, Location loc) {
  Type f32 = b.getF32Type();
  if (lossScaling == "static") {
    Value c = scalar(b, loc, f32, lossScale);
    c.getDefiningOp()->setAttr("zplan.own_dtype", b.getUnitAttr());
    return c;
  }
  if (lossScaling == "dynamic")
    return makeState(b, loc, "loss_scale", "scalar", "",
                     RankedTensorType::get({}, f32), lossScale);
  return {};
}

/// DeepSpeed's dynamic loss scaler (with hysteresis 1) as scalar graph ops.
/// `scaledNorm` is the global norm of the scaled gradients: it is not finite
/// exactly when some gradient holds an inf or a nan (a finite sum of squares
/// that overflows fp32 counts too, which only a far too large scale causes).
/// Writes the new scale, the run of good steps, the applied-step count and
/// the skipped-step count; returns AdamW's step: the new count, or 0 on an
/// overflow.
Value BuildTrainStepPass::updateLossScale(OpBuilder &b, Location loc,
                                          Value scaledNorm, Value scale) {
  Type f32 = b.getF32Type();
  auto f32Scalar = RankedTensorType::get({}, f32);
  auto boolScalar = RankedTensorType::get({}, b.getI1Type());
  auto where = [&](Value c, Value x, Value y) -> Value {
    return zg::WhereOp::create(b, loc, f32Scalar, c, x, y);
  };
  auto less = [&](Value x, Value y) -> Value {
    return zg::LessOp::create(b, loc, boolScalar, x, y);
  };
  auto k = [&](double v) { return scalar(b, loc, f32, v); };
  Value finite = less(scaledNorm, k(std::numeric_limits<double>::infinity()));
  // 1 where this rank saw an overflow; the sharding passes replace its uses
  // by the maximum over every rank of tp and dp, so all ranks skip together.
  Value overflow = where(finite, k(0.0), k(1.0));
  overflow.getDefiningOp()->setAttr("zplan.overflow_flag", b.getUnitAttr());
  Value ok = less(overflow, k(0.5));

  Value good =
      makeState(b, loc, "loss_scale_good_steps", "scalar", "", f32Scalar);
  Value count = makeState(b, loc, "optimizer_steps", "scalar", "", f32Scalar);
  Value skipped = makeState(b, loc, "skipped_steps", "scalar", "", f32Scalar);
  Value good1 = scalarOp<zg::AddOp>(b, loc, good, k(1.0));
  Value grow = less(k(double(lossScaleWindow) - 0.5), good1);
  Value grown = where(grow, scalarOp<zg::MulOp>(b, loc, scale, k(2.0)), scale);
  Value lowered = scalarOp<zg::MaxOp>(
      b, loc, scalarOp<zg::MulOp>(b, loc, scale, k(0.5)), k(lossScaleMin));
  Value newScale = where(ok, grown, lowered);
  Value newGood = where(ok, where(grow, k(0.0), good1), k(0.0));
  Value newCount = scalarOp<zg::AddOp>(
      b, loc, count, scalarOp<zg::SubOp>(b, loc, k(1.0), overflow));
  Value newSkipped = scalarOp<zg::AddOp>(b, loc, skipped, overflow);
  Value applied = where(ok, newCount, k(0.0));
  Value step = zg::CastOp::create(
      b, loc, RankedTensorType::get({}, b.getI64Type()), applied);
  // The writes go after the updates (buildUpdateOps), after every read.
  scalarWrites = {{scale, newScale},
                  {good, newGood},
                  {count, newCount},
                  {skipped, newSkipped}};
  return step;
}

/// Appends the scalar run inputs lr and step to `f`.
static LogicalResult addScalarInputs(OpBuilder &b, func::FuncOp f, double lr,
                                     Location loc) {
  unsigned n = f.getNumArguments();
  auto f32Scalar = RankedTensorType::get({}, b.getF32Type());
  auto i64Scalar = RankedTensorType::get({}, b.getI64Type());
  if (failed(f.insertArgument(
          n, f32Scalar,
          b.getDictionaryAttr(
              {b.getNamedAttr("zg.name", b.getStringAttr("lr")),
               b.getNamedAttr("zg.default", b.getF64FloatAttr(lr))}),
          loc)) ||
      failed(f.insertArgument(
          n + 1, i64Scalar,
          b.getDictionaryAttr(
              {b.getNamedAttr("zg.name", b.getStringAttr("step")),
               b.getNamedAttr("zg.default", b.getI64IntegerAttr(1))}),
          loc)))
    return f.emitError("zg-build-train-step: cannot add the lr and step "
                       "inputs");
  return success();
}

/// Replaces `f`'s return by one of `values`, named by `names`.
static void setResults(OpBuilder &b, func::FuncOp f, ValueRange values,
                       ArrayRef<StringRef> names) {
  Block &body = f.getBody().front();
  Operation *old = body.getTerminator();
  b.setInsertionPoint(old);
  func::ReturnOp::create(b, old->getLoc(), values);
  old->erase();
  f.setType(FunctionType::get(f.getContext(), f.getArgumentTypes(),
                              ValueRange(values).getTypes()));
  SmallVector<DictionaryAttr> attrs;
  for (StringRef name : names)
    attrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("zg.name", b.getStringAttr(name))}));
  f.setAllResultAttrs(attrs);
}

/// Erases ops whose results are unused (forward outputs other than the loss,
/// gradients the rules built for inputs that need none).
static void eraseDeadOps(func::FuncOp f) {
  Block &body = f.getBody().front();
  bool changed = true;
  while (changed) {
    changed = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (isOpTriviallyDead(&op)) {
        op.erase();
        changed = true;
      }
  }
}

void BuildTrainStepPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  states.clear();
  if (failed(checkOptions(module)))
    return signalPassFailure();
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main) {
    module.emitError("zg-build-train-step: the module has no @main");
    return signalPassFailure();
  }
  for (StringRef name : {"init", "train_step", "micro_step", "optimizer_step"})
    if (module.lookupSymbol(name)) {
      module.emitError("zg-build-train-step: the module already has @")
          << name;
      return signalPassFailure();
    }
  bool accumulate = microBatches > 1;

  // @train_step (or @micro_step) starts as a copy of the forward.
  OpBuilder b(ctx);
  b.setInsertionPointAfter(main);
  auto train = cast<func::FuncOp>(b.clone(*main));
  train.setSymName(accumulate ? "micro_step" : "train_step");
  splitSharedWeights(train);
  keepAttentionLse(train);
  if (restoreZeroBiases)
    restoreBiases(train);

  Block &body = train.getBody().front();
  Location loc = body.getTerminator()->getLoc();
  Type f32 = b.getF32Type();
  auto f32Scalar = RankedTensorType::get({}, f32);
  if (!accumulate && failed(addScalarInputs(b, train, lr, loc)))
    return signalPassFailure();

  b.setInsertionPoint(body.getTerminator());
  FailureOr<autodiff::Loss> loss = buildLoss(b, train);
  if (failed(loss))
    return signalPassFailure();
  // The forward ends here: the memory report counts the activations alive
  // across this op as the ones kept for the backward.
  if (Operation *def = loss->value.getDefiningOp())
    def->setAttr("zplan.loss", b.getUnitAttr());

  SmallVector<zg::WeightOp> all(train.getOps<zg::WeightOp>());
  SmallVector<Value> wrt;
  for (zg::WeightOp w : all)
    wrt.push_back(w.getResult());
  size_t opsBeforeBackward = body.getOperations().size();
  Operation *lastForward = body.getTerminator()->getPrevNode();
  // fp16 loss scaling: the backward starts from the loss times the scale.
  // For causal-lm the scale goes into the per-row weights (scale / tokens),
  // so no gradient ever holds the scale itself, which fp16 may not represent;
  // the scaled loss is differentiated, never stored (it dies unused). A loss
  // from a model output is seeded with the scale, converted to its dtype.
  Value target = loss->value, seed;
  if (Value scale = lossScaleSeed(b, loc)) {
    if (loss->perRow) {
      // fp32 weights: scale / tokens, which fits in fp16 where the scale
      // alone (65536 at the start) may not.
      auto w = zg::MulOp::create(b, loc, loss->weights.getType(), loss->weights,
                                 scale);
      w->setAttr("zplan.own_dtype", b.getUnitAttr());
      Value rows =
          zg::MulOp::create(b, loc, loss->perRow.getType(), loss->perRow, w);
      target = zg::ReduceSumOp::create(b, loc, rtt(loss->value), rows,
                                       ArrayRef<int64_t>{0}, false);
    } else {
      seed = zg::CastOp::create(b, loc, rtt(loss->value), scale);
    }
  }
  FailureOr<SmallVector<Value>> grads =
      autodiff::buildReverseMode(b, target, wrt, loss->stopGradient, seed);
  if (failed(grads))
    return signalPassFailure();
  numBackwardOps += body.getOperations().size() - opsBeforeBackward;
  if (recompute == "selective")
    recomputeSelective(train, lastForward);
  else if (recompute == "full")
    recomputeFull(train, lastForward);

  // As PyTorch: a parameter without a gradient is not updated.
  SmallVector<zg::WeightOp> params;
  SmallVector<Value> paramGrads;
  for (auto [w, g] : llvm::zip(all, *grads))
    if (g) {
      params.push_back(w);
      paramGrads.push_back(g);
    }
  if (params.empty()) {
    train.emitError("zg-build-train-step: no parameter reaches the loss");
    return signalPassFailure();
  }
  numParameters += params.size();

  if (!accumulate) {
    Value lrArg = train.getArgument(train.getNumArguments() - 2);
    Value stepArg = train.getArgument(train.getNumArguments() - 1);
    Value norm =
        buildUpdate(b, loc, params, paramGrads, lrArg, stepArg, Value());
    setResults(b, train, {loss->value, norm}, {"loss", "grad_norm"});
    eraseDeadOps(train);
  } else {
    // @micro_step adds its gradients and its loss into persistent sums;
    // @optimizer_step divides them by the number of micro-batches (each
    // micro-batch loss is a mean over the same number of tokens, so the mean
    // of the means is the whole batch's mean), updates, and clears the sums.
    auto lossSumType = f32Scalar;
    SmallVector<Value> sums;
    for (auto [w, g] : llvm::zip(params, paramGrads)) {
      Value sum = makeState(b, loc, w.getName() + ".grad", "grad",
                            w.getName(), cast<RankedTensorType>(g.getType()));
      zg::AccumulateOp::create(b, loc, sum, g);
    }
    Value lossSum = makeState(b, loc, "loss_sum", "scalar", "", lossSumType);
    Value lossValue = loss->value;
    if (lossValue.getType() != lossSumType)
      lossValue = zg::CastOp::create(b, loc, lossSumType, lossValue);
    zg::AccumulateOp::create(b, loc, lossSum, lossValue);
    setResults(b, train, {loss->value}, {"loss"});
    eraseDeadOps(train);

    b.setInsertionPointAfter(train);
    auto opt = func::FuncOp::create(b, loc, "optimizer_step",
                                    FunctionType::get(ctx, {}, {}));
    Block *entry = opt.addEntryBlock();
    b.setInsertionPointToStart(entry);
    func::ReturnOp::create(b, loc);
    if (failed(addScalarInputs(b, opt, lr, loc)))
      return signalPassFailure();
    b.setInsertionPoint(entry->getTerminator());
    SmallVector<zg::WeightOp> optParams;
    for (auto [w, g] : llvm::zip(params, paramGrads)) {
      optParams.push_back(cast<zg::WeightOp>(b.clone(*w)));
      sums.push_back(makeState(b, loc, w.getName() + ".grad", "grad",
                               w.getName(),
                               cast<RankedTensorType>(g.getType())));
    }
    // The plan records the number of micro-batches as the scalar input
    // micro_batches (default M) that the sums are divided by, so that the
    // runner reads M from the plan instead of a flag that must match.
    auto i64Scalar = RankedTensorType::get({}, b.getI64Type());
    if (failed(opt.insertArgument(
            2, i64Scalar,
            b.getDictionaryAttr(
                {b.getNamedAttr("zg.name", b.getStringAttr("micro_batches")),
                 b.getNamedAttr("zg.default",
                                b.getI64IntegerAttr(microBatches))}),
            loc)))
      return signalPassFailure();
    auto count = zg::CastOp::create(b, loc, f32Scalar, opt.getArgument(2));
    auto inverse =
        zg::DivOp::create(b, loc, f32Scalar, scalar(b, loc, f32, 1.0), count);
    for (Operation *op : {count.getOperation(), inverse.getOperation(),
                          inverse.getLhs().getDefiningOp()})
      op->setAttr("zplan.own_dtype", b.getUnitAttr());
    Value norm = buildUpdate(b, loc, optParams, sums, opt.getArgument(0),
                             opt.getArgument(1), inverse);
    Value sumRead = makeState(b, loc, "loss_sum", "scalar", "", lossSumType);
    auto meanLoss = zg::MulOp::create(b, loc, f32Scalar, sumRead, inverse);
    meanLoss->setAttr("zplan.own_dtype", b.getUnitAttr());
    // Clear the sums for the next step, after every read above.
    for (Value sum : sums) {
      auto type = cast<RankedTensorType>(sum.getType());
      zg::AssignOp::create(
          b, loc, sum,
          zg::ConstantOp::create(
              b, loc, type,
              DenseElementsAttr::get(
                  type, b.getFloatAttr(type.getElementType(), 0.0))));
    }
    zg::AssignOp::create(b, loc, sumRead, scalar(b, loc, f32, 0.0));
    setResults(b, opt, {meanLoss, norm}, {"loss", "grad_norm"});
  }

  // @init fills the optimizer state and the sums with zeros.
  b.setInsertionPoint(train);
  auto init = func::FuncOp::create(b, main.getLoc(), "init",
                                   FunctionType::get(ctx, {}, {}));
  Block *entry = init.addEntryBlock();
  b.setInsertionPointToStart(entry);
  for (const StateSpec &s : states) {
    Attribute initAttr = s.init == 0.0 ? Attribute(b.getStringAttr("zeros"))
                                       : Attribute(b.getF64FloatAttr(s.init));
    Value target =
        zg::StateOp::create(b, loc, s.type, s.name, s.kind, s.of, initAttr);
    // A splat constant: ZeroTrain re-makes it at a partitioned shape.
    Value fill = zg::ConstantOp::create(
        b, loc, s.type,
        DenseElementsAttr::get(
            s.type, b.getFloatAttr(s.type.getElementType(), s.init)));
    // A non-zero fill (the initial loss scale, 65536) in the state's own
    // fp32: --dtype fp16 cannot hold it.
    if (s.init != 0.0)
      fill.getDefiningOp()->setAttr("zplan.own_dtype", b.getUnitAttr());
    zg::AssignOp::create(b, loc, target, fill);
  }
  func::ReturnOp::create(b, loc);
  main.erase();
}

} // namespace
