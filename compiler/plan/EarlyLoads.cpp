//===- EarlyLoads.cpp - --zplan-early-loads -------------------------------===//
//
// Whether a step's kernel may issue its first loads of some operands before
// it waits for the previous kernel on its stream (programmatic dependent
// launch) is a fact about the plan: which steps write those operands, in
// which order, on which streams. So it is decided here, where lit tests see
// it, and written into the plan (plan 2.18, Instr.early); the runtime's
// verifier checks the claim against the plan's writes and the CUDA backend
// passes it to the kernel. Which operands a kernel loads early, and how far
// the promise must reach, is one table shared with the runtime:
// zrt::early_operands (zrt/ops.h).
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/OpInfo.h"
#include "compiler/plan/Passes.h"

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "zk/few_rows_kernels.h"
#include "zrt/ops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANEARLYLOADS
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

namespace zg = zplan::graph;

/// The storage a value reads: through views (zg.reshape) to the value that
/// owns the bytes.
Value rootOf(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isViewOp(def))
      break;
    v = def->getOperand(0);
  }
  return v;
}

/// Whether the kernel of `op` would load anything early at all: the products
/// only where --zplan-decode-products gave them a few-row kernel (cuBLASLt,
/// which runs the others, has no such wait), the fused steps always.
bool hasEarlyKernel(Operation *op) {
  if (isa<zg::LinearOp, zg::MatmulOp>(op)) {
    auto name = op->getAttrOfType<StringAttr>("zd.kernel");
    return name && zk::cuda::few_rows_code(name.str().c_str()) > 0;
  }
  return isa<zg::LinearMultiOp, zg::LinearGatedOp, zg::NormProductsOp,
             zg::DecodeLayerOp, zg::RopeAttentionOp>(op);
}

/// Whether the CUDA backend runs `op` on the host: every tensor it writes
/// (its results, or the state it writes in place) is in host memory.
bool runsOnHost(Operation *op) {
  SmallVector<Value> out(op->getResults());
  for (Value v : writtenOperands(op))
    out.push_back(rootOf(v));
  return !out.empty() &&
         llvm::all_of(out, [](Value v) { return spaceOf(v) != 0; });
}

struct EarlyLoadsPass : impl::ZplanEarlyLoadsBase<EarlyLoadsPass> {
  using ZplanEarlyLoadsBase::ZplanEarlyLoadsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(module);
    if (failed(funcs))
      return signalPassFailure();
    // The persistent tensors some state write of some program writes
    // (optimizer updates, casts of master weights, cache writes, ...), by
    // their key: storage ops with one key are one tensor in every program.
    llvm::StringSet<> writtenAnywhere;
    for (func::FuncOp func : *funcs)
      func.walk([&](Operation *op) {
        if (isStateWriteOp(op))
          for (Value v : writtenOperands(op))
            if (std::string key = persistentKey(rootOf(v)); !key.empty())
              writtenAnywhere.insert(key);
      });
    for (func::FuncOp func : *funcs)
      for (Operation &op : func.getBody().front().without_terminator()) {
        if (!hasEarlyKernel(&op))
          continue;
        std::optional<uint16_t> code = opcodeOf(&op);
        if (!code)
          continue;
        zrt::EarlyOperands early = zrt::early_operands(
            static_cast<zrt::Op>(*code), int(op.getNumOperands()));
        bool ok = early.scope == zrt::EarlyScope::plan
                      ? weightsUnwritten(&op, early, writtenAnywhere)
                      : programUnwritten(&op, early, func);
        if (ok) {
          op.setAttr(attr::kEarly, UnitAttr::get(&getContext()));
          ++numEarly;
        } else {
          op.removeAttr(attr::kEarly);
          ++numWaiting;
        }
      }
  }

  /// EarlyScope::plan: every early operand is device storage that no program
  /// writes. An operand an instruction produces (a ZeRO-3 gather, an offload
  /// copy, an activation) is written by it; a program input by the caller.
  static bool weightsUnwritten(Operation *op, zrt::EarlyOperands early,
                               const llvm::StringSet<> &writtenAnywhere) {
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      if (!early.has(int(i)))
        continue;
      Value r = rootOf(v);
      Operation *def = r.getDefiningOp();
      if (!def || !isStorageOp(def) || spaceOf(r) != 0)
        return false;
      std::string key = persistentKey(r);
      if (!key.empty() && writtenAnywhere.contains(key))
        return false;
    }
    return true;
  }

  /// EarlyScope::program: no op of the program but `op` writes an early
  /// operand (storage through state writes, values through their producer),
  /// and the instruction before `op` (views run no kernel) is a device step
  /// of the program on its stream.
  static bool programUnwritten(Operation *op, zrt::EarlyOperands early,
                               func::FuncOp func) {
    llvm::StringSet<> keys;
    llvm::DenseSet<Value> values;
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      if (!early.has(int(i)))
        continue;
      Value r = rootOf(v);
      Operation *def = r.getDefiningOp();
      // An instruction's result is written by that instruction.
      if (def && !isStorageOp(def))
        return false;
      if (std::string key = persistentKey(r); !key.empty())
        keys.insert(key);
      values.insert(r);
    }
    bool written = false;
    func.walk([&](Operation *other) {
      if (other == op || !isStateWriteOp(other))
        return;
      for (Value w : writtenOperands(other)) {
        Value r = rootOf(w);
        std::string key = persistentKey(r);
        if (values.contains(r) || (!key.empty() && keys.contains(key)))
          written = true;
      }
    });
    if (written)
      return false;
    Operation *prev = op->getPrevNode();
    while (prev && (isStorageOp(prev) || isViewOp(prev)))
      prev = prev->getPrevNode();
    if (!prev || isa<dist::ReleaseOp>(prev) || isCollectiveOp(prev) ||
        runsOnHost(prev))
      return false;
    auto stream = op->getAttrOfType<StringAttr>(attr::kStream);
    auto prevStream = prev->getAttrOfType<StringAttr>(attr::kStream);
    return stream && prevStream && stream == prevStream;
  }
};

} // namespace
} // namespace zplan::plan
