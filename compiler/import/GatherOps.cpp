//===- GatherOps.cpp - Gather-family ONNX ops -----------------------------===//
//
// Gather, GatherND and GatherElements. Each checks its own shapes, then
// finishGather checks constant indices, makes them non-negative (the runtime
// only sees indices in range), and folds or builds the op.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Importer.h"

using namespace mlir;
using namespace zplan::import;
using namespace zplan::import::detail;
namespace zg = zplan::graph;

LogicalResult Importer::gatherInputs(const onnx::NodeProto &n, Val *&x,
                                     Val *&idx) {
  x = in(n, 0);
  idx = in(n, 1);
  if (!x || !idx)
    return nodeError(n) << "needs data and indices";
  if (idx->dtype != kInt64 && idx->dtype != kInt32)
    return nodeError(n) << "indices must be int32 or int64";
  return success();
}

LogicalResult Importer::finishGather(
    const onnx::NodeProto &n, Val &x, Val &idx, int64_t first, int64_t depth,
    function_ref<bool(const ConstTensor &, ConstTensor &)> fold,
    function_ref<Value(Value, Value)> build) {
  std::optional<ConstTensor> ci;
  if (idx.c) {
    ci = *idx.c;
    for (size_t k = 0; k < ci->i.size(); ++k) {
      int64_t d = first + int64_t(k) % depth, given = ci->i[k];
      if (!wrapIndex(ci->i[k], x.shape[d]))
        return nodeError(n) << "index out of range for dim " << d << " of size "
                            << x.shape[d] << " (index " << given << ")";
    }
  }
  if (foldable(&x) && ci) {
    ConstTensor out;
    if (!fold(*ci, out))
      return nodeError(n) << "index out of range";
    setConst(n, 0, std::move(out));
    return success();
  }
  // The indices first, then the data: the order of their ops in the IR, and
  // so the plans, stays as it was.
  Value indices = ci ? materializeConst(*ci) : materialize(idx);
  setValue(n, 0, build(materialize(x), indices));
  return success();
}

LogicalResult Importer::importGather(const onnx::NodeProto &n) {
  Val *x, *idx;
  if (failed(gatherInputs(n, x, idx)))
    return failure();
  int64_t rank = x->shape.size(), axis = attrInt(n, "axis", 0);
  if (failed(normAxis(n, axis, rank)))
    return failure();
  Shape out(x->shape.begin(), x->shape.begin() + axis);
  out.append(idx->shape.begin(), idx->shape.end());
  out.append(x->shape.begin() + axis + 1, x->shape.end());
  return finishGather(
      n, *x, *idx, axis, 1,
      [&](const ConstTensor &ci, ConstTensor &res) {
        return eval::gather(*x->c, ci, axis, res);
      },
      [&](Value data, Value indices) {
        return emit<zg::GatherOp>(tensorType(x->dtype, out), {data, indices},
                                  {attr("axis", b.getI64IntegerAttr(axis))});
      });
}

LogicalResult Importer::importGatherND(const onnx::NodeProto &n) {
  Val *x, *idx;
  if (failed(gatherInputs(n, x, idx)))
    return failure();
  int64_t bd = attrInt(n, "batch_dims", 0);
  if (idx->shape.empty() || bd < 0 ||
      bd >= (int64_t)std::min(x->shape.size(), idx->shape.size()) ||
      idx->shape.back() < 1 ||
      idx->shape.back() > int64_t(x->shape.size()) - bd)
    return nodeError(n) << "indices " << shapeStr(idx->shape)
                        << " do not fit data " << shapeStr(x->shape);
  for (int64_t d = 0; d < bd; ++d)
    if (x->shape[d] != idx->shape[d])
      return nodeError(n) << "batch dims differ";
  int64_t depth = idx->shape.back();
  Shape out(idx->shape.begin(), idx->shape.end() - 1);
  out.append(x->shape.begin() + bd + depth, x->shape.end());
  return finishGather(
      n, *x, *idx, bd, depth,
      [&](const ConstTensor &ci, ConstTensor &res) {
        return eval::gatherND(*x->c, ci, bd, res);
      },
      [&](Value data, Value indices) {
        return emit<zg::GatherNdOp>(
            tensorType(x->dtype, out), {data, indices},
            {attr("batch_dims", b.getI64IntegerAttr(bd))});
      });
}

LogicalResult Importer::importGatherElements(const onnx::NodeProto &n) {
  Val *x, *idx;
  if (failed(gatherInputs(n, x, idx)))
    return failure();
  int64_t rank = x->shape.size(), axis = attrInt(n, "axis", 0);
  if (failed(normAxis(n, axis, rank)))
    return failure();
  if (axis >= rank)
    return nodeError(n) << "axis " << axis << " out of range for rank " << rank;
  if (int64_t(idx->shape.size()) != rank)
    return nodeError(n) << "indices and data ranks differ";
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && idx->shape[d] > x->shape[d])
      return nodeError(n) << "indices " << shapeStr(idx->shape)
                          << " exceed data " << shapeStr(x->shape)
                          << " off axis " << axis;
  return finishGather(
      n, *x, *idx, axis, 1,
      [&](const ConstTensor &ci, ConstTensor &res) {
        return eval::gatherElements(*x->c, ci, axis, res);
      },
      [&](Value data, Value indices) {
        return emit<zg::GatherElementsOp>(
            tensorType(x->dtype, idx->shape), {data, indices},
            {attr("axis", b.getI64IntegerAttr(axis))});
      });
}
