// Fused attention forward on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a; this file is built for
// that target alone, kernels/cuda/CMakeLists.txt). ZK_CUDA_ATTENTION=wg1, wg2 (one or two warpgroups per block),
// wg2r (wg2 held to 128 registers at head dim 128), wg2pp (wg2 with its warpgroups' products in ping-pong), wgp
// (one warpgroup whose products overlap its softmax) or wg3 and its variants (a producer warpgroup feeding two
// consumers, "wg3" below) selects them (attention.cu); wg2 is the default on sm_90. wg3 ran at 197 / 221 / 315
// TFLOP/s against wg2's 169 / 194 / 191 (docs/gpu-plan-runs.md, "Attention forward: wg3").
// Status (docs/gpu-plan-runs.md, "Attention forward kernels", 2026-12-01, H200): wgp passed every kernel test
// against the CPU reference; wg1 and wg2 passed at head dim 128 and with one key tile at head dim 64, and
// failed with two or more key tiles at head dim 64 (large errors, bf16 and f16). Their timings there: wg2 172 /
// 197 / 197 TFLOP/s and wgp 164 / 184 / 143 on gpt2-350m / llama-1b / llama2-7b.
//
// That failure was a miscompile, found in the machine code (tests/cuda/check_wgmma_sass.py checks for it): Q's
// A fragments were loaded by ldmatrix once, before the key-tile loop, and held in registers for every tile. The
// PTX keeps them live around the loop, but ptxas (CUDA 13.0) gave them, in wg_kernel at head dim 64 only, the
// same physical registers as the softmax temporaries and P (the A operand of O += P V), so from the second
// tile on S = Q K^T multiplied the previous tile's probabilities by K. wg_kernel now reads Q's fragments from
// the staging rows again at every tile (four or eight ldmatrix per warp and tile), so that no A operand of its
// products lives across the loop. wgp still holds Q across its loop; its registers were checked untouched.
//
// The register kernels (attention.cu) issue mma.sync: 16 x 8 x 16 products per warp, each B fragment first
// brought from shared memory by ldmatrix, and on Hopper that path tops out well below the tensor cores' rate.
// Here a warpgroup (4 warps, 64 query rows) multiplies with wgmma.mma_async.m64nNk16: B (K, then V) is read by
// the tensor cores straight from shared memory through a matrix descriptor, A (Q, then P) comes from
// registers, in exactly the fragment layout of mma.sync's A (each warp's 16 rows: rows g and g + 8, columns 2t,
// 2t + 1, 2t + 8, 2t + 9), and the accumulator of m64nN is per warp mma.sync's accumulator repeated along N. So
// the online softmax is the register kernels', and P goes from the score accumulators to the second product
// without leaving registers.
//
// Shared memory layout (what the descriptors describe). K and V tiles of 64 keys are stored in the 128-byte
// swizzle: each key's row of 64 head-dim elements is 128 bytes, and its 16-byte chunk c sits at chunk
// c ^ (row % 8); a head dim of 128 is two such 64-column halves, 8 KB apart. Tiles start on 1024-byte
// boundaries (the swizzle's period), so the descriptors' base offset is 0.
//  - S = Q K^T: B = K^T is K-major (its K dim, the head dim, is contiguous): leading offset unused, stride
//    offset 1024 bytes between groups of 8 keys; the k-th 16-column step starts 32k bytes into its half.
//  - O += P V: B = V is N-major (the head dim, its N, is contiguous; transpose flag 1): stride offset 1024
//    bytes between groups of 8 keys (its K), leading offset 8 KB between the 64-column halves; the k-th step of
//    16 keys starts 2048k bytes in.
// K and V arrive by cp.async, double-buffered (tile j + 1 streams in while tile j is multiplied); each thread
// fences its copies into the async proxy (fence.proxy.async) before the barrier that publishes them to the
// tensor cores. Q is staged in padded rows and taken into registers by ldmatrix (per tile in wg_kernel, once in
// wgp_kernel); the output leaves through the same rows as 16-byte stores. Causal blocks run longest first;
// tiles wholly past a warpgroup's diagonal are skipped; element masks only where needed; the lse, GQA, every
// stride layout and the additive mask as in the register kernels.
#include <cuda.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "attention.cuh"
#include "common.cuh"
#include "mma.cuh"
#include "tma_layout.h"

namespace zk {
namespace cuda {
namespace attn {
namespace {

struct Bf16 {};
struct F16 {};

// The register-A wgmma of each tile width, one overload per element type (TAG, its PTX name TY): the two
// types' instructions differ only in that name.
#define ZK_WGMMA_RS_N64(TAG, TY)                                                                                 \
template <int TransB>                                                                                            \
__device__ __forceinline__ void mma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, TAG) {         \
  asm volatile(                                                                                                  \
      "{\n"                                                                                                      \
      ".reg .pred p;\n"                                                                                          \
      "setp.ne.b32 p, %37, 0;\n"                                                                                 \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                                \
      "{"                                                                                                        \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                                    \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"                           \
      "}, "                                                                                                      \
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"                                                               \
      "}\n"                                                                                                      \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),          \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),    \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])   \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1), "n"(TransB));                             \
}
ZK_WGMMA_RS_N64(Bf16, "bf16")
ZK_WGMMA_RS_N64(F16, "f16")
#undef ZK_WGMMA_RS_N64

#define ZK_WGMMA_RS_N128(TAG, TY)                                                                                \
template <int TransB>                                                                                            \
__device__ __forceinline__ void mma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc, TAG) {        \
  asm volatile(                                                                                                  \
      "{\n"                                                                                                      \
      ".reg .pred p;\n"                                                                                          \
      "setp.ne.b32 p, %69, 0;\n"                                                                                 \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                                               \
      "{"                                                                                                        \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                                    \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"                          \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"                          \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"                           \
      "}, "                                                                                                      \
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"                                                               \
      "}\n"                                                                                                      \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),          \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),    \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),  \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),  \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),  \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),  \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])   \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1), "n"(TransB));                             \
}
ZK_WGMMA_RS_N128(Bf16, "bf16")
ZK_WGMMA_RS_N128(F16, "f16")
#undef ZK_WGMMA_RS_N128

// The wgmma of 128 columns with both operands from shared memory (A and B through descriptors, both K-major);
// scale_d 0 overwrites the accumulator instead of adding to it.
#define ZK_WGMMA_SS_N128(TAG, TY)                                                                                    \
__device__ __forceinline__ void mma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int scale_d, TAG) {            \
  asm volatile(                                                                                                      \
      "{\n"                                                                                                          \
      ".reg .pred p;\n"                                                                                              \
      "setp.ne.b32 p, %66, 0;\n"                                                                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                                                   \
      "{"                                                                                                            \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                                        \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"                              \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"                              \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"                               \
      "}, "                                                                                                          \
      "%64, %65, p, 1, 1, 0, 0;\n"                                                                                   \
      "}\n"                                                                                                          \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),              \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),        \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),      \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),      \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),      \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),      \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),      \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])       \
      : "l"(da), "l"(db), "r"(scale_d));                                                                             \
}
ZK_WGMMA_SS_N128(Bf16, "bf16")
ZK_WGMMA_SS_N128(F16, "f16")
#undef ZK_WGMMA_SS_N128

template <int N, int TransB, class T>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc) {
  using Tag = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, Bf16, F16>;
  if constexpr (N == 64) mma_rs_n64<TransB>(d, a, desc, Tag{});
  else mma_rs_n128<TransB>(d, a, desc, Tag{});
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void wg_wait0() { wg_wait<0>(); }
/// Keeps the compiler from moving reads or writes of an accumulator across the asynchronous products.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

/// A matrix descriptor for the 128-byte swizzle: shared-window start address, leading and stride byte offsets.
__device__ __forceinline__ uint64_t desc_at(uint32_t a, uint32_t lead, uint32_t stride) {
  return ((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lead & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((stride & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ uint64_t desc(const void *p, uint32_t lead, uint32_t stride) {
  return desc_at(static_cast<uint32_t>(__cvta_generic_to_shared(p)), lead, stride);
}

constexpr int kBc = 64;  // keys per tile

template <int Dh, int G>
struct Layout {
  static constexpr int Br = 64 * G;
  static constexpr int ldq = Dh + 8;                     // padded Q / output staging rows
  static constexpr uint32_t tile = kBc * Dh * 2;         // one K or V tile, swizzled
  static constexpr uint32_t q = 4 * tile;                // Q staging after K0, V0, K1, V1
  static constexpr size_t bytes = q + size_t(Br) * ldq * 2 + 1024;  // + room to align the base to 1024
};

/// cp.async of `valid` rows (of 64) of Dh 16-bit elements into the swizzled tile at dst; rows past `valid` are
/// zero. Consecutive threads take consecutive 16-byte chunks of a row, so the global reads coalesce.
template <int Dh, int NT, class T>
__device__ __forceinline__ void load_swizzled(unsigned char *dst, const T *src, int valid, int64_t stride) {
  constexpr int chunks = Dh / 8;
#pragma unroll
  for (int e = threadIdx.x; e < kBc * chunks; e += NT) {
    const int r = e / chunks, c = e % chunks;
    const int off = (c >> 3) * (kBc * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
    const bool in = r < valid;
    mma::cp_async16(dst + off, in ? src + static_cast<int64_t>(r) * stride + c * 8 : src, in ? 16 : 0);
  }
}

using mma::async_rows;

/// Hardware barrier `id` (1-15; 0 is __syncthreads) for `n` threads: wait for the others, or only count in.
__device__ __forceinline__ void named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/// MinBlocks 2 with G 2 (ZK_CUDA_ATTENTION=wg2r) holds the kernel to 128 registers so that two blocks share a
/// multiprocessor: at head dim 128 it otherwise takes 165 registers x 256 threads, one block (two warpgroups)
/// per multiprocessor, with nothing to hide the latency of its serial products and softmax. The price is a
/// spill of part of the output accumulator around the S product (120 bytes per thread, ptxas -v, CUDA 13.0).
/// PingPong with G 2 (wg2pp) orders the two warpgroups' products within each tile: warpgroup 1 issues its S only
/// once warpgroup 0's S is done (named barrier 1), so the tensor cores run S0, then S1 while warpgroup 0 does
/// its softmax, then P0 V while warpgroup 1 does its own, instead of both S at once and both softmaxes at once
/// (the per-tile __syncthreads otherwise keeps the two in lockstep). Barrier 1 completes once per tile: every
/// thread of warpgroup 0 arrives once per tile and every thread of warpgroup 1 waits once per tile, whether or
/// not the tile is skipped past its diagonal, and the next tile's __syncthreads keeps the tiles paired.
template <class T, int Dh, int G, int MinBlocks, bool PingPong = false>
__global__ void __launch_bounds__(G * 128, MinBlocks) wg_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                      const T *__restrict__ v, T *__restrict__ out, AttnDims d,
                                                      MaskView mask) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<Dh, G>;
  constexpr int Br = L::Br, NT = G * 128, KD = Dh / 16, ldq = L::ldq;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The swizzle repeats every 1024 bytes of address: align the tiles to that.
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char *smem = smem_raw + ((1024 - (raw & 1023)) & 1023);
  auto Kb = [&](int i) { return smem + (2 * i) * L::tile; };
  auto Vb = [&](int i) { return smem + (2 * i + 1) * L::tile; };
  T *Qs = reinterpret_cast<T *>(smem + L::q);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;  // this thread's warpgroup
  const int bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv);
  const int qblock = d.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int q0 = qblock * Br;
  const T *qp = q + b * d.q.b + h * d.q.h + static_cast<int64_t>(q0) * d.q.s;
  const T *kp = k + b * d.k.b + kh * d.k.h;
  const T *vp = v + b * d.v.b + kh * d.v.h;
  const int shift = d.T - d.S;
  int kend = d.T;
  if (d.causal) kend = min(d.T, q0 + Br + shift);
  const int ntiles = (kend + kBc - 1) / kBc;

  async_rows<Br, Dh, NT>(Qs, qp, min(Br, d.S - q0), d.q.s);
  mma::cp_async_commit();
  if (ntiles > 0) {
    load_swizzled<Dh, NT>(Kb(0), kp, min(kBc, d.T), d.k.s);
    load_swizzled<Dh, NT>(Vb(0), vp, min(kBc, d.T), d.v.s);
  }
  mma::cp_async_commit();

  const int wrow = warp * 16;           // this warp's first row in the block
  const int qw = q0 + wrow;             // and its first query position
  const int qg = q0 + wg * 64;          // the warpgroup's first query position
  const float sl = d.scale * kLog2e;
  mma::cp_async_wait<1>();
  __syncthreads();  // every thread's part of Q has landed

  float o[Dh / 2];
#pragma unroll
  for (int i = 0; i < Dh / 2; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int it = 0; it < ntiles; ++it) {
    const int k0 = it * kBc, cur = it & 1;
    mma::cp_async_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // this thread's copies, to the tensor cores
    __syncthreads();  // tile it is visible to every warpgroup, and tile it - 1's buffer is free
    if (it + 1 < ntiles) {
      const int n0 = k0 + kBc;
      load_swizzled<Dh, NT>(Kb(cur ^ 1), kp + static_cast<int64_t>(n0) * d.k.s, min(kBc, d.T - n0), d.k.s);
      load_swizzled<Dh, NT>(Vb(cur ^ 1), vp + static_cast<int64_t>(n0) * d.v.s, min(kBc, d.T - n0), d.v.s);
    }
    mma::cp_async_commit();
    // Warpgroup-uniform (wgmma is issued by all four warps together): a tile wholly past the diagonal of the
    // warpgroup's last row adds nothing to its rows.
    const bool skip = d.causal && k0 > qg + 63 + shift;
    if constexpr (PingPong) {
      if (skip) {
        __syncwarp();
        if (wg == 0) named_arrive(1, 256);
        else named_sync(1, 256);
      }
    }
    if (skip) continue;
    const unsigned char *Ks = Kb(cur), *Vs = Vb(cur);

    // S = Q K^T, 64 x 64, accumulated over the head dim in steps of 16. Q's A fragments are read from the
    // staging rows again for every tile rather than held in registers across the loop: ptxas (CUDA 13.0) gave
    // the loop-invariant fragments of the head-dim-64 instances the registers of P and of the softmax
    // temporaries (the header comment). Fragments made within the iteration that uses them were not.
    uint32_t qa[KD][4];
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) mma::ldsm_x4(qa[kk], Qs + (wrow + (lane & 15)) * ldq + kk * 16 + (lane >> 4) * 8);
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    fence_regs(s);
    __syncwarp();  // wgmma is .aligned: the warp converged
    if constexpr (PingPong) {
      if (wg == 1) named_sync(1, 256);  // warpgroup 0's S is done
    }
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KD; ++kk)
      mma_rs<64, 0, T>(s, qa[kk], desc(Ks + (kk >> 2) * (kBc * 128) + (kk & 3) * 32, 16, 1024));
    wg_commit();
    wg_wait0();
    fence_regs(s);
    if constexpr (PingPong) {
      if (wg == 0) named_arrive(1, 256);  // the tensor cores are warpgroup 1's for its S
    }

    // Online softmax, then the output rows rescaled to the new running max.
    float alpha[2];
    softmax_tile(s, m, l, alpha, d, mask, k0, qw, g, t, b, h, sl);
    rescale(o, alpha);

    // O += P V.
    uint32_t pa[4][4];
    pack_p<T>(pa, s);
    fence_regs(o);
    __syncwarp();
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) mma_rs<Dh, 1, T>(o, pa[kk], desc(Vs + kk * 2048, kBc * 128, 1024));
    wg_commit();
    wg_wait0();
    fence_regs(o);
  }
  mma::cp_async_wait<0>();

  write_rows<T, Dh, ldq>(o, m, l, Qs + wrow * ldq, d, bh, b, h, qw, g, t, lane, out);
#endif
}

template <class T, int Dh, int G, int MinBlocks = 1, bool PingPong = false>
cudaError_t launch(const void *q, const void *k, const void *v, void *out, const AttnDims &d, const MaskView &mask,
                   cudaStream_t s) {
  using L = Layout<Dh, G>;
  const auto kernel = wg_kernel<T, Dh, G, MinBlocks, PingPong>;
  static cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::bytes));
  if (attr != cudaSuccess) return attr;
  dim3 grid((d.S + L::Br - 1) / L::Br, d.B * d.Hq);
  kernel<<<grid, G * 128, L::bytes, s>>>(static_cast<const T *>(q), static_cast<const T *>(k),
                                         static_cast<const T *>(v), static_cast<T *>(out), d, mask);
  return cudaGetLastError();
}

/// Shared memory of the pipelined kernel: three K/V buffer pairs (tile j + 1 streams in while S of tile j and
/// P V of tile j - 1 are multiplied), then the Q / output staging rows.
template <int Dh>
struct Layout3 {
  static constexpr int ldq = Dh + 8;
  static constexpr uint32_t tile = kBc * Dh * 2;
  static constexpr uint32_t q = 6 * tile;
  static constexpr size_t bytes = q + size_t(64) * ldq * 2 + 1024;
};

/// The wgmma kernel with the two products of a warpgroup overlapped with its softmax (ZK_CUDA_ATTENTION=wgp):
/// one warpgroup of 64 rows per block. At tile j it issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} together,
/// waits for S_j only, computes the softmax of tile j while the tensor cores finish P_{j-1} V_{j-1}, and
/// only then waits for that product, rescales O and packs P_j. P V of the last tile follows the loop.
/// A block's tiles never lie past its diagonal here (64 rows, 64 keys per tile), so every warpgroup runs every
/// tile; the buffers are computed from the tile index mod 3.
template <class T, int Dh>
__global__ void __launch_bounds__(128) wgp_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                  const T *__restrict__ v, T *__restrict__ out, AttnDims d,
                                                  MaskView mask) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout3<Dh>;
  constexpr int NT = 128, KD = Dh / 16, ldq = L::ldq;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char *smem = smem_raw + ((1024 - (raw & 1023)) & 1023);
  auto Kb = [&](int i) { return smem + (2 * i) * L::tile; };
  auto Vb = [&](int i) { return smem + (2 * i + 1) * L::tile; };
  T *Qs = reinterpret_cast<T *>(smem + L::q);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv);
  const int qblock = d.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int q0 = qblock * 64;
  const T *qp = q + b * d.q.b + h * d.q.h + static_cast<int64_t>(q0) * d.q.s;
  const T *kp = k + b * d.k.b + kh * d.k.h;
  const T *vp = v + b * d.v.b + kh * d.v.h;
  int kend = d.T;
  if (d.causal) kend = min(d.T, q0 + 64 + (d.T - d.S));
  const int ntiles = (kend + kBc - 1) / kBc;

  async_rows<64, Dh, NT>(Qs, qp, min(64, d.S - q0), d.q.s);
  mma::cp_async_commit();
  if (ntiles > 0) {
    load_swizzled<Dh, NT>(Kb(0), kp, min(kBc, d.T), d.k.s);
    load_swizzled<Dh, NT>(Vb(0), vp, min(kBc, d.T), d.v.s);
  }
  mma::cp_async_commit();

  const int wrow = warp * 16, qw = q0 + wrow;
  const float sl = d.scale * kLog2e;
  uint32_t qa[KD][4];
  mma::cp_async_wait<1>();
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) mma::ldsm_x4(qa[kk], Qs + (wrow + (lane & 15)) * ldq + kk * 16 + (lane >> 4) * 8);

  float o[Dh / 2];
#pragma unroll
  for (int i = 0; i < Dh / 2; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  uint32_t pa[4][4];  // P of the previous tile
  int prev = 0;       // its buffer

  for (int it = 0; it < ntiles; ++it) {
    const int k0 = it * kBc, cur = it % 3;
    mma::cp_async_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    // Tile it is visible to the tensor cores; tile it - 2's buffer, which tile it + 1 reuses, was last read by
    // P V of tile it - 2, waited for in iteration it - 1.
    __syncthreads();
    if (it + 1 < ntiles) {
      const int n0 = k0 + kBc, nb = (it + 1) % 3;
      load_swizzled<Dh, NT>(Kb(nb), kp + static_cast<int64_t>(n0) * d.k.s, min(kBc, d.T - n0), d.k.s);
      load_swizzled<Dh, NT>(Vb(nb), vp + static_cast<int64_t>(n0) * d.v.s, min(kBc, d.T - n0), d.v.s);
    }
    mma::cp_async_commit();

    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    fence_regs(s);
    fence_regs(o);
    __syncwarp();
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KD; ++kk)
      mma_rs<64, 0, T>(s, qa[kk], desc(Kb(cur) + (kk >> 2) * (kBc * 128) + (kk & 3) * 32, 16, 1024));
    wg_commit();
    if (it > 0) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) mma_rs<Dh, 1, T>(o, pa[kk], desc(Vb(prev) + kk * 2048, kBc * 128, 1024));
      wg_commit();
      wg_wait<1>();  // S of this tile; P V of the previous one may still run
    } else {
      wg_wait<0>();
    }
    fence_regs(s);
    float alpha[2];
    softmax_tile(s, m, l, alpha, d, mask, k0, qw, g, t, b, h, sl);
    wg_wait<0>();  // P V of the previous tile: O and pa are free again
    fence_regs(o);
    rescale(o, alpha);
    pack_p<T>(pa, s);
    prev = cur;
  }
  if (ntiles > 0) {
    fence_regs(o);
    __syncwarp();
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) mma_rs<Dh, 1, T>(o, pa[kk], desc(Vb(prev) + kk * 2048, kBc * 128, 1024));
    wg_commit();
    wg_wait<0>();
    fence_regs(o);
  }
  mma::cp_async_wait<0>();
  write_rows<T, Dh, ldq>(o, m, l, Qs + wrow * ldq, d, bh, b, h, qw, g, t, lane, out);
#endif
}

template <class T, int Dh>
cudaError_t launch_pipelined(const void *q, const void *k, const void *v, void *out, const AttnDims &d,
                             const MaskView &mask, cudaStream_t s) {
  using L = Layout3<Dh>;
  static cudaError_t attr = cudaFuncSetAttribute(wgp_kernel<T, Dh>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(L::bytes));
  if (attr != cudaSuccess) return attr;
  dim3 grid((d.S + 63) / 64, d.B * d.Hq);
  wgp_kernel<T, Dh><<<grid, 128, L::bytes, s>>>(static_cast<const T *>(q), static_cast<const T *>(k),
                                                static_cast<const T *>(v), static_cast<T *>(out), d, mask);
  return cudaGetLastError();
}

// --- wg3: a producer warpgroup feeding two consumer warpgroups ------------------------------------------------
// The kernels above spend most of their time in latency nothing hides (docs/gpu-plan-runs.md, "Why wg2 is at
// 197 TFLOP/s"): every thread issues copies, one block barrier per tile keeps the warpgroups in lockstep, and
// each warpgroup waits for each of its products. wg3 is built the other way round:
//  - A block is three warpgroups. Warpgroup 0 is the producer: one of its threads issues tensor copies
//    (cp.async.bulk.tensor, TMA) of Q once and of each K and V tile into a ring of `Stages` buffers, and
//    needs no registers (setmaxnreg gives its share to the consumers, 24 against 240). Warpgroups 1 and 2
//    are consumers of 64 query rows each (128 rows per block) and issue no copy instruction at all.
//  - The ring is ordered by mbarriers, not block barriers: full barriers complete when a tile's bytes have
//    landed (the copy engine counts them), empty barriers when every consumer warp is done with a buffer. K
//    and V have barriers of their own, so K of tile j + Stages streams in as soon as S of tile j is done, and
//    V as soon as P V of tile j is.
//  - Q stays in shared memory in the 128-byte swizzle and is the A operand of S = Q K^T through a descriptor
//    (both operands from shared memory): no Q fragments live in registers, so the miscompile that
//    check_wgmma_sass.py looks for has nothing to act on, and no ldmatrix is issued.
//  - Key tiles of Bc keys (128: S is m64n128, 64 accumulators a thread).
//  - Within a consumer: S of tile j and P V of tile j - 1 are issued together, the softmax of tile j runs
//    while P V of tile j - 1 is still on the tensor cores, then O is rescaled and P_j packed.
//  - Between the consumers, ping-pong: named barriers 1 and 2 let them issue their products in turn (0, 1, 0,
//    1, ...), so that one's softmax runs while the other's products do. Consumer 0 waits on barrier 1 before
//    each issue but its first and arrives on barrier 2 after each; consumer 1 waits on barrier 2 before each
//    and arrives on barrier 1 after each but its last, so every barrier phase has both sides.
// Every consumer runs every tile of its block (no skipping past the diagonal, which would unbalance the
// barrier protocol): a tile wholly masked for a warp's rows adds zeros and leaves the running max alone.
// The tensor copies zero-fill rows past the end of q, k and v, so ragged tiles need no special case; the
// operands' strides go into the tensor maps (every layout: head-major, sequence-major, packed, GQA).
// The output leaves through the consumer's own Q buffer, rows swizzled like the tiles (conflict-free).
// Each piece was measured against variants without it on the H200 (docs/gpu-plan-runs.md, "Attention
// forward: wg3"): without the overlap inside a consumer 7-12% slower, without the ping-pong 5-7%, with 64-key
// tiles 6-8%; a third stage gained nothing. The variants were removed after that call.

template <class T>
using TagOf = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, Bf16, F16>;

template <int N, class T>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  static_assert(N == 128, "wg3's key tiles are 128 keys");
  mma_ss_n128(d, da, db, scale_d, TagOf<T>{});
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/// Counts the caller's arrival and announces `bytes` that tensor copies will complete on the barrier.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// Waits until the barrier's phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

/// One box of 64 head-dim columns (from column c0) of a tensor map, completing on `bar`.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, const TmaOrder &o, int c0, int row,
                                         int head, int batch, uint32_t bar) {
  auto at = [&](int dim) { return tma_coord(o, dim, row, head, batch); };
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(at(1)), "r"(at(2)), "r"(at(3)), "r"(bar)
      : "memory");
}

template <int Dh, int Bc, int Stages>
struct Wg3Layout {
  static constexpr uint32_t qtile = 64 * Dh * 2;  // one consumer's 64 rows of Q, later its output staging
  static constexpr uint32_t kv = Bc * Dh * 2;     // one K or V tile: 64-column halves of Bc rows of 128 bytes
  static constexpr uint32_t k = 2 * qtile;        // K of stage s at k + s kv
  static constexpr uint32_t v = k + Stages * kv;  // V of stage s at v + s kv
  static constexpr uint32_t bars = v + Stages * kv;
  static constexpr uint32_t nbars = 1 + 4 * Stages;  // Q; then full K, full V, empty K, empty V per stage
  static constexpr size_t bytes = bars + nbars * 8 + 1024;  // + room to align the base to 1024
};

/// Normalises a warp's 16 output rows, writes their lse, and stores them through 16 unpadded staging rows at
/// st, each row's 16-byte chunks swizzled (chunk c of row r at c ^ (r % 8)), so that both the 4-byte writes
/// of the accumulator layout and the 16-byte reads along the rows are free of bank conflicts.
template <class T, int Dh>
__device__ __forceinline__ void write_rows_swizzled(const float (&o)[Dh / 2], const float (&m)[2], const float (&l)[2],
                                                    unsigned char *st, const AttnDims &d, int bh, int b, int h, int qw,
                                                    int g, int t, int lane, T *out) {
  constexpr int ND = Dh / 8, rb = Dh * 2;
  T *op = out + b * d.o.b + h * d.o.h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv = finish_row(m[r], l[r], d, bh, qw + g + 8 * r, t);
    const int row = g + 8 * r;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
      *reinterpret_cast<uint32_t *>(st + row * rb + ((nd ^ (row & 7)) << 4) + 4 * t) =
          pack<T>(o[4 * nd + 2 * r] * inv, o[4 * nd + 2 * r + 1] * inv);
  }
  __syncwarp();
#pragma unroll
  for (int e = lane; e < 16 * ND; e += 32) {
    const int r = e / ND, c = e % ND, qi = qw + r;
    if (qi < d.S)
      *reinterpret_cast<uint4 *>(op + static_cast<int64_t>(qi) * d.o.s + c * 8) =
          *reinterpret_cast<const uint4 *>(st + r * rb + ((c ^ (r & 7)) << 4));
  }
}

template <class T, int Dh, int Bc, int Stages>
__global__ void __launch_bounds__(384, 1)
    wg3_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
               const __grid_constant__ CUtensorMap tv, T *__restrict__ out, AttnDims d, MaskView mask, TmaOrder oq,
               TmaOrder ok, TmaOrder ov) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Wg3Layout<Dh, Bc, Stages>;
  constexpr int KD = Dh / 16, KS = Bc / 16, H64 = Dh / 64;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (1024 - (raw & 1023)) & 1023;  // the swizzle repeats every 1024 bytes of address
  unsigned char *smem = smem_raw + pad;
  const uint32_t sb = raw + pad;
  const uint32_t bq = sb + L::bars;
  auto full_k = [&](int s) { return bq + 8 * (1 + s); };
  auto full_v = [&](int s) { return bq + 8 * (1 + Stages + s); };
  auto empty_k = [&](int s) { return bq + 8 * (1 + 2 * Stages + s); };
  auto empty_v = [&](int s) { return bq + 8 * (1 + 3 * Stages + s); };

  const int wg = threadIdx.x >> 7;
  const int bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq;
  const int kh = h / (d.Hq / d.Hkv);
  const int qblock = d.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: longest first
  const int q0 = qblock * 128;
  int kend = d.T;
  if (d.causal) kend = min(d.T, q0 + 128 + (d.T - d.S));
  const int n = (kend + Bc - 1) / Bc;

  if (threadIdx.x == 0) {
    mbar_init(bq, 1);
#pragma unroll
    for (int s = 0; s < Stages; ++s) {
      mbar_init(full_k(s), 1);
      mbar_init(full_v(s), 1);
      mbar_init(empty_k(s), 8);  // one arrival per consumer warp
      mbar_init(empty_v(s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
  }
  __syncthreads();

  if (wg == 0) {
    // Producer. The other 127 threads only give their registers back and leave.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 0) {
      // Consumer 1's rows may all lie past the end of q (a last block of 64 rows or fewer): no copy for them
      // then (its rows are computed from whatever the buffer holds and never stored).
      const int qparts = q0 + 64 < d.S ? 2 : 1;
      mbar_expect_tx(bq, qparts * L::qtile);
      for (int w = 0; w < qparts; ++w)
#pragma unroll
        for (int hf = 0; hf < H64; ++hf)
          tma_load(sb + w * L::qtile + hf * 8192, &tq, oq, hf * 64, q0 + 64 * w, h, b, bq);
      for (int j = 0; j < n; ++j) {
        const int s = j % Stages, use = j / Stages;
        // Use `use` of a buffer waits for the consumers' release of use - 1 (phase parity (use - 1) & 1).
        if (use > 0) mbar_wait(empty_k(s), (use - 1) & 1);
        mbar_expect_tx(full_k(s), L::kv);
#pragma unroll
        for (int hf = 0; hf < H64; ++hf)
          tma_load(sb + L::k + s * L::kv + hf * (Bc * 128), &tk, ok, hf * 64, j * Bc, kh, b, full_k(s));
        if (use > 0) mbar_wait(empty_v(s), (use - 1) & 1);
        mbar_expect_tx(full_v(s), L::kv);
#pragma unroll
        for (int hf = 0; hf < H64; ++hf)
          tma_load(sb + L::v + s * L::kv + hf * (Bc * 128), &tv, ov, hf * 64, j * Bc, kh, b, full_v(s));
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    const int cw = wg - 1;  // this consumer: rows q0 + 64 cw ..
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int qw = q0 + cw * 64 + warp * 16;  // this warp's first query position
    const uint32_t qs = sb + cw * L::qtile;
    const float sl = d.scale * kLog2e;

    // The issue order between the two consumers (the header comment).
    auto my_turn = [&](int j) {
      if (cw == 1) named_sync(2, 256);
      else if (j > 0) named_sync(1, 256);
    };
    auto their_turn = [&](int j) {
      if (cw == 0) named_arrive(2, 256);
      else if (j + 1 < n) named_arrive(1, 256);
    };
    auto release = [&](uint32_t bar) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar);
    };

    float o[Dh / 2], s[Bc / 2];
#pragma unroll
    for (int i = 0; i < Dh / 2; ++i) o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < Bc / 2; ++i) s[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    uint32_t pa[KS][4];

    // S = Q K^T of tile j (both operands through descriptors; the first step overwrites s).
    auto issue_s = [&](int j) {
      const uint32_t ks = sb + L::k + (j % Stages) * L::kv;
#pragma unroll
      for (int kk = 0; kk < KD; ++kk)
        mma_ss<Bc, T>(s, desc_at(qs + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024),
                      desc_at(ks + (kk >> 2) * (Bc * 128) + (kk & 3) * 32, 16, 1024), kk > 0);
    };
    // O += P V of tile j (P from registers, V through a descriptor, transposed).
    auto issue_pv = [&](int j) {
      const uint32_t vs = sb + L::v + (j % Stages) * L::kv;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) mma_rs<Dh, 1, T>(o, pa[kk], desc_at(vs + kk * 2048, Bc * 128, 1024));
    };

    // One issue of this consumer's products: S of tile j (in its ping-pong turn) and P V of tile j - 1, or
    // either alone (tile 0 has no P yet, the last P V no S after it). Which of the two is fixed where it is
    // called (std::bool_constant), so that each call is the straight sequence it stands for.
    auto issue = [&](int j, auto with_s, auto with_pv) {
      constexpr bool S = decltype(with_s)::value, PV = decltype(with_pv)::value;
      const int st = j % Stages, ps = (j - 1) % Stages;
      if constexpr (S) {
        my_turn(j);
        mbar_wait(full_k(st), (j / Stages) & 1);
      }
      if constexpr (PV) mbar_wait(full_v(ps), ((j - 1) / Stages) & 1);
      if constexpr (S) fence_regs(s);
      if constexpr (PV) fence_regs(o);
      __syncwarp();
      wg_fence();
      if constexpr (S) {
        issue_s(j);
        wg_commit();
      }
      if constexpr (PV) {
        issue_pv(j - 1);
        wg_commit();
      }
      if constexpr (S) their_turn(j);
    };
    // The softmax of tile j once its S is done, overlapped with P V of tile j - 1 where that was issued with
    // it; then O is rescaled (tile 0: O is still zero, nothing to rescale) and P_j packed.
    float alpha[2];
    auto consume = [&](int j, auto with_pv) {
      constexpr bool PV = decltype(with_pv)::value;
      if constexpr (PV) wg_wait<1>();  // S of tile j; P V of tile j - 1 may still run
      else wg_wait<0>();
      fence_regs(s);
      release(empty_k(j % Stages));
      softmax_tile(s, m, l, alpha, d, mask, j * Bc, qw, g, t, b, h, sl);
      if constexpr (PV) {
        wg_wait<0>();  // P V of tile j - 1: O and P are free
        fence_regs(o);
        release(empty_v((j - 1) % Stages));
        rescale(o, alpha);
      }
      pack_p<T>(pa, s);
    };
    constexpr std::true_type yes{};
    constexpr std::false_type no{};

    mbar_wait(bq, 0);
    issue(0, yes, no);
    consume(0, no);
    for (int j = 1; j < n; ++j) {
      issue(j, yes, yes);
      consume(j, yes);
    }
    issue(n, no, yes);  // P V of the last tile
    wg_wait<0>();
    fence_regs(o);
    // Every product that read this consumer's Q is complete: its buffer becomes the output staging.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    unsigned char *st = smem + cw * L::qtile + warp * 16 * (Dh * 2);  // this warp's 16 rows
    write_rows_swizzled<T, Dh>(o, m, l, st, d, bh, b, h, qw, g, t, lane, out);
  }
#endif
}

using EncodeTiled = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/// The driver's tensor-map encoder, found through the runtime (no link against the driver library).
EncodeTiled encoder() {
  static const EncodeTiled fn = []() -> EncodeTiled {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return nullptr;
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

/// The tensor map of an operand of `batch` x `heads` x `rows` rows of Dh elements at the given element strides,
/// in boxes of 64 columns by box_rows rows, 128-byte swizzled, zero past the ends. Dims 1-3 are the position,
/// head and batch dims in increasing stride (tma_layout.h; `ord` says which is which).
cudaError_t encode_map(CUtensorMap &map, TmaOrder &ord, const void *base, bool bf16, int Dh, int64_t rows,
                       int64_t heads, int64_t batch, const Strides &st, int box_rows) {
  const EncodeTiled enc = encoder();
  if (!enc) return cudaErrorNotSupported;
  const TmaLayout l = tma_layout(Dh, rows, heads, batch, st.s, st.h, st.b, 2, box_rows);
  ord = l.order;
  const cuuint64_t dims[4] = {l.dims[0], l.dims[1], l.dims[2], l.dims[3]};
  const cuuint64_t strides[3] = {l.strides[0], l.strides[1], l.strides[2]};
  const cuuint32_t box[4] = {l.box[0], l.box[1], l.box[2], l.box[3]};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUresult r = enc(&map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                         const_cast<void *>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                         CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/// encode_map with the last few maps of this host thread kept: a launch outside a CUDA graph would otherwise
/// spend the encoder's host time (three maps) in front of every kernel. The key is every input of the map.
cudaError_t tensor_map(CUtensorMap &map, TmaOrder &ord, const void *base, bool bf16, int Dh, int64_t rows,
                       int64_t heads, int64_t batch, const Strides &st, int box_rows) {
  struct Key {
    const void *base;
    int64_t rows, heads, batch, sb, sh, ss;
    int Dh, box_rows, bf16;
    bool operator==(const Key &o) const {
      return base == o.base && rows == o.rows && heads == o.heads && batch == o.batch && sb == o.sb && sh == o.sh &&
             ss == o.ss && Dh == o.Dh && box_rows == o.box_rows && bf16 == o.bf16;
    }
  };
  struct Entry {
    Key key;
    CUtensorMap map;
    TmaOrder ord;
    bool used;
  };
  constexpr int kEntries = 6;  // q, k and v of two launches
  thread_local Entry cache[kEntries] = {};
  thread_local int next = 0;
  const Key key{base, rows, heads, batch, st.b, st.h, st.s, Dh, box_rows, bf16 ? 1 : 0};
  for (Entry &e : cache)
    if (e.used && e.key == key) {
      map = e.map;
      ord = e.ord;
      return cudaSuccess;
    }
  const cudaError_t err = encode_map(map, ord, base, bf16, Dh, rows, heads, batch, st, box_rows);
  if (err != cudaSuccess) return err;
  cache[next] = Entry{key, map, ord, true};
  next = (next + 1) % kEntries;
  return cudaSuccess;
}

template <class T, int Dh, int Bc = 128, int Stages = 2>
cudaError_t launch_ws(const void *q, const void *k, const void *v, void *out, const AttnDims &d, const MaskView &mask,
                      cudaStream_t s) {
  using L = Wg3Layout<Dh, Bc, Stages>;
  const auto kernel = wg3_kernel<T, Dh, Bc, Stages>;
  static cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::bytes));
  if (attr != cudaSuccess) return attr;
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap tq, tk, tv;
  TmaOrder oq{}, ok{}, ov{};
  cudaError_t e = tensor_map(tq, oq, q, bf16, Dh, d.S, d.Hq, d.B, d.q, 64);
  if (e == cudaSuccess) e = tensor_map(tk, ok, k, bf16, Dh, d.T, d.Hkv, d.B, d.k, Bc);
  if (e == cudaSuccess) e = tensor_map(tv, ov, v, bf16, Dh, d.T, d.Hkv, d.B, d.v, Bc);
  if (e != cudaSuccess) return e;
  dim3 grid((d.S + 127) / 128, d.B * d.Hq);
  kernel<<<grid, 384, L::bytes, s>>>(tq, tk, tv, static_cast<T *>(out), d, mask, oq, ok, ov);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_t(const void *q, const void *k, const void *v, void *out, const AttnDims &d, const MaskView &mask,
                     int head_dim, int groups, cudaStream_t s) {
  // groups is the table's variant (kernels/cuda/include/zk/attention_kernels.h). A variant without a case here
  // is an error, never another kernel: the plan names the kernel that runs.
  const bool d64 = head_dim == 64;
  switch (groups) {
    case 0:  // wgp: one warpgroup whose products overlap its softmax.
      return d64 ? launch_pipelined<T, 64>(q, k, v, out, d, mask, s) : launch_pipelined<T, 128>(q, k, v, out, d, mask, s);
    case 1:  // wg1
      return d64 ? launch<T, 64, 1>(q, k, v, out, d, mask, s) : launch<T, 128, 1>(q, k, v, out, d, mask, s);
    case 2:  // wg2
      return d64 ? launch<T, 64, 2>(q, k, v, out, d, mask, s) : launch<T, 128, 2>(q, k, v, out, d, mask, s);
    case 3:  // wg2r: two warpgroups held to two blocks per multiprocessor. At head dim 64 the kernel already takes
             // 120 registers (two blocks fit), so there it is wg2.
      return d64 ? launch<T, 64, 2>(q, k, v, out, d, mask, s) : launch<T, 128, 2, 2>(q, k, v, out, d, mask, s);
    case 4:  // wg2pp: two warpgroups in ping-pong.
      return d64 ? launch<T, 64, 2, 1, true>(q, k, v, out, d, mask, s)
                 : launch<T, 128, 2, 1, true>(q, k, v, out, d, mask, s);
    case 5:  // wg3: the producer / two-consumer kernel.
      return d64 ? launch_ws<T, 64>(q, k, v, out, d, mask, s) : launch_ws<T, 128>(q, k, v, out, d, mask, s);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t wgmma_forward(const void *q, const void *k, const void *v, void *out, const AttnDims &d,
                          const MaskView &mask, int head_dim, bool bf16, int groups, cudaStream_t s) {
  if (head_dim != 64 && head_dim != 128) return cudaErrorInvalidValue;
  return bf16 ? launch_t<__nv_bfloat16>(q, k, v, out, d, mask, head_dim, groups, s)
              : launch_t<__half>(q, k, v, out, d, mask, head_dim, groups, s);
}

}  // namespace attn
}  // namespace cuda
}  // namespace zk
