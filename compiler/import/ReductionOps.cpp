//===- ReductionOps.cpp - Reductions and normalisation ONNX ops
//-------------===//
//
// ReduceSum/Mean/Max/Min/Prod (axes as an attribute or, from opset 13 / 18,
// an input), CumSum, Softmax (with the 2-D coercion before opset 13) and
// LayerNormalization (with its optional Mean and InvStdDev outputs).
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Importer.h"

using namespace mlir;
using namespace zplan::import;
using namespace zplan::import::detail;
namespace zg = zplan::graph;

LogicalResult Importer::importReduce(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  Val *x = in(n, 0);
  if (!x)
    return nodeError(n) << "missing input";
  int64_t rank = x->shape.size();
  bool keepdims = attrInt(n, "keepdims", 1);
  bool noop = attrInt(n, "noop_with_empty_axes", 0);
  // ReduceSum takes axes as an input from opset 13, the others from 18.
  bool axesInput = op == "ReduceSum" ? opset >= 13 : opset >= 18;
  std::vector<int64_t> axes;
  if (axesInput) {
    if (in(n, 1) && failed(constInts(n, 1, "axes", axes)))
      return failure();
  } else if (auto a = attrInts(n, "axes")) {
    axes = *a;
  }
  if (axes.empty()) {
    if (noop) {
      alias(n, 0, *x);
      return success();
    }
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  for (auto &a : axes)
    if (failed(normAxis(n, a, rank)))
      return failure();
  llvm::sort(axes);
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(axes, d)) {
      if (keepdims)
        out.push_back(1);
    } else {
      out.push_back(x->shape[d]);
    }
  }
  eval::Reduce kind = op == "ReduceSum"    ? eval::Reduce::Sum
                      : op == "ReduceMean" ? eval::Reduce::Mean
                      : op == "ReduceMax"  ? eval::Reduce::Max
                      : op == "ReduceMin"  ? eval::Reduce::Min
                                           : eval::Reduce::Prod;
  if (x->c) {
    setConst(n, 0, eval::reduce(kind, *x->c, axes, keepdims));
    return success();
  }
  auto t = tensorType(x->dtype, out);
  SmallVector<NamedAttribute> attrs = {
      attr("axes", b.getDenseI64ArrayAttr(axes)),
      attr("keepdims", b.getBoolAttr(keepdims))};
  Value xv = materialize(*x), r;
  if (kind == eval::Reduce::Sum)
    r = emit<zg::ReduceSumOp>(t, xv, attrs);
  else if (kind == eval::Reduce::Mean)
    r = emit<zg::ReduceMeanOp>(t, xv, attrs);
  else if (kind == eval::Reduce::Max)
    r = emit<zg::ReduceMaxOp>(t, xv, attrs);
  else if (kind == eval::Reduce::Min)
    r = emit<zg::ReduceMinOp>(t, xv, attrs);
  else
    r = emit<zg::ReduceProdOp>(t, xv, attrs);
  setValue(n, 0, r);
  return success();
}

LogicalResult Importer::importCumSum(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  std::vector<int64_t> ax;
  if (!x || failed(constInts(n, 1, "axis", ax)))
    return failure();
  if (ax.size() != 1)
    return nodeError(n) << "axis must be a scalar";
  int64_t axis = ax[0];
  if (failed(normAxis(n, axis, x->shape.size())))
    return failure();
  // normAxis lets axis 0 through at rank 0; CumSum indexes a dim.
  if (axis >= int64_t(x->shape.size()))
    return nodeError(n) << "axis " << axis << " out of range for rank "
                        << x->shape.size();
  if (x->dtype == kBool)
    return nodeError(n) << "unsupported type bool";
  bool exclusive = attrInt(n, "exclusive", 0),
       reverse = attrInt(n, "reverse", 0);
  if (x->c) {
    setConst(n, 0, eval::cumsum(*x->c, axis, exclusive, reverse));
    return success();
  }
  setValue(n, 0,
           emit<zg::CumSumOp>(tensorType(x->dtype, x->shape), materialize(*x),
                              {attr("axis", b.getI64IntegerAttr(axis)),
                               attr("exclusive", b.getBoolAttr(exclusive)),
                               attr("reverse", b.getBoolAttr(reverse))}));
  return success();
}

LogicalResult Importer::importSoftmax(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  int64_t axis = attrInt(n, "axis", opset >= 13 ? -1 : 1);
  if (failed(normAxis(n, axis, x->shape.size())))
    return failure();
  if (opset < 13 && axis != int64_t(x->shape.size()) - 1) {
    // Before opset 13, Softmax coerces the input to 2-D at `axis` and
    // normalises over all trailing dims together.
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < x->shape.size(); ++d)
      (int64_t(d) < axis ? outer : inner) *= x->shape[d];
    auto flatT = tensorType(x->dtype, {outer, inner});
    Value flat = emit<zg::ReshapeOp>(flatT, materialize(*x));
    Value sm = emit<zg::SoftmaxOp>(flatT, flat,
                                   {attr("axis", b.getI64IntegerAttr(1))});
    setValue(n, 0, emit<zg::ReshapeOp>(tensorType(x->dtype, x->shape), sm));
    return success();
  }
  if (x->c) {
    setConst(n, 0, eval::softmax(*x->c, axis));
    return success();
  }
  setValue(n, 0,
           emit<zg::SoftmaxOp>(tensorType(x->dtype, x->shape), materialize(*x),
                               {attr("axis", b.getI64IntegerAttr(axis))}));
  return success();
}

LogicalResult Importer::importLayerNorm(const onnx::NodeProto &n) {
  Val *x = in(n, 0), *scale = in(n, 1), *bias = in(n, 2);
  if (!x || !scale)
    return nodeError(n) << "needs X and Scale";
  int64_t axis = attrInt(n, "axis", -1);
  if (failed(normAxis(n, axis, x->shape.size())))
    return failure();
  ArrayRef<int64_t> norm = ArrayRef<int64_t>(x->shape).drop_front(axis);
  if (!zg::broadcastsTo(scale->shape, norm) ||
      (bias && !zg::broadcastsTo(bias->shape, norm)))
    return nodeError(n) << "scale/bias do not broadcast to " << shapeStr(norm);
  SmallVector<Value> operands = {materialize(*x), materialize(*scale)};
  if (bias)
    operands.push_back(materialize(*bias));
  double eps = attrFloat(n, "epsilon", 1e-5);
  setValue(n, 0,
           emit<zg::LayerNormOp>(tensorType(x->dtype, x->shape), operands,
                                 {attr("axis", b.getI64IntegerAttr(axis)),
                                  attr("epsilon", b.getF64FloatAttr(eps))}));
  if ((n.output_size() > 1 && !n.output(1).empty()) ||
      (n.output_size() > 2 && !n.output(2).empty())) {
    // The optional Mean and InvStdDev outputs (kept dims of size 1 over
    // the normalised axes) as generic ops.
    SmallVector<int64_t> axes;
    Shape red(x->shape);
    for (int64_t d = axis; d < int64_t(x->shape.size()); ++d) {
      axes.push_back(d);
      red[d] = 1;
    }
    auto rt = tensorType(x->dtype, red);
    auto xt = tensorType(x->dtype, x->shape);
    SmallVector<NamedAttribute> ra = {
        attr("axes", b.getDenseI64ArrayAttr(axes)),
        attr("keepdims", b.getBoolAttr(true))};
    Value xv = materialize(*x);
    Value mean = emit<zg::ReduceMeanOp>(rt, xv, ra);
    Value d = emit<zg::SubOp>(xt, {xv, mean});
    Value sq = emit<zg::MulOp>(xt, {d, d});
    Value var = emit<zg::ReduceMeanOp>(rt, sq, ra);
    ConstTensor e(x->dtype, {});
    e.set(0, eps);
    Value ve = emit<zg::AddOp>(rt, {var, materializeConst(e)});
    Value inv = emit<zg::ReciprocalOp>(rt, emit<zg::SqrtOp>(rt, ve));
    if (n.output_size() > 1 && !n.output(1).empty())
      setValue(n, 1, mean);
    if (n.output_size() > 2 && !n.output(2).empty())
      setValue(n, 2, inv);
  }
  return success();
}
