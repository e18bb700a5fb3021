// GpuStatus construction and the device check every GPU entry point runs first.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "zk/cuda_kernels.h"

namespace zk {
namespace cuda {

const char *cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_(unknown)";
  }
}

GpuStatus cuda_failure(cudaError_t e, const char *expr, const char *file, int line) {
  std::string m = std::string(expr) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + " = " + std::to_string(static_cast<int>(e)) + ")";
  return GpuStatus::fail(GpuLib::cuda, static_cast<int>(e), std::move(m));
}

GpuStatus cublas_failure(cublasStatus_t e, const char *expr, const char *file, int line) {
  std::string m = std::string(expr) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cublas_status_name(e) + " (" + std::to_string(static_cast<int>(e)) + ")";
  return GpuStatus::fail(GpuLib::cublas, static_cast<int>(e), std::move(m));
}

GpuStatus kernel_failure(const char *what) { return GpuStatus::fail(GpuLib::kernel, -1, what); }

namespace detail {
namespace {
std::atomic<bool> g_pdl{[] {
  const char* e = std::getenv("ZK_PDL");
  return !(e && std::strcmp(e, "0") == 0);
}()};
}  // namespace

bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }
void pdl_disable() { g_pdl.store(false, std::memory_order_relaxed); }
}  // namespace detail

bool device_usable(size_t min_bytes, std::string *why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why)
      *why = e != cudaSuccess ? std::string("no usable CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(e) +
                                    " (" + cudaGetErrorString(e) + ")"
                              : std::string("no CUDA device is visible (cudaGetDeviceCount returned 0)");
    cudaGetLastError();  // the failed query must not poison the next call's error check
    return false;
  }
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    if (why) *why = "cudaGetDeviceProperties failed";
    return false;
  }
  if (p.major < 9) {
    if (why)
      *why = std::string("device ") + std::to_string(dev) + " (" + p.name + ") is sm_" + std::to_string(p.major) +
             std::to_string(p.minor) + "; zplan's CUDA kernels are built for sm_90 (Hopper) and newer";
    return false;
  }
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    if (why) *why = "cudaMemGetInfo failed";
    return false;
  }
  if (free_b < min_bytes) {
    if (why)
      *why = std::string("device ") + std::to_string(dev) + " (" + p.name + ") has " + std::to_string(free_b >> 20) +
             " MiB free of " + std::to_string(total_b >> 20) + " MiB; the plan needs " + std::to_string(min_bytes >> 20) +
             " MiB";
    return false;
  }
  return true;
}

}  // namespace cuda
}  // namespace zk
