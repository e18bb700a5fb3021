//===- LinalgOps.cpp - Linear algebra ONNX ops
//------------------------------===//
//
// MatMul (numpy.matmul semantics) and Gemm, which becomes the generic ops it
// stands for so that the linear recognition sees one form.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Importer.h"

using namespace mlir;
using namespace zplan::import;
using namespace zplan::import::detail;
namespace zg = zplan::graph;

LogicalResult Importer::importMatMul(const onnx::NodeProto &n) {
  Val *a = in(n, 0), *bb = in(n, 1);
  if (!a || !bb)
    return nodeError(n) << "needs two inputs";
  if (a->dtype != bb->dtype)
    return nodeError(n) << "input types differ";
  if (a->shape.empty() || bb->shape.empty())
    return nodeError(n) << "inputs must have rank >= 1";
  Shape as = a->shape, bs = bb->shape;
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  if (as.back() != bs[bs.size() - 2])
    return nodeError(n) << "contraction dims differ: " << shapeStr(a->shape)
                        << " x " << shapeStr(bb->shape);
  auto batch = broadcast(ArrayRef<int64_t>(as).drop_back(2),
                         ArrayRef<int64_t>(bs).drop_back(2));
  if (!batch)
    return nodeError(n) << "batch dims do not broadcast: " << shapeStr(a->shape)
                        << " x " << shapeStr(bb->shape);
  Shape out = *batch;
  if (a->shape.size() > 1)
    out.push_back(as[as.size() - 2]);
  if (bb->shape.size() > 1)
    out.push_back(bs.back());
  if (a->c && bb->c) {
    setConst(n, 0, eval::matmul(*a->c, *bb->c, out));
    return success();
  }
  setValue(n, 0,
           emit<zg::MatmulOp>(tensorType(a->dtype, out),
                              {materialize(*a), materialize(*bb)}));
  return success();
}

LogicalResult Importer::importGemm(const onnx::NodeProto &n) {
  // Gemm becomes the generic ops it stands for (transposes, matmul, scale,
  // bias add); the linear recognition folds them back into zg.linear, so
  // Gemm and MatMul + Add exports end up identical.
  Val *a = in(n, 0), *bb = in(n, 1), *c = in(n, 2);
  if (!a || !bb)
    return nodeError(n) << "needs inputs A and B";
  if (a->shape.size() != 2 || bb->shape.size() != 2)
    return nodeError(n) << "A and B must be 2-D, got " << shapeStr(a->shape)
                        << " and " << shapeStr(bb->shape);
  bool ta = attrInt(n, "transA", 0), tb = attrInt(n, "transB", 0);
  double alpha = attrFloat(n, "alpha", 1.0), beta = attrFloat(n, "beta", 1.0);
  int64_t m = ta ? a->shape[1] : a->shape[0],
          k = ta ? a->shape[0] : a->shape[1];
  int64_t k2 = tb ? bb->shape[1] : bb->shape[0],
          nn = tb ? bb->shape[0] : bb->shape[1];
  if (k != k2)
    return nodeError(n) << "contraction dims differ: " << k << " vs " << k2;
  if (a->dtype != bb->dtype || (c && c->dtype != a->dtype))
    return nodeError(n) << "input types differ";
  Shape out = {m, nn};
  if (c && !broadcast(c->shape, out).has_value())
    return nodeError(n) << "C " << shapeStr(c->shape)
                        << " does not broadcast to " << shapeStr(out);
  auto transposed = [&](Val *v) {
    Value x = materialize(*v);
    Shape s = {v->shape[1], v->shape[0]};
    return emit<zg::TransposeOp>(
        tensorType(v->dtype, s), x,
        {attr("perm", b.getDenseI64ArrayAttr({1, 0}))});
  };
  Value av = ta ? transposed(a) : materialize(*a);
  Value bv = tb ? transposed(bb) : materialize(*bb);
  auto t = tensorType(a->dtype, out);
  Value r = emit<zg::MatmulOp>(t, {av, bv});
  auto scalar = [&](double x) {
    ConstTensor s(a->dtype, {});
    s.set(0, x);
    return materializeConst(s);
  };
  if (alpha != 1.0)
    r = emit<zg::MulOp>(t, {r, scalar(alpha)});
  if (c && beta != 0.0) {
    Value cv;
    if (c->c && beta != 1.0) {
      ConstTensor s(a->dtype, {});
      s.set(0, beta);
      cv =
          materializeConst(eval::binary(eval::Binary::Mul, *c->c, s, c->shape));
    } else {
      cv = materialize(*c);
      if (beta != 1.0)
        cv = emit<zg::MulOp>(cv.getType(), {cv, scalar(beta)});
    }
    r = emit<zg::AddOp>(t, {r, cv});
  }
  setValue(n, 0, r);
  return success();
}
