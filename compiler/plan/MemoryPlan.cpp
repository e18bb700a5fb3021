//===- MemoryPlan.cpp - --zplan-memory-plan -------------------------------===//
//
// Places every tensor in its arena from the liveness analysis, writes the
// offsets into the IR, orders storage reuse across streams with events and
// checks the per-rank memory budgets.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/OpInfo.h"
#include "compiler/plan/Passes.h"
#include "compiler/plan/Report.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <array>
#include <limits>
#include <map>

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANMEMORYPLAN
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

/// Budget messages give the count in bytes and in binary units.
std::string formatBytes(uint64_t bytes) {
  return plan::formatBytes(bytes, " bytes");
}

struct MemoryPlanPass : impl::ZplanMemoryPlanBase<MemoryPlanPass> {
  using ZplanMemoryPlanBase::ZplanMemoryPlanBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    std::optional<PlanDType> floatDType = parseFloatDType(dtype);
    if (!floatDType) {
      module.emitError() << "zplan-memory-plan: unknown dtype '" << dtype
                         << "' (expected fp32, bf16 or fp16)";
      return signalPassFailure();
    }
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(module);
    if (failed(funcs))
      return signalPassFailure();
    for (func::FuncOp f : *funcs)
      if (!f->hasAttr(attr::kNumEvents)) {
        f.emitError() << "zplan-memory-plan: @" << f.getName()
                      << " has no schedule (run --zplan-schedule first)";
        return signalPassFailure();
      }
    FailureOr<ModuleLiveness> ml = ModuleLiveness::build(module, *floatDType);
    if (failed(ml))
      return signalPassFailure();
    ArenaPlan placed = planArenas(ml->requests());
    for (const TensorInfo &t : ml->tensors)
      (t.aliasOf >= 0 ? numAliases : numBuffers) += 1;

    for (auto [p, func] : llvm::enumerate(ml->funcs)) {
      const Liveness &lv = ml->programs[p];
      const std::vector<int> &globalOf = ml->globalOf[p];
      // This program's view of the placement, by its own tensor indices; a
      // view takes its base's offset.
      ArenaPlan local;
      for (size_t i = 0; i < lv.tensors.size(); ++i) {
        int g = globalOf[i];
        while (ml->tensors[g].aliasOf >= 0)
          g = ml->tensors[g].aliasOf;
        local.offsets.push_back(placed.offsets[g]);
        local.alignedBytes.push_back(placed.alignedBytes[g]);
      }
      auto offsetOf = [&](Value v) -> int64_t {
        return int64_t(local.offsets[lv.indexOf.lookup(v)]);
      };
      Block &body = func.getBody().front();
      for (BlockArgument arg : body.getArguments())
        func.setArgAttr(
            arg.getArgNumber(), attr::kOffset,
            IntegerAttr::get(IntegerType::get(ctx, 64), offsetOf(arg)));
      for (Operation &op : body.without_terminator()) {
        if (op.getNumResults() == 0)
          continue;
        llvm::SmallVector<int64_t> offsets;
        for (Value r : op.getResults())
          offsets.push_back(offsetOf(r));
        op.setAttr(attr::kOffsets, DenseI64ArrayAttr::get(ctx, offsets));
      }
      if (failed(orderReuseAcrossStreams(lv, local, func)))
        return signalPassFailure();
    }

    // The nvme space's size (the rank's file) follows only when it is used,
    // so that plans without NVMe keep their two arenas.
    SmallVector<int64_t> arenas = {int64_t(placed.arenaBytes[0]),
                                   int64_t(placed.arenaBytes[1])};
    if (placed.arenaBytes[2])
      arenas.push_back(int64_t(placed.arenaBytes[2]));
    module->setAttr(attr::kArenaBytes, DenseI64ArrayAttr::get(ctx, arenas));
    module->setAttr(
        attr::kPeakLiveBytes,
        DenseI64ArrayAttr::get(ctx, {int64_t(placed.peakLiveBytes[0]),
                                     int64_t(placed.peakLiveBytes[1])}));

    const uint64_t deviceTotal = placed.arenaBytes[0] + deviceReserve;
    if (gpuMem != 0 && deviceTotal > gpuMem) {
      auto diag = module.emitError()
                  << "zplan-memory-plan: the device arena needs "
                  << formatBytes(placed.arenaBytes[0]);
      if (deviceReserve)
        diag << " plus " << formatBytes(deviceReserve)
             << " the backend reserves (workspace, CUDA context)";
      diag << " per rank but --gpu-mem is " << formatBytes(gpuMem)
           << ": over by " << formatBytes(deviceTotal - gpuMem)
          << "; try --zero 3 (with dp > 1), --offload-param cpu, a larger "
             "--tp or a smaller --batch";
      return signalPassFailure();
    }
    if (hostMem != 0 && placed.arenaBytes[1] > hostMem) {
      module.emitError()
          << "zplan-memory-plan: the host arena needs "
          << formatBytes(placed.arenaBytes[1]) << " per rank but --host-mem is "
          << formatBytes(hostMem) << ": over by "
          << formatBytes(placed.arenaBytes[1] - hostMem)
          << "; try more ranks (--world with --zero 3 shards the parameters "
             "over more dp ranks), a larger --tp or --offload-param none";
      return signalPassFailure();
    }
  }

  /// A buffer that reuses bytes last touched on another stream must not be
  /// written before that stream is done with them. For each instruction
  /// that writes a result, find the buffers freed earlier on other streams
  /// whose bytes it overlaps and wait on the latest such op of each stream
  /// (streams run in order, so that covers the earlier ones).
  LogicalResult orderReuseAcrossStreams(const Liveness &lv,
                                        const ArenaPlan &placed,
                                        func::FuncOp module) {
    MLIRContext *ctx = module.getContext();
    auto numEventsAttr = module->getAttrOfType<IntegerAttr>(attr::kNumEvents);
    int64_t numEvents = numEventsAttr.getInt();

    struct Freed {
      unsigned space;
      uint64_t begin, end;
      int64_t lastUse; // the last step touching it on this stream
    };
    // freed[t]: storage whose last touch on stream t has happened, pending
    // until every other stream is ordered after that touch.
    std::vector<Freed> freed[kNumStreams];
    // synced[s][t]: the latest step of stream t that stream s is ordered
    // after, through waits this pass or the schedule added.
    int64_t synced[kNumStreams][kNumStreams];
    for (auto &row : synced)
      for (int64_t &v : row)
        v = -1;

    // The steps at which each owning tensor's storage is released, with the
    // last touching step per stream (producer included: a dead result is
    // still written).
    std::map<int64_t, std::vector<int>> endingAt;
    for (size_t i = 0; i < lv.tensors.size(); ++i) {
      const TensorInfo &t = lv.tensors[i];
      if (t.aliasOf >= 0 || t.bytes == 0 || lv.isWholeRun(t))
        continue;
      endingAt[t.end].push_back(int(i));
    }
    // Which tensors (owning storage) each step touches, by root.
    auto touchesOf = [&](Operation *op, llvm::SmallVectorImpl<int> &roots) {
      auto add = [&](Value v) {
        auto it = lv.indexOf.find(v);
        if (it == lv.indexOf.end())
          return;
        int i = it->second;
        while (lv.tensors[i].aliasOf >= 0)
          i = lv.tensors[i].aliasOf;
        roots.push_back(i);
      };
      for (Value v : op->getOperands())
        add(v);
      for (Value v : op->getResults())
        add(v);
    };
    // lastTouch[tensor][stream]
    std::vector<std::array<int64_t, kNumStreams>> lastTouch(
        lv.tensors.size(), std::array<int64_t, kNumStreams>{-1, -1, -1, -1});
    bool used[kNumStreams] = {false, false, false, false};
    size_t prunedSize[kNumStreams] = {0, 0, 0, 0};
    for (Operation *op : lv.steps) {
      used[unsigned(streamOf(op))] = true;
      llvm::SmallVector<int> roots;
      touchesOf(op, roots);
      unsigned s = unsigned(streamOf(op));
      int64_t step = lv.stepOf.lookup(op);
      for (int r : roots)
        lastTouch[r][s] = std::max(lastTouch[r][s], step);
    }

    // With one stream in use, stream order alone makes reuse safe.
    if (int(used[0]) + int(used[1]) + int(used[2]) + int(used[3]) <= 1)
      return success();

    auto eventOfStep = [&](int64_t step) -> int64_t {
      Operation *producer = lv.steps[step];
      if (auto sig = producer->getAttrOfType<IntegerAttr>(attr::kSignal))
        return sig.getInt();
      producer->setAttr(attr::kSignal,
                        IntegerAttr::get(IntegerType::get(ctx, 64), numEvents));
      return numEvents++;
    };

    for (Operation *op : lv.steps) {
      int64_t step = lv.stepOf.lookup(op);
      unsigned s = unsigned(streamOf(op));
      // Waits the schedule already placed order this stream after the
      // producers' streams.
      llvm::SmallVector<int64_t> waits;
      if (auto existing = op->getAttrOfType<DenseI64ArrayAttr>(attr::kWaits))
        waits.assign(existing.asArrayRef().begin(),
                     existing.asArrayRef().end());
      for (Value operand : op->getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (!producer || isStorageOp(producer))
          continue;
        unsigned t = unsigned(streamOf(producer));
        if (t != s)
          synced[s][t] = std::max(synced[s][t], lv.stepOf.lookup(producer));
      }
      // Bytes this op writes.
      for (Value result : op->getResults()) {
        int i = lv.indexOf.lookup(result);
        const TensorInfo &t = lv.tensors[i];
        if (t.aliasOf >= 0 || t.bytes == 0)
          continue;
        uint64_t b = placed.offsets[i], e = b + placed.alignedBytes[i];
        for (unsigned other = 0; other < kNumStreams; ++other) {
          if (other == s)
            continue;
          int64_t latest = -1;
          for (const Freed &f : freed[other])
            if (f.space == t.space && f.lastUse > synced[s][other] &&
                f.begin < e && b < f.end)
              latest = std::max(latest, f.lastUse);
          if (latest < 0)
            continue;
          int64_t event = eventOfStep(latest);
          if (!llvm::is_contained(waits, event))
            waits.push_back(event);
          synced[s][other] = latest;
          ++numReuseEvents;
        }
      }
      if (!waits.empty())
        op->setAttr(attr::kWaits, DenseI64ArrayAttr::get(ctx, waits));

      // Storage whose life ends here becomes reusable; remember, per
      // stream, the last op that touched it.
      auto ending = endingAt.find(step);
      if (ending != endingAt.end()) {
        for (int i : ending->second) {
          const TensorInfo &t = lv.tensors[i];
          for (unsigned str = 0; str < kNumStreams; ++str)
            if (lastTouch[i][str] >= 0)
              freed[str].push_back({t.space, placed.offsets[i],
                                    placed.offsets[i] + placed.alignedBytes[i],
                                    lastTouch[i][str]});
        }
      }
      // Drop entries every other used stream is already ordered after;
      // only when a list has doubled, to keep this linear overall.
      for (unsigned str = 0; str < kNumStreams; ++str) {
        if (freed[str].size() <= std::max<size_t>(64, 2 * prunedSize[str]))
          continue;
        int64_t covered = std::numeric_limits<int64_t>::max();
        for (unsigned o = 0; o < kNumStreams; ++o)
          if (o != str && used[o])
            covered = std::min(covered, synced[o][str]);
        llvm::erase_if(freed[str],
                       [&](const Freed &f) { return f.lastUse <= covered; });
        prunedSize[str] = freed[str].size();
      }
    }
    module->setAttr(attr::kNumEvents,
                    IntegerAttr::get(IntegerType::get(ctx, 64), numEvents));
    return success();
  }
};

} // namespace
} // namespace zplan::plan
