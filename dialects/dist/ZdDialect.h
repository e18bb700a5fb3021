//===- ZdDialect.h - the zplan distribution dialect -------------*- C++ -*-===//
//
// Declares the `zd` dialect, its sharding attribute and its ops, and small
// helpers to read the mesh from the enclosing module.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_DIST_ZDDIALECT_H
#define ZPLAN_DIALECTS_DIST_ZDDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/dist/ZdOpsDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/dist/ZdAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/dist/ZdOps.h.inc"

namespace zplan::dist {

/// The size of a mesh axis ("tp" or "dp") as set on the module that encloses
/// `op` (attributes `zd.tp` / `zd.dp`); 1 when the attribute is absent.
int64_t getMeshAxisSize(mlir::Operation *op, llvm::StringRef axis);

/// Sets the mesh attributes on a module.
void setMesh(mlir::ModuleOp module, int64_t tp, int64_t dp);

/// True for the two axis names collectives accept.
inline bool isValidAxis(llvm::StringRef axis) {
  return axis == "tp" || axis == "dp";
}

} // namespace zplan::dist

#endif // ZPLAN_DIALECTS_DIST_ZDDIALECT_H
