//===- Reverse.cpp - reverse-mode differentiation of zg code --------------===//
//
// Two sweeps over the block: forward, to find the values that depend on a
// differentiated input ("active"); backward, from the loss, calling each
// active op's gradient rule and summing the gradients of values with several
// uses. Only active operands receive gradients, so constants, masks and ids
// cost nothing; ops the rules build for inactive operands are left unused
// and removed by the caller's dead-code sweep.
//
//===----------------------------------------------------------------------===//

#include "compiler/autodiff/Reverse.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
namespace zg = zplan::graph;

namespace zplan::autodiff {

FailureOr<SmallVector<Value>>
buildReverseMode(OpBuilder &b, Value loss, ArrayRef<Value> wrt,
                 const llvm::DenseSet<Operation *> &stopGradient, Value seed) {
  Operation *lossOp = loss.getDefiningOp();
  Block *block = b.getInsertionBlock();
  // The forward part: every op of the block up to the loss.
  SmallVector<Operation *> forward;
  for (Operation &op : *block) {
    forward.push_back(&op);
    if (&op == lossOp)
      break;
  }

  llvm::DenseSet<Value> active;
  for (Value v : wrt)
    active.insert(v);
  for (Operation *op : forward) {
    if (!llvm::any_of(op->getOperands(),
                      [&](Value v) { return active.contains(v); }))
      continue;
    for (Value r : op->getResults())
      if (isa<FloatType>(cast<ShapedType>(r.getType()).getElementType()))
        active.insert(r);
  }

  llvm::DenseMap<Value, Value> grads;
  auto lossType = cast<RankedTensorType>(loss.getType());
  grads[loss] =
      seed ? seed
           : zg::ConstantOp::create(
                 b, loss.getLoc(), lossType,
                 DenseElementsAttr::get(
                     lossType, b.getFloatAttr(lossType.getElementType(), 1.0)));
  for (Operation *op : llvm::reverse(forward)) {
    if (stopGradient.contains(op))
      continue;
    SmallVector<Value> dys;
    bool any = false;
    for (Value r : op->getResults()) {
      Value g = grads.lookup(r);
      dys.push_back(g);
      any |= bool(g);
    }
    if (!any)
      continue;
    bool needed = llvm::any_of(op->getOperands(),
                               [&](Value v) { return active.contains(v); });
    if (!needed)
      continue;
    auto rule = dyn_cast<zg::GradientOpInterface>(op);
    if (!rule)
      return op->emitOpError("is on the path from a parameter to the loss but "
                             "has no gradient rule");
    SmallVector<Value> dxs;
    if (failed(rule.buildGradients(b, dys, dxs)))
      return failure();
    for (auto [k, operand] : llvm::enumerate(op->getOperands())) {
      if (!active.contains(operand))
        continue;
      Value dx = k < dxs.size() ? dxs[k] : Value();
      if (!dx || dx.getType() != operand.getType())
        return op->emitOpError("gradient rule gives no gradient of the "
                               "operand's type for operand #")
               << k << ", which depends on a parameter";
      Value &acc = grads[operand];
      acc = acc ? zg::AddOp::create(b, op->getLoc(), operand.getType(), acc,
                                    dx)
                      .getResult()
                : dx;
    }
  }

  SmallVector<Value> result;
  for (Value v : wrt)
    result.push_back(grads.lookup(v));
  return result;
}

} // namespace zplan::autodiff
