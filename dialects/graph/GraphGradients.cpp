//===- GraphGradients.cpp - reverse-mode rules of the zg ops --------------===//
//
// The GradientOpInterface implementation of every differentiable zg op. Each
// rule builds the vector-Jacobian product with zg ops only, so the backward is
// an ordinary zg graph that the sharding and plan passes treat like the
// forward. Broadcasting operands get their gradient summed back to their own
// shape; integer and boolean operands get none.
//
//===----------------------------------------------------------------------===//

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace zplan::graph;

#include "dialects/graph/GradientOpInterface.cpp.inc"

namespace {

using Shape = SmallVector<int64_t>;

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isFloatValue(Value v) { return isa<FloatType>(rtt(v).getElementType()); }

RankedTensorType withShape(Value like, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, rtt(like).getElementType());
}

int64_t product(ArrayRef<int64_t> dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

/// A rank-0 constant of element type `elt`.
Value scalar(OpBuilder &b, Location loc, Type elt, double value) {
  auto type = RankedTensorType::get({}, elt);
  Attribute attr;
  if (isa<FloatType>(elt))
    attr = b.getFloatAttr(elt, value);
  else
    attr = b.getIntegerAttr(elt, int64_t(value));
  return ConstantOp::create(b, loc, type, DenseElementsAttr::get(type, attr));
}

Value scalarLike(OpBuilder &b, Location loc, Value like, double value) {
  return scalar(b, loc, rtt(like).getElementType(), value);
}

/// A tensor of the given type filled with `value` (an expanded scalar, so
/// that no large constant lands in the plan).
Value filled(OpBuilder &b, Location loc, RankedTensorType type, double value) {
  Value s = scalar(b, loc, type.getElementType(), value);
  if (type.getRank() == 0)
    return s;
  return ExpandOp::create(b, loc, type, s);
}

/// An elementwise binary op with numpy broadcasting; the result takes the
/// element type of `lhs`, or i1 for comparisons.
template <typename OpTy>
Value binary(OpBuilder &b, Location loc, Value lhs, Value rhs,
             bool boolResult = false) {
  auto shape = broadcastShapes(rtt(lhs).getShape(), rtt(rhs).getShape());
  assert(shape && "operands of a gradient rule must broadcast");
  Type elt = boolResult ? Type(b.getI1Type()) : rtt(lhs).getElementType();
  return OpTy::create(b, loc, RankedTensorType::get(*shape, elt), lhs, rhs);
}

Value add(OpBuilder &b, Location loc, Value x, Value y) {
  return binary<AddOp>(b, loc, x, y);
}
Value sub(OpBuilder &b, Location loc, Value x, Value y) {
  return binary<SubOp>(b, loc, x, y);
}
Value mul(OpBuilder &b, Location loc, Value x, Value y) {
  return binary<MulOp>(b, loc, x, y);
}
Value div(OpBuilder &b, Location loc, Value x, Value y) {
  return binary<DivOp>(b, loc, x, y);
}
Value mulScalar(OpBuilder &b, Location loc, Value x, double c) {
  return mul(b, loc, x, scalarLike(b, loc, x, c));
}
Value neg(OpBuilder &b, Location loc, Value x) {
  return NegOp::create(b, loc, x.getType(), x);
}

/// `cond ? x : y` broadcast to the shape of all three.
Value select(OpBuilder &b, Location loc, Value cond, Value x, Value y) {
  auto shape = broadcastShapes(rtt(cond).getShape(), rtt(x).getShape());
  shape = broadcastShapes(*shape, rtt(y).getShape());
  return WhereOp::create(b, loc, withShape(x, *shape), cond, x, y);
}

Value reshape(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> shape) {
  if (rtt(x).getShape() == shape)
    return x;
  return ReshapeOp::create(b, loc, withShape(x, shape), x);
}

Value transpose(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> perm) {
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return x;
  Shape shape;
  for (int64_t p : perm)
    shape.push_back(rtt(x).getDimSize(p));
  return TransposeOp::create(b, loc, withShape(x, shape), x, perm);
}

/// Swaps the last two dims.
Value transposeLast2(OpBuilder &b, Location loc, Value x) {
  Shape perm = llvm::to_vector(llvm::seq<int64_t>(0, rtt(x).getRank()));
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(b, loc, x, perm);
}

Value reduceSum(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> axes,
                bool keepdims) {
  Shape shape;
  for (int64_t d = 0; d < rtt(x).getRank(); ++d) {
    if (!llvm::is_contained(axes, d))
      shape.push_back(rtt(x).getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  return ReduceSumOp::create(b, loc, withShape(x, shape), x, axes, keepdims);
}

Value expandTo(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> shape) {
  if (rtt(x).getShape() == shape)
    return x;
  return ExpandOp::create(b, loc, withShape(x, shape), x);
}

/// The gradient of a value that was broadcast from `target`'s shape to
/// `grad`'s: sums over the broadcast dims and reshapes to the target.
Value sumToShape(OpBuilder &b, Location loc, Value grad,
                 ArrayRef<int64_t> target) {
  auto g = rtt(grad).getShape();
  if (g == target)
    return grad;
  size_t lead = g.size() - target.size();
  Shape axes;
  for (size_t i = 0; i < g.size(); ++i)
    if (i < lead || (target[i - lead] == 1 && g[i] != 1))
      axes.push_back(i);
  Value summed =
      axes.empty() ? grad : reduceSum(b, loc, grad, axes, /*keepdims=*/true);
  return reshape(b, loc, summed, target);
}

Value sumToType(OpBuilder &b, Location loc, Value grad, Value like) {
  return sumToShape(b, loc, grad, rtt(like).getShape());
}

Value concat(OpBuilder &b, Location loc, ArrayRef<Value> parts, int64_t axis) {
  SmallVector<Value> nonEmpty;
  for (Value p : parts)
    if (rtt(p).getDimSize(axis) != 0)
      nonEmpty.push_back(p);
  if (nonEmpty.size() == 1)
    return nonEmpty.front();
  Shape shape(rtt(nonEmpty.front()).getShape());
  shape[axis] = 0;
  for (Value p : nonEmpty)
    shape[axis] += rtt(p).getDimSize(axis);
  return ConcatOp::create(b, loc, withShape(nonEmpty.front(), shape),
                          nonEmpty, axis);
}

/// Zero gradients for every operand; rules then fill the differentiable ones.
void noGradients(Operation *op, SmallVectorImpl<Value> &dxs) {
  dxs.assign(op->getNumOperands(), Value());
}

/// For unary elementwise ops: dx = dy * f'(x) given as a builder callback.
template <typename Fn>
LogicalResult unaryRule(Operation *op, ArrayRef<Value> dys,
                        SmallVectorImpl<Value> &dxs, Fn &&derivative) {
  noGradients(op, dxs);
  if (isFloatValue(op->getOperand(0)))
    dxs[0] = derivative(dys[0]);
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise unary ops.
//===----------------------------------------------------------------------===//

#define ZG_UNARY_RULE(OP, BODY)                                                \
  LogicalResult OP::buildGradients(OpBuilder &b, ArrayRef<Value> dys,          \
                                   SmallVectorImpl<Value> &dxs) {              \
    Location loc = getLoc();                                                   \
    Value x = getInput(), y = getResult();                                     \
    (void)x;                                                                   \
    (void)y;                                                                   \
    return unaryRule(*this, dys, dxs, [&](Value g) -> Value { BODY });         \
  }

ZG_UNARY_RULE(NegOp, return neg(b, loc, g);)
ZG_UNARY_RULE(ExpOp, return mul(b, loc, g, y);)
ZG_UNARY_RULE(LogOp, return div(b, loc, g, x);)
// d sqrt(x) = 1 / (2 sqrt(x)).
ZG_UNARY_RULE(SqrtOp, return div(b, loc, g, mulScalar(b, loc, y, 2.0));)
// d (1/x) = -1/x^2 = -y^2.
ZG_UNARY_RULE(ReciprocalOp,
              return neg(b, loc, mul(b, loc, g, mul(b, loc, y, y)));)
ZG_UNARY_RULE(TanhOp, return mul(b, loc, g,
                                 sub(b, loc, scalarLike(b, loc, y, 1.0),
                                     mul(b, loc, y, y)));)
// d erf(x) = 2 / sqrt(pi) * exp(-x^2).
ZG_UNARY_RULE(ErfOp, {
  Value e = ExpOp::create(b, loc, x.getType(), neg(b, loc, mul(b, loc, x, x)));
  return mul(b, loc, g, mulScalar(b, loc, e, 2.0 / std::sqrt(M_PI)));
})
ZG_UNARY_RULE(SigmoidOp, return mul(b, loc, g,
                                    mul(b, loc, y,
                                        sub(b, loc, scalarLike(b, loc, y, 1.0),
                                            y)));)
ZG_UNARY_RULE(ReluOp, {
  Value zero = scalarLike(b, loc, x, 0.0);
  Value pos = binary<GreaterOp>(b, loc, x, zero, /*boolResult=*/true);
  return select(b, loc, pos, g, zero);
})
ZG_UNARY_RULE(CosOp, return neg(b, loc, mul(b, loc, g,
                                            SinOp::create(b, loc, x.getType(),
                                                          x)));)
ZG_UNARY_RULE(SinOp,
              return mul(b, loc, g, CosOp::create(b, loc, x.getType(), x));)
// sign(x) with sign(0) = 0, as PyTorch's abs backward.
ZG_UNARY_RULE(AbsOp, {
  Value zero = scalarLike(b, loc, x, 0.0);
  Value pos = binary<GreaterOp>(b, loc, x, zero, true);
  Value negative = binary<LessOp>(b, loc, x, zero, true);
  return select(b, loc, pos, g,
                select(b, loc, negative, neg(b, loc, g), zero));
})
ZG_UNARY_RULE(SiluOp, return SiluGradOp::create(b, loc, x.getType(), x, g);)
#undef ZG_UNARY_RULE

LogicalResult GeluOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                     SmallVectorImpl<Value> &dxs) {
  return unaryRule(*this, dys, dxs, [&](Value g) -> Value {
    return GeluGradOp::create(b, getLoc(), getInput().getType(), getInput(), g,
                              getApproximate());
  });
}

LogicalResult CastOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                     SmallVectorImpl<Value> &dxs) {
  noGradients(*this, dxs);
  // Only a float-to-float conversion carries a gradient: it converts back.
  if (isFloatValue(getInput()) && isFloatValue(getResult()))
    dxs[0] = CastOp::create(b, getLoc(), getInput().getType(), dys[0]);
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise binary ops.
//===----------------------------------------------------------------------===//

namespace {

/// Sets the gradients of a binary op from the full-shape contributions
/// `dl` and `dr`, summing each back to its operand's shape.
LogicalResult binaryRule(Operation *op, OpBuilder &b,
                         SmallVectorImpl<Value> &dxs, Value dl, Value dr) {
  noGradients(op, dxs);
  Location loc = op->getLoc();
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  if (dl && isFloatValue(lhs))
    dxs[0] = sumToType(b, loc, dl, lhs);
  if (dr && isFloatValue(rhs))
    dxs[1] = sumToType(b, loc, dr, rhs);
  return success();
}

} // namespace

LogicalResult AddOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  return binaryRule(*this, b, dxs, dys[0], dys[0]);
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  return binaryRule(*this, b, dxs, dys[0], neg(b, getLoc(), dys[0]));
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  return binaryRule(*this, b, dxs, mul(b, loc, dys[0], getRhs()),
                    mul(b, loc, dys[0], getLhs()));
}

LogicalResult DivOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  // d(l / r)/dr = -l / r^2 = -y / r.
  Value dr = neg(b, loc, div(b, loc, mul(b, loc, dys[0], getResult()),
                             getRhs()));
  return binaryRule(*this, b, dxs, div(b, loc, dys[0], getRhs()), dr);
}

LogicalResult PowOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value l = getLhs(), r = getRhs(), g = dys[0];
  // d l^r / dl = r * l^(r - 1); d l^r / dr = l^r * log(l). The second is
  // only used when the exponent depends on a parameter (the caller drops it
  // otherwise), so a constant exponent with a negative base is fine.
  Value rm1 = sub(b, loc, r, scalarLike(b, loc, r, 1.0));
  Value dl = mul(b, loc, g, mul(b, loc, binary<PowOp>(b, loc, l, rm1), r));
  Value dr = mul(b, loc, mul(b, loc, g, getResult()),
                 LogOp::create(b, loc, l.getType(), l));
  return binaryRule(*this, b, dxs, dl, dr);
}

/// Gradients of max (isMax) or min: the chosen side gets dy, ties split it
/// in half (PyTorch's maximum/minimum backward).
static LogicalResult extremum(Operation *op, OpBuilder &b, Value g,
                              SmallVectorImpl<Value> &dxs, bool isMax) {
  Location loc = op->getLoc();
  Value l = op->getOperand(0), r = op->getOperand(1);
  Value zero = scalarLike(b, loc, g, 0.0);
  Value lWins = isMax ? binary<GreaterOp>(b, loc, l, r, true)
                      : binary<LessOp>(b, loc, l, r, true);
  Value rWins = isMax ? binary<LessOp>(b, loc, l, r, true)
                      : binary<GreaterOp>(b, loc, l, r, true);
  Value tie = binary<EqualOp>(b, loc, l, r, true);
  Value half = select(b, loc, tie, mulScalar(b, loc, g, 0.5), zero);
  Value dl = add(b, loc, select(b, loc, lWins, g, zero), half);
  Value dr = add(b, loc, select(b, loc, rWins, g, zero), half);
  return binaryRule(op, b, dxs, dl, dr);
}

LogicalResult MaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  return extremum(*this, b, dys[0], dxs, /*isMax=*/true);
}

LogicalResult MinOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  return extremum(*this, b, dys[0], dxs, /*isMax=*/false);
}

// Comparisons and logic have boolean results: nothing flows back.
#define ZG_NO_GRADIENT(OP)                                                     \
  LogicalResult OP::buildGradients(OpBuilder &, ArrayRef<Value>,               \
                                   SmallVectorImpl<Value> &dxs) {              \
    noGradients(*this, dxs);                                                   \
    return success();                                                          \
  }
ZG_NO_GRADIENT(EqualOp)
ZG_NO_GRADIENT(LessOp)
ZG_NO_GRADIENT(GreaterOp)
ZG_NO_GRADIENT(LessEqualOp)
ZG_NO_GRADIENT(GreaterEqualOp)
ZG_NO_GRADIENT(AndOp)
ZG_NO_GRADIENT(OrOp)
#undef ZG_NO_GRADIENT

LogicalResult WhereOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                      SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value g = dys[0], zero = scalarLike(b, loc, g, 0.0);
  noGradients(*this, dxs);
  dxs[1] = sumToType(b, loc, select(b, loc, getCondition(), g, zero), getLhs());
  dxs[2] = sumToType(b, loc, select(b, loc, getCondition(), zero, g), getRhs());
  return success();
}

//===----------------------------------------------------------------------===//
// Linear algebra.
//===----------------------------------------------------------------------===//

namespace {

Value matmul(OpBuilder &b, Location loc, Value x, Value y) {
  auto a = rtt(x).getShape(), c = rtt(y).getShape();
  Shape shape = *broadcastShapes(a.drop_back(2), c.drop_back(2));
  shape.push_back(a[a.size() - 2]);
  shape.push_back(c.back());
  return MatmulOp::create(b, loc, withShape(x, shape), x, y);
}

} // namespace

LogicalResult MatmulOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  // Only --zplan-fold-transpose sets the flags, after the step is built.
  if (getTransA() || getTransB())
    return emitOpError("has no gradient rule with trans_a / trans_b set");
  // Work on the 2-D-or-more forms numpy.matmul promotes 1-D operands to.
  Shape a(rtt(getLhs()).getShape()), c(rtt(getRhs()).getShape());
  if (a.size() == 1)
    a.insert(a.begin(), 1);
  if (c.size() == 1)
    c.push_back(1);
  Value lhs = reshape(b, loc, getLhs(), a), rhs = reshape(b, loc, getRhs(), c);
  Shape gshape = *broadcastShapes(ArrayRef<int64_t>(a).drop_back(2),
                                  ArrayRef<int64_t>(c).drop_back(2));
  gshape.push_back(a[a.size() - 2]);
  gshape.push_back(c.back());
  Value g = reshape(b, loc, dys[0], gshape);
  noGradients(*this, dxs);
  Value dl = sumToShape(b, loc, matmul(b, loc, g, transposeLast2(b, loc, rhs)),
                        a);
  Value dr = sumToShape(b, loc, matmul(b, loc, transposeLast2(b, loc, lhs), g),
                        c);
  dxs[0] = reshape(b, loc, dl, rtt(getLhs()).getShape());
  dxs[1] = reshape(b, loc, dr, rtt(getRhs()).getShape());
  return success();
}

LogicalResult LinearOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value g = dys[0], x = getInput(), w = getWeight();
  double alpha = getAlpha().convertToDouble();
  noGradients(*this, dxs);
  // dx = alpha * dy W^T: a linear with the weight's layout flag flipped.
  dxs[0] = LinearOp::create(
      b, loc, TypeRange{x.getType()}, ValueRange{g, w},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("trans_w", b.getBoolAttr(!getTransW())),
          b.getNamedAttr("alpha", b.getF64FloatAttr(alpha))});
  auto xs = rtt(x).getShape();
  int64_t k = xs.back(), n = rtt(g).getShape().back();
  int64_t m = product(xs.drop_back());
  Value x2 = reshape(b, loc, x, {m, k}), g2 = reshape(b, loc, g, {m, n});
  // dW = alpha * x^T dy ([K, N]) or alpha * dy^T x ([N, K]). Either form
  // can also be computed as the transpose of the other product; the one that
  // copies fewer elements in transposes is built (for a large vocabulary
  // head, transposing dy [M, V] would copy the whole logits gradient).
  int64_t direct = getTransW() ? m * n : k * m;
  int64_t flipped = (getTransW() ? k * m : n * m) + k * n;
  Value dw;
  if (direct <= flipped)
    dw = getTransW() ? matmul(b, loc, transposeLast2(b, loc, g2), x2)
                     : matmul(b, loc, transposeLast2(b, loc, x2), g2);
  else
    dw = transposeLast2(
        b, loc,
        getTransW() ? matmul(b, loc, transposeLast2(b, loc, x2), g2)
                    : matmul(b, loc, transposeLast2(b, loc, g2), x2));
  if (alpha != 1.0)
    dw = mulScalar(b, loc, dw, alpha);
  dxs[1] = dw;
  if (getBias())
    dxs[2] = reduceSum(b, loc, g2, {0}, /*keepdims=*/false);
  return success();
}

//===----------------------------------------------------------------------===//
// Normalisation and reductions.
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                        SmallVectorImpl<Value> &dxs) {
  noGradients(*this, dxs);
  dxs[0] = SoftmaxGradOp::create(b, getLoc(), getInput().getType(),
                                 getResult(), dys[0], getAxis());
  return success();
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value x = getInput(), scale = getScale();
  auto norm = rtt(x).getShape().drop_front(getAxis());
  // The gradient op wants the scale at exactly the normalised dims' shape; a
  // broadcast scale is expanded first and its gradient summed back.
  Value full = expandTo(b, loc, scale, norm);
  auto fullType = withShape(scale, norm);
  auto grads = LayerNormGradOp::create(b, loc, x.getType(), fullType,
                                       fullType, x, full, dys[0], getAxis(),
                                       getEpsilon());
  noGradients(*this, dxs);
  dxs[0] = grads.getGradInput();
  dxs[1] = sumToType(b, loc, grads.getGradScale(), scale);
  if (getBias())
    dxs[2] = sumToType(b, loc, grads.getGradBias(), getBias());
  return success();
}

LogicalResult RmsNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                        SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value x = getInput();
  int64_t d = rtt(x).getShape().back();
  Value scale = getScale() ? getScale()
                           : filled(b, loc, withShape(x, {d}), 1.0);
  auto grads = RmsNormGradOp::create(b, loc, x.getType(), scale.getType(), x,
                                     scale, dys[0], getEpsilon());
  noGradients(*this, dxs);
  dxs[0] = grads.getGradInput();
  if (getScale())
    dxs[1] = grads.getGradScale();
  return success();
}

// The op is linear in x: its vector-Jacobian product is the transposed map,
// the same op with `inverse` flipped (the rotation by the opposite angle),
// in the same layout.
// The tables are position constants: they get no gradient.
LogicalResult RotaryOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &dxs) {
  noGradients(*this, dxs);
  dxs[0] = RotaryOp::create(b, getLoc(), getInput().getType(), dys[0], getCos(),
                            getSin(), !getInverse(), getSeqMajor());
  return success();
}

namespace {

/// The input's shape with the reduced axes kept as 1.
Shape keptShape(Value input, ArrayRef<int64_t> axes) {
  Shape shape(rtt(input).getShape());
  for (int64_t a : axes)
    shape[a] = 1;
  return shape;
}

} // namespace

LogicalResult ReduceSumOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  noGradients(*this, dxs);
  Value g = reshape(b, loc, dys[0], keptShape(getInput(), getAxes()));
  dxs[0] = expandTo(b, loc, g, rtt(getInput()).getShape());
  return success();
}

LogicalResult ReduceMeanOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                           SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  noGradients(*this, dxs);
  int64_t count = 1;
  for (int64_t a : getAxes())
    count *= rtt(getInput()).getDimSize(a);
  Value g = reshape(b, loc, dys[0], keptShape(getInput(), getAxes()));
  g = mulScalar(b, loc, g, 1.0 / double(count));
  dxs[0] = expandTo(b, loc, g, rtt(getInput()).getShape());
  return success();
}

LogicalResult ReduceMaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  noGradients(*this, dxs);
  Value x = getInput();
  Shape kept = keptShape(x, getAxes());
  // Every element equal to the maximum shares the gradient evenly
  // (PyTorch's amax backward).
  Value y = reshape(b, loc, getResult(), kept);
  Value hit = binary<EqualOp>(b, loc, x, y, true);
  Value mask = select(b, loc, hit, scalarLike(b, loc, x, 1.0),
                      scalarLike(b, loc, x, 0.0));
  Value count = reduceSum(b, loc, mask, getAxes(), /*keepdims=*/true);
  Value g = div(b, loc, reshape(b, loc, dys[0], kept), count);
  dxs[0] = mul(b, loc, mask, g);
  return success();
}

LogicalResult SumSquaresOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                           SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  noGradients(*this, dxs);
  Value g = dys[0];
  if (rtt(g).getElementType() != rtt(getInput()).getElementType())
    g = CastOp::create(b, loc, withShape(getInput(), {}), g);
  dxs[0] = mul(b, loc, getInput(), mulScalar(b, loc, g, 2.0));
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement.
//===----------------------------------------------------------------------===//

LogicalResult TransposeOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &dxs) {
  Shape inverse(getPerm().size());
  for (auto [i, p] : llvm::enumerate(getPerm()))
    inverse[p] = i;
  noGradients(*this, dxs);
  dxs[0] = transpose(b, getLoc(), dys[0], inverse);
  return success();
}

LogicalResult ReshapeOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                        SmallVectorImpl<Value> &dxs) {
  noGradients(*this, dxs);
  dxs[0] = reshape(b, getLoc(), dys[0], rtt(getInput()).getShape());
  return success();
}

LogicalResult ExpandOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &dxs) {
  noGradients(*this, dxs);
  dxs[0] = sumToType(b, getLoc(), dys[0], getInput());
  return success();
}

LogicalResult ConcatOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &dxs) {
  noGradients(*this, dxs);
  if (getInputs().size() == 1) {
    dxs[0] = dys[0];
    return success();
  }
  SmallVector<Type> types(getInputs().getTypes());
  auto split = SplitOp::create(b, getLoc(), types, dys[0], getAxis());
  for (auto [i, part] : llvm::enumerate(split.getResults()))
    dxs[i] = part;
  return success();
}

LogicalResult SplitOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                      SmallVectorImpl<Value> &dxs) {
  SmallVector<Value> parts;
  for (auto [result, g] : llvm::zip(getResults(), dys))
    parts.push_back(g ? g
                      : filled(b, getLoc(),
                               cast<RankedTensorType>(result.getType()), 0.0));
  noGradients(*this, dxs);
  dxs[0] = concat(b, getLoc(), parts, getAxis());
  return success();
}

LogicalResult SliceOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                      SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  auto full = rtt(getInput()).getShape();
  noGradients(*this, dxs);
  if (rtt(getResult()).getNumElements() == 0) {
    dxs[0] = filled(b, loc, rtt(getInput()), 0.0);
    return success();
  }
  // Scatter dy back one dim at a time: reverse a negative step, spread a
  // step > 1 with zeros in between, then pad with zeros before and after.
  Value t = dys[0];
  for (int64_t d = 0; d < (int64_t)full.size(); ++d) {
    int64_t n = rtt(t).getDimSize(d), start = getStarts()[d],
            step = getSteps()[d];
    Shape cur(rtt(t).getShape());
    if (step < 0) {
      Shape starts(cur.size(), 0), steps(cur.size(), 1);
      starts[d] = n - 1;
      steps[d] = -1;
      t = SliceOp::create(b, loc, t.getType(), t, starts, steps);
      start = start + (n - 1) * step;
      step = -step;
    }
    int64_t span = n;
    if (step > 1) {
      Shape one(cur), gap(cur);
      one.insert(one.begin() + d + 1, 1);
      gap.insert(gap.begin() + d + 1, step - 1);
      Value spread = concat(
          b, loc,
          {reshape(b, loc, t, one), filled(b, loc, withShape(t, gap), 0.0)},
          d + 1);
      Shape flat(cur);
      flat[d] = n * step;
      t = reshape(b, loc, spread, flat);
      span = (n - 1) * step + 1;
      Shape keep(flat), starts(cur.size(), 0), steps(cur.size(), 1);
      keep[d] = span;
      t = SliceOp::create(b, loc, withShape(t, keep), t, starts, steps);
    }
    Shape before(rtt(t).getShape()), after(rtt(t).getShape());
    before[d] = start;
    after[d] = full[d] - start - span;
    t = concat(b, loc,
               {filled(b, loc, withShape(t, before), 0.0), t,
                filled(b, loc, withShape(t, after), 0.0)},
               d);
  }
  dxs[0] = t;
  return success();
}

LogicalResult GatherOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  noGradients(*this, dxs);
  auto ds = rtt(getData()).getShape();
  auto is = rtt(getIndices()).getShape();
  int64_t axis = getAxis(), ni = is.size(), vocab = ds[axis];
  // Bring the index dims of dy to the front, flatten to [indices, rest] and
  // scatter-add rows with embedding_grad; then undo the layout.
  Shape perm;
  for (int64_t i = 0; i < ni; ++i)
    perm.push_back(axis + i);
  for (int64_t i = 0; i < axis; ++i)
    perm.push_back(i);
  for (int64_t i = axis + ni; i < rtt(dys[0]).getRank(); ++i)
    perm.push_back(i);
  int64_t rest = product(ds) / std::max<int64_t>(vocab, 1);
  int64_t count = product(is);
  Value g = reshape(b, loc, transpose(b, loc, dys[0], perm), {count, rest});
  Value ids = getIndices();
  // Negative indices count from the end; embedding_grad wants [0, V).
  bool nonNegative = false;
  if (auto c = ids.getDefiningOp<ConstantOp>())
    if (auto dense = dyn_cast<DenseIntElementsAttr>(c.getValue()))
      nonNegative = llvm::all_of(dense.getValues<APInt>(),
                                 [](const APInt &v) { return !v.isNegative(); });
  if (!nonNegative) {
    Value zero = scalarLike(b, loc, ids, 0.0);
    Value negative = binary<LessOp>(b, loc, ids, zero, true);
    ids = select(b, loc, negative,
                 add(b, loc, ids, scalarLike(b, loc, ids, double(vocab))),
                 ids);
  }
  ids = reshape(b, loc, ids, {count});
  Value table = EmbeddingGradOp::create(b, loc, withShape(g, {vocab, rest}),
                                        ids, g);
  Shape grouped = {vocab};
  grouped.append(ds.begin(), ds.begin() + axis);
  grouped.append(ds.begin() + axis + 1, ds.end());
  Value t = reshape(b, loc, table, grouped);
  Shape back;
  for (int64_t i = 1; i <= axis; ++i)
    back.push_back(i);
  back.push_back(0);
  for (int64_t i = axis + 1; i < (int64_t)ds.size(); ++i)
    back.push_back(i);
  dxs[0] = transpose(b, loc, t, back);
  return success();
}

LogicalResult EmbeddingOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &dxs) {
  noGradients(*this, dxs);
  auto grad = EmbeddingGradOp::create(b, getLoc(), getTable().getType(),
                                      getIds(), dys[0]);
  // A vocabulary-parallel table keeps its row range for the scatter.
  if (Attribute stride = (*this)->getAttr("zd.vocab_stride"))
    grad->setAttr("zd.vocab_stride", stride);
  dxs[0] = grad;
  return success();
}

LogicalResult LabelPickOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &dxs) {
  noGradients(*this, dxs);
  auto grad = LabelPickGradOp::create(b, getLoc(), getLogits().getType(),
                                      getLabels(), dys[0], getIgnoreIndex());
  if (Attribute stride = (*this)->getAttr("zd.vocab_stride"))
    grad->setAttr("zd.vocab_stride", stride);
  dxs[0] = grad;
  return success();
}

//===----------------------------------------------------------------------===//
// Attention.
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  if (dys.size() > 1 && dys[1])
    return emitOpError("the log-sum-exp result has no gradient rule");
  Value out = getResult(), lse = getLse();
  if (!lse) {
    // The forward did not keep its log-sum-exp: recompute the attention here
    // with it (the autodiff pass asks the forward for it beforehand, so this
    // only happens for graphs built otherwise).
    auto q = rtt(getQ()).getShape();
    auto lseType = RankedTensorType::get({q[0], q[1], q[2]}, b.getF32Type());
    auto again = AttentionOp::create(
        b, loc, TypeRange{out.getType(), lseType}, getOperands(),
        (*this)->getAttrs());
    out = again.getResult();
    lse = again.getLse();
  }
  SmallVector<Value> operands = {getQ(), getK(), getV(), out, dys[0], lse};
  if (getMask())
    operands.push_back(getMask());
  auto grads = AttentionGradOp::create(
      b, loc,
      TypeRange{getQ().getType(), getK().getType(), getV().getType()},
      operands,
      ArrayRef<NamedAttribute>{b.getNamedAttr("scale", getScaleAttr()),
                               b.getNamedAttr("causal", getCausalAttr())});
  noGradients(*this, dxs);
  dxs[0] = grads.getGradQ();
  dxs[1] = grads.getGradK();
  dxs[2] = grads.getGradV();
  return success();
}
