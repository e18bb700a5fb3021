//===- Passes.h - sharding passes -------------------------------*- C++ -*-===//
//
// Declarations of the tensor-parallel, ZeRO and offload passes (Passes.td).
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_SHARDING_PASSES_H
#define ZPLAN_COMPILER_SHARDING_PASSES_H

#include "dialects/dist/ZdDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace zplan::sharding {

#define GEN_PASS_DECL
#include "compiler/sharding/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/sharding/Passes.h.inc"

} // namespace zplan::sharding

#endif // ZPLAN_COMPILER_SHARDING_PASSES_H
