//===- PrefetchGathers.cpp - --zplan-prefetch-gathers ---------------------===//
//
// Decides how far ahead of its first use each parameter fetch is issued: the
// ZeRO-3 gathers (comm stream) and the host -> device copies of parameters
// kept in host memory by --offload-param cpu (copy stream). A fetch's
// consumer waits on its event (--zplan-schedule); issued right before the
// consumer, the fetch sits on the critical path. Moved a window earlier in
// the one SPMD order, it runs on its stream while the compute stream works
// through the window, and the memory plan, which follows the block order,
// sees (and counts) the longer life of the fetched buffer.
//
// A fetch's stream runs its fetches in order, and each fetch writes bytes
// that the memory plan may have freed on the compute stream just before the
// fetch's place: a fetch cannot start before the compute stream has reached
// its place. So the place, not the stream, bounds how far a stream runs
// ahead, and the window in bytes is that bound.
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

/// Bytes of a fetched tensor, counted as --zplan-zero counts them (by the
/// element type's width), so that a window given in bytes means the same to
/// both passes.
int64_t fetchedBytes(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * int64_t((bits + 7) / 8);
}

/// The two kinds of parameter fetch, each in order on its own stream.
enum class Kind { Copy, Gather };

/// A host -> device copy of a parameter that --zplan-offload placed in host
/// memory: of a resident weight or of a ZeRO shard (not a master part, which
/// is optimizer state, nor an NVMe staging buffer, which --zplan-nvme places
/// one use ahead of its own read).
bool isParameterCopy(Operation *op) {
  auto prefetch = dyn_cast<dist::PrefetchOp>(op);
  if (!prefetch)
    return false;
  Operation *def = prefetch.getInput().getDefiningOp();
  if (auto shard = dyn_cast_or_null<dist::WeightShardOp>(def)) {
    auto role = shard->getAttrOfType<StringAttr>("zd.role");
    return !(role && role.getValue() == "master");
  }
  return isa_and_nonnull<graph::WeightOp>(def);
}

bool isFetch(Operation *op, Kind kind) {
  return kind == Kind::Gather ? isa<dist::GatherParamOp>(op)
                              : isParameterCopy(op);
}

struct Fetch {
  Operation *op = nullptr;
  int64_t bytes = 0;
  /// Block positions (indices into the program's op list before any move).
  int64_t at = 0;       ///< where the fetch is now
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
    for (func::FuncOp func : *funcs) {
      // Copies first: a shard's gather cannot go above its copy, so the
      // copies make room for the gathers.
      hoist(func, Kind::Copy);
      hoist(func, Kind::Gather);
    }
  }

  /// One layer's parameters: the distinct fetched sources' bytes over the
  /// number of attention ops (a prefill's zg.attention or a decode step's
  /// zg.cached_attention; 0 without attention), and the largest fetch.
  static std::pair<int64_t, int64_t> layerAndLargest(Block &body,
                                                     ArrayRef<Fetch> fetches) {
    llvm::DenseSet<Value> sources;
    int64_t total = 0, largest = 0;
    for (const Fetch &f : fetches) {
      largest = std::max(largest, f.bytes);
      if (sources.insert(f.op->getOperand(0)).second)
        total += f.bytes;
    }
    int64_t layers = llvm::range_size(body.getOps<graph::AttentionOp>()) +
                     llvm::range_size(body.getOps<graph::CachedAttentionOp>());
    return {layers > 0 ? total / layers : 0, largest};
  }

  /// The window when window-bytes is -1 (auto).
  /// - Gathers: one layer's parameters, and at least the largest gather (one
  ///   parameter ahead), so a model without attention still overlaps.
  /// - Copies: one layer's parameters plus the largest copy. The copies are
  ///   the slower stream (the host link), so the compute stream waits for
  ///   them and catches up; the copy stream idles only where a stretch of
  ///   compute without parameters of its own (attention, norms, the tail of
  ///   a layer before a large parameter such as the LM head) outlasts the
  ///   copies the window lets it run ahead by. With the largest parameter's
  ///   own bytes added, even the largest one is issued a whole layer ahead.
  static int64_t autoWindow(Kind kind, Block &body, ArrayRef<Fetch> fetches) {
    auto [layer, largest] = layerAndLargest(body, fetches);
    if (kind == Kind::Gather)
      return std::max(largest, layer);
    return layer + largest;
  }

  void hoist(func::FuncOp func, Kind kind) {
    Block &body = func.getBody().front();
    llvm::SmallVector<Operation *> ops;
    llvm::DenseMap<Operation *, int64_t> index;
    for (Operation &op : body.without_terminator()) {
      index[&op] = int64_t(ops.size());
      ops.push_back(&op);
    }
    const int64_t n = int64_t(ops.size());

    // The last writer of each piece of persistent storage before each
    // position: a fetch of a shard that the program updates in place (the
    // training step's optimizer) must not move above the update.
    llvm::StringMap<int64_t> lastWrite;
    llvm::SmallVector<Fetch> fetches;
    for (Operation *op : ops) {
      if (isFetch(op, kind)) {
        Fetch f;
        f.op = op;
        f.bytes = fetchedBytes(op->getResult(0));
        f.at = index[op];
        f.firstUse = n;
        f.end = f.at;
        for (Operation *user : op->getUsers()) {
          // The terminator is not in the list: a returned result lives to
          // the end.
          auto it = index.find(body.findAncestorOpInBlock(*user));
          int64_t u = it == index.end() ? n : it->second;
          f.end = std::max(f.end, u);
          if (!isa<dist::ReleaseOp>(user))
            f.firstUse = std::min(f.firstUse, u);
        }
        Value source = op->getOperand(0);
        if (Operation *def = source.getDefiningOp())
          if (def->getBlock() == &body)
            f.earliest = index[def] + 1;
        std::string key = persistentKey(source);
        if (!key.empty()) {
          auto it = lastWrite.find(key);
          if (it != lastWrite.end())
            f.earliest = std::max(f.earliest, it->second + 1);
        }
        fetches.push_back(f);
      }
      for (Value written : writtenOperands(op)) {
        std::string key = persistentKey(written);
        if (!key.empty())
          lastWrite[key] = index[op];
      }
    }
    (kind == Kind::Gather ? numGathers : numCopies) += fetches.size();
    if (fetches.empty())
      return;

    const int64_t window = windowBytes < 0 ? autoWindow(kind, body, fetches)
                                           : int64_t(windowBytes);
    // The window decided, on the program, for the report and the lit tests.
    func->setAttr(
        kind == Kind::Gather ? "zplan.gather_window_bytes"
                             : "zplan.copy_window_bytes",
        IntegerAttr::get(IntegerType::get(func.getContext(), 64), window));

    // Fetched bytes of this kind alive at each position, over the fetches
    // placed so far (a later fetch starts no earlier than an earlier one, so
    // each pair is checked once, when the later one is placed).
    llvm::SmallVector<int64_t> live(n + 1, 0);
    // Where each fetch goes: before ops[pos]; a fetch that stays has
    // pos == at.
    llvm::SmallVector<int64_t> pos(fetches.size());
    for (size_t i = 0; i < fetches.size(); ++i) {
      Fetch &f = fetches[i];
      auto fits = [&](int64_t from) {
        if (maxLiveBytes <= 0)
          return true;
        for (int64_t k = from; k <= std::min(f.end, n); ++k)
          if (live[k] + f.bytes > int64_t(maxLiveBytes))
            return false;
        return true;
      };
      // Fetches keep their order on their stream: the one needed first is
      // issued first. An earlier fetch that stays where it is occupies its
      // own position, so this one goes after it.
      int64_t floor = f.earliest;
      if (i > 0)
        floor = std::max(floor, pos[i - 1] == fetches[i - 1].at
                                    ? fetches[i - 1].at + 1
                                    : pos[i - 1]);
      // Walk back over the fetches needed before this one: this fetch moves
      // to an earlier fetch's first reader while the bytes fetched from
      // there up to this one's reader (its own included) fit the window.
      int64_t target = f.at;
      int64_t ahead = f.bytes;
      for (int64_t j = int64_t(i) - 1; j >= 0 && window > 0 && f.firstUse < n;
           --j) {
        int64_t cand = fetches[j].firstUse;
        if (cand >= n || cand < floor || ahead > window || !fits(cand))
          break;
        target = std::min(target, cand);
        ahead += fetches[j].bytes;
      }
      pos[i] = target < f.at ? target : f.at;
      if (pos[i] < f.at)
        ++numHoisted;
      for (int64_t k = pos[i]; k <= std::min(f.end, n); ++k)
        live[k] += f.bytes;
    }

    // Moves in fetch order: fetches sent before the same op keep their
    // order.
    for (size_t i = 0; i < fetches.size(); ++i)
      if (pos[i] < fetches[i].at)
        fetches[i].op->moveBefore(ops[pos[i]]);
  }
};

} // namespace
} // namespace zplan::plan
