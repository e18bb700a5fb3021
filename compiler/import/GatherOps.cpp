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
  // normAxis takes axis 0 at rank 0; Gather's data has at least one dim.
  if (axis >= rank)
    return nodeError(n) << "data must have at least one dim to gather along "
                           "(axis "
                        << axis << ", rank " << rank << ")";
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

// ScatterND writes slices of `updates` into a copy of `data` at constant
// indices. transformers 4's causal-mask builder (the exports of optimum 1.x)
// writes the padding into the mask this way (`mask[:, :, :, :n] = ...`). With
// constant data and updates (generation binds attention_mask to ones) it
// folds; otherwise the constant indices become a constant map from each
// output element to the update element written there, and the node is a
// gather of the flattened updates under a where that keeps `data` elsewhere.
LogicalResult Importer::importScatterND(const onnx::NodeProto &n) {
  Val *x = in(n, 0), *idx = in(n, 1), *upd = in(n, 2);
  if (!x || !idx || !upd)
    return nodeError(n) << "needs data, indices and updates";
  std::string reduction = attrString(n, "reduction", "none");
  if (reduction != "none")
    return nodeError(n) << "reduction '" << reduction
                        << "' is not supported (only 'none')";
  if (idx->dtype != kInt64)
    return nodeError(n) << "indices must be int64";
  if (!idx->c)
    return nodeError(n) << "input 1 (the indices, '" << n.input(1)
                        << "') does not fold to a constant: a ScatterND is "
                           "imported only at constant indices";
  if (upd->dtype != x->dtype)
    return nodeError(n) << "updates are " << dtypeName(upd->dtype) << ", data "
                        << dtypeName(x->dtype);
  int64_t rank = x->shape.size();
  if (idx->shape.empty() || idx->shape.back() < 1 || idx->shape.back() > rank)
    return nodeError(n) << "indices " << shapeStr(idx->shape)
                        << " do not fit data " << shapeStr(x->shape);
  // Each index tuple (the last dim of the indices) names a slice of the data's
  // last rank - depth dims; the updates hold one such slice per tuple.
  int64_t depth = idx->shape.back();
  Shape want(idx->shape.begin(), idx->shape.end() - 1);
  want.append(x->shape.begin() + depth, x->shape.end());
  if (upd->shape != want)
    return nodeError(n) << "updates " << shapeStr(upd->shape)
                        << " do not fit indices " << shapeStr(idx->shape)
                        << " and data " << shapeStr(x->shape) << " (expected "
                        << shapeStr(want) << ")";
  // The data's row-major strides; `slice` elements per index tuple.
  std::vector<int64_t> stride(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    stride[d] = stride[d + 1] * x->shape[d + 1];
  int64_t slice = stride[depth - 1], numel = stride[0] * x->shape[0];
  const ConstTensor &ci = full(*idx);
  int64_t tuples = ci.numel() / depth;
  // src[e]: the flat update element written at output element e, or -1.
  std::vector<int64_t> src(numel, -1);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t at = 0;
    for (int64_t k = 0; k < depth; ++k) {
      int64_t j = ci.i[t * depth + k], given = j;
      if (!wrapIndex(j, x->shape[k]))
        return nodeError(n) << "index out of range for dim " << k << " of size "
                            << x->shape[k] << " (index " << given << ")";
      at += j * stride[k];
    }
    for (int64_t e = 0; e < slice; ++e)
      src[at + e] = t * slice + e;
  }
  if (foldable(x) && foldable(upd)) {
    ConstTensor out = full(*x);
    const ConstTensor &u = full(*upd);
    // Data and updates have one dtype, so their storage is copied as is.
    for (int64_t e = 0; e < numel; ++e)
      if (src[e] >= 0 && out.isFloat())
        out.f[e] = u.f[src[e]];
      else if (src[e] >= 0)
        out.i[e] = u.i[src[e]];
    setConst(n, 0, std::move(out));
    return success();
  }
  ConstTensor written(kBool, x->shape), from(kInt64, x->shape);
  for (int64_t e = 0; e < numel; ++e) {
    written.i[e] = src[e] >= 0;
    from.i[e] = std::max<int64_t>(src[e], 0);
  }
  Value flat = emit<zg::ReshapeOp>(tensorType(upd->dtype, {tuples * slice}),
                                   materialize(*upd));
  Value taken = emit<zg::GatherOp>(tensorType(x->dtype, x->shape),
                                   {flat, materializeConst(from)},
                                   {attr("axis", b.getI64IntegerAttr(0))});
  setValue(
      n, 0,
      emit<zg::WhereOp>(tensorType(x->dtype, x->shape),
                        {materializeConst(written), taken, materialize(*x)}));
  return success();
}
