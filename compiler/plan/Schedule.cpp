//===- Schedule.cpp - --zplan-schedule ------------------------------------===//
//
// Fixes the one SPMD instruction order, a stream per instruction and the
// events between streams, and records the collective-sequence hash.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/OpInfo.h"
#include "compiler/plan/Passes.h"

#include "zrt/plan_file.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANSCHEDULE
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

struct SchedulePass : impl::ZplanScheduleBase<SchedulePass> {
  using ZplanScheduleBase::ZplanScheduleBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<PlanDType> floatDType = parseFloatDType(dtype);
    if (!floatDType) {
      module.emitError() << "zplan-schedule: unknown dtype '" << dtype
                         << "' (expected fp32, bf16 or fp16)";
      return signalPassFailure();
    }
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(module);
    if (failed(funcs))
      return signalPassFailure();
    MLIRContext *ctx = module.getContext();
    // Attributes of an earlier run on the module (format 1 kept them there).
    module->removeAttr(attr::kNumEvents);
    module->removeAttr(attr::kCollectiveHash);
    for (func::FuncOp func : *funcs)
      if (failed(scheduleProgram(func, *floatDType)))
        return signalPassFailure();
    module->setAttr(attr::kDType, StringAttr::get(ctx, dtype));
  }

  /// Streams, events and the collective hash of one program; the program's
  /// event count and hash go on its function.
  LogicalResult scheduleProgram(func::FuncOp func, PlanDType floatDType) {
    Block &body = func.getBody().front();
    MLIRContext *ctx = func.getContext();

    // SPMD: every rank runs this block top to bottom. A collective under a
    // region (scf.if on a rank id, a loop with a data-dependent trip count)
    // could make ranks disagree, so regions are refused outright: the
    // collective sequence is then the block order, the same on every rank.
    for (Operation &op : body.without_terminator()) {
      if (op.getNumRegions() != 0)
        return op.emitError() << "zplan-schedule: ops with regions are not "
                                 "supported: a collective under control flow "
                                 "could differ between ranks";
    }

    // Per stream pair: the latest producer position (in schedule order)
    // that the consumer stream already waits for; a later wait on an
    // earlier producer of the same stream is implied by stream order.
    int64_t waited[kNumStreams][kNumStreams];
    for (auto &row : waited)
      for (int64_t &v : row)
        v = -1;
    llvm::DenseMap<Operation *, int64_t> stepOf;
    llvm::DenseMap<Operation *, int64_t> eventOf;
    int64_t numEventsSoFar = 0;
    uint64_t hash = zrt::kFnvOffsetBasis;
    int64_t step = 0;

    // Persistent storage changes under the SSA values that name it: a write
    // op (zg.assign / adamw / accumulate) has no result that later readers
    // could depend on. Per persistent value: its last writer and the readers
    // since, so that a write waits for every earlier reader on another stream
    // (write-after-read) and a later reader or writer on another stream waits
    // for the write (read-after-write, write-after-write).
    struct Access {
      Operation *lastWriter = nullptr;
      llvm::SmallVector<Operation *> readersSinceWrite;
    };
    llvm::StringMap<Access> access;
    // A transient value written in place after its definition (the host
    // staging buffer of an NVMe-resident master part, updated by zg.adamw):
    // its later readers depend on that writer, not only on the producer.
    llvm::DenseMap<Value, Operation *> transientWriter;

    auto waitFor = [&](Operation *producer, StreamKind stream,
                       llvm::SmallVectorImpl<int64_t> &waits) {
      StreamKind from = streamOf(producer);
      if (from == stream)
        return;
      int64_t producerStep = stepOf.lookup(producer);
      int64_t &seen = waited[unsigned(stream)][unsigned(from)];
      if (producerStep <= seen)
        return;
      seen = producerStep;
      auto [it, inserted] = eventOf.try_emplace(producer, numEventsSoFar);
      if (inserted) {
        producer->setAttr(
            attr::kSignal,
            IntegerAttr::get(IntegerType::get(ctx, 64), numEventsSoFar));
        ++numEventsSoFar;
      }
      if (!llvm::is_contained(waits, it->second))
        waits.push_back(it->second);
    };

    // The ops of one program, so that producers are ordered by their step
    // (waitFor relies on a producer's step being known).
    for (Operation &op : body.without_terminator()) {
      if (isStorageOp(&op))
        continue;
      // Clear what an earlier run of the pass wrote, so it can run twice.
      op.removeAttr(attr::kWaits);
      op.removeAttr(attr::kSignal);
      StreamKind stream = streamOf(&op);
      op.setAttr(attr::kStream, StringAttr::get(ctx, streamName(stream)));
      stepOf[&op] = step;

      llvm::SmallVector<int64_t> waits;
      llvm::SmallVector<Value, 3> written = writtenOperands(&op);
      for (Value operand : op.getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (!producer)
          continue;
        if (isStorageOp(producer)) {
          // Persistent storage: order against its writers in this program.
          std::string key = persistentKey(operand);
          if (key.empty())
            continue;
          Access &a = access[key];
          if (a.lastWriter)
            waitFor(a.lastWriter, stream, waits);
          if (llvm::is_contained(written, operand))
            for (Operation *reader : a.readersSinceWrite)
              waitFor(reader, stream, waits);
          continue;
        }
        waitFor(producer, stream, waits);
        if (Operation *writer = transientWriter.lookup(operand))
          if (writer != &op)
            waitFor(writer, stream, waits);
      }
      for (Value operand : op.getOperands()) {
        std::string key = persistentKey(operand);
        if (key.empty()) {
          if (llvm::is_contained(written, operand))
            transientWriter[operand] = &op;
          continue;
        }
        Access &a = access[key];
        if (llvm::is_contained(written, operand)) {
          a.lastWriter = &op;
          a.readersSinceWrite.clear();
        } else {
          a.readersSinceWrite.push_back(&op);
        }
      }
      if (!waits.empty())
        op.setAttr(attr::kWaits, DenseI64ArrayAttr::get(ctx, waits));

      if (isCollectiveOp(&op)) {
        Value in = op.getOperand(0);
        std::optional<PlanDType> dt = planDTypeOfValue(in, floatDType);
        if (!dt)
          return op.emitError() << "zplan-schedule: collective on unsupported "
                                   "element type "
                                << cast<ShapedType>(in.getType())
                                       .getElementType();
        if (axisOf(&op) == AxisKind::None)
          return op.emitError()
                 << "zplan-schedule: collective without a mesh axis "
                    "(expected axis = \"tp\" or \"dp\")";
        hash = zrt::collective_hash_step(hash, *opcodeOf(&op),
                                         uint8_t(axisOf(&op)), uint8_t(*dt),
                                         elementCount(in));
        ++numCollectives;
      }
      ++step;
    }
    numInstructions += step;
    numEvents += numEventsSoFar;
    func->setAttr(attr::kNumEvents,
                  IntegerAttr::get(IntegerType::get(ctx, 64), numEventsSoFar));
    func->setAttr(
        attr::kCollectiveHash,
        IntegerAttr::get(IntegerType::get(ctx, 64, IntegerType::Unsigned),
                         llvm::APInt(64, hash)));
    return success();
  }
};

} // namespace
} // namespace zplan::plan
