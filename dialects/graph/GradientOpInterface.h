//===- GradientOpInterface.h - reverse-mode rules of zg ops -----*- C++ -*-===//
//
// Declares the interface through which each differentiable zg op builds its
// vector-Jacobian product (GradientOpInterface.td describes the contract).
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_GRAPH_GRADIENTOPINTERFACE_H
#define ZPLAN_DIALECTS_GRAPH_GRADIENTOPINTERFACE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"

#include "dialects/graph/GradientOpInterface.h.inc"

#endif // ZPLAN_DIALECTS_GRAPH_GRADIENTOPINTERFACE_H
