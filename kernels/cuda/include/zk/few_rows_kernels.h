// zk/few_rows_kernels.h - the kernels a plan can name for a decode product of few rows, and what each holds.
//
// Plain C++ (no CUDA headers), read by three parties: the compiler chooses the kernel of each few-row product
// (compiler/plan/DecodeProducts.cpp, --zplan-decode-products, zplan --few-rows-kernel) and writes its code
// into the plan (docs/plan-format.md, 2.14); the plan verifier (runtime/src/plan.cpp) refuses codes it does
// not know and products the code's kernel does not hold; kernels/cuda/skinny_gemm.cu launches the code's
// kernel. Before, the streaming kernel ran where an environment variable (ZK_SKINNY_STREAM) asked, so two
// runs of one plan could run, and round, differently.
//
// Codes are stored in plans and never reused or changed.
#ifndef ZK_FEW_ROWS_KERNELS_H
#define ZK_FEW_ROWS_KERNELS_H

#include <cstdint>
#include <cstring>

namespace zk::cuda {

/// The kernel of a product: linear's ints[1], matmul's ints[2], linear_multi's ints[1] and linear_gated's
/// ints[2] (plan 2.14; the fused products without the int run `cluster`, as before 2.14).
enum class FewRows : int {
  /// cuBLASLt (linear and matmul only: the fused products have no library form).
  library = 0,
  /// The few-row kernels of session 5: W [K, N] in 64-column blocks with K split over a thread-block
  /// cluster, W [N, K] a warp per column; 1 to 16 rows.
  cluster = 1,
  /// The streaming kernel: W [K, N] only, 1 to 4 rows; each block streams a K-slab of a column strip through
  /// a ring of 16-byte cp.async copies, the K split reduced within a cluster, the grid sized to the SMs.
  stream = 2,
};

/// The names zd.kernel carries in the compiler ("" for the library).
inline const char *few_rows_name(FewRows k) {
  switch (k) {
    case FewRows::cluster:
      return "few_rows";
    case FewRows::stream:
      return "few_rows_stream";
    default:
      return "";
  }
}
/// The code of a zd.kernel name; -1 for a name that is not a few-row kernel.
inline int few_rows_code(const char *name) {
  if (std::strcmp(name, "few_rows") == 0) return static_cast<int>(FewRows::cluster);
  if (std::strcmp(name, "few_rows_stream") == 0) return static_cast<int>(FewRows::stream);
  return -1;
}

/// The most rows of a product of the cluster kernels and of the streaming kernel.
constexpr int64_t kFewRowsMaxRows = 16;
constexpr int64_t kStreamMaxRows = 4;
/// The streaming kernel holds x's rows (their count rounded up to a power of two) as floats in this many
/// bytes of shared memory; the residual norm of norm_products reads them whole.
constexpr int64_t kStreamMaxXBytes = 64 * 1024;

/// Whether the streaming kernel holds a product of `rows` rows of x [.., K] against weights of `count`
/// widths n[i] (W [K, n[i]]; trans_w must be false): 1 to 4 rows, x's rows within kStreamMaxXBytes, and
/// every width a whole number of 16-byte pieces in every float dtype (a multiple of 8).
inline bool stream_holds(bool trans_w, int64_t rows, int64_t K, const int64_t *n, int count) {
  if (trans_w || rows < 1 || rows > kStreamMaxRows || K < 1 || count < 1) return false;
  int64_t rounded = 1;
  while (rounded < rows) rounded *= 2;
  if (rounded * K * 4 > kStreamMaxXBytes) return false;
  for (int i = 0; i < count; ++i)
    if (n[i] < 1 || n[i] % 8 != 0) return false;
  return true;
}

}  // namespace zk::cuda

#endif  // ZK_FEW_ROWS_KERNELS_H
