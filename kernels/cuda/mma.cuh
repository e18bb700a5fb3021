// Register-level tensor-core helpers shared by the attention kernels (forward and backward): mma.sync
// m16n8k16 with fp32 accumulation, ldmatrix, cp.async and 16-bit packing. Fragment layouts are the PTX
// ISA's: in a warp, groupID g = lane / 4 and t = lane % 4; an A fragment (16 x 16, row major) holds
// (row g, cols 2t, 2t+1), (row g+8, same cols), (row g, cols 2t+8, 2t+9), (row g+8, those cols); a B
// fragment (16 x 8, column major) holds (k rows 2t, 2t+1, col g) and (k rows 2t+8, 2t+9, col g); an
// accumulator (16 x 8) holds (row g, cols 2t, 2t+1) and (row g+8, cols 2t, 2t+1). Two adjacent 8-column
// accumulators are therefore exactly one A fragment of 16 columns, which lets a product's result feed the
// next product without leaving registers.
#ifndef ZK_CUDA_MMA_CUH
#define ZK_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "common.cuh"

namespace zk {
namespace cuda {
namespace mma {

template <class T> struct Name;
template <> struct Name<__nv_bfloat16> { static constexpr bool bf16 = true; };
template <> struct Name<__half> { static constexpr bool bf16 = false; };

/// d += a b on one m16n8k16 tile.
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if (Name<T>::bf16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
/// 16 bytes global -> shared without a register round trip; `bytes` 0 fills zeros (rows past the end).
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int bytes) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/// Two floats rounded to the 16-bit type T, packed low then high (one 32-bit fragment register).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  T l = detail::from_f32<T>(lo), h = detail::from_f32<T>(hi);
  uint16_t a, b;
  memcpy(&a, &l, 2);
  memcpy(&b, &h, 2);
  return static_cast<uint32_t>(a) | (static_cast<uint32_t>(b) << 16);
}

/// Issues the cp.async copies of `Rows` rows (Dh 16-bit elements each, `stride` elements apart in global
/// memory) into shared rows of stride Dh + 8 (16-byte padded: conflict-free ldmatrix); rows at or past
/// `valid` are zero-filled. All `Threads` threads of the block take part (the forward attention kernels).
template <int Rows, int Dh, int Threads, class T>
__device__ __forceinline__ void async_rows(T *dst, const T *src, int valid, int64_t stride) {
  constexpr int per_row = Dh / 8, ld = Dh + 8;
  for (int e = threadIdx.x; e < Rows * per_row; e += Threads) {
    const int r = e / per_row, c = (e % per_row) * 8;
    const bool in = r < valid;
    cp_async16(dst + r * ld + c, in ? src + static_cast<int64_t>(r) * stride + c : src, in ? 16 : 0);
  }
}

/// Issues the cp.async copies of a [Rows, Dh] tile of 16-bit elements (global row stride Dh) into shared
/// rows of stride ld; rows at or past `valid` are zero-filled. All `threads` threads of the block take part.
template <int Rows, int Dh, int ld, int threads, class T>
__device__ __forceinline__ void async_tile(T *dst, const T *src, int valid) {
  constexpr int per_row = Dh / 8;
  for (int e = threadIdx.x; e < Rows * per_row; e += threads) {
    const int r = e / per_row, c = (e % per_row) * 8;
    const bool in = r < valid;
    cp_async16(dst + r * ld + c, in ? src + static_cast<int64_t>(r) * Dh + c : src, in ? 16 : 0);
  }
}

}  // namespace mma
}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_MMA_CUH
