// zk/cuda_status.h - one status type for every GPU library call, and one checking macro per library.
//
// A failed CUDA, cuBLAS or NCCL call becomes a GpuStatus that names the library, the numeric code, the
// library's own message, the expression that failed and the file and line of the call. The macros return
// that status from the enclosing function, so a caller never sees a bare error code and nothing aborts.
// The NCCL macro lives in runtime/src/nccl/nccl_status.h so that the kernels do not depend on NCCL.
#ifndef ZK_CUDA_STATUS_H
#define ZK_CUDA_STATUS_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

namespace zk {
namespace cuda {

enum class GpuLib : unsigned char { none, cuda, cublas, nccl, kernel };

/// The outcome of a GPU library call: ok, or which call failed, where, and why.
struct GpuStatus {
  GpuLib lib = GpuLib::none;
  int code = 0;
  std::string message;  // "cudaMalloc(&p, n) failed at file.cu:12: out of memory (cudaErrorMemoryAllocation = 2)"
  bool ok() const { return lib == GpuLib::none; }
  static GpuStatus fail(GpuLib lib, int code, std::string msg) {
    GpuStatus s;
    s.lib = lib;
    s.code = code;
    s.message = std::move(msg);
    return s;
  }
};

const char *cublas_status_name(cublasStatus_t s);

/// Builds the status of a failed call; the macros below are the only callers.
GpuStatus cuda_failure(cudaError_t e, const char *expr, const char *file, int line);
GpuStatus cublas_failure(cublasStatus_t e, const char *expr, const char *file, int line);
/// A kernel-level precondition (shape, dtype) that failed before anything was launched.
GpuStatus kernel_failure(const char *what);

}  // namespace cuda
}  // namespace zk

/// Returns a GpuStatus from the enclosing function when the CUDA runtime call fails.
#define ZK_CUDA_TRY(expr)                                                               \
  do {                                                                                  \
    cudaError_t zk_err_ = (expr);                                                       \
    if (zk_err_ != cudaSuccess) return ::zk::cuda::cuda_failure(zk_err_, #expr, __FILE__, __LINE__); \
  } while (0)

/// Returns a GpuStatus from the enclosing function when the cuBLAS / cuBLASLt call fails.
#define ZK_CUBLAS_TRY(expr)                                                             \
  do {                                                                                  \
    cublasStatus_t zk_err_ = (expr);                                                    \
    if (zk_err_ != CUBLAS_STATUS_SUCCESS)                                               \
      return ::zk::cuda::cublas_failure(zk_err_, #expr, __FILE__, __LINE__);            \
  } while (0)

/// Propagates a failed GpuStatus (from a call that already returns one).
#define ZK_GPU_TRY(expr)                       \
  do {                                         \
    ::zk::cuda::GpuStatus zk_st_ = (expr);     \
    if (!zk_st_.ok()) return zk_st_;           \
  } while (0)

#endif  // ZK_CUDA_STATUS_H
