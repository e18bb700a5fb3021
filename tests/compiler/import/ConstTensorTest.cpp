//===- ConstTensorTest.cpp - constant folding kernels ---------------------===//
//
// Each kernel is checked against an index formula written out here, on
// shapes that exercise broadcasting, negative indices and strides.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/ConstTensor.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace zplan::import;

namespace {

ConstTensor iota(int32_t dtype, Shape shape, double start = 0) {
  ConstTensor t(dtype, shape);
  for (int64_t k = 0; k < t.numel(); ++k)
    t.set(k, start + k);
  return t;
}

TEST(ConstTensor, BinaryBroadcasts) {
  ConstTensor a = iota(kFloat, {2, 1, 3});
  ConstTensor b = iota(kFloat, {4, 1}, 10);
  ConstTensor r = eval::binary(eval::Binary::Sub, a, b, {2, 4, 3});
  ASSERT_EQ(r.shape, (Shape{2, 4, 3}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(r.f[(i * 4 + j) * 3 + k], (i * 3 + k) - (10.0 + j));
}

TEST(ConstTensor, IntegerCompareGivesBool) {
  ConstTensor a = iota(kInt64, {1, 4});
  ConstTensor b = iota(kInt64, {4, 1});
  ConstTensor r = eval::binary(eval::Binary::LessEqual, a, b, {4, 4});
  EXPECT_EQ(r.dtype, kBool);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(r.i[i * 4 + j], j <= i ? 1 : 0);
}

TEST(ConstTensor, Float32Rounding) {
  ConstTensor a(kFloat, {});
  a.set(0, 0.1);
  EXPECT_EQ(a.f[0], double(0.1f));
  ConstTensor h(kBFloat16, {});
  h.set(0, 1.0 + 1.0 / 512);
  EXPECT_EQ(h.f[0], 1.0); // bfloat16 keeps 8 bits of mantissa.
}

TEST(ConstTensor, TransposeAndSliceWithNegativeStep) {
  ConstTensor x = iota(kInt64, {2, 3, 4});
  ConstTensor t = eval::transpose(x, {2, 0, 1});
  ASSERT_EQ(t.shape, (Shape{4, 2, 3}));
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(t.i[(a * 2 + b) * 3 + c], (b * 3 + c) * 4 + a);
  // x[1, 2:0:-1, 3:0:-2] -> sizes [1, 2, 2].
  ConstTensor s = eval::slice(x, {1, 2, 3}, {1, -1, -2}, {1, 2, 2});
  std::vector<int64_t> want = {(1 * 3 + 2) * 4 + 3, (1 * 3 + 2) * 4 + 1,
                               (1 * 3 + 1) * 4 + 3, (1 * 3 + 1) * 4 + 1};
  EXPECT_EQ(s.i, want);
}

TEST(ConstTensor, GatherNegativeAndOutOfRange) {
  ConstTensor x = iota(kFloat, {3, 2});
  ConstTensor idx(kInt64, {2});
  idx.i = {-1, 0};
  ConstTensor out;
  ASSERT_TRUE(eval::gather(x, idx, 0, out));
  EXPECT_EQ(out.f, (std::vector<double>{4, 5, 0, 1}));
  idx.i = {3, 0};
  EXPECT_FALSE(eval::gather(x, idx, 0, out));
}

TEST(ConstTensor, GatherNDAndElements) {
  ConstTensor x = iota(kInt64, {2, 3});
  ConstTensor idx(kInt64, {2, 2});
  idx.i = {1, 2, 0, -1};
  ConstTensor out;
  ASSERT_TRUE(eval::gatherND(x, idx, 0, out));
  EXPECT_EQ(out.i, (std::vector<int64_t>{5, 2}));
  ConstTensor ge(kInt64, {2, 2});
  ge.i = {2, 0, 1, 1};
  ASSERT_TRUE(eval::gatherElements(x, ge, 1, out));
  EXPECT_EQ(out.i, (std::vector<int64_t>{2, 0, 4, 4}));
}

TEST(ConstTensor, CumSumForms) {
  ConstTensor x = iota(kInt64, {4}, 1); // 1 2 3 4
  EXPECT_EQ(eval::cumsum(x, 0, false, false).i,
            (std::vector<int64_t>{1, 3, 6, 10}));
  EXPECT_EQ(eval::cumsum(x, 0, true, false).i,
            (std::vector<int64_t>{0, 1, 3, 6}));
  EXPECT_EQ(eval::cumsum(x, 0, false, true).i,
            (std::vector<int64_t>{10, 9, 7, 4}));
}

TEST(ConstTensor, MatmulBatchBroadcast) {
  ConstTensor a = iota(kFloat, {2, 1, 2, 3});
  ConstTensor b = iota(kFloat, {3, 3, 2});
  ConstTensor r = eval::matmul(a, b, {2, 3, 2, 2});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int m = 0; m < 2; ++m)
        for (int n = 0; n < 2; ++n) {
          double want = 0;
          for (int k = 0; k < 3; ++k)
            want += a.f[(i * 2 + m) * 3 + k] * b.f[(j * 3 + k) * 2 + n];
          EXPECT_EQ(r.f[((i * 3 + j) * 2 + m) * 2 + n], want);
        }
}

TEST(ConstTensor, ReduceAndSoftmax) {
  ConstTensor x = iota(kFloat, {2, 3});
  ConstTensor m = eval::reduce(eval::Reduce::Mean, x, {1}, true);
  EXPECT_EQ(m.shape, (Shape{2, 1}));
  EXPECT_EQ(m.f, (std::vector<double>{1, 4}));
  ConstTensor s = eval::softmax(x, 1);
  double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0);
  EXPECT_NEAR(s.f[2], std::exp(2.0) / z, 1e-7);
}

TEST(ConstTensor, CompressKeepsOnlyVaryingDims) {
  // [3, 1, 4] values depend on the last index only: compress to [1, 1, 4].
  ConstTensor x(kFloat, {3, 1, 4});
  for (int64_t k = 0; k < x.numel(); ++k)
    x.f[k] = double(k % 4);
  ConstTensor c = eval::compress(x);
  EXPECT_EQ(c.shape, (Shape{1, 1, 4}));
  EXPECT_EQ(eval::expand(c, x.shape).f, x.f);
  ConstTensor y = iota(kFloat, {3, 4});
  EXPECT_EQ(eval::compress(y).shape, (Shape{3, 4}));
}

TEST(ConstTensor, CheckedNumElements) {
  EXPECT_EQ(checkedNumElements({2, 3, 4}), 24);
  EXPECT_FALSE(checkedNumElements({2, -1}).has_value());
  EXPECT_FALSE(checkedNumElements({int64_t(1) << 40, int64_t(1) << 40}));
}

} // namespace
