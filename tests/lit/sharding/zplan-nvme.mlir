// RUN: zplan-opt --zplan-zero-train="stage=3 offload-optimizer=cpu mixed-precision=true" --zplan-offload="param=cpu" --zplan-nvme="param=true optimizer=true mixed-precision=true path=/nvme" %s | FileCheck %s --check-prefix=MP
// RUN: zplan-opt --zplan-zero-train="stage=3 offload-optimizer=cpu" --zplan-offload="param=cpu" --zplan-nvme="param=true optimizer=true path=/nvme" %s | FileCheck %s --check-prefix=FP
// RUN: zplan-opt --zplan-zero-train="stage=3 offload-optimizer=cpu mixed-precision=true" --zplan-nvme="optimizer=true mixed-precision=true path=/nvme" %s | FileCheck %s --check-prefix=OPT

// Tests that under mixed precision (--dtype bf16 / fp16) with the parameter
// shard and the optimizer state on NVMe, the fp32 master part, updated on the
// host in its staging buffer, goes back to its own file as it is and reaches
// the 16-bit parameter shard's file through a host cast (`zd.on_host`, so
// the memory plan puts its result in the host arena), nothing going up to the
// device for it.
// MP: module attributes {{{.*}}zplan.nvme_alignment = 4096 : i64, zplan.nvme_path = "/nvme"}
// MP-LABEL: func.func @offloaded
// MP: %[[P:.*]] = zd.weight_shard {{.*}}space = "nvme", zd.role = "param"} : tensor<5xf32>
// MP: %[[MASTER:.*]] = zd.weight_shard {{.*}}space = "nvme", zd.role = "master"} : tensor<5xf32>
// MP: %[[M:.*]] = zg.state {{.*}}kind = "moment1"{{.*}}zd.space = "nvme"
// MP: %[[V:.*]] = zg.state {{.*}}kind = "moment2"{{.*}}zd.space = "nvme"
// MP: %[[HM:.*]] = zd.nvme_read %[[MASTER]]
// MP: zg.adamw %[[HM]], %{{[^,]*}}, %[[HMM:[^,]*]], %[[HV:[^,]*]], {{.*}}zd.on_host
// MP-NEXT: zd.nvme_write %[[V]], %[[HV]]
// MP-NEXT: zd.nvme_write %[[M]], %[[HMM]]
// MP-NEXT: zd.nvme_write %[[MASTER]], %[[HM]]
// MP-NEXT: %[[N:.*]] = zg.cast %[[HM]] {zd.on_host} : (tensor<5xf32>) -> tensor<5xf32>
// MP-NEXT: zd.nvme_write %[[P]], %[[N]]
// MP-NOT: zd.prefetch %[[HM]]
// MP: return
// Must not fire: in fp32 the master part is the parameter's dtype, so the
// parameter's file takes the updated staging buffer itself.
// FP-LABEL: func.func @offloaded
// FP: %[[P:.*]] = zd.weight_shard {{.*}}space = "nvme", zd.role = "param"} : tensor<5xf32>
// FP: zg.adamw %[[HM:[^,]*]], {{.*}}zd.on_host
// FP-NOT: zg.cast
// FP: zd.nvme_write %[[P]], %[[HM]]
// Must not fire either: with the parameter shard on the device (optimizer
// offload only) the master part goes up and the device's converting assign
// narrows it, as --offload-optimizer cpu does.
// OPT-LABEL: func.func @offloaded
// OPT: %[[P:.*]] = zd.weight_shard {{.*}}space = "device", zd.role = "param"}
// OPT: zg.adamw %[[HM:[^,]*]], {{.*}}zd.on_host
// OPT-NOT: zd.on_host
// OPT: %[[UP:.*]] = zd.prefetch %[[HM]]
// OPT-NEXT: zg.assign %[[P]], %[[UP]]
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
