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
#include "mlir/Transforms/RegionUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

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
  FailureOr<autodiff::Loss> buildLoss(OpBuilder &b, func::FuncOp f);
  Value learningRate(OpBuilder &b, Location loc, Value lr, Value step);
  SmallVector<StateSpec> states;
};

LogicalResult BuildTrainStepPass::checkOptions(ModuleOp module) {
  auto bad = [&](const Twine &msg) {
    return module.emitError("zg-build-train-step: ") << msg;
  };
  if (lossOutput.empty() && loss != "causal-lm")
    return bad("unknown loss '" + loss + "' (expected causal-lm, or "
                                         "loss-output=NAME)");
  if (lrSchedule != "constant" && lrSchedule != "warmup-decay")
    return bad("unknown lr-schedule '" + lrSchedule +
               "' (expected constant or warmup-decay)");
  if (lrSchedule == "warmup-decay" &&
      (warmupSteps < 0 || totalSteps <= warmupSteps))
    return bad("warmup-decay needs 0 <= warmup-steps < total-steps (got " +
               Twine(warmupSteps) + " and " + Twine(totalSteps) + ")");
  if (!(lr >= 0) || !(weightDecay >= 0) || !(eps >= 0) || !(clipGrad >= 0))
    return bad("lr, weight-decay, eps and clip-grad must be >= 0");
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return bad("beta1 and beta2 must be in [0, 1)");
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

/// lr * factor(step): the constant schedule, or a linear warmup over
/// warmup-steps followed by a linear decay reaching 0 at total-steps (the
/// linear form of DeepSpeed's WarmupDecayLR with a warmup floor of 0):
///   factor(t) = t / W                      for t < W
///             = max(0, (T - t) / (T - W))  otherwise.
Value BuildTrainStepPass::learningRate(OpBuilder &b, Location loc, Value lr,
                                       Value step) {
  if (lrSchedule == "constant")
    return lr;
  Type f32 = b.getF32Type();
  Value t = zg::CastOp::create(b, loc, RankedTensorType::get({}, f32), step);
  double w = double(warmupSteps), total = double(totalSteps);
  Value decay = scalarOp<zg::DivOp>(
      b, loc, scalarOp<zg::SubOp>(b, loc, scalar(b, loc, f32, total), t),
      scalar(b, loc, f32, total - w));
  decay = scalarOp<zg::MaxOp>(b, loc, decay, scalar(b, loc, f32, 0.0));
  Value factor = decay;
  if (warmupSteps > 0) {
    Value warm =
        scalarOp<zg::DivOp>(b, loc, t, scalar(b, loc, f32, w));
    Value warming = zg::LessOp::create(
        b, loc, RankedTensorType::get({}, b.getI1Type()), t,
        scalar(b, loc, f32, w));
    factor = zg::WhereOp::create(b, loc, t.getType(), warming, warm, decay);
  }
  return scalarOp<zg::MulOp>(b, loc, lr, factor);
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
  if (module.lookupSymbol("train_step") || module.lookupSymbol("init")) {
    module.emitError("zg-build-train-step: the module already has @init or "
                     "@train_step");
    return signalPassFailure();
  }

  // @train_step starts as a copy of the forward.
  OpBuilder b(ctx);
  b.setInsertionPointAfter(main);
  auto train = cast<func::FuncOp>(b.clone(*main));
  train.setSymName("train_step");
  splitSharedWeights(train);
  keepAttentionLse(train);
  if (restoreZeroBiases)
    restoreBiases(train);

  Block &body = train.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Location loc = ret.getLoc();
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  auto f32Scalar = RankedTensorType::get({}, f32);
  auto i64Scalar = RankedTensorType::get({}, i64);
  unsigned numInputs = train.getNumArguments();
  if (failed(train.insertArgument(
          numInputs, f32Scalar,
          b.getDictionaryAttr({b.getNamedAttr("zg.name", b.getStringAttr("lr")),
                               b.getNamedAttr("zg.default",
                                              b.getF64FloatAttr(lr))}),
          loc)) ||
      failed(train.insertArgument(
          numInputs + 1, i64Scalar,
          b.getDictionaryAttr(
              {b.getNamedAttr("zg.name", b.getStringAttr("step")),
               b.getNamedAttr("zg.default", b.getI64IntegerAttr(1))}),
          loc))) {
    train.emitError("zg-build-train-step: cannot add the lr and step inputs");
    return signalPassFailure();
  }
  Value lrArg = train.getArgument(numInputs);
  Value stepArg = train.getArgument(numInputs + 1);

  b.setInsertionPoint(ret);
  size_t opsBefore = body.getOperations().size();
  FailureOr<autodiff::Loss> loss = buildLoss(b, train);
  if (failed(loss))
    return signalPassFailure();

  SmallVector<zg::WeightOp> params(train.getOps<zg::WeightOp>());
  SmallVector<Value> wrt;
  for (zg::WeightOp w : params)
    wrt.push_back(w.getResult());
  size_t opsBeforeBackward = body.getOperations().size();
  FailureOr<SmallVector<Value>> grads = autodiff::buildReverseMode(
      b, loss->value, wrt, loss->stopGradient);
  if (failed(grads))
    return signalPassFailure();
  numBackwardOps += body.getOperations().size() - opsBeforeBackward;
  (void)opsBefore;

  // The global gradient norm over every parameter that reaches the loss.
  Value sumSquares;
  for (Value g : *grads) {
    if (!g)
      continue;
    Value s = zg::SumSquaresOp::create(b, loc, f32Scalar, g);
    sumSquares = sumSquares ? scalarOp<zg::AddOp>(b, loc, sumSquares, s) : s;
  }
  if (!sumSquares) {
    train.emitError("zg-build-train-step: no parameter reaches the loss");
    return signalPassFailure();
  }
  Value norm = zg::SqrtOp::create(b, loc, f32Scalar, sumSquares);
  Value gradScale = scalar(b, loc, f32, 1.0);
  if (clipGrad > 0) {
    Value denom = scalarOp<zg::AddOp>(b, loc, norm, scalar(b, loc, f32, 1e-6));
    gradScale = scalarOp<zg::MinOp>(
        b, loc, scalar(b, loc, f32, 1.0),
        scalarOp<zg::DivOp>(b, loc, scalar(b, loc, f32, clipGrad), denom));
  }
  Value stepLr = learningRate(b, loc, lrArg, stepArg);

  for (auto [w, g] : llvm::zip(params, *grads)) {
    if (!g)
      continue; // As PyTorch: a parameter without a gradient is not updated.
    ++numParameters;
    auto momentType = RankedTensorType::get(rtt(w).getShape(), f32);
    auto makeState = [&](StringRef suffix, StringRef kind) {
      StateSpec spec{(w.getName() + suffix).str(), kind.str(),
                     w.getName().str(), momentType};
      states.push_back(spec);
      return zg::StateOp::create(b, loc, momentType, spec.name, spec.kind,
                                 spec.of, b.getStringAttr("zeros"));
    };
    Value m = makeState(".exp_avg", "moment1");
    Value v = makeState(".exp_avg_sq", "moment2");
    zg::AdamwOp::create(b, loc, w.getResult(), g, m, v, stepLr, stepArg,
                        gradScale, b.getF64FloatAttr(beta1),
                        b.getF64FloatAttr(beta2), b.getF64FloatAttr(eps),
                        b.getF64FloatAttr(weightDecay));
  }

  // (loss, grad_norm) replace the forward's outputs.
  func::ReturnOp::create(b, loc, ValueRange{loss->value, norm});
  ret.erase();
  train.setType(FunctionType::get(ctx, train.getArgumentTypes(),
                                  {f32Scalar, f32Scalar}));
  train.setAllResultAttrs(ArrayRef<DictionaryAttr>{
      b.getDictionaryAttr({b.getNamedAttr("zg.name",
                                          b.getStringAttr("loss"))}),
      b.getDictionaryAttr({b.getNamedAttr("zg.name",
                                          b.getStringAttr("grad_norm"))})});

  // Forward outputs other than the loss, and gradients the rules built for
  // inputs that need none, are dead now.
  bool changed = true;
  while (changed) {
    changed = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (isOpTriviallyDead(&op)) {
        op.erase();
        changed = true;
      }
  }

  // @init fills the optimizer state.
  b.setInsertionPoint(train);
  auto init = func::FuncOp::create(b, main.getLoc(), "init",
                                   FunctionType::get(ctx, {}, {}));
  Block *entry = init.addEntryBlock();
  b.setInsertionPointToStart(entry);
  for (const StateSpec &s : states) {
    Value target = zg::StateOp::create(b, loc, s.type, s.name, s.kind, s.of,
                                       b.getStringAttr("zeros"));
    // A splat constant: ZeroTrain re-makes it at a partitioned shape.
    Value zero = zg::ConstantOp::create(
        b, loc, s.type,
        DenseElementsAttr::get(s.type, b.getFloatAttr(f32, 0.0)));
    zg::AssignOp::create(b, loc, target, zero);
  }
  func::ReturnOp::create(b, loc);
  main.erase();
}

} // namespace
