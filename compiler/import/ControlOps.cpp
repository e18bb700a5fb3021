//===- ControlOps.cpp - Constants and graph plumbing ONNX ops
//---------------===//
//
// Constant, ConstantOfShape (its value must fold: it has no run-time form),
// Identity and Dropout (inference: a pass-through that keeps every element),
// If whose condition is a constant (the branch it takes, inlined).
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Importer.h"

using namespace mlir;
using namespace zplan::import;
using namespace zplan::import::detail;
namespace zg = zplan::graph;

LogicalResult Importer::importConstant(const onnx::NodeProto &n) {
  if (n.attribute_size() != 1)
    return nodeError(n) << "needs exactly one value attribute";
  const auto &a = n.attribute(0);
  ConstTensor c;
  if (a.name() == "value") {
    Val v;
    if (failed(readTensorProto(a.t(), "node '" + n.name() + "' (Constant)", v)))
      return failure();
    if (!v.c)
      return nodeError(n)
             << "external data in a Constant node is not supported";
    c = *v.c;
  } else if (a.name() == "value_float") {
    c = ConstTensor(kFloat, {});
    c.set(0, a.f());
  } else if (a.name() == "value_int") {
    c = ConstTensor(kInt64, {});
    c.i[0] = a.i();
  } else if (a.name() == "value_floats") {
    c = ConstTensor(kFloat, {int64_t(a.floats_size())});
    for (int k = 0; k < a.floats_size(); ++k)
      c.set(k, a.floats(k));
  } else if (a.name() == "value_ints") {
    c = ConstTensor(kInt64, {int64_t(a.ints_size())});
    for (int k = 0; k < a.ints_size(); ++k)
      c.i[k] = a.ints(k);
  } else {
    return nodeError(n) << "unsupported attribute '" << a.name() << "'";
  }
  setConst(n, 0, std::move(c));
  return success();
}

LogicalResult Importer::importConstantOfShape(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  for (int k = 0; k < n.input_size(); ++k)
    if (!n.input(k).empty() && !vals[n.input(k)].c)
      return nodeError(n) << "input " << k << " ('" << n.input(k)
                          << "') does not fold to a constant, and " << op
                          << " is unsupported at run time";
  std::vector<int64_t> shape;
  if (failed(constInts(n, 0, "shape", shape)))
    return failure();
  if (!checkedNumElements(shape))
    return nodeError(n) << "shape " << shapeStr(shape)
                        << " has a negative dim or too many elements";
  if (*checkedNumElements(shape) > kMaxFoldElements)
    return nodeError(n) << "folding would create " << *checkedNumElements(shape)
                        << " elements; the limit is " << kMaxFoldElements;
  ConstTensor c(kFloat, shape);
  if (auto *a = findAttr(n, "value")) {
    Val v;
    if (failed(readTensorProto(a->t(), "node '" + n.name() + "'", v)))
      return failure();
    if (!v.c || v.c->numel() != 1)
      return nodeError(n) << "value must hold exactly one element";
    c = ConstTensor(v.dtype, shape);
    for (int64_t k = 0; k < c.numel(); ++k)
      c.isFloat() ? c.set(k, v.c->getF(0)) : c.setI(k, v.c->getI(0));
  }
  setConst(n, 0, std::move(c));
  return success();
}

LogicalResult Importer::importIdentity(const onnx::NodeProto &n) {
  // Inference: Dropout passes its input through and keeps every element.
  Val *x = in(n, 0);
  alias(n, 0, *x);
  if (n.output_size() > 1 && !n.output(1).empty()) {
    ConstTensor keep(kBool, {});
    keep.i[0] = 1;
    Shape ones(x->shape.size(), 1);
    keep.shape = ones;
    setConst(n, 1, std::move(keep), x->shape);
  }
  return success();
}

/// An If whose condition folds to a constant is the branch it takes: that
/// branch's nodes are imported in place (their ops checked then) and its
/// outputs are the If's. optimum's decoder_model_merged.onnx chooses this way
/// between the decoder without a past (else) and the one with a past (then)
/// by its input use_cache_branch, which generation binds to false. A
/// condition known only at run time has no form here: the graph would need
/// both branches and a run-time choice.
LogicalResult Importer::importIf(const onnx::NodeProto &n) {
  Val *cond = in(n, 0);
  if (!cond->c)
    return nodeError(n)
           << "its condition '" << n.input(0)
           << "' does not fold to a constant: an If is imported only when its "
              "condition is a constant, as the branch it takes (optimum's "
              "decoder_model_merged.onnx: zplan --generate binds "
              "use_cache_branch to false; for other plans use "
              "decoder_model.onnx or decoder_with_past_model.onnx)";
  const ConstTensor &c = full(*cond);
  if (c.numel() != 1)
    return nodeError(n) << "its condition has " << c.numel()
                        << " elements; it must have one";
  StringRef which = c.getF(0) != 0 ? "then_branch" : "else_branch";
  const onnx::GraphProto *branch = nullptr;
  for (const auto &a : n.attribute())
    if (a.name() == which && a.has_g())
      branch = &a.g();
  if (!branch)
    return nodeError(n) << "the condition takes " << which
                        << ", which the node does not have";
  if (branch->output_size() != n.output_size())
    return nodeError(n) << which << " has " << branch->output_size()
                        << " outputs; the node has " << n.output_size();
  if (failed(checkOps(*branch)))
    return failure();
  for (const auto &t : branch->initializer()) {
    Val v;
    if (failed(readTensorProto(t,
                               "initializer '" + t.name() + "' of " + which +
                                   " of node '" + n.name() + "'",
                               v)))
      return failure();
    v.init = &t;
    vals[t.name()] = std::move(v);
  }
  std::vector<const onnx::NodeProto *> order;
  if (failed(sortNodes(*branch, order)))
    return failure();
  for (const onnx::NodeProto *m : order)
    if (failed(importNode(*m)))
      return failure();
  // The branch's outputs may have the If's output names (optimum's do):
  // copied before any is written.
  SmallVector<Val> outs;
  for (const auto &o : branch->output())
    outs.push_back(vals[o.name()]);
  for (int k = 0; k < n.output_size(); ++k)
    if (!n.output(k).empty())
      alias(n, k, outs[k]);
  return success();
}
