// RUN: zplan-opt --verify-diagnostics --zplan-schedule --zplan-memory-plan=host-mem=4096 %s

// Tests that a plan over its host budget fails, saying by how much and which
// flags would help.
// expected-error@+1 {{zplan-memory-plan: the host arena needs 8192 bytes (8.00 KiB) per rank but --host-mem is 4096 bytes (4.00 KiB): over by 4096 bytes (4.00 KiB); try more ranks}}
module attributes {zd.dp = 2 : i64} {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    %s = zd.weight_shard {name = "w", file = "m.data", offset = 0 : i64, length = 16384 : i64, source_shape = array<i64: 64, 64>, local_shape = array<i64: 64, 64>, dp = 2 : i64, space = "host"} : tensor<2048xf32>
    %p = zd.prefetch %s : tensor<2048xf32>
    %w = zd.gather_param %p : tensor<2048xf32> -> tensor<64x64xf32>
    %y = zg.linear %x, %w {alpha = 1.0 : f64, trans_w = false} : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    zd.release %w : tensor<64x64xf32>
    return %y : tensor<2x64xf32>
  }
}
