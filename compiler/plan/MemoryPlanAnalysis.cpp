//===- MemoryPlanAnalysis.cpp - Liveness of every tensor ------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <limits>

using namespace mlir;

namespace zplan::plan {

FailureOr<SmallVector<func::FuncOp>> getPrograms(ModuleOp module) {
  SmallVector<func::FuncOp> funcs;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal() || func.isPrivate())
      continue;
    if (!func.getBody().hasOneBlock()) {
      func.emitError() << "zplan: @" << func.getName()
                       << " must have exactly one block";
      return failure();
    }
    funcs.push_back(func);
  }
  if (funcs.empty()) {
    module.emitError() << "zplan: the module has no public function with a "
                          "body (each one is a program of the plan)";
    return failure();
  }
  return funcs;
}

FailureOr<Liveness> Liveness::build(func::FuncOp func, PlanDType floatDType) {
  Liveness lv;
  // A plan with NVMe storage moves host staging buffers with direct I/O:
  // every host and nvme buffer is a whole number of the alignment
  // (--zplan-nvme), so that every offset placed in those spaces is one too.
  uint64_t ioAlign = 0;
  if (auto module = func->getParentOfType<ModuleOp>())
    if (auto a = module->getAttrOfType<IntegerAttr>("zplan.nvme_alignment"))
      ioAlign = uint64_t(a.getInt());
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
    std::optional<PlanDType> dt = planDTypeOfValue(v, floatDType);
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
    if (ioAlign && t.space != unsigned(Space::Device))
      t.reserved = (t.bytes + ioAlign - 1) / ioAlign * ioAlign;
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
    // A splat constant that only feeds fills is an instruction's float, not
    // a tensor (fillValueOf).
    if (isFillOnlyConstant(&op))
      continue;
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
      // A dp reduction of gradients: its input is a bucket for the report.
      if (isa<dist::AllReduceOp, dist::ReduceScatterOp>(op) &&
          axisOf(&op) == AxisKind::Dp)
        lv.tensors[rootOf(lv.indexOf.lookup(op.getOperand(0)))]
            .gradientBucket = true;
    }
    for (Value result : op.getResults()) {
      if (failed(addTensor(result, &op)))
        return failure();
      TensorInfo &t = lv.tensors.back();
      if (isa<graph::WeightOp>(op)) {
        t.kind = TensorKind::Weight;
      } else if (isa<dist::WeightShardOp>(op)) {
        t.kind = TensorKind::WeightShard;
      } else if (auto st = dyn_cast<graph::StateOp>(op)) {
        StringRef kind = st.getKind();
        t.kind = kind == "master"                           ? TensorKind::Master
                 : kind == "moment1" || kind == "moment2" ? TensorKind::Moment
                 : kind == "grad"                           ? TensorKind::Grad
                                                            : TensorKind::State;
      } else if (isa<graph::ConstantOp, graph::CausalMaskOp>(op)) {
        t.kind = TensorKind::Constant;
      } else if (isa<dist::GatherParamOp>(op)) {
        t.kind = TensorKind::Gathered;
      } else {
        t.collectiveResult = isCollectiveOp(&op);
      }
      t.key = persistentKey(result);
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

  // In a program split into batch chunks (--zplan-overlap-chunks marks it),
  // a tp collective reads its operands on the comm stream while the compute
  // stream runs ahead with the other chunk. Bytes freed there and reused by a compute step would make that step
  // wait for the collective (--zplan-memory-plan orders reuse across
  // streams), so they stay reserved until the compute stream waits for the
  // collective anyway: the first compute reader of its result. Collectives
  // over dp (gradient reductions, whose results the optimizer may read only
  // at the end of the step) keep the plain lifetimes.
  const bool chunked = func->hasAttr("zplan.overlap_chunks");
  for (Operation *op : lv.steps) {
    if (!chunked || !isCollectiveOp(op) || axisOf(op) != AxisKind::Tp)
      continue;
    int64_t sync = std::numeric_limits<int64_t>::max();
    for (Value r : op->getResults())
      for (Operation *user : r.getUsers())
        if (streamOf(user) == StreamKind::Compute && lv.stepOf.count(user))
          sync = std::min(sync, lv.stepOf.lookup(user));
    if (sync == std::numeric_limits<int64_t>::max())
      continue;
    for (Value operand : op->getOperands()) {
      auto it = lv.indexOf.find(operand);
      if (it == lv.indexOf.end())
        continue;
      TensorInfo &t = lv.tensors[rootOf(it->second)];
      t.end = std::max(t.end, sync - 1);
    }
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

FailureOr<ModuleLiveness> ModuleLiveness::build(ModuleOp module,
                                                PlanDType floatDType) {
  ModuleLiveness ml;
  FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(module);
  if (failed(funcs))
    return failure();
  ml.funcs = *funcs;
  int64_t total = 0;
  for (func::FuncOp f : ml.funcs) {
    FailureOr<Liveness> lv = Liveness::build(f, floatDType);
    if (failed(lv))
      return failure();
    total += int64_t(lv->steps.size());
    ml.programs.push_back(std::move(*lv));
  }
  const int64_t last = total > 0 ? total - 1 : 0;
  llvm::StringMap<int> byKey;
  llvm::StringMap<Value> stateByName;
  int64_t offset = 0;
  for (auto [p, lv] : llvm::enumerate(ml.programs)) {
    std::vector<int> &globalOf = ml.globalOf.emplace_back();
    for (auto [i, t] : llvm::enumerate(lv.tensors)) {
      if (!t.key.empty()) {
        // A zg.state name means one tensor: the same name with another type
        // in another program is a mistake of the program's author.
        if (auto st = t.value.getDefiningOp<graph::StateOp>()) {
          auto [named, fresh] = stateByName.try_emplace(st.getName(), t.value);
          if (!fresh && named->second.getType() != t.value.getType()) {
            st.emitError() << "zplan-memory-plan: state '" << st.getName()
                           << "' has type " << t.value.getType()
                           << " here but " << named->second.getType()
                           << " in another program";
            return failure();
          }
        }
        auto it = byKey.find(t.key);
        if (it != byKey.end()) {
          ml.tensors[it->second].gradientBucket |= t.gradientBucket;
          globalOf.push_back(it->second);
          continue;
        }
        byKey[t.key] = int(ml.tensors.size());
      }
      TensorInfo g = t;
      if (isWholePlan(t.kind)) {
        g.begin = 0;
        g.end = last;
      } else {
        g.begin = t.begin + offset;
        g.end = t.end + offset;
      }
      // Bases come before their views, so the base is mapped already.
      g.aliasOf = t.aliasOf >= 0 ? globalOf[t.aliasOf] : -1;
      globalOf.push_back(int(ml.tensors.size()));
      ml.tensors.push_back(g);
    }
    offset += int64_t(lv.steps.size());
  }
  // A transient view of whole-plan storage extends nothing: its base already
  // spans the timeline.
  return ml;
}

std::vector<BufferRequest> ModuleLiveness::requests() const {
  std::vector<BufferRequest> reqs;
  reqs.reserve(tensors.size());
  for (const TensorInfo &t : tensors)
    reqs.push_back({t.aliasOf >= 0 ? 0 : t.reservedBytes(),
                    static_cast<Space>(t.space),
                    t.begin, t.end});
  return reqs;
}

MemoryFigures computeMemoryFigures(const ModuleLiveness &lv,
                                   const uint64_t arenaBytes[kNumSpaces]) {
  MemoryFigures f;
  std::vector<BufferRequest> gathered, activations, collectives, buckets;
  for (const TensorInfo &t : lv.tensors) {
    if (t.aliasOf >= 0)
      continue;
    // Each persistent kind is counted in its total and, when it lives in the
    // host arena, in its host part too.
    const bool onHost = static_cast<Space>(t.space) == Space::Host;
    const bool onNvme = static_cast<Space>(t.space) == Space::Nvme;
    uint64_t noNvmeGrads = 0;
    auto add = [&](uint64_t &total, uint64_t &host, uint64_t &nvme) {
      total += t.bytes;
      if (onHost)
        host += t.bytes;
      if (onNvme)
        nvme += t.bytes;
    };
    switch (t.kind) {
    case TensorKind::Weight:
    case TensorKind::WeightShard:
      // ZeRO's master part of a parameter (zd.role = "master") is a shard
      // loaded from the parameter's source, but it is optimizer state.
      if (isMasterShard(t.value))
        add(f.masterBytes, f.hostMasterBytes, f.nvmeMasterBytes);
      else
        add(f.residentWeightBytes, f.hostWeightBytes, f.nvmeWeightBytes);
      break;
    case TensorKind::Grad:
      add(f.gradBytes, f.hostGradBytes, noNvmeGrads);
      break;
    case TensorKind::Master:
      add(f.masterBytes, f.hostMasterBytes, f.nvmeMasterBytes);
      break;
    case TensorKind::Moment:
      add(f.momentBytes, f.hostMomentBytes, f.nvmeMomentBytes);
      break;
    case TensorKind::State:
      add(f.stateBytes, f.hostStateBytes, f.nvmeStateBytes);
      break;
    default:
      break;
    }
    BufferRequest r{t.bytes, static_cast<Space>(t.space), t.begin, t.end};
    if (t.kind == TensorKind::Gathered)
      gathered.push_back(r);
    if (t.kind == TensorKind::Activation || t.kind == TensorKind::Input ||
        t.kind == TensorKind::Output)
      activations.push_back(r);
    if (t.collectiveResult)
      collectives.push_back(r);
    if (t.gradientBucket)
      buckets.push_back(r);
  }
  f.peakGatheredParamBytes = peakLiveBytes(gathered, Space::Device);
  f.activationBytes = peakLiveBytes(activations, Space::Device);
  f.collectiveBufferBytes = peakLiveBytes(collectives, Space::Device);
  f.bucketBytes = peakLiveBytes(buckets, Space::Device);
  // The activations kept for the backward: alive across the loss step.
  int64_t offset = 0;
  llvm::DenseSet<int> optimizerGrads;
  for (auto [pi, p] : llvm::enumerate(lv.programs))
    for (mlir::Operation *op : p.steps)
      if (auto adamw = llvm::dyn_cast<graph::AdamwOp>(op)) {
        auto it = p.indexOf.find(adamw.getGrad());
        if (it != p.indexOf.end() &&
            optimizerGrads.insert(lv.globalOf[pi][it->second]).second)
          f.optimizerGradBytes += lv.tensors[lv.globalOf[pi][it->second]].bytes;
      }
  for (const Liveness &p : lv.programs) {
    for (auto [op, step] : p.stepOf) {
      if (!op->hasAttr("zplan.loss"))
        continue;
      int64_t at = offset + step;
      uint64_t kept = 0;
      for (const TensorInfo &t : lv.tensors)
        if (t.aliasOf < 0 && t.kind == TensorKind::Activation &&
            t.space == unsigned(Space::Device) && t.begin <= at && t.end > at)
          kept += t.bytes;
      f.activationsForBackwardBytes =
          std::max(f.activationsForBackwardBytes, kept);
    }
    offset += int64_t(p.steps.size());
  }
  for (unsigned s = 0; s < kNumSpaces; ++s)
    f.arenaBytes[s] = arenaBytes[s];
  return f;
}

} // namespace zplan::plan
