//===- ElementwiseOps.cpp - Elementwise ONNX ops
//----------------------------===//
//
// Unary and binary elementwise ops (numpy broadcasting), Cast, Where and
// Gelu: folded when every input is known, otherwise one zg op each, or a
// short composition of them where the runtime has no op of its own (Ceil,
// Sign, Xor, Mod with fmod = 0 on floats).
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Importer.h"

using namespace mlir;
using namespace zplan::import;
using namespace zplan::import::detail;
namespace zg = zplan::graph;

LogicalResult Importer::importElementwise(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  using eval::Binary;
  using eval::Unary;
  static const llvm::StringMap<Unary> unaries = {
      {"Neg", Unary::Neg},
      {"Exp", Unary::Exp},
      {"Log", Unary::Log},
      {"Sqrt", Unary::Sqrt},
      {"Reciprocal", Unary::Reciprocal},
      {"Tanh", Unary::Tanh},
      {"Erf", Unary::Erf},
      {"Sigmoid", Unary::Sigmoid},
      {"Relu", Unary::Relu},
      {"Cos", Unary::Cos},
      {"Sin", Unary::Sin},
      {"Abs", Unary::Abs},
      {"Not", Unary::Not},
      {"IsNaN", Unary::IsNaN},
      {"Floor", Unary::Floor},
      {"Ceil", Unary::Ceil},
      {"Sign", Unary::Sign}};
  static const llvm::StringMap<Binary> binaries = {
      {"Add", Binary::Add},
      {"Sub", Binary::Sub},
      {"Mul", Binary::Mul},
      {"Div", Binary::Div},
      {"Pow", Binary::Pow},
      {"Max", Binary::Max},
      {"Min", Binary::Min},
      {"Sum", Binary::Add},
      {"Mod", Binary::Mod},
      {"Equal", Binary::Equal},
      {"Less", Binary::Less},
      {"Greater", Binary::Greater},
      {"LessOrEqual", Binary::LessEqual},
      {"GreaterOrEqual", Binary::GreaterEqual},
      {"And", Binary::And},
      {"Or", Binary::Or},
      {"Xor", Binary::Xor}};

  if (auto it = unaries.find(op); it != unaries.end()) {
    Val *x = in(n, 0);
    if (!x)
      return nodeError(n) << "missing input";
    if (x->c) {
      setConst(n, 0, eval::unary(it->second, *x->c), x->shape);
      return success();
    }
    Value xv = materialize(*x);
    bool boolIn = x->dtype == kBool;
    if ((op == "Not") != boolIn)
      return nodeError(n) << "unsupported input type " << dtypeName(x->dtype);
    auto t = tensorType(x->dtype, x->shape);
    Value r;
    switch (it->second) {
    case Unary::Neg:
      r = emit<zg::NegOp>(t, xv);
      break;
    case Unary::Exp:
      r = emit<zg::ExpOp>(t, xv);
      break;
    case Unary::Log:
      r = emit<zg::LogOp>(t, xv);
      break;
    case Unary::Sqrt:
      r = emit<zg::SqrtOp>(t, xv);
      break;
    case Unary::Reciprocal:
      r = emit<zg::ReciprocalOp>(t, xv);
      break;
    case Unary::Tanh:
      r = emit<zg::TanhOp>(t, xv);
      break;
    case Unary::Erf:
      r = emit<zg::ErfOp>(t, xv);
      break;
    case Unary::Sigmoid:
      r = emit<zg::SigmoidOp>(t, xv);
      break;
    case Unary::Relu:
      r = emit<zg::ReluOp>(t, xv);
      break;
    case Unary::Cos:
      r = emit<zg::CosOp>(t, xv);
      break;
    case Unary::Sin:
      r = emit<zg::SinOp>(t, xv);
      break;
    case Unary::Abs:
      r = emit<zg::AbsOp>(t, xv);
      break;
    case Unary::Not:
      r = emit<zg::NotOp>(t, xv);
      break;
    case Unary::IsNaN:
      r = emit<zg::IsNanOp>(tensorType(kBool, x->shape), xv);
      break;
    case Unary::Floor:
    case Unary::Ceil:
      if (!isFloatDType(x->dtype))
        return nodeError(n)
               << "needs a float input, got " << dtypeName(x->dtype);
      // ceil(x) = -floor(-x): the runtime has floor only.
      if (it->second == Unary::Floor) {
        r = emit<zg::FloorOp>(t, xv);
      } else {
        Value negX = emit<zg::NegOp>(t, xv);
        r = emit<zg::NegOp>(t, emit<zg::FloorOp>(t, negX));
      }
      break;
    case Unary::Sign: {
      // sign(x) = (x > 0) - (x < 0), each comparison cast to x's type. A NaN
      // gives 0 (ONNX leaves NaN to the backend).
      ConstTensor zero(x->dtype, {});
      Value z = materializeConst(zero);
      auto bt = tensorType(kBool, x->shape);
      Value pos = emit<zg::CastOp>(t, emit<zg::GreaterOp>(bt, {xv, z}));
      Value neg = emit<zg::CastOp>(t, emit<zg::LessOp>(bt, {xv, z}));
      r = emit<zg::SubOp>(t, {pos, neg});
      break;
    }
    default:
      return nodeError(n) << "needs a constant input (unsupported at run time)";
    }
    setValue(n, 0, r);
    return success();
  }

  auto bit = binaries.find(op);
  if (bit == binaries.end())
    return nodeError(n) << "internal: not an elementwise op";
  if (n.input_size() < 1)
    return nodeError(n) << "needs inputs";
  // Variadic Max / Min / Sum fold left into binary ops.
  // `cur` points into the value table until the first result exists, so
  // that materializing an input caches its SSA value there.
  Val *cur = in(n, 0), acc;
  if (!cur)
    return nodeError(n) << "missing input 0";
  for (int k = 1; k < n.input_size(); ++k) {
    Val *y = in(n, k);
    if (!y)
      return nodeError(n) << "missing input " << k;
    Val castY;
    if (op == "Pow" && cur->dtype != y->dtype) {
      // Pow (12+) takes an exponent of another numeric type; the result has
      // the base's type, so the exponent is converted to it.
      castY.dtype = cur->dtype;
      castY.shape = y->shape;
      if (y->c) {
        castY.c = std::make_shared<ConstTensor>(eval::cast(*y->c, cur->dtype));
      } else {
        castY.v =
            emit<zg::CastOp>(tensorType(cur->dtype, y->shape), materialize(*y));
      }
      y = &castY;
    }
    if (cur->dtype != y->dtype)
      return nodeError(n) << "input types differ: " << dtypeName(cur->dtype)
                          << " and " << dtypeName(y->dtype);
    auto shape = broadcast(cur->shape, y->shape);
    if (!shape)
      return nodeError(n) << "input shapes " << shapeStr(cur->shape) << " and "
                          << shapeStr(y->shape) << " do not broadcast";
    if (!checkedNumElements(*shape))
      return nodeError(n) << "result has too many elements";
    Val r;
    if (cur->c && y->c) {
      // Compact operands give a compact result: broadcast the stored shapes.
      Shape stored = *broadcast(cur->c->shape, y->c->shape);
      // Mod's fmod attribute picks the sign rule for integers (floats always
      // take C fmod).
      Binary bop = bit->second == Binary::Mod && attrInt(n, "fmod", 0)
                       ? Binary::FMod
                       : bit->second;
      ConstTensor c = eval::binary(bop, *cur->c, *y->c, stored);
      if (c.numel() > kCompressThreshold)
        c = eval::compress(std::move(c));
      r.dtype = c.dtype;
      r.shape = *shape;
      r.c = std::make_shared<ConstTensor>(std::move(c));
      acc = std::move(r);
      cur = &acc;
      continue;
    }
    Value a = materialize(*cur), bv = materialize(*y);
    bool cmp = op == "Equal" || op == "Less" || op == "Greater" ||
               op == "LessOrEqual" || op == "GreaterOrEqual" || op == "And" ||
               op == "Or" || op == "Xor";
    bool logical = op == "And" || op == "Or" || op == "Xor";
    if (logical != (cur->dtype == kBool) && op != "Equal")
      return nodeError(n) << "unsupported input type " << dtypeName(cur->dtype);
    auto t = tensorType(cmp ? int32_t(kBool) : cur->dtype, *shape);
    Value v;
    switch (bit->second) {
    case Binary::Add:
      v = emit<zg::AddOp>(t, {a, bv});
      break;
    case Binary::Sub:
      v = emit<zg::SubOp>(t, {a, bv});
      break;
    case Binary::Mul:
      v = emit<zg::MulOp>(t, {a, bv});
      break;
    case Binary::Div:
      v = emit<zg::DivOp>(t, {a, bv});
      break;
    case Binary::Pow:
      v = emit<zg::PowOp>(t, {a, bv});
      break;
    case Binary::Max:
      v = emit<zg::MaxOp>(t, {a, bv});
      break;
    case Binary::Min:
      v = emit<zg::MinOp>(t, {a, bv});
      break;
    case Binary::Equal:
      v = emit<zg::EqualOp>(t, {a, bv});
      break;
    case Binary::Less:
      v = emit<zg::LessOp>(t, {a, bv});
      break;
    case Binary::Greater:
      v = emit<zg::GreaterOp>(t, {a, bv});
      break;
    case Binary::LessEqual:
      v = emit<zg::LessEqualOp>(t, {a, bv});
      break;
    case Binary::GreaterEqual:
      v = emit<zg::GreaterEqualOp>(t, {a, bv});
      break;
    case Binary::And:
      v = emit<zg::AndOp>(t, {a, bv});
      break;
    case Binary::Or:
      v = emit<zg::OrOp>(t, {a, bv});
      break;
    case Binary::Xor: {
      // a xor b = (a and not b) or (not a and b), with the bool ops the
      // runtime has.
      auto na = emit<zg::NotOp>(tensorType(kBool, cur->shape), a);
      auto nb = emit<zg::NotOp>(tensorType(kBool, y->shape), bv);
      v = emit<zg::OrOp>(
          t, {emit<zg::AndOp>(t, {a, nb}), emit<zg::AndOp>(t, {na, bv})});
      break;
    }
    case Binary::Mod: {
      bool fmod = attrInt(n, "fmod", 0);
      auto fmodAttr = attr("fmod", b.getBoolAttr(true));
      if (fmod || !isFloatDType(cur->dtype)) {
        v = emit<zg::ModOp>(t, {a, bv}, {attr("fmod", b.getBoolAttr(fmod))});
        break;
      }
      // Float Mod with fmod = 0 is numpy's mod: the remainder takes the
      // divisor's sign. The runtime's float mod is C's fmod (the dividend's
      // sign), so a non-zero remainder whose sign differs from the
      // divisor's moves by one divisor.
      Value r = emit<zg::ModOp>(t, {a, bv}, {fmodAttr});
      ConstTensor zero(cur->dtype, {});
      Value z = materializeConst(zero);
      auto bt = tensorType(kBool, *shape);
      auto byt = tensorType(kBool, y->shape);
      Value rNeg = emit<zg::LessOp>(bt, {r, z}),
            rPos = emit<zg::GreaterOp>(bt, {r, z});
      Value yNeg = emit<zg::LessOp>(byt, {bv, z}),
            yPos = emit<zg::GreaterOp>(byt, {bv, z});
      Value differ = emit<zg::OrOp>(bt, {emit<zg::AndOp>(bt, {rNeg, yPos}),
                                         emit<zg::AndOp>(bt, {rPos, yNeg})});
      v = emit<zg::WhereOp>(t, {differ, emit<zg::AddOp>(t, {r, bv}), r});
      break;
    }
    default:
      return nodeError(n) << "needs constant inputs (unsupported at run time)";
    }
    r.dtype = dtypeOf(t.getElementType());
    r.shape = *shape;
    r.v = v;
    acc = std::move(r);
    cur = &acc;
  }
  alias(n, 0, *cur);
  return success();
}

LogicalResult Importer::importWhere(const onnx::NodeProto &n) {
  Val *c = in(n, 0), *x = in(n, 1), *y = in(n, 2);
  if (!c || !x || !y)
    return nodeError(n) << "needs three inputs";
  if (c->dtype != kBool || x->dtype != y->dtype)
    return nodeError(n) << "needs a bool condition and equal branch types";
  auto s1 = broadcast(c->shape, x->shape);
  auto out = s1 ? broadcast(*s1, y->shape) : std::nullopt;
  if (!out)
    return nodeError(n) << "input shapes do not broadcast";
  if (c->c && x->c && y->c) {
    Shape stored =
        *broadcast(*broadcast(c->c->shape, x->c->shape), y->c->shape);
    setConst(n, 0, eval::where(*c->c, *x->c, *y->c, stored), *out);
    return success();
  }
  setValue(
      n, 0,
      emit<zg::WhereOp>(tensorType(x->dtype, *out),
                        {materialize(*c), materialize(*x), materialize(*y)}));
  return success();
}

// Trilu keeps the upper (upper = 1: column - row >= k) or lower (column - row
// <= k) triangle of each matrix of the last two dims and zeroes the rest.
// transformers 4's causal-mask builder (torch.triu of a constant, the exports
// of optimum 1.x) writes one; its input is then a constant and it folds.
// Otherwise it is a where between the input and zero under the constant
// triangle.
LogicalResult Importer::importTrilu(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  if (x->shape.size() < 2)
    return nodeError(n) << "needs an input of rank >= 2, got "
                        << shapeStr(x->shape);
  int64_t k = 0;
  if (in(n, 1)) {
    std::vector<int64_t> ks;
    if (failed(constInts(n, 1, "k", ks)))
      return failure();
    if (ks.size() != 1)
      return nodeError(n) << "k must be one value";
    k = ks[0];
  }
  bool upper = attrInt(n, "upper", 1) != 0;
  int64_t rows = x->shape[x->shape.size() - 2], cols = x->shape.back();
  ConstTensor keep(kBool, {rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      keep.i[r * cols + c] = upper ? c - r >= k : c - r <= k;
  ConstTensor zero(x->dtype, {});
  if (foldable(x)) {
    setConst(n, 0, eval::where(keep, full(*x), zero, x->shape), x->shape);
    return success();
  }
  setValue(n, 0,
           emit<zg::WhereOp>(tensorType(x->dtype, x->shape),
                             {materializeConst(keep), materialize(*x),
                              materializeConst(zero)}));
  return success();
}

LogicalResult Importer::importCast(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  int32_t to = attrInt(n, "to", 0);
  if (!isSupportedDType(to))
    return nodeError(n) << "unsupported target type " << dtypeName(to);
  if (to == x->dtype) {
    alias(n, 0, *x);
    return success();
  }
  if (foldable(x)) {
    setConst(n, 0, eval::cast(*x->c, to), x->shape);
    return success();
  }
  // A cast back from an exact widening (fp16 or bf16 to fp32 or fp64, fp32 to
  // fp64, then to the first type again) is the identity: the input of the
  // first cast. The TorchScript exporter writes one after each fp16 softmax
  // (softmax(x, dtype=float32).to(fp16)), between the attention's softmax
  // and its value product.
  if (auto first = x->v ? x->v.getDefiningOp<zg::CastOp>() : nullptr) {
    Value src = first->getOperand(0);
    Type from = getElementTypeOrSelf(src.getType()),
         mid = getElementTypeOrSelf(x->v.getType());
    bool exact = (from.isF16() || from.isBF16()) ? (mid.isF32() || mid.isF64())
                                                 : (from.isF32() && mid.isF64());
    if (exact && from == tensorType(to, x->shape).getElementType()) {
      setValue(n, 0, src);
      return success();
    }
  }
  setValue(n, 0, emit<zg::CastOp>(tensorType(to, x->shape), materialize(*x)));
  return success();
}

LogicalResult Importer::importGelu(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  std::string approx = attrString(n, "approximate", "none");
  if (approx != "none" && approx != "tanh")
    return nodeError(n) << "unknown approximate '" << approx << "'";
  setValue(n, 0,
           emit<zg::GeluOp>(tensorType(x->dtype, x->shape), materialize(*x),
                            {attr("approximate", b.getStringAttr(approx))}));
  return success();
}
