//===- Evaluator.cpp - a float64 interpreter of zg functions --------------===//
//
// Each op is written from its description in dialects/graph/GraphOps.td,
// reading attributes by name. Loops are naive on purpose: this is the
// reference, and the tests run it on tensors of a few dozen elements.
// A tensor-parallel program (after --zplan-tp-partition) runs as one
// interpreter per rank: weights are assembled from their zd.pieces, lookups
// honour zd.vocab_stride, and the zd collectives and zd.local_slice do what
// docs/dist-contract.md says, from their definitions.
//
//===----------------------------------------------------------------------===//

#include "Evaluator.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <unordered_map>

using namespace mlir;

namespace zplan::test {

Tensor::Tensor(std::vector<int64_t> s, double fill) : shape(std::move(s)) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  data.assign(n, fill);
}

void TpGroup::barrier() {
  std::unique_lock<std::mutex> lock(mutex);
  int64_t gen = generation;
  if (++arrived == size) {
    arrived = 0;
    ++generation;
    cv.notify_all();
    return;
  }
  cv.wait(lock, [&] { return generation != gen; });
}

std::vector<Tensor> TpGroup::exchange(int rank, const Tensor &t) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    posted[rank] = t;
  }
  barrier();
  std::vector<Tensor> all;
  {
    std::lock_guard<std::mutex> lock(mutex);
    all = posted;
  }
  // Nobody posts the next collective's part before everyone has read.
  barrier();
  return all;
}

namespace {

using Index = std::vector<int64_t>;

std::vector<int64_t> shapeOf(Value v) {
  auto s = cast<RankedTensorType>(v.getType()).getShape();
  return {s.begin(), s.end()};
}

bool isFloat(Value v) {
  return isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType());
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i)
    st[i] = st[i + 1] * shape[i + 1];
  return st;
}

/// Calls fn(index, flat) for every index of `shape` in row-major order.
void forEach(const std::vector<int64_t> &shape,
             const std::function<void(const Index &, int64_t)> &fn) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  Index idx(shape.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    fn(idx, flat);
    for (int i = int(shape.size()) - 1; i >= 0; --i) {
      if (++idx[i] < shape[i])
        break;
      idx[i] = 0;
    }
  }
}

int64_t flatOf(const std::vector<int64_t> &shape, const Index &idx) {
  int64_t f = 0;
  for (size_t i = 0; i < shape.size(); ++i)
    f = f * shape[i] + idx[i];
  return f;
}

/// The element of `t` that numpy broadcasting maps result index `idx` to.
double bcastAt(const Tensor &t, const Index &idx) {
  size_t lead = idx.size() - t.shape.size();
  int64_t f = 0;
  for (size_t i = 0; i < t.shape.size(); ++i)
    f = f * t.shape[i] + (t.shape[i] == 1 ? 0 : idx[lead + i]);
  return t.data[f];
}

double gelu(double x, bool tanhForm) {
  if (tanhForm)
    return 0.5 * x *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

int64_t intAttr(Operation *op, StringRef name) {
  return cast<IntegerAttr>(op->getAttr(name)).getInt();
}
double floatAttr(Operation *op, StringRef name) {
  return cast<FloatAttr>(op->getAttr(name)).getValueAsDouble();
}
std::vector<int64_t> arrayAttr(Operation *op, StringRef name) {
  auto a = cast<DenseI64ArrayAttr>(op->getAttr(name)).asArrayRef();
  return {a.begin(), a.end()};
}

Tensor fromElements(ElementsAttr attr) {
  auto type = cast<ShapedType>(attr.getType());
  Tensor t({type.getShape().begin(), type.getShape().end()});
  auto dense = cast<DenseElementsAttr>(attr);
  if (isa<FloatType>(type.getElementType())) {
    int64_t i = 0;
    for (APFloat v : dense.getValues<APFloat>()) {
      bool loses;
      v.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &loses);
      t.data[i++] = v.convertToDouble();
    }
  } else {
    int64_t i = 0;
    for (APInt v : dense.getValues<APInt>())
      t.data[i++] = v.getBitWidth() == 1 ? double(v.getZExtValue())
                                         : double(v.getSExtValue());
  }
  return t;
}

/// Attention in float64: returns out and lse; also P for the backward.
struct AttentionParts {
  Tensor out, lse, probs; // probs: [B, Hq, S, T]
};

AttentionParts attention(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor *mask, double scale, bool causal) {
  int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  int64_t Hkv = k.shape[1], T = k.shape[2], Dv = v.shape[3];
  AttentionParts r{Tensor({B, Hq, S, Dv}), Tensor({B, Hq, S}),
                   Tensor({B, Hq, S, T})};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t kh = h / (Hq / Hkv);
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> s(T);
        std::vector<bool> live(T, true);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q.data[flatOf(q.shape, {b, h, i, d})] *
                   k.data[flatOf(k.shape, {b, kh, j, d})];
          s[j] = scale * dot;
          if (mask)
            s[j] += bcastAt(*mask, {b, h, i, j});
          if (causal && j > i + (T - S))
            live[j] = false;
          if (std::isinf(s[j]) && s[j] < 0)
            live[j] = false;
          if (live[j])
            mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j)
          sum += live[j] ? std::exp(s[j] - mx) : 0.0;
        double lse = sum > 0 ? mx + std::log(sum)
                             : -std::numeric_limits<double>::infinity();
        r.lse.data[flatOf(r.lse.shape, {b, h, i})] = lse;
        for (int64_t j = 0; j < T; ++j) {
          double p = live[j] && sum > 0 ? std::exp(s[j] - lse) : 0.0;
          r.probs.data[flatOf(r.probs.shape, {b, h, i, j})] = p;
          for (int64_t d = 0; d < Dv; ++d)
            r.out.data[flatOf(r.out.shape, {b, h, i, d})] +=
                p * v.data[flatOf(v.shape, {b, kh, j, d})];
        }
      }
    }
  return r;
}

class Interpreter {
public:
  Interpreter(std::string *error, PersistentState *state, TpRank tp)
      : error(error), state(state), tp(tp) {}

  bool run(func::FuncOp func, const std::vector<Tensor> &args,
           std::vector<Tensor> &results) {
    // A missing argument would be read as an empty tensor: refuse instead.
    if (args.size() != func.getNumArguments()) {
      if (error)
        *error = "@" + func.getSymName().str() + " takes " +
                 std::to_string(func.getNumArguments()) + " arguments, " +
                 std::to_string(args.size()) + " given";
      return false;
    }
    for (auto [arg, t] : llvm::zip(func.getArguments(), args))
      values[arg] = t;
    for (Operation &op : func.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (Value v : ret.getOperands())
          results.push_back(values[v]);
        return true;
      }
      if (!step(&op))
        return false;
    }
    return true;
  }

private:
  const Tensor &in(Operation *op, unsigned i) {
    return values[op->getOperand(i)];
  }
  void set(Operation *op, unsigned i, Tensor t) {
    values[op->getResult(i)] = std::move(t);
  }

  bool fail(Operation *op) {
    if (error)
      *error = "evaluator: no semantics for " +
               op->getName().getStringRef().str();
    return false;
  }

  bool unary(Operation *op, const std::function<double(double)> &f) {
    Tensor r = in(op, 0);
    for (double &x : r.data)
      x = f(x);
    set(op, 0, r);
    return true;
  }

  bool binary(Operation *op, const std::function<double(double, double)> &f) {
    const Tensor &a = in(op, 0), &b = in(op, 1);
    Tensor r(shapeOf(op->getResult(0)));
    forEach(r.shape, [&](const Index &idx, int64_t flat) {
      r.data[flat] = f(bcastAt(a, idx), bcastAt(b, idx));
    });
    set(op, 0, r);
    return true;
  }

  bool reduce(Operation *op, const std::string &kind) {
    const Tensor &x = in(op, 0);
    auto axes = arrayAttr(op, "axes");
    std::vector<int64_t> kept = x.shape;
    for (int64_t a : axes)
      kept[a] = 1;
    double init = kind == "max" ? -std::numeric_limits<double>::infinity() : 0;
    Tensor r(kept, init);
    int64_t count = 1;
    for (int64_t a : axes)
      count *= x.shape[a];
    forEach(x.shape, [&](const Index &idx, int64_t flat) {
      Index k = idx;
      for (int64_t a : axes)
        k[a] = 0;
      double &acc = r.data[flatOf(kept, k)];
      acc = kind == "max" ? std::max(acc, x.data[flat]) : acc + x.data[flat];
    });
    if (kind == "mean")
      for (double &v : r.data)
        v /= double(count);
    r.shape = shapeOf(op->getResult(0));
    set(op, 0, r);
    return true;
  }

  /// [..., M, K] x [..., K, N] with batch broadcasting, 2-D forms only.
  static Tensor matmul2(const Tensor &a, const Tensor &b,
                        const std::vector<int64_t> &outShape) {
    Tensor r(outShape);
    int64_t M = a.shape[a.shape.size() - 2], K = a.shape.back(),
            N = b.shape.back();
    std::vector<int64_t> batch(outShape.begin(), outShape.end() - 2);
    // The offset of batch index `bi` in an operand whose batch dims
    // broadcast to `batch`.
    auto offset = [&](const Tensor &t, const Index &bi) {
      size_t rank = t.shape.size() - 2, lead = bi.size() - rank;
      int64_t f = 0;
      for (size_t i = 0; i < rank; ++i)
        f = f * t.shape[i] + (t.shape[i] == 1 ? 0 : bi[lead + i]);
      return f * t.shape[rank] * t.shape[rank + 1];
    };
    forEach(batch, [&](const Index &bi, int64_t flat) {
      const double *pa = &a.data[offset(a, bi)];
      const double *pb = &b.data[offset(b, bi)];
      double *pr = &r.data[flat * M * N];
      for (int64_t m = 0; m < M; ++m)
        for (int64_t kk = 0; kk < K; ++kk)
          for (int64_t n = 0; n < N; ++n)
            pr[m * N + n] += pa[m * K + kk] * pb[kk * N + n];
    });
    return r;
  }

  bool step(Operation *op) {
    StringRef name = op->getName().getStringRef();
    if (name.consume_front("zd."))
      return dist(op, name);
    if (!name.consume_front("zg."))
      return fail(op);
    // Elementwise unary.
    if (name == "neg")
      return unary(op, [](double x) { return -x; });
    if (name == "exp")
      return unary(op, [](double x) { return std::exp(x); });
    if (name == "log")
      return unary(op, [](double x) { return std::log(x); });
    if (name == "sqrt")
      return unary(op, [](double x) { return std::sqrt(x); });
    if (name == "reciprocal")
      return unary(op, [](double x) { return 1 / x; });
    if (name == "tanh")
      return unary(op, [](double x) { return std::tanh(x); });
    if (name == "erf")
      return unary(op, [](double x) { return std::erf(x); });
    if (name == "sigmoid")
      return unary(op, sigmoid);
    if (name == "relu")
      return unary(op, [](double x) { return x > 0 ? x : 0.0; });
    if (name == "cos")
      return unary(op, [](double x) { return std::cos(x); });
    if (name == "sin")
      return unary(op, [](double x) { return std::sin(x); });
    if (name == "abs")
      return unary(op, [](double x) { return std::fabs(x); });
    if (name == "silu")
      return unary(op, [](double x) { return x * sigmoid(x); });
    if (name == "not")
      return unary(op, [](double x) { return x != 0 ? 0.0 : 1.0; });
    if (name == "gelu") {
      bool t = cast<StringAttr>(op->getAttr("approximate")).getValue() ==
               "tanh";
      return unary(op, [t](double x) { return gelu(x, t); });
    }
    if (name == "cast") {
      Type to = cast<RankedTensorType>(op->getResult(0).getType())
                    .getElementType();
      if (to.isInteger(1))
        return unary(op, [](double x) { return x != 0 ? 1.0 : 0.0; });
      if (isa<IntegerType>(to))
        return unary(op, [](double x) { return std::trunc(x); });
      return unary(op, [](double x) { return x; });
    }
    // Elementwise binary.
    if (name == "add")
      return binary(op, std::plus<double>());
    if (name == "sub")
      return binary(op, std::minus<double>());
    if (name == "mul")
      return binary(op, std::multiplies<double>());
    if (name == "div") {
      if (isFloat(op->getOperand(0)))
        return binary(op, std::divides<double>());
      return binary(op, [](double a, double b) { return std::trunc(a / b); });
    }
    if (name == "pow")
      return binary(op, [](double a, double b) { return std::pow(a, b); });
    if (name == "max")
      return binary(op, [](double a, double b) { return std::max(a, b); });
    if (name == "min")
      return binary(op, [](double a, double b) { return std::min(a, b); });
    if (name == "equal")
      return binary(op, [](double a, double b) { return double(a == b); });
    if (name == "less")
      return binary(op, [](double a, double b) { return double(a < b); });
    if (name == "greater")
      return binary(op, [](double a, double b) { return double(a > b); });
    if (name == "less_equal")
      return binary(op, [](double a, double b) { return double(a <= b); });
    if (name == "greater_equal")
      return binary(op, [](double a, double b) { return double(a >= b); });
    if (name == "and")
      return binary(op, [](double a, double b) { return double(a && b); });
    if (name == "or")
      return binary(op, [](double a, double b) { return double(a || b); });
    if (name == "where") {
      const Tensor &c = in(op, 0), &a = in(op, 1), &b = in(op, 2);
      Tensor r(shapeOf(op->getResult(0)));
      forEach(r.shape, [&](const Index &idx, int64_t flat) {
        r.data[flat] = bcastAt(c, idx) != 0 ? bcastAt(a, idx) : bcastAt(b, idx);
      });
      set(op, 0, r);
      return true;
    }
    // Linear algebra.
    if (name == "matmul") {
      // The gradient rules never build transposed operands (zg.matmul's
      // trans_a / trans_b come from a plan-level fold): refuse them here.
      for (const char *flag : {"trans_a", "trans_b"})
        if (auto t = op->getAttrOfType<BoolAttr>(flag); t && t.getValue())
          return false;
      Tensor a = in(op, 0), b = in(op, 1);
      bool aVec = a.shape.size() == 1, bVec = b.shape.size() == 1;
      if (aVec)
        a.shape.insert(a.shape.begin(), 1);
      if (bVec)
        b.shape.push_back(1);
      std::vector<int64_t> out;
      size_t ra = a.shape.size() - 2, rb = b.shape.size() - 2,
             rank = std::max(ra, rb);
      for (size_t i = 0; i < rank; ++i) {
        int64_t da = i < rank - ra ? 1 : a.shape[i - (rank - ra)];
        int64_t db = i < rank - rb ? 1 : b.shape[i - (rank - rb)];
        out.push_back(da == 1 ? db : da);
      }
      out.push_back(a.shape[a.shape.size() - 2]);
      out.push_back(b.shape.back());
      Tensor r = matmul2(a, b, out);
      r.shape = shapeOf(op->getResult(0));
      set(op, 0, r);
      return true;
    }
    if (name == "linear") {
      const Tensor &x = in(op, 0), &w = in(op, 1);
      bool trans = cast<BoolAttr>(op->getAttr("trans_w")).getValue();
      double alpha = floatAttr(op, "alpha");
      int64_t K = x.shape.back(), N = trans ? w.shape[0] : w.shape[1];
      Tensor r(shapeOf(op->getResult(0)));
      int64_t rows = x.size() / K;
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += x.data[m * K + k] * (trans ? w.data[n * K + k]
                                            : w.data[k * N + n]);
          r.data[m * N + n] =
              alpha * s + (op->getNumOperands() > 2 ? in(op, 2).data[n] : 0);
        }
      set(op, 0, r);
      return true;
    }
    // Normalisation.
    if (name == "softmax") {
      const Tensor &x = in(op, 0);
      int64_t axis = intAttr(op, "axis");
      Tensor r = x;
      auto st = stridesOf(x.shape);
      forEach(x.shape, [&](const Index &idx, int64_t flat) {
        if (idx[axis] != 0)
          return;
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j < x.shape[axis]; ++j)
          mx = std::max(mx, x.data[flat + j * st[axis]]);
        for (int64_t j = 0; j < x.shape[axis]; ++j)
          sum += std::exp(x.data[flat + j * st[axis]] - mx);
        for (int64_t j = 0; j < x.shape[axis]; ++j)
          r.data[flat + j * st[axis]] =
              std::exp(x.data[flat + j * st[axis]] - mx) / sum;
      });
      set(op, 0, r);
      return true;
    }
    if (name == "softmax_grad") {
      const Tensor &y = in(op, 0), &dy = in(op, 1);
      int64_t axis = intAttr(op, "axis");
      Tensor r = y;
      auto st = stridesOf(y.shape);
      forEach(y.shape, [&](const Index &idx, int64_t flat) {
        if (idx[axis] != 0)
          return;
        double dot = 0;
        for (int64_t j = 0; j < y.shape[axis]; ++j)
          dot += y.data[flat + j * st[axis]] * dy.data[flat + j * st[axis]];
        for (int64_t j = 0; j < y.shape[axis]; ++j) {
          int64_t f = flat + j * st[axis];
          r.data[f] = y.data[f] * (dy.data[f] - dot);
        }
      });
      set(op, 0, r);
      return true;
    }
    if (name == "rotary") {
      // From the definition: y = x * cos + rotate_half(x) * sin with
      // rotate_half(x) = concat(-x[h:], x[:h]); with `inverse`, the
      // transposed map, written out as the matrix transpose: element j of
      // the result sums the forward map's coefficients of x[j] in every
      // output element (its own and its partner's).
      const Tensor &x = in(op, 0), &c = in(op, 1), &sn = in(op, 2);
      auto inv = op->getAttrOfType<BoolAttr>("inverse");
      bool inverse = inv && inv.getValue();
      int64_t d = x.shape.back(), h = d / 2;
      Tensor r(x.shape);
      forEach(x.shape, [&](const Index &idx, int64_t flat) {
        int64_t j = idx.back();
        Index p = idx;
        p.back() = j < h ? j + h : j - h;
        int64_t pf = flat + (j < h ? h : -h);
        // Forward: out[j] = x[j] c[j] + sign(j) x[p] s[j], sign = -1 on the
        // low half. Transpose: out[j] = x[j] c[j] + sign(p) x[p] s[p].
        if (!inverse)
          r.data[flat] = x.data[flat] * bcastAt(c, idx) +
                         (j < h ? -1.0 : 1.0) * x.data[pf] * bcastAt(sn, idx);
        else
          r.data[flat] = x.data[flat] * bcastAt(c, idx) +
                         (j < h ? 1.0 : -1.0) * x.data[pf] * bcastAt(sn, p);
      });
      set(op, 0, r);
      return true;
    }
    if (name == "layer_norm" || name == "layer_norm_grad" ||
        name == "rms_norm" || name == "rms_norm_grad")
      return norm(op, name);
    // Reductions.
    if (name == "reduce_sum")
      return reduce(op, "sum");
    if (name == "reduce_mean")
      return reduce(op, "mean");
    if (name == "reduce_max")
      return reduce(op, "max");
    if (name == "sum_squares") {
      Tensor r(std::vector<int64_t>{});
      for (double v : in(op, 0).data)
        r.data[0] += v * v;
      set(op, 0, r);
      return true;
    }
    // Data movement.
    if (name == "reshape") {
      Tensor r = in(op, 0);
      r.shape = shapeOf(op->getResult(0));
      set(op, 0, r);
      return true;
    }
    if (name == "transpose") {
      const Tensor &x = in(op, 0);
      auto perm = arrayAttr(op, "perm");
      Tensor r(shapeOf(op->getResult(0)));
      forEach(r.shape, [&](const Index &idx, int64_t flat) {
        Index src(idx.size());
        for (size_t i = 0; i < perm.size(); ++i)
          src[perm[i]] = idx[i];
        r.data[flat] = x.data[flatOf(x.shape, src)];
      });
      set(op, 0, r);
      return true;
    }
    if (name == "expand") {
      const Tensor &x = in(op, 0);
      Tensor r(shapeOf(op->getResult(0)));
      forEach(r.shape, [&](const Index &idx, int64_t flat) {
        r.data[flat] = bcastAt(x, idx);
      });
      set(op, 0, r);
      return true;
    }
    if (name == "concat") {
      int64_t axis = intAttr(op, "axis");
      Tensor r(shapeOf(op->getResult(0)));
      int64_t offset = 0;
      for (unsigned i = 0; i < op->getNumOperands(); ++i) {
        const Tensor &x = in(op, i);
        forEach(x.shape, [&](const Index &idx, int64_t flat) {
          Index o = idx;
          o[axis] += offset;
          r.data[flatOf(r.shape, o)] = x.data[flat];
        });
        offset += x.shape[axis];
      }
      set(op, 0, r);
      return true;
    }
    if (name == "split") {
      int64_t axis = intAttr(op, "axis");
      const Tensor &x = in(op, 0);
      int64_t offset = 0;
      for (unsigned i = 0; i < op->getNumResults(); ++i) {
        Tensor r(shapeOf(op->getResult(i)));
        forEach(r.shape, [&](const Index &idx, int64_t flat) {
          Index s = idx;
          s[axis] += offset;
          r.data[flat] = x.data[flatOf(x.shape, s)];
        });
        offset += r.shape[axis];
        set(op, i, r);
      }
      return true;
    }
    if (name == "slice") {
      const Tensor &x = in(op, 0);
      auto starts = arrayAttr(op, "starts"), steps = arrayAttr(op, "steps");
      Tensor r(shapeOf(op->getResult(0)));
      forEach(r.shape, [&](const Index &idx, int64_t flat) {
        Index s(idx.size());
        for (size_t d = 0; d < idx.size(); ++d)
          s[d] = starts[d] + idx[d] * steps[d];
        r.data[flat] = x.data[flatOf(x.shape, s)];
      });
      set(op, 0, r);
      return true;
    }
    if (name == "gather") {
      const Tensor &x = in(op, 0), &ids = in(op, 1);
      int64_t axis = intAttr(op, "axis"), ni = ids.shape.size();
      Tensor r(shapeOf(op->getResult(0)));
      forEach(r.shape, [&](const Index &idx, int64_t flat) {
        Index iid(idx.begin() + axis, idx.begin() + axis + ni);
        int64_t j = int64_t(ids.data[flatOf(ids.shape, iid)]);
        if (j < 0)
          j += x.shape[axis];
        Index s(idx.begin(), idx.begin() + axis);
        s.push_back(j);
        s.insert(s.end(), idx.begin() + axis + ni, idx.end());
        r.data[flat] = x.data[flatOf(x.shape, s)];
      });
      set(op, 0, r);
      return true;
    }
    if (name == "embedding") {
      const Tensor &t = in(op, 0), &ids = in(op, 1);
      int64_t D = t.shape[1], start = vocabStart(op);
      Tensor r(shapeOf(op->getResult(0)));
      for (int64_t i = 0; i < ids.size(); ++i) {
        int64_t row = int64_t(ids.data[i]) - start;
        if (row < 0 || row >= t.shape[0])
          continue; // another rank's row: zero here
        for (int64_t d = 0; d < D; ++d)
          r.data[i * D + d] = t.data[row * D + d];
      }
      set(op, 0, r);
      return true;
    }
    if (name == "embedding_grad") {
      const Tensor &ids = in(op, 0), &dy = in(op, 1);
      Tensor r(shapeOf(op->getResult(0)));
      int64_t D = r.shape[1], start = vocabStart(op);
      for (int64_t i = 0; i < ids.size(); ++i) {
        int64_t row = int64_t(ids.data[i]) - start;
        if (row < 0 || row >= r.shape[0])
          continue;
        for (int64_t d = 0; d < D; ++d)
          r.data[row * D + d] += dy.data[i * D + d];
      }
      set(op, 0, r);
      return true;
    }
    if (name == "label_pick" || name == "label_pick_grad") {
      bool grad = name == "label_pick_grad";
      const Tensor &a = in(op, 0), &b = in(op, 1);
      const Tensor &labels = grad ? a : b;
      int64_t ignore = intAttr(op, "ignore_index");
      Tensor r(shapeOf(op->getResult(0)));
      int64_t V = grad ? r.shape[1] : a.shape[1], start = vocabStart(op);
      for (int64_t n = 0; n < labels.size(); ++n) {
        int64_t y = int64_t(labels.data[n]);
        if (y == ignore)
          continue;
        y -= start;
        if (y < 0 || y >= V)
          continue; // another rank's column: 0 here
        if (grad)
          r.data[n * V + y] = b.data[n];
        else
          r.data[n] = a.data[n * V + y];
      }
      set(op, 0, r);
      return true;
    }
    if (name == "attention" || name == "attention_grad")
      return attentionStep(op, name == "attention_grad");
    if (name == "gelu_grad" || name == "silu_grad") {
      bool t = name == "gelu_grad" &&
               cast<StringAttr>(op->getAttr("approximate")).getValue() ==
                   "tanh";
      bool silu = name == "silu_grad";
      const Tensor &x = in(op, 0), &dy = in(op, 1);
      Tensor r = x;
      for (int64_t i = 0; i < x.size(); ++i) {
        double v = x.data[i], d;
        if (silu) {
          double s = sigmoid(v);
          d = s * (1 + v * (1 - s));
        } else if (t) {
          double c = std::sqrt(2 / M_PI), u = c * (v + 0.044715 * v * v * v);
          double th = std::tanh(u);
          d = 0.5 * (1 + th) +
              0.5 * v * (1 - th * th) * c * (1 + 3 * 0.044715 * v * v);
        } else {
          d = 0.5 * (1 + std::erf(v / std::sqrt(2.0))) +
              v * std::exp(-v * v / 2) / std::sqrt(2 * M_PI);
        }
        r.data[i] = dy.data[i] * d;
      }
      set(op, 0, r);
      return true;
    }
    // Storage.
    if (name == "constant") {
      set(op, 0, fromElements(cast<ElementsAttr>(op->getAttr("value"))));
      return true;
    }
    if (name == "weight")
      return weight(op);
    if (name == "state" || name == "assign" || name == "accumulate" ||
        name == "adamw")
      return persistent(op, name);
    return fail(op);
  }

  /// layer_norm, rms_norm and their gradients, from the definitions:
  /// y = (x - mean) / sqrt(var + eps) * scale + bias over dims >= axis, and
  /// y = x / sqrt(mean(x^2) + eps) * scale over the last dim.
  bool norm(Operation *op, StringRef name) {
    bool rms = name.starts_with("rms"), grad = name.ends_with("_grad");
    const Tensor &x = in(op, 0);
    int64_t axis = rms ? int64_t(x.shape.size()) - 1 : intAttr(op, "axis");
    double eps = floatAttr(op, "epsilon");
    int64_t inner = 1;
    for (size_t d = axis; d < x.shape.size(); ++d)
      inner *= x.shape[d];
    int64_t rows = x.size() / inner;
    std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
    // The scale (and bias) broadcast to the normalised dims.
    auto spread = [&](int operand, double fill) {
      Tensor t(normShape, fill);
      if (operand < 0 || unsigned(operand) >= op->getNumOperands())
        return t;
      const Tensor &s = in(op, operand);
      forEach(normShape, [&](const Index &idx, int64_t flat) {
        t.data[flat] = bcastAt(s, idx);
      });
      return t;
    };
    Tensor scale = spread(1, 1.0);
    Tensor bias = (!grad && !rms) ? spread(2, 0.0) : Tensor(normShape, 0.0);
    Tensor dx(x.shape), ds(normShape), db(normShape);
    Tensor y(x.shape);
    for (int64_t r = 0; r < rows; ++r) {
      const double *xr = &x.data[r * inner];
      double mean = 0, var = 0;
      if (!rms) {
        for (int64_t i = 0; i < inner; ++i)
          mean += xr[i];
        mean /= inner;
      }
      for (int64_t i = 0; i < inner; ++i)
        var += (xr[i] - mean) * (xr[i] - mean);
      var /= inner;
      double inv = 1 / std::sqrt(var + eps);
      if (!grad) {
        for (int64_t i = 0; i < inner; ++i)
          y.data[r * inner + i] =
              (xr[i] - mean) * inv * scale.data[i] + bias.data[i];
        continue;
      }
      const double *dyr = &in(op, 2).data[r * inner];
      // With xhat = (x - mean) * inv and g = dy * scale:
      // dx = inv * (g - mean(g) - xhat * mean(g * xhat)) for layer norm and
      // dx = inv * (g - xhat * mean(g * xhat)) for RMS norm.
      double mg = 0, mgx = 0;
      for (int64_t i = 0; i < inner; ++i) {
        double xhat = (xr[i] - mean) * inv, g = dyr[i] * scale.data[i];
        mg += g;
        mgx += g * xhat;
        ds.data[i] += dyr[i] * xhat;
        db.data[i] += dyr[i];
      }
      mg /= inner;
      mgx /= inner;
      for (int64_t i = 0; i < inner; ++i) {
        double xhat = (xr[i] - mean) * inv, g = dyr[i] * scale.data[i];
        dx.data[r * inner + i] = inv * (g - (rms ? 0 : mg) - xhat * mgx);
      }
    }
    if (!grad) {
      set(op, 0, y);
      return true;
    }
    set(op, 0, dx);
    ds.shape = shapeOf(op->getResult(1));
    set(op, 1, ds);
    if (!rms) {
      db.shape = shapeOf(op->getResult(2));
      set(op, 2, db);
    }
    return true;
  }

  bool attentionStep(Operation *op, bool grad) {
    const Tensor &q = in(op, 0), &k = in(op, 1), &v = in(op, 2);
    double scale = floatAttr(op, "scale");
    bool causal = cast<BoolAttr>(op->getAttr("causal")).getValue();
    unsigned maskIndex = grad ? 6 : 3;
    const Tensor *mask =
        op->getNumOperands() > maskIndex ? &in(op, maskIndex) : nullptr;
    AttentionParts a = attention(q, k, v, mask, scale, causal);
    if (!grad) {
      set(op, 0, a.out);
      if (op->getNumResults() > 1)
        set(op, 1, a.lse);
      return true;
    }
    // The probabilities come from the given lse, as the op's contract says.
    const Tensor &out = in(op, 3), &dout = in(op, 4), &lse = in(op, 5);
    int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
    int64_t Hkv = k.shape[1], T = k.shape[2];
    Tensor dq(q.shape), dk(k.shape), dv(v.shape);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h) {
        int64_t kh = h / (Hq / Hkv);
        for (int64_t i = 0; i < S; ++i) {
          double l = lse.data[flatOf(lse.shape, {b, h, i})];
          double rowDot = 0;
          for (int64_t d = 0; d < D; ++d)
            rowDot += dout.data[flatOf(q.shape, {b, h, i, d})] *
                      out.data[flatOf(q.shape, {b, h, i, d})];
          for (int64_t j = 0; j < T; ++j) {
            if (causal && j > i + (T - S))
              continue;
            double s = 0;
            for (int64_t d = 0; d < D; ++d)
              s += q.data[flatOf(q.shape, {b, h, i, d})] *
                   k.data[flatOf(k.shape, {b, kh, j, d})];
            s *= scale;
            if (mask)
              s += bcastAt(*mask, {b, h, i, j});
            double p = std::isinf(l) ? 0.0 : std::exp(s - l);
            double dp = 0;
            for (int64_t d = 0; d < D; ++d) {
              dv.data[flatOf(v.shape, {b, kh, j, d})] +=
                  p * dout.data[flatOf(q.shape, {b, h, i, d})];
              dp += dout.data[flatOf(q.shape, {b, h, i, d})] *
                    v.data[flatOf(v.shape, {b, kh, j, d})];
            }
            double ds = p * (dp - rowDot) * scale;
            for (int64_t d = 0; d < D; ++d) {
              dq.data[flatOf(q.shape, {b, h, i, d})] +=
                  ds * k.data[flatOf(k.shape, {b, kh, j, d})];
              dk.data[flatOf(k.shape, {b, kh, j, d})] +=
                  ds * q.data[flatOf(q.shape, {b, h, i, d})];
            }
          }
        }
      }
    set(op, 0, dq);
    set(op, 1, dk);
    set(op, 2, dv);
    return true;
  }

  /// Reads a parameter: its current value when a program already wrote or
  /// read it, else its inline value or its bytes in the external data file.
  /// This dp rank's flat ZeRO shard of the tp-local tensor, zero-padded to
  /// a multiple of dp.
  bool weightShard(Operation *op) {
    std::string name = cast<StringAttr>(op->getAttr("name")).str();
    if (state && state->tensors.count(name)) {
      set(op, 0, state->tensors[name]);
      return true;
    }
    auto shapeAttr = [&](StringRef n) {
      auto a = op->getAttrOfType<DenseI64ArrayAttr>(n).asArrayRef();
      return std::vector<int64_t>(a.begin(), a.end());
    };
    Tensor local;
    if (!loadLocal(op, shapeAttr("local_shape"), shapeAttr("source_shape"),
                   op->getAttrOfType<ArrayAttr>("pieces"), local))
      return fail(op);
    Tensor shard(shapeOf(op->getResult(0)));
    for (int64_t i = 0; i < shard.size(); ++i) {
      int64_t at = tp.dpRank * shard.size() + i;
      if (at < local.size())
        shard.data[i] = local.data[at];
    }
    if (state)
      state->tensors[name] = shard;
    set(op, 0, shard);
    return true;
  }

  bool weight(Operation *op) {
    std::string name = cast<StringAttr>(op->getAttr("name")).str();
    if (state && state->tensors.count(name)) {
      set(op, 0, state->tensors[name]);
      return true;
    }
    std::vector<int64_t> localShape = shapeOf(op->getResult(0)), global =
                                                                     localShape;
    if (auto src = op->getAttrOfType<DenseI64ArrayAttr>("zd.source_shape"))
      global.assign(src.asArrayRef().begin(), src.asArrayRef().end());
    Tensor t;
    if (!loadLocal(op, localShape, global,
                   op->getAttrOfType<ArrayAttr>("zd.pieces"), t))
      return fail(op);
    if (state)
      state->tensors[name] = t;
    set(op, 0, t);
    return true;
  }

  /// A tp-split weight's inline value or file bytes are the whole tensor
  /// (`global`); this rank's pieces are copied into its local tensor and the
  /// rest (vocabulary padding) stays zero.
  bool loadLocal(Operation *op, const std::vector<int64_t> &localShape,
                 const std::vector<int64_t> &global, ArrayAttr pieces,
                 Tensor &t) {
    t = Tensor(localShape);
    Tensor whole(global);
    if (auto value = op->getAttr("value")) {
      whole = fromElements(cast<ElementsAttr>(value));
    } else {
      if (!state)
        return false;
      auto elt = cast<RankedTensorType>(op->getResult(0).getType())
                     .getElementType();
      if (!elt.isF32())
        return false;
      std::string path =
          state->weightDir + "/" + cast<StringAttr>(op->getAttr("file")).str();
      FILE *file = std::fopen(path.c_str(), "rb");
      if (!file)
        return false;
      std::vector<float> raw(whole.size());
      std::fseek(file, long(intAttr(op, "offset")), SEEK_SET);
      size_t got = std::fread(raw.data(), sizeof(float), raw.size(), file);
      std::fclose(file);
      if (got != raw.size())
        return false;
      for (int64_t i = 0; i < whole.size(); ++i)
        whole.data[i] = raw[i];
    }
    if (pieces) {
      for (Attribute p : cast<ArrayAttr>(pieces[tp.rank])) {
        auto box = cast<DictionaryAttr>(p);
        auto field = [&](StringRef f) {
          auto a = cast<DenseI64ArrayAttr>(box.get(f)).asArrayRef();
          return Index(a.begin(), a.end());
        };
        Index src = field("src_start"), dst = field("dst_start"),
              size = field("size");
        forEach(size, [&](const Index &idx, int64_t) {
          Index a = idx, b = idx;
          for (size_t d = 0; d < idx.size(); ++d) {
            a[d] += src[d];
            b[d] += dst[d];
          }
          t.data[flatOf(t.shape, b)] = whole.data[flatOf(whole.shape, a)];
        });
      }
    } else {
      t = whole;
    }
    return t.shape == localShape;
  }

  /// The name under which a persistent operand lives in `state`.
  std::string persistentName(Value v) {
    return cast<StringAttr>(v.getDefiningOp()->getAttr("name")).str();
  }

  /// zg.state, zg.assign, zg.accumulate and zg.adamw.
  bool persistent(Operation *op, StringRef name) {
    if (!state)
      return fail(op);
    if (name == "state") {
      std::string key = cast<StringAttr>(op->getAttr("name")).str();
      if (!state->tensors.count(key))
        state->tensors[key] = Tensor(shapeOf(op->getResult(0)));
      set(op, 0, state->tensors[key]);
      return true;
    }
    if (name == "assign" || name == "accumulate") {
      Tensor &target = state->tensors[persistentName(op->getOperand(0))];
      const Tensor &value = in(op, 1);
      if (name == "assign")
        target = Tensor(shapeOf(op->getOperand(0)));
      for (int64_t i = 0; i < value.size(); ++i)
        target.data[i] += value.data[i];
      return true;
    }
    // AdamW as torch.optim.AdamW documents it, with g = grad * grad_scale.
    Tensor &p = state->tensors[persistentName(op->getOperand(0))];
    Tensor &m = state->tensors[persistentName(op->getOperand(2))];
    Tensor &v = state->tensors[persistentName(op->getOperand(3))];
    const Tensor &g = in(op, 1);
    double lr = in(op, 4).data[0], t = in(op, 5).data[0],
           scale = in(op, 6).data[0];
    double b1 = floatAttr(op, "beta1"), b2 = floatAttr(op, "beta2"),
           eps = floatAttr(op, "eps"), wd = floatAttr(op, "weight_decay");
    for (int64_t i = 0; i < p.size(); ++i) {
      double gi = g.data[i] * scale;
      p.data[i] -= lr * wd * p.data[i];
      m.data[i] = b1 * m.data[i] + (1 - b1) * gi;
      v.data[i] = b2 * v.data[i] + (1 - b2) * gi * gi;
      p.data[i] -= lr * (m.data[i] / (1 - std::pow(b1, t))) /
                   (std::sqrt(v.data[i] / (1 - std::pow(b2, t))) + eps);
    }
    return true;
  }

  /// The first row of a vocabulary-parallel table or logits on this rank.
  int64_t vocabStart(Operation *op) {
    auto stride = op->getAttrOfType<IntegerAttr>("zd.vocab_stride");
    return stride ? stride.getInt() * tp.rank : 0;
  }

  /// zd.all_reduce, zd.all_gather, zd.reduce_scatter and zd.local_slice
  /// over the tp or dp group, and ZeRO's parameter shards.
  bool dist(Operation *op, StringRef name) {
    if (name == "release")
      return true;
    if (name == "weight_shard")
      return weightShard(op);
    if (name == "gather_param") {
      if (!tp.dpGroup)
        return fail(op);
      std::vector<Tensor> all =
          tp.dpGroup->exchange(tp.dpRank, in(op, 0));
      Tensor r(shapeOf(op->getResult(0)));
      // The shards in dp order, the zero padding dropped.
      int64_t at = 0;
      for (const Tensor &part : all)
        for (double v : part.data)
          if (at < r.size())
            r.data[at++] = v;
      set(op, 0, r);
      return true;
    }
    auto axisAttr = op->getAttrOfType<StringAttr>("axis");
    bool dp = axisAttr && axisAttr.getValue() == "dp";
    TpGroup *group = dp ? tp.dpGroup : tp.group;
    int rank = dp ? tp.dpRank : tp.rank;
    if (!group || !axisAttr ||
        (axisAttr.getValue() != "tp" && axisAttr.getValue() != "dp"))
      return fail(op);
    int size = group->groupSize();
    const Tensor &x = in(op, 0);
    if (name == "local_slice") {
      int64_t dim = intAttr(op, "dim");
      Tensor r(shapeOf(op->getResult(0)));
      int64_t part = r.shape[dim];
      forEach(r.shape, [&](const Index &idx, int64_t flat) {
        Index s = idx;
        s[dim] += rank * part;
        r.data[flat] = x.data[flatOf(x.shape, s)];
      });
      set(op, 0, r);
      return true;
    }
    std::vector<Tensor> all = group->exchange(rank, x);
    if (name == "all_reduce" || name == "reduce_scatter") {
      std::string kind = "sum";
      if (auto k = op->getAttrOfType<StringAttr>("reduction"))
        kind = k.str();
      Tensor r = all[0];
      for (int k = 1; k < size; ++k)
        for (int64_t i = 0; i < r.size(); ++i) {
          double v = all[k].data[i];
          r.data[i] = kind == "max"   ? std::max(r.data[i], v)
                      : kind == "min" ? std::min(r.data[i], v)
                                      : r.data[i] + v;
        }
      if (name == "reduce_scatter") {
        // This rank's part of the reduction along `dim`.
        int64_t dim = intAttr(op, "dim");
        Tensor part(shapeOf(op->getResult(0)));
        int64_t size0 = part.shape[dim];
        forEach(part.shape, [&](const Index &idx, int64_t flat) {
          Index s = idx;
          s[dim] += rank * size0;
          part.data[flat] = r.data[flatOf(r.shape, s)];
        });
        r = part;
      }
      set(op, 0, r);
      return true;
    }
    if (name == "all_gather") {
      int64_t dim = intAttr(op, "dim");
      Tensor r(shapeOf(op->getResult(0)));
      int64_t part = x.shape[dim];
      forEach(r.shape, [&](const Index &idx, int64_t flat) {
        Index s = idx;
        int64_t k = idx[dim] / part;
        s[dim] = idx[dim] % part;
        r.data[flat] = all[k].data[flatOf(x.shape, s)];
      });
      set(op, 0, r);
      return true;
    }
    return fail(op);
  }

  std::string *error;
  PersistentState *state;
  TpRank tp;
  // Node-based: `in` hands out references that must survive `set` adding
  // results (a DenseMap moves its entries when it grows, and a split's
  // operand was read after its first result was stored).
  struct ValueHash {
    size_t operator()(Value v) const { return hash_value(v); }
  };
  std::unordered_map<Value, Tensor, ValueHash> values;
};

} // namespace

std::vector<Tensor> evaluate(func::FuncOp func, const std::vector<Tensor> &args,
                             std::string *error, PersistentState *state,
                             TpRank tp) {
  Interpreter interp(error, state, tp);
  std::vector<Tensor> results;
  if (!interp.run(func, args, results))
    return {};
  return results;
}

} // namespace zplan::test
