//===- TpPropagate.cpp - --zplan-tp-propagate -----------------------------===//
//
// Seeds Megatron shardings on weights and carries them through the graph by
// per-op rules, in one forward walk (SSA order is a topological order of the
// graph). Nothing changes but attributes: every op with a split or partial
// result gets `zd.result_shardings`, every op that needs an operand in
// another sharding than its producer gives gets `zd.operand_shardings`, and
// weights get the sharding their first consumer asks for.
//
// The rules never ask an activation to become split when its producer gives
// it whole: that would need a rank-dependent slice, which the SPMD plan has
// no op for. Only weights and constants (sliced at load time through
// `zd.pieces`) can be asked for a split; when an activation would have to be,
// the op falls back to whole operands, and partition gathers the split ones.
//
// A training step (a function holding zg.adamw) is planned by the same walk:
// the backward ops come after the forward ones in SSA order. There, a
// trained parameter is one tensor with one sharding (its first consumer's):
// zg.adamw updates it in place, so a second, differently sliced load would go
// stale after the first step. Other consumers get it through a collective or
// a rank-local slice (zd.local_slice), which partition inserts; any whole
// activation may be asked for split that way too, since every rank holds it.
// Moments (zg.state) take their parameter's sharding, in every function.
//
//===----------------------------------------------------------------------===//

#include "compiler/sharding/Passes.h"
#include "compiler/sharding/Sharding.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace zplan::sharding {
#define GEN_PASS_DEF_ZPLANTPPROPAGATE
#include "compiler/sharding/Passes.h.inc"
} // namespace zplan::sharding

using namespace mlir;
using namespace zplan;
using namespace zplan::sharding;
namespace zg = zplan::graph;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }
int64_t rankOf(Value v) { return rtt(v).getRank(); }

bool isSliceable(Value v) {
  Operation *def = v.getDefiningOp();
  return def && isa<zg::WeightOp, zg::ConstantOp>(def);
}

/// Ops that compute each result element from the elements at the same
/// (broadcast) index of their operands.
bool isElementwise(Operation *op) {
  return isa<zg::NegOp, zg::ExpOp, zg::LogOp, zg::SqrtOp, zg::ReciprocalOp,
             zg::TanhOp, zg::ErfOp, zg::SigmoidOp, zg::ReluOp, zg::CosOp,
             zg::SinOp, zg::AbsOp, zg::SiluOp, zg::NotOp, zg::IsNanOp,
             zg::CastOp, zg::GeluOp, zg::AddOp, zg::SubOp, zg::MulOp, zg::DivOp,
             zg::PowOp, zg::MaxOp, zg::MinOp, zg::EqualOp, zg::LessOp,
             zg::GreaterOp, zg::LessEqualOp, zg::GreaterEqualOp, zg::AndOp,
             zg::OrOp, zg::WhereOp, zg::GeluGradOp, zg::SiluGradOp, zg::FloorOp,
             zg::ModOp>(op);
}

/// The persistent value an op writes in place (zg.adamw's parameter,
/// zg.assign's and zg.accumulate's target), or null.
Value writtenTarget(Operation *op) {
  if (isa<zg::AdamwOp, zg::AssignOp, zg::AccumulateOp>(op))
    return op->getOperand(0);
  return Value();
}

/// The shardings every program of a module must agree on: a persistent
/// tensor (parameter or state) has one local type in all of them, since two
/// programs that name it mean the same bytes.
struct ModulePlan {
  /// Names of the trained parameters (zg.weight written by some program).
  llvm::StringSet<> params;
  /// Parameter shardings (and global shapes) by name, once decided.
  llvm::StringMap<std::pair<Shard, SmallVector<int64_t>>> weights;
  /// zg.state shardings by name.
  llvm::StringMap<Shard> states;
};

struct ColumnPlan {
  int64_t blocks;
  SmallVector<int64_t> segments;
  bool vocab = false;
};

class Propagator {
public:
  Propagator(func::FuncOp func, int64_t tp, ModulePlan &plan)
      : func(func), tp(tp), ctx(func.getContext()), plan(plan),
        states(plan.states) {
    func.walk([&](Operation *op) {
      // A generation program's KV cache (docs/generation.md) is state, but
      // its program is a forward pass: the inference rules apply.
      auto st = dyn_cast<zg::StateOp>(op);
      if (isa<zg::AdamwOp, zg::AccumulateOp>(op) ||
          (st && st.getKind() != "kv_cache"))
        train = true;
    });
    // Parameters another program already decided keep that sharding.
    func.walk([&](zg::WeightOp w) {
      auto it = plan.weights.find(w.getName());
      if (!train || !isParam(w.getResult()) || it == plan.weights.end())
        return;
      decided.insert(w.getResult());
      if (!it->second.first.isReplicated())
        state[w.getResult()] = it->second.first;
    });
  }

  LogicalResult run();

  /// What the walk decided, for the pass statistics.
  struct Counts {
    int64_t column = 0, row = 0, vocab = 0, reshards = 0;
  } counts;

private:
  struct Rule {
    SmallVector<Shard> operands;
    SmallVector<Shard> results;
  };

  Shard get(Value v) const {
    auto it = state.find(v);
    return it == state.end() ? Shard::replicated(rankOf(v)) : it->second;
  }
  /// What a consumer sees: a partial sum is reduced right after its
  /// producer (partition inserts the all_reduce there).
  Shard eff(Value v) const {
    Shard s = get(v);
    return s.partial ? Shard::replicated(s.rank) : s;
  }

  Rule allReplicated(Operation *op);
  Rule elementwise(Operation *op, int64_t excludedDim = -1);
  FailureOr<Rule> linear(Operation *op, Value x, Value w, Value bias,
                         bool transW);
  Rule matmul(zg::MatmulOp op);
  Rule attention(zg::AttentionOp op);
  Rule kvWrite(zg::KvWriteOp op);
  Rule cachedAttention(zg::CachedAttentionOp op);
  Rule embedding(zg::EmbeddingOp op);
  FailureOr<Rule> ruleFor(Operation *op);
  FailureOr<Rule> trainRule(Operation *op);
  /// Whether an operand whose consumer wants it as `want` can be made so:
  /// it already is, it is a weight or constant sliced at load time, or (in a
  /// training step) it is whole on every rank and can be sliced locally.
  bool canProvide(Value v, const Shard &want) const {
    Shard e = eff(v);
    if (e == want)
      return true;
    if (isSliceable(v) && !(train && decided.count(v)))
      return true;
    return train && e.isReplicated() && !want.partial && want.blocks == tp;
  }
  /// A parameter's sharding once its first consumer decided it.
  std::optional<Shard> paramShard(Value v) const {
    if (!train || !decided.count(v))
      return std::nullopt;
    return get(v);
  }

  FailureOr<std::optional<ColumnPlan>> planColumn(Operation *op, Value result,
                                                  Value weight);
  bool reachesReturn(Value v);
  int attentionRole(Value v);

  func::FuncOp func;
  int64_t tp;
  MLIRContext *ctx;
  DenseMap<Value, Shard> state;
  llvm::MapVector<Operation *, SmallVector<Shard>> requirements;
  /// Whether `v` is a trained parameter of the module.
  bool isParam(Value v) const {
    auto w = v.getDefiningOp<zg::WeightOp>();
    return w && plan.params.contains(w.getName());
  }
  /// Fixes a parameter's sharding for every program.
  void decide(Value v, const Shard &s) {
    decided.insert(v);
    if (!s.isReplicated())
      state[v] = s;
    plan.weights[v.getDefiningOp<zg::WeightOp>().getName()] = {
        s, SmallVector<int64_t>(rtt(v).getShape())};
  }
  ModulePlan &plan;
  /// Shardings of zg.state values by name, shared by every function.
  llvm::StringMap<Shard> &states;
  /// Whether the function is a training program (it writes state).
  bool train = false;
  /// Parameters whose one sharding is fixed (by their first consumer).
  llvm::DenseSet<Value> decided;
};

} // namespace

namespace {
struct ZplanTpPropagatePass
    : zplan::sharding::impl::ZplanTpPropagateBase<ZplanTpPropagatePass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

//===----------------------------------------------------------------------===//
// Rules
//===----------------------------------------------------------------------===//

Propagator::Rule Propagator::allReplicated(Operation *op) {
  Rule r;
  for (Value v : op->getOperands())
    r.operands.push_back(Shard::replicated(rankOf(v)));
  for (Value v : op->getResults())
    r.results.push_back(Shard::replicated(rankOf(v)));
  return r;
}

// Operands align to the result from the right (numpy broadcasting). The
// result is split where a non-broadcast operand is; every other operand must
// be split the same way, be broadcast along that dimension, or be a weight or
// constant that can be sliced at load time.
Propagator::Rule Propagator::elementwise(Operation *op, int64_t excludedDim) {
  int64_t rank = rankOf(op->getResult(0));
  std::optional<Shard> cand;
  for (Value v : op->getOperands()) {
    Shard e = eff(v);
    if (e.dim < 0)
      continue;
    Shard c = Shard::split(rank, e.dim + rank - e.rank, e.blocks, e.segments);
    if (cand && *cand != c)
      return allReplicated(op);
    cand = c;
  }
  if (!cand || cand->dim == excludedDim)
    return allReplicated(op);
  Rule r;
  for (Value v : op->getOperands()) {
    Shard e = eff(v);
    int64_t local = cand->dim - (rank - e.rank);
    if (local < 0 || rtt(v).getDimSize(local) == 1) {
      r.operands.push_back(Shard::replicated(e.rank));
      continue;
    }
    Shard want = Shard::split(e.rank, local, cand->blocks, cand->segments);
    if (!canProvide(v, want))
      return allReplicated(op);
    r.operands.push_back(want);
  }
  for (Value v : op->getResults()) {
    (void)v;
    r.results.push_back(*cand);
  }
  return r;
}

bool Propagator::reachesReturn(Value v) {
  SmallVector<Value> work = {v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (Operation *user : cur.getUsers()) {
      // In a training step the logits reach the loss instead.
      // A generation program picks each sequence's last real row first.
      if (isa<func::ReturnOp, zg::LabelPickOp, zg::TakeRowsOp>(user))
        return true;
      if (!seen.insert(user).second)
        continue;
      // Only ops that keep the last (vocabulary) dimension as it is.
      bool keepsLast = user->getNumResults() == 1 &&
                       rtt(user->getResult(0)).getShape().back() ==
                           rtt(cur).getShape().back();
      if (keepsLast && (isElementwise(user) || isa<zg::ReshapeOp>(user)))
        work.push_back(user->getResult(0));
    }
  }
  return false;
}

// Which attention operand a projection feeds: 0 for queries, 1 or 2 for
// keys/values, -1 when no zg.attention is reached (before the next linear).
int Propagator::attentionRole(Value v) {
  SmallVector<Value> work = {v};
  llvm::SmallPtrSet<Operation *, 32> seen;
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (OpOperand &use : cur.getUses()) {
      Operation *user = use.getOwner();
      if (auto att = dyn_cast<zg::AttentionOp>(user))
        return use.getOperandNumber() <= 2 ? use.getOperandNumber() : -1;
      // Generation: keys and values reach the attention through the cache.
      if (isa<zg::KvWriteOp>(user))
        return use.getOperandNumber() == 1 ? 1 : -1;
      if (isa<zg::CachedAttentionOp>(user))
        return use.getOperandNumber() == 0 ? 0 : -1;
      if (isa<zg::LinearOp, func::ReturnOp>(user) || !seen.insert(user).second)
        continue;
      if (seen.size() > 64)
        return -1;
      for (Value r : user->getResults())
        work.push_back(r);
    }
  }
  return -1;
}

// Decides how a linear whose input is whole splits its output columns. The
// output is followed through elementwise ops (bias adds), through a split of
// the last dimension (fused QKV: one segment per part) and to the reshape
// that cuts the last dimension into [heads, head_dim]: the head count of each
// part decides its split.
FailureOr<std::optional<ColumnPlan>>
Propagator::planColumn(Operation *op, Value result, Value weight) {
  int64_t n = rtt(result).getShape().back();
  if (reachesReturn(result)) {
    // Vocabulary-parallel LM head: padded to a multiple of tp.
    ColumnPlan plan{tp, {}, true};
    return std::optional<ColumnPlan>(plan);
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
        if (auto reshape = dyn_cast<zg::ReshapeOp>(user)) {
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

  zg::SplitOp split;
  for (Operation *user : result.getUsers()) {
    if (auto s = dyn_cast<zg::SplitOp>(user))
      if (s.getAxis() == rankOf(result) - 1)
        split = s;
    // Through a bias add to the split.
    if (isElementwise(user) && user->getNumResults() == 1)
      for (Operation *u2 : user->getResult(0).getUsers())
        if (auto s = dyn_cast<zg::SplitOp>(u2))
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
            << (isa<zg::LinearOp>(op) && cast<zg::LinearOp>(op).getTransW() ? 0
                                                                            : 1)
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
  ColumnPlan plan{*blocks, segments, false};
  return std::optional<ColumnPlan>(plan);
}

FailureOr<Propagator::Rule> Propagator::linear(Operation *op, Value x, Value w,
                                               Value bias, bool transW) {
  int64_t rank = rankOf(x);
  Shard ex = eff(x);
  Rule r;
  int64_t kDim = transW ? 1 : 0, nDim = transW ? 0 : 1;
  bool sliceable = isSliceable(w) && rankOf(w) == 2;
  auto finish = [&](Shard xReq, Shard wReq, Shard bReq, Shard res) {
    r.operands.push_back(xReq);
    r.operands.push_back(wReq);
    if (bias)
      r.operands.push_back(bReq);
    r.results.push_back(res);
    return r;
  };
  Shard wRep = Shard::replicated(rankOf(w));
  Shard bRep = bias ? Shard::replicated(rankOf(bias)) : Shard();
  if (std::optional<Shard> sw = paramShard(w); sw && rankOf(w) == 2) {
    // A trained weight keeps the sharding its first consumer gave it: the
    // backward linear (dx = dy W^T) contracts over the dimension the forward
    // split, a row-parallel product with a partial result.
    if (sw->dim == kDim && sw->blocks == tp && ex.dim == rank - 1 &&
        ex.blocks == tp && ex.segments == sw->segments) {
      ++counts.row;
      Shard res = Shard::replicated(rank);
      res.partial = true;
      return finish(ex, *sw, bRep, res);
    }
    if (sw->dim == nDim) {
      Shard bReq = bias ? Shard::split(1, 0, sw->blocks, sw->segments) : bRep;
      if (std::optional<Shard> sb = bias ? paramShard(bias) : std::nullopt)
        bReq = *sb;
      return finish(Shard::replicated(rank), *sw, bReq,
                    Shard::split(rank, rank - 1, sw->blocks, sw->segments));
    }
    Shard xReq = ex.dim == rank - 1 ? Shard::replicated(rank) : ex;
    return finish(xReq, wRep, bRep, xReq);
  }
  if (!sliceable) {
    Shard xReq = ex.dim == rank - 1 ? Shard::replicated(rank) : ex;
    return finish(xReq, wRep, bRep, xReq);
  }
  if (ex.dim == rank - 1 && ex.blocks == tp && ex.segments.empty()) {
    // Row-parallel: each rank multiplies its slice of the input features by
    // the matching rows; the result is a partial sum.
    ++counts.row;
    Shard res = Shard::replicated(rank);
    res.partial = true;
    return finish(ex, Shard::split(2, kDim, tp), bRep, res);
  }
  if (ex.dim == rank - 1)
    ex = Shard::replicated(rank);
  if (ex.dim >= 0)
    return finish(ex, wRep, bRep, ex);
  auto plan = planColumn(op, op->getResult(0), w);
  if (failed(plan))
    return failure();
  if (!*plan)
    return finish(ex, wRep, bRep, ex);
  const ColumnPlan &p = **plan;
  if (p.vocab)
    ++counts.vocab;
  else
    ++counts.column;
  return finish(ex, Shard::split(2, nDim, p.blocks, p.segments),
                bias ? Shard::split(1, 0, p.blocks, p.segments) : Shard(),
                Shard::split(rank, rank - 1, p.blocks, p.segments));
}

Propagator::Rule Propagator::matmul(zg::MatmulOp op) {
  Value a = op.getLhs(), b = op.getRhs();
  int64_t ra = rankOf(a), rb = rankOf(b), rank = rankOf(op.getResult());
  if (ra < 2 || rb < 2)
    return allReplicated(op);
  Shard ea = eff(a), eb = eff(b);
  // Fused segments pass through a free dimension: each rank's rows (or
  // columns) are computed from its own, whatever their order.
  if (train && ea.dim == ra - 2 && eb.isReplicated())
    return Rule{{ea, eb}, {Shard::split(rank, rank - 2, ea.blocks,
                                        ea.segments)}};
  if (train && eb.dim == rb - 1 && ea.isReplicated())
    return Rule{{ea, eb}, {Shard::split(rank, rank - 1, eb.blocks,
                                        eb.segments)}};
  if (!ea.segments.empty() || !eb.segments.empty())
    return allReplicated(op);
  auto sizeAt = [&](Value v, int64_t resultDim) -> int64_t {
    int64_t local = resultDim - (rank - rankOf(v));
    return local < 0 ? 1 : rtt(v).getDimSize(local);
  };
  Rule r;
  auto done = [&](Shard sa, Shard sb, Shard res) {
    r.operands = {sa, sb};
    r.results = {res};
    return r;
  };
  // A batch dimension split on both (or on one, the other broadcast there).
  if (ea.dim >= 0 && ea.dim < ra - 2) {
    int64_t rd = ea.dim + rank - ra;
    Shard wantB = sizeAt(b, rd) == 1
                      ? Shard::replicated(rb)
                      : Shard::split(rb, rd - (rank - rb), ea.blocks);
    if (eb == wantB || (isSliceable(b) && eb.isReplicated()) ||
        canProvide(b, wantB))
      return done(ea, wantB, Shard::split(rank, rd, ea.blocks));
    return allReplicated(op);
  }
  if (eb.dim >= 0 && eb.dim < rb - 2) {
    int64_t rd = eb.dim + rank - rb;
    if (ea.isReplicated() && sizeAt(a, rd) == 1)
      return done(ea, eb, Shard::split(rank, rd, eb.blocks));
    return allReplicated(op);
  }
  if (ea.dim == ra - 2 && eb.isReplicated())
    return done(ea, eb, Shard::split(rank, rank - 2, ea.blocks));
  if (eb.dim == rb - 1 && ea.isReplicated())
    return done(ea, eb, Shard::split(rank, rank - 1, eb.blocks));
  if (ea.dim == ra - 1 && eb.dim == rb - 2 && ea.blocks == tp &&
      eb.blocks == tp) {
    Shard res = Shard::replicated(rank);
    res.partial = true;
    return done(ea, eb, res);
  }
  return allReplicated(op);
}

// Heads split: queries over tp, keys/values over tp or, with fewer K/V heads
// than ranks, one K/V head per group of ranks.
Propagator::Rule Propagator::attention(zg::AttentionOp op) {
  Shard eq = eff(op.getQ()), ek = eff(op.getK()), ev = eff(op.getV());
  int64_t hq = rtt(op.getQ()).getDimSize(1), hkv = rtt(op.getK()).getDimSize(1);
  bool ok =
      eq.dim == 1 && eq.blocks == tp && eq.segments.empty() && ek.dim == 1 &&
      ek.segments.empty() && ev == ek &&
      (ek.blocks == tp || (ek.blocks == hkv && tp % hkv == 0 && hq % tp == 0));
  Rule r;
  r.operands = {eq, ek, ev};
  if (Value mask = op.getMask()) {
    Shard em = eff(mask);
    int64_t mr = rankOf(mask);
    int64_t headDim = 1 - (4 - mr);
    if (headDim < 0 || rtt(mask).getDimSize(headDim) == 1) {
      if (!em.isReplicated())
        ok = false;
      r.operands.push_back(Shard::replicated(mr));
    } else {
      Shard want = Shard::split(mr, headDim, tp);
      if (!canProvide(mask, want))
        ok = false;
      r.operands.push_back(want);
    }
  }
  if (!ok)
    return allReplicated(op);
  r.results = {Shard::split(4, 1, tp)};
  // The log-sum-exp [B, Hq, S] a training step keeps for backward.
  if (op->getNumResults() > 1)
    r.results.push_back(Shard::split(3, 1, tp));
  return r;
}

// A KV cache takes the sharding of the keys (values) its writer stores: split
// by heads like them, one block per group of ranks where tp is larger than
// the key/value head count. The first program decides it for every program
// (ModulePlan::states); the cache is set here, during the walk, so that the
// attention over it that follows sees it.
Propagator::Rule Propagator::kvWrite(zg::KvWriteOp op) {
  Value cache = op.getCache();
  Shard want = eff(op.getValue());
  auto st = cache.getDefiningOp<zg::StateOp>();
  if (state.count(cache) || (st && states.count(st.getName())))
    want = get(cache);
  else if (want.dim != 1 || !want.segments.empty())
    want = Shard::replicated(4);
  if (!want.isReplicated())
    state[cache] = want;
  Rule r;
  r.operands = {want, want, Shard::replicated(rankOf(op.getPos()))};
  return r;
}

// Attention over the cache: heads split as zg.attention's, or everything
// whole.
Propagator::Rule Propagator::cachedAttention(zg::CachedAttentionOp op) {
  Shard eq = eff(op.getQ()), ek = get(op.getK()), ev = get(op.getV());
  int64_t hq = rtt(op.getQ()).getDimSize(1), hkv = rtt(op.getK()).getDimSize(1);
  bool ok =
      eq.dim == 1 && eq.blocks == tp && eq.segments.empty() && ek.dim == 1 &&
      ek.segments.empty() && ev == ek &&
      (ek.blocks == tp || (ek.blocks == hkv && tp % hkv == 0 && hq % tp == 0));
  if (!ok)
    return allReplicated(op);
  Rule r;
  r.operands = {eq, ek, ev, Shard::replicated(rankOf(op.getPos()))};
  r.results = {Shard::split(4, 1, tp)};
  return r;
}

// The token embedding (ids come from a function argument) is vocabulary
// parallel: each rank looks up the ids in its rows, zero elsewhere, and the
// partial results are summed. Other lookups (positions) stay whole.
Propagator::Rule Propagator::embedding(zg::EmbeddingOp op) {
  Value ids = op.getIds();
  Value cur = ids;
  while (Operation *def = cur.getDefiningOp()) {
    if (def->getNumOperands() != 1 ||
        !isa<zg::CastOp, zg::ReshapeOp, zg::ExpandOp, zg::TransposeOp>(def))
      break;
    cur = def->getOperand(0);
  }
  Shard eIds = eff(ids);
  int64_t rank = rankOf(op.getResult());
  Rule r;
  if (isa<BlockArgument>(cur) && op.getTable().getDefiningOp<zg::WeightOp>() &&
      eIds.isReplicated()) {
    ++counts.vocab;
    Shard res = Shard::replicated(rank);
    res.partial = true;
    r.operands = {Shard::split(2, 0, tp), eIds};
    r.results = {res};
    return r;
  }
  r.operands = {Shard::replicated(2), eIds};
  r.results = {eIds.dim >= 0 && eIds.segments.empty()
                   ? Shard::split(rank, eIds.dim, eIds.blocks)
                   : Shard::replicated(rank)};
  return r;
}

FailureOr<Propagator::Rule> Propagator::ruleFor(Operation *op) {
  if (isa<zg::WeightOp, zg::ConstantOp, zg::CausalMaskOp>(op))
    return allReplicated(op);
  if (auto st = dyn_cast<zg::StateOp>(op); st && st.getKind() == "kv_cache") {
    Rule r;
    auto it = states.find(st.getName());
    r.results = {it != states.end() ? it->second
                                    : Shard::replicated(rankOf(st))};
    return r;
  }
  if (auto kw = dyn_cast<zg::KvWriteOp>(op))
    return kvWrite(kw);
  if (auto ca = dyn_cast<zg::CachedAttentionOp>(op))
    return cachedAttention(ca);
  if (train) {
    FailureOr<Rule> r = trainRule(op);
    if (failed(r) || !r->results.empty() || !r->operands.empty())
      return r;
  }
  if (isElementwise(op))
    return elementwise(op);
  if (auto lin = dyn_cast<zg::LinearOp>(op))
    return linear(op, lin.getInput(), lin.getWeight(), lin.getBias(),
                  lin.getTransW());
  if (auto mm = dyn_cast<zg::MatmulOp>(op)) {
    if (rankOf(mm.getRhs()) == 2 && isSliceable(mm.getRhs()) &&
        mm.getRhs().getDefiningOp<zg::WeightOp>() && rankOf(mm.getLhs()) >= 2)
      return linear(op, mm.getLhs(), mm.getRhs(), Value(), false);
    return matmul(mm);
  }
  if (auto att = dyn_cast<zg::AttentionOp>(op))
    return attention(att);
  if (auto emb = dyn_cast<zg::EmbeddingOp>(op))
    return embedding(emb);

  // Ops that leave some dimensions alone and need others whole.
  auto passExcept = [&](Value in, ArrayRef<int64_t> wholeDims) {
    Shard e = eff(in);
    if (e.dim >= 0 && llvm::is_contained(wholeDims, e.dim))
      e = Shard::replicated(e.rank);
    return e;
  };
  Rule r;
  if (auto sm = dyn_cast<zg::SoftmaxOp>(op)) {
    Shard e = passExcept(sm.getInput(), {static_cast<int64_t>(sm.getAxis())});
    r.operands = {e};
    r.results = {e};
    return r;
  }
  if (isa<zg::LayerNormOp, zg::RmsNormOp>(op)) {
    Value x = op->getOperand(0);
    int64_t rank = rankOf(x);
    int64_t axis = rank - 1;
    if (auto ln = dyn_cast<zg::LayerNormOp>(op))
      axis = ln.getAxis();
    SmallVector<int64_t> normed;
    for (int64_t d = axis; d < rank; ++d)
      normed.push_back(d);
    Shard e = passExcept(x, normed);
    if (!e.segments.empty())
      e = Shard::replicated(rank);
    r.operands.push_back(e);
    for (Value v : op->getOperands().drop_front())
      r.operands.push_back(Shard::replicated(rankOf(v)));
    r.results = {e};
    return r;
  }
  if (isa<zg::ReduceSumOp, zg::ReduceMeanOp, zg::ReduceMaxOp, zg::ReduceMinOp,
          zg::ReduceProdOp>(op)) {
    auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
    bool keep = op->getAttrOfType<BoolAttr>("keepdims").getValue();
    Shard e = passExcept(op->getOperand(0), axes);
    r.operands = {e};
    Shard res = Shard::replicated(rankOf(op->getResult(0)));
    if (e.dim >= 0) {
      int64_t d = e.dim;
      if (!keep)
        d -= llvm::count_if(axes, [&](int64_t a) { return a < e.dim; });
      res = Shard::split(res.rank, d, e.blocks, e.segments);
    }
    r.results = {res};
    return r;
  }
  // A cumulative sum needs its axis whole, a tile every dim it repeats;
  // other dims keep the operand's split.
  if (auto cs = dyn_cast<zg::CumSumOp>(op)) {
    Shard e = passExcept(cs.getInput(), {static_cast<int64_t>(cs.getAxis())});
    if (!e.segments.empty())
      e = Shard::replicated(e.rank);
    r.operands = {e};
    r.results = {e};
    return r;
  }
  if (auto tile = dyn_cast<zg::TileOp>(op)) {
    SmallVector<int64_t> repeated;
    for (auto [d, rep] : llvm::enumerate(tile.getRepeats()))
      if (rep != 1)
        repeated.push_back(d);
    Shard e = passExcept(tile.getInput(), repeated);
    if (!e.segments.empty())
      e = Shard::replicated(e.rank);
    r.operands = {e};
    r.results = {e};
    return r;
  }
  // Index selections along data-dependent positions, and sequences, are
  // computed whole on every rank.
  if (isa<zg::GatherNdOp, zg::GatherElementsOp, zg::RangeOp>(op))
    return allReplicated(op);
  if (auto tr = dyn_cast<zg::TransposeOp>(op)) {
    Shard e = eff(tr.getInput());
    r.operands = {e};
    Shard res = e;
    if (e.dim >= 0)
      res.dim = llvm::find(tr.getPerm(), e.dim) - tr.getPerm().begin();
    r.results = {res};
    return r;
  }
  if (auto rs = dyn_cast<zg::ReshapeOp>(op)) {
    Shard e = eff(rs.getInput());
    auto in = rtt(rs.getInput()).getShape(),
         out = rtt(rs.getResult()).getShape();
    if (e.dim < 0)
      return allReplicated(op);
    int64_t d = mapReshapeDim(in, out, e.dim, e.blocks, !e.segments.empty());
    if (d < 0)
      return allReplicated(op);
    r.operands = {e};
    r.results = {Shard::split(out.size(), d, e.blocks, e.segments)};
    return r;
  }
  if (auto cat = dyn_cast<zg::ConcatOp>(op))
    return elementwise(op, cat.getAxis());
  if (auto sl = dyn_cast<zg::SliceOp>(op)) {
    Shard e = eff(sl.getInput());
    if (e.dim >= 0) {
      int64_t d = e.dim;
      bool whole =
          sl.getStarts()[d] == 0 && sl.getSteps()[d] == 1 &&
          rtt(sl.getInput()).getDimSize(d) == rtt(sl.getResult()).getDimSize(d);
      if (!whole)
        e = Shard::replicated(e.rank);
    }
    r.operands = {e};
    r.results = {e};
    return r;
  }
  if (auto sp = dyn_cast<zg::SplitOp>(op)) {
    Shard e = eff(sp.getInput());
    int64_t axis = sp.getAxis();
    if (e.dim == axis) {
      SmallVector<int64_t> sizes;
      for (Value v : sp.getResults())
        sizes.push_back(rtt(v).getDimSize(axis));
      if (e.segments != sizes)
        e = Shard::replicated(e.rank);
    }
    r.operands = {e};
    for (Value v : sp.getResults()) {
      (void)v;
      r.results.push_back(e.dim == axis ? Shard::split(e.rank, axis, e.blocks)
                                        : e);
    }
    return r;
  }
  if (auto ex = dyn_cast<zg::ExpandOp>(op)) {
    Shard e = eff(ex.getInput());
    int64_t rank = rankOf(ex.getResult());
    if (e.dim < 0)
      return allReplicated(op);
    int64_t rd = e.dim + rank - e.rank;
    if (rtt(ex.getInput()).getDimSize(e.dim) !=
        rtt(ex.getResult()).getDimSize(rd))
      return allReplicated(op);
    r.operands = {e};
    r.results = {Shard::split(rank, rd, e.blocks, e.segments)};
    return r;
  }
  return allReplicated(op);
}

// The rules of a training step's own ops (backward, loss, optimizer), and
// the training variants of forward rules. An empty rule: not handled here.
FailureOr<Propagator::Rule> Propagator::trainRule(Operation *op) {
  Rule r;
  if (auto st = dyn_cast<zg::StateOp>(op)) {
    // Another function fixed it, or it belongs to a parameter of its shape
    // (moments, gradient accumulators, master weights): the parameter's.
    auto it = states.find(st.getName());
    Shard s = Shard::replicated(rankOf(st));
    if (it != states.end()) {
      s = it->second;
    } else if (auto w = plan.weights.find(st.getOf());
               !st.getOf().empty() && w != plan.weights.end() &&
               ArrayRef<int64_t>(w->second.second) ==
                   rtt(st.getResult()).getShape()) {
      s = w->second.first;
    }
    r.results = {s};
    return r;
  }
  if (Value target = writtenTarget(op)) {
    // The write keeps its target's one sharding: every operand of the
    // target's shape follows it (AdamW's gradient and moments), scalars stay
    // whole.
    Shard t = eff(target);
    if (std::optional<Shard> p = paramShard(target))
      t = *p;
    for (Value v : op->getOperands())
      r.operands.push_back(rtt(v).getShape() == rtt(target).getShape()
                               ? t
                               : Shard::replicated(rankOf(v)));
    return r;
  }
  if (auto ss = dyn_cast<zg::SumSquaresOp>(op)) {
    // Each rank squares its own elements: a partial sum. A whole gradient is
    // squared whole (each rank the same, counted once); a dimension cut into
    // fewer blocks than ranks would count its copies twice.
    Shard e = eff(ss.getInput());
    if (e.dim >= 0 && e.blocks != tp)
      e = Shard::replicated(e.rank);
    Shard res = Shard::replicated(0);
    res.partial = e.dim >= 0;
    r.operands = {e};
    r.results = {res};
    return r;
  }
  if (isa<zg::ReduceSumOp, zg::ReduceMaxOp>(op)) {
    // A reduction over the split (vocabulary) dimension: each rank reduces
    // its part, then an all_reduce (sum or max) over tp. Padding (a
    // vocabulary tp does not divide) would enter the reduction: gather then.
    Value in = op->getOperand(0);
    Shard e = eff(in);
    auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
    if (e.dim < 0 || !llvm::is_contained(axes, e.dim) || e.blocks != tp ||
        !e.segments.empty() || rtt(in).getDimSize(e.dim) % tp != 0)
      return Rule();
    Shard res = Shard::replicated(rankOf(op->getResult(0)));
    res.partial = true;
    if (isa<zg::ReduceMaxOp>(op))
      op->setAttr("zd.partial_reduction", StringAttr::get(ctx, "max"));
    r.operands = {e};
    r.results = {res};
    return r;
  }
  if (auto cat = dyn_cast<zg::ConcatOp>(op)) {
    // The gradient of a fused projection's split: the parts, each split
    // over tp along the axis, make a value split as fused segments.
    int64_t axis = cat.getAxis();
    SmallVector<int64_t> segments;
    for (Value v : op->getOperands()) {
      Shard e = eff(v);
      if (e.dim != axis || e.blocks != tp || !e.segments.empty())
        return Rule();
      segments.push_back(rtt(v).getDimSize(axis));
      r.operands.push_back(e);
    }
    r.results = {Shard::split(rankOf(cat.getResult()), axis, tp, segments)};
    return r;
  }
  if (auto lp = dyn_cast<zg::LabelPickOp>(op)) {
    // Vocabulary-parallel: a label in another rank's rows picks 0 here.
    Shard e = eff(lp.getLogits());
    int64_t last = rankOf(lp.getLogits()) - 1;
    if (e.dim != last || e.blocks != tp || !e.segments.empty())
      return Rule();
    Shard res = Shard::replicated(rankOf(lp.getResult()));
    res.partial = true;
    r.operands = {e, Shard::replicated(rankOf(lp.getLabels()))};
    r.results = {res};
    return r;
  }
  if (auto lg = dyn_cast<zg::LabelPickGradOp>(op)) {
    // Split as the label_pick it differentiates was.
    for (Operation *u : lg.getLabels().getUsers())
      if (auto lp = dyn_cast<zg::LabelPickOp>(u))
        if (lp.getLogits().getType() == lg.getResult().getType() &&
            eff(lp.getLogits()).dim == rankOf(lg.getResult()) - 1) {
          Shard e = eff(lp.getLogits());
          if (e.blocks != tp || !e.segments.empty())
            continue;
          r.operands = {Shard::replicated(rankOf(lg.getLabels())),
                        Shard::replicated(rankOf(lg.getGrad()))};
          r.results = {e};
          return r;
        }
    return Rule();
  }
  if (auto eg = dyn_cast<zg::EmbeddingGradOp>(op)) {
    // Split as the table of the lookup it differentiates.
    for (Operation *u : eg.getIds().getUsers())
      if (auto emb = dyn_cast<zg::EmbeddingOp>(u)) {
        std::optional<Shard> t = paramShard(emb.getTable());
        if (emb.getTable().getType() != eg.getResult().getType() || !t ||
            t->dim != 0 || t->blocks != tp)
          continue;
        r.operands = {Shard::replicated(rankOf(eg.getIds())),
                      Shard::replicated(rankOf(eg.getGrad()))};
        r.results = {*t};
        return r;
      }
    return Rule();
  }
  if (auto sg = dyn_cast<zg::SoftmaxGradOp>(op)) {
    Shard e = eff(sg.getOutput());
    if (e.dim == sg.getAxis() || !e.segments.empty() ||
        !canProvide(sg.getGrad(), e))
      e = Shard::replicated(e.rank);
    r.operands = {e, e};
    r.results = {e};
    return r;
  }
  if (auto ag = dyn_cast<zg::AttentionGradOp>(op)) {
    // Heads split on every operand: each rank differentiates its heads. K/V
    // heads shared by several ranks (fewer than tp) would need their
    // gradients summed within the group: computed whole instead.
    Shard h4 = Shard::split(4, 1, tp), h3 = Shard::split(3, 1, tp);
    bool ok = rtt(ag.getQ()).getDimSize(1) % tp == 0 &&
              rtt(ag.getK()).getDimSize(1) % tp == 0;
    SmallVector<Shard> want;
    for (Value v : op->getOperands()) {
      int64_t rk = rankOf(v);
      Shard w = rk == 4 ? h4 : rk == 3 ? h3 : Shard::replicated(rk);
      if (v == ag.getMask() &&
          (rk < 3 || rtt(v).getDimSize(1 - (4 - rk)) == 1))
        w = Shard::replicated(rk);
      ok &= canProvide(v, w) && eff(v) == w;
      want.push_back(w);
    }
    if (!ok)
      return Rule();
    r.operands = want;
    r.results = {h4, h4, h4};
    return r;
  }
  return Rule();
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

LogicalResult Propagator::run() {
  bool failed = false;
  func.walk([&](Operation *op) {
    if (failed || op == func.getOperation())
      return;
    if (isa<func::ReturnOp>(op)) {
      SmallVector<Shard> req;
      for (Value v : op->getOperands())
        req.push_back(Shard::replicated(rankOf(v)));
      requirements[op] = req;
      return;
    }
    if (!llvm::all_of(op->getOperandTypes(), llvm::IsaPred<RankedTensorType>) ||
        !llvm::all_of(op->getResultTypes(), llvm::IsaPred<RankedTensorType>))
      return;
    FailureOr<Rule> rule = ruleFor(op);
    if (mlir::failed(rule)) {
      failed = true;
      return;
    }
    for (auto [v, s] : llvm::zip(op->getResults(), rule->results))
      if (!s.isReplicated())
        state[v] = s;
    if (op->getNumOperands())
      requirements[op] = rule->operands;
    // A trained parameter is fixed by its first consumer, before the next
    // op's rule reads it.
    if (train && op->getNumOperands() && !writtenTarget(op))
      for (auto [v, req] : llvm::zip(op->getOperands(), rule->operands))
        if (isParam(v) && !decided.count(v))
          decide(v, req);
  });
  if (failed)
    return failure();

  // A weight takes the sharding its first consumer asks for; consumers that
  // ask for another get their own copy in partition.
  func.walk([&](Operation *op) {
    auto it = requirements.find(op);
    if (it == requirements.end())
      return;
    for (auto [v, req] : llvm::zip(op->getOperands(), it->second)) {
      bool persistent = isSliceable(v) || v.getDefiningOp<zg::StateOp>();
      if (persistent && !state.count(v) && !decided.count(v) &&
          !req.isReplicated())
        state[v] = req;
    }
  });
  // Moments and other state take the sharding their writer asked for; later
  // functions (@init) read it from here, and parameters that only a write
  // used are decided now.
  func.walk([&](zg::StateOp st) {
    if (!states.count(st.getName()))
      states[st.getName()] = get(st.getResult());
  });
  func.walk([&](zg::WeightOp w) {
    if (train && isParam(w.getResult()) && !decided.count(w.getResult()))
      decide(w.getResult(), get(w.getResult()));
  });

  Builder b(ctx);
  func.walk([&](Operation *op) {
    if (op == func.getOperation())
      return;
    SmallVector<Attribute> results;
    bool anySplit = false;
    for (Value v : op->getResults()) {
      if (!isa<RankedTensorType>(v.getType()))
        continue;
      Shard s = get(v);
      anySplit |= !s.isReplicated();
      results.push_back(s.toAttr(ctx, tp));
    }
    if (anySplit)
      op->setAttr(kResultShardings, b.getArrayAttr(results));
    auto it = requirements.find(op);
    if (it == requirements.end())
      return;
    SmallVector<Attribute> operands;
    bool differs = false;
    for (auto [v, req] : llvm::zip(op->getOperands(), it->second)) {
      if (req != eff(v)) {
        differs = true;
        if (!isSliceable(v) || decided.count(v))
          ++counts.reshards;
      }
      operands.push_back(req.toAttr(ctx, tp));
    }
    if (differs)
      op->setAttr(kOperandShardings, b.getArrayAttr(operands));
  });
  return success();
}

void ZplanTpPropagatePass::runOnOperation() {
  ModuleOp module = getOperation();
  int64_t tp = dist::getMeshAxisSize(module, "tp");
  if (tp < 1) {
    module.emitError("zd.tp must be at least 1, got ") << tp;
    return signalPassFailure();
  }
  // With one tp rank every tensor is whole: nothing to annotate.
  if (tp == 1)
    return;
  // The trained parameters: weights some program writes.
  ModulePlan plan;
  module.walk([&](Operation *op) {
    if (Value t = writtenTarget(op))
      if (auto w = t.getDefiningOp<zg::WeightOp>())
        plan.params.insert(w.getName());
  });
  // Programs that run the forward (the train step, the micro-step) go first:
  // a parameter takes its first forward consumer's sharding, and the state
  // of the update and @init programs follows.
  SmallVector<func::FuncOp> funcs;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal())
      funcs.push_back(func);
  auto readsParams = [&](func::FuncOp f) {
    bool reads = false;
    f.walk([&](zg::WeightOp w) {
      if (plan.params.contains(w.getName()))
        for (Operation *u : w->getUsers())
          reads |= writtenTarget(u) != w.getResult();
    });
    return reads;
  };
  llvm::stable_sort(funcs, [&](func::FuncOp a, func::FuncOp b) {
    return readsParams(a) && !readsParams(b);
  });
  for (auto func : funcs) {
    Propagator prop(func, tp, plan);
    if (failed(prop.run()))
      return signalPassFailure();
    numColumnSplit += prop.counts.column;
    numRowSplit += prop.counts.row;
    numVocabSplit += prop.counts.vocab;
    numReshards += prop.counts.reshards;
  }
}
