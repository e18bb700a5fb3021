//===- ConstTensor.h - constant tensors of the importer ---------*- C++ -*-===//
//
// The importer folds every subgraph that depends only on shapes and
// constants. ConstTensor holds such a value and the kernels below evaluate
// ONNX ops on it. Values are kept in double (floating types) or int64 (integer
// and bool types) storage so that one kernel serves every dtype; results of
// float ops are rounded to the tensor's precision after every op, so folding
// gives what a runtime of that precision computes.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_IMPORT_CONSTTENSOR_H
#define ZPLAN_COMPILER_IMPORT_CONSTTENSOR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zplan::import {

/// ONNX TensorProto::DataType codes that zplan supports.
enum DType : int32_t {
  kFloat = 1,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kBFloat16 = 16,
};

/// Returns true for the ONNX dtype codes above.
bool isSupportedDType(int32_t dtype);
/// Returns true for float16, bfloat16, float and double.
inline bool isFloatDType(int32_t d) {
  return d == kFloat || d == kFloat16 || d == kDouble || d == kBFloat16;
}
/// Bytes per element of a supported dtype.
int64_t dtypeSize(int32_t dtype);
/// A readable name ("float32", "int64", ...) of any ONNX dtype code.
std::string dtypeName(int32_t dtype);

using Shape = llvm::SmallVector<int64_t, 6>;

/// The most elements one folded constant may hold (2^27: a causal mask of
/// batch 8 x 4096 x 4096 expanded whole). Creating a larger one throws
/// FoldLimitError, which the importer reports as an error on the node.
constexpr int64_t kMaxFoldElements = int64_t(1) << 27;

/// Thrown when folding would create a constant larger than
/// kMaxFoldElements (or one whose size overflows).
struct FoldLimitError {
  int64_t elements; ///< -1 when the count overflows
};

/// Thrown when integer arithmetic while folding leaves int64: shape
/// computations that overflow come from a broken model, so the importer
/// reports the node instead of wrapping.
struct FoldOverflowError {};

/// Converts a double to int64 the way a cast in a runtime would without
/// undefined behaviour: NaN gives 0, out-of-range values saturate.
int64_t toInt64(double v);

/// Product of the dims, or nullopt when it overflows int64 or a dim is
/// negative.
std::optional<int64_t> checkedNumElements(llvm::ArrayRef<int64_t> shape);

struct ConstTensor {
  int32_t dtype = kFloat;
  Shape shape;
  std::vector<double> f;  ///< values when isFloatDType(dtype)
  std::vector<int64_t> i; ///< values otherwise (bool as 0 / 1)

  ConstTensor() = default;
  ConstTensor(int32_t dtype, llvm::ArrayRef<int64_t> shape);

  bool isFloat() const { return isFloatDType(dtype); }
  int64_t numel() const;
  /// Element k as double / int64 whatever the storage.
  double getF(int64_t k) const { return isFloat() ? f[k] : double(i[k]); }
  int64_t getI(int64_t k) const { return isFloat() ? toInt64(f[k]) : i[k]; }
  /// Stores v in element k, converting and rounding to the dtype.
  void set(int64_t k, double v);
  void setI(int64_t k, int64_t v);
  /// The values as int64 (for shape-like inputs).
  std::vector<int64_t> toInts() const;
  /// Returns true when every element equals element 0.
  bool isSplat() const;
};

/// Rounds a double to the precision of a float dtype.
double roundTo(int32_t dtype, double v);

/// Numpy broadcast of two shapes, or nullopt.
std::optional<Shape> broadcast(llvm::ArrayRef<int64_t> a,
                               llvm::ArrayRef<int64_t> b);

/// The constant-folding kernels. Each returns the result or an error message
/// in `err` (and an empty result); inputs are assumed shape-checked by the
/// caller where the comment says so.
/// An ONNX gather index into a dim of `size`: a negative `j` counts from the
/// end. Returns false when `j` is still outside [0, size).
inline bool wrapIndex(int64_t &j, int64_t size) {
  if (j < 0)
    j += size;
  return j >= 0 && j < size;
}

namespace eval {
enum class Unary {
  Neg, Exp, Log, Sqrt, Reciprocal, Tanh, Erf, Sigmoid, Relu, Cos, Sin, Abs,
  Not, IsNaN, Floor, Ceil, Sign
};
enum class Binary {
  Add, Sub, Mul, Div, Pow, Max, Min, Mod, Equal, Less, Greater, LessEqual,
  GreaterEqual, And, Or, Xor,
  FMod ///< ONNX Mod with fmod = 1: the result has the dividend's sign (C fmod)
};
ConstTensor unary(Unary op, const ConstTensor &x);
ConstTensor binary(Binary op, const ConstTensor &a, const ConstTensor &b,
                   llvm::ArrayRef<int64_t> outShape);
ConstTensor where(const ConstTensor &c, const ConstTensor &a,
                  const ConstTensor &b, llvm::ArrayRef<int64_t> outShape);
ConstTensor cast(const ConstTensor &x, int32_t to);
ConstTensor expand(const ConstTensor &x, llvm::ArrayRef<int64_t> outShape);
ConstTensor transpose(const ConstTensor &x, llvm::ArrayRef<int64_t> perm);
ConstTensor concat(llvm::ArrayRef<const ConstTensor *> xs, int64_t axis);
/// starts / steps / sizes per dim, already clamped.
ConstTensor slice(const ConstTensor &x, llvm::ArrayRef<int64_t> starts,
                  llvm::ArrayRef<int64_t> steps, llvm::ArrayRef<int64_t> sizes);
/// Indices are checked against the data dim here; returns false on an
/// out-of-range index.
bool gather(const ConstTensor &x, const ConstTensor &idx, int64_t axis,
            ConstTensor &out);
bool gatherElements(const ConstTensor &x, const ConstTensor &idx, int64_t axis,
                    ConstTensor &out);
bool gatherND(const ConstTensor &x, const ConstTensor &idx, int64_t batchDims,
              ConstTensor &out);
ConstTensor cumsum(const ConstTensor &x, int64_t axis, bool exclusive,
                   bool reverse);
/// ONNX Tile: x repeated reps[k] times along each dim k (reps checked by the
/// caller: one non-negative entry per dim, the result within the limit).
ConstTensor tile(const ConstTensor &x, llvm::ArrayRef<int64_t> reps);
ConstTensor matmul(const ConstTensor &a, const ConstTensor &b,
                   llvm::ArrayRef<int64_t> outShape);
enum class Reduce { Sum, Mean, Max, Min, Prod };
ConstTensor reduce(Reduce op, const ConstTensor &x,
                   llvm::ArrayRef<int64_t> axes, bool keepdims);
ConstTensor softmax(const ConstTensor &x, int64_t axis);
/// Returns true when x does not vary along dim d.
bool uniformAlong(const ConstTensor &x, size_t d);
/// Shrinks every dim along which x does not vary to size 1. The result
/// broadcasts (numpy rules) back to x.
ConstTensor compress(ConstTensor x);
} // namespace eval

} // namespace zplan::import

#endif // ZPLAN_COMPILER_IMPORT_CONSTTENSOR_H
