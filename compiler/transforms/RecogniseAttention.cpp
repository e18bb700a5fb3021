//===- RecogniseAttention.cpp - zg-recognise-attention --------------------===//
//
// softmax(scale * q k^T + mask) v -> zg.attention. The root is the second
// matmul; the match walks up through the optional NaN guard, the softmax,
// the mask, the scale factors and the transposed key, and looks through the
// grouped-query repetition of K and V.
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISEATTENTION
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
using namespace zplan::transforms;
namespace zg = zplan::graph;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Looks through reshape(expand(reshape(kv))) that repeats each of the Hkv
/// heads n times: kv [B, Hkv, T, D] -> [B, Hkv, 1, T, D] -> [B, Hkv, n, T, D]
/// -> [B, Hkv * n, T, D]. Returns kv, or v itself.
Value stripRepeatKv(Value v) {
  auto r2 = v.getDefiningOp<zg::ReshapeOp>();
  if (!r2)
    return v;
  auto e = r2.getInput().getDefiningOp<zg::ExpandOp>();
  if (!e)
    return v;
  auto r1 = e.getInput().getDefiningOp<zg::ReshapeOp>();
  if (!r1)
    return v;
  Value kv = r1.getInput();
  auto s = shapeOf(kv), m = shapeOf(r1), x = shapeOf(e), o = shapeOf(r2);
  if (s.size() != 4 || m.size() != 5 || x.size() != 5 || o.size() != 4)
    return v;
  if (m != ArrayRef<int64_t>{s[0], s[1], 1, s[2], s[3]} || x[0] != s[0] ||
      x[1] != s[1] || x[3] != s[2] || x[4] != s[3] ||
      o != ArrayRef<int64_t>{s[0], s[1] * x[2], s[2], s[3]})
    return v;
  return kv;
}

/// For kT = k with its two last dims swapped, returns k [B, H, T, D]:
/// transpose(k, [0, 1, 3, 2]), or the exporters' batched form
/// reshape(transpose(reshape(k -> [B * H, T, D]), [0, 2, 1]) -> [B, H, D, T]).
Value transposedKey(Value kt) {
  if (auto tr = kt.getDefiningOp<zg::TransposeOp>()) {
    if (tr.getPerm() == ArrayRef<int64_t>{0, 1, 3, 2} &&
        shapeOf(tr.getInput()).size() == 4)
      return tr.getInput();
    return nullptr;
  }
  auto r2 = kt.getDefiningOp<zg::ReshapeOp>();
  if (!r2)
    return nullptr;
  auto tr = r2.getInput().getDefiningOp<zg::TransposeOp>();
  if (!tr || tr.getPerm() != ArrayRef<int64_t>{0, 2, 1})
    return nullptr;
  auto r1 = tr.getInput().getDefiningOp<zg::ReshapeOp>();
  if (!r1)
    return nullptr;
  Value k = r1.getInput();
  auto s = shapeOf(k);
  if (s.size() != 4 ||
      shapeOf(r1) != ArrayRef<int64_t>{s[0] * s[1], s[2], s[3]} ||
      shapeOf(r2) != ArrayRef<int64_t>{s[0], s[1], s[3], s[2]})
    return nullptr;
  return k;
}

/// Peels scalar multiplications and divisions off v; multiplies them into
/// `scale`.
Value peelScale(Value v, double &scale) {
  while (true) {
    if (auto m = v.getDefiningOp<zg::MulOp>()) {
      auto f = matchEitherOrder(m, [&](Value x, Value c) {
        return getSplatValue(c) && x.getType() == m.getType();
      });
      if (f) {
        scale *= *getSplatValue(f->second);
        v = f->first;
        continue;
      }
    }
    if (auto d = v.getDefiningOp<zg::DivOp>()) {
      auto s = getSplatValue(d.getRhs());
      if (s && *s != 0 && d.getLhs().getType() == d.getType()) {
        scale /= *s;
        v = d.getLhs();
        continue;
      }
    }
    return v;
  }
}

/// Whether `keep` is a constant boolean causal mask over scores [.., S, T]:
/// key j is kept for query i exactly when j <= i + (T - S), in every leading
/// slice (GPT-2's `where(bias[.., :S, :T], scores, min)` of transformers 4,
/// its tril buffer sliced to the length and folded by the importer).
bool isCausalKeep(Value keep, int64_t S, int64_t T) {
  while (auto e = keep.getDefiningOp<zg::ExpandOp>())
    keep = e.getInput();
  auto c = keep.getDefiningOp<zg::ConstantOp>();
  auto a = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : nullptr;
  auto shape = shapeOf(keep);
  if (!a || !a.getElementType().isInteger(1) || shape.size() < 2 ||
      shape[shape.size() - 2] != S || shape.back() != T || S > T)
    return false;
  int64_t k = 0;
  for (bool kept : a.getValues<bool>()) {
    int64_t i = (k / T) % S, j = k % T;
    if (kept != (j <= i + (T - S)))
      return false;
    ++k;
  }
  return true;
}

struct AttentionPattern : OpRewritePattern<zg::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::MatmulOp op,
                                PatternRewriter &rewriter) const override {
    Value p = op.getLhs();
    if (shapeOf(p).size() != 4 || shapeOf(op.getRhs()).size() != 4)
      return failure();
    // where(is_nan(p), 0, p): the exporters' guard for fully masked rows.
    if (auto w = p.getDefiningOp<zg::WhereOp>()) {
      auto nan = w.getCondition().getDefiningOp<zg::IsNanOp>();
      if (nan && nan.getInput() == w.getRhs() && isSplatNear(w.getLhs(), 0.0) &&
          w.getRhs().getType() == w.getType())
        p = w.getRhs();
    }
    auto sm = p.getDefiningOp<zg::SoftmaxOp>();
    if (!sm || sm.getAxis() != 3)
      return failure();
    Value scores = sm.getInput();

    // The mask. Nothing is created until the whole match has succeeded: a
    // pattern that fails must leave the IR untouched.
    Value mask, keepCond;
    double maskFill = 0.0;
    bool causal = false;
    double scale = 1.0;
    Value qk;
    auto tryCore = [&](Value s) -> Value {
      double sc = 1.0;
      Value core = peelScale(s, sc);
      if (!core.getDefiningOp<zg::MatmulOp>())
        return nullptr;
      scale = sc;
      return core;
    };
    // Boolean mask: where(keep, scores, -big).
    auto tryKeep = [&](Value s) -> bool {
      auto w = s.getDefiningOp<zg::WhereOp>();
      if (!w)
        return false;
      auto neg = getSplatValue(w.getRhs());
      if (!neg || *neg > -1e4 || w.getLhs().getType() != w.getType())
        return false;
      Value core = tryCore(w.getLhs());
      if (!core)
        return false;
      qk = core;
      keepCond = w.getCondition();
      maskFill = *neg;
      return true;
    };
    if (auto add = scores.getDefiningOp<zg::AddOp>()) {
      // An additive mask, added to the scores or to the boolean-masked
      // scores (transformers 4's GPT-2: where(causal, scores, min) + the
      // padding mask).
      auto m = matchEitherOrder(add, [&](Value s, Value) {
        return s.getType() == add.getType() &&
               ((qk = tryCore(s)) || tryKeep(s));
      });
      if (m)
        mask = m->second;
    } else if (!tryKeep(scores)) {
      qk = tryCore(scores);
    }
    if (!qk)
      return failure();
    auto mm = qk.getDefiningOp<zg::MatmulOp>();
    double qs = 1.0, ks = 1.0;
    Value q = peelScale(mm.getLhs(), qs);
    Value kt = peelScale(mm.getRhs(), ks);
    scale *= qs * ks;
    Value k, btHD;
    SmallVector<int64_t> ksh;
    if (shapeOf(q).size() != 4)
      return failure();
    if (Value direct = transposedKey(kt)) {
      k = stripRepeatKv(direct);
      ksh.assign(shapeOf(k).begin(), shapeOf(k).end());
    } else if (auto tr = kt.getDefiningOp<zg::TransposeOp>();
               tr && tr.getPerm() == ArrayRef<int64_t>{0, 2, 3, 1}) {
      // kT came straight from [B, T, H, D]: k is its [0, 2, 1, 3] view.
      btHD = tr.getInput();
      auto xs = shapeOf(btHD);
      ksh = {xs[0], xs[2], xs[1], xs[3]};
    } else {
      return failure();
    }
    bool fromBTHD = bool(btHD);
    Value v = stripRepeatKv(op.getRhs());
    auto qsh = shapeOf(q), vsh = shapeOf(v);
    if (!fromBTHD && ksh[1] != vsh[1]) {
      // The repetition was stripped from one side only: keep both repeated.
      k = transposedKey(kt);
      ksh.assign(shapeOf(k).begin(), shapeOf(k).end());
      v = op.getRhs();
      vsh = shapeOf(v);
    }
    auto outShape = shapeOf(op.getResult());
    if (ksh[0] != qsh[0] || vsh[0] != qsh[0] || ksh[1] != vsh[1] ||
        ksh[2] != vsh[2] || ksh[1] == 0 || qsh[1] % ksh[1] != 0 ||
        ksh[3] != qsh[3] || vsh[3] != ksh[3] ||
        outShape != ArrayRef<int64_t>{qsh[0], qsh[1], qsh[2], vsh[3]})
      return failure();
    SmallVector<int64_t> scoreShape = {qsh[0], qsh[1], qsh[2], ksh[2]};
    // A constant causal keep is the causal flag (it then needs no mask of
    // its own).
    if (keepCond && isCausalKeep(keepCond, qsh[2], ksh[2])) {
      causal = true;
      keepCond = nullptr;
    }
    if (mask) {
      if (mask.getDefiningOp<zg::CausalMaskOp>()) {
        auto ms = shapeOf(mask);
        if (ms[ms.size() - 2] != qsh[2] || ms.back() != ksh[2] || keepCond)
          return failure();
        causal = true;
        mask = nullptr;
      } else if (isSplatNear(mask, 0.0, 0)) {
        mask = nullptr;
      } else if (!graph::broadcastsTo(shapeOf(mask), scoreShape)) {
        return failure();
      }
    }
    if (keepCond && !graph::broadcastsTo(shapeOf(keepCond), scoreShape))
      return failure();

    // The match holds: build.
    Location loc = op.getLoc();
    Type elt = cast<RankedTensorType>(op.getType()).getElementType();
    if (fromBTHD)
      k = zg::TransposeOp::create(rewriter, loc,
                                  RankedTensorType::get(ksh, elt), btHD,
                                  rewriter.getDenseI64ArrayAttr({0, 2, 1, 3}));
    if (keepCond) {
      auto st = RankedTensorType::get({}, elt);
      Value zero = createSplat(rewriter, loc, st, 0.0);
      Value big = createSplat(rewriter, loc, st, maskFill);
      Value kept = zg::WhereOp::create(
          rewriter, loc, RankedTensorType::get(shapeOf(keepCond), elt),
          keepCond, zero, big);
      if (mask) {
        // Both: the boolean mask as an additive one, plus the other.
        SmallVector<int64_t> both =
            *graph::broadcastShapes(shapeOf(kept), shapeOf(mask));
        mask = zg::AddOp::create(rewriter, loc,
                                 RankedTensorType::get(both, elt), kept, mask);
      } else {
        mask = kept;
      }
    }
    SmallVector<Value> operands = {q, k, v};
    if (mask)
      operands.push_back(mask);
    rewriter.replaceOpWithNewOp<zg::AttentionOp>(
        op, TypeRange{op.getType()}, operands,
        ArrayRef<NamedAttribute>{
            rewriter.getNamedAttr("scale", rewriter.getF64FloatAttr(scale)),
            rewriter.getNamedAttr("causal", rewriter.getBoolAttr(causal))});
    return success();
  }
};

struct RecogniseAttentionPass
    : transforms::impl::RecogniseAttentionBase<RecogniseAttentionPass> {
  void runOnOperation() override {
    if (failed(recognise<zg::AttentionOp, AttentionPattern>(getOperation(),
                                                            numAttention)))
      return signalPassFailure();
    // The runtime has no kernel for a causal mask on its own: one that no
    // attention absorbed means the attention core was not recognised.
    getOperation().walk([&](zg::CausalMaskOp cm) {
      if (!cm->use_empty())
        cm.emitWarning("causal mask is not consumed by a recognised "
                       "attention; the runtime cannot execute zg.causal_mask");
    });
  }
};

} // namespace
