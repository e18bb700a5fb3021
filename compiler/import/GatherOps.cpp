//===- GatherOps.cpp - Gather-family ONNX ops -----------------------------===//
//
// Gather, GatherND and GatherElements. Constant indices are checked and
// made non-negative here, so the runtime only sees indices in range.
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

FailureOr<Value> Importer::gatherIndices(const onnx::NodeProto &n, Val &idx,
                                         ArrayRef<int64_t> shape, int64_t first,
                                         int64_t depth) {
  if (!idx.c)
    return materialize(idx);
  ConstTensor ci = *idx.c;
  for (size_t k = 0; k < ci.i.size(); ++k) {
    int64_t d = first + int64_t(k) % depth, size = shape[d];
    int64_t &v = ci.i[k];
    int64_t given = v;
    if (v < 0)
      v += size;
    if (v < 0 || v >= size)
      return nodeError(n) << "index out of range for dim " << d << " of size "
                          << size << " (index " << given << ")";
  }
  return materializeConst(ci);
}

LogicalResult Importer::importGather(const onnx::NodeProto &n) {
  Val *x, *idx;
  if (failed(gatherInputs(n, x, idx)))
    return failure();
  int64_t rank = x->shape.size(), axis = attrInt(n, "axis", 0);
  if (failed(normAxis(n, axis, rank)))
    return failure();
  if (foldable(x) && idx->c) {
    ConstTensor out;
    if (!eval::gather(*x->c, *idx->c, axis, out))
      return nodeError(n) << "index out of range for dim " << axis
                          << " of size " << x->shape[axis];
    setConst(n, 0, std::move(out));
    return success();
  }
  Shape out(x->shape.begin(), x->shape.begin() + axis);
  out.append(idx->shape.begin(), idx->shape.end());
  out.append(x->shape.begin() + axis + 1, x->shape.end());
  FailureOr<Value> iv = gatherIndices(n, *idx, x->shape, axis, 1);
  if (failed(iv))
    return failure();
  setValue(n, 0,
           emit<zg::GatherOp>(tensorType(x->dtype, out), {materialize(*x), *iv},
                              {attr("axis", b.getI64IntegerAttr(axis))}));
  return success();
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
  if (foldable(x) && idx->c) {
    ConstTensor out;
    if (!eval::gatherND(*x->c, *idx->c, bd, out))
      return nodeError(n) << "index out of range";
    setConst(n, 0, std::move(out));
    return success();
  }
  Shape out(idx->shape.begin(), idx->shape.end() - 1);
  out.append(x->shape.begin() + bd + depth, x->shape.end());
  FailureOr<Value> iv = gatherIndices(n, *idx, x->shape, bd, depth);
  if (failed(iv))
    return failure();
  setValue(n, 0,
           emit<zg::GatherNdOp>(tensorType(x->dtype, out),
                                {materialize(*x), *iv},
                                {attr("batch_dims", b.getI64IntegerAttr(bd))}));
  return success();
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
  if (foldable(x) && idx->c) {
    ConstTensor out;
    if (!eval::gatherElements(*x->c, *idx->c, axis, out))
      return nodeError(n) << "index out of range";
    setConst(n, 0, std::move(out));
    return success();
  }
  FailureOr<Value> iv = gatherIndices(n, *idx, x->shape, axis, 1);
  if (failed(iv))
    return failure();
  setValue(n, 0,
           emit<zg::GatherElementsOp>(
               tensorType(x->dtype, idx->shape), {materialize(*x), *iv},
               {attr("axis", b.getI64IntegerAttr(axis))}));
  return success();
}
