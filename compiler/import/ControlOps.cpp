//===- ControlOps.cpp - Constants and graph plumbing ONNX ops
//---------------===//
//
// Constant, ConstantOfShape (its value must fold: it has no run-time form),
// Identity and Dropout (inference: a pass-through that keeps every element).
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
