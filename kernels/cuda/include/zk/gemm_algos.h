// zk/gemm_algos.h - the cuBLASLt algorithms a plan names for its products, in one tuning table.
//
// Plain C++ (no CUDA headers), read by two parties: the compiler looks each large product up here
// (compiler/plan/GemmAlgos.cpp, --zplan-gemm-algos, for zplan --cuda-arch) and writes the configuration it
// finds into the product's ints (docs/plan-format.md, 2.15); the CUDA backend (kernels/cuda/gemm.cpp) runs
// the answer of cuBLASLt's heuristic with that configuration and refuses the product when no answer has it. A product without one
// runs cuBLASLt's first heuristic answer, as before. No timing at run time: one plan runs the same
// algorithms on every GPU it runs on.
//
// Adding a row: time the product's candidates on the GPU of `arch` (bench/gpu/kernel_bench.cpp --gemm lists
// cuBLASLt's answers with their configurations, at the plan's operand layout and alignment) and add the
// fastest where it beats the heuristic's first answer by a clear margin, in the forward too; say where it was
// measured.
#ifndef ZK_GEMM_ALGOS_H
#define ZK_GEMM_ALGOS_H

#include <cstdint>

namespace zk::cuda {

/// One cuBLASLt algorithm: CUBLASLT_ALGO_CONFIG_ID and the configuration attributes TILE_ID, STAGES_ID,
/// SPLITK_NUM, CTA_SWIZZLING, CUSTOM_OPTION and CLUSTER_SHAPE_ID, as cuBLASLt numbers them (cublasLt.h). In
/// a plan: the product's ints 2..8 (plan 2.15).
struct GemmAlgo {
  static constexpr int kInts = 7;
  int32_t id, tile, stages, splitk, swizzle, custom, cluster;
};

/// A product D[M, N] = x[M, K] W (+ bias) (+ residual) of the plan's row-major operands, W [K, N] or, with
/// trans_w, [N, K]; fp32 accumulation (CUBLAS_COMPUTE_32F), every operand of the storage dtype (`bf16`: bf16,
/// else f16).
struct TunedGemm {
  int arch;  ///< compute capability, major * 10 + minor
  bool bf16;
  int64_t M, K, N;
  bool trans_w, bias, residual;
  GemmAlgo algo;
};

// Measured on the H200 (docs/gpu-plan-runs.md, "Session 9 (helper GEMM7B)"): llama2-7b batch 4 x seq 1024's
// gate and up products, 0.4490 ms against the first answer's 0.4781 ms in the forward (0.4763 against 0.4946
// in kernel_bench --gemm); the forward with it and the products' other fastest answers (their first) took
// 82.49 ms against 85.07 ms. The other products of that forward (q/k/v/o, down, the residual form of o and
// down) ran fastest on the first answer.
inline constexpr TunedGemm kTunedGemms[] = {
    {90, true, 4096, 4096, 11008, false, false, false, {66, 29, 35, 1, 0, 1, 0}},
};

/// The tuned algorithm of a product, or null (then the heuristic's first answer runs).
inline const GemmAlgo *tuned_gemm(int arch, bool bf16, int64_t M, int64_t K, int64_t N, bool trans_w, bool bias,
                                  bool residual) {
  for (const TunedGemm &t : kTunedGemms)
    if (t.arch == arch && t.bf16 == bf16 && t.M == M && t.K == K && t.N == N && t.trans_w == trans_w &&
        t.bias == bias && t.residual == residual)
      return &t.algo;
  return nullptr;
}

}  // namespace zk::cuda

#endif  // ZK_GEMM_ALGOS_H
