// Elementwise kernels: unary maps, casts, numpy-broadcast binary ops, where, expand and fill.
#include <cmath>
#include <cstring>

#include "common.h"

namespace zk {
namespace cpu {
namespace {

using detail::broadcast_strides;
using detail::strided_loop;

template <class F>
void map_float(const In &x, const Out &out, F f) {
  const int64_t n = out.shape.numel();
  if (x.dtype == DType::f32 && out.dtype == DType::f32) {
    const float *a = static_cast<const float *>(x.data);
    float *o = static_cast<float *>(out.data);
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_f32(out.data, out.dtype, i, f(load_f32(x.data, x.dtype, i)));
}

template <class F>
void map_int(const In &x, const Out &out, F f) {
  const int64_t n = out.shape.numel();
  for (int64_t i = 0; i < n; ++i) store_i64(out.data, out.dtype, i, f(load_i64(x.data, x.dtype, i)));
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;

}  // namespace

Result unary(Unary op, const In &x, const Out &out) {
  if (x.shape != out.shape) return Result::fail("unary: input and output shapes differ");
  if (op == Unary::copy) {
    if (x.dtype == out.dtype) {
      if (x.data != out.data) std::memmove(out.data, x.data, static_cast<size_t>(x.shape.numel()) * dtype_size(x.dtype));
      return {};
    }
    return cast(x, out);
  }
  if (op == Unary::not_) {
    if (x.dtype != DType::bool8 || out.dtype != DType::bool8) return Result::fail("not: operands must be bool8");
    map_int(x, out, [](int64_t v) -> int64_t { return v ? 0 : 1; });
    return {};
  }
  if (x.dtype != out.dtype) return Result::fail("unary: input and output dtypes differ");
  if (!is_float(x.dtype)) {
    switch (op) {
      case Unary::neg: map_int(x, out, [](int64_t v) { return -v; }); return {};
      case Unary::abs: map_int(x, out, [](int64_t v) { return v < 0 ? -v : v; }); return {};
      case Unary::relu: map_int(x, out, [](int64_t v) { return v < 0 ? int64_t{0} : v; }); return {};
      default: return Result::fail("unary: this op needs a floating-point dtype");
    }
  }
  switch (op) {
    case Unary::neg: map_float(x, out, [](float v) { return -v; }); break;
    case Unary::exp: map_float(x, out, [](float v) { return std::exp(v); }); break;
    case Unary::log: map_float(x, out, [](float v) { return std::log(v); }); break;
    case Unary::sqrt: map_float(x, out, [](float v) { return std::sqrt(v); }); break;
    case Unary::reciprocal: map_float(x, out, [](float v) { return 1.0f / v; }); break;
    case Unary::tanh: map_float(x, out, [](float v) { return std::tanh(v); }); break;
    case Unary::erf: map_float(x, out, [](float v) { return std::erf(v); }); break;
    case Unary::sigmoid: map_float(x, out, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }); break;
    case Unary::relu: map_float(x, out, [](float v) { return v > 0.0f ? v : 0.0f; }); break;
    case Unary::cos: map_float(x, out, [](float v) { return std::cos(v); }); break;
    case Unary::sin: map_float(x, out, [](float v) { return std::sin(v); }); break;
    case Unary::abs: map_float(x, out, [](float v) { return std::fabs(v); }); break;
    case Unary::gelu_tanh:
      map_float(x, out, [](float v) {
        return 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
      });
      break;
    case Unary::gelu_erf: map_float(x, out, [](float v) { return 0.5f * v * (1.0f + std::erf(v * kInvSqrt2)); }); break;
    case Unary::silu: map_float(x, out, [](float v) { return v / (1.0f + std::exp(-v)); }); break;
    default: return Result::fail("unary: unknown op");
  }
  return {};
}

Result cast(const In &x, const Out &out) {
  if (x.shape != out.shape) return Result::fail("cast: input and output shapes differ");
  const int64_t n = x.shape.numel();
  if (x.dtype == out.dtype) {
    if (x.data != out.data) std::memmove(out.data, x.data, static_cast<size_t>(n) * dtype_size(x.dtype));
    return {};
  }
  // Integers and bools travel as int64 so that large ids survive; floats travel as fp32.
  if (is_float(x.dtype)) {
    for (int64_t i = 0; i < n; ++i) store_f32(out.data, out.dtype, i, load_f32(x.data, x.dtype, i));
  } else {
    for (int64_t i = 0; i < n; ++i) store_i64(out.data, out.dtype, i, load_i64(x.data, x.dtype, i));
  }
  return {};
}

namespace {

template <class F>
void bin_float(const In &a, const In &b, const Out &out, F f) {
  int64_t st[3][kMaxRank];
  broadcast_strides(a.shape, out.shape, st[0]);
  broadcast_strides(b.shape, out.shape, st[1]);
  detail::dense_strides(out.shape, st[2]);
  if (a.dtype == DType::f32 && b.dtype == DType::f32 && out.dtype == DType::f32) {
    const float *pa = static_cast<const float *>(a.data);
    const float *pb = static_cast<const float *>(b.data);
    float *po = static_cast<float *>(out.data);
    if (a.shape == out.shape && b.shape == out.shape) {
      const int64_t n = out.shape.numel();
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
      return;
    }
    strided_loop<3>(out.shape, st, [&](int64_t i, const int64_t *off) { po[i] = f(pa[off[0]], pb[off[1]]); });
    return;
  }
  strided_loop<3>(out.shape, st, [&](int64_t i, const int64_t *off) {
    store_f32(out.data, out.dtype, i, f(load_f32(a.data, a.dtype, off[0]), load_f32(b.data, b.dtype, off[1])));
  });
}

template <class F>
void bin_int(const In &a, const In &b, const Out &out, F f) {
  int64_t st[3][kMaxRank];
  broadcast_strides(a.shape, out.shape, st[0]);
  broadcast_strides(b.shape, out.shape, st[1]);
  detail::dense_strides(out.shape, st[2]);
  strided_loop<3>(out.shape, st, [&](int64_t i, const int64_t *off) {
    store_i64(out.data, out.dtype, i, f(load_i64(a.data, a.dtype, off[0]), load_i64(b.data, b.dtype, off[1])));
  });
}

int64_t ipow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
  int64_t r = 1;
  while (e > 0) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return r;
}

}  // namespace

Result binary(Binary op, const In &a, const In &b, const Out &out) {
  if (!broadcastable(a.shape, out.shape) || !broadcastable(b.shape, out.shape))
    return Result::fail("binary: operands do not broadcast to the output shape");
  Dims bc;
  if (!broadcast_shapes(a.shape, b.shape, &bc) || bc.numel() != out.shape.numel())
    return Result::fail("binary: broadcast of the operands is not the output shape");
  const bool fl = is_float(a.dtype) || is_float(b.dtype);
  const bool logical = op == Binary::and_ || op == Binary::or_;
  if (logical) {
    if (op == Binary::and_) bin_int(a, b, out, [](int64_t x, int64_t y) -> int64_t { return (x != 0) && (y != 0); });
    else bin_int(a, b, out, [](int64_t x, int64_t y) -> int64_t { return (x != 0) || (y != 0); });
    return {};
  }
  if (fl) {
    switch (op) {
      case Binary::add: bin_float(a, b, out, [](float x, float y) { return x + y; }); break;
      case Binary::sub: bin_float(a, b, out, [](float x, float y) { return x - y; }); break;
      case Binary::mul: bin_float(a, b, out, [](float x, float y) { return x * y; }); break;
      case Binary::div: bin_float(a, b, out, [](float x, float y) { return x / y; }); break;
      case Binary::pow: bin_float(a, b, out, [](float x, float y) { return std::pow(x, y); }); break;
      case Binary::max: bin_float(a, b, out, [](float x, float y) { return std::isnan(x) || x > y ? x : y; }); break;
      case Binary::min: bin_float(a, b, out, [](float x, float y) { return std::isnan(x) || x < y ? x : y; }); break;
      case Binary::equal: bin_float(a, b, out, [](float x, float y) { return x == y ? 1.0f : 0.0f; }); break;
      case Binary::less: bin_float(a, b, out, [](float x, float y) { return x < y ? 1.0f : 0.0f; }); break;
      case Binary::greater: bin_float(a, b, out, [](float x, float y) { return x > y ? 1.0f : 0.0f; }); break;
      case Binary::less_equal: bin_float(a, b, out, [](float x, float y) { return x <= y ? 1.0f : 0.0f; }); break;
      case Binary::greater_equal: bin_float(a, b, out, [](float x, float y) { return x >= y ? 1.0f : 0.0f; }); break;
      default: return Result::fail("binary: unknown op");
    }
    return {};
  }
  switch (op) {
    case Binary::add: bin_int(a, b, out, [](int64_t x, int64_t y) { return x + y; }); break;
    case Binary::sub: bin_int(a, b, out, [](int64_t x, int64_t y) { return x - y; }); break;
    case Binary::mul: bin_int(a, b, out, [](int64_t x, int64_t y) { return x * y; }); break;
    // Integer division by zero is undefined in C++; it gives 0 here rather than a SIGFPE.
    case Binary::div: bin_int(a, b, out, [](int64_t x, int64_t y) { return y == 0 ? int64_t{0} : x / y; }); break;
    case Binary::pow: bin_int(a, b, out, [](int64_t x, int64_t y) { return ipow(x, y); }); break;
    case Binary::max: bin_int(a, b, out, [](int64_t x, int64_t y) { return x > y ? x : y; }); break;
    case Binary::min: bin_int(a, b, out, [](int64_t x, int64_t y) { return x < y ? x : y; }); break;
    case Binary::equal: bin_int(a, b, out, [](int64_t x, int64_t y) -> int64_t { return x == y; }); break;
    case Binary::less: bin_int(a, b, out, [](int64_t x, int64_t y) -> int64_t { return x < y; }); break;
    case Binary::greater: bin_int(a, b, out, [](int64_t x, int64_t y) -> int64_t { return x > y; }); break;
    case Binary::less_equal: bin_int(a, b, out, [](int64_t x, int64_t y) -> int64_t { return x <= y; }); break;
    case Binary::greater_equal: bin_int(a, b, out, [](int64_t x, int64_t y) -> int64_t { return x >= y; }); break;
    default: return Result::fail("binary: unknown op");
  }
  return {};
}

Result where(const In &cond, const In &a, const In &b, const Out &out) {
  if (!broadcastable(cond.shape, out.shape) || !broadcastable(a.shape, out.shape) || !broadcastable(b.shape, out.shape))
    return Result::fail("where: operands do not broadcast to the output shape");
  int64_t st[3][kMaxRank];
  broadcast_strides(cond.shape, out.shape, st[0]);
  broadcast_strides(a.shape, out.shape, st[1]);
  broadcast_strides(b.shape, out.shape, st[2]);
  if (is_float(out.dtype)) {
    strided_loop<3>(out.shape, st, [&](int64_t i, const int64_t *off) {
      bool c = load_i64(cond.data, cond.dtype, off[0]) != 0;
      store_f32(out.data, out.dtype, i, c ? load_f32(a.data, a.dtype, off[1]) : load_f32(b.data, b.dtype, off[2]));
    });
  } else {
    strided_loop<3>(out.shape, st, [&](int64_t i, const int64_t *off) {
      bool c = load_i64(cond.data, cond.dtype, off[0]) != 0;
      store_i64(out.data, out.dtype, i, c ? load_i64(a.data, a.dtype, off[1]) : load_i64(b.data, b.dtype, off[2]));
    });
  }
  return {};
}

Result expand(const In &x, const Out &out) {
  if (!broadcastable(x.shape, out.shape)) return Result::fail("expand: input does not broadcast to the output shape");
  if (x.dtype != out.dtype) return Result::fail("expand: input and output dtypes differ");
  int64_t st[1][kMaxRank];
  broadcast_strides(x.shape, out.shape, st[0]);
  const size_t es = dtype_size(x.dtype);
  const auto *src = static_cast<const uint8_t *>(x.data);
  auto *dst = static_cast<uint8_t *>(out.data);
  strided_loop<1>(out.shape, st, [&](int64_t i, const int64_t *off) {
    std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(off[0]) * es, es);
  });
  return {};
}

Result fill(double value, const Out &out) {
  const int64_t n = out.shape.numel();
  if (is_float(out.dtype)) {
    for (int64_t i = 0; i < n; ++i) store_f32(out.data, out.dtype, i, static_cast<float>(value));
  } else {
    for (int64_t i = 0; i < n; ++i) store_i64(out.data, out.dtype, i, static_cast<int64_t>(value));
  }
  return {};
}

}  // namespace cpu
}  // namespace zk
