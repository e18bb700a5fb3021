//===- PrefetchGathers.cpp - --zplan-prefetch-gathers ---------------------===//
//
// Decides how far ahead of its first use each ZeRO-3 parameter gather is
// issued. A gather runs on the comm stream and its consumer waits on its
// event (--zplan-schedule); issued right before the consumer, the gather sits
// on the critical path. Moved a window earlier in the one SPMD order, it runs
// on the comm stream while the compute stream works through the window, and
// the memory plan, which follows the block order, sees (and counts) the
// longer life of the gathered buffer.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/OpInfo.h"
#include "compiler/plan/Passes.h"

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANPREFETCHGATHERS
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

/// Bytes of a gathered tensor, counted as --zplan-zero counts them (by the
/// element type's width), so that a window given in bytes means the same to
/// both passes.
int64_t gatheredBytes(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * int64_t((bits + 7) / 8);
}

struct Gather {
  dist::GatherParamOp op;
  int64_t bytes = 0;
  /// Block positions (indices into the program's op list before any move).
  int64_t at = 0;       ///< where the gather is now
  int64_t firstUse = 0; ///< its first reader
  int64_t end = 0;      ///< its zd.release, else its last reader
  int64_t earliest = 0; ///< the first position its operand allows
};

struct PrefetchGathersPass
    : impl::ZplanPrefetchGathersBase<PrefetchGathersPass> {
  using ZplanPrefetchGathersBase::ZplanPrefetchGathersBase;

  void runOnOperation() override {
    if (windowBytes < -1 || maxLiveBytes < 0) {
      getOperation().emitError()
          << "zplan-prefetch-gathers: window-bytes must be -1 (auto) or at "
             "least 0 and max-live-bytes at least 0, got "
          << int64_t(windowBytes) << " and " << int64_t(maxLiveBytes);
      return signalPassFailure();
    }
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(getOperation());
    if (failed(funcs))
      return signalPassFailure();
    for (func::FuncOp func : *funcs)
      prefetchProgram(func.getBody().front());
  }

  /// One layer's gathered parameters: the distinct gathered sources' bytes
  /// over the number of attention ops, and at least the largest gather (one
  /// parameter ahead), so a model without attention still overlaps.
  int64_t autoWindow(Block &body, ArrayRef<Gather> gathers) {
    llvm::DenseSet<Value> sources;
    int64_t total = 0, largest = 0;
    for (const Gather &g : gathers) {
      largest = std::max(largest, g.bytes);
      if (sources.insert(g.op->getOperand(0)).second)
        total += g.bytes;
    }
    int64_t layers = llvm::range_size(body.getOps<graph::AttentionOp>());
    return std::max(largest, layers > 0 ? total / layers : 0);
  }

  void prefetchProgram(Block &body) {
    llvm::SmallVector<Operation *> ops;
    llvm::DenseMap<Operation *, int64_t> index;
    for (Operation &op : body.without_terminator()) {
      index[&op] = int64_t(ops.size());
      ops.push_back(&op);
    }
    const int64_t n = int64_t(ops.size());

    // The last writer of each piece of persistent storage before each
    // position: a gather of a shard that the program updates in place (the
    // training step's optimizer) must not move above the update.
    llvm::StringMap<int64_t> lastWrite;
    llvm::SmallVector<Gather> gathers;
    for (Operation *op : ops) {
      if (auto gather = dyn_cast<dist::GatherParamOp>(op)) {
        Gather g;
        g.op = gather;
        g.bytes = gatheredBytes(gather.getResult());
        g.at = index[op];
        g.firstUse = n;
        g.end = g.at;
        for (Operation *user : gather->getUsers()) {
          int64_t u = index.lookup(body.findAncestorOpInBlock(*user));
          g.end = std::max(g.end, u);
          if (!isa<dist::ReleaseOp>(user))
            g.firstUse = std::min(g.firstUse, u);
        }
        Value source = gather.getOperand();
        if (Operation *def = source.getDefiningOp())
          if (def->getBlock() == &body)
            g.earliest = index[def] + 1;
        std::string key = persistentKey(source);
        if (!key.empty()) {
          auto it = lastWrite.find(key);
          if (it != lastWrite.end())
            g.earliest = std::max(g.earliest, it->second + 1);
        }
        gathers.push_back(g);
      }
      for (Value written : writtenOperands(op)) {
        std::string key = persistentKey(written);
        if (!key.empty())
          lastWrite[key] = index[op];
      }
    }
    numGathers += gathers.size();
    if (gathers.empty())
      return;

    const int64_t window =
        windowBytes < 0 ? autoWindow(body, gathers) : int64_t(windowBytes);

    // Gathered bytes alive at each position, over the gathers placed so far
    // (a later gather starts no earlier than an earlier one, so each pair is
    // checked once, when the later one is placed).
    llvm::SmallVector<int64_t> live(n + 1, 0);
    // Where each gather goes: before ops[pos]; a gather that stays has
    // pos == at.
    llvm::SmallVector<int64_t> pos(gathers.size());
    for (size_t i = 0; i < gathers.size(); ++i) {
      Gather &g = gathers[i];
      auto fits = [&](int64_t from) {
        if (maxLiveBytes <= 0)
          return true;
        for (int64_t k = from; k <= g.end; ++k)
          if (live[k] + g.bytes > int64_t(maxLiveBytes))
            return false;
        return true;
      };
      // Gathers keep their order on the comm stream: the one needed first is
      // issued first. An earlier gather that stays where it is occupies its
      // own position, so this one goes after it.
      int64_t floor = g.earliest;
      if (i > 0)
        floor = std::max(floor, pos[i - 1] == gathers[i - 1].at
                                    ? gathers[i - 1].at + 1
                                    : pos[i - 1]);
      // Walk back over the gathers needed before this one: this gather moves
      // to an earlier gather's first reader while the bytes gathered from
      // there up to this one's reader (its own included) fit the window.
      int64_t target = g.at;
      int64_t ahead = g.bytes;
      for (int64_t j = int64_t(i) - 1;
           j >= 0 && window > 0 && g.firstUse < n; --j) {
        int64_t cand = gathers[j].firstUse;
        if (cand >= n || cand < floor || ahead > window || !fits(cand))
          break;
        target = std::min(target, cand);
        ahead += gathers[j].bytes;
      }
      pos[i] = target < g.at ? target : g.at;
      if (pos[i] < g.at)
        ++numHoisted;
      for (int64_t k = pos[i]; k <= g.end; ++k)
        live[k] += g.bytes;
    }

    // Moves in gather order: gathers sent before the same op keep their
    // order.
    for (size_t i = 0; i < gathers.size(); ++i)
      if (pos[i] < gathers[i].at)
        gathers[i].op->moveBefore(ops[pos[i]]);
  }
};

} // namespace
} // namespace zplan::plan
