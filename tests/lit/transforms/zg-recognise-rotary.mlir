// RUN: zplan-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(zg-recognise-rotary))' | FileCheck %s

// Tests that llama's export (x * cos + concat(-x[h:], x[:h]) * sin, the
// tables [1, 1, S, D] broadcast over batch and heads) becomes zg.rotary, and
// that the slices, neg, concat and products go with it.
// CHECK-LABEL: func.func @llama
// CHECK-NEXT: %[[R:.*]] = zg.rotary %arg0, %arg1, %arg2 : (tensor<2x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xf32>
// CHECK-NEXT: return %[[R]]
func.func @llama(%x: tensor<2x4x8x16xf32>, %cos: tensor<1x1x8x16xf32>, %sin: tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %0 = zg.mul %x, %cos : (tensor<2x4x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xf32>
  %1 = zg.slice %x {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : (tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
  %2 = zg.slice %x {starts = array<i64: 0, 0, 0, 8>, steps = array<i64: 1, 1, 1, 1>} : (tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
  %3 = zg.neg %2 : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %4 = zg.concat %3, %1 {axis = 3 : i64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x16xf32>
  %5 = zg.mul %4, %sin : (tensor<2x4x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xf32>
  %6 = zg.add %0, %5 : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %6 : tensor<2x4x8x16xf32>
}

// -----

// Tests the other operand orders (sum, both products) and halves taken by a
// zg.split, with 3-D tables.
// CHECK-LABEL: func.func @swapped_split
// CHECK-NEXT: %[[R:.*]] = zg.rotary %arg0, %arg1, %arg2
// CHECK-NEXT: return %[[R]]
func.func @swapped_split(%x: tensor<2x6x4xf32>, %cos: tensor<1x6x4xf32>, %sin: tensor<1x6x4xf32>) -> tensor<2x6x4xf32> {
  %lo, %hi = zg.split %x {axis = 2 : i64} : (tensor<2x6x4xf32>) -> (tensor<2x6x2xf32>, tensor<2x6x2xf32>)
  %n = zg.neg %hi : (tensor<2x6x2xf32>) -> tensor<2x6x2xf32>
  %r = zg.concat %n, %lo {axis = 2 : i64} : (tensor<2x6x2xf32>, tensor<2x6x2xf32>) -> tensor<2x6x4xf32>
  %s = zg.mul %sin, %r : (tensor<1x6x4xf32>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  %c = zg.mul %cos, %x : (tensor<1x6x4xf32>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  %y = zg.add %s, %c : (tensor<2x6x4xf32>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  return %y : tensor<2x6x4xf32>
}

// -----

// Tests that a partial rotary (the rotated part is the first 8 of 16 dims and
// its halves are sliced from the whole tensor) is left as it is.
// CHECK-LABEL: func.func @partial
// CHECK-NOT: zg.rotary
// CHECK: zg.concat
// CHECK: zg.add
func.func @partial(%q: tensor<2x8x16xf32>, %cos: tensor<8x8xf32>, %sin: tensor<8x8xf32>) -> tensor<2x8x8xf32> {
  %x = zg.slice %q {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
  %lo = zg.slice %q {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x16xf32>) -> tensor<2x8x4xf32>
  %hi = zg.slice %q {starts = array<i64: 0, 0, 4>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x16xf32>) -> tensor<2x8x4xf32>
  %n = zg.neg %hi : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %r = zg.concat %n, %lo {axis = 2 : i64} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
  %c = zg.mul %x, %cos : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %s = zg.mul %r, %sin : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %y = zg.add %c, %s : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %y : tensor<2x8x8xf32>
}

// -----

// Tests that the pattern must rotate the tensor multiplied by cos, with the
// negated half first: another tensor's halves, or concat(x1, -x2), stay.
// CHECK-LABEL: func.func @not_rotary
// CHECK-NOT: zg.rotary
// CHECK: return
func.func @not_rotary(%x: tensor<2x8xf32>, %z: tensor<2x8xf32>, %cos: tensor<8xf32>, %sin: tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %lo = zg.slice %z {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %hi = zg.slice %z {starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = zg.neg %hi : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %r = zg.concat %n, %lo {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %c = zg.mul %x, %cos : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %s = zg.mul %r, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = zg.add %c, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %xlo = zg.slice %x {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %xhi = zg.slice %x {starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %xn = zg.neg %xhi : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %r2 = zg.concat %xlo, %xn {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %s2 = zg.mul %r2, %sin : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y2 = zg.add %c, %s2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y, %y2 : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Tests that tables that broadcast along the rotated dim (one angle for all
// of it) are not rotary tables: nothing is recognised.
// CHECK-LABEL: func.func @scalar_tables
// CHECK-NOT: zg.rotary
// CHECK: return
func.func @scalar_tables(%x: tensor<2x8xf32>, %cos: tensor<2x1xf32>, %sin: tensor<2x1xf32>) -> tensor<2x8xf32> {
  %lo = zg.slice %x {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %hi = zg.slice %x {starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %n = zg.neg %hi : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %r = zg.concat %n, %lo {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %c = zg.mul %x, %cos : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %s = zg.mul %r, %sin : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %y = zg.add %c, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
