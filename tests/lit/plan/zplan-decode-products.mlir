// RUN: zplan-opt %s --split-input-file --zplan-decode-products="fuse=true" | FileCheck %s
// RUN: zplan-opt %s --split-input-file --zplan-decode-products="choose-kernel=true few-rows-max=2 few-rows-max-bytes=4096" | FileCheck %s --check-prefix=KERNEL

// Tests that, in the decode program, the gated MLP's gate and up linears and
// their activation product (zg.gated, or a silu and a mul) become one
// zg.linear_gated, and the q / k / v linears of one input one
// zg.linear_multi; an op that read q between the linears moves after the
// fused step, and so does the release of a fused weight.
// CHECK-LABEL: func.func @decode
// CHECK: %[[W:.*]] = zd.gather_param %arg1
// CHECK-NEXT: %[[Q:[a-z0-9_]+]]:3 = zg.linear_multi %arg0, %[[W]], %arg2, %arg3 : (tensor<1x1x8xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>) -> (tensor<1x1x8xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>)
// CHECK-NEXT: %[[N:.*]] = zg.neg %[[Q]]#0
// CHECK-NEXT: zd.release %[[W]]
// CHECK-NEXT: %[[H:.*]] = zg.add %[[N]], %[[Q]]#0
// CHECK-NEXT: %[[M:.*]] = zg.linear_gated %[[H]], %arg4, %arg5 {act = "silu"} : (tensor<1x1x8xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
// CHECK-NEXT: %[[M2:.*]] = zg.linear_gated %[[N]], %arg4, %arg5 {act = "gelu_tanh"}
// CHECK-NEXT: return %[[H]], %[[Q]]#1, %[[Q]]#2, %[[M]], %[[M2]]
//
// choose-kernel marks every product of at most few-rows-max rows and
// few-rows-max-bytes of weight.
// KERNEL-LABEL: func.func @decode
// KERNEL-COUNT-7: zg.linear {{.*}}{zd.kernel = "few_rows"}
// KERNEL-NOT: zg.linear
func.func @decode(%x: tensor<1x1x8xf32>, %sq: tensor<64xf32>, %wk: tensor<8x4xf32>, %wv: tensor<8x4xf32>, %wg: tensor<8x16xf32>, %wu: tensor<8x16xf32>) -> (tensor<1x1x8xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>) {
  %wq = zd.gather_param %sq : tensor<64xf32> -> tensor<8x8xf32>
  %q = zg.linear %x, %wq : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
  %nq = zg.neg %q : (tensor<1x1x8xf32>) -> tensor<1x1x8xf32>
  zd.release %wq : tensor<8x8xf32>
  %k = zg.linear %x, %wk : (tensor<1x1x8xf32>, tensor<8x4xf32>) -> tensor<1x1x4xf32>
  %v = zg.linear %x, %wv : (tensor<1x1x8xf32>, tensor<8x4xf32>) -> tensor<1x1x4xf32>
  %h = zg.add %nq, %q : (tensor<1x1x8xf32>, tensor<1x1x8xf32>) -> tensor<1x1x8xf32>
  %g = zg.linear %h, %wg : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
  %a = zg.silu %g : (tensor<1x1x16xf32>) -> tensor<1x1x16xf32>
  %u = zg.linear %h, %wu : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
  %m = zg.mul %a, %u : (tensor<1x1x16xf32>, tensor<1x1x16xf32>) -> tensor<1x1x16xf32>
  %g2 = zg.linear %nq, %wg : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
  %u2 = zg.linear %nq, %wu : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
  %m2 = zg.gated %g2, %u2 {act = "gelu_tanh"} : (tensor<1x1x16xf32>, tensor<1x1x16xf32>) -> tensor<1x1x16xf32>
  return %h, %k, %v, %m, %m2 : tensor<1x1x8xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>
}

// -----

// Tests that nothing fuses outside the decode program, past 16 rows, with a
// bias, or where a product has another reader (the activation's input);
// choose-kernel leaves the prefill and the products of 17 rows alone.
// CHECK-LABEL: func.func @prefill
// CHECK-NOT: zg.linear_multi
// CHECK-NOT: zg.linear_gated
// CHECK-LABEL: func.func @decode
// CHECK-NOT: zg.linear_multi
// CHECK-NOT: zg.linear_gated
// KERNEL-LABEL: func.func @prefill
// KERNEL-NOT: zd.kernel
// KERNEL-LABEL: func.func @decode
// KERNEL: zg.linear %arg0, %arg2 : (tensor<17x8xf32>
// KERNEL: zg.linear %arg0, %arg3 : (tensor<17x8xf32>
// KERNEL: zg.linear %arg1, %arg2, %arg4 {zd.kernel = "few_rows"}
// KERNEL: zg.linear %arg1, %arg3, %arg4 {zd.kernel = "few_rows"}
func.func @prefill(%x: tensor<1x1x8xf32>, %wq: tensor<8x8xf32>, %wk: tensor<8x8xf32>) -> (tensor<1x1x8xf32>, tensor<1x1x8xf32>) {
  %q = zg.linear %x, %wq : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
  %k = zg.linear %x, %wk : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
  return %q, %k : tensor<1x1x8xf32>, tensor<1x1x8xf32>
}
func.func @decode(%x: tensor<17x8xf32>, %y: tensor<1x8xf32>, %wq: tensor<8x8xf32>, %wk: tensor<8x8xf32>, %b: tensor<8xf32>) -> (tensor<17x8xf32>, tensor<17x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>) {
  %q = zg.linear %x, %wq : (tensor<17x8xf32>, tensor<8x8xf32>) -> tensor<17x8xf32>
  %k = zg.linear %x, %wk : (tensor<17x8xf32>, tensor<8x8xf32>) -> tensor<17x8xf32>
  %q1 = zg.linear %y, %wq, %b : (tensor<1x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<1x8xf32>
  %g = zg.linear %y, %wk, %b : (tensor<1x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<1x8xf32>
  %a = zg.silu %g : (tensor<1x8xf32>) -> tensor<1x8xf32>
  %m = zg.mul %a, %q1 : (tensor<1x8xf32>, tensor<1x8xf32>) -> tensor<1x8xf32>
  return %q, %k, %m, %g, %q1 : tensor<17x8xf32>, tensor<17x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>
}
