//===- GraphTpRules.cpp - tensor-parallel rules of the zg ops -------------===//
//
// The TpShardingOpInterface implementation of every zg op with a rule of its
// own (the elementwise and whole rules come with their traits). Each rule
// reads how the --zplan-tp-propagate walk has split the op's operands so far
// and says how it needs them and how its results come out.
//
// A rule never asks an activation to become split when its producer gives it
// whole: that would need a rank-dependent slice, which the SPMD plan has no
// op for. Only weights and constants (sliced at load time through
// `zd.pieces`) can be asked for a split; when an activation would have to
// be, the op falls back to whole operands, and partition gathers the split
// ones. In a training step a trained parameter has one sharding (its first
// consumer's, TpRuleContext::paramShard), and any whole value may be asked
// for split (partition slices it locally, TpRuleContext::canProvide).
//
// The Megatron choice itself is made here too: a linear whose input is whole
// becomes column-parallel, split by attention heads or hidden features, and
// the linear after it row-parallel; the LM head and the token embedding are
// vocabulary-parallel.
//
//===----------------------------------------------------------------------===//

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace zplan::graph;

#include "dialects/graph/TpShardingOpInterface.cpp.inc"

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }
int64_t rankOf(Value v) { return rtt(v).getRank(); }

/// Weights and constants: loaded per rank, so any slice of them is free.
bool isSliceable(Value v) {
  Operation *def = v.getDefiningOp();
  return def && isa<WeightOp, ConstantOp>(def);
}

bool isElementwise(Operation *op) { return op->hasTrait<TpElementwise>(); }

/// The operand's sharding, made whole when it splits one of `wholeDims`
/// (the dims an op needs whole: a softmax's axis, a norm's normalised dims).
TpShard passExcept(TpRuleContext &ctx, Value in, ArrayRef<int64_t> wholeDims) {
  TpShard e = ctx.eff(in);
  if (e.dim >= 0 && llvm::is_contained(wholeDims, e.dim))
    e = TpShard::replicated(e.rank);
  return e;
}

/// A rule with the given operand shardings and one result sharding.
TpRule ruleOf(ArrayRef<TpShard> operands, ArrayRef<TpShard> results) {
  TpRule r;
  r.operands.assign(operands.begin(), operands.end());
  r.results.assign(results.begin(), results.end());
  return r;
}

/// The persistent value an op writes in place, when that is a parameter or
/// state of a training step (zg.adamw's parameter, zg.assign's and
/// zg.accumulate's target). The write keeps its target's one sharding:
/// every operand of the target's shape follows it (AdamW's gradient and
/// moments), scalars stay whole.
TpRule writeRule(Operation *op, TpRuleContext &ctx) {
  if (!ctx.training())
    return wholeTpRule(op);
  Value target = op->getOperand(0);
  TpShard t = ctx.eff(target);
  if (std::optional<TpShard> p = ctx.paramShard(target))
    t = *p;
  TpRule r;
  for (Value v : op->getOperands())
    r.operands.push_back(rtt(v).getShape() == rtt(target).getShape()
                             ? t
                             : TpShard::replicated(rankOf(v)));
  return r;
}

/// Whether `v` reaches the function's result (or, in a training step, the
/// loss's label pick; in a generation program the row pick) through ops that
/// keep its last (vocabulary) dimension: the LM head's logits.
bool reachesReturn(Value v) {
  SmallVector<Value> work = {v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (Operation *user : cur.getUsers()) {
      if (user->hasTrait<OpTrait::ReturnLike>() ||
          isa<LabelPickOp, TakeRowsOp>(user))
        return true;
      if (!seen.insert(user).second)
        continue;
      bool keepsLast = user->getNumResults() == 1 &&
                       rtt(user->getResult(0)).getShape().back() ==
                           rtt(cur).getShape().back();
      if (keepsLast && (isElementwise(user) || isa<ReshapeOp>(user)))
        work.push_back(user->getResult(0));
    }
  }
  return false;
}

/// Which attention operand a projection feeds: 0 for queries, 1 or 2 for
/// keys/values, -1 when no zg.attention is reached (before the next linear).
int attentionRole(Value v) {
  SmallVector<Value> work = {v};
  llvm::SmallPtrSet<Operation *, 32> seen;
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (OpOperand &use : cur.getUses()) {
      Operation *user = use.getOwner();
      if (isa<AttentionOp>(user))
        return use.getOperandNumber() <= 2 ? use.getOperandNumber() : -1;
      // Generation: keys and values reach the attention through the cache.
      if (isa<KvWriteOp>(user))
        return use.getOperandNumber() == 1 ? 1 : -1;
      if (isa<CachedAttentionOp>(user))
        return use.getOperandNumber() == 0 ? 0 : -1;
      if (isa<LinearOp>(user) || user->hasTrait<OpTrait::ReturnLike>() ||
          !seen.insert(user).second)
        continue;
      if (seen.size() > 64)
        return -1;
      for (Value r : user->getResults())
        work.push_back(r);
    }
  }
  return -1;
}

/// How a column-parallel linear splits its output features.
struct ColumnPlan {
  int64_t blocks;
  SmallVector<int64_t> segments;
  bool vocab = false;
};

// Decides how a linear whose input is whole splits its output columns. The
// output is followed through elementwise ops (bias adds), through a split of
// the last dimension (fused QKV: one segment per part) and to the reshape
// that cuts the last dimension into [heads, head_dim]: the head count of each
// part decides its split.
FailureOr<ColumnPlan> planColumn(Operation *op, Value result, Value weight,
                                 int64_t tp) {
  int64_t n = rtt(result).getShape().back();
  if (reachesReturn(result)) {
    // Vocabulary-parallel LM head: padded to a multiple of tp.
    return ColumnPlan{tp, {}, true};
  }

  // Segments along the last dimension and the head count of each (0: none).
  SmallVector<int64_t> segments;
  SmallVector<std::pair<int64_t, Operation *>> heads; // (H, reshape)
  SmallVector<int> roles;
  auto findHeads = [&](Value v) {
    SmallVector<Value> work = {v};
    llvm::SmallPtrSet<Operation *, 16> seen;
    int64_t last = rtt(v).getShape().back();
    while (!work.empty()) {
      Value cur = work.pop_back_val();
      for (Operation *user : cur.getUsers()) {
        if (!seen.insert(user).second || user->getNumResults() != 1)
          continue;
        auto out = rtt(user->getResult(0)).getShape();
        auto in = rtt(cur).getShape();
        if (isa<ReshapeOp>(user)) {
          if (out.size() >= 2 && out.size() == in.size() + 1 &&
              out.back() * out[out.size() - 2] == last &&
              out.drop_back(2) == in.drop_back(1)) {
            Value r = user->getResult(0);
            return std::make_tuple(out[out.size() - 2], user, attentionRole(r));
          }
          if (!out.empty() && out.back() == last)
            work.push_back(user->getResult(0));
          continue;
        }
        if (isElementwise(user) && !out.empty() && out.back() == last)
          work.push_back(user->getResult(0));
      }
    }
    return std::make_tuple(int64_t(0), (Operation *)nullptr, -1);
  };

  SplitOp split;
  for (Operation *user : result.getUsers()) {
    if (auto s = dyn_cast<SplitOp>(user))
      if (s.getAxis() == rankOf(result) - 1)
        split = s;
    // Through a bias add to the split.
    if (isElementwise(user) && user->getNumResults() == 1)
      for (Operation *u2 : user->getResult(0).getUsers())
        if (auto s = dyn_cast<SplitOp>(u2))
          if (s.getAxis() == rankOf(result) - 1)
            split = s;
  }
  if (split) {
    for (Value r : split.getResults()) {
      segments.push_back(rtt(r).getShape().back());
      auto [h, reshape, role] = findHeads(r);
      heads.push_back({h, reshape});
      roles.push_back(role);
    }
  } else {
    auto [h, reshape, role] = findHeads(result);
    heads.push_back({h, reshape});
    roles.push_back(role);
  }

  std::optional<int64_t> blocks;
  for (auto [i, hp] : llvm::enumerate(heads)) {
    auto [h, reshape] = hp;
    int64_t size = segments.empty() ? n : segments[i];
    int64_t b;
    if (h > 0) {
      if (h % tp == 0) {
        b = tp;
      } else if (roles[i] >= 1 && tp % h == 0) {
        // GQA: each K/V head is replicated on the tp / h ranks whose query
        // heads use it.
        b = h;
      } else {
        StringRef what = roles[i] >= 1 ? "key/value" : "query";
        InFlightDiagnostic diag =
            reshape->emitError("tp = ")
            << tp << " does not divide the " << h << " " << what
            << " heads (dimension " << rtt(reshape->getResult(0)).getRank() - 2
            << " of " << reshape->getResult(0).getType() << ")";
        if (roles[i] >= 1)
          diag << "; tp must divide them or be a multiple of them";
        return failure();
      }
    } else {
      if (size % tp != 0) {
        op->emitError("tp = ")
            << tp << " does not divide the hidden size " << size
            << " (output features, dimension "
            << (isa<LinearOp>(op) && cast<LinearOp>(op).getTransW() ? 0 : 1)
            << " of weight " << weight.getType() << ")";
        return failure();
      }
      b = tp;
    }
    if (blocks && *blocks != b) {
      op->emitError("fused projection mixes query heads split over tp = ")
          << tp << " with key/value heads replicated over " << tp / b
          << " ranks; unfuse the projection";
      return failure();
    }
    blocks = b;
  }
  return ColumnPlan{*blocks, segments, false};
}

/// The rule of x W (+ bias) with a 2-d weight, for zg.linear and a zg.matmul
/// by a weight: column-parallel when x is whole, row-parallel when x's
/// features are split, whole otherwise.
FailureOr<TpRule> linearRule(Operation *op, TpRuleContext &ctx, Value x,
                             Value w, Value bias, bool transW) {
  int64_t tp = ctx.tp();
  int64_t rank = rankOf(x);
  TpShard ex = ctx.eff(x);
  int64_t kDim = transW ? 1 : 0, nDim = transW ? 0 : 1;
  bool sliceable = isSliceable(w) && rankOf(w) == 2;
  auto finish = [&](TpShard xReq, TpShard wReq, TpShard bReq, TpShard res) {
    TpRule r;
    r.operands.push_back(xReq);
    r.operands.push_back(wReq);
    if (bias)
      r.operands.push_back(bReq);
    r.results.push_back(res);
    return r;
  };
  TpShard wRep = TpShard::replicated(rankOf(w));
  TpShard bRep = bias ? TpShard::replicated(rankOf(bias)) : TpShard();
  TpShard partial = TpShard::replicated(rank);
  partial.partial = true;
  if (std::optional<TpShard> sw = ctx.paramShard(w); sw && rankOf(w) == 2) {
    // A trained weight keeps the sharding its first consumer gave it: the
    // backward linear (dx = dy W^T) contracts over the dimension the forward
    // split, a row-parallel product with a partial result.
    if (sw->dim == kDim && sw->blocks == tp && ex.dim == rank - 1 &&
        ex.blocks == tp && ex.segments == sw->segments) {
      ctx.count(TpSplitKind::Row);
      return finish(ex, *sw, bRep, partial);
    }
    if (sw->dim == nDim) {
      TpShard bReq =
          bias ? TpShard::split(1, 0, sw->blocks, sw->segments) : bRep;
      if (std::optional<TpShard> sb =
              bias ? ctx.paramShard(bias) : std::nullopt)
        bReq = *sb;
      return finish(TpShard::replicated(rank), *sw, bReq,
                    TpShard::split(rank, rank - 1, sw->blocks, sw->segments));
    }
    TpShard xReq = ex.dim == rank - 1 ? TpShard::replicated(rank) : ex;
    return finish(xReq, wRep, bRep, xReq);
  }
  if (!sliceable) {
    TpShard xReq = ex.dim == rank - 1 ? TpShard::replicated(rank) : ex;
    return finish(xReq, wRep, bRep, xReq);
  }
  if (ex.dim == rank - 1 && ex.blocks == tp && ex.segments.empty()) {
    // Row-parallel: each rank multiplies its slice of the input features by
    // the matching rows; the result is a partial sum.
    ctx.count(TpSplitKind::Row);
    return finish(ex, TpShard::split(2, kDim, tp), bRep, partial);
  }
  if (ex.dim == rank - 1)
    ex = TpShard::replicated(rank);
  if (ex.dim >= 0)
    return finish(ex, wRep, bRep, ex);
  FailureOr<ColumnPlan> plan = planColumn(op, op->getResult(0), w, tp);
  if (failed(plan))
    return failure();
  ctx.count(plan->vocab ? TpSplitKind::Vocab : TpSplitKind::Column);
  return finish(ex, TpShard::split(2, nDim, plan->blocks, plan->segments),
                bias ? TpShard::split(1, 0, plan->blocks, plan->segments)
                     : TpShard(),
                TpShard::split(rank, rank - 1, plan->blocks, plan->segments));
}

/// A matmul of two activations: batch dims, rows of the left or columns of
/// the right pass their split; a split contraction gives a partial sum.
TpRule activationMatmulRule(MatmulOp op, TpRuleContext &ctx) {
  Value a = op.getLhs(), b = op.getRhs();
  int64_t ra = rankOf(a), rb = rankOf(b), rank = rankOf(op.getResult());
  if (ra < 2 || rb < 2)
    return wholeTpRule(op);
  TpShard ea = ctx.eff(a), eb = ctx.eff(b);
  // Fused segments pass through a free dimension: each rank's rows (or
  // columns) are computed from its own, whatever their order.
  if (ctx.training() && ea.dim == ra - 2 && eb.isReplicated())
    return ruleOf({ea, eb},
                  {TpShard::split(rank, rank - 2, ea.blocks, ea.segments)});
  if (ctx.training() && eb.dim == rb - 1 && ea.isReplicated())
    return ruleOf({ea, eb},
                  {TpShard::split(rank, rank - 1, eb.blocks, eb.segments)});
  if (!ea.segments.empty() || !eb.segments.empty())
    return wholeTpRule(op);
  auto sizeAt = [&](Value v, int64_t resultDim) -> int64_t {
    int64_t local = resultDim - (rank - rankOf(v));
    return local < 0 ? 1 : rtt(v).getDimSize(local);
  };
  // A batch dimension split on both (or on one, the other broadcast there).
  if (ea.dim >= 0 && ea.dim < ra - 2) {
    int64_t rd = ea.dim + rank - ra;
    TpShard wantB = sizeAt(b, rd) == 1
                        ? TpShard::replicated(rb)
                        : TpShard::split(rb, rd - (rank - rb), ea.blocks);
    if (eb == wantB || (isSliceable(b) && eb.isReplicated()) ||
        ctx.canProvide(b, wantB))
      return ruleOf({ea, wantB}, {TpShard::split(rank, rd, ea.blocks)});
    return wholeTpRule(op);
  }
  if (eb.dim >= 0 && eb.dim < rb - 2) {
    int64_t rd = eb.dim + rank - rb;
    if (ea.isReplicated() && sizeAt(a, rd) == 1)
      return ruleOf({ea, eb}, {TpShard::split(rank, rd, eb.blocks)});
    return wholeTpRule(op);
  }
  if (ea.dim == ra - 2 && eb.isReplicated())
    return ruleOf({ea, eb}, {TpShard::split(rank, rank - 2, ea.blocks)});
  if (eb.dim == rb - 1 && ea.isReplicated())
    return ruleOf({ea, eb}, {TpShard::split(rank, rank - 1, eb.blocks)});
  if (ea.dim == ra - 1 && eb.dim == rb - 2 && ea.blocks == ctx.tp() &&
      eb.blocks == ctx.tp()) {
    TpShard res = TpShard::replicated(rank);
    res.partial = true;
    return ruleOf({ea, eb}, {res});
  }
  return wholeTpRule(op);
}

/// A reduction over some axes: dims outside them keep the operand's split.
TpRule reduceRule(Operation *op, TpRuleContext &ctx) {
  auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
  bool keep = op->getAttrOfType<BoolAttr>("keepdims").getValue();
  TpShard e = passExcept(ctx, op->getOperand(0), axes);
  TpShard res = TpShard::replicated(rankOf(op->getResult(0)));
  if (e.dim >= 0) {
    int64_t d = e.dim;
    if (!keep)
      d -= llvm::count_if(axes, [&](int64_t a) { return a < e.dim; });
    res = TpShard::split(res.rank, d, e.blocks, e.segments);
  }
  return ruleOf({e}, {res});
}

/// In a training step, a reduction over the split (vocabulary) dimension:
/// each rank reduces its part, then an all_reduce (sum or max) over tp.
/// Padding (a vocabulary tp does not divide) would enter the reduction:
/// nullopt then, and the operand is gathered by the plain reduction rule.
std::optional<TpRule> vocabReduceRule(Operation *op, TpRuleContext &ctx) {
  if (!ctx.training())
    return std::nullopt;
  Value in = op->getOperand(0);
  TpShard e = ctx.eff(in);
  auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
  if (e.dim < 0 || !llvm::is_contained(axes, e.dim) || e.blocks != ctx.tp() ||
      !e.segments.empty() || rtt(in).getDimSize(e.dim) % ctx.tp() != 0)
    return std::nullopt;
  TpShard res = TpShard::replicated(rankOf(op->getResult(0)));
  res.partial = true;
  return ruleOf({e}, {res});
}

/// Heads split: queries over tp, keys/values over tp or, with fewer K/V
/// heads than ranks, one K/V head per group of ranks.
bool headsSplit(TpRuleContext &ctx, Value q, Value k, const TpShard &eq,
                const TpShard &ek, const TpShard &ev) {
  int64_t tp = ctx.tp();
  int64_t hq = rtt(q).getDimSize(1), hkv = rtt(k).getDimSize(1);
  return eq.dim == 1 && eq.blocks == tp && eq.segments.empty() && ek.dim == 1 &&
         ek.segments.empty() && ev == ek &&
         (ek.blocks == tp ||
          (ek.blocks == hkv && tp % hkv == 0 && hq % tp == 0));
}

} // namespace

TpRule zplan::graph::wholeTpRule(Operation *op) {
  TpRule r;
  for (Value v : op->getOperands())
    r.operands.push_back(TpShard::replicated(rankOf(v)));
  for (Value v : op->getResults())
    r.results.push_back(TpShard::replicated(rankOf(v)));
  return r;
}

// Operands align to the result from the right (numpy broadcasting). The
// result is split where a non-broadcast operand is; every other operand must
// be split the same way, be broadcast along that dimension, or be a weight or
// constant that can be sliced at load time.
TpRule zplan::graph::elementwiseTpRule(Operation *op, TpRuleContext &ctx,
                                       int64_t excludedDim) {
  int64_t rank = rankOf(op->getResult(0));
  std::optional<TpShard> cand;
  for (Value v : op->getOperands()) {
    TpShard e = ctx.eff(v);
    if (e.dim < 0)
      continue;
    TpShard c =
        TpShard::split(rank, e.dim + rank - e.rank, e.blocks, e.segments);
    if (cand && *cand != c)
      return wholeTpRule(op);
    cand = c;
  }
  if (!cand || cand->dim == excludedDim)
    return wholeTpRule(op);
  TpRule r;
  for (Value v : op->getOperands()) {
    TpShard e = ctx.eff(v);
    int64_t local = cand->dim - (rank - e.rank);
    if (local < 0 || rtt(v).getDimSize(local) == 1) {
      r.operands.push_back(TpShard::replicated(e.rank));
      continue;
    }
    TpShard want = TpShard::split(e.rank, local, cand->blocks, cand->segments);
    if (!ctx.canProvide(v, want))
      return wholeTpRule(op);
    r.operands.push_back(want);
  }
  r.results.assign(op->getNumResults(), *cand);
  return r;
}

// Groups are found left to right: a group ends where the running products
// of input and result dimensions meet.
int64_t zplan::graph::mapReshapeDim(ArrayRef<int64_t> in, ArrayRef<int64_t> out,
                                    int64_t d, int64_t blocks,
                                    bool hasSegments) {
  size_t i = 0, j = 0, n = in.size(), m = out.size();
  while (i < n || j < m) {
    size_t gi = i, gj = j;
    int64_t pi = 1, pj = 1;
    if (i < n)
      pi *= in[i++];
    if (j < m)
      pj *= out[j++];
    while (pi != pj) {
      if (pi < pj && i < n)
        pi *= in[i++];
      else if (pj < pi && j < m)
        pj *= out[j++];
      else
        return -1;
    }
    if ((size_t)d < gi || (size_t)d >= i)
      continue;
    size_t firstIn = gi;
    while (firstIn < i && in[firstIn] == 1)
      ++firstIn;
    size_t firstOut = gj;
    while (firstOut < j && out[firstOut] == 1)
      ++firstOut;
    if (firstIn != (size_t)d || firstOut >= j)
      return -1;
    // The same dimension size passes any split, padded or segmented.
    if (in[d] == out[firstOut] && i - gi == 1 && j - gj == 1)
      return firstOut;
    if (hasSegments || in[d] % blocks || out[firstOut] % blocks)
      return -1;
    return firstOut;
  }
  return -1;
}

//===----------------------------------------------------------------------===//
// Linear algebra and attention
//===----------------------------------------------------------------------===//

FailureOr<TpRule> LinearOp::getTpRule(TpRuleContext &ctx) {
  return linearRule(*this, ctx, getInput(), getWeight(), getBias(),
                    getTransW());
}

// The bias of a row-parallel linear is added once, after the sum.
std::optional<unsigned> LinearOp::getTpAddendAfterSum() {
  if (getBias())
    return 2;
  return std::nullopt;
}

// A product by a weight is a linear without bias; one of two activations
// follows the matmul rule.
FailureOr<TpRule> MatmulOp::getTpRule(TpRuleContext &ctx) {
  if (rankOf(getRhs()) == 2 && getRhs().getDefiningOp<WeightOp>() &&
      rankOf(getLhs()) >= 2)
    return linearRule(*this, ctx, getLhs(), getRhs(), Value(), false);
  return activationMatmulRule(*this, ctx);
}

FailureOr<TpRule> AttentionOp::getTpRule(TpRuleContext &ctx) {
  TpShard eq = ctx.eff(getQ()), ek = ctx.eff(getK()), ev = ctx.eff(getV());
  bool ok = headsSplit(ctx, getQ(), getK(), eq, ek, ev);
  TpRule r;
  r.operands = {eq, ek, ev};
  if (Value mask = getMask()) {
    TpShard em = ctx.eff(mask);
    int64_t mr = rankOf(mask);
    int64_t headDim = 1 - (4 - mr);
    if (headDim < 0 || rtt(mask).getDimSize(headDim) == 1) {
      if (!em.isReplicated())
        ok = false;
      r.operands.push_back(TpShard::replicated(mr));
    } else {
      TpShard want = TpShard::split(mr, headDim, ctx.tp());
      if (!ctx.canProvide(mask, want))
        ok = false;
      r.operands.push_back(want);
    }
  }
  if (!ok)
    return wholeTpRule(*this);
  r.results = {TpShard::split(4, 1, ctx.tp())};
  // The log-sum-exp [B, Hq, S] a training step keeps for backward.
  if (getNumResults() > 1)
    r.results.push_back(TpShard::split(3, 1, ctx.tp()));
  return r;
}

// A rotary embedding mixes the two halves of the last dim and nothing else:
// with the heads split, each rank rotates its own heads (the tables broadcast
// over heads stay whole), so the op is local. It is elementwise except that
// the last dim must stay whole.
FailureOr<TpRule> RotaryOp::getTpRule(TpRuleContext &ctx) {
  // The sequence-major form exists only after --zplan-fold-transpose, which
  // runs after sharding; its tables broadcast to a view the elementwise rule
  // does not know.
  if (getSeqMajor())
    return emitOpError("a seq_major rotary cannot be sharded: "
                       "--zplan-fold-transpose runs after tensor parallelism");
  return elementwiseTpRule(*this, ctx, rankOf(getResult()) - 1);
}

// The token embedding (ids come from a function argument) is vocabulary
// parallel: each rank looks up the ids in its rows, zero elsewhere, and the
// partial results are summed. Other lookups (positions) stay whole.
FailureOr<TpRule> EmbeddingOp::getTpRule(TpRuleContext &ctx) {
  Value cur = getIds();
  while (Operation *def = cur.getDefiningOp()) {
    if (def->getNumOperands() != 1 ||
        !isa<CastOp, ReshapeOp, ExpandOp, TransposeOp>(def))
      break;
    cur = def->getOperand(0);
  }
  TpShard eIds = ctx.eff(getIds());
  int64_t rank = rankOf(getResult());
  if (isa<BlockArgument>(cur) && getTable().getDefiningOp<WeightOp>() &&
      eIds.isReplicated()) {
    ctx.count(TpSplitKind::Vocab);
    TpShard res = TpShard::replicated(rank);
    res.partial = true;
    return ruleOf({TpShard::split(2, 0, ctx.tp()), eIds}, {res});
  }
  return ruleOf({TpShard::replicated(2), eIds},
                {eIds.dim >= 0 && eIds.segments.empty()
                     ? TpShard::split(rank, eIds.dim, eIds.blocks)
                     : TpShard::replicated(rank)});
}

int64_t EmbeddingOp::getTpVocabStride(ArrayRef<TpShard> results) {
  return results[0].partial ? rtt(getTable()).getDimSize(0) : 0;
}

//===----------------------------------------------------------------------===//
// Ops that need some dimensions whole
//===----------------------------------------------------------------------===//

FailureOr<TpRule> SoftmaxOp::getTpRule(TpRuleContext &ctx) {
  TpShard e = passExcept(ctx, getInput(), {static_cast<int64_t>(getAxis())});
  return ruleOf({e}, {e});
}

/// A norm over the dims from `axis` on: rows keep their split, the normed
/// dims are needed whole, the scale and bias are whole.
static TpRule normRule(Operation *op, TpRuleContext &ctx, int64_t axis) {
  Value x = op->getOperand(0);
  int64_t rank = rankOf(x);
  SmallVector<int64_t> normed;
  for (int64_t d = axis; d < rank; ++d)
    normed.push_back(d);
  TpShard e = passExcept(ctx, x, normed);
  if (!e.segments.empty())
    e = TpShard::replicated(rank);
  TpRule r;
  r.operands.push_back(e);
  for (Value v : op->getOperands().drop_front())
    r.operands.push_back(TpShard::replicated(rankOf(v)));
  r.results = {e};
  return r;
}

FailureOr<TpRule> LayerNormOp::getTpRule(TpRuleContext &ctx) {
  return normRule(*this, ctx, getAxis());
}

FailureOr<TpRule> RmsNormOp::getTpRule(TpRuleContext &ctx) {
  return normRule(*this, ctx, rankOf(getInput()) - 1);
}

FailureOr<TpRule> ReduceSumOp::getTpRule(TpRuleContext &ctx) {
  if (std::optional<TpRule> r = vocabReduceRule(*this, ctx))
    return *r;
  return reduceRule(*this, ctx);
}

FailureOr<TpRule> ReduceMaxOp::getTpRule(TpRuleContext &ctx) {
  if (std::optional<TpRule> r = vocabReduceRule(*this, ctx)) {
    // The all_reduce after a row maximum over a split vocabulary is a max.
    (*this)->setAttr("zd.partial_reduction",
                     StringAttr::get(getContext(), "max"));
    return *r;
  }
  return reduceRule(*this, ctx);
}

FailureOr<TpRule> ReduceMeanOp::getTpRule(TpRuleContext &ctx) {
  return reduceRule(*this, ctx);
}

FailureOr<TpRule> ReduceMinOp::getTpRule(TpRuleContext &ctx) {
  return reduceRule(*this, ctx);
}

FailureOr<TpRule> ReduceProdOp::getTpRule(TpRuleContext &ctx) {
  return reduceRule(*this, ctx);
}

// A cumulative sum needs its axis whole; other dims keep the operand's split.
FailureOr<TpRule> CumSumOp::getTpRule(TpRuleContext &ctx) {
  TpShard e = passExcept(ctx, getInput(), {static_cast<int64_t>(getAxis())});
  if (!e.segments.empty())
    e = TpShard::replicated(e.rank);
  return ruleOf({e}, {e});
}

// A tile needs every dim it repeats whole.
FailureOr<TpRule> TileOp::getTpRule(TpRuleContext &ctx) {
  SmallVector<int64_t> repeated;
  for (auto [d, rep] : llvm::enumerate(getRepeats()))
    if (rep != 1)
      repeated.push_back(d);
  TpShard e = passExcept(ctx, getInput(), repeated);
  if (!e.segments.empty())
    e = TpShard::replicated(e.rank);
  return ruleOf({e}, {e});
}

//===----------------------------------------------------------------------===//
// Shape ops: the split follows the dimension it was on
//===----------------------------------------------------------------------===//

FailureOr<TpRule> TransposeOp::getTpRule(TpRuleContext &ctx) {
  TpShard e = ctx.eff(getInput());
  TpShard res = e;
  if (e.dim >= 0)
    res.dim = llvm::find(getPerm(), e.dim) - getPerm().begin();
  return ruleOf({e}, {res});
}

// Dimension groups of equal element counts map onto each other; a split
// passes when it is the outermost dimension of its group and divides the
// result dimension.
FailureOr<TpRule> ReshapeOp::getTpRule(TpRuleContext &ctx) {
  TpShard e = ctx.eff(getInput());
  auto in = rtt(getInput()).getShape(), out = rtt(getResult()).getShape();
  if (e.dim < 0)
    return wholeTpRule(*this);
  int64_t d = mapReshapeDim(in, out, e.dim, e.blocks, !e.segments.empty());
  if (d < 0)
    return wholeTpRule(*this);
  return ruleOf({e}, {TpShard::split(out.size(), d, e.blocks, e.segments)});
}

// In a training step, the gradient of a fused projection's split: the parts,
// each split over tp along the axis, make a value split as fused segments.
// Otherwise a concatenation is elementwise away from its axis.
FailureOr<TpRule> ConcatOp::getTpRule(TpRuleContext &ctx) {
  int64_t axis = getAxis();
  if (ctx.training()) {
    TpRule r;
    SmallVector<int64_t> segments;
    bool fused = true;
    for (Value v : getOperands()) {
      TpShard e = ctx.eff(v);
      if (e.dim != axis || e.blocks != ctx.tp() || !e.segments.empty()) {
        fused = false;
        break;
      }
      segments.push_back(rtt(v).getDimSize(axis));
      r.operands.push_back(e);
    }
    if (fused) {
      r.results = {
          TpShard::split(rankOf(getResult()), axis, ctx.tp(), segments)};
      return r;
    }
  }
  return elementwiseTpRule(*this, ctx, axis);
}

FailureOr<TpRule> SliceOp::getTpRule(TpRuleContext &ctx) {
  TpShard e = ctx.eff(getInput());
  if (e.dim >= 0) {
    int64_t d = e.dim;
    bool whole =
        getStarts()[d] == 0 && getSteps()[d] == 1 &&
        rtt(getInput()).getDimSize(d) == rtt(getResult()).getDimSize(d);
    if (!whole)
      e = TpShard::replicated(e.rank);
  }
  return ruleOf({e}, {e});
}

// A split along the tp-split dimension passes it when the parts are the
// fused segments (QKV): each part is then split over tp on its own.
FailureOr<TpRule> SplitOp::getTpRule(TpRuleContext &ctx) {
  TpShard e = ctx.eff(getInput());
  int64_t axis = getAxis();
  if (e.dim == axis) {
    SmallVector<int64_t> sizes;
    for (Value v : getResults())
      sizes.push_back(rtt(v).getDimSize(axis));
    if (e.segments != sizes)
      e = TpShard::replicated(e.rank);
  }
  TpRule r;
  r.operands = {e};
  for (Value v : getResults()) {
    (void)v;
    r.results.push_back(e.dim == axis ? TpShard::split(e.rank, axis, e.blocks)
                                      : e);
  }
  return r;
}

FailureOr<TpRule> ExpandOp::getTpRule(TpRuleContext &ctx) {
  TpShard e = ctx.eff(getInput());
  int64_t rank = rankOf(getResult());
  if (e.dim < 0)
    return wholeTpRule(*this);
  int64_t rd = e.dim + rank - e.rank;
  if (rtt(getInput()).getDimSize(e.dim) != rtt(getResult()).getDimSize(rd))
    return wholeTpRule(*this);
  return ruleOf({e}, {TpShard::split(rank, rd, e.blocks, e.segments)});
}

//===----------------------------------------------------------------------===//
// Persistent state and generation
//===----------------------------------------------------------------------===//

// A KV cache has the sharding the first program gave it (ModulePlan). In a
// training step, other state is fixed by another function or belongs to a
// parameter of its shape (moments, gradient accumulators, master weights):
// the parameter's.
FailureOr<TpRule> StateOp::getTpRule(TpRuleContext &ctx) {
  TpShard s = TpShard::replicated(rankOf(getResult()));
  if (getKind() == "kv_cache" || ctx.training()) {
    if (std::optional<TpShard> fixed = ctx.stateShard(getName()))
      s = *fixed;
    else if (getKind() != "kv_cache" && !getOf().empty())
      if (std::optional<TpShard> p =
              ctx.paramShardByName(getOf(), rtt(getResult()).getShape()))
        s = *p;
  }
  return ruleOf({}, {s});
}

FailureOr<TpRule> AssignOp::getTpRule(TpRuleContext &ctx) {
  return writeRule(*this, ctx);
}

FailureOr<TpRule> AccumulateOp::getTpRule(TpRuleContext &ctx) {
  return writeRule(*this, ctx);
}

FailureOr<TpRule> AdamwOp::getTpRule(TpRuleContext &ctx) {
  return writeRule(*this, ctx);
}

// A KV cache takes the sharding of the keys (values) its writer stores: split
// by heads like them, one block per group of ranks where tp is larger than
// the key/value head count. The first program decides it for every program;
// the cache is set here, during the walk, so that the attention over it that
// follows sees it.
FailureOr<TpRule> KvWriteOp::getTpRule(TpRuleContext &ctx) {
  Value cache = getCache();
  TpShard want = ctx.eff(getValue());
  auto st = cache.getDefiningOp<StateOp>();
  if (!ctx.get(cache).isReplicated() || (st && ctx.stateShard(st.getName())))
    want = ctx.get(cache);
  else if (want.dim != 1 || !want.segments.empty())
    want = TpShard::replicated(4);
  if (!want.isReplicated())
    ctx.setShard(cache, want);
  return ruleOf({want, want, TpShard::replicated(rankOf(getPos()))}, {});
}

// Attention over the cache: heads split as zg.attention's, or everything
// whole.
FailureOr<TpRule> CachedAttentionOp::getTpRule(TpRuleContext &ctx) {
  TpShard eq = ctx.eff(getQ()), ek = ctx.get(getK()), ev = ctx.get(getV());
  if (!headsSplit(ctx, getQ(), getK(), eq, ek, ev))
    return wholeTpRule(*this);
  return ruleOf({eq, ek, ev, TpShard::replicated(rankOf(getPos()))},
                {TpShard::split(4, 1, ctx.tp())});
}

//===----------------------------------------------------------------------===//
// Training: loss, backward and optimizer ops
//===----------------------------------------------------------------------===//

// Each rank squares its own elements: a partial sum. A whole gradient is
// squared whole (each rank the same, counted once); a dimension cut into
// fewer blocks than ranks would count its copies twice.
FailureOr<TpRule> SumSquaresOp::getTpRule(TpRuleContext &ctx) {
  if (!ctx.training())
    return wholeTpRule(*this);
  TpShard e = ctx.eff(getInput());
  if (e.dim >= 0 && e.blocks != ctx.tp())
    e = TpShard::replicated(e.rank);
  TpShard res = TpShard::replicated(0);
  res.partial = e.dim >= 0;
  return ruleOf({e}, {res});
}

// Vocabulary-parallel: a label in another rank's rows picks 0 here.
FailureOr<TpRule> LabelPickOp::getTpRule(TpRuleContext &ctx) {
  TpShard e = ctx.eff(getLogits());
  int64_t last = rankOf(getLogits()) - 1;
  if (!ctx.training() || e.dim != last || e.blocks != ctx.tp() ||
      !e.segments.empty())
    return wholeTpRule(*this);
  TpShard res = TpShard::replicated(rankOf(getResult()));
  res.partial = true;
  return ruleOf({e, TpShard::replicated(rankOf(getLabels()))}, {res});
}

int64_t LabelPickOp::getTpVocabStride(ArrayRef<TpShard> results) {
  return results[0].partial ? rtt(getLogits()).getShape().back() : 0;
}

// Split as the label_pick it differentiates was.
FailureOr<TpRule> LabelPickGradOp::getTpRule(TpRuleContext &ctx) {
  if (ctx.training())
    for (Operation *u : getLabels().getUsers())
      if (auto lp = dyn_cast<LabelPickOp>(u))
        if (lp.getLogits().getType() == getResult().getType() &&
            ctx.eff(lp.getLogits()).dim == rankOf(getResult()) - 1) {
          TpShard e = ctx.eff(lp.getLogits());
          if (e.blocks != ctx.tp() || !e.segments.empty())
            continue;
          return ruleOf({TpShard::replicated(rankOf(getLabels())),
                         TpShard::replicated(rankOf(getGrad()))},
                        {e});
        }
  return wholeTpRule(*this);
}

int64_t LabelPickGradOp::getTpVocabStride(ArrayRef<TpShard> results) {
  return results[0].dim >= 0 ? rtt(getResult()).getShape().back() : 0;
}

// Split as the table of the lookup it differentiates.
FailureOr<TpRule> EmbeddingGradOp::getTpRule(TpRuleContext &ctx) {
  if (ctx.training())
    for (Operation *u : getIds().getUsers())
      if (auto emb = dyn_cast<EmbeddingOp>(u)) {
        std::optional<TpShard> t = ctx.paramShard(emb.getTable());
        if (emb.getTable().getType() != getResult().getType() || !t ||
            t->dim != 0 || t->blocks != ctx.tp())
          continue;
        return ruleOf({TpShard::replicated(rankOf(getIds())),
                       TpShard::replicated(rankOf(getGrad()))},
                      {*t});
      }
  return wholeTpRule(*this);
}

int64_t EmbeddingGradOp::getTpVocabStride(ArrayRef<TpShard> results) {
  return results[0].dim == 0 ? rtt(getResult()).getDimSize(0) : 0;
}

FailureOr<TpRule> SoftmaxGradOp::getTpRule(TpRuleContext &ctx) {
  if (!ctx.training())
    return wholeTpRule(*this);
  TpShard e = ctx.eff(getOutput());
  if (e.dim == getAxis() || !e.segments.empty() ||
      !ctx.canProvide(getGrad(), e))
    e = TpShard::replicated(e.rank);
  return ruleOf({e, e}, {e});
}

// Heads split on every operand: each rank differentiates its heads. K/V
// heads shared by several ranks (fewer than tp) would need their gradients
// summed within the group: computed whole instead.
FailureOr<TpRule> AttentionGradOp::getTpRule(TpRuleContext &ctx) {
  if (!ctx.training())
    return wholeTpRule(*this);
  int64_t tp = ctx.tp();
  TpShard h4 = TpShard::split(4, 1, tp), h3 = TpShard::split(3, 1, tp);
  bool ok = rtt(getQ()).getDimSize(1) % tp == 0 &&
            rtt(getK()).getDimSize(1) % tp == 0;
  TpRule r;
  for (Value v : getOperands()) {
    int64_t rk = rankOf(v);
    TpShard w = rk == 4 ? h4 : rk == 3 ? h3 : TpShard::replicated(rk);
    if (v == getMask() && (rk < 3 || rtt(v).getDimSize(1 - (4 - rk)) == 1))
      w = TpShard::replicated(rk);
    ok &= ctx.canProvide(v, w) && ctx.eff(v) == w;
    r.operands.push_back(w);
  }
  if (!ok)
    return wholeTpRule(*this);
  r.results = {h4, h4, h4};
  return r;
}
