//===- Matchers.cpp - structural helpers of the recognition passes --------===//

#include "compiler/transforms/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace zplan;

std::optional<double> transforms::getSplatValue(Value v) {
  if (auto e = v.getDefiningOp<graph::ExpandOp>())
    v = e.getInput();
  auto c = v.getDefiningOp<graph::ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!dense || !dense.isSplat())
    return std::nullopt;
  Type et = dense.getElementType();
  if (isa<FloatType>(et))
    return dense.getSplatValue<APFloat>().convertToDouble();
  if (et.isInteger(1))
    return dense.getSplatValue<bool>() ? 1.0 : 0.0;
  if (isa<IntegerType>(et))
    return double(dense.getSplatValue<APInt>().getSExtValue());
  return std::nullopt;
}

bool transforms::near(double a, double b, double relTol) {
  return std::fabs(a - b) <= relTol * std::max(std::fabs(a), std::fabs(b));
}

bool transforms::isSquareOf(Value v, Value x) {
  if (auto p = v.getDefiningOp<graph::PowOp>())
    return p.getLhs() == x && isSplatNear(p.getRhs(), 2.0, 0);
  if (auto m = v.getDefiningOp<graph::MulOp>())
    return m.getLhs() == x && m.getRhs() == x;
  return false;
}

bool transforms::isSplatNear(Value v, double expected, double relTol) {
  auto s = getSplatValue(v);
  return s && (*s == expected || near(*s, expected, relTol));
}

std::optional<transforms::SqrtMeanPlusEps>
transforms::matchSqrtMeanPlusEps(Value s) {
  auto sqrt = s.getDefiningOp<graph::SqrtOp>();
  if (!sqrt)
    return std::nullopt;
  auto add = sqrt.getInput().getDefiningOp<graph::AddOp>();
  if (!add)
    return std::nullopt;
  // A splat constant is no mean, so at most one operand order matches: the
  // callers' further checks need not be part of the match.
  auto m = matchCommutative<graph::ReduceMeanOp>(
      add, [](graph::ReduceMeanOp, Value eps) {
        return getSplatValue(eps).has_value();
      });
  if (!m)
    return std::nullopt;
  return SqrtMeanPlusEps{add, m->first, *getSplatValue(m->second)};
}

graph::WeightOp transforms::getWeight2D(Value v) {
  auto w = v.getDefiningOp<graph::WeightOp>();
  if (!w || cast<RankedTensorType>(w.getType()).getRank() != 2)
    return nullptr;
  return w;
}

std::optional<transforms::LastDimPart> transforms::matchLastDimPart(Value v) {
  auto shape = cast<RankedTensorType>(v.getType()).getShape();
  if (shape.empty())
    return std::nullopt;
  size_t last = shape.size() - 1;
  if (auto s = v.getDefiningOp<graph::SliceOp>()) {
    auto in = cast<RankedTensorType>(s.getInput().getType()).getShape();
    for (size_t d = 0; d < last; ++d)
      if (s.getStarts()[d] != 0 || s.getSteps()[d] != 1 || shape[d] != in[d])
        return std::nullopt;
    if (s.getSteps()[last] != 1)
      return std::nullopt;
    return LastDimPart{s.getInput(), s.getStarts()[last], shape[last]};
  }
  auto split = v.getDefiningOp<graph::SplitOp>();
  if (!split || split.getAxis() != int64_t(last))
    return std::nullopt;
  int64_t at = 0;
  for (Value r : split.getResults()) {
    int64_t n = cast<RankedTensorType>(r.getType()).getShape()[last];
    if (r == v)
      return LastDimPart{split.getInput(), at, n};
    at += n;
  }
  return std::nullopt;
}

static void collect(Value v, SmallVectorImpl<Value> &factors, double &scalar,
                    int depth, bool root) {
  if (auto s = transforms::getSplatValue(v)) {
    // A scalar factor may broadcast the product to a larger shape; callers
    // compare result types, so only rank-0 / single-element splats count.
    if (cast<RankedTensorType>(v.getType()).getNumElements() == 1) {
      scalar *= *s;
      return;
    }
  }
  auto mul = v.getDefiningOp<graph::MulOp>();
  if (mul && depth > 0 && (root || mul->hasOneUse())) {
    collect(mul.getLhs(), factors, scalar, depth - 1, false);
    collect(mul.getRhs(), factors, scalar, depth - 1, false);
    return;
  }
  factors.push_back(v);
}

void transforms::collectFactors(Value v, SmallVectorImpl<Value> &factors,
                                double &scalar, int depth) {
  collect(v, factors, scalar, depth, true);
}

Value transforms::createSplat(OpBuilder &b, Location loc, RankedTensorType type,
                              double value) {
  Attribute a;
  Type et = type.getElementType();
  if (auto ft = dyn_cast<FloatType>(et)) {
    APFloat f(value);
    bool lost;
    f.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    a = DenseElementsAttr::get(type, f);
  } else {
    a = DenseElementsAttr::get(
        type, APInt(et.getIntOrFloatBitWidth(), int64_t(value), true));
  }
  return graph::ConstantOp::create(b, loc, type, cast<ElementsAttr>(a));
}
