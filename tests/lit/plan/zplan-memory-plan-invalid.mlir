// RUN: zplan-opt --split-input-file --verify-diagnostics --zplan-schedule --zplan-memory-plan=gpu-mem=1000 %s

// Tests that a plan over its device budget fails, saying by how much and which
// flags would help.
// expected-error@+1 {{zplan-memory-plan: the device arena needs 1536 bytes (1.50 KiB) per rank but --gpu-mem is 1000 bytes (1000.00 B): over by 536 bytes (536.00 B); try --zero 3 (with dp > 1), --offload-param cpu, a larger --tp or a smaller --batch}}
module {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    %a = zg.neg %x : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %b = zg.neg %a : (tensor<2x64xf32>) -> tensor<2x64xf32>
    return %b : tensor<2x64xf32>
  }
}

// -----

// Tests that a use of a gathered parameter after its zd.release is refused:
// the release ends the storage's life.
module attributes {zd.dp = 2 : i64} {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    %s = zd.weight_shard {name = "w", file = "m.data", offset = 0 : i64, length = 512 : i64, source_shape = array<i64: 2, 64>, local_shape = array<i64: 2, 64>, dp = 2 : i64, space = "device"} : tensor<64xf32>
    %w = zd.gather_param %s : tensor<64xf32> -> tensor<2x64xf32>
    // expected-error@+1 {{zplan-memory-plan: the released parameter is used after its zd.release}}
    zd.release %w : tensor<2x64xf32>
    %y = zg.add %x, %w : (tensor<2x64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
    return %y : tensor<2x64xf32>
  }
}

// -----

// Tests that a graph output must be computed: returning an input unchanged
// leaves no instruction to write the output binding.
module {
  func.func @main(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
    // expected-error@+1 {{zplan-memory-plan: a graph output must be computed by an instruction}}
    return %x : tensor<2x64xf32>
  }
}

// -----

// Tests that an element type without a plan dtype is named.
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xi8> {
    // expected-error@+1 {{zplan-memory-plan: element type 'i8' has no plan dtype (float, i1, i32, i64)}}
    %c = zg.cast %x : (tensor<4xf32>) -> tensor<4xi8>
    return %c : tensor<4xi8>
  }
}
