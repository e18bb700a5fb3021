// RUN: zplan-opt %s --split-input-file --zplan-fuse | FileCheck %s

// Tests that a linear whose only user is a tanh GELU becomes one
// zg.linear_gelu with the linear's operands and attributes and the GELU's
// result, placed where the linear was.
// CHECK-LABEL: func.func @linear_gelu
// CHECK: %[[F:.*]] = zg.linear_gelu %{{.*}}, %{{.*}}, %{{.*}} {alpha = 5.000000e-01 : f64, trans_w = true}
// CHECK-SAME: -> tensor<2x8xf32>
// CHECK-NOT: zg.gelu
// CHECK-NOT: zg.linear
// CHECK: return %[[F]]
func.func @linear_gelu(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  %y = zg.linear %x, %w, %b {alpha = 0.5 : f64, trans_w = true} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %z = zg.gelu %y {approximate = "tanh"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %z : tensor<2x8xf32>
}

// -----

// Tests that the pass must not fire when the linear's result has another
// user, nor on an erf GELU (the GPU epilogue is the tanh form).
// CHECK-LABEL: func.func @linear_gelu_not
// CHECK-NOT: zg.linear_gelu
// CHECK: zg.linear
// CHECK: zg.gelu
// CHECK: zg.linear
// CHECK: zg.gelu
// CHECK-NOT: zg.linear_gelu
func.func @linear_gelu_not(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {
  %y = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %z = zg.gelu %y {approximate = "tanh"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %y2 = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %z2 = zg.gelu %y2 {approximate = "none"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %z, %y, %z2 : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Tests that a residual add read by a last-axis layer norm becomes one
// zg.residual_norm whose sum still feeds the residual stream and whose
// normalised result replaces the norm's, and the same for an RMS norm.
// CHECK-LABEL: func.func @residual_norm
// CHECK: %[[S:[a-z0-9_]+]], %[[N:[a-z0-9_]+]] = zg.residual_norm %arg0, %arg1, %arg2, %arg3 {epsilon = 1.000000e-05 : f64, kind = "layer"}
// CHECK: %[[S2:[a-z0-9_]+]], %[[N2:[a-z0-9_]+]] = zg.residual_norm %[[S]], %[[N]], %arg2 {epsilon = 9.9999999999999995E-7 : f64, kind = "rms"}
// CHECK-NOT: zg.add
// CHECK-NOT: zg.layer_norm
// CHECK-NOT: zg.rms_norm
// CHECK: return %[[S2]], %[[N2]]
func.func @residual_norm(%a: tensor<2x3x8xf32>, %b: tensor<2x3x8xf32>, %s: tensor<8xf32>, %bias: tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
  %sum = zg.add %a, %b : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %n = zg.layer_norm %sum, %s, %bias {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %sum2 = zg.add %sum, %n : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %n2 = zg.rms_norm %sum2, %s {epsilon = 1.0e-6 : f64} : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  return %sum2, %n2 : tensor<2x3x8xf32>, tensor<2x3x8xf32>
}

// -----

// Tests that the pass must not fire on a broadcasting add, on a layer norm
// over more than the last axis, on an RMS norm without a scale, or when the
// sum has a user before the norm.
// CHECK-LABEL: func.func @residual_norm_not
// CHECK-NOT: zg.residual_norm
// CHECK: zg.add
// CHECK: zg.layer_norm
// CHECK: zg.add
// CHECK: zg.layer_norm
// CHECK: zg.add
// CHECK: zg.rms_norm
// CHECK: zg.add
// CHECK: zg.neg
// CHECK: zg.rms_norm
// CHECK-NOT: zg.residual_norm
func.func @residual_norm_not(%a: tensor<2x8xf32>, %row: tensor<8xf32>, %s: tensor<8xf32>, %s28: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %sum = zg.add %a, %row : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %n = zg.layer_norm %sum, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %sum2 = zg.add %a, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %n2 = zg.layer_norm %sum2, %s28 {axis = 0 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %sum3 = zg.add %n2, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %n3 = zg.rms_norm %sum3 {epsilon = 1.0e-6 : f64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %sum4 = zg.add %n3, %n : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %early = zg.neg %sum4 : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %n4 = zg.rms_norm %sum4, %s {epsilon = 1.0e-6 : f64} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %n, %n2, %n3, %early, %n4 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Tests that silu(gate) * up becomes one zg.gated at the mul's place, with
// either operand order, and that a GELU gate keeps its form.
// CHECK-LABEL: func.func @gated
// CHECK: %[[U:.*]] = zg.neg %arg1
// CHECK: %[[G:.*]] = zg.gated %arg0, %[[U]] {act = "silu"}
// CHECK: %[[H:.*]] = zg.gated %arg1, %[[G]] {act = "gelu_tanh"}
// CHECK-NOT: zg.silu
// CHECK-NOT: zg.mul
// CHECK: return %[[H]]
func.func @gated(%gate: tensor<2x8xf32>, %x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %act = zg.silu %gate : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %up = zg.neg %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = zg.mul %act, %up : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %act2 = zg.gelu %x {approximate = "tanh"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %m2 = zg.mul %m, %act2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %m2 : tensor<2x8xf32>
}

// -----

// Tests that the pass must not fire when the activation has another user, or
// when the product broadcasts.
// CHECK-LABEL: func.func @gated_not
// CHECK-NOT: zg.gated
// CHECK: zg.silu
// CHECK: zg.mul
// CHECK: zg.silu
// CHECK: zg.mul
// CHECK-NOT: zg.gated
func.func @gated_not(%gate: tensor<2x8xf32>, %row: tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %act = zg.silu %gate : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = zg.mul %act, %gate : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %act2 = zg.silu %gate : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %m2 = zg.mul %act2, %row : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %m, %m2, %act : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Tests that a linear read only by a residual add becomes one
// zg.linear_residual (either operand order, the bias kept), and that the
// norm after it then stays a plain zg.rms_norm rather than a residual norm.
// CHECK-LABEL: func.func @linear_residual
// CHECK: %[[H:.*]] = zg.linear_residual %arg0, %arg1, %arg3 {trans_w = true}
// CHECK-SAME: -> tensor<2x16x8xbf16>
// CHECK: %[[N:.*]] = zg.rms_norm %[[H]], %arg4
// CHECK: %[[H2:.*]] = zg.linear_residual %[[N]], %arg2, %[[H]], %arg5 {alpha = 5.000000e-01 : f64}
// CHECK-NOT: zg.add
// CHECK-NOT: zg.residual_norm
// CHECK: return %[[H2]]
func.func @linear_residual(%x: tensor<2x16x8xbf16>, %wo: tensor<8x8xbf16>, %wd: tensor<8x8xbf16>, %r: tensor<2x16x8xbf16>, %g: tensor<8xbf16>, %b: tensor<8xbf16>) -> tensor<2x16x8xbf16> {
  %o = zg.linear %x, %wo {alpha = 1.0 : f64, trans_w = true} : (tensor<2x16x8xbf16>, tensor<8x8xbf16>) -> tensor<2x16x8xbf16>
  %h = zg.add %r, %o : (tensor<2x16x8xbf16>, tensor<2x16x8xbf16>) -> tensor<2x16x8xbf16>
  %n = zg.rms_norm %h, %g {epsilon = 1.0e-5 : f64} : (tensor<2x16x8xbf16>, tensor<8xbf16>) -> tensor<2x16x8xbf16>
  %d = zg.linear %n, %wd, %b {alpha = 0.5 : f64, trans_w = false} : (tensor<2x16x8xbf16>, tensor<8x8xbf16>, tensor<8xbf16>) -> tensor<2x16x8xbf16>
  %h2 = zg.add %d, %h : (tensor<2x16x8xbf16>, tensor<2x16x8xbf16>) -> tensor<2x16x8xbf16>
  return %h2 : tensor<2x16x8xbf16>
}

// -----

// Tests that the fused product sits where the add was when the residual is
// computed after the linear, so that the residual is defined before its use.
// CHECK-LABEL: func.func @linear_residual_late
// CHECK: %[[R:.*]] = zg.neg %arg2
// CHECK-NEXT: %[[H:.*]] = zg.linear_residual %arg0, %arg1, %[[R]]
// CHECK-NEXT: return %[[H]]
func.func @linear_residual_late(%x: tensor<32x8xf32>, %w: tensor<8x8xf32>, %a: tensor<32x8xf32>) -> tensor<32x8xf32> {
  %o = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<32x8xf32>, tensor<8x8xf32>) -> tensor<32x8xf32>
  %r = zg.neg %a : (tensor<32x8xf32>) -> tensor<32x8xf32>
  %h = zg.add %o, %r : (tensor<32x8xf32>, tensor<32x8xf32>) -> tensor<32x8xf32>
  return %h : tensor<32x8xf32>
}

// -----

// Tests that the pass must not fold an add into a product of fewer rows than
// residual-min-rows (a decode step's, which keeps its residual norm), nor
// into a linear whose result has another user, nor a broadcasting add.
// CHECK-LABEL: func.func @linear_residual_not
// CHECK-NOT: zg.linear_residual
// CHECK: zg.linear
// CHECK: zg.residual_norm
// CHECK: zg.linear
// CHECK: zg.add
// CHECK: zg.linear
// CHECK: zg.add
// CHECK-NOT: zg.linear_residual
func.func @linear_residual_not(%x: tensor<16x8xf32>, %w: tensor<8x8xf32>, %r: tensor<16x8xf32>, %g: tensor<8xf32>, %row: tensor<8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) {
  %o = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
  %h = zg.add %r, %o : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  %n = zg.rms_norm %h, %g {epsilon = 1.0e-5 : f64} : (tensor<16x8xf32>, tensor<8xf32>) -> tensor<16x8xf32>
  %o2 = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
  %h2 = zg.add %r, %o2 : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  %o3 = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
  %h3 = zg.add %o3, %row : (tensor<16x8xf32>, tensor<8xf32>) -> tensor<16x8xf32>
  return %n, %h2, %o2, %h3, %h : tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>
}
