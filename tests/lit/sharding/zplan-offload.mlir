// RUN: zplan-opt --split-input-file --zplan-offload=param=cpu %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-offload=param=none %s | FileCheck %s --check-prefix=NONE

// Tests that ZeRO shards move to host memory and each is copied to the
// device one parameter ahead of its gather.
// CHECK-LABEL: func.func @shards
// CHECK: %[[A:.*]] = zd.weight_shard {{.*}}name = "a"{{.*}}space = "host"
// CHECK: %[[B:.*]] = zd.weight_shard {{.*}}name = "b"{{.*}}space = "host"
// CHECK: %[[PA:.*]] = zd.prefetch %[[A]] : tensor<128xf32>
// CHECK-NEXT: %[[PB:.*]] = zd.prefetch %[[B]] : tensor<128xf32>
// CHECK-NEXT: %[[GA:.*]] = zd.gather_param %[[PA]]
// CHECK: %[[GB:.*]] = zd.gather_param %[[PB]]
// NONE-LABEL: func.func @shards
// NONE-NOT: zd.prefetch
// NONE: space = "device"
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @shards(%x: tensor<1x16xf32>) -> tensor<1x16xf32> {
  %a = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "a", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %b = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "b", offset = 1024 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %ga = zd.gather_param %a : tensor<128xf32> -> tensor<16x16xf32>
  %h = zg.linear %x, %ga : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %ga : tensor<16x16xf32>
  %gb = zd.gather_param %b : tensor<128xf32> -> tensor<16x16xf32>
  %y = zg.linear %h, %gb : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gb : tensor<16x16xf32>
  return %y : tensor<1x16xf32>
}
}

// -----

// Tests that resident weights (single device) live on the host, are copied
// ahead of use and released after their last use.
// CHECK-LABEL: func.func @resident
// CHECK: %[[W:.*]] = zg.weight {{.*}}name = "w"{{.*}}zd.space = "host"
// CHECK: %[[P:.*]] = zd.prefetch %[[W]] : tensor<16x16xf32>
// CHECK: zg.linear %{{.*}}, %[[P]]
// CHECK: %[[Y:.*]] = zg.linear %{{.*}}, %[[P]]
// CHECK-NEXT: zd.release %[[P]] : tensor<16x16xf32>
// NONE-LABEL: func.func @resident
// NONE-NOT: zd.
// NONE: return
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @resident(%x: tensor<1x16xf32>) -> tensor<1x16xf32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %h = zg.linear %x, %w : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  %y = zg.linear %h, %w : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}
}
