// CUDA and cuBLAS failures as zrt::Status, in the shape zrt/status.h sets for every library: a
// status_from_<lib>() function that records the library's message, the expression, the file and the line,
// and a macro that returns it from the enclosing function. Kernel-level failures (zk::cuda::GpuStatus)
// convert with status_from_gpu().
#ifndef ZRT_CUDA_CUDA_STATUS_H
#define ZRT_CUDA_CUDA_STATUS_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "zk/cuda_kernels.h"
#include "zrt/status.h"

namespace zrt {

inline Status status_from_cuda(cudaError_t e, const char *expr, const char *file, int line) {
  return error(Code::backend_error, zk::cuda::cuda_failure(e, expr, file, line).message);
}
inline Status status_from_cublas(cublasStatus_t e, const char *expr, const char *file, int line) {
  return error(Code::backend_error, zk::cuda::cublas_failure(e, expr, file, line).message);
}
inline Status status_from_gpu(const zk::cuda::GpuStatus &s) {
  return s.ok() ? Status() : error(Code::backend_error, s.message);
}

/// Picks this process's GPU: the launcher's local rank modulo the visible devices, so that the ranks of
/// one node spread over its GPUs. Idempotent; the backend and the NCCL communicator both call it.
Status select_cuda_device(int *device);

}  // namespace zrt

#define ZRT_CUDA_CHECK(expr)                                                                   \
  do {                                                                                         \
    cudaError_t zrt_cuda_rc_ = (expr);                                                         \
    if (zrt_cuda_rc_ != cudaSuccess) return ::zrt::status_from_cuda(zrt_cuda_rc_, #expr, __FILE__, __LINE__); \
  } while (0)

#define ZRT_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                         \
    cublasStatus_t zrt_cublas_rc_ = (expr);                                                    \
    if (zrt_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                               \
      return ::zrt::status_from_cublas(zrt_cublas_rc_, #expr, __FILE__, __LINE__);            \
  } while (0)

#define ZRT_GPU_CHECK(expr)                                     \
  do {                                                          \
    ::zk::cuda::GpuStatus zrt_gpu_st_ = (expr);                 \
    if (!zrt_gpu_st_.ok()) return ::zrt::status_from_gpu(zrt_gpu_st_); \
  } while (0)

#endif  // ZRT_CUDA_CUDA_STATUS_H
