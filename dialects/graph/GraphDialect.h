//===- GraphDialect.h - the zg dialect --------------------------*- C++ -*-===//
//
// Declares the zg dialect (namespace zplan::graph).
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_GRAPH_GRAPHDIALECT_H
#define ZPLAN_DIALECTS_GRAPH_GRAPHDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/graph/GraphDialect.h.inc"

#endif // ZPLAN_DIALECTS_GRAPH_GRAPHDIALECT_H
