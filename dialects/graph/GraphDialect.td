//===- GraphDialect.td - the zg dialect --------------------*- tablegen -*-===//
//
// The graph dialect of zplan: tensor ops on ranked, statically shaped tensors.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_GRAPH_GRAPHDIALECT_TD
#define ZPLAN_DIALECTS_GRAPH_GRAPHDIALECT_TD

include "mlir/IR/OpBase.td"

def Graph_Dialect : Dialect {
  let name = "zg";
  let cppNamespace = "::zplan::graph";
  let summary = "Statically shaped tensor ops of a transformer graph";
  let description = [{
    The `zg` dialect holds the compute graph that the ONNX importer produces
    after binding every symbolic dimension and folding every shape-only
    subgraph. Every value is a ranked tensor with a static shape. Generic ops
    keep ONNX semantics exactly (numpy broadcasting, negative axes already
    normalised where an attribute says so); the recognised ops (`linear`,
    `layer_norm`, `rms_norm`, `gelu`, `silu`, `attention`, `embedding`) are
    what the recognition passes produce. Op names match the runtime's plan
    opcodes (runtime/schema/plan.fbs) one to one, except `weight`, `constant`,
    `split` (several slices) and `causal_mask`, which the planner lowers or
    the recognition passes absorb.

    Graph inputs are the arguments of `func.func @main` and carry their ONNX
    names in the `zg.name` argument attribute; outputs are its results with a
    `zg.name` result attribute.
  }];
}

#endif // ZPLAN_DIALECTS_GRAPH_GRAPHDIALECT_TD
