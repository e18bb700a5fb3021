//===- Values.cpp - Known values as zg constants and weights
//----------------===//
//
// Known values become zg.constant (stored along the dims where they vary,
// then expanded), zg.causal_mask (an additive causal mask) or zg.weight (a
// floating initializer with more than one element, inline or external);
// and the helpers that read shape-like operands.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Importer.h"

using namespace mlir;
using namespace zplan::import;
using namespace zplan::import::detail;
namespace zg = zplan::graph;

DenseElementsAttr Importer::toAttr(const ConstTensor &c) {
  auto type = tensorType(c.dtype, c.shape);
  int64_t n = c.numel();
  bool splat = n > 1 && c.isSplat();
  int64_t m = splat ? 1 : n;
  switch (c.dtype) {
  case kFloat: {
    std::vector<float> v(m);
    for (int64_t k = 0; k < m; ++k)
      v[k] = float(c.f[k]);
    return splat ? DenseElementsAttr::get(type, v[0])
                 : DenseElementsAttr::get(type, ArrayRef<float>(v));
  }
  case kDouble:
    return splat ? DenseElementsAttr::get(type, c.f[0])
                 : DenseElementsAttr::get(type, ArrayRef<double>(c.f));
  case kFloat16:
  case kBFloat16: {
    const llvm::fltSemantics &sem = c.dtype == kFloat16
                                        ? llvm::APFloat::IEEEhalf()
                                        : llvm::APFloat::BFloat();
    std::vector<APFloat> v;
    v.reserve(m);
    for (int64_t k = 0; k < m; ++k) {
      APFloat a(c.f[k]);
      bool lost;
      a.convert(sem, APFloat::rmNearestTiesToEven, &lost);
      v.push_back(a);
    }
    return splat ? DenseElementsAttr::get(type, v[0])
                 : DenseElementsAttr::get(type, ArrayRef<APFloat>(v));
  }
  case kInt64:
    return splat ? DenseElementsAttr::get(type, c.i[0])
                 : DenseElementsAttr::get(type, ArrayRef<int64_t>(c.i));
  case kInt32: {
    std::vector<int32_t> v(m);
    for (int64_t k = 0; k < m; ++k)
      v[k] = int32_t(c.i[k]);
    return splat ? DenseElementsAttr::get(type, v[0])
                 : DenseElementsAttr::get(type, ArrayRef<int32_t>(v));
  }
  default: {
    if (splat)
      return DenseElementsAttr::get(type, bool(c.i[0]));
    SmallVector<bool> v(m);
    for (int64_t k = 0; k < m; ++k)
      v[k] = c.i[k] != 0;
    return DenseElementsAttr::get(type, ArrayRef<bool>(v));
  }
  }
}

/// Returns the masked value when `c` is an additive causal mask: over its two
/// last dims [S, T], 0 where j <= i + (T - S) and one large negative value
/// elsewhere (at least one masked element), the same for every leading
/// index.
static std::optional<double> causalMaskValue(const ConstTensor &c) {
  size_t r = c.shape.size();
  if (!c.isFloat() || r < 2)
    return std::nullopt;
  int64_t s = c.shape[r - 2], t = c.shape[r - 1];
  if (s < 1 || t < 2 || t < s)
    return std::nullopt;
  int64_t n = c.numel(), plane = s * t;
  double masked = c.f[t - 1]; // row 0, last column: masked when t > t - s.
  if (!(masked <= -1e4))
    return std::nullopt;
  for (int64_t base = 0; base < n; base += plane)
    for (int64_t i = 0; i < s; ++i) {
      const double *row = &c.f[base + i * t];
      int64_t lim = i + (t - s);
      for (int64_t j = 0; j < t; ++j)
        if (row[j] != (j <= lim ? 0.0 : masked))
          return std::nullopt;
    }
  return masked;
}

Value Importer::materializeConst(const ConstTensor &stored,
                                 std::optional<Shape> logical) {
  Shape shape = logical ? *logical : stored.shape;
  auto type = tensorType(stored.dtype, shape);
  size_t r = shape.size();
  if (r >= 2 && stored.shape[r - 2] == shape[r - 2] &&
      stored.shape[r - 1] == shape[r - 1])
    if (auto masked = causalMaskValue(stored))
      return zg::CausalMaskOp::create(wb, fileLoc, type,
                                      wb.getF64FloatAttr(*masked));
  if (stored.numel() >= 1 && stored.isSplat()) {
    // A splat is one value whatever its shape: never allocate the shape.
    ConstTensor one(stored.dtype, {});
    one.f = stored.isFloat() ? std::vector<double>{stored.f[0]} : one.f;
    one.i = stored.isFloat() ? one.i : std::vector<int64_t>{stored.i[0]};
    DenseElementsAttr a = toAttr(one);
    return zg::ConstantOp::create(
        wb, fileLoc, type,
        DenseElementsAttr::get(type, a.getSplatValue<Attribute>()));
  }
  // Store a large constant only along the dims where it varies, and expand.
  ConstTensor small = stored.numel() > 1024 ? eval::compress(stored) : stored;
  Value v = zg::ConstantOp::create(
      wb, fileLoc, tensorType(small.dtype, small.shape), toAttr(small));
  if (small.shape != shape)
    v = zg::ExpandOp::create(wb, fileLoc, type, v);
  return v;
}

Value Importer::materialize(Val &v) {
  if (v.v)
    return v.v;
  if (v.init) {
    // A floating initializer with more than one element that a runtime op
    // consumes is a parameter; scalars and integer tensors are constants.
    auto type = tensorType(v.dtype, v.shape);
    bool param = isFloatDType(v.dtype) && (v.ext || v.c->numel() > 1);
    if (v.ext && !v.c)
      param = true;
    if (param) {
      StringRef file = v.ext ? StringRef(v.ext->location) : StringRef();
      SmallVector<NamedAttribute> attrs = {
          attr("name", wb.getStringAttr(v.init->name())),
          attr("file", wb.getStringAttr(file)),
          attr("offset", wb.getI64IntegerAttr(v.ext ? v.ext->offset : 0)),
          attr("length",
               wb.getI64IntegerAttr(
                   v.ext ? v.ext->length : v.c->numel() * dtypeSize(v.dtype)))};
      if (!v.ext)
        attrs.push_back(attr("value", toAttr(*v.c)));
      v.v = zg::WeightOp::create(wb, fileLoc, TypeRange{type}, ValueRange{},
                                 attrs)
                ->getResult(0);
      return v.v;
    }
  }
  v.v = materializeConst(*v.c, v.shape);
  return v.v;
}

LogicalResult Importer::constInts(const onnx::NodeProto &n, int k,
                                  StringRef what, std::vector<int64_t> &out) {
  Val *v = in(n, k);
  if (!v)
    return nodeError(n) << "missing " << what << " input";
  if (!v->c)
    return nodeError(n) << what << " (input " << k << ", '" << n.input(k)
                        << "') does not fold to a constant (unsupported: "
                        << "zplan plans static shapes)";
  if (v->c->isFloat())
    return nodeError(n) << what << " must be an integer tensor";
  out = full(*v).toInts();
  return success();
}

LogicalResult Importer::normAxis(const onnx::NodeProto &n, int64_t &axis,
                                 int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return nodeError(n) << "axis " << axis << " out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  return success();
}

std::optional<Shape> Importer::declaredShape(const std::string &name) {
  auto fromType = [](const onnx::TypeProto &t) -> std::optional<Shape> {
    if (!t.has_tensor_type() || !t.tensor_type().has_shape())
      return std::nullopt;
    Shape s;
    for (const auto &d : t.tensor_type().shape().dim()) {
      if (!d.has_dim_value() || d.dim_value() < 0)
        return std::nullopt;
      s.push_back(d.dim_value());
    }
    return s;
  };
  for (const auto &v : model.graph().value_info())
    if (v.name() == name)
      return fromType(v.type());
  for (const auto &v : model.graph().output())
    if (v.name() == name)
      return fromType(v.type());
  return std::nullopt;
}
