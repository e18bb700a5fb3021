// zrt/npy.h - NumPy .npy files (format versions 1.0, 2.0, 3.0), little-endian, C order.
//
// The reader parses the header strictly (a dict with exactly 'descr', 'fortran_order' and 'shape') and
// checks that the file holds exactly the bytes the shape needs before it allocates anything.
#ifndef ZRT_NPY_H
#define ZRT_NPY_H

#include <cstdint>
#include <string>
#include <vector>

#include "zrt/status.h"
#include "zrt/types.h"

namespace zrt {

struct NpyArray {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // row-major, little endian
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

/// Reads `path`. Accepted descr: <f4, <f2, <i8, <i4, |b1 (bool8), and <V2/bf16 written by write_npy
/// ('<u2' is read as bf16 only when `bf16_as_u2` is set).
Status read_npy(const std::string &path, NpyArray *out, bool bf16_as_u2 = false);
/// Writes an array; bf16 is stored as '<u2' (NumPy has no bf16). Writes to a temporary and renames, so no
/// partial file is left behind on failure.
Status write_npy(const std::string &path, DType dtype, const std::vector<int64_t> &shape, const void *data);

}  // namespace zrt

#endif  // ZRT_NPY_H
