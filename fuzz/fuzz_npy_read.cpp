// fuzz_npy_read.cpp - libFuzzer target: .npy bytes -> zrt::read_npy, then a write/read round trip.
//
// Inputs and reference outputs arrive as .npy files from anywhere, so the reader must turn every
// malformed header, shape or length into a Status. When a file is accepted, the array must be consistent
// (data holds exactly numel x dtype size bytes) and must survive write_npy + read_npy unchanged; a
// violation aborts, which the fuzzer reports like a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "fuzz_common.h"
#include "zrt/npy.h"

namespace {

std::string g_dir;

void check(bool ok, const char *what) {
  if (!ok) zfuzz::unexpected("fuzz_npy_read", std::string("invariant violated: ") + what);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  g_dir = zfuzz::make_dir("npy");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string in = g_dir + "/in.npy", out = g_dir + "/out.npy";
  zfuzz::write_file(in, data, size);
  for (bool bf16_as_u2 : {false, true}) {
    zrt::NpyArray a;
    const zrt::Status st = zrt::read_npy(in, &a, bf16_as_u2);
    // The outcome is that of the plain read (bf16 as bf16).
    if (!bf16_as_u2) {
      if (st.ok()) zfuzz::accepted();
      else if (st.message().empty()) zfuzz::unexpected("fuzz_npy_read", "a refusal without a message");
      else zfuzz::refused(st.message());
    }
    if (!st.ok()) continue;
    int64_t n = 1;
    for (int64_t d : a.shape) {
      check(d >= 0, "a dimension is negative");
      check(d == 0 || n <= INT64_MAX / d, "the element count overflows");
      n *= d;
    }
    check(a.data.size() == static_cast<uint64_t>(n) * zrt::dtype_size(a.dtype), "data size != numel x dtype size");
    check(zrt::write_npy(out, a.dtype, a.shape, a.data.data()).ok(), "write_npy failed on an accepted array");
    zrt::NpyArray b;
    check(zrt::read_npy(out, &b, a.dtype == zrt::DType::bf16).ok(), "read_npy refuses what write_npy wrote");
    check(b.dtype == a.dtype && b.shape == a.shape && b.data == a.data, "the round trip changed the array");
  }
  return 0;
}
