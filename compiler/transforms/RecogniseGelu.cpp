//===- RecogniseGelu.cpp - zg-recognise-gelu ------------------------------===//
//
// The erf and tanh forms of GELU -> zg.gelu. The root is the outermost
// multiplication; its product tree must hold x, the bracket (1 + erf(...)) or
// (1 + tanh(...)) and scalar factors multiplying to 0.5.
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Matchers.h"
#include "compiler/transforms/Passes.h"

#include <cmath>

namespace zplan::transforms {
#define GEN_PASS_DEF_RECOGNISEGELU
#include "compiler/transforms/Passes.h.inc"
} // namespace zplan::transforms

using namespace mlir;
using namespace zplan;
using namespace zplan::transforms;
namespace zg = zplan::graph;

namespace {

/// For `1 + f(u)` (either order) returns f(u)'s defining op.
template <typename OpTy> OpTy onePlus(Value v) {
  auto add = v.getDefiningOp<zg::AddOp>();
  if (!add)
    return nullptr;
  auto m = matchCommutative<OpTy>(
      add, [](OpTy, Value one) { return isSplatNear(one, 1.0); },
      /*first=*/1);
  return m ? m->first : nullptr;
}

/// Returns true when v is x times a scalar near `c` (or x divided by 1 / c).
bool isScaled(Value v, Value x, double c) {
  if (auto div = v.getDefiningOp<zg::DivOp>())
    return div.getLhs() == x && isSplatNear(div.getRhs(), 1.0 / c);
  SmallVector<Value> f;
  double s = 1.0;
  collectFactors(v, f, s);
  return f.size() == 1 && f[0] == x && near(s, c);
}

/// Returns true when v is x^3 (pow(x, 3), x * x * x, (x * x) * x or
/// x * pow(x, 2)) times a scalar near `c`.
bool isCubeScaled(Value v, Value x, double c) {
  SmallVector<Value> f;
  double s = 1.0;
  collectFactors(v, f, s);
  if (!near(s, c))
    return false;
  int power = 0;
  for (Value factor : f) {
    if (factor == x) {
      ++power;
    } else if (auto p = factor.getDefiningOp<zg::PowOp>()) {
      auto e = getSplatValue(p.getRhs());
      if (p.getLhs() != x || !e || (*e != 2.0 && *e != 3.0))
        return false;
      power += int(*e);
    } else {
      return false;
    }
  }
  return power == 3;
}

struct GeluPattern : OpRewritePattern<zg::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(zg::MulOp op,
                                PatternRewriter &rewriter) const override {
    SmallVector<Value> f;
    double s = 1.0;
    collectFactors(op.getResult(), f, s);
    if (f.size() != 2 || !near(s, 0.5))
      return failure();
    for (int k = 0; k < 2; ++k) {
      Value x = f[k], bracket = f[1 - k];
      if (x.getType() != op.getType())
        continue;
      if (auto erf = onePlus<zg::ErfOp>(bracket)) {
        if (isScaled(erf.getInput(), x, 1.0 / std::sqrt(2.0))) {
          rewriter.replaceOpWithNewOp<zg::GeluOp>(
              op, op.getType(), x, rewriter.getStringAttr("none"));
          return success();
        }
      }
      if (auto tanh = onePlus<zg::TanhOp>(bracket)) {
        // tanh(c1 * (x + c2 * x^3)), the scalar possibly on either side.
        SmallVector<Value> g;
        double c1 = 1.0;
        collectFactors(tanh.getInput(), g, c1);
        if (g.size() != 1 || !near(c1, std::sqrt(2.0 / M_PI)))
          continue;
        auto add = g[0].getDefiningOp<zg::AddOp>();
        if (add && matchEitherOrder(add, [&](Value a, Value cube) {
              return a == x && isCubeScaled(cube, x, 0.044715);
            })) {
          rewriter.replaceOpWithNewOp<zg::GeluOp>(
              op, op.getType(), x, rewriter.getStringAttr("tanh"));
          return success();
        }
      }
    }
    return failure();
  }
};

struct RecogniseGeluPass
    : transforms::impl::RecogniseGeluBase<RecogniseGeluPass> {
  void runOnOperation() override {
    if (failed(recognise<zg::GeluOp, GeluPattern>(getOperation(), numGelu)))
      return signalPassFailure();
  }
};

} // namespace
