//===- GemmAlgos.cpp - --zplan-gemm-algos ---------------------------------===//
//
// The cuBLASLt algorithm of a product is the compiler's decision where the
// tuning table (kernels/cuda/include/zk/gemm_algos.h, measured on the GPU of
// its arch) has one for the product's shape: zd.gemm_algo here, the product's
// ints 2..8 in the plan (2.15). The runtime builds exactly that algorithm or
// refuses the product; every other product runs cuBLASLt's first heuristic
// answer, as before. No timing at run time, so one plan runs the same
// algorithms on every GPU.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/OpInfo.h"
#include "compiler/plan/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "zk/gemm_algos.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANGEMMALGOS
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

namespace zg = zplan::graph;

struct GemmAlgosPass : impl::ZplanGemmAlgosBase<GemmAlgosPass> {
  using ZplanGemmAlgosBase::ZplanGemmAlgosBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<PlanDType> floatDType = parseFloatDType(dtype);
    if (!floatDType) {
      module.emitError("--zplan-gemm-algos: unknown dtype '") << dtype << "'";
      return signalPassFailure();
    }
    if (arch < 10) {
      module.emitError("--zplan-gemm-algos: arch ")
          << int64_t(arch) << " is not a compute capability (90 for sm_90)";
      return signalPassFailure();
    }
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(module);
    if (failed(funcs))
      return signalPassFailure();
    for (func::FuncOp func : *funcs)
      func.walk([&](Operation *op) {
        if (auto l = dyn_cast<zg::LinearOp>(op))
          choose(op, l.getInput(), l.getWeight(), l.getTransW(),
                 bool(l.getBias()), false, *floatDType);
        else if (auto r = dyn_cast<zg::LinearResidualOp>(op))
          choose(op, r.getInput(), r.getWeight(), r.getTransW(),
                 bool(r.getBias()), true, *floatDType);
      });
  }

  /// Looks the product up in the table: x [..., K] (M the rows), W [K, N] or
  /// [N, K], every operand stored in the plan's bf16 or fp16. A product the
  /// few-row kernel runs (zd.kernel = "few_rows") keeps that kernel.
  void choose(Operation *op, Value x, Value w, bool transW, bool bias,
              bool residual, PlanDType floatDType) {
    if (op->getAttr("zd.kernel"))
      return;
    std::optional<PlanDType> t = planDTypeOfValue(x, floatDType);
    std::optional<PlanDType> tw = planDTypeOfValue(w, floatDType);
    if (!t || t != tw || (*t != PlanDType::BF16 && *t != PlanDType::F16))
      return;
    auto xt = cast<RankedTensorType>(x.getType());
    auto wt = cast<RankedTensorType>(w.getType());
    if (!xt.hasStaticShape() || !wt.hasStaticShape() || xt.getRank() < 1 ||
        wt.getRank() != 2)
      return;
    const int64_t k = xt.getShape().back();
    const int64_t n = transW ? wt.getShape()[0] : wt.getShape()[1];
    if (k <= 0)
      return;
    const int64_t m = xt.getNumElements() / k;
    const ::zk::cuda::GemmAlgo *a =
        ::zk::cuda::tuned_gemm(int(arch), *t == PlanDType::BF16, m, k, n,
                               transW, bias, residual);
    if (!a)
      return;
    const int64_t ints[::zk::cuda::GemmAlgo::kInts] = {
        a->id, a->tile, a->stages, a->splitk,
        a->swizzle, a->custom, a->cluster};
    op->setAttr("zd.gemm_algo",
                DenseI64ArrayAttr::get(op->getContext(), ints));
    ++numChosen;
  }
};

} // namespace
} // namespace zplan::plan
