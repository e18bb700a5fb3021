//===- GradientRulesTest.cpp - every gradient rule vs finite differences --===//
//
// Each case is a one-op zg function @f of float64 arguments. The test asks
// the op's GradientOpInterface for the vector-Jacobian product with random
// result gradients dy, evaluates it with the float64 interpreter, and
// compares it with central finite differences of L(x) = sum(f(x) * dy)
// computed by the same interpreter on the forward op alone. Arguments named
// in `noGrad` (masks, labels) must get no gradient at all.
//
//===----------------------------------------------------------------------===//

#include "Evaluator.h"

#include "compiler/driver/InitAll.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

using namespace mlir;
using zplan::test::Tensor;

namespace {

struct GradCase {
  std::string name;
  std::string mlir;          ///< a module holding func.func @f
  std::set<unsigned> noGrad; ///< argument numbers that must get no gradient
  bool positive = false;     ///< draw arguments from [0.5, 2) instead of [-1, 1)
};

std::ostream &operator<<(std::ostream &os, const GradCase &c) {
  return os << c.name;
}

std::vector<int64_t> shapeOf(Type t) {
  auto s = cast<RankedTensorType>(t).getShape();
  return {s.begin(), s.end()};
}

bool isFloatType(Type t) {
  return isa<FloatType>(cast<RankedTensorType>(t).getElementType());
}

/// Builds @grad(args..., dys...) -> (one gradient per float argument of @f
/// that is not in noGrad), by cloning @f's body and calling the rule of the
/// op that defines @f's first result. Returns the op's null-gradient check
/// through `nullOk`.
func::FuncOp buildGradFunc(ModuleOp module, func::FuncOp f,
                           const std::set<unsigned> &noGrad,
                           std::vector<unsigned> &gradArgs,
                           std::string &failure) {
  OpBuilder b(module.getContext());
  b.setInsertionPointToEnd(module.getBody());
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  SmallVector<Type> inputs(f.getArgumentTypes());
  for (Value r : ret.getOperands())
    inputs.push_back(r.getType());
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    if (isFloatType(f.getArgumentTypes()[i]) && !noGrad.count(i))
      gradArgs.push_back(i);
  SmallVector<Type> outputs;
  for (unsigned i : gradArgs)
    outputs.push_back(f.getArgumentTypes()[i]);
  auto g = func::FuncOp::create(b, f.getLoc(), "grad",
                                b.getFunctionType(inputs, outputs));
  Block *entry = g.addEntryBlock();
  b.setInsertionPointToStart(entry);
  IRMapping map;
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    map.map(f.getArgument(i), entry->getArgument(i));
  for (Operation &op : f.getBody().front().without_terminator())
    b.clone(op, map);
  Operation *target =
      map.lookup(ret.getOperand(0)).getDefiningOp();
  auto rule = dyn_cast<zplan::graph::GradientOpInterface>(target);
  if (!rule) {
    failure = "op has no GradientOpInterface";
    return nullptr;
  }
  SmallVector<Value> dys(target->getNumResults());
  for (auto [i, r] : llvm::enumerate(ret.getOperands()))
    for (unsigned k = 0; k < target->getNumResults(); ++k)
      if (map.lookup(r) == target->getResult(k))
        dys[k] = entry->getArgument(f.getNumArguments() + i);
  SmallVector<Value> dxs;
  if (failed(rule.buildGradients(b, dys, dxs))) {
    failure = "buildGradients failed";
    return nullptr;
  }
  if (dxs.size() != target->getNumOperands()) {
    failure = "rule returned the wrong number of gradients";
    return nullptr;
  }
  SmallVector<Value> results;
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    Value arg = entry->getArgument(i);
    Value sum;
    for (unsigned k = 0; k < target->getNumOperands(); ++k) {
      if (target->getOperand(k) != arg || !dxs[k])
        continue;
      if (dxs[k].getType() != arg.getType()) {
        failure = "gradient of operand " + std::to_string(k) +
                  " does not have the operand's type";
        return nullptr;
      }
      sum = sum ? zplan::graph::AddOp::create(b, f.getLoc(), arg.getType(),
                                              sum, dxs[k])
                      .getResult()
                : dxs[k];
    }
    if (noGrad.count(i)) {
      if (sum) {
        failure = "argument " + std::to_string(i) + " got a gradient";
        return nullptr;
      }
      continue;
    }
    if (!isFloatType(arg.getType()))
      continue;
    if (!sum) {
      failure = "argument " + std::to_string(i) + " got no gradient";
      return nullptr;
    }
    results.push_back(sum);
  }
  func::ReturnOp::create(b, f.getLoc(), results);
  return g;
}

class GradientRule : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientRule, MatchesFiniteDifferences) {
  const GradCase &c = GetParam();
  DialectRegistry registry;
  zplan::registerAllDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(c.mlir, &context);
  ASSERT_TRUE(module) << "case does not parse";
  auto f = module->lookupSymbol<func::FuncOp>("f");
  ASSERT_TRUE(f);

  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> dist(c.positive ? 0.5 : -1.0,
                                              c.positive ? 2.0 : 1.0);
  std::vector<Tensor> args;
  for (Type t : f.getArgumentTypes()) {
    Tensor x(shapeOf(t));
    for (double &v : x.data)
      v = dist(rng);
    args.push_back(x);
  }
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<Tensor> dys;
  for (Type t : f.getResultTypes()) {
    Tensor d(shapeOf(t));
    for (double &v : d.data)
      v = unit(rng);
    dys.push_back(d);
  }

  std::vector<unsigned> gradArgs;
  std::string failure;
  func::FuncOp g = buildGradFunc(*module, f, c.noGrad, gradArgs, failure);
  ASSERT_TRUE(g) << failure;
  ASSERT_TRUE(succeeded(verify(*module))) << "gradient graph does not verify";

  std::vector<Tensor> gargs = args;
  gargs.insert(gargs.end(), dys.begin(), dys.end());
  std::string error;
  std::vector<Tensor> grads = zplan::test::evaluate(g, gargs, &error);
  ASSERT_EQ(grads.size(), gradArgs.size()) << error;

  auto loss = [&](const std::vector<Tensor> &xs) {
    std::vector<Tensor> ys = zplan::test::evaluate(f, xs, &error);
    double l = 0;
    for (size_t r = 0; r < ys.size(); ++r)
      for (int64_t i = 0; i < ys[r].size(); ++i)
        l += ys[r].data[i] * dys[r].data[i];
    return l;
  };
  const double h = 1e-6;
  for (size_t a = 0; a < gradArgs.size(); ++a) {
    unsigned arg = gradArgs[a];
    ASSERT_EQ(grads[a].size(), args[arg].size());
    for (int64_t i = 0; i < args[arg].size(); ++i) {
      std::vector<Tensor> plus = args, minus = args;
      plus[arg].data[i] += h;
      minus[arg].data[i] -= h;
      double fd = (loss(plus) - loss(minus)) / (2 * h);
      double got = grads[a].data[i];
      EXPECT_NEAR(got, fd, 1e-6 * std::max(1.0, std::fabs(fd)))
          << "argument " << arg << ", element " << i;
    }
  }
}

/// A one-op case: `%0 = zg.<op> <operands> <attrs> : <signature>` over the
/// given argument types.
GradCase oneOp(std::string name, std::string args, std::string body,
               std::string resultTypes, std::string returned = "%0",
               std::set<unsigned> noGrad = {}, bool positive = false) {
  GradCase c;
  c.name = std::move(name);
  c.mlir = "func.func @f(" + args + ") -> (" + resultTypes + ") {\n" + body +
           "\n  return " + returned + " : " + resultTypes + "\n}\n";
  c.noGrad = std::move(noGrad);
  c.positive = positive;
  return c;
}

std::vector<GradCase> unaryCases() {
  std::vector<GradCase> cases;
  const char *t = "tensor<3x4xf64>";
  for (std::string op : {"neg", "exp", "tanh", "erf", "sigmoid", "relu", "cos",
                         "sin", "abs", "silu"})
    cases.push_back(oneOp(op, std::string("%x: ") + t,
                          "%0 = zg." + op + " %x : (" + t + ") -> " + t, t));
  for (std::string op : {"log", "sqrt", "reciprocal"})
    cases.push_back(oneOp(op, std::string("%x: ") + t,
                          "%0 = zg." + op + " %x : (" + t + ") -> " + t, t,
                          "%0", {}, /*positive=*/true));
  for (std::string form : {"none", "tanh"})
    cases.push_back(oneOp("gelu_" + form, std::string("%x: ") + t,
                          "%0 = zg.gelu %x {approximate = \"" + form +
                              "\"} : (" + t + ") -> " + t,
                          t));
  cases.push_back(oneOp("cast_f64_to_f32", "%x: tensor<3x4xf64>",
                        "%0 = zg.cast %x : (tensor<3x4xf64>) -> tensor<3x4xf32>",
                        "tensor<3x4xf32>"));
  return cases;
}

std::vector<GradCase> binaryCases() {
  std::vector<GradCase> cases;
  for (std::string op : {"add", "sub", "mul", "max", "min"})
    cases.push_back(oneOp(
        op + "_broadcast", "%a: tensor<2x3x4xf64>, %b: tensor<3x1xf64>",
        "%0 = zg." + op +
            " %a, %b : (tensor<2x3x4xf64>, tensor<3x1xf64>) -> tensor<2x3x4xf64>",
        "tensor<2x3x4xf64>"));
  cases.push_back(oneOp(
      "div_broadcast", "%a: tensor<4xf64>, %b: tensor<2x3x1xf64>",
      "%0 = zg.div %a, %b : (tensor<4xf64>, tensor<2x3x1xf64>) -> tensor<2x3x4xf64>",
      "tensor<2x3x4xf64>", "%0", {}, true));
  cases.push_back(oneOp(
      "pow_both", "%a: tensor<2x3xf64>, %b: tensor<3xf64>",
      "%0 = zg.pow %a, %b : (tensor<2x3xf64>, tensor<3xf64>) -> tensor<2x3xf64>",
      "tensor<2x3xf64>", "%0", {}, true));
  cases.push_back(oneOp(
      "pow_constant_exponent", "%a: tensor<2x3xf64>",
      "%e = zg.constant {value = dense<3.0> : tensor<f64>} : () -> tensor<f64>\n"
      "%0 = zg.pow %a, %e : (tensor<2x3xf64>, tensor<f64>) -> tensor<2x3xf64>",
      "tensor<2x3xf64>"));
  cases.push_back(oneOp(
      "where", "%a: tensor<2x3xf64>, %b: tensor<3xf64>",
      "%c = zg.constant {value = dense<[[true, false, true], [false, false, "
      "true]]> : tensor<2x3xi1>} : () -> tensor<2x3xi1>\n"
      "%0 = zg.where %c, %a, %b : (tensor<2x3xi1>, tensor<2x3xf64>, "
      "tensor<3xf64>) -> tensor<2x3xf64>",
      "tensor<2x3xf64>"));
  return cases;
}

std::vector<GradCase> linearAlgebraCases() {
  std::vector<GradCase> cases;
  auto mm = [&](std::string name, std::string a, std::string b,
                std::string r) {
    cases.push_back(oneOp("matmul_" + name,
                          "%a: " + a + ", %b: " + b,
                          "%0 = zg.matmul %a, %b : (" + a + ", " + b +
                              ") -> " + r,
                          r));
  };
  mm("2d", "tensor<2x3xf64>", "tensor<3x4xf64>", "tensor<2x4xf64>");
  mm("batch_broadcast", "tensor<2x1x3x4xf64>", "tensor<3x4x5xf64>",
     "tensor<2x3x3x5xf64>");
  mm("vector_lhs", "tensor<4xf64>", "tensor<2x4x3xf64>", "tensor<2x3xf64>");
  mm("vector_rhs", "tensor<2x3x4xf64>", "tensor<4xf64>", "tensor<2x3xf64>");
  mm("dot", "tensor<4xf64>", "tensor<4xf64>", "tensor<f64>");
  cases.push_back(oneOp(
      "linear_bias", "%x: tensor<2x3x4xf64>, %w: tensor<4x5xf64>, %b: tensor<5xf64>",
      "%0 = zg.linear %x, %w, %b : (tensor<2x3x4xf64>, tensor<4x5xf64>, "
      "tensor<5xf64>) -> tensor<2x3x5xf64>",
      "tensor<2x3x5xf64>"));
  cases.push_back(oneOp(
      "linear_trans_alpha", "%x: tensor<3x4xf64>, %w: tensor<5x4xf64>",
      "%0 = zg.linear %x, %w {trans_w = true, alpha = 0.5 : f64} : "
      "(tensor<3x4xf64>, tensor<5x4xf64>) -> tensor<3x5xf64>",
      "tensor<3x5xf64>"));
  // Shapes where the weight gradient is built as the transpose of the other
  // product (fewer elements transposed).
  cases.push_back(oneOp(
      "linear_trans_flipped", "%x: tensor<8x2xf64>, %w: tensor<6x2xf64>",
      "%0 = zg.linear %x, %w {trans_w = true} : (tensor<8x2xf64>, "
      "tensor<6x2xf64>) -> tensor<8x6xf64>",
      "tensor<8x6xf64>"));
  cases.push_back(oneOp(
      "linear_flipped", "%x: tensor<2x4x6xf64>, %w: tensor<6x2xf64>",
      "%0 = zg.linear %x, %w : (tensor<2x4x6xf64>, tensor<6x2xf64>) -> "
      "tensor<2x4x2xf64>",
      "tensor<2x4x2xf64>"));
  cases.push_back(oneOp(
      "linear_vector", "%x: tensor<4xf64>, %w: tensor<4x3xf64>",
      "%0 = zg.linear %x, %w : (tensor<4xf64>, tensor<4x3xf64>) -> tensor<3xf64>",
      "tensor<3xf64>"));
  return cases;
}

std::vector<GradCase> normCases() {
  std::vector<GradCase> cases;
  for (int axis : {1, 2})
    cases.push_back(oneOp(
        "softmax_axis" + std::to_string(axis), "%x: tensor<2x3x4xf64>",
        "%0 = zg.softmax %x {axis = " + std::to_string(axis) +
            " : i64} : (tensor<2x3x4xf64>) -> tensor<2x3x4xf64>",
        "tensor<2x3x4xf64>"));
  cases.push_back(oneOp(
      "layer_norm_bias",
      "%x: tensor<2x3x4xf64>, %s: tensor<4xf64>, %b: tensor<4xf64>",
      "%0 = zg.layer_norm %x, %s, %b {axis = 2 : i64, epsilon = 1.0e-5 : f64} "
      ": (tensor<2x3x4xf64>, tensor<4xf64>, tensor<4xf64>) -> tensor<2x3x4xf64>",
      "tensor<2x3x4xf64>"));
  cases.push_back(oneOp(
      "layer_norm_two_dims_broadcast_scale",
      "%x: tensor<2x3x4xf64>, %s: tensor<4xf64>",
      "%0 = zg.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : "
      "(tensor<2x3x4xf64>, tensor<4xf64>) -> tensor<2x3x4xf64>",
      "tensor<2x3x4xf64>"));
  cases.push_back(oneOp(
      "rms_norm_scale", "%x: tensor<2x3x4xf64>, %s: tensor<4xf64>",
      "%0 = zg.rms_norm %x, %s {epsilon = 1.0e-6 : f64} : (tensor<2x3x4xf64>, "
      "tensor<4xf64>) -> tensor<2x3x4xf64>",
      "tensor<2x3x4xf64>"));
  cases.push_back(oneOp(
      "rms_norm_no_scale", "%x: tensor<3x4xf64>",
      "%0 = zg.rms_norm %x {epsilon = 1.0e-6 : f64} : (tensor<3x4xf64>) -> "
      "tensor<3x4xf64>",
      "tensor<3x4xf64>"));
  // The tables get no gradient; random tables (not a rotation) check that
  // the rule is the exact transpose, not only the inverse rotation.
  cases.push_back(oneOp(
      "rotary",
      "%x: tensor<2x3x4x6xf64>, %c: tensor<1x1x4x6xf64>, %s: tensor<1x1x4x6xf64>",
      "%0 = zg.rotary %x, %c, %s : (tensor<2x3x4x6xf64>, tensor<1x1x4x6xf64>, "
      "tensor<1x1x4x6xf64>) -> tensor<2x3x4x6xf64>",
      "tensor<2x3x4x6xf64>", "%0", {1, 2}));
  cases.push_back(oneOp(
      "rotary_inverse",
      "%x: tensor<3x4xf64>, %c: tensor<4xf64>, %s: tensor<4xf64>",
      "%0 = zg.rotary %x, %c, %s {inverse = true} : (tensor<3x4xf64>, "
      "tensor<4xf64>, tensor<4xf64>) -> tensor<3x4xf64>",
      "tensor<3x4xf64>", "%0", {1, 2}));
  cases.push_back(oneOp(
      "reduce_sum", "%x: tensor<2x3x4xf64>",
      "%0 = zg.reduce_sum %x {axes = array<i64: 0, 2>, keepdims = false} : "
      "(tensor<2x3x4xf64>) -> tensor<3xf64>",
      "tensor<3xf64>"));
  cases.push_back(oneOp(
      "reduce_mean_keepdims", "%x: tensor<2x3x4xf64>",
      "%0 = zg.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : "
      "(tensor<2x3x4xf64>) -> tensor<2x1x4xf64>",
      "tensor<2x1x4xf64>"));
  cases.push_back(oneOp(
      "reduce_max", "%x: tensor<2x3x4xf64>",
      "%0 = zg.reduce_max %x {axes = array<i64: 2>, keepdims = false} : "
      "(tensor<2x3x4xf64>) -> tensor<2x3xf64>",
      "tensor<2x3xf64>"));
  cases.push_back(oneOp(
      "sum_squares", "%x: tensor<3x4xf64>",
      "%0 = zg.sum_squares %x : (tensor<3x4xf64>) -> tensor<f32>",
      "tensor<f32>"));
  return cases;
}

std::vector<GradCase> movementCases() {
  std::vector<GradCase> cases;
  cases.push_back(oneOp(
      "transpose", "%x: tensor<2x3x4xf64>",
      "%0 = zg.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf64>) "
      "-> tensor<4x2x3xf64>",
      "tensor<4x2x3xf64>"));
  cases.push_back(oneOp(
      "reshape", "%x: tensor<2x3x4xf64>",
      "%0 = zg.reshape %x : (tensor<2x3x4xf64>) -> tensor<6x4xf64>",
      "tensor<6x4xf64>"));
  cases.push_back(oneOp(
      "expand", "%x: tensor<3x1xf64>",
      "%0 = zg.expand %x : (tensor<3x1xf64>) -> tensor<2x3x4xf64>",
      "tensor<2x3x4xf64>"));
  cases.push_back(oneOp(
      "concat", "%a: tensor<2x1xf64>, %b: tensor<2x3xf64>, %c: tensor<2x2xf64>",
      "%0 = zg.concat %a, %b, %c {axis = 1 : i64} : (tensor<2x1xf64>, "
      "tensor<2x3xf64>, tensor<2x2xf64>) -> tensor<2x6xf64>",
      "tensor<2x6xf64>"));
  cases.push_back(oneOp(
      "split_one_result_unused", "%x: tensor<2x6xf64>",
      "%0:3 = zg.split %x {axis = 1 : i64} : (tensor<2x6xf64>) -> "
      "(tensor<2x1xf64>, tensor<2x3xf64>, tensor<2x2xf64>)",
      "tensor<2x1xf64>, tensor<2x2xf64>", "%0#0, %0#2"));
  auto slice = [&](std::string name, std::string starts, std::string steps,
                   std::string result) {
    cases.push_back(oneOp("slice_" + name, "%x: tensor<4x7xf64>",
                          "%0 = zg.slice %x {starts = array<i64: " + starts +
                              ">, steps = array<i64: " + steps +
                              ">} : (tensor<4x7xf64>) -> " + result,
                          result));
  };
  slice("step1", "1, 2", "1, 1", "tensor<2x4xf64>");
  slice("reverse", "3, 6", "-1, -1", "tensor<2x7xf64>");
  slice("step2", "0, 1", "2, 2", "tensor<2x3xf64>");
  slice("step_minus3", "3, 6", "1, -3", "tensor<1x3xf64>");
  cases.push_back(oneOp(
      "gather_axis0_negative", "%x: tensor<5x3xf64>",
      "%i = zg.constant {value = dense<[[1, 4], [1, -1]]> : tensor<2x2xi64>} "
      ": () -> tensor<2x2xi64>\n"
      "%0 = zg.gather %x, %i {axis = 0 : i64} : (tensor<5x3xf64>, "
      "tensor<2x2xi64>) -> tensor<2x2x3xf64>",
      "tensor<2x2x3xf64>"));
  cases.push_back(oneOp(
      "gather_axis1", "%x: tensor<2x5x3xf64>",
      "%i = zg.constant {value = dense<[3, 0, 3]> : tensor<3xi64>} : () -> "
      "tensor<3xi64>\n"
      "%0 = zg.gather %x, %i {axis = 1 : i64} : (tensor<2x5x3xf64>, "
      "tensor<3xi64>) -> tensor<2x3x3xf64>",
      "tensor<2x3x3xf64>"));
  cases.push_back(oneOp(
      "embedding", "%t: tensor<6x4xf64>",
      "%i = zg.constant {value = dense<[[1, 5, 1], [0, 1, 2]]> : "
      "tensor<2x3xi64>} : () -> tensor<2x3xi64>\n"
      "%0 = zg.embedding %t, %i : (tensor<6x4xf64>, tensor<2x3xi64>) -> "
      "tensor<2x3x4xf64>",
      "tensor<2x3x4xf64>"));
  cases.push_back(oneOp(
      "label_pick", "%l: tensor<4x6xf64>",
      "%y = zg.constant {value = dense<[1, -100, 5, 1]> : tensor<4xi64>} : () "
      "-> tensor<4xi64>\n"
      "%0 = zg.label_pick %l, %y {ignore_index = -100 : i64} : "
      "(tensor<4x6xf64>, tensor<4xi64>) -> tensor<4xf64>",
      "tensor<4xf64>"));
  return cases;
}

std::vector<GradCase> attentionCases() {
  std::vector<GradCase> cases;
  std::string q = "tensor<2x4x3x2xf64>", kv = "tensor<2x2x5x2xf64>";
  cases.push_back(oneOp(
      "attention_causal_gqa", "%q: " + q + ", %k: " + kv + ", %v: " + kv,
      "%0 = zg.attention %q, %k, %v {causal = true, scale = 0.7 : f64} : (" +
          q + ", " + kv + ", " + kv + ") -> " + q,
      q));
  cases.push_back(oneOp(
      "attention_mask_no_grad",
      "%q: " + q + ", %k: " + kv + ", %v: " + kv + ", %m: tensor<2x1x3x5xf64>",
      "%0 = zg.attention %q, %k, %v, %m {causal = false, scale = 0.5 : f64} : "
      "(" + q + ", " + kv + ", " + kv + ", tensor<2x1x3x5xf64>) -> " + q,
      q, "%0", {3}));
  cases.push_back(oneOp(
      "attention_with_lse", "%q: " + q + ", %k: " + kv + ", %v: " + kv,
      "%0:2 = zg.attention %q, %k, %v {causal = true, scale = 0.7 : f64} : (" +
          q + ", " + kv + ", " + kv + ") -> (" + q + ", tensor<2x4x3xf32>)",
      q, "%0#0"));
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Unary, GradientRule,
                         ::testing::ValuesIn(unaryCases()),
                         [](const auto &info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Binary, GradientRule,
                         ::testing::ValuesIn(binaryCases()),
                         [](const auto &info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(LinearAlgebra, GradientRule,
                         ::testing::ValuesIn(linearAlgebraCases()),
                         [](const auto &info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Normalisation, GradientRule,
                         ::testing::ValuesIn(normCases()),
                         [](const auto &info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Movement, GradientRule,
                         ::testing::ValuesIn(movementCases()),
                         [](const auto &info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Attention, GradientRule,
                         ::testing::ValuesIn(attentionCases()),
                         [](const auto &info) { return info.param.name; });

} // namespace
