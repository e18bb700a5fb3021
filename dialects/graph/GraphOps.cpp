//===- GraphOps.cpp - zg operations ---------------------------------------===//
//
// Op verifiers. Every verifier reports through emitOpError: a malformed graph
// is a user-facing error, never an assertion.
//
//===----------------------------------------------------------------------===//

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

using namespace mlir;
using namespace zplan::graph;

std::optional<SmallVector<int64_t>>
zplan::graph::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool zplan::graph::broadcastsTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i])
      return false;
  return true;
}

static RankedTensorType rtt(Value v) {
  return cast<RankedTensorType>(v.getType());
}

static std::string shapeStr(ArrayRef<int64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "x" : "") + std::to_string(s[i]);
  return out + "]";
}

/// Checks that `operands` broadcast to exactly the result's shape.
static LogicalResult verifyBroadcastResult(Operation *op, ValueRange operands,
                                           Value result) {
  SmallVector<int64_t> shape;
  bool first = true;
  for (Value v : operands) {
    auto s = rtt(v).getShape();
    if (first) {
      shape.assign(s.begin(), s.end());
      first = false;
      continue;
    }
    auto b = broadcastShapes(shape, s);
    if (!b)
      return op->emitOpError("operand shapes ")
             << shapeStr(shape) << " and " << shapeStr(s)
             << " do not broadcast";
    shape = *b;
  }
  if (ArrayRef<int64_t>(shape) != rtt(result).getShape())
    return op->emitOpError("result shape ")
           << shapeStr(rtt(result).getShape())
           << " is not the broadcast shape " << shapeStr(shape);
  return success();
}

static LogicalResult verifyBinary(Operation *op, bool boolResult) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  if (rtt(lhs).getElementType() != rtt(rhs).getElementType())
    return op->emitOpError("operands have different element types");
  if (!boolResult &&
      rtt(op->getResult(0)).getElementType() != rtt(lhs).getElementType())
    return op->emitOpError("result element type differs from the operands'");
  return verifyBroadcastResult(op, op->getOperands(), op->getResult(0));
}

#define ZG_BINARY_VERIFIER(OP, BOOL)                                           \
  LogicalResult OP::verify() { return verifyBinary(*this, BOOL); }
ZG_BINARY_VERIFIER(AddOp, false)
ZG_BINARY_VERIFIER(SubOp, false)
ZG_BINARY_VERIFIER(MulOp, false)
ZG_BINARY_VERIFIER(DivOp, false)
ZG_BINARY_VERIFIER(PowOp, false)
ZG_BINARY_VERIFIER(MaxOp, false)
ZG_BINARY_VERIFIER(MinOp, false)
ZG_BINARY_VERIFIER(EqualOp, true)
ZG_BINARY_VERIFIER(LessOp, true)
ZG_BINARY_VERIFIER(GreaterOp, true)
ZG_BINARY_VERIFIER(LessEqualOp, true)
ZG_BINARY_VERIFIER(GreaterEqualOp, true)
ZG_BINARY_VERIFIER(AndOp, true)
ZG_BINARY_VERIFIER(OrOp, true)
#undef ZG_BINARY_VERIFIER

LogicalResult WhereOp::verify() {
  if (rtt(getLhs()).getElementType() != rtt(getRhs()).getElementType() ||
      rtt(getLhs()).getElementType() != rtt(getResult()).getElementType())
    return emitOpError("branches and result must have one element type");
  return verifyBroadcastResult(*this, getOperands(), getResult());
}

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

LogicalResult MatmulOp::verify() {
  auto a = rtt(getLhs()).getShape(), b = rtt(getRhs()).getShape();
  if (a.empty() || b.empty())
    return emitOpError("operands must have rank >= 1");
  if (rtt(getLhs()).getElementType() != rtt(getRhs()).getElementType())
    return emitOpError("operands have different element types");
  SmallVector<int64_t> as(a), bs(b);
  bool aVec = as.size() == 1, bVec = bs.size() == 1;
  if ((getTransA() && aVec) || (getTransB() && bVec))
    return emitOpError("trans_a / trans_b need an operand of rank >= 2");
  if (getTransA())
    std::swap(as[as.size() - 1], as[as.size() - 2]);
  if (getTransB())
    std::swap(bs[bs.size() - 1], bs[bs.size() - 2]);
  if (aVec)
    as.insert(as.begin(), 1);
  if (bVec)
    bs.push_back(1);
  int64_t k1 = as.back(), k2 = bs[bs.size() - 2];
  if (k1 != k2)
    return emitOpError("contraction dims differ: ") << k1 << " vs " << k2;
  auto batch = broadcastShapes(ArrayRef<int64_t>(as).drop_back(2),
                               ArrayRef<int64_t>(bs).drop_back(2));
  if (!batch)
    return emitOpError("batch dims do not broadcast");
  SmallVector<int64_t> out(*batch);
  if (!aVec)
    out.push_back(as[as.size() - 2]);
  if (!bVec)
    out.push_back(bs.back());
  if (ArrayRef<int64_t>(out) != rtt(getResult()).getShape())
    return emitOpError("result shape ")
           << shapeStr(rtt(getResult()).getShape()) << " should be "
           << shapeStr(out);
  return success();
}

LogicalResult LinearOp::verify() {
  auto x = rtt(getInput()).getShape(), w = rtt(getWeight()).getShape();
  if (x.empty())
    return emitOpError("input must have rank >= 1");
  if (w.size() != 2)
    return emitOpError("weight must be 2-D, got rank ") << w.size();
  int64_t k = getTransW() ? w[1] : w[0];
  int64_t n = getTransW() ? w[0] : w[1];
  if (x.back() != k)
    return emitOpError("input's last dim ")
           << x.back() << " does not match the weight's K = " << k;
  if (getBias()) {
    auto b = rtt(getBias()).getShape();
    if (b.size() != 1 || b[0] != n)
      return emitOpError("bias must have shape [") << n << "]";
  }
  SmallVector<int64_t> out(x);
  out.back() = n;
  if (ArrayRef<int64_t>(out) != rtt(getResult()).getShape())
    return emitOpError("result shape should be ") << shapeStr(out);
  return success();
}

/// The shared rule of the fused few-row products: x [..., K], each weight 2-D
/// with that K and x's element type, each result x's shape with N replaced.
static LogicalResult verifyProduct(Operation *op, Value input, Value weight,
                                   Value result, bool transW) {
  auto x = rtt(input).getShape(), w = rtt(weight).getShape();
  if (x.empty())
    return op->emitOpError("input must have rank >= 1");
  if (w.size() != 2)
    return op->emitOpError("weight must be 2-D, got rank ") << w.size();
  int64_t k = transW ? w[1] : w[0];
  int64_t n = transW ? w[0] : w[1];
  if (x.back() != k)
    return op->emitOpError("input's last dim ")
           << x.back() << " does not match a weight's K = " << k;
  if (rtt(weight).getElementType() != rtt(input).getElementType() ||
      rtt(result).getElementType() != rtt(input).getElementType())
    return op->emitOpError("input, weights and results must share one "
                           "element type");
  SmallVector<int64_t> out(x);
  out.back() = n;
  if (ArrayRef<int64_t>(out) != rtt(result).getShape())
    return op->emitOpError("result shape should be ") << shapeStr(out);
  return success();
}

LogicalResult LinearMultiOp::verify() {
  if (getWeights().size() < 2 || getWeights().size() > 4)
    return emitOpError("takes two to four weights, got ")
           << getWeights().size();
  if (getWeights().size() != getResults().size())
    return emitOpError("needs one result per weight");
  for (auto [w, r] : llvm::zip(getWeights(), getResults()))
    if (failed(verifyProduct(*this, getInput(), w, r, getTransW())))
      return failure();
  return success();
}

LogicalResult LinearGatedOp::verify() {
  if (getAct() != "silu" && getAct() != "gelu_tanh" && getAct() != "gelu_erf")
    return emitOpError("act must be silu, gelu_tanh or gelu_erf, got ")
           << getAct();
  if (rtt(getGateWeight()).getShape() != rtt(getUpWeight()).getShape())
    return emitOpError("gate and up weights must have one shape");
  return verifyProduct(*this, getInput(), getGateWeight(), getResult(),
                       getTransW());
}

LogicalResult LinearResidualOp::verify() {
  if (rtt(getResidual()) != rtt(getResult()))
    return emitOpError("residual and result must have one type");
  if (getBias()) {
    auto b = rtt(getBias());
    int64_t n = rtt(getResult()).getShape().empty()
                    ? 0
                    : rtt(getResult()).getShape().back();
    if (b.getShape() != ArrayRef<int64_t>{n} ||
        b.getElementType() != rtt(getInput()).getElementType())
      return emitOpError("bias must be [")
             << n << "] of the input's element type";
  }
  return verifyProduct(*this, getInput(), getWeight(), getResult(),
                       getTransW());
}

LogicalResult NormProductsOp::verify() {
  if (rtt(getResidual()) != rtt(getInput()) || rtt(getSum()) != rtt(getInput()))
    return emitOpError("input, residual and sum must have one type");
  auto x = rtt(getInput()).getShape();
  if (x.empty() || rtt(getScale()).getShape() != ArrayRef<int64_t>{x.back()} ||
      rtt(getScale()).getElementType() != rtt(getInput()).getElementType())
    return emitOpError("scale must be [") << (x.empty() ? 0 : x.back())
                                          << "] of the input's element type";
  size_t n = getWeights().size();
  bool gated = !getAct().empty();
  if (gated) {
    if (getAct() != "silu" && getAct() != "gelu_tanh" &&
        getAct() != "gelu_erf")
      return emitOpError("act must be empty, silu, gelu_tanh or gelu_erf, "
                         "got ")
             << getAct();
    if (n != 2 || getProducts().size() != 1)
      return emitOpError("a gated form takes two weights and has one product");
    if (rtt(getWeights()[0]).getShape() != rtt(getWeights()[1]).getShape())
      return emitOpError("gate and up weights must have one shape");
    return verifyProduct(*this, getInput(), getWeights()[0],
                         getProducts()[0], false);
  }
  if (n < 1 || n > 4 || getProducts().size() != n)
    return emitOpError("takes one to four weights, one product each");
  for (auto [w, r] : llvm::zip(getWeights(), getProducts()))
    if (failed(verifyProduct(*this, getInput(), w, r, false)))
      return failure();
  return success();
}

static LogicalResult verifyAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError("axis ")
           << axis << " out of range for rank " << rank;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), rtt(getInput()).getRank());
}

LogicalResult LayerNormOp::verify() {
  auto x = rtt(getInput()).getShape();
  if (failed(verifyAxis(*this, getAxis(), x.size())))
    return failure();
  auto norm = x.drop_front(getAxis());
  if (!broadcastsTo(rtt(getScale()).getShape(), norm))
    return emitOpError("scale does not broadcast to the normalised dims ")
           << shapeStr(norm);
  if (getBias() && !broadcastsTo(rtt(getBias()).getShape(), norm))
    return emitOpError("bias does not broadcast to the normalised dims ")
           << shapeStr(norm);
  if (rtt(getResult()) != rtt(getInput()))
    return emitOpError("result type must equal the input type");
  return success();
}

LogicalResult RmsNormOp::verify() {
  auto x = rtt(getInput()).getShape();
  if (x.empty())
    return emitOpError("input must have rank >= 1");
  if (getScale()) {
    auto s = rtt(getScale()).getShape();
    if (s.size() != 1 || s[0] != x.back())
      return emitOpError("scale must have shape [") << x.back() << "]";
  }
  if (rtt(getResult()) != rtt(getInput()))
    return emitOpError("result type must equal the input type");
  return success();
}

static LogicalResult verifyReduce(Operation *op, ArrayRef<int64_t> axes,
                                  bool keepdims) {
  auto x = rtt(op->getOperand(0)).getShape();
  if (axes.empty())
    return op->emitOpError("axes must not be empty");
  SmallVector<int64_t> out;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (failed(verifyAxis(op, axes[i], x.size())))
      return failure();
    if (i && axes[i] <= axes[i - 1])
      return op->emitOpError("axes must be sorted and unique");
  }
  for (int64_t d = 0; d < (int64_t)x.size(); ++d) {
    if (llvm::is_contained(axes, d)) {
      if (keepdims)
        out.push_back(1);
    } else {
      out.push_back(x[d]);
    }
  }
  if (ArrayRef<int64_t>(out) != rtt(op->getResult(0)).getShape())
    return op->emitOpError("result shape should be ") << shapeStr(out);
  return success();
}

LogicalResult ReduceSumOp::verify() {
  return verifyReduce(*this, getAxes(), getKeepdims());
}
LogicalResult ReduceMeanOp::verify() {
  return verifyReduce(*this, getAxes(), getKeepdims());
}
LogicalResult ReduceMaxOp::verify() {
  return verifyReduce(*this, getAxes(), getKeepdims());
}

LogicalResult TransposeOp::verify() {
  auto x = rtt(getInput()).getShape();
  auto perm = getPerm();
  if (perm.size() != x.size())
    return emitOpError("perm has ")
           << perm.size() << " entries for rank " << x.size();
  SmallVector<bool> seen(x.size(), false);
  SmallVector<int64_t> out;
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)x.size() || seen[p])
      return emitOpError("perm is not a permutation");
    seen[p] = true;
    out.push_back(x[p]);
  }
  if (ArrayRef<int64_t>(out) != rtt(getResult()).getShape())
    return emitOpError("result shape should be ") << shapeStr(out);
  return success();
}

LogicalResult ReshapeOp::verify() {
  if (rtt(getInput()).getNumElements() != rtt(getResult()).getNumElements())
    return emitOpError("element counts differ: ")
           << rtt(getInput()).getNumElements() << " vs "
           << rtt(getResult()).getNumElements();
  if (rtt(getInput()).getElementType() != rtt(getResult()).getElementType())
    return emitOpError("element types differ");
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one operand");
  auto out = rtt(getResult()).getShape();
  if (failed(verifyAxis(*this, getAxis(), out.size())))
    return failure();
  int64_t total = 0;
  for (Value v : getInputs()) {
    auto s = rtt(v).getShape();
    if (s.size() != out.size())
      return emitOpError("operand ranks differ");
    for (size_t d = 0; d < s.size(); ++d)
      if ((int64_t)d != getAxis() && s[d] != out[d])
        return emitOpError("operand dim ") << d << " differs from result";
    total += s[getAxis()];
  }
  if (total != out[getAxis()])
    return emitOpError("sizes along axis add up to ")
           << total << ", result has " << out[getAxis()];
  return success();
}

LogicalResult SliceOp::verify() {
  auto x = rtt(getInput()).getShape();
  auto out = rtt(getResult()).getShape();
  if (getStarts().size() != x.size() || getSteps().size() != x.size() ||
      out.size() != x.size())
    return emitOpError("starts, steps and result need one entry per dim");
  for (size_t d = 0; d < x.size(); ++d) {
    int64_t st = getStarts()[d], step = getSteps()[d];
    if (step == 0)
      return emitOpError("step of dim ") << d << " is zero";
    if (out[d] == 0)
      continue;
    int64_t last = st + (out[d] - 1) * step;
    if (st < 0 || st >= x[d] || last < 0 || last >= x[d])
      return emitOpError("dim ") << d << " reads outside [0, " << x[d] << ")";
  }
  return success();
}

LogicalResult SplitOp::verify() {
  auto x = rtt(getInput()).getShape();
  if (failed(verifyAxis(*this, getAxis(), x.size())))
    return failure();
  int64_t total = 0;
  for (Value r : getResults()) {
    auto s = rtt(r).getShape();
    if (s.size() != x.size())
      return emitOpError("result ranks differ from input");
    for (size_t d = 0; d < s.size(); ++d)
      if ((int64_t)d != getAxis() && s[d] != x[d])
        return emitOpError("result dim ") << d << " differs from input";
    total += s[getAxis()];
  }
  if (total != x[getAxis()])
    return emitOpError("split sizes add up to ")
           << total << ", input has " << x[getAxis()];
  return success();
}

LogicalResult GatherOp::verify() {
  auto d = rtt(getData()).getShape(), i = rtt(getIndices()).getShape();
  if (failed(verifyAxis(*this, getAxis(), d.size())))
    return failure();
  SmallVector<int64_t> out(d.begin(), d.begin() + getAxis());
  out.append(i.begin(), i.end());
  out.append(d.begin() + getAxis() + 1, d.end());
  if (ArrayRef<int64_t>(out) != rtt(getResult()).getShape())
    return emitOpError("result shape should be ") << shapeStr(out);
  return success();
}

LogicalResult ExpandOp::verify() {
  if (!broadcastsTo(rtt(getInput()).getShape(), rtt(getResult()).getShape()))
    return emitOpError("input ")
           << shapeStr(rtt(getInput()).getShape()) << " does not broadcast to "
           << shapeStr(rtt(getResult()).getShape());
  return success();
}

LogicalResult EmbeddingOp::verify() {
  auto t = rtt(getTable()).getShape(), ids = rtt(getIds()).getShape();
  if (t.size() != 2)
    return emitOpError("table must be 2-D");
  SmallVector<int64_t> out(ids);
  out.push_back(t[1]);
  if (ArrayRef<int64_t>(out) != rtt(getResult()).getShape())
    return emitOpError("result shape should be ") << shapeStr(out);
  return success();
}

/// Checks the log-sum-exp tensor of an attention: f32 [B, Hq, S].
static LogicalResult verifyLse(Operation *op, Value lse,
                               ArrayRef<int64_t> q) {
  SmallVector<int64_t> want = {q[0], q[1], q[2]};
  if (rtt(lse).getShape() != ArrayRef<int64_t>(want) ||
      !rtt(lse).getElementType().isF32())
    return op->emitOpError("lse must be f32 ") << shapeStr(want);
  return success();
}

LogicalResult AttentionOp::verify() {
  if (getSeqMajorBits() < 0 || getSeqMajorBits() > 15)
    return emitOpError("seq_major must be bits of 1 (q), 2 (k), 4 (v) and "
                       "8 (result)");
  // The checks below are on the logical head-major shapes, a packed
  // operand's read out of its [B, S, W] tensor. ODS has checked that
  // `packed` holds nine non-negative ints.
  static constexpr const char *names[3] = {"q", "k", "v"};
  SmallVector<int64_t> logical[3];
  std::optional<ArrayRef<int64_t>> packed = getPacked();
  if (packed && llvm::all_of(*packed, [](int64_t x) { return x == 0; }))
    return emitOpError("packed packs no operand (every row stride is 0): "
                       "leave it out");
  ArrayRef<int64_t> result = rtt(getResult()).getShape();
  Value operands[3] = {getQ(), getK(), getV()};
  for (int i = 0; i < 3; ++i) {
    ArrayRef<int64_t> x = rtt(operands[i]).getShape();
    int64_t rowStride = packed ? (*packed)[3 * i + 1] : 0;
    int64_t offset = packed ? (*packed)[3 * i] : 0;
    int64_t heads = packed ? (*packed)[3 * i + 2] : 0;
    if (rowStride == 0) {
      if (offset != 0 || heads != 0)
        return emitOpError("packed: ")
               << names[i] << " is not packed (row stride 0), so its offset "
               << "and heads must be 0, not " << offset << " and " << heads;
      logical[i] = headMajorShape(x, int64_t(1) << i);
      continue;
    }
    int64_t d = result.size() == 4 ? result[3] : 0;
    if (!(getSeqMajorBits() & (int64_t(1) << i)))
      return emitOpError("a packed operand must be sequence-major");
    if (x.size() != 3 || x[2] != rowStride)
      return emitOpError("a packed operand must be [B, S, W] with W its row "
                         "stride ")
             << rowStride;
    if (offset < 0 || heads <= 0 || d <= 0 || offset + heads * d > rowStride)
      return emitOpError("packed operand at offset ")
             << offset << " with " << heads << " heads of " << d
             << " does not fit rows of " << rowStride;
    logical[i] = {x[0], heads, x[1], d};
  }
  SmallVector<int64_t> &q = logical[0], &k = logical[1], &v = logical[2];
  if (q.size() != 4 || k.size() != 4 || v.size() != 4)
    return emitOpError("q, k and v must be 4-D [B, H, S, D]");
  if (k[0] != q[0] || v[0] != q[0])
    return emitOpError("batch sizes differ");
  if (k[1] != v[1] || k[2] != v[2])
    return emitOpError("k and v differ in heads or length");
  if (k[1] == 0 || q[1] % k[1] != 0)
    return emitOpError("query heads (")
           << q[1] << ") are not a multiple of kv heads (" << k[1] << ")";
  if (k[3] != q[3] || v[3] != q[3])
    return emitOpError("q, k and v head dims differ");
  SmallVector<int64_t> out = {q[0], q[1], q[2], v[3]};
  if (out != headMajorShape(rtt(getResult()).getShape(), 8))
    return emitOpError("result shape should be ")
           << shapeStr(headMajorShape(out, 8));
  if (getMask()) {
    SmallVector<int64_t> scores = {q[0], q[1], q[2], k[2]};
    if (!broadcastsTo(rtt(getMask()).getShape(), scores))
      return emitOpError("mask does not broadcast to the scores ")
             << shapeStr(scores);
  }
  if (getLse())
    return verifyLse(*this, getLse(), q);
  return success();
}

LogicalResult CausalMaskOp::verify() {
  if (rtt(getResult()).getRank() < 2)
    return emitOpError("result must have rank >= 2");
  if (!isa<FloatType>(rtt(getResult()).getElementType()))
    return emitOpError("result must be a float tensor");
  return success();
}

LogicalResult ConstantOp::verify() {
  auto t = dyn_cast<RankedTensorType>(getValue().getType());
  if (!t || t != rtt(getResult()))
    return emitOpError("value type must equal the result type");
  return success();
}

LogicalResult WeightOp::verify() {
  auto t = rtt(getResult());
  // After tensor parallelism the result is the tp-local part and the source
  // keeps its full shape in `zd.source_shape` (docs/dist-contract.md).
  if (auto src = (*this)->getAttrOfType<DenseI64ArrayAttr>("zd.source_shape"))
    t = RankedTensorType::get(src.asArrayRef(), t.getElementType());
  if (getValue()) {
    if (!getFile().empty())
      return emitOpError("has both an inline value and a file");
    if (getValue()->getType() != t)
      return emitOpError("value type must equal the result type");
    return success();
  }
  if (getFile().empty())
    return emitOpError("needs a file or an inline value");
  if (getOffset() < 0 || getLength() < 0)
    return emitOpError("offset and length must be >= 0");
  unsigned bits = t.getElementType().getIntOrFloatBitWidth();
  int64_t bytes = t.getNumElements() * ((bits + 7) / 8);
  if (getLength() != bytes)
    return emitOpError("length ")
           << getLength() << " does not match the type's " << bytes
           << " bytes";
  return success();
}

//===----------------------------------------------------------------------===//
// Training ops.
//===----------------------------------------------------------------------===//

/// True when `v` is persistent: the result of zg.weight, zg.state or (after
/// ZeRO-3) zd.weight_shard. The dist dialect builds on this one, so its op is
/// recognised by name.
static bool isPersistent(Value v) {
  Operation *def = v.getDefiningOp();
  // zd.nvme_read's result is the host staging copy of NVMe-resident storage
  // (--zplan-nvme): updated in place there, then written back to the file.
  return def && (isa<WeightOp, StateOp>(def) ||
                 def->getName().getStringRef() == "zd.weight_shard" ||
                 def->getName().getStringRef() == "zd.nvme_read");
}

static LogicalResult verifyPersistentTarget(Operation *op, Value target,
                                            StringRef what) {
  if (!isPersistent(target))
    return op->emitOpError()
           << what
           << " must be persistent (a zg.weight, zg.state or zd.weight_shard "
              "result)";
  return success();
}

static LogicalResult verifyFloatScalar(Operation *op, Value v,
                                       StringRef what) {
  if (rtt(v).getRank() != 0 || !isa<FloatType>(rtt(v).getElementType()))
    return op->emitOpError() << what << " must be a float scalar (rank 0)";
  return success();
}

LogicalResult StateOp::verify() {
  StringRef kind = getKind();
  if (kind != "master" && kind != "moment1" && kind != "moment2" &&
      kind != "grad" && kind != "scalar" && kind != "kv_cache")
    return emitOpError("kind must be master, moment1, moment2, grad, "
                       "scalar or kv_cache, got \"")
           << kind << "\"";
  if (getName().empty())
    return emitOpError("needs a name");
  Attribute init = getInit();
  if (auto s = dyn_cast<StringAttr>(init)) {
    if (s.getValue() != "zeros" && s.getValue() != "copy_of_param")
      return emitOpError("init must be \"zeros\", \"copy_of_param\" or a "
                         "float, got \"")
             << s.getValue() << "\"";
    if (s.getValue() == "copy_of_param" && getOf().empty())
      return emitOpError("init \"copy_of_param\" needs the parameter's name "
                         "in `of`");
  } else if (!isa<FloatAttr>(init)) {
    return emitOpError("init must be \"zeros\", \"copy_of_param\" or a float");
  }
  return success();
}

LogicalResult AssignOp::verify() {
  if (failed(verifyPersistentTarget(*this, getTarget(), "target")))
    return failure();
  if (rtt(getTarget()).getShape() != rtt(getValue()).getShape())
    return emitOpError("value shape ")
           << shapeStr(rtt(getValue()).getShape())
           << " differs from the target's "
           << shapeStr(rtt(getTarget()).getShape());
  return success();
}

LogicalResult AccumulateOp::verify() {
  if (failed(verifyPersistentTarget(*this, getTarget(), "target")))
    return failure();
  if (rtt(getTarget()) != rtt(getValue()))
    return emitOpError("value type must equal the target type");
  return success();
}

static LogicalResult verifyPositions(Operation *op, Value pos, int64_t b) {
  auto p = rtt(pos).getShape();
  if (p.size() != 1 || p[0] != b)
    return op->emitOpError("pos must be [")
           << b << "] (one cached length per sequence), got " << shapeStr(p);
  return success();
}

LogicalResult KvWriteOp::verify() {
  if (failed(verifyPersistentTarget(*this, getCache(), "cache")))
    return failure();
  auto c = rtt(getCache()).getShape(), v = rtt(getValue()).getShape();
  if (c.size() != 4 || v.size() != 4)
    return emitOpError("cache and value must be 4-D [B, H, L, D]");
  if (c[0] != v[0] || c[1] != v[1] || c[3] != v[3] || v[2] > c[2])
    return emitOpError("value ")
           << shapeStr(v) << " does not fit the cache " << shapeStr(c);
  if (rtt(getCache()).getElementType() != rtt(getValue()).getElementType())
    return emitOpError("value and cache element types differ");
  return verifyPositions(*this, getPos(), c[0]);
}

/// The operand rules zg.rope_kv_write and zg.rope_attention share: q [B, Hq,
/// S, D], k and v [B, Hkv, S, D], the caches [B, Hkv, L, D] (persistent
/// kv_cache states), one float element type, cos and sin [1 or B, 1, 1 or S,
/// D], the result q's type.
template <class RopeOp>
static LogicalResult verifyRope(RopeOp op) {
  if (failed(verifyPersistentTarget(op, op.getKCache(), "k_cache")) ||
      failed(verifyPersistentTarget(op, op.getVCache(), "v_cache")))
    return failure();
  auto q = rtt(op.getQ()).getShape(), k = rtt(op.getK()).getShape();
  auto c = rtt(op.getKCache()).getShape();
  if (q.size() != 4 || k.size() != 4 || c.size() != 4)
    return op.emitOpError("q, k and the caches must be 4-D [B, H, S or L, D]");
  if (rtt(op.getV()).getShape() != k || rtt(op.getVCache()).getShape() != c)
    return op.emitOpError("v must be shaped like k and v_cache like k_cache");
  if (q[0] != k[0] || q[2] != k[2] || q[3] != k[3] || q[3] % 2 != 0)
    return op.emitOpError("q ") << shapeStr(q) << " and k " << shapeStr(k)
                                << " must share B, S and an even D";
  if (c[0] != k[0] || c[1] != k[1] || c[3] != k[3] || k[2] > c[2])
    return op.emitOpError("k ") << shapeStr(k) << " does not fit the cache "
                                << shapeStr(c);
  Type e = rtt(op.getQ()).getElementType();
  if (!isa<FloatType>(e) || rtt(op.getK()).getElementType() != e ||
      rtt(op.getV()).getElementType() != e ||
      rtt(op.getKCache()).getElementType() != e ||
      rtt(op.getVCache()).getElementType() != e ||
      rtt(op.getResult()) != rtt(op.getQ()))
    return op.emitOpError("q, k, v, the caches and the result must share one "
                          "float element type, the result q's type");
  auto t = rtt(op.getCos()).getShape();
  if (rtt(op.getCos()) != rtt(op.getSin()) ||
      !isa<FloatType>(rtt(op.getCos()).getElementType()) || t.size() != 4 ||
      (t[0] != 1 && t[0] != q[0]) || t[1] != 1 ||
      (t[2] != 1 && t[2] != q[2]) || t[3] != q[3])
    return op.emitOpError("cos and sin must be one float type [1 or B, 1, 1 "
                          "or S, D], got ")
           << shapeStr(t);
  return verifyPositions(op, op.getPos(), c[0]);
}

LogicalResult RopeKvWriteOp::verify() { return verifyRope(*this); }

LogicalResult RopeAttentionOp::verify() {
  if (failed(verifyRope(*this)))
    return failure();
  auto q = rtt(getQ()).getShape(), k = rtt(getK()).getShape();
  if (k[1] == 0 || q[1] % k[1] != 0)
    return emitOpError("query heads (")
           << q[1] << ") are not a multiple of kv heads (" << k[1] << ")";
  return success();
}

LogicalResult DecodeLayerOp::verify() {
  if (failed(verifyPersistentTarget(*this, getKCache(), "k_cache")) ||
      failed(verifyPersistentTarget(*this, getVCache(), "v_cache")) ||
      failed(verifyPersistentTarget(*this, getSync(), "sync")))
    return failure();
  auto x = rtt(getInput()).getShape(), c = rtt(getKCache()).getShape();
  if (x.size() < 2 || x.size() > 3 || (x.size() == 3 && x[1] != 1))
    return emitOpError("input must be [B, d] or [B, 1, d] (one token a "
                       "sequence), got ")
           << shapeStr(x);
  if (c.size() != 4 || rtt(getVCache()).getShape() != c || c[0] != x[0] ||
      c[3] % 2 != 0)
    return emitOpError("the caches must be one shape [B, Hkv, L, Dh] with "
                       "the input's B and an even Dh, got ")
           << shapeStr(c);
  const int64_t d = x.back(), hkv = c[1], dh = c[3];
  Type e = rtt(getInput()).getElementType();
  auto isMat = [&](Value w, int64_t k, int64_t n) {
    auto t = rtt(w);
    return t.getElementType() == e && t.getRank() == 2 &&
           t.getShape()[0] == k && (n < 0 || t.getShape()[1] == n);
  };
  if (!isMat(getWq(), d, -1) || rtt(getWq()).getShape()[1] % dh != 0)
    return emitOpError("wq must be [d, heads x Dh] of the input's type");
  const int64_t hq = rtt(getWq()).getShape()[1] / dh;
  if (hkv < 1 || hq % hkv != 0)
    return emitOpError("query heads (")
           << hq << ") are not a multiple of kv heads (" << hkv << ")";
  if (!isMat(getWk(), d, hkv * dh) || !isMat(getWv(), d, hkv * dh))
    return emitOpError("wk and wv must be [d, kv_heads x Dh]");
  if (!isMat(getWo(), hq * dh, d))
    return emitOpError("wo must be [heads x Dh, d]");
  if (!isMat(getWGate(), d, -1))
    return emitOpError("w_gate must be [d, ffn]");
  const int64_t f = rtt(getWGate()).getShape()[1];
  if (!isMat(getWUp(), d, f) || !isMat(getWDown(), f, d))
    return emitOpError("w_up must be w_gate's shape and w_down [ffn, d]");
  for (Value n : {getNorm1(), getNorm2()})
    if (rtt(n).getElementType() != e ||
        rtt(n).getShape() != ArrayRef<int64_t>{d})
      return emitOpError("norm1 and norm2 must be [d] of the input's type");
  if (!isa<FloatType>(e) || rtt(getKCache()).getElementType() != e ||
      rtt(getVCache()).getElementType() != e ||
      (getResidual() && rtt(getResidual()) != rtt(getInput())) ||
      rtt(getResult()) != rtt(getInput()) ||
      rtt(getResidualOut()) != rtt(getInput()))
    return emitOpError("the input, residual, caches and results must share "
                       "one float element type, the results the input's type");
  auto t = rtt(getCos()).getShape();
  if (rtt(getCos()) != rtt(getSin()) ||
      !isa<FloatType>(rtt(getCos()).getElementType()) || t.size() != 4 ||
      (t[0] != 1 && t[0] != x[0]) || t[1] != 1 || t[2] != 1 || t[3] != dh)
    return emitOpError("cos and sin must be one float type [1 or B, 1, 1, "
                       "Dh], got ")
           << shapeStr(t);
  if (rtt(getSync()).getRank() != 1 ||
      !rtt(getSync()).getElementType().isInteger(32))
    return emitOpError("sync must be a rank-1 i32 state");
  StringRef act = getAct();
  if (act != "silu" && act != "gelu_tanh" && act != "gelu_erf")
    return emitOpError("act must be silu, gelu_tanh or gelu_erf, got \"")
           << act << "\"";
  return verifyPositions(*this, getPos(), c[0]);
}

LogicalResult RotaryOp::verify() {
  auto x = rtt(getInput()).getShape();
  auto c = rtt(getCos()).getShape(), s = rtt(getSin()).getShape();
  if (x.empty() || x.back() % 2 != 0)
    return emitOpError("input must have rank >= 1 and an even last dim, got ")
           << shapeStr(x);
  if (!isa<FloatType>(rtt(getInput()).getElementType()) ||
      !isa<FloatType>(rtt(getCos()).getElementType()) ||
      !isa<FloatType>(rtt(getSin()).getElementType()))
    return emitOpError("input, cos and sin must be float tensors");
  if (rtt(getCos()) != rtt(getSin()))
    return emitOpError("cos ") << rtt(getCos()) << " and sin "
                               << rtt(getSin()) << " differ in type";
  // The tables hold one angle per element of the rotated dim: a table that
  // broadcast along it would not be a rotary table.
  // A sequence-major input [B, S, H, D] is the head-major view
  // [B, H, S, D] stored with dims 1 and 2 swapped: the tables broadcast to
  // that view, so that they still index by position.
  SmallVector<int64_t> view(x);
  if (getSeqMajor()) {
    if (x.size() != 4)
      return emitOpError("seq_major needs a rank-4 [B, S, H, D] input, got ")
             << shapeStr(x);
    std::swap(view[1], view[2]);
  }
  if (c.empty() || c.back() != x.back() || !broadcastsTo(c, view))
    return emitOpError("cos and sin ")
           << shapeStr(c) << " must broadcast to the input"
           << (getSeqMajor() ? "'s head-major view " : " ") << shapeStr(view)
           << " with the same last dim";
  if (rtt(getResult()) != rtt(getInput()))
    return emitOpError("result type must equal the input type");
  return success();
}

LogicalResult CachedAttentionOp::verify() {
  auto q = rtt(getQ()).getShape(), k = rtt(getK()).getShape(),
       v = rtt(getV()).getShape();
  if (q.size() != 4 || k.size() != 4 || v.size() != 4)
    return emitOpError("q and the caches must be 4-D [B, H, S, D]");
  if (k != v)
    return emitOpError("the k and v caches differ in shape");
  if (k[0] != q[0] || k[3] != q[3])
    return emitOpError("q and the caches differ in batch or head dim");
  if (k[1] == 0 || q[1] % k[1] != 0)
    return emitOpError("query heads (")
           << q[1] << ") are not a multiple of kv heads (" << k[1] << ")";
  if (q[2] > k[2])
    return emitOpError("more query rows than cache positions");
  if (rtt(getResult()).getShape() != q)
    return emitOpError("result shape should be ") << shapeStr(q);
  return verifyPositions(*this, getPos(), q[0]);
}

LogicalResult ArgmaxOp::verify() {
  auto x = rtt(getInput()).getShape();
  if (x.empty() || !isa<FloatType>(rtt(getInput()).getElementType()))
    return emitOpError("input must be a float tensor of rank >= 1");
  if (rtt(getResult()).getShape() != x.drop_back() ||
      !rtt(getResult()).getElementType().isInteger(64))
    return emitOpError("result must be i64 ") << shapeStr(x.drop_back());
  return success();
}

LogicalResult TakeRowsOp::verify() {
  auto x = rtt(getInput()).getShape();
  if (x.size() < 2)
    return emitOpError("input must have rank >= 2 [B, S, ...]");
  SmallVector<int64_t> out = {x[0]};
  out.append(x.begin() + 2, x.end());
  if (rtt(getResult()).getShape() != ArrayRef<int64_t>(out) ||
      rtt(getResult()).getElementType() != rtt(getInput()).getElementType())
    return emitOpError("result must be ") << shapeStr(out);
  return verifyPositions(*this, getIndex(), x[0]);
}

LogicalResult AdamwOp::verify() {
  for (auto [v, what] : {std::pair<Value, StringRef>{getParam(), "param"},
                         {getM(), "m"},
                         {getV(), "v"}})
    if (failed(verifyPersistentTarget(*this, v, what)))
      return failure();
  auto shape = rtt(getParam()).getShape();
  for (Value v : {getGrad(), getM(), getV()})
    if (rtt(v).getShape() != shape)
      return emitOpError("param, grad, m and v must have one shape");
  for (Value v : {getParam(), getGrad(), getM(), getV()})
    if (!isa<FloatType>(rtt(v).getElementType()))
      return emitOpError("param, grad, m and v must be float tensors");
  if (failed(verifyFloatScalar(*this, getLr(), "lr")) ||
      failed(verifyFloatScalar(*this, getGradScale(), "grad_scale")))
    return failure();
  if (rtt(getStep()).getRank() != 0 ||
      !isa<IntegerType>(rtt(getStep()).getElementType()))
    return emitOpError("step must be an integer scalar (rank 0)");
  double b1 = getBeta1().convertToDouble(), b2 = getBeta2().convertToDouble();
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
    return emitOpError("beta1 and beta2 must be in [0, 1)");
  if (!(getEps().convertToDouble() >= 0) ||
      !(getWeightDecay().convertToDouble() >= 0))
    return emitOpError("eps and weight_decay must be >= 0");
  return success();
}

LogicalResult SumSquaresOp::verify() {
  if (rtt(getResult()).getRank() != 0 ||
      !rtt(getResult()).getElementType().isF32())
    return emitOpError("result must be an f32 scalar (rank 0)");
  if (!isa<FloatType>(rtt(getInput()).getElementType()))
    return emitOpError("input must be a float tensor");
  return success();
}

LogicalResult SampleOp::verify() {
  auto logits = rtt(getLogits());
  if (logits.getRank() != 2 || !isa<FloatType>(logits.getElementType()))
    return emitOpError("logits must be a float tensor [B, V]");
  // The sampler's integer weights are 40-bit fixed point summed in 64 bits.
  if (logits.getDimSize(1) > (int64_t(1) << 23))
    return emitOpError("the vocabulary is larger than 2^23, the sampler's "
                       "limit");
  auto ids = rtt(getIds());
  if (ids.getRank() != 1 || ids.getDimSize(0) != logits.getDimSize(0) ||
      !ids.getElementType().isInteger(64))
    return emitOpError("ids must be i64 [B], B the logits' rows");
  auto scalar = [&](Value v, StringRef name, bool isInt) -> LogicalResult {
    auto t = rtt(v);
    bool ok = t.getRank() == 0 && (isInt ? t.getElementType().isInteger(64)
                                         : t.getElementType().isF32());
    if (!ok)
      return emitOpError() << name << " must be an " << (isInt ? "i64" : "f32")
                           << " scalar (rank 0)";
    return success();
  };
  if (failed(scalar(getTemperature(), "temperature", false)) ||
      failed(scalar(getTopK(), "top_k", true)) ||
      failed(scalar(getTopP(), "top_p", false)) ||
      failed(scalar(getSeed(), "seed", true)) ||
      failed(scalar(getStep(), "step", true)))
    return failure();
  return success();
}

LogicalResult GeluGradOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

LogicalResult SoftmaxGradOp::verify() {
  return verifyAxis(*this, getAxis(), rtt(getOutput()).getRank());
}

LogicalResult LayerNormGradOp::verify() {
  auto x = rtt(getInput());
  if (failed(verifyAxis(*this, getAxis(), x.getRank())))
    return failure();
  if (rtt(getGrad()) != x || rtt(getGradInput()) != x)
    return emitOpError("grad and grad_input must have the input's type");
  auto norm = x.getShape().drop_front(getAxis());
  if (rtt(getScale()).getShape() != norm)
    return emitOpError("scale must have the normalised dims' shape ")
           << shapeStr(norm);
  if (rtt(getGradScale()) != rtt(getScale()) ||
      rtt(getGradBias()) != rtt(getScale()))
    return emitOpError("grad_scale and grad_bias must have the scale's type");
  return success();
}

LogicalResult RmsNormGradOp::verify() {
  auto x = rtt(getInput());
  if (x.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  if (rtt(getGrad()) != x || rtt(getGradInput()) != x)
    return emitOpError("grad and grad_input must have the input's type");
  auto s = rtt(getScale()).getShape();
  if (s.size() != 1 || s[0] != x.getShape().back())
    return emitOpError("scale must have shape [") << x.getShape().back() << "]";
  if (rtt(getGradScale()) != rtt(getScale()))
    return emitOpError("grad_scale must have the scale's type");
  return success();
}

LogicalResult AttentionGradOp::verify() {
  auto q = rtt(getQ()).getShape(), k = rtt(getK()).getShape(),
       v = rtt(getV()).getShape();
  if (q.size() != 4 || k.size() != 4 || v.size() != 4)
    return emitOpError("q, k and v must be 4-D [B, H, S, D]");
  if (k[0] != q[0] || v[0] != q[0] || k[1] != v[1] || k[2] != v[2] ||
      k[3] != q[3] || v[3] != q[3])
    return emitOpError("q, k and v shapes do not form an attention");
  if (k[1] == 0 || q[1] % k[1] != 0)
    return emitOpError("query heads (")
           << q[1] << ") are not a multiple of kv heads (" << k[1] << ")";
  if (rtt(getOut()) != rtt(getQ()) || rtt(getGrad()) != rtt(getQ()))
    return emitOpError("out and grad must have q's type");
  if (failed(verifyLse(*this, getLse(), q)))
    return failure();
  if (getMask()) {
    SmallVector<int64_t> scores = {q[0], q[1], q[2], k[2]};
    if (!broadcastsTo(rtt(getMask()).getShape(), scores))
      return emitOpError("mask does not broadcast to the scores ")
             << shapeStr(scores);
  }
  if (rtt(getGradQ()) != rtt(getQ()) || rtt(getGradK()) != rtt(getK()) ||
      rtt(getGradV()) != rtt(getV()))
    return emitOpError("grad_q, grad_k and grad_v must have the types of q, "
                       "k and v");
  return success();
}

LogicalResult EmbeddingGradOp::verify() {
  auto ids = rtt(getIds()).getShape(), dy = rtt(getGrad()).getShape();
  auto t = rtt(getResult()).getShape();
  if (t.size() != 2)
    return emitOpError("result must be a 2-D table");
  SmallVector<int64_t> want(ids);
  want.push_back(t[1]);
  if (dy != ArrayRef<int64_t>(want))
    return emitOpError("grad shape should be ") << shapeStr(want);
  if (rtt(getGrad()).getElementType() != rtt(getResult()).getElementType())
    return emitOpError("grad and result element types differ");
  return success();
}

LogicalResult LabelPickOp::verify() {
  auto l = rtt(getLogits()).getShape(), y = rtt(getLabels()).getShape();
  if (l.size() != 2 || y.size() != 1 || y[0] != l[0])
    return emitOpError("needs logits [N, V] and labels [N]");
  if (rtt(getResult()).getShape() != y ||
      rtt(getResult()).getElementType() != rtt(getLogits()).getElementType())
    return emitOpError("result must be [") << y[0] << "] of the logits' type";
  return success();
}

LogicalResult LabelPickGradOp::verify() {
  auto y = rtt(getLabels()).getShape(), dy = rtt(getGrad()).getShape();
  auto out = rtt(getResult()).getShape();
  if (y.size() != 1 || dy != y || out.size() != 2 || out[0] != y[0])
    return emitOpError("needs labels [N], grad [N] and a result [N, V]");
  if (rtt(getResult()).getElementType() != rtt(getGrad()).getElementType())
    return emitOpError("grad and result element types differ");
  return success();
}

//===----------------------------------------------------------------------===//
// Further ONNX ops on run-time values.
//===----------------------------------------------------------------------===//

LogicalResult FloorOp::verify() {
  if (!isa<FloatType>(rtt(getInput()).getElementType()))
    return emitOpError("needs a float tensor");
  return success();
}

LogicalResult ModOp::verify() {
  if (failed(verifyBinary(*this, false)))
    return failure();
  // The runtime's mod takes the divisor's sign only for integers; ONNX
  // requires fmod = 1 for floats.
  if (!getFmod() && !isa<IntegerType>(rtt(getLhs()).getElementType()))
    return emitOpError("fmod = false needs integer operands");
  return success();
}

LogicalResult ReduceMinOp::verify() {
  return verifyReduce(*this, getAxes(), getKeepdims());
}
LogicalResult ReduceProdOp::verify() {
  return verifyReduce(*this, getAxes(), getKeepdims());
}

LogicalResult CumSumOp::verify() {
  return verifyAxis(*this, getAxis(), rtt(getInput()).getRank());
}

LogicalResult RangeOp::verify() {
  Type e = rtt(getResult()).getElementType();
  for (Value v : {getStart(), getLimit(), getDelta()})
    if (rtt(v).getRank() != 0 || rtt(v).getElementType() != e)
      return emitOpError(
          "start, limit and delta must be rank-0 of the result's type");
  if (rtt(getResult()).getRank() != 1)
    return emitOpError("result must be rank 1");
  return success();
}

LogicalResult GatherNdOp::verify() {
  auto d = rtt(getData()).getShape(), ix = rtt(getIndices()).getShape();
  int64_t b = getBatchDims(), r = d.size(), q = ix.size();
  if (q < 1 || b < 0 || b >= std::min(q, r))
    return emitOpError("batch_dims ") << b << " out of range";
  int64_t depth = ix.back();
  if (depth < 1 || depth > r - b)
    return emitOpError("index depth ")
           << depth << " does not fit data " << shapeStr(d);
  for (int64_t k = 0; k < b; ++k)
    if (d[k] != ix[k])
      return emitOpError("batch dims of data and indices differ");
  SmallVector<int64_t> out(ix.begin(), ix.end() - 1);
  out.append(d.begin() + b + depth, d.end());
  if (ArrayRef<int64_t>(out) != rtt(getResult()).getShape())
    return emitOpError("result shape should be ") << shapeStr(out);
  return success();
}

LogicalResult GatherElementsOp::verify() {
  auto d = rtt(getData()).getShape(), ix = rtt(getIndices()).getShape();
  if (failed(verifyAxis(*this, getAxis(), d.size())))
    return failure();
  if (ix.size() != d.size())
    return emitOpError("indices must have the data's rank");
  for (size_t k = 0; k < d.size(); ++k)
    if (int64_t(k) != getAxis() && ix[k] > d[k])
      return emitOpError("indices exceed the data off the axis");
  if (ix != rtt(getResult()).getShape())
    return emitOpError("result must have the indices' shape");
  return success();
}

LogicalResult TileOp::verify() {
  auto x = rtt(getInput()).getShape(), out = rtt(getResult()).getShape();
  auto reps = getRepeats();
  if (reps.size() != x.size() || out.size() != x.size())
    return emitOpError("needs one repeat per dim");
  for (size_t k = 0; k < x.size(); ++k)
    if (reps[k] < 0 || out[k] != x[k] * reps[k])
      return emitOpError("result ") << shapeStr(out) << " is not "
                                    << shapeStr(x) << " tiled by the repeats";
  return success();
}

#define GET_OP_CLASSES
#include "dialects/graph/GraphOps.cpp.inc"
