// NCCL failures as zrt::Status, in the shape zrt/status.h sets for every library.
#ifndef ZRT_NCCL_NCCL_STATUS_H
#define ZRT_NCCL_NCCL_STATUS_H

#include <nccl.h>

#include <string>

#include "zrt/status.h"

namespace zrt {

inline Status status_from_nccl(ncclResult_t r, const char *expr, const char *file, int line) {
  return error(Code::comm_error, std::string(expr) + " failed at " + file + ":" + std::to_string(line) + ": " +
                                     ncclGetErrorString(r) + " (ncclResult_t = " + std::to_string(static_cast<int>(r)) + ")");
}

}  // namespace zrt

#define ZRT_NCCL_CHECK(expr)                                                                   \
  do {                                                                                         \
    ncclResult_t zrt_nccl_rc_ = (expr);                                                        \
    if (zrt_nccl_rc_ != ncclSuccess) return ::zrt::status_from_nccl(zrt_nccl_rc_, #expr, __FILE__, __LINE__); \
  } while (0)

#endif  // ZRT_NCCL_NCCL_STATUS_H
