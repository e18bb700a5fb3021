// RUN: zplan-opt %s --split-input-file | zplan-opt --split-input-file | FileCheck %s

// Tests that zg.rotary round-trips, with and without `inverse`, and with
// tables of another float type than the input's.
// CHECK-LABEL: func.func @rotary
// CHECK: zg.rotary %arg0, %arg1, %arg2 : (tensor<2x4x8x16xbf16>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xbf16>
// CHECK: zg.rotary %{{.*}}, %arg1, %arg2 {inverse = true}
func.func @rotary(%x: tensor<2x4x8x16xbf16>, %c: tensor<1x1x8x16xf32>, %s: tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xbf16> {
  %0 = zg.rotary %x, %c, %s : (tensor<2x4x8x16xbf16>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xbf16>
  %1 = zg.rotary %0, %c, %s {inverse = true} : (tensor<2x4x8x16xbf16>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xbf16>
  return %1 : tensor<2x4x8x16xbf16>
}
