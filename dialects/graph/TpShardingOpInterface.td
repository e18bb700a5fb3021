//===- TpShardingOpInterface.td - tp rules of zg ops ----*- tablegen -*-===//
//
// Every zg op states its tensor-parallel rule here, with the op, instead of
// in an if-chain inside --zplan-tp-propagate: how the splits of its operands
// and results over the tp axis relate (TpShardingOpInterface.h holds the
// types; GraphTpRules.cpp the rules).
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_GRAPH_TPSHARDINGOPINTERFACE_TD
#define ZPLAN_DIALECTS_GRAPH_TPSHARDINGOPINTERFACE_TD

include "mlir/IR/OpBase.td"

def TpShardingOpInterface : OpInterface<"TpShardingOpInterface"> {
  let cppNamespace = "::zplan::graph";
  let description = [{
    The tensor-parallel rule of an op. --zplan-tp-propagate walks a function
    in SSA order and asks each op for its rule, handing it a TpRuleContext:
    the shardings the walk has given the op's operands so far, the tp size,
    whether the function is a training step, and the parameter and state
    shardings other programs of the module fixed.

    `getTpRule` returns one TpShard per operand (the sharding the op needs
    of it; --zplan-tp-partition converts an operand whose producer gives
    another one) and one per result (the sharding the op gives it; a
    `partial` result is all-reduced right after the op). A rule never asks
    for an activation to be split when its producer gives it whole, except
    where TpRuleContext::canProvide says the value can be sliced (weights,
    constants, and in a training step any whole value). An op that can only
    compute whole values says so with the rule of ZG_TpWhole; an op that
    does not implement this interface at all is refused by the propagation
    when a split operand reaches it.

    A rule reports an instance it cannot plan (a head count tp does not
    divide) with `emitError` and returns failure.
  }];
  let methods = [
    InterfaceMethod<
      "Returns the sharding needed of each operand and given to each result.",
      "::mlir::FailureOr<::zplan::graph::TpRule>", "getTpRule",
      (ins "::zplan::graph::TpRuleContext &":$ctx)>,
    InterfaceMethod<
      [{For an op whose result is a partial sum over tp: the index of the
        operand that must be added once, after the sum, instead of on every
        rank (a linear's bias). tp-partition moves it behind the all_reduce.}],
      "std::optional<unsigned>", "getTpAddendAfterSum", (ins), "",
      [{ return std::nullopt; }]>,
    InterfaceMethod<
      [{For an op that looks up or scatters into rows of a vocabulary split
        over tp, given its results' shardings and its rank-local types: the
        number of vocabulary rows each rank holds, from which the op offsets
        the ids it handles (recorded as zd.vocab_stride). 0 when the op is not
        vocabulary-parallel.}],
      "int64_t", "getTpVocabStride",
      (ins "::llvm::ArrayRef<::zplan::graph::TpShard>":$results), "",
      [{ return 0; }]>
  ];
}

// The rule of an elementwise op (operands broadcast to the result, numpy
// style): the result is split where a non-broadcast operand is.
def TpElementwise : NativeOpTrait<"TpElementwise"> {
  let cppNamespace = "::zplan::graph";
}

// The rule of an op computed whole on every rank: every operand is needed
// whole (a split one is gathered), every result is whole. Ops take it where a
// split would need data other ranks hold (index selections at data-dependent
// positions), where nothing is split (weights, constants, masks, the fused ops
// that --zplan-fuse makes after sharding), or where no split rule has been
// written yet (the norms' backward).
def TpWhole : NativeOpTrait<"TpWhole"> {
  let cppNamespace = "::zplan::graph";
}

#endif // ZPLAN_DIALECTS_GRAPH_TPSHARDINGOPINTERFACE_TD
