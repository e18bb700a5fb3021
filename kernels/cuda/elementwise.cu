// Elementwise kernels: unary maps, casts, numpy-broadcast binary ops, where, expand, fill and the two
// elementwise fusions the plan's patterns allow (bias + activation, gated MLP product).
//
// Tier 1 is the __global__ kernels, tier 2 the launchers in namespace `launch` (raw pointers, sizes,
// index maps and a stream, returning cudaError_t), tier 3 the zk::cuda entry points that check dtypes and
// shapes exactly as the CPU reference does.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "common.cuh"

namespace zk {
namespace cuda {
namespace {

using detail::IndexMap;
using detail::kThreads;
using detail::load_f;
using detail::load_i;
using detail::store_f;
using detail::store_i;
using detail::to_f32;
using detail::from_f32;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;

__device__ __forceinline__ float apply_unary(Unary op, float v) {
  switch (op) {
    case Unary::copy: return v;
    case Unary::neg: return -v;
    case Unary::exp: return expf(v);
    case Unary::log: return logf(v);
    case Unary::sqrt: return sqrtf(v);
    case Unary::reciprocal: return 1.0f / v;
    case Unary::tanh: return tanhf(v);
    case Unary::erf: return erff(v);
    case Unary::sigmoid: return 1.0f / (1.0f + expf(-v));
    case Unary::relu: return v > 0.0f ? v : 0.0f;
    case Unary::cos: return cosf(v);
    case Unary::sin: return sinf(v);
    case Unary::abs: return fabsf(v);
    case Unary::gelu_tanh: return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
    case Unary::gelu_erf: return 0.5f * v * (1.0f + erff(v * kInvSqrt2));
    case Unary::silu: return v / (1.0f + expf(-v));
    default: return v;
  }
}

__device__ __forceinline__ float apply_binary(Binary op, float x, float y) {
  switch (op) {
    case Binary::add: return x + y;
    case Binary::sub: return x - y;
    case Binary::mul: return x * y;
    case Binary::div: return x / y;
    case Binary::pow: return powf(x, y);
    case Binary::max: return (x != x) || x > y ? x : y;
    case Binary::min: return (x != x) || x < y ? x : y;
    case Binary::equal: return x == y ? 1.0f : 0.0f;
    case Binary::less: return x < y ? 1.0f : 0.0f;
    case Binary::greater: return x > y ? 1.0f : 0.0f;
    case Binary::less_equal: return x <= y ? 1.0f : 0.0f;
    case Binary::greater_equal: return x >= y ? 1.0f : 0.0f;
    default: return 0.0f;
  }
}

__device__ __forceinline__ int64_t ipow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
  int64_t r = 1;
  while (e > 0) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return r;
}

__device__ __forceinline__ int64_t apply_binary_int(Binary op, int64_t x, int64_t y) {
  switch (op) {
    case Binary::add: return x + y;
    case Binary::sub: return x - y;
    case Binary::mul: return x * y;
    case Binary::div: return y == 0 ? 0 : x / y;
    case Binary::pow: return ipow(x, y);
    case Binary::max: return x > y ? x : y;
    case Binary::min: return x < y ? x : y;
    case Binary::equal: return x == y;
    case Binary::less: return x < y;
    case Binary::greater: return x > y;
    case Binary::less_equal: return x <= y;
    case Binary::greater_equal: return x >= y;
    case Binary::and_: return (x != 0) && (y != 0);
    case Binary::or_: return (x != 0) || (y != 0);
  }
  return 0;
}

#define ZK_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

/// 16 bytes of T: the unit of the vectorised paths (8 bf16/f16 or 4 f32 elements per load).
template <class T>
using Pack = detail::Pack16<T>;

/// Whether every pointer is 16-byte aligned and n a whole number of packs, so the packed path applies.
template <class T>
inline bool packable(int64_t n, std::initializer_list<const void *> ps) {
  if (n % Pack<T>::N) return false;
  for (const void *p : ps)
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  return true;
}

// --- tier 1 ---------------------------------------------------------------------------------------------------
// Memory-bound maps come in two forms: Packed (16-byte loads and stores, n counted in packs) and plain.
template <class T, bool Packed>
__global__ void unary_kernel(Unary op, const T *__restrict__ x, T *__restrict__ y, int64_t n) {
  ::zk::cuda::detail::pdl_enter();
  if (Packed) {
    ZK_GRID_STRIDE(i, n) {
      Pack<T> a = reinterpret_cast<const Pack<T> *>(x)[i];
#pragma unroll
      for (int j = 0; j < Pack<T>::N; ++j) a.v[j] = from_f32<T>(apply_unary(op, to_f32(a.v[j])));
      reinterpret_cast<Pack<T> *>(y)[i] = a;
    }
  } else {
    ZK_GRID_STRIDE(i, n) y[i] = from_f32<T>(apply_unary(op, to_f32(x[i])));
  }
}

__global__ void unary_int_kernel(Unary op, const void *x, DType t, void *y, int64_t n) {
  ZK_GRID_STRIDE(i, n) {
    int64_t v = load_i(x, t, i);
    switch (op) {
      case Unary::neg: v = -v; break;
      case Unary::abs: v = v < 0 ? -v : v; break;
      case Unary::relu: v = v < 0 ? 0 : v; break;
      case Unary::not_: v = v ? 0 : 1; break;
      default: break;
    }
    store_i(y, t, i, v);
  }
}

__global__ void cast_kernel(const void *x, DType xt, void *y, DType yt, int64_t n, bool via_float) {
  ::zk::cuda::detail::pdl_enter();
  ZK_GRID_STRIDE(i, n) {
    if (via_float) store_f(y, yt, i, load_f(x, xt, i));
    else store_i(y, yt, i, load_i(x, xt, i));
  }
}

/// cast_kernel between two float storage types with whole 8-element groups: 8 elements per thread and step,
/// moved as 16- or 32-byte vectors (the casts of the bf16 step, fp32 master weights to bf16 parameters and
/// bf16 gradients to fp32, ran at half the device's bandwidth one element at a time). Same rounding.
template <class T>
struct alignas(16) Group8 {
  T v[8];
};
template <class S, class D>
__global__ void cast_vec_kernel(const Group8<S> *__restrict__ x, Group8<D> *__restrict__ y, int64_t groups) {
  ::zk::cuda::detail::pdl_enter();
  ZK_GRID_STRIDE(i, groups) {
    const Group8<S> a = x[i];
    Group8<D> b;
#pragma unroll
    for (int j = 0; j < 8; ++j) b.v[j] = from_f32<D>(to_f32(a.v[j]));
    y[i] = b;
  }
}

template <bool Dense>
__global__ void binary_kernel(Binary op, bool as_float, const void *a, DType at, const void *b, DType bt, void *y,
                              DType yt, int64_t n, IndexMap<2> map) {
  ::zk::cuda::detail::pdl_enter();
  ZK_GRID_STRIDE(i, n) {
    int64_t off[2] = {i, i};
    if (!Dense) map.offsets(i, off);
    if (as_float) store_f(y, yt, i, apply_binary(op, load_f(a, at, off[0]), load_f(b, bt, off[1])));
    else store_i(y, yt, i, apply_binary_int(op, load_i(a, at, off[0]), load_i(b, bt, off[1])));
  }
}

/// One operand dense, the other one value per row of `inner` elements (x - max over the logits' rows in
/// the loss: [rows, V] and [rows, 1]), in whole packs that never straddle a row: one division per pack
/// instead of the index map's per-element decomposition. FullFirst: the dense operand is the left one.
template <class T, bool FullFirst>
__global__ void binary_rows_kernel(Binary op, const T *__restrict__ full, const T *__restrict__ row, T *__restrict__ y,
                                   int64_t m, int64_t inner_packs) {
  ::zk::cuda::detail::pdl_enter();
  ZK_GRID_STRIDE(i, m) {
    Pack<T> p = reinterpret_cast<const Pack<T> *>(full)[i];
    const float r = to_f32(row[i / inner_packs]);
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j)
      p.v[j] = from_f32<T>(FullFirst ? apply_binary(op, to_f32(p.v[j]), r) : apply_binary(op, r, to_f32(p.v[j])));
    reinterpret_cast<Pack<T> *>(y)[i] = p;
  }
}

/// binary_rows_kernel for rows that packs do not fit (gpt2's vocabulary of 50257): rows over blockIdx.y,
/// columns over the threads, so no element needs a division either.
template <class T, bool FullFirst>
__global__ void binary_rows2d_kernel(Binary op, const T *__restrict__ full, const T *__restrict__ row,
                                     T *__restrict__ y, int64_t rows, int64_t inner) {
  ::zk::cuda::detail::pdl_enter();
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float v = to_f32(row[r]);
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < inner;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float f = to_f32(full[r * inner + j]);
      y[r * inner + j] = from_f32<T>(FullFirst ? apply_binary(op, f, v) : apply_binary(op, v, f));
    }
  }
}

/// Expand of one value per row to rows of `inner` elements of E (the loss backward's [rows, 1] ->
/// [rows, V]): rows over blockIdx.y, columns over the threads; the strided copy's per-element index
/// decomposition ran far below the device's bandwidth there.
template <class E>
__global__ void expand_rows_kernel(const E *__restrict__ x, E *__restrict__ y, int64_t rows, int64_t inner) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const E v = x[r];
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < inner;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      y[r * inner + j] = v;
  }
}

/// Grid of the row kernels: enough column blocks for one row, rows over y.
inline dim3 rows_grid(int64_t rows, int64_t inner) {
  return dim3(static_cast<unsigned>(std::min<int64_t>((inner + kThreads - 1) / kThreads, 64)),
              static_cast<unsigned>(std::min<int64_t>(rows, 4096)));
}

/// The hot path of residual adds and scalings: one storage type, equal shapes, no index math.
template <class T, bool Packed>
__global__ void binary_dense_kernel(Binary op, const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ y,
                                    int64_t n) {
  ::zk::cuda::detail::pdl_enter();
  if (Packed) {
    ZK_GRID_STRIDE(i, n) {
      Pack<T> pa = reinterpret_cast<const Pack<T> *>(a)[i];
      const Pack<T> pb = reinterpret_cast<const Pack<T> *>(b)[i];
#pragma unroll
      for (int j = 0; j < Pack<T>::N; ++j) pa.v[j] = from_f32<T>(apply_binary(op, to_f32(pa.v[j]), to_f32(pb.v[j])));
      reinterpret_cast<Pack<T> *>(y)[i] = pa;
    }
  } else {
    ZK_GRID_STRIDE(i, n) y[i] = from_f32<T>(apply_binary(op, to_f32(a[i]), to_f32(b[i])));
  }
}

/// Suffix broadcast: each operand is either the whole output or a block of its trailing dims repeated over
/// the leading ones (a bias [N], rotary tables [1, 1, S, D] against [B, H, S, D], a scalar): element i reads
/// a[i % na] and b[i % nb]. Packed: na, nb and n counted in 16-byte packs.
template <class T, bool Packed>
__global__ void binary_suffix_kernel(Binary op, const T *__restrict__ a, int64_t na, const T *__restrict__ b, int64_t nb,
                                     T *__restrict__ y, int64_t n) {
  ::zk::cuda::detail::pdl_enter();
  if (Packed) {
    ZK_GRID_STRIDE(i, n) {
      Pack<T> pa = reinterpret_cast<const Pack<T> *>(a)[i % na];
      const Pack<T> pb = reinterpret_cast<const Pack<T> *>(b)[i % nb];
#pragma unroll
      for (int j = 0; j < Pack<T>::N; ++j) pa.v[j] = from_f32<T>(apply_binary(op, to_f32(pa.v[j]), to_f32(pb.v[j])));
      reinterpret_cast<Pack<T> *>(y)[i] = pa;
    }
  } else {
    ZK_GRID_STRIDE(i, n) y[i] = from_f32<T>(apply_binary(op, to_f32(a[i % na]), to_f32(b[i % nb])));
  }
}

__global__ void where_kernel(const void *c, DType ct, const void *a, DType at, const void *b, DType bt, void *y,
                             DType yt, int64_t n, IndexMap<3> map, bool as_float) {
  ZK_GRID_STRIDE(i, n) {
    int64_t off[3];
    map.offsets(i, off);
    const bool cond = load_i(c, ct, off[0]) != 0;
    if (as_float) store_f(y, yt, i, cond ? load_f(a, at, off[1]) : load_f(b, bt, off[2]));
    else store_i(y, yt, i, cond ? load_i(a, at, off[1]) : load_i(b, bt, off[2]));
  }
}

__global__ void fill_kernel(void *y, DType t, int64_t n, double v) {
  ZK_GRID_STRIDE(i, n) {
    if (t == DType::f32 || t == DType::bf16 || t == DType::f16) store_f(y, t, i, static_cast<float>(v));
    else store_i(y, t, i, static_cast<int64_t>(v));
  }
}

template <class T, bool Packed>
__global__ void bias_act_kernel(Unary act, const T *__restrict__ x, const T *__restrict__ bias, T *__restrict__ y,
                                int64_t n, int64_t cols) {
  ::zk::cuda::detail::pdl_enter();
  if (Packed) {  // cols is a whole number of packs, so a pack never straddles two rows
    const int64_t pcols = cols / Pack<T>::N;
    ZK_GRID_STRIDE(i, n) {
      Pack<T> a = reinterpret_cast<const Pack<T> *>(x)[i];
      const Pack<T> bb = reinterpret_cast<const Pack<T> *>(bias)[i % pcols];
#pragma unroll
      for (int j = 0; j < Pack<T>::N; ++j) a.v[j] = from_f32<T>(apply_unary(act, to_f32(a.v[j]) + to_f32(bb.v[j])));
      reinterpret_cast<Pack<T> *>(y)[i] = a;
    }
  } else {
    ZK_GRID_STRIDE(i, n) y[i] = from_f32<T>(apply_unary(act, to_f32(x[i]) + to_f32(bias[i % cols])));
  }
}

/// The gated MLP product act(g) * u, with the activation a template argument (no per-element switch).
/// Packed: two packs of each operand per thread and step, loaded before either is used, so that each thread
/// keeps 64 bytes in flight (llama2-7b's [4096, 11008] bf16 product moves 270 MB a call and is bound by
/// how much the SMs keep in flight, not by arithmetic).
template <class T, bool Packed, Unary Act>
__global__ void gated_kernel(const T *__restrict__ g, const T *__restrict__ u, T *__restrict__ y, int64_t n) {
  ::zk::cuda::detail::pdl_enter();
  if (Packed) {
    using PT = Pack<T>;
    const PT *gp = reinterpret_cast<const PT *>(g), *up = reinterpret_cast<const PT *>(u);
    PT *yp = reinterpret_cast<PT *>(y);
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    for (; i + stride < n; i += 2 * stride) {
      PT a0 = gp[i], a1 = gp[i + stride];
      const PT b0 = up[i], b1 = up[i + stride];
#pragma unroll
      for (int j = 0; j < PT::N; ++j) {
        a0.v[j] = from_f32<T>(apply_unary(Act, to_f32(a0.v[j])) * to_f32(b0.v[j]));
        a1.v[j] = from_f32<T>(apply_unary(Act, to_f32(a1.v[j])) * to_f32(b1.v[j]));
      }
      yp[i] = a0;
      yp[i + stride] = a1;
    }
    if (i < n) {
      PT a = gp[i];
      const PT b = up[i];
#pragma unroll
      for (int j = 0; j < PT::N; ++j) a.v[j] = from_f32<T>(apply_unary(Act, to_f32(a.v[j])) * to_f32(b.v[j]));
      yp[i] = a;
    }
  } else {
    ZK_GRID_STRIDE(i, n) y[i] = from_f32<T>(apply_unary(Act, to_f32(g[i])) * to_f32(u[i]));
  }
}

}  // namespace

// --- tier 2 -------------------------------------------------------------------------------------------------------
namespace launch {

template <class T>
cudaError_t unary(Unary op, const T *x, T *y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (packable<T>(n, {x, y})) {
    const int64_t m = n / Pack<T>::N;
    ::zk::cuda::detail::launch_pdl(unary_kernel<T, true>, dim3(detail::grid_for(m)), dim3(kThreads), 0, s, op,
                                   x, y, m);
  } else {
    ::zk::cuda::detail::launch_pdl(unary_kernel<T, false>, dim3(detail::grid_for(n)), dim3(kThreads), 0, s,
                                   op, x, y, n);
  }
  return detail::launched();
}

template <class S, class D>
cudaError_t cast_vec(const void *x, void *y, int64_t n, cudaStream_t s) {
  const int64_t groups = n / 8;
  ::zk::cuda::detail::launch_pdl(cast_vec_kernel<S, D>, dim3(detail::grid_for(groups)), dim3(kThreads), 0, s,
                                 static_cast<const Group8<S>*>(x), static_cast<Group8<D>*>(y), groups);
  return detail::launched();
}

cudaError_t cast(const void *x, DType xt, void *y, DType yt, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool vec = is_float(xt) && is_float(yt) && n % 8 == 0 &&
                   (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  if (vec) {
    if (xt == DType::f32 && yt == DType::bf16) return cast_vec<float, __nv_bfloat16>(x, y, n, s);
    if (xt == DType::bf16 && yt == DType::f32) return cast_vec<__nv_bfloat16, float>(x, y, n, s);
    if (xt == DType::f32 && yt == DType::f16) return cast_vec<float, __half>(x, y, n, s);
    if (xt == DType::f16 && yt == DType::f32) return cast_vec<__half, float>(x, y, n, s);
  }
  ::zk::cuda::detail::launch_pdl(cast_kernel, dim3(detail::grid_for(n)), dim3(kThreads), 0, s, x, xt, y, yt,
                                 n, is_float(xt));
  return detail::launched();
}

cudaError_t binary(Binary op, bool as_float, const void *a, DType at, const void *b, DType bt, void *y, DType yt,
                   int64_t n, const IndexMap<2> *map, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (map)
    ::zk::cuda::detail::launch_pdl(binary_kernel<false>, dim3(detail::grid_for(n)), dim3(kThreads), 0, s, op,
                                   as_float, a, at, b, bt, y, yt, n, *map);
  else
    ::zk::cuda::detail::launch_pdl(binary_kernel<true>, dim3(detail::grid_for(n)), dim3(kThreads), 0, s, op,
                                   as_float, a, at, b, bt, y, yt, n, IndexMap<2>{});
  return detail::launched();
}

template <class T>
cudaError_t binary_dense(Binary op, const T *a, const T *b, T *y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (packable<T>(n, {a, b, y})) {
    const int64_t m = n / Pack<T>::N;
    ::zk::cuda::detail::launch_pdl(binary_dense_kernel<T, true>, dim3(detail::grid_for(m)), dim3(kThreads), 0,
                                   s, op, a, b, y, m);
  } else {
    ::zk::cuda::detail::launch_pdl(binary_dense_kernel<T, false>, dim3(detail::grid_for(n)), dim3(kThreads),
                                   0, s, op, a, b, y, n);
  }
  return detail::launched();
}

template <class T>
cudaError_t binary_suffix(Binary op, const T *a, int64_t na, const T *b, int64_t nb, T *y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  constexpr int V = Pack<T>::N;
  if (na % V == 0 && nb % V == 0 && packable<T>(n, {a, b, y})) {
    const int64_t m = n / V;
    ::zk::cuda::detail::launch_pdl(binary_suffix_kernel<T, true>, dim3(detail::grid_for(m)), dim3(kThreads),
                                   0, s, op, a, na / V, b, nb / V, y, m);
  } else {
    ::zk::cuda::detail::launch_pdl(binary_suffix_kernel<T, false>, dim3(detail::grid_for(n)), dim3(kThreads),
                                   0, s, op, a, na, b, nb, y, n);
  }
  return detail::launched();
}

template <class T>
cudaError_t bias_act(Unary act, const T *x, const T *bias, T *y, int64_t n, int64_t cols, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (packable<T>(cols, {x, bias, y})) {
    const int64_t m = n / Pack<T>::N;
    ::zk::cuda::detail::launch_pdl(bias_act_kernel<T, true>, dim3(detail::grid_for(m)), dim3(kThreads), 0, s,
                                   act, x, bias, y, m, cols);
  } else {
    ::zk::cuda::detail::launch_pdl(bias_act_kernel<T, false>, dim3(detail::grid_for(n)), dim3(kThreads), 0, s,
                                   act, x, bias, y, n, cols);
  }
  return detail::launched();
}

template <class T, Unary Act>
cudaError_t gated_as(const T *g, const T *u, T *y, int64_t n, cudaStream_t s) {
  if (packable<T>(n, {g, u, y})) {
    const int64_t m = n / Pack<T>::N;
    // Half as many threads as packs (each takes two a step), never fewer than fill the device.
    ::zk::cuda::detail::launch_pdl(gated_kernel<T, true, Act>, dim3(detail::grid_for((m + 1) / 2)), dim3(kThreads), 0,
                                   s, g, u, y, m);
  } else {
    ::zk::cuda::detail::launch_pdl(gated_kernel<T, false, Act>, dim3(detail::grid_for(n)), dim3(kThreads), 0, s, g,
                                   u, y, n);
  }
  return detail::launched();
}

template <class T>
cudaError_t gated(Unary act, const T *g, const T *u, T *y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  switch (act) {
    case Unary::silu: return gated_as<T, Unary::silu>(g, u, y, n, s);
    case Unary::gelu_tanh: return gated_as<T, Unary::gelu_tanh>(g, u, y, n, s);
    default: return gated_as<T, Unary::gelu_erf>(g, u, y, n, s);
  }
}

}  // namespace launch

// --- tier 3 ---------------------------------------------------------------------------------------------------------
namespace {

/// Calls f with a typed null pointer of the float storage type `t` (fp32, bf16 or fp16).
template <class F>
cudaError_t with_float_type(DType t, F &&f) {
  switch (t) {
    case DType::f32: return f(static_cast<float *>(nullptr));
    case DType::bf16: return f(static_cast<__nv_bfloat16 *>(nullptr));
    default: return f(static_cast<__half *>(nullptr));
  }
}

}  // namespace

GpuStatus unary(Unary op, const In &x, const Out &out, cudaStream_t s) {
  if (x.shape != out.shape) return kernel_failure("unary: input and output shapes differ");
  const int64_t n = x.shape.numel();
  if (op == Unary::copy) {
    if (x.dtype != out.dtype) return cast(x, out, s);
    if (x.data != out.data && n > 0)
      ZK_CUDA_TRY(cudaMemcpyAsync(out.data, x.data, static_cast<size_t>(n) * dtype_size(x.dtype), cudaMemcpyDeviceToDevice, s));
    return {};
  }
  bool int_path = false;
  if (op == Unary::not_) {
    if (x.dtype != DType::bool8 || out.dtype != DType::bool8) return kernel_failure("not: operands must be bool8");
    int_path = true;
  } else {
    if (x.dtype != out.dtype) return kernel_failure("unary: input and output dtypes differ");
    if (!is_float(x.dtype)) {
      if (op != Unary::neg && op != Unary::abs && op != Unary::relu)
        return kernel_failure("unary: this op needs a floating-point dtype");
      int_path = true;
    }
  }
  if (int_path) {
    if (n > 0) {
      unary_int_kernel<<<detail::grid_for(n), kThreads, 0, s>>>(op, x.data, x.dtype, out.data, n);
      ZK_CUDA_TRY(detail::launched());
    }
    return {};
  }
  ZK_CUDA_TRY(with_float_type(x.dtype, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch::unary<T>(op, static_cast<const T *>(x.data), static_cast<T *>(out.data), n, s);
  }));
  return {};
}

GpuStatus cast(const In &x, const Out &out, cudaStream_t s) {
  if (x.shape != out.shape) return kernel_failure("cast: input and output shapes differ");
  const int64_t n = x.shape.numel();
  if (x.dtype == out.dtype) {
    if (x.data != out.data && n > 0)
      ZK_CUDA_TRY(cudaMemcpyAsync(out.data, x.data, static_cast<size_t>(n) * dtype_size(x.dtype), cudaMemcpyDeviceToDevice, s));
    return {};
  }
  ZK_CUDA_TRY(launch::cast(x.data, x.dtype, out.data, out.dtype, n, s));
  return {};
}

GpuStatus binary(Binary op, const In &a, const In &b, const Out &out, cudaStream_t s) {
  if (!broadcastable(a.shape, out.shape) || !broadcastable(b.shape, out.shape))
    return kernel_failure("binary: operands do not broadcast to the output shape");
  Dims bc;
  if (!broadcast_shapes(a.shape, b.shape, &bc) || bc.numel() != out.shape.numel())
    return kernel_failure("binary: broadcast of the operands is not the output shape");
  const bool logical = op == Binary::and_ || op == Binary::or_;
  const bool as_float = !logical && (is_float(a.dtype) || is_float(b.dtype));
  const int64_t n = out.shape.numel();
  const bool dense = a.shape == out.shape && b.shape == out.shape;
  if (dense && as_float && a.dtype == out.dtype && b.dtype == out.dtype && is_float(out.dtype)) {
    ZK_CUDA_TRY(with_float_type(out.dtype, [&](auto *tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      return launch::binary_dense<T>(op, static_cast<const T *>(a.data), static_cast<const T *>(b.data),
                                     static_cast<T *>(out.data), n, s);
    }));
    return {};
  }
  // Operands that are the output's trailing dims (after leading ones) index with a modulo, no decomposition.
  auto suffix = [&](const Dims &x) -> int64_t {
    int lead = 0;
    while (lead < x.rank && x.d[lead] == 1) ++lead;
    const int k = x.rank - lead;
    if (k > out.shape.rank) return -1;
    int64_t len = 1;
    for (int i = 0; i < k; ++i) {
      if (x.d[lead + i] != out.shape.d[out.shape.rank - k + i]) return -1;
      len *= x.d[lead + i];
    }
    return len;
  };
  // An operand that is the output's leading dims followed by ones (same rank): one value per row of the
  // returned number of elements (-1 otherwise).
  auto per_row = [&](const Dims &x) -> int64_t {
    if (x.rank != out.shape.rank || x.rank == 0) return -1;
    int k = x.rank - 1;
    while (k >= 0 && x.d[k] == 1) --k;
    int64_t inner = 1;
    for (int i = 0; i <= k; ++i)
      if (x.d[i] != out.shape.d[i]) return -1;
    for (int i = k + 1; i < x.rank; ++i) inner *= out.shape.d[i];
    return k >= 0 ? inner : -1;
  };
  if (as_float && is_float(out.dtype) && a.dtype == out.dtype && b.dtype == out.dtype) {
    const bool a_full = a.shape == out.shape, b_full = b.shape == out.shape;
    const int64_t inner = a_full ? per_row(b.shape) : b_full ? per_row(a.shape) : -1;
    bool done = false;
    if (inner > 1)
      ZK_CUDA_TRY(with_float_type(out.dtype, [&](auto *tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        constexpr int V = Pack<T>::N;
        const T *full = static_cast<const T *>(a_full ? a.data : b.data);
        const T *row = static_cast<const T *>(a_full ? b.data : a.data);
        T *y = static_cast<T *>(out.data);
        if (inner % V != 0 || !packable<T>(n, {full, out.data})) {
          const int64_t rows = n / inner;
          if (a_full)
            ::zk::cuda::detail::launch_pdl(binary_rows2d_kernel<T, true>, dim3(rows_grid(rows, inner)),
                                           dim3(kThreads), 0, s, op, full, row, y, rows, inner);
          else
            ::zk::cuda::detail::launch_pdl(binary_rows2d_kernel<T, false>, dim3(rows_grid(rows, inner)),
                                           dim3(kThreads), 0, s, op, full, row, y, rows, inner);
          done = true;
          return detail::launched();
        }
        const int64_t m = n / V;
        if (a_full)
          ::zk::cuda::detail::launch_pdl(binary_rows_kernel<T, true>, dim3(detail::grid_for(m)),
                                         dim3(kThreads), 0, s, op, full, row, y, m, inner / V);
        else
          ::zk::cuda::detail::launch_pdl(binary_rows_kernel<T, false>, dim3(detail::grid_for(m)),
                                         dim3(kThreads), 0, s, op, full, row, y, m, inner / V);
        done = true;
        return detail::launched();
      }));
    if (done) return {};
  }
  const int64_t na = suffix(a.shape), nb = suffix(b.shape);
  if (as_float && na > 0 && nb > 0 && a.dtype == out.dtype && b.dtype == out.dtype && is_float(out.dtype)) {
    ZK_CUDA_TRY(with_float_type(out.dtype, [&](auto *tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      return launch::binary_suffix<T>(op, static_cast<const T *>(a.data), na, static_cast<const T *>(b.data), nb,
                                      static_cast<T *>(out.data), n, s);
    }));
    return {};
  }
  IndexMap<2> map;
  map.rank = out.shape.rank;
  for (int i = 0; i < out.shape.rank; ++i) map.dims[i] = out.shape.d[i];
  detail::broadcast_strides(a.shape, out.shape, map.st[0]);
  detail::broadcast_strides(b.shape, out.shape, map.st[1]);
  ZK_CUDA_TRY(launch::binary(op, as_float, a.data, a.dtype, b.data, b.dtype, out.data, out.dtype, n,
                             dense ? nullptr : &map, s));
  return {};
}

GpuStatus where(const In &c, const In &a, const In &b, const Out &out, cudaStream_t s) {
  if (!broadcastable(c.shape, out.shape) || !broadcastable(a.shape, out.shape) || !broadcastable(b.shape, out.shape))
    return kernel_failure("where: operands do not broadcast to the output shape");
  const int64_t n = out.shape.numel();
  if (n == 0) return {};
  IndexMap<3> map;
  map.rank = out.shape.rank;
  for (int i = 0; i < out.shape.rank; ++i) map.dims[i] = out.shape.d[i];
  detail::broadcast_strides(c.shape, out.shape, map.st[0]);
  detail::broadcast_strides(a.shape, out.shape, map.st[1]);
  detail::broadcast_strides(b.shape, out.shape, map.st[2]);
  where_kernel<<<detail::grid_for(n), kThreads, 0, s>>>(c.data, c.dtype, a.data, a.dtype, b.data, b.dtype, out.data,
                                                         out.dtype, n, map, is_float(out.dtype));
  ZK_CUDA_TRY(detail::launched());
  return {};
}

namespace launch {
/// movement.cu: y[i] = x[base + map.offsets(i)], widened to 16-, 8- or 4-byte moves where the innermost dim
/// is contiguous in x (strides may be 0: a broadcast).
cudaError_t strided_copy(const void *x, void *y, size_t es, int64_t n, int64_t base, IndexMap<1> map, cudaStream_t s);
}  // namespace launch

GpuStatus expand(const In &x, const Out &out, cudaStream_t s) {
  if (!broadcastable(x.shape, out.shape)) return kernel_failure("expand: input does not broadcast to the output shape");
  if (x.dtype != out.dtype) return kernel_failure("expand: input and output dtypes differ");
  // One value per row: x is the output's leading dims followed by ones, at the same rank.
  if (x.shape.rank == out.shape.rank && x.shape.rank > 0 && out.shape.numel() > 0) {
    int k = x.shape.rank - 1;
    while (k >= 0 && x.shape.d[k] == 1) --k;
    bool lead = k >= 0 && k < x.shape.rank - 1;
    for (int i = 0; lead && i <= k; ++i) lead = x.shape.d[i] == out.shape.d[i];
    const size_t es = dtype_size(x.dtype);
    if (lead && (es == 2 || es == 4 || es == 8)) {
      int64_t inner = 1;
      for (int i = k + 1; i < out.shape.rank; ++i) inner *= out.shape.d[i];
      const int64_t rows = out.shape.numel() / inner;
      const dim3 g = rows_grid(rows, inner);
      if (es == 2)
        expand_rows_kernel<uint16_t><<<g, kThreads, 0, s>>>(static_cast<const uint16_t *>(x.data),
                                                           static_cast<uint16_t *>(out.data), rows, inner);
      else if (es == 4)
        expand_rows_kernel<uint32_t><<<g, kThreads, 0, s>>>(static_cast<const uint32_t *>(x.data),
                                                           static_cast<uint32_t *>(out.data), rows, inner);
      else
        expand_rows_kernel<uint64_t><<<g, kThreads, 0, s>>>(static_cast<const uint64_t *>(x.data),
                                                           static_cast<uint64_t *>(out.data), rows, inner);
      ZK_CUDA_TRY(detail::launched());
      return {};
    }
  }
  IndexMap<1> map;
  map.rank = out.shape.rank;
  for (int i = 0; i < out.shape.rank; ++i) map.dims[i] = out.shape.d[i];
  detail::broadcast_strides(x.shape, out.shape, map.st[0]);
  // A broadcast is a strided copy with stride 0 along the broadcast dims: the copy widens its moves to 16
  // bytes when the innermost dim is not broadcast (one element at a time, bf16 expands ran far below the
  // device's bandwidth).
  ZK_CUDA_TRY(launch::strided_copy(x.data, out.data, dtype_size(x.dtype), out.shape.numel(), 0, map, s));
  return {};
}

GpuStatus fill(double value, const Out &out, cudaStream_t s) {
  const int64_t n = out.shape.numel();
  if (n == 0) return {};
  fill_kernel<<<detail::grid_for(n), kThreads, 0, s>>>(out.data, out.dtype, n, value);
  ZK_CUDA_TRY(detail::launched());
  return {};
}

GpuStatus bias_act(Unary act, const In &x, const In &bias, const Out &out, cudaStream_t s) {
  if (x.shape != out.shape || x.shape.rank < 1) return kernel_failure("bias_act: input and output shapes differ");
  if (!is_float(x.dtype) || x.dtype != out.dtype || bias.dtype != x.dtype)
    return kernel_failure("bias_act: x, bias and out must share one float dtype");
  const int64_t cols = x.shape.d[x.shape.rank - 1];
  if (bias.shape.numel() != cols) return kernel_failure("bias_act: bias must have x's last dim");
  if (act != Unary::gelu_tanh && act != Unary::gelu_erf && act != Unary::silu && act != Unary::relu && act != Unary::copy)
    return kernel_failure("bias_act: the activation must be gelu_tanh, gelu_erf, silu, relu or copy");
  ZK_CUDA_TRY(with_float_type(x.dtype, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch::bias_act<T>(act, static_cast<const T *>(x.data), static_cast<const T *>(bias.data),
                               static_cast<T *>(out.data), x.shape.numel(), cols, s);
  }));
  return {};
}

GpuStatus gated(Unary act, const In &g, const In &u, const Out &out, cudaStream_t s) {
  if (g.shape != out.shape || u.shape != out.shape) return kernel_failure("gated: gate, up and out shapes differ");
  if (!is_float(g.dtype) || g.dtype != out.dtype || u.dtype != g.dtype)
    return kernel_failure("gated: gate, up and out must share one float dtype");
  if (act != Unary::silu && act != Unary::gelu_tanh && act != Unary::gelu_erf)
    return kernel_failure("gated: the activation must be silu, gelu_tanh or gelu_erf");
  ZK_CUDA_TRY(with_float_type(g.dtype, [&](auto *tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch::gated<T>(act, static_cast<const T *>(g.data), static_cast<const T *>(u.data),
                            static_cast<T *>(out.data), out.shape.numel(), s);
  }));
  return {};
}

}  // namespace cuda
}  // namespace zk
