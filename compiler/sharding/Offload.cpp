//===- Offload.cpp - --zplan-offload --------------------------------------===//
//
// Parameter offload (ZeRO-Inference): parameters live in pinned host memory
// and reach the device through zd.prefetch on the copy stream. Prefetches are
// pipelined one parameter ahead: the copy for parameter k is issued where
// parameter k - 1 is gathered (ZeRO-3) or first used (resident weights), so
// it overlaps the compute that uses k - 1. That is the least overlap; the
// plan phase (--zplan-prefetch-gathers) then moves each copy a window of
// parameter bytes further ahead, as it does the ZeRO-3 gathers, so that the
// copy stream (the host link, slower than the compute) never waits for the
// compute stream to reach a copy's place.
//
//===----------------------------------------------------------------------===//

#include "compiler/sharding/Passes.h"
#include "compiler/sharding/Sharding.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

namespace zplan::sharding {
#define GEN_PASS_DEF_ZPLANOFFLOAD
#include "compiler/sharding/Passes.h.inc"
} // namespace zplan::sharding

using namespace mlir;
using namespace zplan;
using namespace zplan::sharding;
namespace zg = zplan::graph;

namespace {

/// One parameter to bring to the device: a ZeRO shard (through its gather)
/// or a resident weight (through its first use).
struct Item {
  Operation *source; // zd.weight_shard or zg.weight
  Operation *point;  // the gather or the first user, in the block
  int64_t position;
};

struct ZplanOffloadPass
    : zplan::sharding::impl::ZplanOffloadBase<ZplanOffloadPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (param != "none" && param != "cpu") {
      module.emitError("offload param must be 'none' or 'cpu', got '")
          << std::string(param) << "'";
      return signalPassFailure();
    }
    if (param == "none")
      return;
    module.walk([&](zg::WeightOp w) {
      for (Operation *user : w->getUsers())
        if (writes(user, w.getResult()))
          writtenWeights.insert(w.getName());
    });
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal())
        offload(func);
  }

  /// Parameters a program writes (a training step's update): a resident
  /// weight written anywhere stays on the device in every program, since a
  /// persistent tensor has one placement.
  llvm::DenseSet<StringRef> writtenWeights;

  static bool writes(Operation *op, Value v) {
    if (auto a = dyn_cast<zg::AdamwOp>(op))
      return a.getParam() == v || a.getM() == v || a.getV() == v;
    if (isa<zg::AssignOp, zg::AccumulateOp>(op))
      return op->getOperand(0) == v;
    return false;
  }

  void offload(func::FuncOp func) {
    Block &body = func.getBody().front();
    DenseMap<Operation *, int64_t> index;
    int64_t n = 0;
    for (Operation &op : body)
      index[&op] = n++;
    SmallVector<Item> items;
    OpBuilder b(func.getContext());
    for (Operation &op : body) {
      if (auto shard = dyn_cast<dist::WeightShardOp>(op)) {
        // A master part is optimizer state: --offload-optimizer places it.
        auto role = shard->getAttrOfType<StringAttr>("zd.role");
        if (role && role.getValue() == "master")
          continue;
        shard.setSpace("host");
        // The update writes the shard in place where it lives; only its
        // reads get a device copy.
        for (Operation *user : shard->getUsers())
          if (!writes(user, shard.getResult()))
            items.push_back(
                {&op, user, index[body.findAncestorOpInBlock(*user)]});
      } else if (auto w = dyn_cast<zg::WeightOp>(op)) {
        if (w->use_empty() || writtenWeights.contains(w.getName()))
          continue;
        w->setAttr(kSpace, b.getStringAttr("host"));
        int64_t first = INT64_MAX;
        Operation *firstOp = nullptr;
        for (Operation *user : w->getUsers()) {
          Operation *top = body.findAncestorOpInBlock(*user);
          if (index[top] < first) {
            first = index[top];
            firstOp = top;
          }
        }
        items.push_back({&op, firstOp, first});
      }
    }
    llvm::stable_sort(items, [](const Item &a, const Item &b) {
      return a.position < b.position;
    });
    for (auto [k, item] : llvm::enumerate(items)) {
      Operation *where = items[k ? k - 1 : 0].point;
      // Never ahead of the parameter's own definition.
      if (index[where] <= index[item.source])
        b.setInsertionPointAfter(item.source);
      else
        b.setInsertionPoint(where);
      Value host = item.source->getResult(0);
      auto prefetch = dist::PrefetchOp::create(b, item.source->getLoc(),
                                               host.getType(), host);
      ++numPrefetch;
      if (isa<dist::WeightShardOp>(item.source)) {
        item.point->replaceUsesOfWith(host, prefetch.getResult());
        continue;
      }
      // A resident weight's device copy lives from its prefetch to its last
      // use; after that its storage is free again.
      Operation *last = nullptr;
      int64_t lastIndex = -1;
      for (Operation *user : host.getUsers()) {
        if (user == prefetch)
          continue;
        Operation *top = body.findAncestorOpInBlock(*user);
        if (index.count(top) && index[top] > lastIndex) {
          lastIndex = index[top];
          last = top;
        }
      }
      host.replaceAllUsesExcept(prefetch.getResult(), prefetch);
      if (last && !isa<func::ReturnOp>(last)) {
        b.setInsertionPointAfter(last);
        dist::ReleaseOp::create(b, item.source->getLoc(), prefetch.getResult());
      }
    }
  }
};

} // namespace
