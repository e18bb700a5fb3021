// RUN: zplan-opt %s --split-input-file --zplan-materialize-outputs | FileCheck %s

// Tests that a returned graph input gets a copy that the return then uses.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK: %[[C:.*]] = zg.cast %[[X]] : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: return %[[C]]
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  return %x : tensor<2x3xf32>
}

// -----

// Tests that a returned constant and a view of an input get copies too.
// CHECK-LABEL: func.func @main
// CHECK: %[[K:.*]] = zg.constant
// CHECK: %[[R:.*]] = zg.reshape
// CHECK-DAG: %[[CK:.*]] = zg.cast %[[K]]
// CHECK-DAG: %[[CR:.*]] = zg.cast %[[R]]
// CHECK: return %[[CK]], %[[CR]]
func.func @main(%x: tensor<2x3xf32>) -> (tensor<2xi64>, tensor<6xf32>) {
  %k = zg.constant {value = dense<[2, 3]> : tensor<2xi64>} : () -> tensor<2xi64>
  %r = zg.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  return %k, %r : tensor<2xi64>, tensor<6xf32>
}

// -----

// Tests that the pass must not fire on an output an instruction computes.
// CHECK-LABEL: func.func @main
// CHECK: %[[Y:.*]] = zg.neg
// CHECK-NOT: zg.cast
// CHECK: return %[[Y]]
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = zg.neg %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}
