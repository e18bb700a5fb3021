//===- FoldTranspose.cpp - --zplan-fold-transpose -------------------------===//
//
// Folds transposes of the last two dims into the matrix products that read
// or produce them (zg.matmul's trans_a / trans_b), so that the plan holds no
// copy BLAS could have avoided by reading an operand transposed.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SetVector.h"

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANFOLDTRANSPOSE
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

/// The input of `v`'s zg.transpose when that transpose swaps exactly the
/// last two dims of an operand of rank >= 2; null otherwise.
Value swappedLast2(Value v) {
  auto t = v.getDefiningOp<graph::TransposeOp>();
  if (!t)
    return nullptr;
  ArrayRef<int64_t> perm = t.getPerm();
  int64_t n = perm.size();
  if (n < 2)
    return nullptr;
  for (int64_t i = 0; i < n - 2; ++i)
    if (perm[i] != i)
      return nullptr;
  if (perm[n - 2] != n - 1 || perm[n - 1] != n - 2)
    return nullptr;
  return t.getInput();
}

int64_t rankOf(Value v) { return cast<ShapedType>(v.getType()).getRank(); }

struct FoldTransposePass
    : impl::ZplanFoldTransposeBase<FoldTransposePass> {
  using ZplanFoldTransposeBase::ZplanFoldTransposeBase;

  void runOnOperation() override {
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(getOperation());
    if (failed(funcs))
      return signalPassFailure();
    for (func::FuncOp func : *funcs)
      foldProgram(func.getBody().front());
  }

  void foldProgram(Block &body) {
    SmallVector<graph::MatmulOp> products(body.getOps<graph::MatmulOp>());
    llvm::SetVector<Operation *> maybeDead;
    for (graph::MatmulOp mm : products) {
      // Operands: read through the transpose.
      for (unsigned k = 0; k < 2; ++k) {
        Value operand = mm->getOperand(k);
        Value source = swappedLast2(operand);
        if (!source || rankOf(operand) < 2)
          continue;
        maybeDead.insert(operand.getDefiningOp());
        mm->setOperand(k, source);
        StringRef flag = k == 0 ? "trans_a" : "trans_b";
        bool was = k == 0 ? mm.getTransA() : mm.getTransB();
        mm->setAttr(flag, BoolAttr::get(mm.getContext(), !was));
        ++numOperands;
      }
    }
    // Results: (A B)^T = B^T A^T, when the transpose is the only reader.
    for (graph::MatmulOp mm : products) {
      if (!mm->hasOneUse() || rankOf(mm.getLhs()) < 2 ||
          rankOf(mm.getRhs()) < 2)
        continue;
      auto t = dyn_cast<graph::TransposeOp>(*mm->user_begin());
      if (!t || swappedLast2(t.getResult()) != mm.getResult() ||
          maybeDead.contains(t))
        continue;
      OpBuilder b(t);
      auto folded = graph::MatmulOp::create(
          b, mm.getLoc(), t.getType(), mm.getRhs(), mm.getLhs(),
          /*trans_a=*/!mm.getTransB(), /*trans_b=*/!mm.getTransA());
      // Keep every attribute the passes before set (names, streams).
      for (NamedAttribute a : mm->getAttrs())
        if (a.getName() != "trans_a" && a.getName() != "trans_b")
          folded->setAttr(a.getName(), a.getValue());
      t.getResult().replaceAllUsesWith(folded.getResult());
      t.erase();
      mm.erase();
      ++numResults;
    }
    for (Operation *op : maybeDead)
      if (op && op->use_empty())
        op->erase();
  }
};

} // namespace
} // namespace zplan::plan
