// RUN: zplan-opt --split-input-file --zplan-zero-train="stage=0" %s | FileCheck %s --check-prefix=Z0
// RUN: zplan-opt --split-input-file --zplan-zero-train="stage=1" %s | FileCheck %s --check-prefix=Z1
// RUN: zplan-opt --split-input-file --zplan-zero-train="stage=2" %s | FileCheck %s --check-prefix=Z2
// RUN: zplan-opt --split-input-file --zplan-zero-train="stage=3" %s | FileCheck %s --check-prefix=Z3

// Tests that each stage over dp = 2 reduces the gradient of a 3x3 parameter
// (9 elements: shards of 5, one element of padding) where and how the stage
// says, partitions the moments in every program that names them, and
// averages the loss over dp.
// Z0-LABEL: func.func @init
// Z0: zg.state {{.*}}name = "w.m"{{.*}} -> tensor<3x3xf32>
// Z0-LABEL: func.func @train_step
// Z0: %[[G:.*]] = zg.mul %{{.*}}, %{{.*}} {zplan.test = "grad"}
// Z0-NEXT: %[[R:.*]] = zd.all_reduce %[[G]] {axis = "dp"
// Z0: %[[M:.*]] = zg.mul %[[R]]
// Z0: zg.sum_squares %[[M]]
// Z0-NOT: zd.all_reduce {{.*}}tensor<f32>
// Z0: zg.sqrt
// Z0: zg.adamw %{{.*}}, %[[M]]
// Z0: %[[L:.*]] = zd.all_reduce %{{.*}} {axis = "dp"{{.*}}: tensor<f32>
// Z0: %[[LM:.*]] = zg.mul %[[L]]
// Z0: return %[[LM]]
// Z1-LABEL: func.func @init
// Z1: zg.state {{.*}}name = "w.m"{{.*}} -> tensor<5xf32>
// Z1: zg.constant {value = dense<0.000000e+00> : tensor<5xf32>}
// Z1-LABEL: func.func @train_step
// Z1: zd.weight_shard {{.*}}name = "w"{{.*}} : tensor<5xf32>
// Z1: zg.mul %{{.*}}, %{{.*}} {zplan.test = "grad"}
// Z1-NEXT: zg.neg
// Z1: zg.reshape {{.*}} -> tensor<9xf32>
// Z1: zg.concat
// Z1: zd.reduce_scatter {{.*}}axis = "dp"{{.*}} -> tensor<5xf32>
// Z1: zg.sum_squares {{.*}} -> tensor<f32>
// Z1: %[[N:.*]] = zd.all_reduce
// Z1-NEXT: zg.sqrt %[[N]]
// Z1: zg.adamw {{.*}} : (tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>
// Z1-NEXT: %[[W:.*]] = zd.gather_param {{.*}} : tensor<5xf32> -> tensor<3x3xf32>
// Z1-NEXT: zg.assign %{{.*}}, %[[W]]
// Z1-NEXT: zd.release %[[W]]
// Z2-LABEL: func.func @train_step
// Z2: zg.mul %{{.*}}, %{{.*}} {zplan.test = "grad"}
// Z2-NEXT: zg.reshape
// Z2-NEXT: zg.constant
// Z2-NEXT: zg.concat
// Z2-NEXT: zd.reduce_scatter
// Z2: zg.neg
// Z3-LABEL: func.func @train_step
// Z3-NOT: zg.weight
// Z3: %[[S:.*]] = zd.weight_shard {{.*}}name = "w"{{.*}} : tensor<5xf32>
// Z3: %[[F:.*]] = zd.gather_param %[[S]]
// Z3-NEXT: zg.matmul %{{.*}}, %[[F]]
// Z3-NEXT: zd.release %[[F]]
// Z3: %[[B:.*]] = zd.gather_param %[[S]]
// Z3-NEXT: zg.matmul %{{.*}}, %[[B]]
// Z3-NEXT: zd.release %[[B]]
// Z3: zg.adamw %[[S]]
// Z3-NOT: zg.assign
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @init() {
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<3x3xf32>
  %z = zg.constant {value = dense<0.0> : tensor<3x3xf32>} : () -> tensor<3x3xf32>
  zg.assign %m, %z : (tensor<3x3xf32>, tensor<3x3xf32>) -> ()
  return
}
func.func @train_step(%x: tensor<1x3xf32>, %lr: tensor<f32> {zg.name = "lr", zg.default = 1.0e-3 : f64},
                      %step: tensor<i64> {zg.name = "step", zg.default = 1 : i64}) -> (tensor<f32> {zg.name = "loss"}) {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 36 : i64} : () -> tensor<3x3xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<3x3xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<3x3xf32>
  %y = zg.matmul %x, %w : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
  %loss = zg.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<1x3xf32>) -> tensor<f32>
  %dy = zg.matmul %y, %w : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
  %xt = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<1x3xf32>) -> tensor<3x1xf32>
  %g0 = zg.matmul %xt, %dy : (tensor<3x1xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  %g = zg.mul %g0, %g0 {zplan.test = "grad"} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %other = zg.neg %dy : (tensor<1x3xf32>) -> tensor<1x3xf32>
  %ss = zg.sum_squares %g : (tensor<3x3xf32>) -> tensor<f32>
  %n = zg.sqrt %ss : (tensor<f32>) -> tensor<f32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  zg.adamw %w, %g, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %loss : tensor<f32>
}
}

// -----

// Tests that a module without zg.adamw is left alone (the inference ZeRO
// pass owns it).
// Z0-LABEL: func.func @forward
// Z0-NOT: zd.
// Z0: return
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @forward(%x: tensor<1x3xf32>) -> tensor<1x3xf32> {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 36 : i64} : () -> tensor<3x3xf32>
  %y = zg.matmul %x, %w : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
  return %y : tensor<1x3xf32>
}
}

// -----

// Tests that optimizer offload at stage 2 puts the master part and both
// moments in host memory, evicts the gradient part as soon as its reduction
// has made it (so the copy overlaps the rest of the backward), runs the
// update on the host and brings the part back before gathering it.
// RUN: zplan-opt --split-input-file --zplan-zero-train="stage=2 offload-optimizer=cpu" %s | FileCheck %s --check-prefix=OFF
// RUN: zplan-opt --split-input-file --zplan-zero-train="stage=3 offload-optimizer=cpu" %s | FileCheck %s --check-prefix=OFF3
// OFF-LABEL: func.func @offloaded
// OFF: %[[MASTER:.*]] = zd.weight_shard {{.*}}space = "host"{{.*}} : tensor<5xf32>
// OFF: zg.state {{.*}}name = "w.m"{{.*}}zd.space = "host"{{.*}} -> tensor<5xf32>
// OFF: %[[RS:.*]] = zd.reduce_scatter
// OFF: %[[G:.*]] = zg.mul %[[RS]]
// OFF-NEXT: %[[H:.*]] = zd.evict %[[G]]
// OFF: zg.adamw %[[MASTER]], %[[H]], {{.*}}zd.on_host
// OFF-NEXT: %[[UP:.*]] = zd.prefetch %[[MASTER]]
// OFF-NEXT: %[[W:.*]] = zd.gather_param %[[UP]] : tensor<5xf32> -> tensor<3x3xf32>
// OFF-NEXT: zg.assign %{{.*}}, %[[W]]
// OFF-NEXT: zd.release %[[W]]
// OFF3-LABEL: func.func @offloaded
// OFF3: %[[P:.*]] = zd.weight_shard {{.*}}space = "device"{{.*}} : tensor<5xf32>
// OFF3: %[[MASTER:.*]] = zd.weight_shard {{.*}}space = "host"{{.*}} : tensor<5xf32>
// OFF3: zg.adamw %[[MASTER]]
// OFF3-NEXT: %[[UP:.*]] = zd.prefetch %[[MASTER]]
// OFF3-NEXT: zg.assign %[[P]], %[[UP]] : (tensor<5xf32>, tensor<5xf32>)
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @offloaded(%x: tensor<1x3xf32>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<f32> {zg.name = "loss"}) {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 36 : i64} : () -> tensor<3x3xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<3x3xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<3x3xf32>
  %y = zg.matmul %x, %w : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
  %loss = zg.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<1x3xf32>) -> tensor<f32>
  %xt = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<1x3xf32>) -> tensor<3x1xf32>
  %g = zg.matmul %xt, %y : (tensor<3x1xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  zg.adamw %w, %g, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %loss : tensor<f32>
}
}

// -----

// Tests that with gradient accumulation (@micro_step accumulates, the update
// is in @optimizer_step) stage 3 gathers the same shard in the micro-step,
// forward and backward windows apart, and the program without updates gets
// no gradient reduction of its own.
// Z3-LABEL: func.func @micro_step
// Z3-NOT: zg.weight
// Z3: %[[S:.*]] = zd.weight_shard {{.*}}name = "w"{{.*}}zd.role = "param"{{.*}} : tensor<5xf32>
// Z3: %[[F:.*]] = zd.gather_param %[[S]]
// Z3-NEXT: zg.matmul %{{.*}}, %[[F]]
// Z3-NEXT: zd.release %[[F]]
// Z3: %[[B:.*]] = zd.gather_param %[[S]]
// Z3-NEXT: zg.matmul %{{.*}}, %[[B]]
// Z3-NEXT: zd.release %[[B]]
// Z3-NOT: zd.reduce_scatter
// Z3: zg.accumulate
// Z3-LABEL: func.func @optimizer_step
// Z3: zd.weight_shard {{.*}}name = "w"{{.*}}zd.role = "param"
// Z3: zd.reduce_scatter
// Z3: zg.adamw
module attributes {zd.tp = 1 : i64, zd.dp = 2 : i64} {
func.func @micro_step(%x: tensor<1x3xf32>) -> (tensor<f32> {zg.name = "loss"}) {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 36 : i64} : () -> tensor<3x3xf32>
  %acc = zg.state {init = "zeros", kind = "grad", name = "w.grad", of = "w"} : () -> tensor<3x3xf32>
  %y = zg.matmul %x, %w : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
  %loss = zg.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<1x3xf32>) -> tensor<f32>
  %dy = zg.matmul %y, %w : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
  %xt = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<1x3xf32>) -> tensor<3x1xf32>
  %g = zg.matmul %xt, %dy : (tensor<3x1xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  zg.accumulate %acc, %g : (tensor<3x3xf32>, tensor<3x3xf32>) -> ()
  return %loss : tensor<f32>
}
func.func @optimizer_step(%lr: tensor<f32>, %step: tensor<i64>) -> (tensor<f32> {zg.name = "grad_norm"}) {
  %w = zg.weight {name = "w", file = "m.data", offset = 0 : i64, length = 36 : i64} : () -> tensor<3x3xf32>
  %acc = zg.state {init = "zeros", kind = "grad", name = "w.grad", of = "w"} : () -> tensor<3x3xf32>
  %m = zg.state {init = "zeros", kind = "moment1", name = "w.m", of = "w"} : () -> tensor<3x3xf32>
  %v = zg.state {init = "zeros", kind = "moment2", name = "w.v", of = "w"} : () -> tensor<3x3xf32>
  %half = zg.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %g = zg.mul %acc, %half : (tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xf32>
  %ss = zg.sum_squares %g : (tensor<3x3xf32>) -> tensor<f32>
  %n = zg.sqrt %ss : (tensor<f32>) -> tensor<f32>
  %one = zg.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  zg.adamw %w, %g, %m, %v, %lr, %step, %one {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> ()
  return %n : tensor<f32>
}
}
