//===- GradientOpInterface.td - reverse-mode rules of zg -*- tablegen -*-===//
//
// Every differentiable zg op states its reverse-mode rule here, with the op,
// instead of in a switch inside the autodiff pass.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_GRAPH_GRADIENTOPINTERFACE_TD
#define ZPLAN_DIALECTS_GRAPH_GRADIENTOPINTERFACE_TD

include "mlir/IR/OpBase.td"

def GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::zplan::graph";
  let description = [{
    The vector-Jacobian product of an op: given the gradient of a scalar loss
    with respect to each result, build (with zg ops, at the builder's
    insertion point) the gradient with respect to each operand. The forward
    values (operands and results of the op) may be used freely: the backward
    runs after the forward in the same function.

    `resultGrads` has one entry per result; a null entry means that result
    does not reach the loss (its gradient is zero), and at least one entry is
    non-null. `operandGrads` receives one entry per operand, of the operand's
    type; a null entry means the operand has no gradient: integer and boolean
    operands (ids, indices, conditions) and operands the op defines as
    non-differentiable (an attention mask, a label). The caller discards
    gradients of operands that do not depend on a parameter, so a rule may
    build all of them. A rule that cannot differentiate a particular instance
    reports through `emitOpError` and returns failure.
  }];
  let methods = [
    InterfaceMethod<
      "Builds the operand gradients from the result gradients.",
      "::mlir::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // ZPLAN_DIALECTS_GRAPH_GRADIENTOPINTERFACE_TD
