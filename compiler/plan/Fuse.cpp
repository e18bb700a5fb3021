//===- Fuse.cpp - --zplan-fuse --------------------------------------------===//
//
// Fuses producer/consumer pairs that the CUDA kernels run as one step
// (linear + GELU epilogue, linear + residual add epilogue, residual add +
// norm, activation + gate product),
// before the schedule and the memory plan see the graph: the plan then holds
// the fused steps and their buffers, and the runtime rewrites nothing.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/Passes.h"

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANFUSE
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

bool isFloatTensor(Value v) {
  return isa<FloatType>(cast<ShapedType>(v.getType()).getElementType());
}

/// True when some op strictly between `from` and `to` releases `v`
/// (zd.release): a use moved past it would read freed storage.
bool releasedBetween(Value v, Operation *from, Operation *to) {
  for (Operation *op = from->getNextNode(); op && op != to;
       op = op->getNextNode())
    if (auto release = dyn_cast<dist::ReleaseOp>(op))
      if (llvm::is_contained(release->getOperands(), v))
        return true;
  return false;
}

struct FusePass : impl::ZplanFuseBase<FusePass> {
  using ZplanFuseBase::ZplanFuseBase;

  void runOnOperation() override {
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(getOperation());
    if (failed(funcs))
      return signalPassFailure();
    for (func::FuncOp func : *funcs)
      fuseProgram(func.getBody().front());
  }

  /// The four patterns over one program's block.
  void fuseProgram(Block &body) {
    // One walk per pattern over a snapshot of the block; `erased` skips the
    // ops an earlier rewrite removed.
    llvm::SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    llvm::DenseSet<Operation *> erased;
    for (Operation *op : ops)
      if (!erased.contains(op))
        if (auto lin = dyn_cast<graph::LinearOp>(op))
          fuseLinearGelu(lin, erased);
    // Before the residual norm: an add folded into its product leaves the
    // norm after it plain.
    for (Operation *op : ops)
      if (!erased.contains(op))
        if (auto add = dyn_cast<graph::AddOp>(op))
          fuseLinearResidual(add, erased);
    for (Operation *op : ops)
      if (!erased.contains(op))
        if (auto add = dyn_cast<graph::AddOp>(op))
          fuseResidualNorm(add, erased);
    for (Operation *op : ops)
      if (!erased.contains(op))
        fuseGated(op, erased);
  }

  /// linear -> gelu(tanh), the linear's result read by nothing else. The
  /// fused op sits where the linear was: its operands are defined there, and
  /// a ZeRO release of the weight may follow the linear directly.
  void fuseLinearGelu(graph::LinearOp lin, llvm::DenseSet<Operation *> &erased) {
    if (!lin.getResult().hasOneUse())
      return;
    auto gelu = dyn_cast<graph::GeluOp>(*lin.getResult().getUsers().begin());
    if (!gelu || gelu.getApproximate() != "tanh" ||
        gelu.getResult().getType() != lin.getResult().getType() ||
        !isFloatTensor(lin.getResult()))
      return;
    OpBuilder b(lin);
    auto fused = graph::LinearGeluOp::create(
        b, FusedLoc::get(b.getContext(), {lin.getLoc(), gelu.getLoc()}),
        gelu.getResult().getType(), lin.getInput(), lin.getWeight(),
        lin.getBias(), lin.getTransWAttr(), lin.getAlphaAttr());
    gelu.getResult().replaceAllUsesWith(fused.getResult());
    erased.insert(gelu);
    erased.insert(lin);
    gelu.erase();
    lin.erase();
    ++numLinearGelu;
  }

  /// add(linear, r) / add(r, linear), the linear's result read by nothing
  /// else, every type the add's (no broadcasting) and the product at least
  /// residualMinRows rows. The fused op sits where the linear was when the
  /// residual is defined before it (the residual stream always is), else
  /// where the add was when nothing releases the linear's operands in
  /// between.
  void fuseLinearResidual(graph::AddOp add,
                          llvm::DenseSet<Operation *> &erased) {
    auto type = cast<RankedTensorType>(add.getResult().getType());
    if (add.getLhs().getType() != type || add.getRhs().getType() != type ||
        !isFloatTensor(add.getResult()) || type.getRank() < 1 ||
        add.getLhs() == add.getRhs())
      return;
    for (bool linearLhs : {true, false}) {
      Value y = linearLhs ? add.getLhs() : add.getRhs();
      Value residual = linearLhs ? add.getRhs() : add.getLhs();
      auto lin = y.getDefiningOp<graph::LinearOp>();
      if (!lin || !y.hasOneUse() || lin->getBlock() != add->getBlock())
        continue;
      int64_t n = type.getShape().back();
      if (n <= 0 || type.getNumElements() / n < residualMinRows)
        return;
      Operation *at = nullptr;
      Operation *def = residual.getDefiningOp();
      if (!def || (def->getBlock() == lin->getBlock() &&
                   def->isBeforeInBlock(lin)))
        at = lin;
      else if (!releasedBetween(lin.getInput(), lin, add) &&
               !releasedBetween(lin.getWeight(), lin, add) &&
               !(lin.getBias() && releasedBetween(lin.getBias(), lin, add)))
        at = add;
      if (!at)
        continue;
      OpBuilder b(at);
      auto fused = graph::LinearResidualOp::create(
          b, FusedLoc::get(b.getContext(), {lin.getLoc(), add.getLoc()}), type,
          lin.getInput(), lin.getWeight(), residual, lin.getBias(),
          lin.getTransWAttr(), lin.getAlphaAttr());
      add.getResult().replaceAllUsesWith(fused.getResult());
      erased.insert(add);
      erased.insert(lin);
      add.erase();
      lin.erase();
      ++numLinearResidual;
      return;
    }
  }

  /// add(a, b) -> layer_norm / rms_norm over the last axis with a scale. The
  /// fused op sits where the norm was, so the norm's parameters (which ZeRO-3
  /// may gather after the add) are defined; the sum must then have no user
  /// before the norm, and neither addend may be released in between.
  void fuseResidualNorm(graph::AddOp add, llvm::DenseSet<Operation *> &erased) {
    Value sum = add.getResult();
    auto type = cast<RankedTensorType>(sum.getType());
    if (add.getLhs().getType() != type || add.getRhs().getType() != type ||
        !isFloatTensor(sum) || type.getRank() < 1)
      return;
    Operation *norm = nullptr;
    for (Operation *user : sum.getUsers()) {
      bool candidate = false;
      if (auto ln = dyn_cast<graph::LayerNormOp>(user))
        candidate = ln.getInput() == sum && ln.getAxis() == type.getRank() - 1 &&
                    ln.getResult().getType() == type;
      else if (auto rms = dyn_cast<graph::RmsNormOp>(user))
        candidate = rms.getInput() == sum && rms.getScale() &&
                    rms.getResult().getType() == type;
      if (candidate && (!norm || user->isBeforeInBlock(norm)))
        norm = user;
    }
    if (!norm)
      return;
    for (Operation *user : sum.getUsers())
      if (user != norm && user->isBeforeInBlock(norm))
        return;
    if (releasedBetween(add.getLhs(), add, norm) ||
        releasedBetween(add.getRhs(), add, norm))
      return;
    Value scale, bias;
    llvm::StringRef kind;
    double eps;
    if (auto ln = dyn_cast<graph::LayerNormOp>(norm)) {
      scale = ln.getScale();
      bias = ln.getBias();
      kind = "layer";
      eps = ln.getEpsilon().convertToDouble();
    } else {
      auto rms = cast<graph::RmsNormOp>(norm);
      scale = rms.getScale();
      kind = "rms";
      eps = rms.getEpsilon().convertToDouble();
    }
    OpBuilder b(norm);
    auto fused = graph::ResidualNormOp::create(
        b, FusedLoc::get(b.getContext(), {add.getLoc(), norm->getLoc()}),
        type, type, add.getLhs(), add.getRhs(), scale, bias,
        b.getStringAttr(kind), b.getF64FloatAttr(eps));
    norm->getResult(0).replaceAllUsesWith(fused.getNormed());
    sum.replaceAllUsesWith(fused.getSum());
    erased.insert(norm);
    erased.insert(add);
    norm->erase();
    add.erase();
    ++numResidualNorm;
  }

  /// act(gate) -> mul(act, up) / mul(up, act), the activation read by
  /// nothing else and every type equal. The fused op sits where the mul was
  /// (the up projection is usually computed after the activation).
  void fuseGated(Operation *act, llvm::DenseSet<Operation *> &erased) {
    llvm::StringRef name;
    if (isa<graph::SiluOp>(act))
      name = "silu";
    else if (auto gelu = dyn_cast<graph::GeluOp>(act))
      name = gelu.getApproximate() == "tanh" ? "gelu_tanh" : "gelu_erf";
    else
      return;
    Value out = act->getResult(0), gate = act->getOperand(0);
    if (!out.hasOneUse() || !isFloatTensor(out) || gate.getType() != out.getType())
      return;
    auto mul = dyn_cast<graph::MulOp>(*out.getUsers().begin());
    if (!mul || mul.getLhs() == mul.getRhs())
      return;
    Value up = mul.getLhs() == out ? mul.getRhs() : mul.getLhs();
    if (up.getType() != out.getType() || mul.getResult().getType() != out.getType() ||
        releasedBetween(gate, act, mul))
      return;
    OpBuilder b(mul);
    auto fused = graph::GatedOp::create(
        b, FusedLoc::get(b.getContext(), {act->getLoc(), mul.getLoc()}),
        out.getType(), gate, up, b.getStringAttr(name));
    mul.getResult().replaceAllUsesWith(fused.getResult());
    erased.insert(mul);
    erased.insert(act);
    mul.erase();
    act->erase();
    ++numGated;
  }
};

} // namespace
} // namespace zplan::plan
