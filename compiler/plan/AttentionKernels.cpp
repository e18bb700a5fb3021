//===- AttentionKernels.cpp - --zplan-attention-kernels -------------------===//
//
// The CUDA attention kernel of each attention is the compiler's decision,
// written into the plan (zd.kernel here, the attention's int 11 and the
// attention_grad's int 1 in the plan, 2.11), so that one plan runs the same
// kernels, and rounds alike, on every GPU it runs on. Before, the runtime
// picked the forward kernel by the device's compute capability.
//
// The kernels, their codes and what they need are one table,
// kernels/cuda/include/zk/attention_kernels.h, which the runtime reads too:
// the rule here (attention_tensor_core_shape, default_attention_kernel) is
// the one the kernels check again on the pointers they get.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/OpInfo.h"
#include "compiler/plan/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "zk/attention_kernels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"

#include <string>

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANATTENTIONKERNELS
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

namespace zg = zplan::graph;
namespace zk = ::zk::cuda;

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The names of a kernel table, for messages.
template <size_t N>
std::string kernelNames(const zk::AttentionKernel (&table)[N]) {
  std::string names;
  for (const zk::AttentionKernel &k : table)
    names += (names.empty() ? "" : ", ") + std::string(k.name);
  return names;
}

struct AttentionKernelsPass
    : impl::ZplanAttentionKernelsBase<AttentionKernelsPass> {
  using ZplanAttentionKernelsBase::ZplanAttentionKernelsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<PlanDType> floatDType = parseFloatDType(dtype);
    if (!floatDType) {
      module.emitError("--zplan-attention-kernels: unknown dtype '")
          << dtype << "'";
      return signalPassFailure();
    }
    if (arch < 10) {
      module.emitError("--zplan-attention-kernels: arch ")
          << int64_t(arch) << " is not a compute capability (90 for sm_90)";
      return signalPassFailure();
    }
    const zk::AttentionKernel *forced = nullptr;
    if (!kernel.empty()) {
      forced = zk::attention_kernel(kernel.c_str());
      if (!forced) {
        module.emitError("--attention-kernel '")
            << kernel << "' is not a CUDA attention kernel; the kernels: "
            << kernelNames(zk::kAttentionKernels);
        return signalPassFailure();
      }
      if (!zk::attention_kernel_runs_on(*forced, int(arch) / 10,
                                        int(arch) % 10)) {
        module.emitError("--attention-kernel ")
            << kernel << " needs " << zk::attention_kernel_needs(*forced)
            << ", but --cuda-arch is sm_" << int64_t(arch);
        return signalPassFailure();
      }
    }
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(module);
    if (failed(funcs))
      return signalPassFailure();
    for (func::FuncOp func : *funcs)
      func.walk([&](Operation *op) {
        if (auto a = dyn_cast<zg::AttentionOp>(op))
          choose(a, forced, *floatDType);
        else if (auto g = dyn_cast<zg::AttentionGradOp>(op))
          chooseGrad(g, *floatDType);
      });
  }

  /// Whether the plan stores `v` in 16-bit floats.
  static bool half(Value v, PlanDType floatDType) {
    std::optional<PlanDType> t = planDTypeOfValue(v, floatDType);
    return t && (*t == PlanDType::BF16 || *t == PlanDType::F16);
  }

  /// Whether the tensor-core kernels can take the attention: the table's
  /// shape rule, and 16-byte aligned rows. Every tensor starts at a multiple
  /// of the memory plan's 256-byte alignment, so a row is aligned when its
  /// element offset (a packed operand's) and every stride are multiples of 8
  /// elements; the head-major and sequence-major strides are multiples of the
  /// head dim, 64 or 128.
  static bool tensorCores(zg::AttentionOp a, PlanDType floatDType) {
    auto out = rtt(a.getResult());
    if (out.getRank() != 4 || !out.hasStaticShape())
      return false;
    const int64_t dh = out.getShape()[3];
    // The keys: k's logical [B, Hkv, T, D] (a packed k is [B, T, W]).
    auto k = rtt(a.getK());
    std::optional<ArrayRef<int64_t>> packed = a.getPacked();
    const bool kPacked = packed && (*packed)[4] != 0;
    const int64_t keys = k.getRank() < 2 ? 0
                         : kPacked       ? k.getShape()[1]
                                         : a.headMajorShape(k.getShape(), 2)[2];
    if (!zk::attention_tensor_core_shape(half(a.getQ(), floatDType), dh, keys))
      return false;
    if (packed)
      for (int i = 0; i < 3; ++i)
        if ((*packed)[3 * i] % 8 != 0 || (*packed)[3 * i + 1] % 8 != 0)
          return false;
    return true;
  }

  void choose(zg::AttentionOp a, const zk::AttentionKernel *forced,
              PlanDType floatDType) {
    const bool tc = tensorCores(a, floatDType);
    const int64_t dh = rtt(a.getResult()).getShape().back();
    const zk::AttentionKernel *k =
        !tc      ? zk::attention_kernel("rows")
        : forced ? forced
                 : zk::default_attention_kernel(int(arch), dh, true);
    a->setAttr("zd.kernel", StringAttr::get(a.getContext(), k->name));
    ++numForward;
  }

  void chooseGrad(zg::AttentionGradOp g, PlanDType floatDType) {
    auto q = rtt(g.getQ());
    const int64_t dh = q.getRank() == 4 ? q.getShape()[3] : 0;
    const bool tc = half(g.getQ(), floatDType) && (dh == 64 || dh == 128);
    const zk::AttentionKernel *k = zk::default_attention_grad_kernel(dh, tc);
    g->setAttr("zd.kernel", StringAttr::get(g.getContext(), k->name));
    ++numBackward;
  }
};

} // namespace
} // namespace zplan::plan
