//===- Passes.td - sharding passes ---------------------------*- tablegen -*-===//
//
// Tensor parallelism (propagation, partition), ZeRO and offload passes. They
// work on a module whose functions hold zg ops; the mesh is read from the
// module attributes `zd.tp` / `zd.dp` (docs/dist-contract.md).
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_SHARDING_PASSES_TD
#define ZPLAN_COMPILER_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def ZplanSetMesh : Pass<"zplan-set-mesh", "mlir::ModuleOp"> {
  let summary = "Record the device mesh (tp x dp) on the module";
  let description = [{
    Sets the module attributes `zd.tp` and `zd.dp` that every later sharding
    pass reads. Both must be at least 1.

    ```mlir
    // --zplan-set-mesh="tp=2 dp=2"
    module attributes {zd.dp = 2 : i64, zd.tp = 2 : i64} { ... }
    ```
  }];
  let options = [
    Option<"tp", "tp", "int64_t", "1", "tensor-parallel group size">,
    Option<"dp", "dp", "int64_t", "1", "data-parallel group size">,
  ];
  let dependentDialects = ["zplan::dist::ZdDialect"];
}

def ZplanTpPropagate : Pass<"zplan-tp-propagate", "mlir::ModuleOp"> {
  let summary = "Seed Megatron shardings on weights and propagate them";
  let description = [{
    An analysis that annotates, without changing any type: every op gets
    `zd.result_shardings` (one `#zd.sharding` per result) and, where it needs
    an operand in another sharding than its producer gives,
    `zd.operand_shardings`. Seeds are structural: a linear whose input is
    replicated is split by output columns (heads found through the reshape
    that follows; fused QKV split per segment; GQA K/V heads replicated on
    the ranks whose query heads use them when tp exceeds their count); a
    linear whose input is split on its last dimension is split by input rows
    (its result is a partial sum); the token embedding and the LM head are
    vocabulary-parallel (padded to a multiple of tp). Per-op rules carry the
    splits through elementwise ops, reshapes, transposes, matmuls, norms and
    attention. Each zg op states its rule through TpShardingOpInterface
    (dialects/graph/GraphTpRules.cpp); an op without one is an error when a
    split operand reaches it, naming the op.

    ```mlir
    %y = zg.linear %x, %w : ... -> tensor<2x16x256xf32>
    // becomes, at tp = 2,
    %y = zg.linear %x, %w {zd.result_shardings = [#zd.sharding<[_, _, tp]>]}
    ```
  }];
  let statistics = [
    Statistic<"numColumnSplit", "column-split", "linears split by columns">,
    Statistic<"numRowSplit", "row-split", "linears split by rows">,
    Statistic<"numVocabSplit", "vocab-split",
              "vocabulary-parallel embeddings and LM heads">,
    Statistic<"numReshards", "reshards",
              "operands that need a sharding their producer does not give">,
  ];
  let dependentDialects = ["zplan::dist::ZdDialect"];
}

def ZplanTpPartition : Pass<"zplan-tp-partition", "mlir::ModuleOp"> {
  let summary = "Rewrite to rank-local shapes and insert tp collectives";
  let description = [{
    Consumes the annotations of `--zplan-tp-propagate`: every type becomes
    rank-local, a partial sum gets `zd.all_reduce` (a row-parallel linear's
    bias is added after it), a vocabulary-parallel embedding gets
    `zd.vocab_stride` and an all_reduce, a split value that a consumer needs
    whole gets `zd.all_gather` (and a `zg.slice` dropping vocabulary padding),
    and weights get `zd.source_shape` and `zd.pieces`. With
    keep-logits-sharded, function results stay split. Afterwards every op is
    verified and no annotation remains.

    ```mlir
    %y = zg.linear %x, %w {...[_, _, partial]...} : ... -> tensor<2x16x64xf32>
    // becomes
    %p = zg.linear %x, %w : (tensor<2x16x128xf32>, tensor<128x64xf32>) -> ...
    %y = zd.all_reduce %p {axis = "tp"} : tensor<2x16x64xf32>
    ```
  }];
  let options = [
    Option<"keepLogitsSharded", "keep-logits-sharded", "bool", "false",
           "leave tp-split function results split (no final all_gather)">,
  ];
  let statistics = [
    Statistic<"numAllReduce", "all-reduce", "all_reduce ops inserted">,
    Statistic<"numAllGather", "all-gather", "all_gather ops inserted">,
    Statistic<"numWeightsSplit", "weights-split", "weights made tp-local">,
  ];
  let dependentDialects = ["zplan::dist::ZdDialect"];
}

def ZplanZero : Pass<"zplan-zero", "mlir::ModuleOp"> {
  let summary = "ZeRO over dp: batch split, parameter shards, gather/release";
  let description = [{
    With dp > 1 the batch dimension of every function argument is divided by
    dp. Stage 3 replaces each parameter of at least persist-threshold bytes by
    `zd.weight_shard` (this dp rank's flat part), gathers it with
    `zd.gather_param` before its first use and releases it after its last
    use. A gather is moved earlier (prefetch) while the bytes gathered ahead
    stay within prefetch-bytes and the gathered bytes alive within
    max-live-bytes (0 = no cap). Stages 0-2 leave inference parameters
    replicated.

    ```mlir
    %w = zg.weight {...} : () -> tensor<64x64xf32>
    // becomes, at dp = 2,
    %s = zd.weight_shard {..., dp = 2 : i64, space = "device"} : tensor<2048xf32>
    %w = zd.gather_param %s : tensor<2048xf32> -> tensor<64x64xf32>
    ...
    zd.release %w : tensor<64x64xf32>
    ```
  }];
  let options = [
    Option<"stage", "stage", "int64_t", "0", "ZeRO stage (0-3)">,
    Option<"persistThreshold", "persist-threshold", "int64_t", "0",
           "parameters below this many bytes stay whole on every rank">,
    Option<"prefetchBytes", "prefetch-bytes", "int64_t", "0",
           "bytes of parameters gathered ahead of their first use">,
    Option<"maxLiveBytes", "max-live-bytes", "int64_t", "0",
           "cap on gathered parameter bytes alive at once (0 = none)">,
  ];
  let statistics = [
    Statistic<"numSharded", "sharded", "parameters partitioned over dp">,
    Statistic<"numPersistent", "persistent",
              "parameters kept whole under persist-threshold">,
    Statistic<"numHoisted", "hoisted", "gathers moved ahead of first use">,
  ];
  let dependentDialects = ["zplan::dist::ZdDialect"];
}

def ZplanZeroTrain : Pass<"zplan-zero-train", "mlir::ModuleOp"> {
  let summary = "ZeRO stages 0-3 for a training step over the dp axis";
  let description = [{
    Works on every program holding `zg.adamw` (the train step built by
    --zplan-train-step), at dp > 1; each rank runs the step on its own rows,
    so each reduction below is a sum over dp times 1/dp. Stage 0 all-reduces
    each gradient right after backward produces it. Stages 1-2 shrink both
    moments to this rank's flat part (in every program that names them),
    reduce-scatter the flat, zero-padded gradient (stage 1 once backward is
    over, stage 2 right after the gradient exists), update a
    `zd.weight_shard` master part and gather it back into the parameter
    (`zd.gather_param` + `zg.assign`). Stage 3 also replaces each parameter
    of at least persist-threshold bytes by its shard: gathered before its
    forward uses and again before its backward uses, released after each,
    updated in place. Once gradients are partitioned the squared norm is
    all-reduced before its square root. The loss result is averaged over dp.
    With offload-optimizer=cpu (also at dp = 1) the master part and both
    moments live in host memory: the gradient part is evicted to the host,
    zg.adamw (marked `zd.on_host`) updates there, and the updated part is
    prefetched back into the parameter (gathered over dp) or its shard.
    With mixed-precision (--dtype bf16) every update gets an fp32 master part
    (at dp = 1 too; stage 3 beside the bf16 shard), each gradient is cast to
    fp32 before its reduction (the chain marked `zplan.own_dtype`), and the
    master is narrowed to bf16 before it is gathered or assigned back; stage
    0 over dp > 1 is refused.

    ```mlir
    %g = ... // gradient of %w, tensor<64x64xf32>
    zg.adamw %w, %g, %m, %v, %lr, %step, %scale ...
    // becomes, at stage 2 and dp = 2,
    %f = zg.reshape %g : tensor<64x64xf32> -> tensor<4096xf32>
    %p = zd.reduce_scatter %f {axis = "dp", dim = 0} : ... -> tensor<2048xf32>
    %s = zg.mul %p, %half
    zg.adamw %master, %s, %m, %v, %lr, %step, %scale ...
    %w2 = zd.gather_param %master : tensor<2048xf32> -> tensor<64x64xf32>
    zg.assign %w, %w2
    zd.release %w2
    ```
  }];
  let options = [
    Option<"stage", "stage", "int64_t", "0", "ZeRO stage (0-3)">,
    Option<"persistThreshold", "persist-threshold", "int64_t", "0",
           "stage 3: parameters below this many bytes stay whole">,
    Option<"offloadOptimizer", "offload-optimizer", "std::string",
           "\"none\"",
           "none, or cpu: master parts, moments and the update on the host">,
    Option<"mixedPrecision", "mixed-precision", "bool", "false",
           "bf16 parameters: fp32 master parts (also at stage 0 and dp = 1) "
           "and fp32 gradient reduction">,
  ];
  let statistics = [
    Statistic<"numReduced", "reduced", "gradients all-reduced whole">,
    Statistic<"numPartitioned", "partitioned",
              "parameters whose optimizer state is partitioned">,
    Statistic<"numSharded", "sharded", "parameters partitioned (stage 3)">,
  ];
  let dependentDialects = ["zplan::dist::ZdDialect", "zplan::graph::GraphDialect"];
}

def ZplanOffload : Pass<"zplan-offload", "mlir::ModuleOp"> {
  let summary = "Keep parameters in host memory, prefetch them ahead of use";
  let description = [{
    With param=cpu every ZeRO shard gets space = "host" and every resident
    weight `zd.space = "host"`; a `zd.prefetch` (host -> device on the copy
    stream) is placed one parameter ahead of the use (before the previous
    parameter's gather or use). A prefetched resident weight is released
    after its last use. param=none changes nothing. --zplan-prefetch-gathers
    later moves the copies a window of parameter bytes further ahead.

    ```mlir
    %w = zd.gather_param %s : ...
    // becomes
    %d = zd.prefetch %s : tensor<2048xf32>
    %w = zd.gather_param %d : ...
    ```
  }];
  let options = [
    Option<"param", "param", "std::string", "\"none\"",
           "where parameters live: none (device) or cpu (pinned host)">,
  ];
  let statistics = [
    Statistic<"numPrefetch", "prefetches", "zd.prefetch ops inserted">,
  ];
  let dependentDialects = ["zplan::dist::ZdDialect"];
}

def ZplanNvme : Pass<"zplan-nvme", "mlir::ModuleOp"> {
  let summary = "Keep offloaded parameters or optimizer state in NVMe files";
  let description = [{
    ZeRO-Infinity (docs/nvme.md). Runs after --zplan-zero-train and
    --zplan-offload have placed the offloaded tensors in host memory. With
    param=true every host-placed parameter (a ZeRO shard that is not a master
    part, a resident weight) moves to space "nvme"; with optimizer=true every
    host-placed master part and optimizer moment does. Then, in every
    program, each use of an nvme tensor reads it into a host staging buffer
    first (`zd.nvme_read`, issued where the previous NVMe-backed use runs, so
    that one read is in flight while the previous buffer is consumed: two
    staging buffers per stream of uses), a device use gets a `zd.prefetch` of
    the staging buffer, and each write (`zg.assign`, the host `zg.adamw`)
    goes to the staging buffer and back to the file (`zd.nvme_write`). A
    value written to the file and read right after is taken from the staging
    buffer instead of the disk. Under mixed-precision (--dtype bf16 / fp16)
    the master parts and moments stay fp32 in their files and the parameter
    shards are 16-bit: the updated master part is narrowed by a `zg.cast`
    marked `zd.on_host` (a host buffer, planned in the host arena) and that
    16-bit buffer goes to the parameter's file, as ZeRO-Infinity copies its
    fp32 partition into the 16-bit one on the host before swapping it out.
    The module gets `zplan.nvme_path` and
    `zplan.nvme_alignment`, by which the memory plan rounds every host and
    nvme buffer to the direct-I/O alignment.

    ```mlir
    %s = zd.weight_shard {..., space = "host"} : tensor<2048xf32>
    %d = zd.prefetch %s : tensor<2048xf32>
    // becomes
    %s = zd.weight_shard {..., space = "nvme"} : tensor<2048xf32>
    %h = zd.nvme_read %s : tensor<2048xf32>
    %d = zd.prefetch %h : tensor<2048xf32>
    ```
  }];
  let options = [
    Option<"param", "param", "bool", "false",
           "move host-placed parameters to NVMe">,
    Option<"optimizer", "optimizer", "bool", "false",
           "move host-placed master parts and moments to NVMe">,
    Option<"path", "path", "std::string", "\"\"",
           "the folder of the NVMe files (recorded in the plan)">,
    Option<"alignment", "alignment", "int64_t", "4096",
           "direct-I/O alignment of offsets, sizes and staging buffers">,
    Option<"mixedPrecision", "mixed-precision", "bool", "false",
           "16-bit parameters beside fp32 master parts: an updated master "
           "part is narrowed on the host before it goes to a parameter's "
           "file">,
  ];
  let statistics = [
    Statistic<"numOnNvme", "on-nvme", "tensors placed on NVMe">,
    Statistic<"numNarrowed", "narrowed",
              "host casts of master parts into 16-bit parameter files">,
    Statistic<"numReads", "reads", "zd.nvme_read ops inserted">,
    Statistic<"numWrites", "writes", "zd.nvme_write ops inserted">,
  ];
  let dependentDialects = ["zplan::dist::ZdDialect", "zplan::graph::GraphDialect"];
}

#endif // ZPLAN_COMPILER_SHARDING_PASSES_TD
