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
    FailureOr<func::FuncOp> func = getPlanFunction(module);
    if (failed(func))
      return signalPassFailure();
    Block &body = func->getBody().front();
    MLIRContext *ctx = module.getContext();

    // SPMD: every rank runs this block top to bottom. A collective under a
    // region (scf.if on a rank id, a loop with a data-dependent trip count)
    // could make ranks disagree, so regions are refused outright: the
    // collective sequence is then the block order, the same on every rank.
    for (Operation &op : body.without_terminator()) {
      if (op.getNumRegions() != 0) {
        op.emitError() << "zplan-schedule: ops with regions are not "
                          "supported: a collective under control flow could "
                          "differ between ranks";
        return signalPassFailure();
      }
    }

    // Per stream pair: the latest producer position (in schedule order)
    // that the consumer stream already waits for; a later wait on an
    // earlier producer of the same stream is implied by stream order.
    int64_t waited[3][3];
    for (auto &row : waited)
      for (int64_t &v : row)
        v = -1;
    llvm::DenseMap<Operation *, int64_t> stepOf;
    llvm::DenseMap<Operation *, int64_t> eventOf;
    int64_t numEventsSoFar = 0;
    uint64_t hash = zrt::kFnvOffsetBasis;
    int64_t step = 0;

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
      for (Value operand : op.getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (!producer || isStorageOp(producer))
          continue;
        StreamKind from = streamOf(producer);
        if (from == stream)
          continue;
        int64_t producerStep = stepOf.lookup(producer);
        int64_t &seen = waited[unsigned(stream)][unsigned(from)];
        if (producerStep <= seen)
          continue;
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
      }
      if (!waits.empty())
        op.setAttr(attr::kWaits, DenseI64ArrayAttr::get(ctx, waits));

      if (isCollectiveOp(&op)) {
        Value in = op.getOperand(0);
        auto elementType = cast<ShapedType>(in.getType()).getElementType();
        std::optional<PlanDType> dt = planDTypeOf(elementType, *floatDType);
        if (!dt) {
          op.emitError() << "zplan-schedule: collective on unsupported "
                            "element type "
                         << elementType;
          return signalPassFailure();
        }
        if (axisOf(&op) == AxisKind::None) {
          op.emitError() << "zplan-schedule: collective without a mesh axis "
                            "(expected axis = \"tp\" or \"dp\")";
          return signalPassFailure();
        }
        hash = zrt::collective_hash_step(hash, *opcodeOf(&op),
                                         uint8_t(axisOf(&op)), uint8_t(*dt),
                                         elementCount(in));
        ++numCollectives;
      }
      ++step;
    }
    numInstructions = step;
    numEvents = numEventsSoFar;
    module->setAttr(
        attr::kNumEvents,
        IntegerAttr::get(IntegerType::get(ctx, 64), numEventsSoFar));
    module->setAttr(
        attr::kCollectiveHash,
        IntegerAttr::get(IntegerType::get(ctx, 64, IntegerType::Unsigned),
                         llvm::APInt(64, hash)));
    module->setAttr(attr::kDType, StringAttr::get(ctx, dtype));
  }
};

} // namespace
} // namespace zplan::plan
