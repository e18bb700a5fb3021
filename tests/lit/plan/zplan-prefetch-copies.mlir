// RUN: zplan-opt --split-input-file --zplan-offload=param=cpu --zplan-prefetch-gathers="window-bytes=0" %s | FileCheck %s --check-prefix=OLD
// RUN: zplan-opt --split-input-file --zplan-offload=param=cpu --zplan-prefetch-gathers="window-bytes=2048" %s | FileCheck %s --check-prefix=W2K
// RUN: zplan-opt --split-input-file --zplan-offload=param=cpu --zplan-prefetch-gathers="window-bytes=4096" %s | FileCheck %s --check-prefix=W4K
// RUN: zplan-opt --split-input-file --zplan-offload=param=cpu --zplan-prefetch-gathers="window-bytes=4096 max-live-bytes=3072" %s | FileCheck %s --check-prefix=CAP
// RUN: zplan-opt --split-input-file --zplan-offload=param=cpu --zplan-prefetch-gathers %s | FileCheck %s --check-prefix=AUTO
// RUN: zplan-opt --split-input-file --zplan-offload=param=cpu --zplan-prefetch-gathers="window-bytes=1024" %s | FileCheck %s --check-prefix=W1K
// RUN: zplan-opt --split-input-file --zplan-prefetch-gathers="window-bytes=4096" %s | FileCheck %s --check-prefix=PIN
// RUN: zplan-opt --split-input-file --zplan-offload=param=cpu --zplan-prefetch-gathers="window-bytes=2048" --zplan-schedule --zplan-memory-plan %s | FileCheck %s --check-prefix=PLAN

// The host -> device copies of --offload-param cpu (zd.prefetch on the copy
// stream) take the window rule of the ZeRO-3 gathers: a copy moves to the
// first reader of an earlier copy while the bytes copied from there up to
// its own reader, its own included, fit the window.

// Tests that window-bytes=0 keeps the offload pass's placement (each copy one
// parameter ahead: w1 at w0's reader, w2 at w1's, w3 at w2's), that 2048
// bytes (two parameters) send each copy one reader further (w2 at w0's
// reader, w3 at w1's), that 4096 bytes send every copy to the first reader,
// and that max-live-bytes=3072 (three parameters' device copies alive at
// once) holds w3 back until w0 is released, whatever the window.
// OLD-LABEL: func.func @chain
// OLD-SAME: zplan.copy_window_bytes = 0 : i64
// OLD: %[[P0:.*]] = zd.prefetch %{{.*}} : tensor<16x16xf32>
// OLD-NEXT: %[[P1:.*]] = zd.prefetch
// OLD-NEXT: %[[H0:.*]] = zg.linear %{{.*}}, %[[P0]]
// OLD-NEXT: zd.release %[[P0]]
// OLD-NEXT: %[[P2:.*]] = zd.prefetch
// OLD-NEXT: %[[H1:.*]] = zg.linear %[[H0]], %[[P1]]
// OLD-NEXT: zd.release %[[P1]]
// OLD-NEXT: %[[P3:.*]] = zd.prefetch
// OLD-NEXT: %[[H2:.*]] = zg.linear %[[H1]], %[[P2]]
// OLD-NEXT: zd.release %[[P2]]
// OLD-NEXT: zg.linear %[[H2]], %[[P3]]
// W2K-LABEL: func.func @chain
// W2K-SAME: zplan.copy_window_bytes = 2048 : i64
// W2K: %[[P0:.*]] = zd.prefetch
// W2K-NEXT: %[[P1:.*]] = zd.prefetch
// W2K-NEXT: %[[P2:.*]] = zd.prefetch
// W2K-NEXT: %[[H0:.*]] = zg.linear %{{.*}}, %[[P0]]
// W2K-NEXT: zd.release %[[P0]]
// W2K-NEXT: %[[P3:.*]] = zd.prefetch
// W2K-NEXT: zg.linear %[[H0]], %[[P1]]
// W2K-NEXT: zd.release %[[P1]]
// W2K-NEXT: zg.linear %{{.*}}, %[[P2]]
// W2K-NEXT: zd.release %[[P2]]
// W2K-NEXT: zg.linear %{{.*}}, %[[P3]]
// W4K-LABEL: func.func @chain
// W4K: zd.prefetch
// W4K-NEXT: zd.prefetch
// W4K-NEXT: zd.prefetch
// W4K-NEXT: zd.prefetch
// W4K-NEXT: zg.linear
// CAP-LABEL: func.func @chain
// CAP: %[[P0:.*]] = zd.prefetch
// CAP-NEXT: zd.prefetch
// CAP-NEXT: zd.prefetch
// CAP-NEXT: zg.linear %{{.*}}, %[[P0]]
// CAP-NEXT: zd.release %[[P0]]
// CAP-NEXT: zd.prefetch
// CAP-NEXT: zg.linear
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @chain(%x: tensor<1x16xf32>) -> tensor<1x16xf32> {
  %w0 = zg.weight {name = "w0", file = "m.data", offset = 0 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %w1 = zg.weight {name = "w1", file = "m.data", offset = 1024 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %w2 = zg.weight {name = "w2", file = "m.data", offset = 2048 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %w3 = zg.weight {name = "w3", file = "m.data", offset = 3072 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %h0 = zg.linear %x, %w0 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  %h1 = zg.linear %h0, %w1 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  %h2 = zg.linear %h1, %w2 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  %h3 = zg.linear %h2, %w3 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  return %h3 : tensor<1x16xf32>
}
}

// -----

// Tests the automatic window of the copies: one layer's parameters (the 12288
// bytes copied over the four attention ops: 3072) plus the largest copy (the
// 4096-byte head), 7168 bytes. Every layer weight can go to the first reader
// (the seven after a0 are 7168 bytes), and the head is issued at layer 2's
// first linear, more than a layer ahead of its use: the bytes copied from
// there to its reader (b2, a3, b3 and the head) are 7168. One parameter ahead
// (OLD) it waits until the last layer's attention.
// AUTO-LABEL: func.func @layers
// AUTO-SAME: zplan.copy_window_bytes = 7168 : i64
// AUTO-COUNT-8: zd.prefetch %{{.*}} : tensor<16x16xf32>
// AUTO-NEXT: zg.linear
// AUTO: zg.attention
// AUTO: zg.attention
// AUTO: %[[HEAD:.*]] = zd.prefetch %{{.*}} : tensor<16x64xf32>
// AUTO-NEXT: zg.linear
// AUTO-NEXT: zd.release
// AUTO-NEXT: zg.attention
// AUTO: zg.attention
// AUTO: zg.linear %{{.*}}, %[[HEAD]]
// OLD-LABEL: func.func @layers
// OLD: zg.attention
// OLD: zg.attention
// OLD: zg.attention
// OLD: zg.attention
// OLD-NEXT: zd.prefetch %{{.*}} : tensor<16x64xf32>
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @layers(%x: tensor<1x1x16x16xf32>) -> tensor<1x1x16x64xf32> {
  %a0 = zg.weight {name = "a0", file = "m.data", offset = 0 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %b0 = zg.weight {name = "b0", file = "m.data", offset = 1024 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %a1 = zg.weight {name = "a1", file = "m.data", offset = 2048 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %b1 = zg.weight {name = "b1", file = "m.data", offset = 3072 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %a2 = zg.weight {name = "a2", file = "m.data", offset = 4096 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %b2 = zg.weight {name = "b2", file = "m.data", offset = 5120 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %a3 = zg.weight {name = "a3", file = "m.data", offset = 6144 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %b3 = zg.weight {name = "b3", file = "m.data", offset = 7168 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %head = zg.weight {name = "head", file = "m.data", offset = 8192 : i64, length = 4096 : i64} : () -> tensor<16x64xf32>
  %q0 = zg.linear %x, %a0 : (tensor<1x1x16x16xf32>, tensor<16x16xf32>) -> tensor<1x1x16x16xf32>
  %t0 = zg.attention %q0, %q0, %q0 {scale = 2.5e-01 : f64, causal = true} : (tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<1x1x16x16xf32>
  %h0 = zg.linear %t0, %b0 : (tensor<1x1x16x16xf32>, tensor<16x16xf32>) -> tensor<1x1x16x16xf32>
  %q1 = zg.linear %h0, %a1 : (tensor<1x1x16x16xf32>, tensor<16x16xf32>) -> tensor<1x1x16x16xf32>
  %t1 = zg.attention %q1, %q1, %q1 {scale = 2.5e-01 : f64, causal = true} : (tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<1x1x16x16xf32>
  %h1 = zg.linear %t1, %b1 : (tensor<1x1x16x16xf32>, tensor<16x16xf32>) -> tensor<1x1x16x16xf32>
  %q2 = zg.linear %h1, %a2 : (tensor<1x1x16x16xf32>, tensor<16x16xf32>) -> tensor<1x1x16x16xf32>
  %t2 = zg.attention %q2, %q2, %q2 {scale = 2.5e-01 : f64, causal = true} : (tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<1x1x16x16xf32>
  %h2 = zg.linear %t2, %b2 : (tensor<1x1x16x16xf32>, tensor<16x16xf32>) -> tensor<1x1x16x16xf32>
  %q3 = zg.linear %h2, %a3 : (tensor<1x1x16x16xf32>, tensor<16x16xf32>) -> tensor<1x1x16x16xf32>
  %t3 = zg.attention %q3, %q3, %q3 {scale = 2.5e-01 : f64, causal = true} : (tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<1x1x16x16xf32>
  %h3 = zg.linear %t3, %b3 : (tensor<1x1x16x16xf32>, tensor<16x16xf32>) -> tensor<1x1x16x16xf32>
  %y = zg.linear %h3, %head : (tensor<1x1x16x16xf32>, tensor<16x64xf32>) -> tensor<1x1x16x64xf32>
  return %y : tensor<1x1x16x64xf32>
}
}

// -----

// Tests ZeRO-3 shards in host memory: the copies move first (512 bytes per
// shard: with 1024, c goes to a's gather and d to b's), then the gathers
// (1024 bytes per gathered parameter: b's gather goes to a's reader), each
// gather still after its own copy.
// W1K-LABEL: func.func @shards
// W1K: %[[CA:.*]] = zd.prefetch %{{.*}} : tensor<128xf32>
// W1K-NEXT: %[[CB:.*]] = zd.prefetch
// W1K-NEXT: %[[CC:.*]] = zd.prefetch
// W1K-NEXT: %[[GA:.*]] = zd.gather_param %[[CA]]
// W1K-NEXT: %[[GB:.*]] = zd.gather_param %[[CB]]
// W1K-NEXT: zg.linear %{{.*}}, %[[GA]]
// W1K-NEXT: zd.release %[[GA]]
// W1K-NEXT: %[[CD:.*]] = zd.prefetch
// W1K-NEXT: %[[GC:.*]] = zd.gather_param %[[CC]]
// W1K-NEXT: zg.linear %{{.*}}, %[[GB]]
// W1K-NEXT: zd.release %[[GB]]
// W1K-NEXT: %[[GD:.*]] = zd.gather_param %[[CD]]
// W1K-NEXT: zg.linear %{{.*}}, %[[GC]]
// OLD-LABEL: func.func @shards
// OLD: zd.prefetch
// OLD-NEXT: zd.prefetch
// OLD-NEXT: zd.gather_param
// OLD-NEXT: zg.linear
// OLD-NEXT: zd.release
// OLD-NEXT: zd.prefetch
// OLD-NEXT: zd.gather_param
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @shards(%x: tensor<1x16xf32>) -> tensor<1x16xf32> {
  %sa = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "a", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %sb = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "b", offset = 1024 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %sc = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "c", offset = 2048 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %sd = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "d", offset = 3072 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  %ga = zd.gather_param %sa : tensor<128xf32> -> tensor<16x16xf32>
  %h1 = zg.linear %x, %ga : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %ga : tensor<16x16xf32>
  %gb = zd.gather_param %sb : tensor<128xf32> -> tensor<16x16xf32>
  %h2 = zg.linear %h1, %gb : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gb : tensor<16x16xf32>
  %gc = zd.gather_param %sc : tensor<128xf32> -> tensor<16x16xf32>
  %h3 = zg.linear %h2, %gc : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gc : tensor<16x16xf32>
  %gd = zd.gather_param %sd : tensor<128xf32> -> tensor<16x16xf32>
  %h4 = zg.linear %h3, %gd : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gd : tensor<16x16xf32>
  return %h4 : tensor<1x16xf32>
}
}

// -----

// Tests what a copy must NOT move above, with any window: a write to the shard
// it reads (the training step updates shards in place: b's copy stays after
// the zg.assign), and a copy that is not a parameter's (an optimizer master
// part, which the optimizer places) stays where it is. The input is as
// --zplan-offload leaves it (the PIN run has no offload pass).
// PIN-LABEL: func.func @pinned
// PIN: zg.assign %[[SB:.*]], %{{.*}} :
// PIN-NEXT: %[[PB:.*]] = zd.prefetch %[[SB]]
// PIN-NEXT: zd.gather_param %[[PB]]
// PIN-NEXT: zg.linear
// PIN-NEXT: zd.release
// PIN-NEXT: zd.prefetch
// PIN-NEXT: zd.gather_param
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @pinned(%x: tensor<1x16xf32>, %u: tensor<128xf32>) -> tensor<1x16xf32> {
  %sa = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "a", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "host"} : tensor<128xf32>
  %sb = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "b", offset = 1024 : i64, source_shape = array<i64: 16, 16>, space = "host"} : tensor<128xf32>
  %m = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "c", offset = 2048 : i64, source_shape = array<i64: 16, 16>, space = "host", zd.role = "master"} : tensor<128xf32>
  %pa = zd.prefetch %sa : tensor<128xf32>
  %ga = zd.gather_param %pa : tensor<128xf32> -> tensor<16x16xf32>
  %h1 = zg.linear %x, %ga : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %ga : tensor<16x16xf32>
  zg.assign %sb, %u : (tensor<128xf32>, tensor<128xf32>) -> ()
  %pb = zd.prefetch %sb : tensor<128xf32>
  %gb = zd.gather_param %pb : tensor<128xf32> -> tensor<16x16xf32>
  %h2 = zg.linear %h1, %gb : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gb : tensor<16x16xf32>
  %pm = zd.prefetch %m : tensor<128xf32>
  %gm = zd.gather_param %pm : tensor<128xf32> -> tensor<16x16xf32>
  %h3 = zg.linear %h2, %gm : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  zd.release %gm : tensor<16x16xf32>
  return %h3 : tensor<1x16xf32>
}
}

// -----

// Tests that the memory plan sees the longer lives and orders the reuse: with
// 2048 bytes, w3's copy is issued at w0's reader and reuses w0's bytes, so it
// waits for w0's release on the compute stream (event), while w1 and w2 do not
// wait for any compute.
// PLAN-LABEL: func.func @chain
// PLAN: zd.prefetch {{.*}}zplan.signal = 0 : i64, zplan.stream = "copy"}
// PLAN-NEXT: zd.prefetch {{.*}}zplan.stream = "copy"}
// PLAN-NEXT: zd.prefetch {{.*}}zplan.stream = "copy"}
// PLAN-NEXT: zg.linear {{.*}}zplan.stream = "compute", zplan.waits = array<i64: 0>}
// PLAN-NEXT: zd.release {{.*}}zplan.signal = [[REL:[0-9]+]] : i64, zplan.stream = "compute"}
// PLAN-NEXT: zd.prefetch {{.*}}zplan.stream = "copy", zplan.waits = array<i64: [[REL]]>}
module attributes {zd.tp = 1 : i64, zd.dp = 1 : i64} {
func.func @chain(%x: tensor<1x16xf32>) -> tensor<1x16xf32> {
  %w0 = zg.weight {name = "w0", file = "m.data", offset = 0 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %w1 = zg.weight {name = "w1", file = "m.data", offset = 1024 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %w2 = zg.weight {name = "w2", file = "m.data", offset = 2048 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %w3 = zg.weight {name = "w3", file = "m.data", offset = 3072 : i64, length = 1024 : i64} : () -> tensor<16x16xf32>
  %h0 = zg.linear %x, %w0 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  %h1 = zg.linear %h0, %w1 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  %h2 = zg.linear %h1, %w2 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  %h3 = zg.linear %h2, %w3 : (tensor<1x16xf32>, tensor<16x16xf32>) -> tensor<1x16xf32>
  return %h3 : tensor<1x16xf32>
}
}
