//===- ShapeOps.cpp - Shape and layout ONNX ops
//-----------------------------===//
//
// Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Slice, Split,
// Expand, Tile, Range and the shape queries (Shape, Size). Shape-like
// operands (target shapes, axes, starts, repeats) must fold: zplan plans
// static shapes.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Importer.h"

#include <cmath>

using namespace mlir;
using namespace zplan::import;
using namespace zplan::import::detail;
namespace zg = zplan::graph;

/// The longest Reshape shape accepted: far above any model's rank, far below
/// what makes shape checks slow.
constexpr size_t kMaxReshapeRank = 64;

LogicalResult Importer::importReshapeLike(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  Val *x = in(n, 0);
  if (!x)
    return nodeError(n) << "missing input";
  int64_t rank = x->shape.size();
  Shape out;
  if (op == "Reshape") {
    std::vector<int64_t> s;
    if (failed(constInts(n, 1, "shape", s)))
      return failure();
    bool allowzero = attrInt(n, "allowzero", 0);
    // A shape tensor can be long (a folded ConstantOfShape); no tensor of
    // that rank is useful, and the plan format stops at rank 8 anyway.
    if (s.size() > kMaxReshapeRank)
      return nodeError(n) << "shape has " << s.size()
                          << " entries; zplan handles rank up to "
                          << kMaxReshapeRank;
    // The product of the output dims so far, checked as it grows: checking
    // the whole prefix at every entry was quadratic in the shape's length
    // (fuzz/FINDINGS.md F31).
    int64_t infer = -1, known = 1, sofar = 1;
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t v = s[d];
      if (v == 0 && !allowzero) {
        if ((int64_t)d >= rank)
          return nodeError(n) << "shape entry " << d
                              << " is 0 but the input has rank " << rank;
        v = x->shape[d];
      }
      if (v == -1) {
        if (infer >= 0)
          return nodeError(n) << "shape has more than one -1";
        infer = d;
        out.push_back(1);
        continue;
      }
      if (v < 0)
        return nodeError(n) << "shape entry " << v << " is negative";
      out.push_back(v);
      if (!checkedNumElements({sofar, v}))
        return nodeError(n) << "shape has too many elements";
      sofar *= v;
      known *= v;
    }
    int64_t total = *checkedNumElements(x->shape);
    if (infer >= 0) {
      if (known == 0 || total % known)
        return nodeError(n) << "cannot infer -1: " << total << " elements into "
                            << shapeStr(s);
      out[infer] = total / known;
    }
    if (*checkedNumElements(out) != total)
      return nodeError(n) << "cannot reshape " << shapeStr(x->shape) << " to "
                          << shapeStr(out);
  } else if (op == "Flatten") {
    int64_t axis = attrInt(n, "axis", 1);
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis > rank)
      return nodeError(n) << "axis out of range";
    // Each side is checked on its own: a zero dim keeps the total small
    // while the other side's product can still overflow.
    ArrayRef<int64_t> dims(x->shape);
    auto a = checkedNumElements(dims.take_front(axis));
    auto c = checkedNumElements(dims.drop_front(axis));
    if (!a || !c)
      return nodeError(n) << "flattening " << shapeStr(x->shape) << " at axis "
                          << axis << " overflows int64";
    out = {*a, *c};
  } else if (op == "Squeeze" || op == "Unsqueeze") {
    std::vector<int64_t> axes;
    bool haveAxes = true;
    if (opset >= 13) {
      if (in(n, 1)) {
        if (failed(constInts(n, 1, "axes", axes)))
          return failure();
      } else {
        haveAxes = false;
      }
    } else if (auto a = attrInts(n, "axes")) {
      axes = *a;
    } else {
      haveAxes = false;
    }
    if (op == "Squeeze") {
      SmallVector<bool> drop(rank, false);
      if (!haveAxes) {
        for (int64_t d = 0; d < rank; ++d)
          drop[d] = x->shape[d] == 1;
      }
      for (int64_t a : axes) {
        if (failed(normAxis(n, a, rank)))
          return failure();
        if (x->shape[a] != 1)
          return nodeError(n)
                 << "cannot squeeze dim " << a << " of size " << x->shape[a];
        drop[a] = true;
      }
      for (int64_t d = 0; d < rank; ++d)
        if (!drop[d])
          out.push_back(x->shape[d]);
    } else {
      if (!haveAxes)
        return nodeError(n) << "needs axes";
      int64_t outRank = rank + axes.size();
      SmallVector<bool> ins(outRank, false);
      for (int64_t a : axes) {
        if (failed(normAxis(n, a, outRank)))
          return failure();
        if (ins[a])
          return nodeError(n) << "repeated axis " << a;
        ins[a] = true;
      }
      int64_t src = 0;
      for (int64_t d = 0; d < outRank; ++d)
        out.push_back(ins[d] ? 1 : x->shape[src++]);
      if (foldable(x) && x->c->shape != x->shape) {
        // Keep a compact constant compact: insert the same unit dims.
        ConstTensor c = *x->c;
        Shape stored;
        src = 0;
        for (int64_t d = 0; d < outRank; ++d)
          stored.push_back(ins[d] ? 1 : c.shape[src++]);
        c.shape = stored;
        setConst(n, 0, std::move(c), out);
        return success();
      }
    }
  }
  if (out == x->shape) {
    alias(n, 0, *x);
    return success();
  }
  if (foldable(x)) {
    ConstTensor c = full(*x);
    c.shape = out;
    setConst(n, 0, std::move(c));
    return success();
  }
  setValue(n, 0,
           emit<zg::ReshapeOp>(tensorType(x->dtype, out), materialize(*x)));
  return success();
}

LogicalResult Importer::importSlice(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  if (!x)
    return nodeError(n) << "missing input";
  int64_t rank = x->shape.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (failed(constInts(n, 1, "starts", starts)) ||
      failed(constInts(n, 2, "ends", ends)))
    return failure();
  if (in(n, 3)) {
    if (failed(constInts(n, 3, "axes", axes)))
      return failure();
  } else {
    for (size_t k = 0; k < starts.size(); ++k)
      axes.push_back(k);
  }
  if (in(n, 4)) {
    if (failed(constInts(n, 4, "steps", steps)))
      return failure();
  } else {
    steps.assign(starts.size(), 1);
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return nodeError(n) << "starts, ends, axes and steps differ in length";
  Shape st(rank, 0), sp(rank, 1), sz(x->shape);
  SmallVector<bool> seen(rank, false);
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t a = axes[k];
    if (failed(normAxis(n, a, rank)))
      return failure();
    // normAxis lets axis 0 through at rank 0 (for ops that treat a scalar as
    // [1]); Slice indexes the dims, so the axis must name one.
    if (a >= rank)
      return nodeError(n) << "axis " << a << " out of range for rank " << rank;
    if (seen[a])
      return nodeError(n) << "repeated axis " << a;
    seen[a] = true;
    int64_t dim = x->shape[a], step = steps[k];
    if (step == 0)
      return nodeError(n) << "step is 0";
    // Clamp as the ONNX Slice spec says: negative values count from the end,
    // then starts/ends clamp to [0, dim] (step > 0) or [-1, dim - 1].
    int64_t s = starts[k], e = ends[k];
    if (s < 0)
      s = std::max<int64_t>(s + dim, step > 0 ? 0 : -1);
    if (e < 0)
      e = std::max<int64_t>(e + dim, step > 0 ? 0 : -1);
    if (step > 0) {
      s = std::min(s, dim);
      e = std::min(e, dim);
    } else {
      s = std::min(s, dim - 1);
      e = std::min(e, dim - 1);
    }
    // s and e are clamped to [-1, dim], so their difference cannot
    // overflow; the step can be anything, so it never enters a sum.
    int64_t count =
        step > 0
            ? (e > s ? (e - s - 1) / step + 1 : 0)
            : (s > e ? (s - e - 1) /
                               -std::max(step,
                                         -std::numeric_limits<int64_t>::max()) +
                           1
                     : 0);
    st[a] = count ? s : 0;
    sp[a] = step;
    sz[a] = count;
  }
  bool whole = sz == x->shape &&
               llvm::all_of(st, [](int64_t v) { return v == 0; }) &&
               llvm::all_of(sp, [](int64_t v) { return v == 1; });
  if (whole) {
    alias(n, 0, *x);
    return success();
  }
  if (foldable(x)) {
    setConst(n, 0, eval::slice(*x->c, st, sp, sz));
    return success();
  }
  setValue(n, 0,
           emit<zg::SliceOp>(tensorType(x->dtype, sz), materialize(*x),
                             {attr("starts", b.getDenseI64ArrayAttr(st)),
                              attr("steps", b.getDenseI64ArrayAttr(sp))}));
  return success();
}

LogicalResult Importer::importSplit(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  if (!x)
    return nodeError(n) << "missing input";
  int64_t rank = x->shape.size(), axis = attrInt(n, "axis", 0);
  if (failed(normAxis(n, axis, rank)))
    return failure();
  int64_t dim = x->shape[axis], outs = n.output_size();
  std::vector<int64_t> sizes;
  if (opset < 13 && findAttr(n, "split")) {
    sizes = *attrInts(n, "split");
  } else if (in(n, 1)) {
    if (failed(constInts(n, 1, "split", sizes)))
      return failure();
  } else {
    int64_t parts = outs;
    if (opset >= 18 && findAttr(n, "num_outputs"))
      parts = attrInt(n, "num_outputs", outs);
    if (parts != outs || parts <= 0)
      return nodeError(n) << "num_outputs " << parts << " but the node has "
                          << outs << " outputs";
    // Opset 18: the last chunk may be smaller (ceil division).
    int64_t chunk = dim / parts + (dim % parts != 0);
    for (int64_t k = 0; k < parts; ++k)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - k * chunk)));
  }
  if ((int64_t)sizes.size() != outs)
    return nodeError(n) << sizes.size() << " split sizes for " << outs
                        << " outputs";
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0 || s > dim || __builtin_add_overflow(total, s, &total))
      return nodeError(n) << "split size " << s << " out of range [0, " << dim
                          << "]";
  }
  if (total != dim)
    return nodeError(n) << "split sizes add up to " << total << ", dim " << axis
                        << " is " << dim;
  if (foldable(x)) {
    int64_t off = 0;
    for (int64_t k = 0; k < outs; ++k) {
      Shape st(rank, 0), sp(rank, 1), sz(x->shape);
      st[axis] = off;
      sz[axis] = sizes[k];
      setConst(n, k, eval::slice(*x->c, st, sp, sz));
      off += sizes[k];
    }
    return success();
  }
  SmallVector<Type> types;
  for (int64_t s : sizes) {
    Shape sh(x->shape);
    sh[axis] = s;
    types.push_back(tensorType(x->dtype, sh));
  }
  auto split = zg::SplitOp::create(b, curLoc, TypeRange(types),
                                   ValueRange{materialize(*x)},
                                   {attr("axis", b.getI64IntegerAttr(axis))});
  for (int64_t k = 0; k < outs; ++k)
    if (!n.output(k).empty())
      setValue(n, k, split->getResult(k));
  return success();
}

LogicalResult Importer::importTranspose(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  int64_t rank = x->shape.size();
  std::vector<int64_t> perm;
  if (auto p = attrInts(n, "perm")) {
    perm = *p;
  } else {
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  }
  if ((int64_t)perm.size() != rank)
    return nodeError(n) << "perm has " << perm.size() << " entries for rank "
                        << rank;
  SmallVector<bool> seen(rank, false);
  Shape out;
  for (int64_t &p : perm) {
    if (failed(normAxis(n, p, rank)) || seen[p])
      return nodeError(n) << "perm is not a permutation";
    seen[p] = true;
    out.push_back(x->shape[p]);
  }
  if (llvm::equal(perm, llvm::seq<int64_t>(0, rank))) {
    alias(n, 0, *x);
    return success();
  }
  if (foldable(x)) {
    setConst(n, 0, eval::transpose(*x->c, perm));
    return success();
  }
  setValue(n, 0,
           emit<zg::TransposeOp>(tensorType(x->dtype, out), materialize(*x),
                                 {attr("perm", b.getDenseI64ArrayAttr(perm))}));
  return success();
}

LogicalResult Importer::importConcat(const onnx::NodeProto &n) {
  SmallVector<Val *> xs;
  for (int k = 0; k < n.input_size(); ++k)
    if (Val *v = in(n, k))
      xs.push_back(v);
  if (xs.empty())
    return nodeError(n) << "needs inputs";
  int64_t rank = xs[0]->shape.size(), axis = attrInt(n, "axis", 0);
  if (failed(normAxis(n, axis, rank)))
    return failure();
  // normAxis lets axis 0 through at rank 0; Concat indexes a dim.
  if (axis >= rank)
    return nodeError(n) << "cannot concatenate rank-0 tensors";
  Shape out = xs[0]->shape;
  out[axis] = 0;
  for (Val *v : xs) {
    if ((int64_t)v->shape.size() != rank || v->dtype != xs[0]->dtype)
      return nodeError(n) << "inputs differ in rank or type";
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && v->shape[d] != xs[0]->shape[d])
        return nodeError(n)
               << "input shapes " << shapeStr(xs[0]->shape) << " and "
               << shapeStr(v->shape) << " differ outside axis " << axis;
    if (__builtin_add_overflow(out[axis], v->shape[axis], &out[axis]))
      return nodeError(n) << "the concatenated dim overflows int64";
  }
  if (llvm::all_of(xs, [](Val *v) { return foldable(v); })) {
    SmallVector<const ConstTensor *> cs;
    for (Val *v : xs)
      cs.push_back(v->c.get());
    setConst(n, 0, eval::concat(cs, axis));
    return success();
  }
  // One input with elements, the others empty (a cache of length 0 that the
  // new keys are appended to, as an export made with use_cache=True and no
  // past does): the result is that input.
  SmallVector<Val *> nonEmpty;
  for (Val *v : xs)
    if (*checkedNumElements(v->shape) > 0)
      nonEmpty.push_back(v);
  if (nonEmpty.size() == 1 && nonEmpty[0]->shape == out) {
    alias(n, 0, *nonEmpty[0]);
    return success();
  }
  SmallVector<Value> operands;
  for (Val *v : nonEmpty)
    operands.push_back(materialize(*v));
  setValue(n, 0,
           emit<zg::ConcatOp>(tensorType(xs[0]->dtype, out), operands,
                              {attr("axis", b.getI64IntegerAttr(axis))}));
  return success();
}

LogicalResult Importer::importExpand(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  std::vector<int64_t> s;
  if (failed(constInts(n, 1, "shape", s)))
    return failure();
  auto out = broadcast(x->shape, s);
  if (!out)
    return nodeError(n) << "cannot expand " << shapeStr(x->shape) << " to "
                        << shapeStr(s);
  if (!checkedNumElements(*out))
    return nodeError(n) << "result has a negative dim or too many elements";
  if (*out == x->shape) {
    alias(n, 0, *x);
    return success();
  }
  if (foldable(x)) {
    // No element is copied: the stored value only gains leading dims.
    ConstTensor c = *x->c;
    c.shape.insert(c.shape.begin(), out->size() - c.shape.size(), 1);
    setConst(n, 0, std::move(c), *out);
    return success();
  }
  setValue(n, 0,
           emit<zg::ExpandOp>(tensorType(x->dtype, *out), materialize(*x)));
  return success();
}

LogicalResult Importer::importTile(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  std::vector<int64_t> reps;
  if (!x || failed(constInts(n, 1, "repeats", reps)))
    return failure();
  if (reps.size() != x->shape.size())
    return nodeError(n) << "repeats has " << reps.size() << " entries for rank "
                        << x->shape.size();
  Shape out;
  for (size_t d = 0; d < reps.size(); ++d) {
    int64_t o;
    if (reps[d] < 0)
      return nodeError(n) << "repeat " << reps[d] << " is negative";
    if (__builtin_mul_overflow(x->shape[d], reps[d], &o))
      return nodeError(n) << "the tiled shape overflows int64";
    out.push_back(o);
  }
  if (!checkedNumElements(out))
    return nodeError(n) << "result has too many elements";
  if (out == x->shape) {
    alias(n, 0, *x);
    return success();
  }
  if (foldable(x)) {
    setConst(n, 0, eval::tile(*x->c, reps));
    return success();
  }
  setValue(n, 0,
           emit<zg::TileOp>(tensorType(x->dtype, out), materialize(*x),
                            {attr("repeats", b.getDenseI64ArrayAttr(reps))}));
  return success();
}

LogicalResult Importer::importRange(const onnx::NodeProto &n) {
  Val *s = in(n, 0), *l = in(n, 1), *d = in(n, 2);
  if (!s || !l || !d)
    return nodeError(n) << "needs start, limit and delta";
  for (Val *v : {s, l, d})
    if (*checkedNumElements(v->shape) != 1)
      return nodeError(n) << "start, limit and delta must be scalars";
  if (s->dtype != l->dtype || s->dtype != d->dtype)
    return nodeError(n) << "start, limit and delta differ in type";
  if (s->dtype == kBool)
    return nodeError(n) << "unsupported type bool";
  if (d->c && d->c->getF(0) == 0)
    return nodeError(n) << "delta is 0";
  if (!allConst({s, l, d})) {
    // The length depends on the values; zplan plans static shapes, so it
    // must be known: the model's declared shape of the output gives it.
    std::optional<Shape> decl = declaredShape(n.output(0));
    if (!decl || decl->size() != 1)
      return nodeError(n) << "start, limit or delta does not fold to a "
                             "constant and the model declares no static "
                             "length for output '"
                          << n.output(0)
                          << "' (zplan plans static shapes; declare it in "
                             "value_info)";
    auto scalar = [&](Val *v) {
      Value x = materialize(*v);
      if (!v->shape.empty())
        x = emit<zg::ReshapeOp>(tensorType(v->dtype, {}), x);
      return x;
    };
    setValue(n, 0,
             emit<zg::RangeOp>(tensorType(s->dtype, *decl),
                               {scalar(s), scalar(l), scalar(d)}));
    return success();
  }
  double start = s->c->getF(0), limit = l->c->getF(0), delta = d->c->getF(0);
  if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    return nodeError(n) << "start, limit and delta must be finite";
  double cnt = std::ceil((limit - start) / delta);
  if (!(cnt <= double(kMaxFoldElements)))
    return nodeError(n) << "folding would create " << cnt
                        << " elements; the limit is " << kMaxFoldElements;
  int64_t count = cnt > 0 ? int64_t(cnt) : 0;
  ConstTensor c(s->dtype, {count});
  for (int64_t k = 0; k < count; ++k) {
    if (c.isFloat()) {
      c.set(k, start + k * delta);
      continue;
    }
    // Integer ranges in exact arithmetic; a value that leaves int64 is an
    // error rather than a wrap.
    int64_t step, v;
    if (__builtin_mul_overflow(k, d->c->getI(0), &step) ||
        __builtin_add_overflow(s->c->getI(0), step, &v))
      return nodeError(n) << "element " << k << " overflows int64";
    c.setI(k, v);
  }
  setConst(n, 0, std::move(c));
  return success();
}

LogicalResult Importer::importShapeOf(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  Val *x = in(n, 0);
  int64_t rank = x->shape.size();
  if (op == "Size") {
    ConstTensor c(kInt64, {});
    c.i[0] = *checkedNumElements(x->shape);
    setConst(n, 0, std::move(c));
    return success();
  }
  int64_t s = attrInt(n, "start", 0), e = attrInt(n, "end", rank);
  if (s < 0)
    s += rank;
  if (e < 0)
    e += rank;
  s = std::clamp<int64_t>(s, 0, rank);
  e = std::clamp<int64_t>(e, 0, rank);
  ConstTensor c(kInt64, {std::max<int64_t>(0, e - s)});
  for (int64_t k = s; k < e; ++k)
    c.i[k - s] = x->shape[k];
  setConst(n, 0, std::move(c));
  return success();
}
