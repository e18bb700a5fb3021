// Fused attention forward on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a; this file is built for
// that target alone, kernels/cuda/CMakeLists.txt). ZK_CUDA_ATTENTION=wg1, wg2 (one or two warpgroups per block),
// wg2r (wg2 held to 128 registers at head dim 128), wg2pp (wg2 with its warpgroups' products in ping-pong) or
// wgp (one warpgroup whose products overlap its softmax) selects them (attention.cu); none is a default.
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
#include <cstring>
#include <type_traits>

#include "attention.cuh"
#include "common.cuh"
#include "mma.cuh"

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

/// A matrix descriptor for the 128-byte swizzle: start address, leading and stride byte offsets.
__device__ __forceinline__ uint64_t desc(const void *p, uint32_t lead, uint32_t stride) {
  const uint64_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return ((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lead & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((stride & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&r, &v, 4);
  }
  return r;
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

template <int Rows, int Dh, int NT, class T>
__device__ __forceinline__ void load_rows(T *dst, const T *src, int valid, int64_t stride) {
  constexpr int per_row = Dh / 8, ld = Dh + 8;
  for (int e = threadIdx.x; e < Rows * per_row; e += NT) {
    const int r = e / per_row, c = (e % per_row) * 8;
    const bool in = r < valid;
    mma::cp_async16(dst + r * ld + c, in ? src + static_cast<int64_t>(r) * stride + c : src, in ? 16 : 0);
  }
}

/// The online softmax of one tile of 64 keys for a warp's 16 rows (rows g and g + 8 of the warp, whose first
/// query position is qw): scales and masks the scores in s, turns them into probabilities against the new
/// running max, updates m and l, and returns in alpha the factors that the output rows must be rescaled by.
/// s[4 nt + e] is key k0 + 8 nt + 2t + (e & 1) of row g (e < 2) or g + 8: the accumulator layout of m64n64.
__device__ __forceinline__ void softmax_tile(float (&s)[32], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                             const AttnDims &d, const MaskView &mask, int k0, int qw, int g, int t,
                                             int b, int h, float sl) {
  const int shift = d.T - d.S;
  const bool masked = !(sl > 0.0f) || mask.data || k0 + kBc > d.T || (d.causal && k0 + kBc - 1 > qw + shift);
  float mx[2];
  float mul;  // what turns the values in s into base-2 scaled scores
  if (masked) {
    mx[0] = mx[1] = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = k0 + nt * 8 + 2 * t + (e & 1);
        const int qi = qw + g + (e >> 1) * 8;
        float val = s[4 * nt + e] * sl;
        const bool vis = j < d.T && (!d.causal || j <= qi + shift);
        if (vis && mask.data && qi < d.S)
          val += detail::load_f(mask.data, mask.dtype,
                                b * mask.st[0] + h * mask.st[1] + static_cast<int64_t>(qi) * mask.st[2] +
                                    static_cast<int64_t>(j) * mask.st[3]) *
                 kLog2e;
        val = vis ? val : -INFINITY;
        s[4 * nt + e] = val;
        mx[e >> 1] = fmaxf(mx[e >> 1], val);
      }
    mul = 1.0f;
  } else {
    // The scale is positive: the max of the raw scores is the max of the scaled ones.
    mx[0] = fmaxf(s[0], s[1]);
    mx[1] = fmaxf(s[2], s[3]);
#pragma unroll
    for (int nt = 1; nt < 8; ++nt) {
      mx[0] = fmaxf(mx[0], fmaxf(s[4 * nt], s[4 * nt + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[4 * nt + 2], s[4 * nt + 3]));
    }
    mul = sl;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float x = mx[r];
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    const float nm = fmaxf(m[r], x * mul);
    alpha[r] = nm == -INFINITY ? 1.0f : ex2(m[r] - nm);  // a row with nothing visible yet stays empty
    m[r] = nm;
    const float base = nm == -INFINITY ? 0.0f : nm;
    float ps = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      // 2^(-inf) is 0: masked scores and an empty row (base 0) give zeros without a test.
      s[4 * nt + 2 * r] = ex2(fmaf(s[4 * nt + 2 * r], mul, -base));
      s[4 * nt + 2 * r + 1] = ex2(fmaf(s[4 * nt + 2 * r + 1], mul, -base));
      ps += s[4 * nt + 2 * r] + s[4 * nt + 2 * r + 1];
    }
    l[r] = l[r] * alpha[r] + ps;  // per-thread partial sums; the quad is summed once at the end
  }
}

template <int N>
__device__ __forceinline__ void rescale(float (&o)[N], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    o[i] *= alpha[0];
    o[i + 1] *= alpha[0];
    o[i + 2] *= alpha[1];
    o[i + 3] *= alpha[1];
  }
}

/// P's A fragments for the four 16-key steps: score tiles 2kk and 2kk + 1 are keys 16kk .. 16kk + 15.
template <class T>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[4][4], const float (&s)[32]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    pa[kk][0] = pack<T>(s[8 * kk], s[8 * kk + 1]);
    pa[kk][1] = pack<T>(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = pack<T>(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = pack<T>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

/// Normalises the output rows, writes the lse, and stores the rows through the warp's own 16 staging rows
/// (st, row stride ldq) as 16-byte stores along each row.
template <class T, int Dh, int ldq>
__device__ __forceinline__ void write_rows(const float (&o)[Dh / 2], const float (&m)[2], const float (&l)[2], T *st,
                                           const AttnDims &d, int bh, int b, int h, int qw, int g, int t, int lane,
                                           T *out) {
  constexpr int ND = Dh / 8;
  T *op = out + b * d.o.b + h * d.o.h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float x = l[r];
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    const int qi = qw + g + 8 * r;
    if (d.lse && t == 0 && qi < d.S)  // m is in base-2 units (scores times log2 e); the lse is natural
      d.lse[static_cast<int64_t>(bh) * d.S + qi] = x > 0.0f ? (m[r] + log2f(x)) * kLn2 : -INFINITY;
    const float inv = x > 0.0f ? 1.0f / x : 0.0f;
    T *row = st + (g + 8 * r) * ldq + 2 * t;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
      *reinterpret_cast<uint32_t *>(row + nd * 8) = pack<T>(o[4 * nd + 2 * r] * inv, o[4 * nd + 2 * r + 1] * inv);
  }
  __syncwarp();
  constexpr int per_row = Dh / 8;
#pragma unroll
  for (int e = lane; e < 16 * per_row; e += 32) {
    const int r = e / per_row, c = (e % per_row) * 8, qi = qw + r;
    if (qi < d.S)
      *reinterpret_cast<uint4 *>(op + static_cast<int64_t>(qi) * d.o.s + c) =
          *reinterpret_cast<const uint4 *>(st + r * ldq + c);
  }
}

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

  load_rows<Br, Dh, NT>(Qs, qp, min(Br, d.S - q0), d.q.s);
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

  load_rows<64, Dh, NT>(Qs, qp, min(64, d.S - q0), d.q.s);
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

template <class T>
cudaError_t launch_t(const void *q, const void *k, const void *v, void *out, const AttnDims &d, const MaskView &mask,
                     int head_dim, int groups, cudaStream_t s) {
  if (groups == 0)
    return head_dim == 64 ? launch_pipelined<T, 64>(q, k, v, out, d, mask, s)
                          : launch_pipelined<T, 128>(q, k, v, out, d, mask, s);
  // groups 3 (wg2r): two warpgroups held to two blocks per multiprocessor. At head dim 64 the kernel already
  // takes 120 registers (two blocks fit), so there it is wg2. groups 4 (wg2pp): two warpgroups in ping-pong.
  if (groups == 4)
    return head_dim == 64 ? launch<T, 64, 2, 1, true>(q, k, v, out, d, mask, s)
                          : launch<T, 128, 2, 1, true>(q, k, v, out, d, mask, s);
  if (head_dim == 64)
    return groups >= 2 ? launch<T, 64, 2>(q, k, v, out, d, mask, s) : launch<T, 64, 1>(q, k, v, out, d, mask, s);
  if (groups == 3) return launch<T, 128, 2, 2>(q, k, v, out, d, mask, s);
  return groups == 2 ? launch<T, 128, 2>(q, k, v, out, d, mask, s) : launch<T, 128, 1>(q, k, v, out, d, mask, s);
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
