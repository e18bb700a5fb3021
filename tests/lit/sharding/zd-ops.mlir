// RUN: zplan-opt --split-input-file %s | FileCheck %s
// RUN: zplan-opt --split-input-file %s | zplan-opt --split-input-file | FileCheck %s

// Tests that every zd op and the sharding attribute print and parse back.
// CHECK-LABEL: func.func @collectives
// CHECK: zd.all_reduce %{{.*}} {axis = "tp"} : tensor<2x8xf32>
// CHECK: zd.all_gather %{{.*}} {axis = "tp", dim = 1 : i64} : tensor<2x8xf32> -> tensor<2x16xf32>
// CHECK: zd.reduce_scatter %{{.*}} {axis = "dp", dim = 0 : i64} : tensor<2x16xf32> -> tensor<1x16xf32>
// CHECK: zd.broadcast %{{.*}} {axis = "dp", root = 1 : i64, test.sharding = #zd.sharding<[_, tp:2, dp], segments = [4, 4], partial>} : tensor<1x16xf32>
module attributes {zd.tp = 2 : i64, zd.dp = 2 : i64} {
func.func @collectives(%x: tensor<2x8xf32>) -> tensor<1x16xf32> {
  %a = zd.all_reduce %x {axis = "tp"} : tensor<2x8xf32>
  %g = zd.all_gather %a {axis = "tp", dim = 1 : i64} : tensor<2x8xf32> -> tensor<2x16xf32>
  %s = zd.reduce_scatter %g {axis = "dp", dim = 0 : i64} : tensor<2x16xf32> -> tensor<1x16xf32>
  %b = zd.broadcast %s {axis = "dp", root = 1 : i64, test.sharding = #zd.sharding<[_, tp:2, dp], segments = [4, 4], partial>} : tensor<1x16xf32>
  return %b : tensor<1x16xf32>
}
}

// -----

// Tests that the ZeRO and offload ops print and parse back.
// CHECK-LABEL: func.func @zero
// CHECK: %[[S:.*]] = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "w", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "host"} : tensor<128xf32>
// CHECK: %[[P:.*]] = zd.prefetch %[[S]] : tensor<128xf32>
// CHECK: %[[G:.*]] = zd.gather_param %[[P]] : tensor<128xf32> -> tensor<16x16xf32>
// CHECK: zd.release %[[G]] : tensor<16x16xf32>
// CHECK: zd.evict %{{.*}} : tensor<2x16xf32>
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @zero(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %s = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "w", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "host"} : tensor<128xf32>
  %p = zd.prefetch %s : tensor<128xf32>
  %g = zd.gather_param %p : tensor<128xf32> -> tensor<16x16xf32>
  %y = zg.linear %x, %g : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  zd.release %g : tensor<16x16xf32>
  %h = zd.evict %y : tensor<2x16xf32>
  return %h : tensor<2x16xf32>
}
}

// -----

// Tests that a max or min reduction prints back and sum stays the unprinted
// default.
// CHECK-LABEL: func.func @reductions
// CHECK: zd.all_reduce %{{.*}} {axis = "tp", reduction = "max"} : tensor<4xf32>
// CHECK: zd.reduce_scatter %{{.*}} {axis = "tp", dim = 0 : i64, reduction = "min"} : tensor<4xf32> -> tensor<2xf32>
// CHECK: zd.all_reduce %{{.*}} {axis = "tp"} : tensor<2xf32>
module attributes {zd.tp = 2 : i64, zd.dp = 1 : i64} {
func.func @reductions(%x: tensor<4xf32>) -> tensor<2xf32> {
  %a = zd.all_reduce %x {axis = "tp", reduction = "max"} : tensor<4xf32>
  %s = zd.reduce_scatter %a {axis = "tp", dim = 0 : i64, reduction = "min"} : tensor<4xf32> -> tensor<2xf32>
  %b = zd.all_reduce %s {axis = "tp", reduction = "sum"} : tensor<2xf32>
  return %b : tensor<2xf32>
}
}
