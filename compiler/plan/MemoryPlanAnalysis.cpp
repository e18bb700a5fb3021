//===- MemoryPlanAnalysis.cpp - Liveness of every tensor ------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace zplan::plan {

FailureOr<func::FuncOp> getPlanFunction(ModuleOp module) {
  func::FuncOp found;
  int withBody = 0;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    ++withBody;
    if (func.getName() == "main" || !found)
      found = func;
  }
  if (!found) {
    module.emitError() << "zplan: the module has no function with a body";
    return failure();
  }
  if (withBody > 1 && found.getName() != "main") {
    module.emitError() << "zplan: several functions and none is @main";
    return failure();
  }
  if (!found.getBody().hasOneBlock()) {
    found.emitError() << "zplan: @" << found.getName()
                      << " must have exactly one block";
    return failure();
  }
  return found;
}

FailureOr<Liveness> Liveness::build(func::FuncOp func, PlanDType floatDType) {
  Liveness lv;
  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator()) {
    if (isStorageOp(&op))
      continue;
    lv.stepOf[&op] = int64_t(lv.steps.size());
    lv.steps.push_back(&op);
  }
  int64_t last = lv.lastStep();

  auto addTensor = [&](Value v, Operation *where) -> LogicalResult {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || !type.hasStaticShape()) {
      where->emitError() << "zplan-memory-plan: value of type " << v.getType()
                         << " has no static tensor shape";
      return failure();
    }
    std::optional<PlanDType> dt =
        planDTypeOf(type.getElementType(), floatDType);
    if (!dt) {
      where->emitError() << "zplan-memory-plan: element type "
                         << type.getElementType()
                         << " has no plan dtype (float, i1, i32, i64)";
      return failure();
    }
    TensorInfo t;
    t.value = v;
    t.dtype = *dt;
    t.space = spaceOf(v);
    t.bytes = elementCount(v) * dtypeBytes(*dt);
    lv.indexOf[v] = int(lv.tensors.size());
    lv.tensors.push_back(t);
    return success();
  };

  for (BlockArgument arg : body.getArguments()) {
    if (failed(addTensor(arg, func)))
      return failure();
    TensorInfo &t = lv.tensors.back();
    t.kind = TensorKind::Input;
    t.begin = 0;
    t.end = last;
  }

  auto rootOf = [&](int i) {
    while (lv.tensors[i].aliasOf >= 0)
      i = lv.tensors[i].aliasOf;
    return i;
  };

  // Ends of gathered parameters at their release, checked after all uses
  // are known.
  llvm::SmallVector<std::pair<Operation *, int>> releases;

  for (Operation &op : body.without_terminator()) {
    bool storage = isStorageOp(&op);
    int64_t step = storage ? 0 : lv.stepOf.lookup(&op);
    // Operands first: a use extends the life of the storage behind it.
    if (!storage) {
      for (Value operand : op.getOperands()) {
        auto it = lv.indexOf.find(operand);
        if (it == lv.indexOf.end())
          continue;
        int root = rootOf(it->second);
        lv.tensors[root].end = std::max(lv.tensors[root].end, step);
      }
      if (isa<dist::ReleaseOp>(op))
        releases.push_back({&op, rootOf(lv.indexOf.lookup(op.getOperand(0)))});
    }
    for (Value result : op.getResults()) {
      if (failed(addTensor(result, &op)))
        return failure();
      TensorInfo &t = lv.tensors.back();
      if (isa<graph::WeightOp>(op)) {
        t.kind = TensorKind::Weight;
      } else if (isa<dist::WeightShardOp>(op)) {
        t.kind = TensorKind::WeightShard;
      } else if (isa<graph::ConstantOp, graph::CausalMaskOp>(op)) {
        t.kind = TensorKind::Constant;
      } else if (isa<dist::GatherParamOp>(op)) {
        t.kind = TensorKind::Gathered;
      } else {
        t.collectiveResult = isCollectiveOp(&op);
      }
      if (storage) {
        t.begin = 0;
        t.end = last;
      } else {
        t.begin = t.end = step;
      }
      if (isViewOp(&op)) {
        int base = rootOf(lv.indexOf.lookup(op.getOperand(0)));
        if (lv.tensors[base].bytes == t.bytes &&
            lv.tensors[base].space == t.space)
          t.aliasOf = base;
      }
    }
  }

  // Graph outputs are read back after the run: their storage lives to the
  // end (and, being bound by the runtime, from the start).
  Operation *terminator = body.getTerminator();
  for (Value v : terminator->getOperands()) {
    auto it = lv.indexOf.find(v);
    if (it == lv.indexOf.end())
      continue;
    TensorInfo &t = lv.tensors[it->second];
    if (t.kind != TensorKind::Activation) {
      terminator->emitError()
          << "zplan-memory-plan: a graph output must be computed by an "
             "instruction, not be a graph input, weight or constant";
      return failure();
    }
    t.kind = TensorKind::Output;
    int root = rootOf(it->second);
    lv.tensors[root].begin = 0;
    lv.tensors[root].end = last;
  }

  for (auto [op, root] : releases) {
    if (lv.tensors[root].end > lv.stepOf.lookup(op)) {
      op->emitError() << "zplan-memory-plan: the released parameter is used "
                         "after its zd.release";
      return failure();
    }
  }
  return lv;
}

std::vector<BufferRequest> Liveness::requests() const {
  std::vector<BufferRequest> reqs;
  reqs.reserve(tensors.size());
  for (const TensorInfo &t : tensors) {
    BufferRequest r;
    r.bytes = t.aliasOf >= 0 ? 0 : t.bytes;
    r.space = static_cast<Space>(t.space);
    r.begin = t.begin;
    r.end = t.end;
    reqs.push_back(r);
  }
  return reqs;
}

MemoryFigures computeMemoryFigures(const Liveness &lv,
                                   const uint64_t arenaBytes[kNumSpaces]) {
  MemoryFigures f;
  std::vector<BufferRequest> gathered, activations, collectives;
  for (const TensorInfo &t : lv.tensors) {
    if (t.kind == TensorKind::Weight || t.kind == TensorKind::WeightShard)
      f.residentWeightBytes += t.bytes;
    if (t.aliasOf >= 0)
      continue;
    BufferRequest r{t.bytes, static_cast<Space>(t.space), t.begin, t.end};
    if (t.kind == TensorKind::Gathered)
      gathered.push_back(r);
    if (t.kind == TensorKind::Activation || t.kind == TensorKind::Input ||
        t.kind == TensorKind::Output)
      activations.push_back(r);
    if (t.collectiveResult)
      collectives.push_back(r);
  }
  f.peakGatheredParamBytes = peakLiveBytes(gathered, Space::Device);
  f.activationBytes = peakLiveBytes(activations, Space::Device);
  f.collectiveBufferBytes = peakLiveBytes(collectives, Space::Device);
  for (unsigned s = 0; s < kNumSpaces; ++s)
    f.arenaBytes[s] = arenaBytes[s];
  return f;
}

} // namespace zplan::plan
