//===- ConstTensor.cpp - constant folding kernels -------------------------===//
//
// Straightforward, cache-friendly loops: shape-only subgraphs of real exports
// (the causal mask of batch 8 x 1024 x 1024 among them) fold in tens of
// milliseconds. Broadcasting walks the output in row-major order with one
// running offset per input, so no index is ever recomputed from scratch.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/ConstTensor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

using namespace zplan::import;
using llvm::ArrayRef;

bool zplan::import::isSupportedDType(int32_t d) {
  switch (d) {
  case kFloat: case kInt32: case kInt64: case kBool: case kFloat16:
  case kDouble: case kBFloat16:
    return true;
  default:
    return false;
  }
}


int64_t zplan::import::dtypeSize(int32_t d) {
  switch (d) {
  case kFloat: case kInt32: return 4;
  case kInt64: case kDouble: return 8;
  case kBool: return 1;
  case kFloat16: case kBFloat16: return 2;
  default: return 0;
  }
}

std::string zplan::import::dtypeName(int32_t d) {
  static const char *names[] = {"undefined", "float32", "uint8",  "int8",
                                "uint16",    "int16",   "int32",  "int64",
                                "string",    "bool",    "float16", "float64",
                                "uint32",    "uint64",  "complex64",
                                "complex128", "bfloat16"};
  if (d >= 0 && d <= 16)
    return names[d];
  return "dtype " + std::to_string(d);
}

std::optional<int64_t>
zplan::import::checkedNumElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return std::nullopt;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 4 / d)
      return std::nullopt;
    n *= d;
  }
  return n;
}

static int64_t numelOf(ArrayRef<int64_t> s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

int64_t zplan::import::toInt64(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= 9.2233720368547758e18)
    return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18)
    return std::numeric_limits<int64_t>::min();
  return int64_t(v);
}

/// Exact int64 arithmetic: a result outside int64 throws FoldOverflowError.
static int64_t wrapAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw FoldOverflowError{};
  return r;
}
static int64_t wrapSub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r))
    throw FoldOverflowError{};
  return r;
}
static int64_t wrapMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw FoldOverflowError{};
  return r;
}
static int64_t wrapDiv(int64_t a, int64_t b) {
  if (b == 0)
    return 0;
  if (b == -1)
    return wrapSub(0, a); // INT64_MIN / -1 leaves int64.
  return a / b;
}
static int64_t wrapMod(int64_t a, int64_t b) {
  // Python-style (ONNX fmod = 0): the result has the divisor's sign.
  if (b == 0 || b == -1 || b == 1)
    return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static int64_t wrapFMod(int64_t a, int64_t b) {
  // C-style (ONNX fmod = 1): the result has the dividend's sign. A zero
  // divisor is undefined in ONNX; -1 and 1 divide everything (and
  // INT64_MIN % -1 would trap).
  if (b == 0 || b == -1 || b == 1)
    return 0;
  return a % b;
}
static int64_t wrapPow(int64_t x, int64_t y) {
  if (y < 0)
    return x == 1 ? 1 : (x == -1 ? (y % 2 ? -1 : 1) : 0);
  int64_t result = 1;
  for (int64_t k = 0; k < y; ++k) {
    if (result == 0 || x == 1 || (x == -1 && k >= 2)) {
      if (x == -1)
        result = (y % 2) ? -1 : 1;
      break;
    }
    result = wrapMul(result, x);
  }
  return result;
}

ConstTensor::ConstTensor(int32_t dtype, ArrayRef<int64_t> shape)
    : dtype(dtype), shape(shape.begin(), shape.end()) {
  auto n = checkedNumElements(shape);
  if (!n || *n > kMaxFoldElements)
    throw FoldLimitError{n ? *n : -1};
  if (isFloat())
    f.assign(numelOf(shape), 0.0);
  else
    i.assign(numelOf(shape), 0);
}

int64_t ConstTensor::numel() const { return numelOf(shape); }

static float roundBF16(float x) {
  // Round to nearest even on the upper 16 bits, as PyTorch and ONNX Runtime
  // convert float to bfloat16.
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x))
    return x;
  u += 0x7fff + ((u >> 16) & 1);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

static float roundF16(float x) {
  // Rounds to the nearest half-precision value by scaling into the 11-bit
  // mantissa grid; overflow goes to infinity as in IEEE conversion.
  if (std::isnan(x) || std::isinf(x) || x == 0.0f)
    return x;
  float ax = std::fabs(x);
  if (ax >= 65520.0f)
    return std::copysign(INFINITY, x);
  int e;
  std::frexp(ax, &e);
  int shift = std::max(e - 11, -24);
  float q = std::ldexp(std::nearbyint(std::ldexp(ax, -shift)), shift);
  return std::copysign(q, x);
}

double zplan::import::roundTo(int32_t dtype, double v) {
  switch (dtype) {
  case kFloat: return double(float(v));
  case kBFloat16: return double(roundBF16(float(v)));
  case kFloat16: return double(roundF16(float(v)));
  default: return v;
  }
}

void ConstTensor::set(int64_t k, double v) {
  if (isFloat())
    f[k] = roundTo(dtype, v);
  else if (dtype == kBool)
    i[k] = v != 0.0;
  else if (dtype == kInt32)
    i[k] = int64_t(int32_t(uint32_t(uint64_t(toInt64(v)))));
  else
    i[k] = toInt64(v);
}

void ConstTensor::setI(int64_t k, int64_t v) {
  if (isFloat())
    f[k] = roundTo(dtype, double(v));
  else if (dtype == kBool)
    i[k] = v != 0;
  else if (dtype == kInt32)
    i[k] = int64_t(int32_t(uint32_t(uint64_t(v))));
  else
    i[k] = v;
}

std::vector<int64_t> ConstTensor::toInts() const {
  if (!isFloat())
    return i;
  std::vector<int64_t> out(f.size());
  for (size_t k = 0; k < f.size(); ++k)
    out[k] = toInt64(f[k]);
  return out;
}

bool ConstTensor::isSplat() const {
  if (isFloat()) {
    for (size_t k = 1; k < f.size(); ++k)
      if (!(f[k] == f[0] || (std::isnan(f[k]) && std::isnan(f[0]))))
        return false;
    return true;
  }
  for (size_t k = 1; k < i.size(); ++k)
    if (i[k] != i[0])
      return false;
  return true;
}

std::optional<Shape> zplan::import::broadcast(ArrayRef<int64_t> a,
                                              ArrayRef<int64_t> b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t k = 0; k < r; ++k) {
    int64_t da = k < r - a.size() ? 1 : a[k - (r - a.size())];
    int64_t db = k < r - b.size() ? 1 : b[k - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[k] = da == 1 ? db : da;
  }
  return out;
}

/// Strides of `in` aligned to the right of `out`, 0 along broadcast dims.
static Shape broadcastStrides(ArrayRef<int64_t> in, ArrayRef<int64_t> out) {
  Shape st(out.size(), 0);
  int64_t s = 1;
  for (int64_t k = int64_t(in.size()) - 1; k >= 0; --k) {
    size_t o = out.size() - in.size() + k;
    st[o] = in[k] == 1 ? 0 : s;
    s *= in[k];
  }
  return st;
}

/// Calls f(outIndex, inIndex[0..K)) for every element of `out`, in order.
template <size_t K, typename F>
static void broadcastLoop(ArrayRef<int64_t> out,
                          std::array<ArrayRef<int64_t>, K> ins, F &&f) {
  int64_t n = numelOf(out);
  if (n == 0)
    return;
  size_t r = out.size();
  std::array<int64_t, K> off{};
  if (r == 0) {
    f(int64_t(0), off);
    return;
  }
  std::array<Shape, K> st;
  for (size_t k = 0; k < K; ++k)
    st[k] = broadcastStrides(ins[k], out);
  Shape ctr(r, 0);
  int64_t inner = out[r - 1];
  std::array<int64_t, K> innerSt;
  for (size_t k = 0; k < K; ++k)
    innerSt[k] = st[k][r - 1];
  for (int64_t o = 0; o < n; o += inner) {
    std::array<int64_t, K> idx = off;
    for (int64_t j = 0; j < inner; ++j) {
      f(o + j, idx);
      for (size_t k = 0; k < K; ++k)
        idx[k] += innerSt[k];
    }
    for (int64_t d = int64_t(r) - 2; d >= 0; --d) {
      ++ctr[d];
      for (size_t k = 0; k < K; ++k)
        off[k] += st[k][d];
      if (ctr[d] < out[d])
        break;
      for (size_t k = 0; k < K; ++k)
        off[k] -= st[k][d] * out[d];
      ctr[d] = 0;
    }
  }
}

namespace zplan::import::eval {

ConstTensor unary(Unary op, const ConstTensor &x) {
  int32_t dt = (op == Unary::Not || op == Unary::IsNaN) ? kBool : x.dtype;
  ConstTensor out(dt, x.shape);
  int64_t n = x.numel();
  for (int64_t k = 0; k < n; ++k) {
    double v = x.getF(k);
    double r = 0;
    switch (op) {
    case Unary::Neg:
      if (!x.isFloat()) {
        out.setI(k, wrapSub(0, x.i[k]));
        continue;
      }
      r = -v;
      break;
    case Unary::Exp: r = std::exp(v); break;
    case Unary::Log: r = std::log(v); break;
    case Unary::Sqrt: r = std::sqrt(v); break;
    case Unary::Reciprocal: r = 1.0 / v; break;
    case Unary::Tanh: r = std::tanh(v); break;
    case Unary::Erf: r = std::erf(v); break;
    case Unary::Sigmoid: r = 1.0 / (1.0 + std::exp(-v)); break;
    case Unary::Relu: r = v > 0 ? v : 0; break;
    case Unary::Cos: r = std::cos(v); break;
    case Unary::Sin: r = std::sin(v); break;
    case Unary::Abs:
      if (!x.isFloat()) {
        out.setI(k, x.i[k] < 0 ? wrapSub(0, x.i[k]) : x.i[k]);
        continue;
      }
      r = std::fabs(v);
      break;
    case Unary::Not: r = v == 0.0; break;
    case Unary::IsNaN: r = std::isnan(v); break;
    case Unary::Floor: r = std::floor(v); break;
    case Unary::Ceil: r = std::ceil(v); break;
    case Unary::Sign: r = v > 0 ? 1 : (v < 0 ? -1 : 0); break;
    }
    out.set(k, r);
  }
  return out;
}

static bool isCompare(Binary op) {
  switch (op) {
  case Binary::Equal: case Binary::Less: case Binary::Greater:
  case Binary::LessEqual: case Binary::GreaterEqual: case Binary::And:
  case Binary::Or: case Binary::Xor:
    return true;
  default:
    return false;
  }
}

ConstTensor binary(Binary op, const ConstTensor &a, const ConstTensor &b,
                   ArrayRef<int64_t> outShape) {
  ConstTensor out(isCompare(op) ? int32_t(kBool) : a.dtype, outShape);
  std::array<ArrayRef<int64_t>, 2> ins = {a.shape, b.shape};
  if (!a.isFloat() && !b.isFloat()) {
    // Integer arithmetic stays exact in int64 (shape computations).
    // Results go straight into storage (comparisons give 0 / 1 already);
    // int32 results wrap afterwards, as int32 arithmetic would.
    int64_t *dst = out.i.data();
    const int64_t *pa = a.i.data(), *pb = b.i.data();
    auto run = [&](auto f) {
      broadcastLoop<2>(outShape, ins,
                       [&](int64_t o, std::array<int64_t, 2> ix) {
                         dst[o] = f(pa[ix[0]], pb[ix[1]]);
                       });
    };
    switch (op) {
    case Binary::Add: run(wrapAdd); break;
    case Binary::Sub: run(wrapSub); break;
    case Binary::Mul: run(wrapMul); break;
    case Binary::Div: run(wrapDiv); break;
    case Binary::Mod: run(wrapMod); break;
    case Binary::FMod: run(wrapFMod); break;
    case Binary::Pow: run(wrapPow); break;
    case Binary::Max: run([](int64_t x, int64_t y) { return std::max(x, y); }); break;
    case Binary::Min: run([](int64_t x, int64_t y) { return std::min(x, y); }); break;
    case Binary::Equal: run([](int64_t x, int64_t y) { return int64_t(x == y); }); break;
    case Binary::Less: run([](int64_t x, int64_t y) { return int64_t(x < y); }); break;
    case Binary::Greater: run([](int64_t x, int64_t y) { return int64_t(x > y); }); break;
    case Binary::LessEqual: run([](int64_t x, int64_t y) { return int64_t(x <= y); }); break;
    case Binary::GreaterEqual: run([](int64_t x, int64_t y) { return int64_t(x >= y); }); break;
    case Binary::And: run([](int64_t x, int64_t y) { return int64_t(x && y); }); break;
    case Binary::Or: run([](int64_t x, int64_t y) { return int64_t(x || y); }); break;
    case Binary::Xor: run([](int64_t x, int64_t y) { return int64_t(bool(x) != bool(y)); }); break;
    }
    if (out.dtype == kInt32)
      for (int64_t &v : out.i)
        v = int64_t(int32_t(v));
    return out;
  }
  broadcastLoop<2>(outShape, ins, [&](int64_t o, std::array<int64_t, 2> ix) {
    double x = a.getF(ix[0]), y = b.getF(ix[1]), r = 0;
    switch (op) {
    case Binary::Add: r = x + y; break;
    case Binary::Sub: r = x - y; break;
    case Binary::Mul: r = x * y; break;
    case Binary::Div: r = x / y; break;
    case Binary::Mod:
    case Binary::FMod: r = std::fmod(x, y); break;
    case Binary::Pow: r = std::pow(x, y); break;
    case Binary::Max: r = std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y); break;
    case Binary::Min: r = std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y); break;
    case Binary::Equal: r = x == y; break;
    case Binary::Less: r = x < y; break;
    case Binary::Greater: r = x > y; break;
    case Binary::LessEqual: r = x <= y; break;
    case Binary::GreaterEqual: r = x >= y; break;
    case Binary::And: r = x != 0 && y != 0; break;
    case Binary::Or: r = x != 0 || y != 0; break;
    case Binary::Xor: r = (x != 0) != (y != 0); break;
    }
    out.set(o, r);
  });
  return out;
}

ConstTensor where(const ConstTensor &c, const ConstTensor &a,
                  const ConstTensor &b, ArrayRef<int64_t> outShape) {
  ConstTensor out(a.dtype, outShape);
  std::array<ArrayRef<int64_t>, 3> ins = {c.shape, a.shape, b.shape};
  if (out.isFloat()) {
    broadcastLoop<3>(outShape, ins, [&](int64_t o, std::array<int64_t, 3> ix) {
      out.f[o] = c.getI(ix[0]) ? a.f[ix[1]] : b.f[ix[2]];
    });
  } else {
    broadcastLoop<3>(outShape, ins, [&](int64_t o, std::array<int64_t, 3> ix) {
      out.i[o] = c.getI(ix[0]) ? a.i[ix[1]] : b.i[ix[2]];
    });
  }
  return out;
}

ConstTensor cast(const ConstTensor &x, int32_t to) {
  ConstTensor out(to, x.shape);
  int64_t n = x.numel();
  if (x.isFloat())
    for (int64_t k = 0; k < n; ++k)
      out.set(k, x.f[k]);
  else
    for (int64_t k = 0; k < n; ++k)
      out.setI(k, x.i[k]);
  return out;
}

ConstTensor expand(const ConstTensor &x, ArrayRef<int64_t> outShape) {
  ConstTensor out(x.dtype, outShape);
  std::array<ArrayRef<int64_t>, 1> ins = {x.shape};
  if (x.isFloat())
    broadcastLoop<1>(outShape, ins, [&](int64_t o, std::array<int64_t, 1> ix) {
      out.f[o] = x.f[ix[0]];
    });
  else
    broadcastLoop<1>(outShape, ins, [&](int64_t o, std::array<int64_t, 1> ix) {
      out.i[o] = x.i[ix[0]];
    });
  return out;
}

/// Row-major strides of a shape.
static Shape stridesOf(ArrayRef<int64_t> s) {
  Shape st(s.size(), 1);
  for (int64_t k = int64_t(s.size()) - 2; k >= 0; --k)
    st[k] = st[k + 1] * s[k + 1];
  return st;
}

/// Steps the multi-index `ctr` to the next element of `shape` in row-major
/// order (the last dim fastest; after the last element it wraps to zeros).
static void nextIndex(llvm::MutableArrayRef<int64_t> ctr,
                      ArrayRef<int64_t> shape) {
  for (int64_t d = int64_t(ctr.size()) - 1; d >= 0; --d) {
    if (++ctr[d] < shape[d])
      break;
    ctr[d] = 0;
  }
}

/// Copies elements of x into out, where element o of out (row-major over
/// out.shape) reads x at base + sum(ctr[d] * inSt[d]).
static void stridedCopy(const ConstTensor &x, ConstTensor &out, int64_t base,
                        ArrayRef<int64_t> inSt) {
  int64_t n = out.numel();
  if (n == 0)
    return;
  size_t r = out.shape.size();
  if (r == 0) {
    if (x.isFloat())
      out.f[0] = x.f[base];
    else
      out.i[0] = x.i[base];
    return;
  }
  Shape ctr(r, 0);
  int64_t off = base;
  int64_t inner = out.shape[r - 1], is = inSt[r - 1];
  for (int64_t o = 0; o < n; o += inner) {
    int64_t p = off;
    if (x.isFloat())
      for (int64_t j = 0; j < inner; ++j, p += is)
        out.f[o + j] = x.f[p];
    else
      for (int64_t j = 0; j < inner; ++j, p += is)
        out.i[o + j] = x.i[p];
    for (int64_t d = int64_t(r) - 2; d >= 0; --d) {
      ++ctr[d];
      off += inSt[d];
      if (ctr[d] < out.shape[d])
        break;
      off -= inSt[d] * out.shape[d];
      ctr[d] = 0;
    }
  }
}

ConstTensor transpose(const ConstTensor &x, ArrayRef<int64_t> perm) {
  Shape outShape, inSt;
  Shape st = stridesOf(x.shape);
  for (int64_t p : perm) {
    outShape.push_back(x.shape[p]);
    inSt.push_back(st[p]);
  }
  ConstTensor out(x.dtype, outShape);
  stridedCopy(x, out, 0, inSt);
  return out;
}

ConstTensor concat(ArrayRef<const ConstTensor *> xs, int64_t axis) {
  Shape outShape = xs[0]->shape;
  outShape[axis] = 0;
  for (const ConstTensor *x : xs)
    outShape[axis] += x->shape[axis];
  ConstTensor out(xs[0]->dtype, outShape);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= outShape[d];
  int64_t outRow = numelOf(ArrayRef<int64_t>(outShape).drop_front(axis));
  int64_t pos = 0;
  for (const ConstTensor *x : xs) {
    int64_t row = numelOf(ArrayRef<int64_t>(x->shape).drop_front(axis));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < row; ++j) {
        if (out.isFloat())
          out.f[o * outRow + pos + j] = x->getF(o * row + j);
        else
          out.i[o * outRow + pos + j] = x->getI(o * row + j);
      }
    pos += row;
  }
  return out;
}

ConstTensor slice(const ConstTensor &x, ArrayRef<int64_t> starts,
                  ArrayRef<int64_t> steps, ArrayRef<int64_t> sizes) {
  ConstTensor out(x.dtype, sizes);
  Shape st = stridesOf(x.shape), inSt(st.size());
  int64_t base = 0;
  for (size_t d = 0; d < st.size(); ++d) {
    if (sizes[d] > 0)
      base += starts[d] * st[d];
    inSt[d] = steps[d] * st[d];
  }
  stridedCopy(x, out, base, inSt);
  return out;
}

static void copyElem(const ConstTensor &x, int64_t from, ConstTensor &out,
                     int64_t to) {
  if (x.isFloat())
    out.f[to] = x.f[from];
  else
    out.i[to] = x.i[from];
}

bool gather(const ConstTensor &x, const ConstTensor &idx, int64_t axis,
            ConstTensor &out) {
  Shape outShape(x.shape.begin(), x.shape.begin() + axis);
  outShape.append(idx.shape.begin(), idx.shape.end());
  outShape.append(x.shape.begin() + axis + 1, x.shape.end());
  out = ConstTensor(x.dtype, outShape);
  int64_t outer = numelOf(ArrayRef<int64_t>(x.shape).take_front(axis));
  int64_t inner = numelOf(ArrayRef<int64_t>(x.shape).drop_front(axis + 1));
  int64_t dim = x.shape[axis], ni = idx.numel();
  int64_t o = 0;
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t k = 0; k < ni; ++k) {
      int64_t j = idx.getI(k);
      if (!wrapIndex(j, dim))
        return false;
      for (int64_t c = 0; c < inner; ++c)
        copyElem(x, (a * dim + j) * inner + c, out, o++);
    }
  return true;
}

bool gatherElements(const ConstTensor &x, const ConstTensor &idx, int64_t axis,
                    ConstTensor &out) {
  out = ConstTensor(x.dtype, idx.shape);
  Shape xst = stridesOf(x.shape);
  int64_t n = idx.numel(), r = idx.shape.size();
  Shape ctr(r, 0);
  for (int64_t o = 0; o < n; ++o) {
    int64_t j = idx.getI(o);
    if (!wrapIndex(j, x.shape[axis]))
      return false;
    int64_t p = 0;
    for (int64_t d = 0; d < r; ++d)
      p += (d == axis ? j : ctr[d]) * xst[d];
    copyElem(x, p, out, o);
    nextIndex(ctr, idx.shape);
  }
  return true;
}

bool gatherND(const ConstTensor &x, const ConstTensor &idx, int64_t batchDims,
              ConstTensor &out) {
  int64_t q = idx.shape.size(), m = idx.shape.back();
  Shape outShape(idx.shape.begin(), idx.shape.end() - 1);
  outShape.append(x.shape.begin() + batchDims + m, x.shape.end());
  out = ConstTensor(x.dtype, outShape);
  Shape xst = stridesOf(x.shape);
  int64_t batch = numelOf(ArrayRef<int64_t>(x.shape).take_front(batchDims));
  int64_t tuples =
      numelOf(ArrayRef<int64_t>(idx.shape).slice(batchDims, q - 1 - batchDims));
  int64_t slab = numelOf(ArrayRef<int64_t>(x.shape).drop_front(batchDims + m));
  int64_t xBatch = numelOf(ArrayRef<int64_t>(x.shape).drop_front(batchDims));
  int64_t o = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t p = b * xBatch;
      for (int64_t k = 0; k < m; ++k) {
        int64_t j = idx.getI((b * tuples + t) * m + k);
        if (!wrapIndex(j, x.shape[batchDims + k]))
          return false;
        p += j * xst[batchDims + k];
      }
      for (int64_t c = 0; c < slab; ++c)
        copyElem(x, p + c, out, o++);
    }
  return true;
}

ConstTensor tile(const ConstTensor &x, ArrayRef<int64_t> reps) {
  Shape outShape;
  for (size_t d = 0; d < x.shape.size(); ++d)
    outShape.push_back(x.shape[d] * reps[d]);
  ConstTensor out(x.dtype, outShape);
  Shape xst = stridesOf(x.shape);
  int64_t n = out.numel(), r = outShape.size();
  Shape ctr(r, 0);
  for (int64_t o = 0; o < n; ++o) {
    int64_t p = 0;
    for (int64_t d = 0; d < r; ++d)
      p += (ctr[d] % x.shape[d]) * xst[d];
    copyElem(x, p, out, o);
    nextIndex(ctr, outShape);
  }
  return out;
}

ConstTensor cumsum(const ConstTensor &x, int64_t axis, bool exclusive,
                   bool reverse) {
  ConstTensor out(x.dtype, x.shape);
  int64_t outer = numelOf(ArrayRef<int64_t>(x.shape).take_front(axis));
  int64_t inner = numelOf(ArrayRef<int64_t>(x.shape).drop_front(axis + 1));
  int64_t dim = x.shape[axis];
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t c = 0; c < inner; ++c) {
      double accF = 0;
      int64_t accI = 0;
      for (int64_t s = 0; s < dim; ++s) {
        int64_t j = reverse ? dim - 1 - s : s;
        int64_t p = (a * dim + j) * inner + c;
        if (x.isFloat()) {
          double v = x.f[p];
          if (exclusive) {
            out.set(p, accF);
            accF += v;
          } else {
            accF += v;
            out.set(p, accF);
          }
        } else {
          int64_t v = x.i[p];
          if (exclusive) {
            out.setI(p, accI);
            accI = wrapAdd(accI, v);
          } else {
            accI = wrapAdd(accI, v);
            out.setI(p, accI);
          }
        }
      }
    }
  return out;
}

ConstTensor matmul(const ConstTensor &a, const ConstTensor &b,
                   ArrayRef<int64_t> outShape) {
  // Operands are promoted to at least 2-D as numpy does; the caller computed
  // outShape with the added dims removed.
  Shape as = a.shape, bs = b.shape;
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape batch = *broadcast(ArrayRef<int64_t>(as).drop_back(2),
                           ArrayRef<int64_t>(bs).drop_back(2));
  Shape aB(ArrayRef<int64_t>(as).drop_back(2)), bB(ArrayRef<int64_t>(bs).drop_back(2));
  ConstTensor out(a.dtype, outShape);
  std::array<ArrayRef<int64_t>, 2> ins = {aB, bB};
  broadcastLoop<2>(batch, ins, [&](int64_t o, std::array<int64_t, 2> ix) {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double acc = 0;
        for (int64_t t = 0; t < k; ++t)
          acc += a.getF(ix[0] * m * k + r * k + t) *
                 b.getF(ix[1] * k * n + t * n + c);
        out.set(o * m * n + r * n + c, acc);
      }
  });
  return out;
}

ConstTensor reduce(Reduce op, const ConstTensor &x, ArrayRef<int64_t> axes,
                   bool keepdims) {
  int64_t r = x.shape.size();
  Shape keepShape(x.shape);
  for (int64_t a : axes)
    keepShape[a] = 1;
  ConstTensor acc(kDouble, keepShape);
  int64_t count = 1;
  for (int64_t a : axes)
    count *= x.shape[a];
  double init = op == Reduce::Max   ? -INFINITY
                : op == Reduce::Min ? INFINITY
                : op == Reduce::Prod ? 1.0
                                     : 0.0;
  // Over bool, max is "any" and min is "all": their identities are false
  // and true (ONNX's empty-set results), not -inf and +inf.
  if (x.dtype == kBool && (op == Reduce::Max || op == Reduce::Min))
    init = op == Reduce::Max ? 0.0 : 1.0;
  std::fill(acc.f.begin(), acc.f.end(), init);
  Shape kst = broadcastStrides(keepShape, x.shape);
  Shape ctr(r, 0);
  int64_t n = x.numel();
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = 0;
    for (int64_t d = 0; d < r; ++d)
      p += ctr[d] * kst[d];
    double v = x.getF(k);
    switch (op) {
    case Reduce::Sum: case Reduce::Mean: acc.f[p] += v; break;
    case Reduce::Max: acc.f[p] = std::max(acc.f[p], v); break;
    case Reduce::Min: acc.f[p] = std::min(acc.f[p], v); break;
    case Reduce::Prod: acc.f[p] *= v; break;
    }
    nextIndex(ctr, x.shape);
  }
  Shape outShape;
  for (int64_t d = 0; d < r; ++d)
    if (keepdims || std::find(axes.begin(), axes.end(), d) == axes.end())
      outShape.push_back(keepShape[d]);
  ConstTensor out(x.dtype, outShape);
  for (int64_t k = 0; k < acc.numel(); ++k)
    out.set(k, op == Reduce::Mean ? acc.f[k] / double(count) : acc.f[k]);
  return out;
}

ConstTensor softmax(const ConstTensor &x, int64_t axis) {
  ConstTensor out(x.dtype, x.shape);
  int64_t outer = numelOf(ArrayRef<int64_t>(x.shape).take_front(axis));
  int64_t inner = numelOf(ArrayRef<int64_t>(x.shape).drop_front(axis + 1));
  int64_t dim = x.shape[axis];
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t c = 0; c < inner; ++c) {
      double mx = -INFINITY, sum = 0;
      for (int64_t s = 0; s < dim; ++s)
        mx = std::max(mx, x.getF((a * dim + s) * inner + c));
      for (int64_t s = 0; s < dim; ++s)
        sum += std::exp(x.getF((a * dim + s) * inner + c) - mx);
      for (int64_t s = 0; s < dim; ++s) {
        int64_t p = (a * dim + s) * inner + c;
        out.set(p, std::exp(x.getF(p) - mx) / sum);
      }
    }
  return out;
}

bool uniformAlong(const ConstTensor &x, size_t d) {
  int64_t outer = numelOf(ArrayRef<int64_t>(x.shape).take_front(d));
  int64_t inner = numelOf(ArrayRef<int64_t>(x.shape).drop_front(d + 1));
  int64_t dim = x.shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 1; k < dim; ++k) {
      int64_t a = (o * dim) * inner, b = (o * dim + k) * inner;
      if (x.isFloat()) {
        for (int64_t i = 0; i < inner; ++i)
          if (x.f[a + i] != x.f[b + i] &&
              !(std::isnan(x.f[a + i]) && std::isnan(x.f[b + i])))
            return false;
      } else {
        for (int64_t i = 0; i < inner; ++i)
          if (x.i[a + i] != x.i[b + i])
            return false;
      }
    }
  return true;
}

ConstTensor compress(ConstTensor x) {
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (x.shape[d] <= 1 || !uniformAlong(x, d))
      continue;
    Shape starts(x.shape.size(), 0), steps(x.shape.size(), 1), sizes = x.shape;
    sizes[d] = 1;
    x = slice(x, starts, steps, sizes);
  }
  return x;
}

} // namespace zplan::import::eval
