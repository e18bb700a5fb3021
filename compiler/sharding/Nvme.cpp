//===- Nvme.cpp - --zplan-nvme --------------------------------------------===//
//
// NVMe offload (ZeRO-Infinity, docs/nvme.md). The offloaded tensors that
// --zplan-zero-train and --zplan-offload placed in host memory move to the
// rank's NVMe file; every use reads them into a host staging buffer first and
// every write goes back to the file. Reads are issued one NVMe-backed use
// ahead, where the previous use runs, so that a read is in flight while the
// previous staging buffer is consumed: the memory plan then holds two staging
// buffers per stream of uses (double buffering by liveness, not by a pool the
// runtime would have to manage).
//
//===----------------------------------------------------------------------===//

#include "compiler/sharding/Passes.h"
#include "compiler/sharding/Sharding.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace zplan::sharding {
#define GEN_PASS_DEF_ZPLANNVME
#include "compiler/sharding/Passes.h.inc"
} // namespace zplan::sharding

using namespace mlir;
using namespace zplan;
using namespace zplan::sharding;
namespace zg = zplan::graph;

namespace {

StringRef spaceName(Operation *def) {
  if (!def)
    return "";
  if (auto shard = dyn_cast<dist::WeightShardOp>(def))
    return shard.getSpace();
  if (isa<zg::WeightOp, zg::StateOp>(def))
    if (auto s = def->getAttrOfType<StringAttr>(kSpace))
      return s.getValue();
  return "device";
}

bool onNvme(Value v) { return spaceName(v.getDefiningOp()) == "nvme"; }

bool isMaster(Operation *op) {
  auto role = op->getAttrOfType<StringAttr>("zd.role");
  return role && role.getValue() == "master";
}

/// The operands an op overwrites in place (the registry's in-place results).
SmallVector<Value, 3> writesOf(Operation *op) {
  if (auto a = dyn_cast<zg::AdamwOp>(op))
    return {a.getParam(), a.getM(), a.getV()};
  if (isa<zg::AssignOp, zg::AccumulateOp, zg::KvWriteOp>(op))
    return {op->getOperand(0)};
  return {};
}

/// Whether an op reads its operands on the host: transfers from the host,
/// and the optimizer step ZeRO placed there.
bool readsOnHost(Operation *op) {
  return isa<dist::PrefetchOp, dist::NvmeWriteOp>(op) ||
         op->hasAttr("zd.on_host");
}

bool isSplatConstant(Value v) {
  auto c = v.getDefiningOp<zg::ConstantOp>();
  return c && isa<SplatElementsAttr>(c.getValue());
}

/// Whether a value is planned in fp32 whatever --dtype says (the rule of the
/// memory plan's dtypes, docs/training-contract.md section 1): optimizer
/// state, master parts and what ZeRO marked `zplan.own_dtype`; a staging
/// buffer holds its file tensor's dtype.
bool keepsOwnDType(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return false;
  if (auto read = dyn_cast<dist::NvmeReadOp>(def))
    return keepsOwnDType(read.getInput());
  if (auto st = dyn_cast<zg::StateOp>(def))
    return st.getKind() != "kv_cache";
  return isMaster(def) || def->hasAttr("zplan.own_dtype");
}

/// Whether a value lives in host memory (before the memory plan assigns
/// spaces): evicted copies, staging buffers and host storage.
bool isHostValue(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return false;
  if (isa<dist::EvictOp, dist::NvmeReadOp>(def))
    return true;
  return spaceName(def) == "host";
}

struct ZplanNvmePass : zplan::sharding::impl::ZplanNvmeBase<ZplanNvmePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!param && !optimizer)
      return;
    if (alignment < 512 || (alignment & (alignment - 1)) != 0) {
      module.emitError("zplan-nvme: alignment must be a power of two of at "
                       "least 512, got ")
          << int64_t(alignment);
      return signalPassFailure();
    }
    // Placement: the same decision for a tensor in every program, so that
    // the programs keep naming one persistent tensor.
    bool any = false;
    module.walk([&](Operation *op) {
      bool wanted = false;
      if (isa<dist::WeightShardOp>(op))
        wanted = isMaster(op) ? optimizer : param;
      else if (isa<zg::WeightOp>(op))
        wanted = param;
      else if (isa<zg::StateOp>(op))
        wanted = optimizer;
      if (!wanted || spaceName(op) != "host")
        return;
      if (auto shard = dyn_cast<dist::WeightShardOp>(op))
        shard.setSpace("nvme");
      else
        op->setAttr(kSpace, StringAttr::get(op->getContext(), "nvme"));
      ++numOnNvme;
      any = true;
    });
    if (!any)
      return;
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal() && failed(rewrite(func)))
        return signalPassFailure();
    OpBuilder b(module.getContext());
    module->setAttr("zplan.nvme_alignment",
                    b.getI64IntegerAttr(int64_t(alignment)));
    module->setAttr("zplan.nvme_path", b.getStringAttr(path));
  }

  /// One program: staging reads ahead of every use, writes back after every
  /// update.
  LogicalResult rewrite(func::FuncOp func) {
    Block &body = func.getBody().front();
    SmallVector<Operation *> users;
    for (Operation &op : body)
      if (!isa<dist::NvmeReadOp, dist::NvmeWriteOp>(op) &&
          llvm::any_of(op.getOperands(), onNvme))
        users.push_back(&op);
    if (users.empty())
      return success();
    OpBuilder b(func.getContext());
    // The previous use that read from the disk: the reads of the next one
    // are issued there, so that they run while it computes.
    Operation *anchor = nullptr;
    bool freshRead = false;
    // Per file tensor: its last write-back (a later read must follow it), and
    // the host value holding its bytes when the previous NVMe-backed use
    // touched it (a use right after takes that buffer instead of the disk).
    DenseMap<Value, Operation *> lastWrite;
    DenseMap<Value, Value> current;
    DenseSet<Value> touchedLast;

    auto readOf = [&](Value file, Operation *use) -> Value {
      if (touchedLast.contains(file) && current.count(file))
        return current[file];
      Operation *at = anchor ? anchor : use;
      // Never ahead of the tensor's definition or of its last write-back.
      for (Operation *bound : {file.getDefiningOp(), lastWrite.lookup(file)})
        if (bound && bound->getBlock() == &body && at->isBeforeInBlock(bound))
          at = bound->getNextNode();
      b.setInsertionPoint(at);
      auto read = dist::NvmeReadOp::create(b, file.getLoc(), file.getType(),
                                           file);
      ++numReads;
      freshRead = true;
      return read.getResult();
    };
    auto writeBack = [&](Value file, Value host, Location loc) {
      auto write = dist::NvmeWriteOp::create(b, loc, file, host);
      lastWrite[file] = write;
      current[file] = host;
      ++numWrites;
      return write.getOperation();
    };

    for (Operation *use : users) {
      DenseSet<Value> touched;
      Operation *next = use;
      freshRead = false;
      if (auto assign = dyn_cast<zg::AssignOp>(use);
          assign && onNvme(assign.getTarget())) {
        Value file = assign.getTarget();
        touched.insert(file);
        Value value = assign.getValue();
        if (isSplatConstant(value)) {
          // A fill (a moment's zeros at @init) writes the staging buffer,
          // which then goes back whole; its read is not worth issuing early.
          Operation *savedAnchor = anchor;
          anchor = nullptr;
          Value stage = readOf(file, use);
          anchor = savedAnchor;
          freshRead = false;
          assign->setOperand(0, stage);
          b.setInsertionPointAfter(use);
          writeBack(file, stage, use->getLoc());
        } else {
          if (onNvme(value)) {
            touched.insert(value);
            value = readOf(value, use);
            current[assign.getValue()] = value;
          }
          // The value usually comes up from the host (the updated master
          // part): the host copy goes to the file directly.
          if (auto up = value.getDefiningOp<dist::PrefetchOp>();
              up && isHostValue(up.getInput()) &&
              up.getInput().getType() == file.getType())
            value = up.getInput();
          if (value.getType() != file.getType())
            return use->emitError("zplan-nvme: assigning a value of type ")
                   << value.getType() << " to the NVMe-resident "
                   << file.getType()
                   << " (another shape or element type) is not planned";
          b.setInsertionPoint(use);
          // Mixed precision: an fp32 value (the updated master part) becomes
          // the 16-bit parameter shard. On the host the cast runs on the
          // staging buffer the update just wrote, so that only 16-bit bytes
          // reach the parameter's file and nothing goes up to the device for
          // it; a device value is narrowed before it comes down.
          bool narrow =
              mixedPrecision && keepsOwnDType(value) && !keepsOwnDType(file);
          if (!isHostValue(value)) {
            if (narrow)
              value =
                  zg::CastOp::create(b, use->getLoc(), file.getType(), value)
                      .getResult();
            narrow = false;
            value = dist::EvictOp::create(b, use->getLoc(), value).getResult();
          }
          if (narrow) {
            auto cast =
                zg::CastOp::create(b, use->getLoc(), file.getType(), value);
            cast->setAttr("zd.on_host", b.getUnitAttr());
            value = cast.getResult();
            ++numNarrowed;
          }
          next = writeBack(file, value, use->getLoc());
          use->erase();
        }
      } else {
        SmallVector<Value, 3> writes = writesOf(use);
        for (OpOperand &operand : use->getOpOperands()) {
          Value file = operand.get();
          if (!onNvme(file))
            continue;
          touched.insert(file);
          Value stage = readOf(file, use);
          current[file] = stage;
          if (llvm::is_contained(writes, file)) {
            if (!readsOnHost(use))
              return use->emitError("zplan-nvme: ")
                     << use->getName()
                     << " updates an NVMe-resident tensor on the device; "
                        "only host updates (offloaded optimizer) are "
                        "planned";
            operand.set(stage);
            continue;
          }
          if (readsOnHost(use)) {
            operand.set(stage);
            continue;
          }
          b.setInsertionPoint(use);
          operand.set(
              dist::PrefetchOp::create(b, use->getLoc(), stage).getResult());
        }
        // Updated in place on the host: back to the file right after. The
        // next reads still start before this use, so that they overlap it.
        b.setInsertionPointAfter(use);
        for (Value file : llvm::reverse(writes))
          if (touched.contains(file))
            writeBack(file, current[file], use->getLoc());
      }
      if (freshRead)
        anchor = next;
      touchedLast = std::move(touched);
    }
    // Host-to-device copies whose host value now goes to the file directly.
    SmallVector<Operation *> dead;
    for (auto prefetch : body.getOps<dist::PrefetchOp>())
      if (prefetch->use_empty())
        dead.push_back(prefetch);
    for (Operation *op : dead)
      op->erase();
    return success();
  }
};

} // namespace
