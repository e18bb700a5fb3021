// Value types of the public API.
#include "zrt/types.h"

namespace zrt {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::bool8: return 1;
  }
  return 0;
}

const char *dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::bool8: return "bool8";
  }
  return "?";
}

size_t IOInfo::global_bytes() const {
  size_t n = dtype_size(dtype);
  for (int64_t d : global_shape) n *= static_cast<size_t>(d);
  return n;
}

}  // namespace zrt
