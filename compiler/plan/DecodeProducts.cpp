//===- DecodeProducts.cpp - --zplan-decode-products -----------------------===//
//
// A decode step's products have one row per sequence. Each is then a short
// stream over its weight, and at batch 1 the step is bound by the fixed cost
// of its kernels, not by the weight bytes (docs/generation.md, session 6).
// This pass makes these decisions, which the runtime then only executes:
//
// - fuse: the linears of one input become one step (zg.linear_gated for the
//   gated MLP's gate / up and their activation product, zg.linear_multi for
//   the other groups: q / k / v), so that one few-row kernel launch reads all
//   their weights;
// - choose-kernel: which of the few-row kernel and cuBLASLt runs each other
//   few-row product, by a rule on its rows and weight bytes, written into the
//   plan (zd.kernel), so that two runs of one plan run the same kernels and
//   round alike (the backend used to time both at run time);
// - stream-kernel: which few-row kernel (zk/few_rows_kernels.h) runs the
//   fused products and those choose-kernel marked: the streaming kernel
//   wherever it holds the product, the cluster kernels elsewhere (the
//   backend used to pick the streaming kernel by an environment variable);
// - rope-kv: a decode layer's rotary of q and k and its two cache writes
//   become one zg.rope_kv_write (one kernel instead of four);
// - norm: the residual add and RMS norm before a few-row product go into the
//   product (zg.norm_products), whose kernel normalises the rows itself;
// - decode-layer: a whole llama-style decoder layer, as the others leave it,
//   becomes one zg.decode_layer (one persistent GPU kernel a layer).
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/OpInfo.h"
#include "compiler/plan/Passes.h"

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include "zk/cuda_workspace.h"
#include "zk/few_rows_kernels.h"

#include <map>
#include <tuple>

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANDECODEPRODUCTS
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

namespace zg = zplan::graph;

/// The most rows a few-row kernel takes (zk::cuda::kSkinnyMaxRows).
constexpr int64_t kMaxRows = 16;
/// K x (rows rounded up to a power of two) that the few-row kernel's [K, N]
/// path holds: x's slice of each of at most 8 cluster blocks fits 48 KiB of
/// floats (kernels/cuda/skinny_gemm.cu, kn_splits).
constexpr int64_t kMaxRowsTimesK = 8 * 48 * 1024 / 4;

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Rows of a product with input `x` (all dims but the last), or -1.
int64_t rowsOf(Value x) {
  auto t = rtt(x);
  if (!t.hasStaticShape() || t.getRank() < 1 || t.getShape().back() == 0)
    return -1;
  return t.getNumElements() / t.getShape().back();
}

/// Whether the few-row kernel runs a fused product of input `x` (at most
/// `maxRows` rows).
bool fewRowsFit(Value x, int64_t maxRows = kMaxRows) {
  int64_t rows = rowsOf(x);
  if (rows < 1 || rows > std::min(maxRows, kMaxRows))
    return false;
  int64_t rounded = 1;
  while (rounded < rows)
    rounded *= 2;
  return rtt(x).getShape().back() * rounded <= kMaxRowsTimesK;
}

/// A linear that can join a fused step of at most `maxRows` rows: no bias, a
/// 2-D weight, float types, not already assigned a kernel.
bool fusable(zg::LinearOp lin, int64_t maxRows) {
  return !lin.getBias() && rtt(lin.getWeight()).getRank() == 2 &&
         isa<FloatType>(rtt(lin.getInput()).getElementType()) &&
         rtt(lin.getWeight()).getElementType() ==
             rtt(lin.getInput()).getElementType() &&
         rtt(lin.getResult()).getElementType() ==
             rtt(lin.getInput()).getElementType() &&
         !lin->hasAttr("zd.kernel") && fewRowsFit(lin.getInput(), maxRows);
}

bool sameProduct(zg::LinearOp a, zg::LinearOp b) {
  return a.getInput() == b.getInput() && a.getTransW() == b.getTransW() &&
         a.getAlpha() == b.getAlpha() &&
         rtt(a.getWeight()).getElementType() ==
             rtt(b.getWeight()).getElementType();
}

struct DecodeProductsPass
    : impl::ZplanDecodeProductsBase<DecodeProductsPass> {
  using ZplanDecodeProductsBase::ZplanDecodeProductsBase;

  void runOnOperation() override {
    std::optional<PlanDType> floatDType = parseFloatDType(dtype);
    if (!floatDType) {
      getOperation().emitError("--zplan-decode-products: unknown dtype '")
          << dtype << "'";
      return signalPassFailure();
    }
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(getOperation());
    if (failed(funcs))
      return signalPassFailure();
    for (func::FuncOp func : *funcs) {
      if (func.getSymName() != "decode")
        continue;
      Block &body = func.getBody().front();
      if (fuse) {
        if (gatedMaxRows > 0)
          fuseGatedPairs(body);
        if (multiMaxRows > 0)
          fuseGroups(body, *floatDType);
      }
      if (ropeKv)
        fuseRopeKvWrites(body);
      if (chooseKernel)
        choose(body, *floatDType);
      if (streamKernel)
        chooseStream(body);
      if (normMaxRows > 0)
        fuseNorms(body);
      if (decodeLayer)
        fuseLayers(func, body, *floatDType);
    }
  }

  /// Puts `fused` after `last` (the last former product in block order) and
  /// moves after it, in order, every op between `first` and `last` that
  /// reads a former result (directly or through a moved op) or releases one
  /// of the fused op's operands: the fused step computes the results later
  /// than the first former product did.
  void place(Operation *fused, Operation *first, Operation *last,
             ArrayRef<Operation *> former) {
    fused->moveAfter(last);
    llvm::DenseSet<Operation *> tainted(former.begin(), former.end());
    llvm::DenseSet<Value> operands(fused->getOperands().begin(),
                                   fused->getOperands().end());
    SmallVector<Operation *> moved;
    for (Operation *op = first->getNextNode(); op && op != fused;
         op = op->getNextNode()) {
      if (tainted.contains(op))
        continue;
      bool reads = llvm::any_of(op->getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return def && tainted.contains(def);
      });
      bool releases = isa<dist::ReleaseOp>(op) &&
                      llvm::any_of(op->getOperands(), [&](Value v) {
                        return operands.contains(v);
                      });
      if (reads || releases) {
        tainted.insert(op);
        moved.push_back(op);
      }
    }
    Operation *after = fused;
    for (Operation *op : moved) {
      op->moveAfter(after);
      after = op;
    }
  }

  /// The linear that defines `v` when only one op reads it and it can join a
  /// zg.linear_gated.
  zg::LinearOp soleLinear(Value v) {
    auto lin = v.getDefiningOp<zg::LinearOp>();
    if (!lin || !v.hasOneUse() || !fusable(lin, gatedMaxRows))
      return nullptr;
    return lin;
  }

  /// gated(linear(x, Wg), linear(x, Wu)), or mul(act(linear(x, Wg)),
  /// linear(x, Wu)) in either order: one zg.linear_gated.
  void fuseGatedPairs(Block &body) {
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    llvm::DenseSet<Operation *> erased;
    for (Operation *op : ops) {
      if (erased.contains(op))
        continue;
      Value gate, up;
      std::string act;
      Operation *actOp = nullptr;
      if (auto g = dyn_cast<zg::GatedOp>(op)) {
        gate = g.getGate();
        up = g.getUp();
        act = g.getAct().str();
      } else if (auto mul = dyn_cast<zg::MulOp>(op)) {
        for (int side = 0; side < 2 && !actOp; ++side) {
          Value a = side ? mul.getRhs() : mul.getLhs();
          Value other = side ? mul.getLhs() : mul.getRhs();
          Operation *def = a.getDefiningOp();
          if (!def || !a.hasOneUse())
            continue;
          if (isa<zg::SiluOp>(def))
            act = "silu";
          else if (auto gelu = dyn_cast<zg::GeluOp>(def))
            act = gelu.getApproximate() == "tanh" ? "gelu_tanh" : "gelu_erf";
          else
            continue;
          actOp = def;
          gate = def->getOperand(0);
          up = other;
        }
        if (!actOp)
          continue;
        // The unfused mul broadcasts; the fused step has equal shapes.
        if (actOp->getResult(0).getType() != op->getResult(0).getType() ||
            up.getType() != op->getResult(0).getType())
          continue;
      } else {
        continue;
      }
      zg::LinearOp g = soleLinear(gate), u = soleLinear(up);
      if (!g || !u || g == u || !sameProduct(g, u) ||
          rtt(g.getWeight()).getShape() != rtt(u.getWeight()).getShape() ||
          g.getResult().getType() != op->getResult(0).getType())
        continue;
      OpBuilder b(op);
      auto fused = zg::LinearGatedOp::create(
          b,
          FusedLoc::get(b.getContext(), {g.getLoc(), u.getLoc(), op->getLoc()}),
          op->getResult(0).getType(), g.getInput(), g.getWeight(),
          u.getWeight(), b.getStringAttr(act), g.getTransWAttr(),
          g.getAlphaAttr());
      // The fused op replaces the gate, the up and the combination: it sits
      // where the combination was, after both products and their operands.
      // Releases of the weights between the first product and the
      // combination move after it.
      Operation *first = g->isBeforeInBlock(u) ? g : u;
      SmallVector<Operation *> former = {g, u, op};
      if (actOp)
        former.push_back(actOp);
      place(fused, first, op, former);
      op->getResult(0).replaceAllUsesWith(fused.getResult());
      for (Operation *dead : {op, actOp, g.getOperation(), u.getOperation()})
        if (dead) {
          erased.insert(dead);
          dead->erase();
        }
      ++numGated;
    }
  }

  /// Linears of one input (same trans_w, alpha, element type and K): one
  /// zg.linear_multi per group of two to four, in block order.
  void fuseGroups(Block &body, PlanDType floatDType) {
    SmallVector<SmallVector<zg::LinearOp>> groups;
    for (Operation &op : body.without_terminator()) {
      auto lin = dyn_cast<zg::LinearOp>(op);
      if (!lin || !fusable(lin, multiMaxRows))
        continue;
      auto it = llvm::find_if(groups, [&](SmallVector<zg::LinearOp> &g) {
        return g.size() < 4 && sameProduct(g.front(), lin);
      });
      if (it == groups.end())
        groups.push_back({lin});
      else
        it->push_back(lin);
    }
    for (auto &group : groups) {
      if (group.size() < 2)
        continue;
      // A cap on the weight bytes one launch reads: on the GPU one few-row
      // launch saves the fixed costs of the products it replaces but streams
      // large weights more slowly than cuBLASLt does (docs/generation.md).
      int64_t bytes = 0;
      for (zg::LinearOp lin : group) {
        std::optional<PlanDType> wt =
            planDTypeOfValue(lin.getWeight(), floatDType);
        bytes += rtt(lin.getWeight()).getNumElements() *
                 (wt ? dtypeBytes(*wt) : 4);
      }
      if (multiMaxBytes > 0 && bytes > multiMaxBytes)
        continue;
      zg::LinearOp first = group.front(), last = group.back();
      SmallVector<Value> weights;
      SmallVector<Type> types;
      SmallVector<Location> locs;
      for (zg::LinearOp lin : group) {
        weights.push_back(lin.getWeight());
        types.push_back(lin.getResult().getType());
        locs.push_back(lin.getLoc());
      }
      OpBuilder b(last);
      auto fused = zg::LinearMultiOp::create(
          b, FusedLoc::get(b.getContext(), locs), types, first.getInput(),
          weights, first.getTransWAttr(), first.getAlphaAttr());
      SmallVector<Operation *> former(group.begin(), group.end());
      place(fused, first, last, former);
      for (auto [lin, result] : llvm::zip(group, fused.getResults())) {
        lin.getResult().replaceAllUsesWith(result);
        lin->erase();
      }
      ++numMulti;
    }
  }

  /// A forward, head-major zg.rotary whose result only `user` reads.
  zg::RotaryOp soleRotary(Value v, Operation *user) {
    auto r = v.getDefiningOp<zg::RotaryOp>();
    if (!r || r.getInverse() || r.getSeqMajor() || !v.hasOneUse() ||
        *v.getUsers().begin() != user)
      return nullptr;
    return r;
  }

  /// The zg.kv_write of `cache` at `pos` before `before`, if exactly one.
  zg::KvWriteOp soleWrite(Block &body, Value cache, Value pos,
                          Operation *before) {
    zg::KvWriteOp found;
    for (Operation *user : cache.getUsers()) {
      auto w = dyn_cast<zg::KvWriteOp>(user);
      if (!w || w->getBlock() != &body)
        continue;
      if (found || w.getCache() != cache || w.getPos() != pos ||
          !w->isBeforeInBlock(before))
        return nullptr;
      found = w;
    }
    return found;
  }

  /// Each zg.cached_attention of the decode step whose q is a rotary and
  /// whose caches were just written, the k cache with a rotary of k under the
  /// same tables: the two rotaries and the two kv_writes become one
  /// zg.rope_kv_write right before the attention (the kernel count of a
  /// decode layer is most of its time at batch 1, docs/generation.md). Every
  /// operand is defined before the first of the four ops, so the fused op may
  /// sit at the attention; nothing between them reads the caches, which only
  /// the attention and the writes touch.
  void fuseRopeKvWrites(Block &body) {
    SmallVector<zg::CachedAttentionOp> attns;
    for (Operation &op : body.without_terminator())
      if (auto a = dyn_cast<zg::CachedAttentionOp>(op))
        attns.push_back(a);
    for (zg::CachedAttentionOp a : attns) {
      zg::RotaryOp rq = soleRotary(a.getQ(), a);
      if (!rq)
        continue;
      zg::KvWriteOp wk = soleWrite(body, a.getK(), a.getPos(), a);
      zg::KvWriteOp wv = soleWrite(body, a.getV(), a.getPos(), a);
      if (!wk || !wv || a.getK() == a.getV())
        continue;
      zg::RotaryOp rk = soleRotary(wk.getValue(), wk);
      if (!rk || rk.getCos() != rq.getCos() || rk.getSin() != rq.getSin())
        continue;
      // Only what the op's verifier accepts: tables [1 or B, 1, 1 or S, D].
      auto t = rtt(rq.getCos()).getShape();
      auto q = rtt(rq.getInput()).getShape();
      if (t.size() != 4 || q.size() != 4 || (t[0] != 1 && t[0] != q[0]) ||
          t[1] != 1 || (t[2] != 1 && t[2] != q[2]) ||
          rtt(rk.getInput()).getShape() != rtt(wv.getValue()).getShape())
        continue;
      OpBuilder b(a);
      auto fused = zg::RopeKvWriteOp::create(
          b,
          FusedLoc::get(b.getContext(), {rq.getLoc(), rk.getLoc(),
                                         wk.getLoc(), wv.getLoc()}),
          rq.getResult().getType(), rq.getInput(), rk.getInput(),
          wv.getValue(), rq.getCos(), rq.getSin(), wk.getCache(),
          wv.getCache(), a.getPos());
      a.getQMutable().assign(fused.getResult());
      wk->erase();
      wv->erase();
      rk->erase();
      rq->erase();
      ++numRopeKv;
      if (!ropeAttention)
        continue;
      // The fused write and the attention as one step: the attention is the
      // rotated q's only reader (soleRotary), and nothing sits between them.
      OpBuilder ab(a);
      auto whole = zg::RopeAttentionOp::create(
          ab, FusedLoc::get(ab.getContext(), {fused.getLoc(), a.getLoc()}),
          a.getResult().getType(), fused.getQ(), fused.getK(), fused.getV(),
          fused.getCos(), fused.getSin(), fused.getKCache(),
          fused.getVCache(), fused.getPos(), a.getScaleAttr());
      a.getResult().replaceAllUsesWith(whole.getResult());
      a->erase();
      fused->erase();
      ++numRopeAttention;
    }
  }

  /// Whether the streaming few-row kernel (kernels/cuda/skinny_gemm.cu) runs
  /// a norm_products of input `x` and these weights: at most normMaxRows (and
  /// 4) rows, x's rows as floats within 64 KiB, W [K, N] with N a multiple of
  /// 8 (whole 16-byte pieces in every dtype).
  bool normFits(Value x, ValueRange weights, bool transW) {
    int64_t rows = rowsOf(x);
    if (transW || rows < 1 || rows > std::min<int64_t>(normMaxRows, 4))
      return false;
    int64_t rounded = 1;
    while (rounded < rows)
      rounded *= 2;
    if (rtt(x).getShape().back() * rounded * 4 > 64 * 1024)
      return false;
    return llvm::all_of(weights, [](Value w) {
      return rtt(w).getRank() == 2 && rtt(w).getShape()[1] % 8 == 0;
    });
  }

  /// The residual add and RMS norm before a few-row product (zg.residual_norm
  /// of kind rms, or zg.add then zg.rms_norm), whose normed rows only that
  /// product reads, become one zg.norm_products with it: the few-row kernel
  /// normalises the rows in each block, and the norm's kernel goes. The
  /// products: a zg.linear_multi, a zg.linear_gated, or a zg.linear marked
  /// for the few-row kernel.
  void fuseNorms(Block &body) {
    SmallVector<Operation *> products;
    for (Operation &op : body.without_terminator()) {
      auto lin = dyn_cast<zg::LinearOp>(op);
      if (isa<zg::LinearMultiOp, zg::LinearGatedOp>(op) ||
          (lin && !lin.getBias() && lin->hasAttr("zd.kernel")))
        products.push_back(&op);
    }
    for (Operation *product : products) {
      Value normed = product->getOperand(0);
      Operation *normOp = normed.getDefiningOp();
      if (!normOp || !normed.hasOneUse())
        continue;
      Value x, r, scale, sum;
      double eps = 0;
      Operation *addOp = nullptr;
      if (auto rn = dyn_cast<zg::ResidualNormOp>(normOp)) {
        if (rn.getKind() != "rms" || rn.getBias())
          continue;
        x = rn.getInput();
        r = rn.getResidual();
        scale = rn.getScale();
        eps = rn.getEpsilon().convertToDouble();
        sum = rn.getSum();
      } else if (auto rms = dyn_cast<zg::RmsNormOp>(normOp)) {
        auto add = rms.getInput().getDefiningOp<zg::AddOp>();
        if (!add || !rms.getScale())
          continue;
        x = add.getLhs();
        r = add.getRhs();
        scale = rms.getScale();
        eps = rms.getEpsilon().convertToDouble();
        sum = add.getResult();
        addOp = add;
      } else {
        continue;
      }
      // Equal shapes (no broadcasting add) and a [K] scale of one element
      // type.
      if (x.getType() != normed.getType() || r.getType() != x.getType() ||
          sum.getType() != x.getType() ||
          rtt(scale).getShape() != ArrayRef<int64_t>{rtt(x).getShape().back()} ||
          rtt(scale).getElementType() != rtt(x).getElementType())
        continue;
      SmallVector<Value> weights;
      std::string act;
      bool transW = false;
      double alpha = 1.0;
      if (auto m = dyn_cast<zg::LinearMultiOp>(product)) {
        weights.append(m.getWeights().begin(), m.getWeights().end());
        transW = m.getTransW();
        alpha = m.getAlpha().convertToDouble();
      } else if (auto g = dyn_cast<zg::LinearGatedOp>(product)) {
        weights = {g.getGateWeight(), g.getUpWeight()};
        act = g.getAct().str();
        transW = g.getTransW();
        alpha = g.getAlpha().convertToDouble();
      } else {
        auto l = cast<zg::LinearOp>(product);
        weights = {l.getWeight()};
        transW = l.getTransW();
        alpha = l.getAlpha().convertToDouble();
      }
      if (!normFits(x, weights, transW))
        continue;
      SmallVector<Type> types = {sum.getType()};
      for (Type t : product->getResultTypes())
        types.push_back(t);
      OpBuilder b(product);
      SmallVector<Location> locs = {normOp->getLoc(), product->getLoc()};
      if (addOp)
        locs.insert(locs.begin(), addOp->getLoc());
      auto fused = zg::NormProductsOp::create(
          b, FusedLoc::get(b.getContext(), locs), types, x, r, scale, weights,
          b.getStringAttr(act), b.getF64FloatAttr(eps),
          b.getF64FloatAttr(alpha));
      Operation *first = addOp ? addOp : normOp;
      SmallVector<Operation *> former = {normOp, product};
      if (addOp)
        former.push_back(addOp);
      place(fused, first, product, former);
      sum.replaceAllUsesWith(fused.getSum());
      for (auto [old, now] :
           llvm::zip(product->getResults(), fused.getProducts()))
        old.replaceAllUsesWith(now);
      product->erase();
      normOp->erase();
      if (addOp)
        addOp->erase();
      ++numNorm;
    }
  }

  /// `v` followed through zg.reshape ops (views) that are each the only
  /// reader of what they reshape; `views` receives them.
  static Value viewsDown(Value v, SmallVectorImpl<Operation *> &views) {
    while (v.hasOneUse()) {
      auto r = dyn_cast<zg::ReshapeOp>(*v.getUsers().begin());
      if (!r)
        break;
      views.push_back(r);
      v = r.getResult();
    }
    return v;
  }

  /// `v` followed back through zg.reshape ops whose results have one reader;
  /// `views` receives them.
  static Value viewsUp(Value v, SmallVectorImpl<Operation *> &views) {
    while (auto r = v.getDefiningOp<zg::ReshapeOp>()) {
      if (!v.hasOneUse())
        break;
      views.push_back(r);
      v = r.getInput();
    }
    return v;
  }

  /// A bias-free zg.linear of W [K, N], alpha 1, that is `v`'s only reader.
  static zg::LinearOp plainLinearOf(Value v) {
    if (!v.hasOneUse())
      return nullptr;
    auto l = dyn_cast<zg::LinearOp>(*v.getUsers().begin());
    if (!l || l.getInput() != v || l.getBias() || l.getTransW() ||
        l.getAlpha().convertToDouble() != 1.0 ||
        rtt(l.getWeight()).getRank() != 2)
      return nullptr;
    return l;
  }

  /// Whether the persistent decode layer kernel (kernels/cuda/decode_layer.cu,
  /// zk/cuda_decode.h) takes a layer of these shapes in `floatDType`.
  static bool layerKernelTakes(int64_t rows, int64_t d, int64_t hq,
                               int64_t hkv, int64_t dh, int64_t f,
                               PlanDType floatDType) {
    int64_t es = dtypeBytes(floatDType);
    return rows >= 1 && rows <= 4 && (dh == 64 || dh == 128) && hkv >= 1 &&
           hq % hkv == 0 && hq / hkv <= 16 && d % 8 == 0 && f % 8 == 0 &&
           rows * std::max({d, f, hq * dh}) * es <= 64 * 1024;
  }

  /// A few-row product of a layer with the RMS norm (and the residual add)
  /// before it, in any form the other fusions leave: a zg.norm_products, or a
  /// zg.linear_multi / zg.linear_gated of zg.rms_norm (of zg.add) or of
  /// zg.residual_norm's normed rows.
  struct Normed {
    Value x, residual, scale, sum; // residual null: no add (sum is x)
    double eps = 0;
    Operation *product = nullptr;
    SmallVector<Operation *> norm; // the norm's own ops, readers first
    SmallVector<Value> weights, results;
    StringRef act;
  };

  static std::optional<Normed> normedOf(Operation *product) {
    Normed n;
    n.product = product;
    if (auto np = dyn_cast<zg::NormProductsOp>(product)) {
      if (np.getAlpha().convertToDouble() != 1.0)
        return std::nullopt;
      n.x = np.getInput();
      n.residual = np.getResidual();
      n.scale = np.getScale();
      n.sum = np.getSum();
      n.eps = np.getEpsilon().convertToDouble();
      n.weights.append(np.getWeights().begin(), np.getWeights().end());
      n.results.append(np.getProducts().begin(), np.getProducts().end());
      n.act = np.getAct();
      return n;
    }
    Value normed;
    if (auto lm = dyn_cast<zg::LinearMultiOp>(product)) {
      if (lm.getTransW() || lm.getAlpha().convertToDouble() != 1.0)
        return std::nullopt;
      normed = lm.getInput();
      n.weights.append(lm.getWeights().begin(), lm.getWeights().end());
      n.results.append(lm.getResults().begin(), lm.getResults().end());
    } else if (auto lg = dyn_cast<zg::LinearGatedOp>(product)) {
      if (lg.getTransW() || lg.getAlpha().convertToDouble() != 1.0)
        return std::nullopt;
      normed = lg.getInput();
      n.weights = {lg.getGateWeight(), lg.getUpWeight()};
      n.results = {lg.getResult()};
      n.act = lg.getAct();
    } else {
      return std::nullopt;
    }
    if (!normed.hasOneUse())
      return std::nullopt;
    if (auto rn = normed.getDefiningOp<zg::ResidualNormOp>()) {
      if (rn.getKind() != "rms" || rn.getBias())
        return std::nullopt;
      n.x = rn.getInput();
      n.residual = rn.getResidual();
      n.scale = rn.getScale();
      n.sum = rn.getSum();
      n.eps = rn.getEpsilon().convertToDouble();
      n.norm = {rn};
      return n;
    }
    auto rms = normed.getDefiningOp<zg::RmsNormOp>();
    if (!rms || !rms.getScale())
      return std::nullopt;
    n.scale = rms.getScale();
    n.eps = rms.getEpsilon().convertToDouble();
    n.norm = {rms};
    n.sum = rms.getInput();
    if (auto add = n.sum.getDefiningOp<zg::AddOp>()) {
      n.x = add.getLhs();
      n.residual = add.getRhs();
      n.norm.push_back(add);
    } else {
      n.x = n.sum;
    }
    return n;
  }

  /// The gated product after the residual add that `o` (the o product's
  /// result) feeds, in any form normedOf takes.
  static std::optional<Normed> gatedAfter(Value o) {
    if (!o.hasOneUse())
      return std::nullopt;
    Operation *user = *o.getUsers().begin();
    Value normed;
    if (isa<zg::NormProductsOp>(user))
      return normedOf(user);
    if (auto rn = dyn_cast<zg::ResidualNormOp>(user)) {
      normed = rn.getNormed();
    } else if (auto add = dyn_cast<zg::AddOp>(user)) {
      for (Operation *u : add.getResult().getUsers())
        if (auto rms = dyn_cast<zg::RmsNormOp>(u))
          normed = rms.getResult();
    }
    if (!normed || !normed.hasOneUse() ||
        !isa<zg::LinearGatedOp>(*normed.getUsers().begin()))
      return std::nullopt;
    return normedOf(*normed.getUsers().begin());
  }

  /// Each decoder layer of the decode step, in the forms the other fusions
  /// leave, becomes one zg.decode_layer (see the pass's description):
  ///   A  sum1 = x + r (or x) and q/k/v of its RMS norm;
  ///   B  zg.rope_kv_write + zg.cached_attention (or zg.rope_attention) of
  ///      q/k/v through views;
  ///   C  the o zg.linear of the attention's output through views;
  ///   D  residual_out = sum1 + o and the gated product of its RMS norm;
  ///   E  the down zg.linear of that product.
  /// Every intermediate is read only within the chain, so the layer's values
  /// leave it only as E's result and D's sum. The fused op sits at E; its
  /// operands are all defined before their first reader in the chain.
  void fuseLayers(func::FuncOp func, Block &body, PlanDType floatDType) {
    SmallVector<Operation *> attns;
    for (Operation &op : body.without_terminator())
      if (isa<zg::CachedAttentionOp, zg::RopeAttentionOp>(op))
        attns.push_back(&op);
    uint64_t syncWords = 0;
    zg::StateOp syncOp;
    for (Operation *attn : attns) {
      // B: the rotary step's operands and the attention's output.
      Operation *rope = attn;
      double scale = 0;
      if (auto cached = dyn_cast<zg::CachedAttentionOp>(attn)) {
        auto rk = cached.getQ().getDefiningOp<zg::RopeKvWriteOp>();
        if (!rk || !cached.getQ().hasOneUse() ||
            cached.getK() != rk.getKCache() ||
            cached.getV() != rk.getVCache() || cached.getPos() != rk.getPos())
          continue;
        rope = rk;
        scale = cached.getScale().convertToDouble();
      } else {
        scale = cast<zg::RopeAttentionOp>(attn).getScale().convertToDouble();
      }
      Value q4 = rope->getOperand(0), k4 = rope->getOperand(1),
            v4 = rope->getOperand(2), cos = rope->getOperand(3),
            sin = rope->getOperand(4), kc = rope->getOperand(5),
            vc = rope->getOperand(6), pos = rope->getOperand(7);
      auto cs = rtt(kc).getShape();
      if (rtt(q4).getShape().size() != 4 || rtt(q4).getShape()[2] != 1 ||
          cs.size() != 4 || rtt(cos).getRank() != 4 ||
          rtt(cos).getShape()[2] != 1)
        continue;
      SmallVector<Operation *> upViews;
      // A: the three products, through views.
      Value qv = viewsUp(q4, upViews), kv = viewsUp(k4, upViews),
            vv = viewsUp(v4, upViews);
      Operation *prodA = qv.getDefiningOp();
      if (!prodA || kv.getDefiningOp() != prodA ||
          vv.getDefiningOp() != prodA || !qv.hasOneUse() ||
          !kv.hasOneUse() || !vv.hasOneUse())
        continue;
      std::optional<Normed> a = normedOf(prodA);
      if (!a || !a->act.empty() || a->results.size() != 3)
        continue;
      auto weightOf = [&](Value product) {
        return a->weights[llvm::find(a->results, product) - a->results.begin()];
      };
      Value wq = weightOf(qv), wk = weightOf(kv), wv = weightOf(vv);
      // C: the o product of the attention's output, through views.
      SmallVector<Operation *> downViews;
      zg::LinearOp oLin = plainLinearOf(viewsDown(attn->getResult(0), downViews));
      if (!oLin)
        continue;
      // D: residual_out = sum1 + o, then the gated product of its norm.
      Value o = oLin.getResult(), sum1 = a->sum;
      std::optional<Normed> g = gatedAfter(o);
      if (!g || g->act.empty() || g->results.size() != 1 || !g->residual ||
          g->eps != a->eps ||
          !((g->x == sum1 && g->residual == o) ||
            (g->x == o && g->residual == sum1)))
        continue;
      // E: the down product.
      zg::LinearOp down = plainLinearOf(g->results[0]);
      if (!down)
        continue;
      // sum1 leaves the layer only through the fused op: its readers are
      // A's norm and D's add.
      Operation *addD = g->norm.empty() ? g->product : g->norm.back();
      if (llvm::any_of(sum1.getUsers(), [&](Operation *u) {
            return u != addD && u != prodA && !llvm::is_contained(a->norm, u);
          }))
        continue;
      // Shapes and types (the op's verifier), and the kernel's limits.
      Value x = a->x, residual = a->residual;
      auto xs = rtt(x).getShape();
      int64_t d = xs.back(), dh = cs[3], hkv = cs[1], rows = rowsOf(x);
      if (xs.size() < 2 || xs.size() > 3 || (xs.size() == 3 && xs[1] != 1) ||
          xs[0] != cs[0] || dh == 0 || rtt(wq).getShape()[1] % dh != 0)
        continue;
      int64_t hq = rtt(wq).getShape()[1] / dh,
              f = rtt(g->weights[0]).getShape()[1];
      if (rtt(down.getResult()) != rtt(x) || rtt(g->sum) != rtt(x) ||
          (residual && rtt(residual) != rtt(x)) ||
          rtt(oLin.getWeight()).getShape() != ArrayRef<int64_t>{hq * dh, d} ||
          rtt(down.getWeight()).getShape() != ArrayRef<int64_t>{f, d})
        continue;
      if (decodeLayerKernel &&
          !layerKernelTakes(rows, d, hq, hkv, dh, f, floatDType))
        continue;
      // The barrier's counts: one state for every layer (they run one after
      // another and each leaves the counts zero), as many words as the
      // largest layer needs.
      zk::cuda::workspace::DecodeLayerDims dims{
          rows, d, hq, hkv, dh, f, int64_t(dtypeBytes(floatDType))};
      syncWords = std::max<uint64_t>(
          syncWords, zk::cuda::workspace::decode_layer_sync_words(dims));
      if (!syncOp) {
        OpBuilder sb(&body, body.begin());
        syncOp = zg::StateOp::create(
            sb, func.getLoc(),
            RankedTensorType::get({int64_t(syncWords)}, sb.getI32Type()),
            sb.getStringAttr("decode_layer.sync"), sb.getStringAttr("scalar"),
            sb.getStringAttr(""), sb.getStringAttr("zeros"));
      }
      // Every op of the layer, readers before what they read.
      SmallVector<Operation *> dead = {down, g->product};
      dead.append(g->norm.begin(), g->norm.end());
      dead.push_back(oLin);
      dead.append(downViews.rbegin(), downViews.rend());
      dead.push_back(attn);
      if (rope != attn)
        dead.push_back(rope);
      dead.append(upViews.begin(), upViews.end());
      dead.push_back(prodA);
      dead.append(a->norm.begin(), a->norm.end());
      SmallVector<Location> locs;
      for (Operation *op : llvm::reverse(dead))
        locs.push_back(op->getLoc());
      OpBuilder b(down);
      auto fused = zg::DecodeLayerOp::create(
          b, FusedLoc::get(b.getContext(), locs), rtt(x), rtt(x), x, kc, vc,
          syncOp.getResult(), pos, cos, sin, a->scale, wq, wk, wv,
          oLin.getWeight(), g->scale, g->weights[0], g->weights[1],
          down.getWeight(), residual, b.getF64FloatAttr(a->eps),
          b.getF64FloatAttr(scale), b.getStringAttr(g->act));
      place(fused, dead.back(), down, dead);
      down.getResult().replaceAllUsesWith(fused.getResult());
      g->sum.replaceAllUsesWith(fused.getResidualOut());
      for (Operation *op : dead)
        op->erase();
      ++numDecodeLayer;
    }
    if (syncOp)
      syncOp.getResult().setType(
          RankedTensorType::get({int64_t(syncWords)}, OpBuilder(syncOp).getI32Type()));
  }

  /// Whether the streaming few-row kernel holds a product of input `x`
  /// against these weights (zk/few_rows_kernels.h's rule, shared with the
  /// plan verifier and the kernel).
  static bool streamHolds(Value x, ValueRange weights, bool transW) {
    int64_t rows = rowsOf(x);
    SmallVector<int64_t> widths;
    for (Value w : weights) {
      auto t = rtt(w);
      if (t.getRank() != 2 || !t.hasStaticShape())
        return false;
      widths.push_back(t.getShape()[transW ? 0 : 1]);
    }
    return zk::cuda::stream_holds(transW, rows, rtt(x).getShape().back(),
                                  widths.data(), int(widths.size()));
  }

  /// zd.kernel = "few_rows_stream" on the fused products (zg.linear_multi,
  /// zg.linear_gated) and the products choose-kernel marked, where the
  /// streaming kernel holds them; the others keep the cluster kernels (the
  /// fused ones without a zd.kernel, the marked ones "few_rows").
  void chooseStream(Block &body) {
    const char *stream = zk::cuda::few_rows_name(zk::cuda::FewRows::stream);
    for (Operation &op : body.without_terminator()) {
      bool held = false;
      if (auto m = dyn_cast<zg::LinearMultiOp>(op))
        held = streamHolds(m.getInput(), m.getWeights(), m.getTransW());
      else if (auto g = dyn_cast<zg::LinearGatedOp>(op))
        held = streamHolds(g.getInput(), g.getGateWeight(), g.getTransW());
      else if (auto l = dyn_cast<zg::LinearOp>(op))
        held = l->hasAttr("zd.kernel") &&
               streamHolds(l.getInput(), l.getWeight(), l.getTransW());
      else if (auto mm = dyn_cast<zg::MatmulOp>(op))
        held = mm->hasAttr("zd.kernel") &&
               streamHolds(mm.getLhs(), mm.getRhs(), mm.getTransB());
      if (!held)
        continue;
      op.setAttr("zd.kernel", StringAttr::get(op.getContext(), stream));
      ++numStream;
    }
  }

  /// zd.kernel = "few_rows" on the products of at most fewRowsMax rows whose
  /// weight holds at most fewRowsMaxBytes bytes.
  void choose(Block &body, PlanDType floatDType) {
    for (Operation &op : body.without_terminator()) {
      Value x, w;
      if (auto lin = dyn_cast<zg::LinearOp>(op)) {
        x = lin.getInput();
        w = lin.getWeight();
      } else if (auto mm = dyn_cast<zg::MatmulOp>(op)) {
        // As the backend runs it: A's batch folded into its rows against
        // one 2-D B.
        if (mm.getTransA() || rtt(mm.getRhs()).getRank() != 2 ||
            rtt(mm.getLhs()).getRank() < 2)
          continue;
        x = mm.getLhs();
        w = mm.getRhs();
      } else {
        continue;
      }
      int64_t rows = rowsOf(x);
      if (rows < 1 || rows > std::min<int64_t>(fewRowsMax, kMaxRows) ||
          !rtt(w).hasStaticShape() || !fewRowsFit(x))
        continue;
      std::optional<PlanDType> wt = planDTypeOfValue(w, floatDType);
      if (!wt)
        continue;
      int64_t bytes = rtt(w).getNumElements() * dtypeBytes(*wt);
      // The streaming kernel reads large weights faster than cuBLASLt at
      // one row (docs/generation.md, session 9), the cluster kernels did
      // not (session 5): a larger cap where the streaming kernel runs it.
      bool transW = isa<zg::LinearOp>(op) ? cast<zg::LinearOp>(op).getTransW()
                                          : cast<zg::MatmulOp>(op).getTransB();
      int64_t cap = fewRowsMaxBytes;
      if (streamKernel && streamHolds(x, w, transW))
        cap = std::max<int64_t>(cap, fewRowsStreamMaxBytes);
      if (bytes > cap)
        continue;
      op.setAttr("zd.kernel", StringAttr::get(op.getContext(), "few_rows"));
      ++numFewRows;
    }
  }
};

} // namespace
} // namespace zplan::plan
