// Value types of the public API.
#include "zrt/types.h"

#include "zk/cpu_kernels.h"

namespace zrt {

// zrt::DType and zk::DType both number the element types as plan.fbs does, so the kernels' table is the
// one table.
static_assert(static_cast<int>(DType::bool8) == static_cast<int>(zk::DType::bool8), "dtype numbering");

size_t dtype_size(DType t) { return zk::dtype_size(static_cast<zk::DType>(t)); }

const char *dtype_name(DType t) { return zk::dtype_name(static_cast<zk::DType>(t)); }

size_t IOInfo::global_bytes() const {
  size_t n = dtype_size(dtype);
  for (int64_t d : global_shape) n *= static_cast<size_t>(d);
  return n;
}

}  // namespace zrt
