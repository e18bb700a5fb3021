// Element types, shapes and the scalar conversions every kernel uses (round to nearest even).
#include <cmath>
#include <cstring>

#include "common.h"

namespace zk {

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

Dims::Dims(std::initializer_list<int64_t> l) {
  for (int64_t v : l)
    if (rank < kMaxRank) d[rank++] = v;
}

bool Dims::from(const int64_t *v, int n, Dims *out) {
  if (n < 0 || n > kMaxRank) return false;
  out->rank = n;
  for (int i = 0; i < n; ++i) out->d[i] = v[i];
  return true;
}

int64_t Dims::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= d[i];
  return n;
}

bool Dims::operator==(const Dims &o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (d[i] != o.d[i]) return false;
  return true;
}

uint16_t f32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  // NaN must stay NaN: rounding could carry its payload into the exponent and make it infinity.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_f32(uint16_t x) {
  uint32_t u = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  // 65520 is halfway between the largest half (65504) and 65536; ties go to the even neighbour, infinity.
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax < 0x38800000u) {
    // Below the smallest normal half (2^-14): the result is a subnormal m * 2^-24. Scaling by 2^24 is
    // exact, and nearbyint rounds to nearest even in the default rounding mode.
    float af;
    std::memcpy(&af, &ax, 4);
    uint32_t m = static_cast<uint32_t>(std::nearbyint(af * 16777216.0f));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t e = (ax >> 23) - 127 + 15;
  uint32_t mant = ax & 0x7fffffu;
  uint32_t h = (e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent (up to infinity).
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  uint32_t u;
  if (e == 0) {
    float v = std::ldexp(static_cast<float>(m), -24);
    std::memcpy(&u, &v, 4);
    u |= sign;
  } else if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float load_f32(const void *p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float *>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t *>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t *>(p)[i]);
    case DType::i64: return static_cast<float>(static_cast<const int64_t *>(p)[i]);
    case DType::i32: return static_cast<float>(static_cast<const int32_t *>(p)[i]);
    case DType::bool8: return static_cast<const uint8_t *>(p)[i] ? 1.0f : 0.0f;
  }
  return 0.0f;
}

namespace {
// Float -> integer as ONNX Cast does (truncation toward zero), saturating instead of overflowing
// (overflow is undefined behaviour in C++) and mapping NaN to 0.
int64_t float_to_i64(float v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18f) return INT64_MAX;
  if (v <= -9.2233720368547758e18f) return INT64_MIN;
  return static_cast<int64_t>(v);
}
}  // namespace

void store_f32(void *p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float *>(p)[i] = v; return;
    case DType::bf16: static_cast<uint16_t *>(p)[i] = f32_to_bf16(v); return;
    case DType::f16: static_cast<uint16_t *>(p)[i] = f32_to_f16(v); return;
    case DType::i64: static_cast<int64_t *>(p)[i] = float_to_i64(v); return;
    case DType::i32: {
      int64_t w = float_to_i64(v);
      w = w > INT32_MAX ? INT32_MAX : (w < INT32_MIN ? INT32_MIN : w);
      static_cast<int32_t *>(p)[i] = static_cast<int32_t>(w);
      return;
    }
    case DType::bool8: static_cast<uint8_t *>(p)[i] = v != 0.0f ? 1 : 0; return;
  }
}

int64_t load_i64(const void *p, DType t, int64_t i) {
  switch (t) {
    case DType::i64: return static_cast<const int64_t *>(p)[i];
    case DType::i32: return static_cast<const int32_t *>(p)[i];
    case DType::bool8: return static_cast<const uint8_t *>(p)[i] ? 1 : 0;
    default: return float_to_i64(load_f32(p, t, i));
  }
}

void store_i64(void *p, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::i64: static_cast<int64_t *>(p)[i] = v; return;
    case DType::i32: static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v); return;
    case DType::bool8: static_cast<uint8_t *>(p)[i] = v != 0 ? 1 : 0; return;
    default: store_f32(p, t, i, static_cast<float>(v)); return;
  }
}

bool broadcastable(const Dims &in, const Dims &out) {
  if (in.rank > out.rank) return false;
  for (int i = out.rank - 1, j = in.rank - 1; j >= 0; --i, --j)
    if (in.d[j] != 1 && in.d[j] != out.d[i]) return false;
  return true;
}

bool broadcast_shapes(const Dims &a, const Dims &b, Dims *out) {
  int r = a.rank > b.rank ? a.rank : b.rank;
  Dims o;
  o.rank = r;
  for (int i = r - 1, ia = a.rank - 1, ib = b.rank - 1; i >= 0; --i, --ia, --ib) {
    int64_t x = ia >= 0 ? a.d[ia] : 1, y = ib >= 0 ? b.d[ib] : 1;
    if (x != y && x != 1 && y != 1) return false;
    o.d[i] = x == 1 ? y : x;
  }
  *out = o;
  return true;
}

}  // namespace zk
