//===- RecogniseRotary.cpp - zg-recognise-rotary --------------------------===//
//
// x * cos + rotate_half(x) * sin -> zg.rotary(x, cos, sin), where
// rotate_half(x) = concat(-x[..., h:], x[..., :h]) over the last dim's two
// halves (Hugging Face's apply_rotary_pos_emb, as the exporters spell it:
// two slices or a split, a neg and a concat). The halves must be the halves
// of the very tensor multiplied by cos: a partial rotary, whose halves are
// slices of a wider tensor than the rotated part, stays as it is.
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISEROTARY
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
using namespace zplan::transforms;
namespace zg = zplan::graph;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The x of `v = concat(-x[..., h:], x[..., :h])` over the last axis, where
/// 2h is x's whole last dim; null otherwise.
Value matchRotateHalf(Value v) {
  auto cat = v.getDefiningOp<zg::ConcatOp>();
  int64_t rank = rtt(v).getRank();
  if (!cat || rank == 0 || cat.getInputs().size() != 2 ||
      int64_t(cat.getAxis()) != rank - 1)
    return Value();
  auto neg = cat.getInputs()[0].getDefiningOp<zg::NegOp>();
  if (!neg)
    return Value();
  auto hi = matchLastDimPart(neg.getInput());
  auto lo = matchLastDimPart(cat.getInputs()[1]);
  if (!hi || !lo || hi->base != lo->base || hi->base.getType() != v.getType())
    return Value();
  int64_t d = rtt(v).getShape().back();
  if (d % 2 != 0 || lo->start != 0 || lo->size != d / 2 ||
      hi->start != d / 2 || hi->size != d / 2)
    return Value();
  return hi->base;
}

/// Whether `table` can be a rotary table of x: float, one angle per element
/// of x's last dim, broadcast to x over the other dims.
bool isTableFor(Value table, Value x) {
  auto t = rtt(table).getShape(), xs = rtt(x).getShape();
  return isa<FloatType>(rtt(table).getElementType()) && !t.empty() &&
         t.back() == xs.back() && zg::broadcastsTo(t, xs);
}

/// add(mul(x, cos), mul(rotate_half(x), sin)), each product in either order.
struct RotaryPattern : OpRewritePattern<zg::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::AddOp op,
                                PatternRewriter &rewriter) const override {
    if (!isa<FloatType>(op.getType().getElementType()))
      return failure();
    Value x, cos, sin;
    auto terms = matchEitherOrder(op, [&](Value direct, Value rotated) {
      auto mc = direct.getDefiningOp<zg::MulOp>();
      auto ms = rotated.getDefiningOp<zg::MulOp>();
      if (!mc || !ms || mc.getType() != op.getType() ||
          ms.getType() != op.getType())
        return false;
      auto sinSide = matchEitherOrder(ms, [&](Value r, Value s) {
        Value base = matchRotateHalf(r);
        return base && base.getType() == op.getType() && isTableFor(s, base);
      });
      if (!sinSide)
        return false;
      Value base = matchRotateHalf(sinSide->first);
      auto cosSide = matchEitherOrder(mc, [&](Value a, Value c) {
        return a == base && isTableFor(c, base);
      });
      if (!cosSide || rtt(cosSide->second) != rtt(sinSide->second))
        return false;
      x = base;
      cos = cosSide->second;
      sin = sinSide->second;
      return true;
    });
    if (!terms)
      return failure();
    rewriter.replaceOpWithNewOp<zg::RotaryOp>(op, op.getType(), x, cos, sin,
                                              /*inverse=*/false);
    return success();
  }
};

struct RecogniseRotaryPass
    : transforms::impl::RecogniseRotaryBase<RecogniseRotaryPass> {
  void runOnOperation() override {
    if (failed(
            recognise<zg::RotaryOp, RotaryPattern>(getOperation(), numRotary)))
      return signalPassFailure();
  }
};

} // namespace
