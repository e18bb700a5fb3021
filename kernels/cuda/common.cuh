// Internal helpers of the CUDA kernels: dtype-generic loads and stores, broadcast index maps, block
// reductions and the launch geometry shared by every kernel file.
#ifndef ZK_CUDA_COMMON_CUH
#define ZK_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "zk/cuda_kernels.h"

namespace zk {
namespace cuda {
namespace detail {

// --- typed storage ---------------------------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
template <class T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

/// Float -> integer as the reference does: truncation toward zero, saturating, NaN -> 0.
__device__ __forceinline__ int64_t f2i(float v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18f) return INT64_MAX;
  if (v <= -9.2233720368547758e18f) return INT64_MIN;
  return static_cast<int64_t>(v);
}

/// One element of the forward rotary embedding (pairs (i, i + D/2)): x the element, partner the element D/2
/// away, c and s the tables at x's index, `lower` where x lies in the first half. The products are rounded
/// before the sum (no contraction), as the rotary kernels and the CPU reference compute it.
__device__ __forceinline__ float rope_forward(float x, float partner, float c, float s, bool lower) {
  return lower ? __fsub_rn(__fmul_rn(x, c), __fmul_rn(partner, s)) : __fadd_rn(__fmul_rn(x, c), __fmul_rn(partner, s));
}

// --- dtype tags at run time (uniform across a launch, so the switch never diverges) ----------------------
__device__ __forceinline__ float load_f(const void *p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float *>(p)[i];
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    case DType::f16: return __half2float(static_cast<const __half *>(p)[i]);
    case DType::i64: return static_cast<float>(static_cast<const int64_t *>(p)[i]);
    case DType::i32: return static_cast<float>(static_cast<const int32_t *>(p)[i]);
    case DType::bool8: return static_cast<const uint8_t *>(p)[i] ? 1.0f : 0.0f;
  }
  return 0.0f;
}
__device__ __forceinline__ void store_f(void *p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float *>(p)[i] = v; break;
    case DType::bf16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
    case DType::f16: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
    // Floats truncate toward zero into integers, as the reference does (NaN maps to 0 to stay defined).
    case DType::i64: static_cast<int64_t *>(p)[i] = f2i(v); break;
    case DType::i32: {
      int64_t w = f2i(v);
      w = w > INT32_MAX ? INT32_MAX : (w < INT32_MIN ? INT32_MIN : w);
      static_cast<int32_t *>(p)[i] = static_cast<int32_t>(w);
      break;
    }
    case DType::bool8: static_cast<uint8_t *>(p)[i] = v != 0.0f ? 1 : 0; break;
  }
}
__device__ __forceinline__ int64_t load_i(const void *p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return f2i(static_cast<const float *>(p)[i]);
    case DType::bf16: return f2i(__bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]));
    case DType::f16: return f2i(__half2float(static_cast<const __half *>(p)[i]));
    case DType::i64: return static_cast<const int64_t *>(p)[i];
    case DType::i32: return static_cast<const int32_t *>(p)[i];
    case DType::bool8: return static_cast<const uint8_t *>(p)[i] ? 1 : 0;
  }
  return 0;
}
__device__ __forceinline__ void store_i(void *p, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::f32: static_cast<float *>(p)[i] = static_cast<float>(v); break;
    case DType::bf16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(static_cast<float>(v)); break;
    case DType::f16: static_cast<__half *>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case DType::i64: static_cast<int64_t *>(p)[i] = v; break;
    case DType::i32: static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v); break;
    case DType::bool8: static_cast<uint8_t *>(p)[i] = v != 0 ? 1 : 0; break;
  }
}

// --- 16-byte vectors ----------------------------------------------------------------------------------------
/// 16 bytes of T (8 bf16/f16 or 4 f32 elements): the unit of the memory-bound kernels' loads and stores. A
/// warp of 16-byte accesses moves 512 contiguous bytes per instruction, four times what 4-byte accesses do,
/// which is what it takes to keep enough bytes in flight to run near the device's bandwidth.
template <class T>
struct alignas(16) Pack16 {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};

/// Whether p is 16-byte aligned (a Pack16 may be read or written there).
__host__ __device__ __forceinline__ bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// --- index maps --------------------------------------------------------------------------------------------
/// Maps a dense row-major output index to the element offsets of up to N operands read with arbitrary
/// strides (0 along broadcast dims). Passed to kernels by value.
template <int N>
struct IndexMap {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t st[N][kMaxRank] = {};
  __device__ __forceinline__ void offsets(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t c = i % dims[d];
      i /= dims[d];
      for (int k = 0; k < N; ++k) off[k] += c * st[k][d];
    }
  }
};

inline void dense_strides(const Dims &s, int64_t *st) {
  int64_t acc = 1;
  for (int i = s.rank - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s.d[i];
  }
}
inline void broadcast_strides(const Dims &in, const Dims &out, int64_t *st) {
  int64_t acc = 1;
  for (int i = out.rank - 1, j = in.rank - 1; i >= 0; --i, --j) {
    if (j >= 0) {
      st[i] = in.d[j] == 1 ? 0 : acc;
      acc *= in.d[j];
    } else {
      st[i] = 0;
    }
  }
}

// --- launch geometry ----------------------------------------------------------------------------------------
constexpr int kThreads = 256;
/// Grid for a grid-stride loop over n elements: enough blocks to fill the device, never more than needed.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 132 * 32) b = 132 * 32;
  return static_cast<unsigned>(b);
}

// --- reductions ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/// Sum over the block; every thread gets the result. `red` is 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // `red` may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : -INFINITY;
  return warp_max(v);
}

/// The launcher tier's last step: a launch error (bad configuration) or an earlier asynchronous fault.
inline cudaError_t launched() { return cudaGetLastError(); }

/// Turns a launcher's cudaError_t into the backend op's status.
#define ZK_LAUNCH(expr) ZK_CUDA_TRY(expr)

// --- programmatic dependent launch (sm_90) -----------------------------------------------------------------
// A decode step is hundreds of short kernels in a row, and between two of them the GPU idles while the next
// one is launched. A kernel launched with launch_pdl may be started while the stream's previous kernel is
// still running; it begins with pdl_enter(), which waits until that kernel has finished and its writes are
// visible (griddepcontrol.wait) and then lets the stream's next kernel be launched (launch_dependents), so
// the launch overhead overlaps the previous kernel instead of following it. Ordering is unchanged: nothing
// is read or written before the wait. A kernel launched plainly passes both instructions at once, so a
// kernel with pdl_enter() is correct however it is launched. ZK_PDL=0 launches every kernel plainly.

/// Waits for the stream's previous kernel, then lets the next one launch. First statement of a kernel.
__device__ __forceinline__ void pdl_enter() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/// Whether launches may carry the programmatic attribute: ZK_PDL unset or not "0", and no launch with it
/// has failed (then every later launch is plain).
bool pdl_enabled();
void pdl_disable();

/// kernel<<<grid, block, smem, s>>>(args...) as a programmatic dependent of the stream's previous kernel
/// (plainly where pdl_enabled() is false, or where the attributed launch is refused).
template <class... KArgs, class... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                       Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (pdl_enabled()) {
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cudaLaunchKernelEx(&cfg, kernel, args...) == cudaSuccess) return cudaSuccess;
    (void)cudaGetLastError();
    pdl_disable();
  }
  cfg.attrs = nullptr;
  cfg.numAttrs = 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/// launch_pdl with the blocks grouped in clusters of `cluster_x` along x (none when it is 1).
template <class... KArgs, class... Args>
cudaError_t launch_pdl_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                               int cluster_x, Args... args) {
  if (cluster_x <= 1) return launch_pdl(kernel, grid, block, smem, s, args...);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster_x);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  if (pdl_enabled()) {
    // Where a cluster launch refuses the programmatic attribute, it goes without (this launch only).
    cfg.numAttrs = 2;
    if (cudaLaunchKernelEx(&cfg, kernel, args...) == cudaSuccess) return cudaSuccess;
    (void)cudaGetLastError();
  }
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/// 16 bytes of a row as floats: 8 elements of bf16/f16, 4 of f32 (the decode attention's K/V and q rows, the
/// sampler's logits).
template <class T>
struct Piece;
template <>
struct Piece<float> {
  static constexpr int n = 4;
  __device__ static void unpack(const uint4 &u, float (&x)[4]) {
    x[0] = __uint_as_float(u.x), x[1] = __uint_as_float(u.y), x[2] = __uint_as_float(u.z), x[3] = __uint_as_float(u.w);
  }
};
template <>
struct Piece<__nv_bfloat16> {
  static constexpr int n = 8;
  __device__ static void unpack(const uint4 &u, float (&x)[8]) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      x[2 * k] = f.x, x[2 * k + 1] = f.y;
    }
  }
};
template <>
struct Piece<__half> {
  static constexpr int n = 8;
  __device__ static void unpack(const uint4 &u, float (&x)[8]) {
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __half22float2(h[k]);
      x[2 * k] = f.x, x[2 * k + 1] = f.y;
    }
  }
};

// --- thread-block clusters (sm_90) ----------------------------------------------------------------------
// A block may write into another block's shared memory of its cluster only once that block has started; the
// kernels that combine partial results in one block announce their start with cluster_arrive_relaxed() as
// their first statement and call cluster_wait() before their first remote write, so the wait costs nothing
// by then. cluster_sync() then orders the remote writes before the reads of the block that receives them
// (release / acquire). Every thread of every block of the cluster must execute each of them.

__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

}  // namespace detail
}  // namespace cuda
}  // namespace zk

#endif  // ZK_CUDA_COMMON_CUH
