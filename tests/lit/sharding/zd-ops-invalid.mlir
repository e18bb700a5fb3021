// RUN: zplan-opt --split-input-file --verify-diagnostics %s

// Tests that a collective names a known mesh axis.
func.func @axis(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{axis must be "tp" or "dp", got "pp"}}
  %a = zd.all_reduce %x {axis = "pp"} : tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

// Tests that all_gather grows its dim by exactly the group size.
module attributes {zd.tp = 4 : i64} {
func.func @gather(%x: tensor<2x8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{dimension 1 of the result must be 8 x 4 (the tp group size), got 16}}
  %g = zd.all_gather %x {axis = "tp", dim = 1 : i64} : tensor<2x8xf32> -> tensor<2x16xf32>
  return %g : tensor<2x16xf32>
}
}

// -----

// Tests that without a mesh the gathered dim must at least be a multiple.
func.func @gather_nomesh(%x: tensor<2x8xf32>) -> tensor<2x12xf32> {
  // expected-error @+1 {{dimension 1 of the result (12) must be a multiple of that of the operand (8)}}
  %g = zd.all_gather %x {axis = "tp", dim = 1 : i64} : tensor<2x8xf32> -> tensor<2x12xf32>
  return %g : tensor<2x12xf32>
}

// -----

// Tests that an all_gather dim must be a dimension of the operand.
func.func @gather_dim(%x: tensor<2x8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{dim 2 is out of range for rank 2}}
  %g = zd.all_gather %x {axis = "tp", dim = 2 : i64} : tensor<2x8xf32> -> tensor<2x16xf32>
  return %g : tensor<2x16xf32>
}

// -----

// Tests that all_gather keeps every other dimension.
func.func @gather_other(%x: tensor<2x8xf32>) -> tensor<3x16xf32> {
  // expected-error @+1 {{dimension 0 differs between operand and result (2 vs 3)}}
  %g = zd.all_gather %x {axis = "tp", dim = 1 : i64} : tensor<2x8xf32> -> tensor<3x16xf32>
  return %g : tensor<3x16xf32>
}

// -----

// Tests that all_gather keeps the element type.
func.func @gather_type(%x: tensor<2x8xf32>) -> tensor<2x16xf16> {
  // expected-error @+1 {{operand and result element types differ}}
  %g = zd.all_gather %x {axis = "tp", dim = 1 : i64} : tensor<2x8xf32> -> tensor<2x16xf16>
  return %g : tensor<2x16xf16>
}

// -----

// Tests that all_gather keeps the rank.
func.func @gather_rank(%x: tensor<2x8xf32>) -> tensor<16xf32> {
  // expected-error @+1 {{operand and result ranks differ}}
  %g = zd.all_gather %x {axis = "tp", dim = 0 : i64} : tensor<2x8xf32> -> tensor<16xf32>
  return %g : tensor<16xf32>
}

// -----

// Tests that reduce_scatter shrinks its dim by exactly the group size.
module attributes {zd.dp = 2 : i64} {
func.func @scatter(%x: tensor<8x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{dimension 0 of the operand must be 2 x 2 (the dp group size), got 8}}
  %s = zd.reduce_scatter %x {axis = "dp", dim = 0 : i64} : tensor<8x4xf32> -> tensor<2x4xf32>
  return %s : tensor<2x4xf32>
}
}

// -----

// Tests that a broadcast root lies in its group.
module attributes {zd.dp = 2 : i64} {
func.func @root(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{root 2 is outside the dp group of size 2}}
  %b = zd.broadcast %x {axis = "dp", root = 2 : i64} : tensor<4xf32>
  return %b : tensor<4xf32>
}
}

// -----

// Tests that a broadcast root is not negative.
func.func @root_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{root must be non-negative, got -1}}
  %b = zd.broadcast %x {axis = "dp", root = -1 : i64} : tensor<4xf32>
  return %b : tensor<4xf32>
}

// -----

// Tests that a shard has ceil(local elements / dp) elements.
func.func @shard_size() -> tensor<100xf32> {
  // expected-error @+1 {{shard of a local tensor of 256 elements over dp = 3 must have 86 elements, got 100}}
  %s = zd.weight_shard {dp = 3 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "w", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<100xf32>
  return %s : tensor<100xf32>
}

// -----

// Tests that a ZeRO shard is flat.
func.func @shard_rank() -> tensor<8x16xf32> {
  // expected-error @+1 {{result must be a 1-D flat shard, got rank 2}}
  %s = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "w", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<8x16xf32>
  return %s : tensor<8x16xf32>
}

// -----

// Tests that a ZeRO shard lives on the device, the host or NVMe.
func.func @shard_space() -> tensor<128xf32> {
  // expected-error @+1 {{space must be "device", "host" or "nvme", got "disk"}}
  %s = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "w", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "disk"} : tensor<128xf32>
  return %s : tensor<128xf32>
}

// -----

// Tests that a ZeRO shard has a dp group of at least one rank.
func.func @shard_dp() -> tensor<128xf32> {
  // expected-error @+1 {{dp must be at least 1, got 0}}
  %s = zd.weight_shard {dp = 0 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "w", offset = 0 : i64, source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  return %s : tensor<128xf32>
}

// -----

// Tests that the source and local shapes of a shard have one rank.
func.func @shard_shapes() -> tensor<128xf32> {
  // expected-error @+1 {{source_shape and local_shape ranks differ}}
  %s = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "w", offset = 0 : i64, source_shape = array<i64: 256>, space = "device"} : tensor<128xf32>
  return %s : tensor<128xf32>
}

// -----

// Tests that a shard names its source (file or inline value).
func.func @shard_source() -> tensor<128xf32> {
  // expected-error @+1 {{needs either a file or an inline value}}
  %s = zd.weight_shard {dp = 2 : i64, local_shape = array<i64: 16, 16>, name = "w", source_shape = array<i64: 16, 16>, space = "device"} : tensor<128xf32>
  return %s : tensor<128xf32>
}

// -----

// Tests that a shard has one piece list per tp index.
module attributes {zd.tp = 2 : i64} {
func.func @shard_pieces() -> tensor<128xf32> {
  // expected-error @+1 {{pieces has 1 entries, expected one per tp index (2)}}
  %s = zd.weight_shard {dp = 2 : i64, file = "m.data", length = 1024 : i64, local_shape = array<i64: 16, 16>, name = "w", offset = 0 : i64, source_shape = array<i64: 16, 32>, pieces = [[]], space = "device"} : tensor<128xf32>
  return %s : tensor<128xf32>
}
}

// -----

// Tests that gather_param needs the shard size its result and dp imply.
module attributes {zd.dp = 2 : i64} {
func.func @gather_param(%s: tensor<100xf32>) -> tensor<16x16xf32> {
  // expected-error @+1 {{a result of 256 elements over dp = 2 needs a shard of 128 elements, got 100}}
  %g = zd.gather_param %s : tensor<100xf32> -> tensor<16x16xf32>
  return %g : tensor<16x16xf32>
}
}

// -----

// Tests that gather_param takes a flat shard.
func.func @gather_param_rank(%s: tensor<2x64xf32>) -> tensor<16x16xf32> {
  // expected-error @+1 {{operand must be a 1-D flat shard, got rank 2}}
  %g = zd.gather_param %s : tensor<2x64xf32> -> tensor<16x16xf32>
  return %g : tensor<16x16xf32>
}

// -----

// Tests that gather_param keeps the element type.
func.func @gather_param_type(%s: tensor<256xf16>) -> tensor<16x16xf32> {
  // expected-error @+1 {{shard and result element types differ}}
  %g = zd.gather_param %s : tensor<256xf16> -> tensor<16x16xf32>
  return %g : tensor<16x16xf32>
}

// -----

// Tests that only a gathered or prefetched value is released.
func.func @release(%x: tensor<4xf32>) {
  // expected-error @+1 {{operand must be the result of zd.gather_param or zd.prefetch}}
  zd.release %x : tensor<4xf32>
  return
}

// -----

// Tests that the sharding attribute knows only _, tp, tp:N and dp.
func.func @attr_axis() attributes {
  // expected-error @+1 {{expected '_', 'tp', 'tp:N' or 'dp', got 'pp'}}
  test.s = #zd.sharding<[pp]>} {
  return
}

// -----

// Tests that a tp:1 block count is refused (it means whole).
func.func @attr_count() attributes {
  // expected-error @+1 {{sharding dimension 0: a block count of 1 is a replicated dimension}}
  test.s = #zd.sharding<[tp:1]>} {
  return
}

// -----

// Tests that segments need a split dimension.
func.func @attr_segments() attributes {
  // expected-error @+1 {{segments need exactly one tp-split dimension}}
  test.s = #zd.sharding<[_, _], segments = [2, 2]>} {
  return
}

// -----

// Tests that segment sizes are positive.
func.func @attr_segment_size() attributes {
  // expected-error @+1 {{segment sizes must be positive}}
  test.s = #zd.sharding<[tp], segments = [2, 0]>} {
  return
}

// -----

// Tests that only partial and segments follow the dimensions.
func.func @attr_keyword() attributes {
  // expected-error @+1 {{expected 'partial' or 'segments'}}
  test.s = #zd.sharding<[tp], whole>} {
  return
}

// -----

// Tests that all_reduce names a known reduction.
func.func @reduction(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{reduction must be "sum", "max" or "min", got "prod"}}
  %a = zd.all_reduce %x {axis = "tp", reduction = "prod"} : tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

// Tests that reduce_scatter names a known reduction.
func.func @scatter_reduction(%x: tensor<8x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{reduction must be "sum", "max" or "min", got "mean"}}
  %s = zd.reduce_scatter %x {axis = "dp", dim = 0 : i64, reduction = "mean"} : tensor<8x4xf32> -> tensor<4x4xf32>
  return %s : tensor<4x4xf32>
}

// -----

// Tests that zd.nvme_write writes a value of its target's type.
func.func @nvme_write_type(%f: tensor<128xf32>, %h: tensor<64xf32>) {
  // expected-error @+1 {{value type 'tensor<64xf32>' differs from the target's 'tensor<128xf32>'}}
  zd.nvme_write %f, %h : tensor<128xf32>, tensor<64xf32>
  return
}
