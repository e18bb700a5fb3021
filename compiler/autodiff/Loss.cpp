//===- Loss.cpp - losses of the training step -----------------------------===//
//
// The causal language-model loss as a composition of zg ops. For row n of the
// flattened logits x and its label y:
//
//   m = max_v x[n, v]                       (reduce_max; not differentiated)
//   lse = log(sum_v exp(x[n, v] - m))       (sub, exp, reduce_sum, log)
//   loss_n = lse - (x[n, y] - m)            (label_pick of the shifted row)
//   loss = sum_n w_n loss_n, w_n = [y != ignore] / count
//
//===----------------------------------------------------------------------===//

#include "compiler/autodiff/Loss.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
namespace zg = zplan::graph;

namespace zplan::autodiff {

namespace {

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elt) {
  return RankedTensorType::get(shape, elt);
}

Value scalar(OpBuilder &b, Location loc, Type elt, double v) {
  auto type = tensorOf({}, elt);
  Attribute a = isa<FloatType>(elt) ? Attribute(b.getFloatAttr(elt, v))
                                    : Attribute(b.getIntegerAttr(elt, v));
  return zg::ConstantOp::create(b, loc, type, DenseElementsAttr::get(type, a));
}

} // namespace

Loss buildCausalLmLoss(OpBuilder &b, Location loc, Value logits, Value ids,
                       int64_t ignoreIndex) {
  auto lt = cast<RankedTensorType>(logits.getType());
  auto it = cast<RankedTensorType>(ids.getType());
  int64_t batch = lt.getDimSize(0), seq = lt.getDimSize(1),
          vocab = lt.getDimSize(2), rows = batch * seq;
  Type f = lt.getElementType(), i64 = b.getI64Type(), i1 = b.getI1Type();
  Loss loss;

  // Labels: ids shifted left by one, the freed last column set to ignore.
  if (!it.getElementType().isInteger(64))
    ids = zg::CastOp::create(b, loc, tensorOf(it.getShape(), i64), ids);
  Value labels;
  Value pad = zg::ExpandOp::create(b, loc, tensorOf({batch, 1}, i64),
                                   scalar(b, loc, i64, ignoreIndex));
  if (seq > 1) {
    Value shifted = zg::SliceOp::create(
        b, loc, tensorOf({batch, seq - 1}, i64), ids,
        ArrayRef<int64_t>{0, 1}, ArrayRef<int64_t>{1, 1});
    labels = zg::ConcatOp::create(b, loc, tensorOf({batch, seq}, i64),
                                  ValueRange{shifted, pad}, 1);
  } else {
    labels = pad;
  }
  labels = zg::ReshapeOp::create(b, loc, tensorOf({rows}, i64), labels);

  Value x = zg::ReshapeOp::create(b, loc, tensorOf({rows, vocab}, f), logits);
  auto maxOp = zg::ReduceMaxOp::create(b, loc, tensorOf({rows, 1}, f), x,
                                       ArrayRef<int64_t>{1}, true);
  loss.stopGradient.insert(maxOp);
  Value shiftedLogits =
      zg::SubOp::create(b, loc, tensorOf({rows, vocab}, f), x, maxOp);
  Value e = zg::ExpOp::create(b, loc, shiftedLogits.getType(), shiftedLogits);
  Value sum = zg::ReduceSumOp::create(b, loc, tensorOf({rows}, f), e,
                                      ArrayRef<int64_t>{1}, false);
  Value lse = zg::LogOp::create(b, loc, sum.getType(), sum);
  Value picked = zg::LabelPickOp::create(b, loc, tensorOf({rows}, f),
                                         shiftedLogits, labels, ignoreIndex);
  Value perRow = zg::SubOp::create(b, loc, tensorOf({rows}, f), lse, picked);

  // Weights: 1 / count for scored rows, 0 for ignored ones.
  int64_t count = batch * std::max<int64_t>(seq - 1, 0);
  Value ignored =
      zg::EqualOp::create(b, loc, tensorOf({rows}, i1), labels,
                          scalar(b, loc, i64, ignoreIndex));
  Value weights = zg::WhereOp::create(
      b, loc, tensorOf({rows}, f), ignored, scalar(b, loc, f, 0.0),
      scalar(b, loc, f, count ? 1.0 / double(count) : 0.0));
  Value weighted =
      zg::MulOp::create(b, loc, tensorOf({rows}, f), perRow, weights);
  loss.value = zg::ReduceSumOp::create(b, loc, tensorOf({}, f), weighted,
                                       ArrayRef<int64_t>{0}, false);
  loss.perRow = perRow;
  loss.weights = weights;
  return loss;
}

} // namespace zplan::autodiff
