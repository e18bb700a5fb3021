//===- Passes.td - Planner passes --------------------------*- tablegen -*-===//
//
// The last phases of zplan before emission: one schedule with streams and
// events, then a static memory plan over that schedule.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_PLAN_PASSES_TD
#define ZPLAN_COMPILER_PLAN_PASSES_TD

include "mlir/Pass/PassBase.td"

def ZplanMaterializeOutputs
    : Pass<"zplan-materialize-outputs", "mlir::ModuleOp"> {
  let summary = "Give every graph output storage written by an instruction";
  let description = [{
    The runtime reads a graph output back from a tensor that an instruction
    wrote. A graph may instead return one of its inputs, a parameter or a
    constant (ONNX Identity, a Shape that folded, a graph that folded
    completely), or a view of one of those. For each such result the pass
    inserts a copy (`zg.cast` to the same type, the plan's `cast` opcode)
    right before the return and returns the copy. Results computed by an
    instruction are left alone.

    Before:
    ```mlir
    func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
      return %x : tensor<2xf32>
    }
    ```
    After:
    ```mlir
    func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = zg.cast %x : (tensor<2xf32>) -> tensor<2xf32>
      return %0 : tensor<2xf32>
    }
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [
    Statistic<"numCopies", "copies", "Graph outputs given a copy">,
  ];
}

def ZplanFoldTranspose : Pass<"zplan-fold-transpose", "mlir::ModuleOp"> {
  let summary = "Fold transposes of matrix-product operands and results into the product";
  let description = [{
    A zg.transpose that swaps the last two dims of a zg.matmul operand becomes
    that operand's `trans_a` / `trans_b` flag (BLAS reads the operand
    transposed; no copy is made). A zg.transpose of the last two dims of a
    zg.matmul result, when the transpose is the product's only user, becomes
    the product of the swapped operands with both flags flipped:
    (A B)^T = B^T A^T. The backward pass of every linear layer builds both
    forms (dW = X^T dY); folding them removes a copy of an activation per layer
    and its buffer from the memory plan. Transposes left without users are
    erased. Operands of rank 1 are left alone. Run after sharding (the tp and
    ZeRO rules read unflagged products), before --zplan-fuse and the schedule.

    Before:
    ```mlir
    %t = zg.transpose %x {perm = array<i64: 1, 0>} : (tensor<8x4xbf16>) -> tensor<4x8xbf16>
    %w = zg.matmul %t, %g : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xbf16>
    ```
    After:
    ```mlir
    %w = zg.matmul %x, %g {trans_a = true} : (tensor<8x4xbf16>, tensor<8x6xbf16>) -> tensor<4x6xbf16>
    ```

    The head split and merge around a forward zg.attention fold the same
    way: a q, k or v operand that is a transpose of dims 1 and 2 (the
    [B, S, H, D] projection output made [B, H, S, D]) and has no other user
    is read before the transpose, and a result whose only user is such a
    transpose is written in its layout; each folded operand sets its bit of
    the op's `seq_major` (1 q, 2 k, 4 v, 8 result), and the kernels address
    it by strides. An attention with an lse result (the training forward,
    whose zg.attention_grad reads head-major q, k, v and output) is left
    alone.

    With `rotary` (on by default here and in the zplan driver for both
    targets; --fold-rotary off turns it off), a q or k operand that is a
    zg.rotary of such a transpose, the rotary and the transpose each with
    no other reader, folds too: the rotary reads the [B, S, H, D] input and
    writes [B, S, H, D] (its `seq_major` flag; the tables still index by
    position), and the attention's bit is set (llama's q and k).
  }];
  let options = [
    Option<"foldRotary", "rotary", "bool", /*default=*/"true",
           "Fold the head split transposes of q and k through a rotary "
           "embedding that only the attention reads">,
  ];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [
    Statistic<"numOperands", "operands", "operand transposes folded">,
    Statistic<"numResults", "results", "result transposes folded">,
    Statistic<"numHeadTransposes", "head-transposes",
              "head split / merge transposes folded into attention">,
    Statistic<"numRotaryTransposes", "rotary-transposes",
              "head split transposes folded through a rotary embedding">,
  ];
}

def ZplanMergeLinears : Pass<"zplan-merge-linears", "mlir::ModuleOp"> {
  let summary = "One matrix product for the linears that read the same input";
  let description = [{
    Two or more `zg.linear` ops of one block that read the same activation,
    each with a device-resident `zg.weight` of its own (no bias, the same
    `trans_w` and `alpha`, the same element type and the same K), become one
    `zg.linear` over a merged weight, followed by one `zg.slice` per former
    result along the last dim: llama's q / k / v projections, and its gate /
    up pair. The pass runs after tensor parallelism, so the merged weight is
    [this rank's q | its k | its v] (under GQA replication, the K/V head
    block the rank holds): a `zg.weight` whose `zd.parts` list, one entry per
    former weight, gives each part's source (name, file, offset, length,
    source_shape) and its per-tp-rank pieces, shifted to the part's columns
    (rows with `trans_w`). The emitter writes one weight binding per part,
    all onto the merged tensor, and the runtime assembles them at load.

    Left alone: training modules (their parameters are trained, checkpointed
    and partitioned by ZeRO one by one), weights that ZeRO shards or offload
    keeps on the host (the linear then reads a gather or a prefetch, not a
    zg.weight), weights with other users (a tied LM head), inline weights,
    and linears with a bias.

    Before:
    ```mlir
    %q = zg.linear %x, %wq : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
    %k = zg.linear %x, %wk : (tensor<2x8x64xf32>, tensor<64x32xf32>) -> tensor<2x8x32xf32>
    ```
    After:
    ```mlir
    %w = zg.weight {name = "wq+wk", zd.parts = [part of wq, part of wk], ...} : () -> tensor<64x96xf32>
    %qk = zg.linear %x, %w : (tensor<2x8x64xf32>, tensor<64x96xf32>) -> tensor<2x8x96xf32>
    %q = zg.slice %qk {starts = array<i64: 0, 0, 0>, ...} : (tensor<2x8x96xf32>) -> tensor<2x8x64xf32>
    %k = zg.slice %qk {starts = array<i64: 0, 0, 64>, ...} : (tensor<2x8x96xf32>) -> tensor<2x8x32xf32>
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [
    Statistic<"numMerged", "merged", "linears merged into a wider one">,
    Statistic<"numGroups", "groups", "merged linears made">,
  ];
}

def ZplanDecodeProducts : Pass<"zplan-decode-products", "mlir::ModuleOp"> {
  let summary = "Decide and fuse the few-row products of a decode program";
  let description = [{
    A decode step's products have one row per sequence, so each is a short
    stream over its weight whose fixed cost (launch, ramp-up, reduction)
    weighs as much as its bytes (docs/generation.md). Three rewrites, in the
    `decode` program only (a generation plan's one-token step):

    - `fuse`: the gated MLP's two bias-free linears of one input and their
      activation product (`zg.gated`, or `zg.mul` of a `zg.silu` / `zg.gelu`
      and the other linear) become one `zg.linear_gated`; then the other
      bias-free linears that read one input (llama's q / k / v) become one
      `zg.linear_multi` (two to four weights with the same `trans_w`, alpha,
      element type and K). Only products of at most 16 rows (and at most
      `gated-max-rows` / `multi-max-rows`) whose K the few-row kernel holds (K x rows, rows rounded up to a power of two, at
      most 98304). The fused op sits where the last former linear was; the
      ops between that read a former result (and the releases of the fused
      operands) move after it, in order.
    - `rope-kv`: each `zg.cached_attention` whose q is a forward head-major
      `zg.rotary` read by nothing else, and whose k and v caches are written
      at its positions by one `zg.kv_write` each (the k cache's value a
      rotary of k under the same tables), becomes one `zg.rope_kv_write`
      right before the attention (one kernel instead of four). With
      `rope-attention`, that step and the attention become one
      `zg.rope_attention` (one kernel instead of five: the attention's blocks
      rotate their queries and the new keys of their own cache range).
    - `norm-max-rows` (after the others): a `zg.residual_norm` of kind rms
      (or `zg.add` then `zg.rms_norm`) whose normed rows only one few-row
      product reads (a `zg.linear_multi`, a `zg.linear_gated`, or a
      `zg.linear` marked for the few-row kernel), of at most that many rows
      (and 4), W [K, N] with N a multiple of 8 and K x rows within 16384,
      becomes one `zg.norm_products` with the product.
    - `decode-layer` (last): each decoder layer of the decode step that is
      the chain a llama-style layer leaves after the others (a
      `zg.norm_products` of q / k / v, or `zg.rms_norm` then a
      `zg.linear_multi` where the layer has no residual add; its
      `zg.rope_kv_write` and `zg.cached_attention`, or the
      `zg.rope_attention`; the o `zg.linear`; the gated `zg.norm_products`
      that adds o to the residual; the down `zg.linear`), each intermediate
      read only by the next step, becomes one `zg.decode_layer`, which the
      GPU runs as one persistent kernel. With `decode-layer-kernel`, only
      layers that kernel takes (at most 4 rows, head dim 64 or 128, at most
      16 query heads a K/V head, d and ffn multiples of 8, a row of x within
      64 KiB in the plan's dtype). The layers share one zero-initialised i32
      state, `decode_layer.sync`, the kernel's barrier counts.
    - `choose-kernel` (the cuda target): each remaining `zg.linear` /
      `zg.matmul` of at most `few-rows-max` rows whose weight holds at most
      `few-rows-max-bytes` bytes gets `zd.kernel = "few_rows"`: the plan
      then runs it with the few-row kernel (kernels/cuda/skinny_gemm.cu)
      instead of cuBLASLt. The defaults follow the session 5 measurements on
      the H200: the few-row kernel won only at one row and a 2 MiB weight.
      With `stream-kernel`, a product the streaming kernel holds is marked
      up to `few-rows-stream-max-bytes` (session 9 on the H200: llama-1b's o
      and down at one row, 8 and 23 MiB, read faster by it than by
      cuBLASLt).
    - `stream-kernel` (the cuda target, after choose-kernel): each
      `zg.linear_multi`, `zg.linear_gated` and each product choose-kernel
      marked that the streaming few-row kernel holds (W [K, N], at most 4
      rows, K x rows within 16384, widths a multiple of 8:
      zk/few_rows_kernels.h) gets `zd.kernel = "few_rows_stream"` (plan 2.14:
      kernel code 2); the others keep the cluster kernels (code 1).

    Before (one row):
    ```mlir
    %g = zg.linear %x, %wg : (tensor<1x1x64xf32>, tensor<64x176xf32>) -> tensor<1x1x176xf32>
    %u = zg.linear %x, %wu : (tensor<1x1x64xf32>, tensor<64x176xf32>) -> tensor<1x1x176xf32>
    %h = zg.gated %g, %u {act = "silu"} : ...
    ```
    After:
    ```mlir
    %h = zg.linear_gated %x, %wg, %wu {act = "silu"} : ...
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let options = [
    Option<"fuse", "fuse", "bool", "false",
           "fuse q/k/v-like groups and gate/up with their activation">,
    Option<"multiMaxRows", "multi-max-rows", "int64_t", "16",
           "fuse: the most rows of a zg.linear_multi (at most 16)">,
    Option<"multiMaxBytes", "multi-max-bytes", "int64_t", "0",
           "fuse: the most weight bytes of a zg.linear_multi (0: no cap)">,
    Option<"gatedMaxRows", "gated-max-rows", "int64_t", "16",
           "fuse: the most rows of a zg.linear_gated (at most 16)">,
    Option<"normMaxRows", "norm-max-rows", "int64_t", "0",
           "fold the residual add and RMS norm before a few-row product of "
           "at most this many rows (and 4) into a zg.norm_products (0: off)">,
    Option<"ropeKv", "rope-kv", "bool", "false",
           "fuse each decode attention's rotaries and cache writes into "
           "one zg.rope_kv_write">,
    Option<"ropeAttention", "rope-attention", "bool", "false",
           "rope-kv: also fold each zg.rope_kv_write into the attention "
           "that reads it (one zg.rope_attention)">,
    Option<"decodeLayer", "decode-layer", "bool", "false",
           "fuse each llama-style decoder layer of the decode step into one "
           "zg.decode_layer">,
    Option<"decodeLayerKernel", "decode-layer-kernel", "bool", "false",
           "decode-layer: only the layers the GPU's persistent kernel takes">,
    Option<"chooseKernel", "choose-kernel", "bool", "false",
           "mark the few-row products the few-row kernel runs">,
    Option<"fewRowsMax", "few-rows-max", "int64_t", "1",
           "choose-kernel: the most rows of a product the rule marks">,
    Option<"fewRowsMaxBytes", "few-rows-max-bytes", "int64_t",
           "4 * 1024 * 1024",
           "choose-kernel: the largest weight (bytes) the rule marks">,
    Option<"streamKernel", "stream-kernel", "bool", "false",
           "run the fused and marked few-row products that the streaming "
           "kernel holds with it">,
    Option<"fewRowsStreamMaxBytes", "few-rows-stream-max-bytes", "int64_t",
           "0",
           "choose-kernel with stream-kernel: the largest weight (bytes) the "
           "rule marks where the streaming kernel holds the product (at "
           "least few-rows-max-bytes)">,
    Option<"dtype", "dtype", "std::string", "\"fp32\"",
           "the plan's float dtype (a weight's bytes)">,
  ];
  let statistics = [
    Statistic<"numGated", "gated", "gate/up pairs fused with their act">,
    Statistic<"numMulti", "multi", "groups of linears fused into one step">,
    Statistic<"numFewRows", "few-rows", "products marked for the few-row kernel">,
    Statistic<"numStream", "stream", "products marked for the streaming kernel">,
    Statistic<"numRopeKv", "rope-kv", "rotary and cache write groups fused">,
    Statistic<"numRopeAttention", "rope-attention",
              "rotary and cache write groups fused into their attention">,
    Statistic<"numNorm", "norm", "norms folded into few-row products">,
    Statistic<"numDecodeLayer", "decode-layer",
              "decoder layers fused into one zg.decode_layer">,
  ];
}

def ZplanAttentionKernels : Pass<"zplan-attention-kernels", "mlir::ModuleOp"> {
  let summary = "Choose the CUDA kernel of each attention";
  let description = [{
    Sets `zd.kernel` on every `zg.attention` (the forward kernel's name) and
    `zg.attention_grad` (the backward's), which the emitter writes as the
    kernel's code (plan 2.11: the attention's int 11, the attention_grad's
    int 1), so that the runtime runs that kernel on every GPU rather than
    picking one by the device it finds. The kernels, their codes and what
    they need are one table, kernels/cuda/include/zk/attention_kernels.h.

    Forward: an attention the tensor-core kernels can take (the plan stores
    it in bf16 or fp16, head dim 64 or 128, at least one key, and a packed
    operand's offset and row stride multiples of 8 elements, so that every
    row is 16-byte aligned) gets `kernel` when given (zplan
    --attention-kernel, for A/B timing), else the default of `arch`: `wg3`
    (the wgmma kernel, sm_90a code) for 90, `fa4x1r` (head dim 64) or
    `fa4x1` (128) for any other; every other attention gets `rows`, the
    exact kernel. A `kernel` the table does not have, or one that `arch`
    cannot run (a wgmma kernel for arch 80), is an error.

    Backward: `mma` (the register kernels) at head dim 64, `wmma` at 128,
    `exact` otherwise (fp32, other head dims). No device decides either.

    Before (bf16, arch 90):
    ```mlir
    %o = zg.attention %q, %k, %v {causal = true, scale = 1.250000e-01 : f64} : ...
    ```
    After:
    ```mlir
    %o = zg.attention %q, %k, %v {causal = true, scale = 1.250000e-01 : f64, zd.kernel = "wg3"} : ...
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let options = [
    Option<"arch", "arch", "int64_t", "90",
           "the target GPU's compute capability, major * 10 + minor (zplan "
           "--cuda-arch sm_90 is 90)">,
    Option<"kernel", "kernel", "std::string", "\"\"",
           "the forward kernel of every attention that can take it (empty: "
           "the default of arch)">,
    Option<"dtype", "dtype", "std::string", "\"fp32\"",
           "the plan's float dtype">,
  ];
  let statistics = [
    Statistic<"numForward", "forward", "attention kernels chosen">,
    Statistic<"numBackward", "backward", "attention_grad kernels chosen">,
  ];
}

def ZplanGemmAlgos : Pass<"zplan-gemm-algos", "mlir::ModuleOp"> {
  let summary = "Choose the cuBLASLt algorithm of the products the tuning table has";
  let description = [{
    Sets `zd.gemm_algo` (the seven ints of a cuBLASLt algorithm: its id and
    its tile, stages, split-k, swizzle, custom option and cluster shape) on
    each `zg.linear` and `zg.linear_residual` whose shape the tuning table
    kernels/cuda/include/zk/gemm_algos.h has for `arch`: the rows M (the
    input's elements over K), K, N, the weight's layout, the bias and
    residual, the plan's storage dtype (bf16 or fp16). The emitter writes
    them as the product's ints 2..8 (plan 2.15); the CUDA backend builds
    that algorithm or refuses the product. A product the table does not
    have, or one the few-row kernel runs (`zd.kernel`), is left alone and
    runs cuBLASLt's first heuristic answer. The table holds what was
    measured on the GPU of its arch; nothing is timed when the plan runs.

    Before (bf16, arch 90, llama2-7b batch 4's gate product):
    ```mlir
    %g = zg.linear %x, %w : (tensor<4x1024x4096xbf16>, tensor<4096x11008xbf16>) -> tensor<4x1024x11008xbf16>
    ```
    After:
    ```mlir
    %g = zg.linear %x, %w {zd.gemm_algo = array<i64: 66, 29, 35, 1, 0, 1, 0>} : ...
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let options = [
    Option<"arch", "arch", "int64_t", "90",
           "the target GPU's compute capability, major * 10 + minor (zplan "
           "--cuda-arch sm_90 is 90)">,
    Option<"dtype", "dtype", "std::string", "\"fp32\"",
           "the plan's float dtype">,
  ];
  let statistics = [
    Statistic<"numChosen", "chosen", "products given a tuned algorithm">,
  ];
}

def ZplanFuse : Pass<"zplan-fuse", "mlir::ModuleOp"> {
  let summary = "Fuse producer/consumer pairs the CUDA kernels run as one step";
  let description = [{
    Rewrites, in the plan function's block, four patterns into one op each,
    so that the plan holds the fused steps and the memory plan sizes their
    buffers (the runtime executes what the plan says and fuses nothing):

    - `zg.linear` whose only user is a tanh `zg.gelu` of the same type
      becomes `zg.linear_gelu` (one matrix product with the GELU epilogue);
    - `zg.add` of two operands of the result's shape (no broadcasting) whose
      result a last-axis `zg.layer_norm` / `zg.rms_norm` with a scale reads
      becomes `zg.residual_norm`, which writes both the sum (still used by
      the residual stream) and the normalised tensor;
    - `zg.linear` whose only user is a `zg.add` of the result's type (no
      broadcasting) becomes `zg.linear_residual` with the add's other operand
      as the residual (one matrix product whose epilogue adds it), when the
      product has at least `residual-min-rows` rows: the few-row products of
      a decode step keep their add, which `--zplan-decode-products` folds
      into the next layer's products. It runs before the residual-norm
      pattern, so a llama layer's `o_proj + add` and `down_proj + add` keep
      a plain `zg.rms_norm` after them (half the bytes of the residual norm);
    - `zg.silu` / `zg.gelu` whose only user is a `zg.mul` with an operand of
      the same type becomes `zg.gated` (the activation computed inside the
      product).

    A pattern is left alone when the fused op could not sit where its parts
    did without breaking the block order: a user of the sum before the norm,
    a norm parameter defined after the add (ZeRO-3 gathers it in between).
    Run after sharding and output materialisation, before --zplan-schedule.

    Before:
    ```mlir
    %h = zg.linear %x, %w, %b {alpha = 1.0 : f64, trans_w = true} : ...
    %g = zg.gelu %h {approximate = "tanh"} : ...
    ```
    After:
    ```mlir
    %g = zg.linear_gelu %x, %w, %b {alpha = 1.0 : f64, trans_w = true} : ...
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let options = [
    Option<"residualMinRows", "residual-min-rows", "int64_t",
           /*default=*/"17",
           "The fewest rows (the product's output elements over N) a "
           "linear needs for its residual add to fold into it; the default "
           "is one more than the few-row kernel takes (16)">,
  ];
  let statistics = [
    Statistic<"numLinearGelu", "linear-gelu", "zg.linear + zg.gelu fused">,
    Statistic<"numLinearResidual", "linear-residual",
              "zg.linear + residual zg.add fused">,
    Statistic<"numResidualNorm", "residual-norm", "zg.add + norm fused">,
    Statistic<"numGated", "gated", "activation + zg.mul fused">,
  ];
}

def ZplanOverlapChunks : Pass<"zplan-overlap-chunks", "mlir::ModuleOp"> {
  let summary = "Split a tp program's batch into chunks whose collectives overlap";
  let description = [{
    In a tensor-parallel forward, a row-parallel layer's `zd.all_reduce` has
    no independent compute after it in one sequence's data flow: the next op
    reads its result. This pass divides the batch of each such program into
    `chunks` parts (the batch rules of ZeRO's split over dp: every ranked
    argument gives each chunk its rows of dimension 0) and interleaves the
    chunks segment by segment, a segment being the ops between consecutive
    collectives on a path from the inputs. In the block order (the plan's one
    order), chunk 0's part of a segment ends with its collective, then chunk
    1's part of the same segment follows: --zplan-schedule puts the
    collective on the comm stream, so chunk 0's all_reduce runs while chunk
    1 computes, and chunk 1's while chunk 0 goes on to the next segment.
    Ops that do not depend on the batch inputs (weights, constants, shapes)
    are computed once and shared. Each input is sliced into its chunks
    (`zg.slice` along dimension 0) and each result is the `zg.concat` of its
    chunks along dimension 0.

    Left whole, with a statistic: programs with no tp collective, with state
    (training steps, generation), with ZeRO gathers or offload copies, and,
    with a remark naming the reason, programs whose batch the rules cannot
    split. chunks = 1 changes nothing. Run after sharding and output
    materialisation, before --zplan-fuse and --zplan-schedule.

    Before (tp = 2, chunks = 2):
    ```mlir
    %h = zg.linear %x, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
    %r = zd.all_reduce %h {axis = "tp"} : tensor<2x8xf32>
    %y = zg.add %r, %x : ...
    ```
    After:
    ```mlir
    %x0 = zg.slice %x {starts = array<i64: 0, 0>, ...} -> tensor<1x8xf32>
    %h0 = zg.linear %x0, %w ...
    %r0 = zd.all_reduce %h0 {axis = "tp"} : tensor<1x8xf32>
    %x1 = zg.slice %x {starts = array<i64: 1, 0>, ...} -> tensor<1x8xf32>
    %h1 = zg.linear %x1, %w ...
    %r1 = zd.all_reduce %h1 {axis = "tp"} : tensor<1x8xf32>
    %y0 = zg.add %r0, %x0 ...
    %y1 = zg.add %r1, %x1 ...
    %y = zg.concat %y0, %y1 {axis = 0 : i64} ...
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let options = [
    Option<"chunks", "chunks", "int64_t", "1",
           "parts of the batch (1: the pass changes nothing)">,
  ];
  let statistics = [
    Statistic<"numChunked", "chunked", "Programs split into chunks">,
    Statistic<"numSkipped", "skipped", "Programs left whole">,
    Statistic<"numChunkedCollectives", "chunked-collectives",
              "Collectives issued once per chunk">,
  ];
}

def ZplanPrefetchGathers : Pass<"zplan-prefetch-gathers", "mlir::ModuleOp"> {
  let summary = "Issue parameter fetches (ZeRO-3 gathers, offload copies) a window ahead of their use";
  let description = [{
    In every program (forward, generation, training step), moves each
    parameter fetch earlier in the block order, which is the plan's one SPMD
    order. Two kinds of fetch, each in order on its own stream: the
    `zd.gather_param` of ZeRO-3 (comm stream) and the `zd.prefetch` of a
    parameter that --zplan-offload keeps in host memory (copy stream; a
    resident weight or a ZeRO shard, not a master part or an NVMe staging
    buffer). The copies move first, then the gathers, which cannot go
    above their shard's copy. A fetch goes to the first reader of an
    earlier fetch of its kind while the bytes fetched from there up to its
    own first reader, its own included, fit window-bytes, and while the
    fetched bytes of its kind alive at every position stay within
    max-live-bytes (0: no cap). Fetches keep their order (the stream issues
    the one needed first, first), and no fetch moves above its operand's
    producer or above a write to the persistent shard it reads (the training
    step updates shards in place). `zd.release` stays after the last use.

    window-bytes = -1 (auto) is, for the gathers, one layer's parameters (the
    distinct gathered bytes over the number of `zg.attention` ops), at least
    the largest single gather; for the copies, one layer's parameters plus
    the largest copy, so that the host link, the slower stream, never waits
    for the compute stream to reach a copy's place, the LM head's included.
    window-bytes = 0 moves nothing: the gathers stay at their use and the
    copies where --zplan-offload put them (one parameter ahead). The window
    decided goes on the program as `zplan.gather_window_bytes` /
    `zplan.copy_window_bytes`. Bytes are counted by the IR element type's
    width, as --zplan-zero counts them.

    --zplan-schedule then puts a gather on the comm stream and a copy on the
    copy stream and makes the first reader wait on its event, and
    --zplan-memory-plan sees the longer life of the fetched buffer (and makes
    the fetch wait for the compute step that last touched the bytes it
    reuses), so the fetch runs while the compute stream works through the
    window, inside the planned peak. Run after sharding and offload and
    before --zplan-fuse (a norm's parameter fetched earlier no longer blocks
    the residual-norm fusion).

    Before (window-bytes = 2048):
    ```mlir
    %ga = zd.gather_param %sa : tensor<128xf32> -> tensor<16x16xf32>
    %h1 = zg.linear %x, %ga : ...
    zd.release %ga : tensor<16x16xf32>
    %gb = zd.gather_param %sb : tensor<128xf32> -> tensor<16x16xf32>
    %h2 = zg.linear %h1, %gb : ...
    ```
    After:
    ```mlir
    %ga = zd.gather_param %sa : tensor<128xf32> -> tensor<16x16xf32>
    %gb = zd.gather_param %sb : tensor<128xf32> -> tensor<16x16xf32>
    %h1 = zg.linear %x, %ga : ...
    zd.release %ga : tensor<16x16xf32>
    %h2 = zg.linear %h1, %gb : ...
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let options = [
    Option<"windowBytes", "window-bytes", "int64_t", "-1",
           "bytes of parameters fetched ahead of their first use (-1: auto, "
           "about one layer's parameters; 0: none beyond the offload "
           "pass's placement)">,
    Option<"maxLiveBytes", "max-live-bytes", "int64_t", "0",
           "cap on fetched parameter bytes of one kind alive at once "
           "(0 = none)">,
  ];
  let statistics = [
    Statistic<"numGathers", "gathers", "zd.gather_param ops seen">,
    Statistic<"numCopies", "copies", "Parameter zd.prefetch ops seen">,
    Statistic<"numHoisted", "hoisted", "Fetches issued ahead of their place">,
  ];
}

def ZplanSchedule : Pass<"zplan-schedule", "mlir::ModuleOp"> {
  let summary = "Fix the instruction order, streams, events and collective hash";
  let description = [{
    Every public `func.func` of the module is a program of the plan and is
    scheduled on its own (its event count and collective hash go on the
    function as `zplan.num_events` / `zplan.collective_hash`). Within a
    program, takes the block order as the one SPMD order (it is
    topological by SSA dominance, and it keeps the placement of gathers and
    prefetches that --zplan-prefetch-gathers and the offload pass chose), and gives every
    instruction a stream: `comm` for collectives and `zd.gather_param`, `copy`
    for `zd.prefetch` / `zd.evict`, `compute` for the rest. Storage ops
    (`zg.weight`, `zd.weight_shard`, `zg.state`, `zg.constant`) run no
    instruction and get no stream. Writes to persistent storage
    (`zg.assign`, `zg.adamw`, `zg.accumulate`) have no result a reader could
    depend on, so they are ordered explicitly: a write waits for every earlier
    reader of its target on another stream (write-after-read), and a later
    reader or writer on another stream waits for the write. Where an instruction reads a value produced on another stream,
    the producer signals an event and the consumer waits on it (once per
    stream pair and point in order).

    All ranks run the same instruction stream, so the collective sequence is
    identical on every rank as long as no collective sits under control flow
    that could depend on the rank: the pass refuses any op with regions in
    the function. It records the collective hash that plan.fbs defines
    (FNV-1a 64 over op, axis, dtype and element count of each communicating
    instruction) on each function.

    Before:
    ```mlir
    %y = zd.all_reduce %x {axis = "tp"} : tensor<2x64xf32>
    %z = zg.add %y, %y : (tensor<2x64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
    ```
    After:
    ```mlir
    %y = zd.all_reduce %x {axis = "tp", zplan.signal = 0 : i64, zplan.stream = "comm"} : ...
    %z = zg.add %y, %y {zplan.stream = "compute", zplan.waits = array<i64: 0>} : ...
    ```
    and `zplan.num_events = 1 : i64`, `zplan.collective_hash = ... : ui64` on
    the function.
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", "\"fp32\"",
           "Plan dtype of float tensors (fp32, bf16, fp16): enters the hash">,
  ];
  let statistics = [
    Statistic<"numInstructions", "instructions", "Instructions scheduled">,
    Statistic<"numCollectives", "collectives", "Communicating instructions">,
    Statistic<"numEvents", "events", "Cross-stream events">,
  ];
}

def ZplanEarlyLoads : Pass<"zplan-early-loads", "mlir::ModuleOp"> {
  let summary = "Decide which steps' kernels load their weights before waiting for the previous kernel";
  let description = [{
    The CUDA kernels of a few-row product, of `zg.decode_layer` and of
    `zg.rope_attention` are launched as programmatic dependents of the
    previous kernel on their stream: they may issue their first loads of
    some operands (zrt/ops.h, `early_operands`: the products' weights,
    decode_layer's weights, rope_attention's caches and positions) before
    they wait for that kernel to finish, which hides the start of the
    weight stream behind the previous kernel's tail. That is only right
    where nothing writes those operands while the previous kernel may still
    run. This pass decides it, per step, and marks the step `zplan.early`;
    the emitter writes it as the instruction's `early` (plan 2.18), the
    verifier refuses the claim where a step of the plan writes the bytes,
    and the CUDA backend passes it to the kernel (the CPU backend has no
    such wait and ignores it). Run after --zplan-schedule (it reads the
    streams and the final order).

    - The products (`zg.linear` and `zg.matmul` that --zplan-decode-products
      gave a few-row kernel, `zg.linear_multi`, `zg.linear_gated`,
      `zg.norm_products`) and `zg.decode_layer`: each early operand is read,
      through views, from device storage (`zg.weight`, `zd.weight_shard`,
      `zg.state`, `zg.constant`) that no state write of any program of the
      module writes: inference weights. A ZeRO-3 gather, an offload copy (the
      operand is then an instruction's result) or a trained parameter
      (`zg.adamw`, `zg.assign`) keeps the step waiting.
    - `zg.rope_attention`: no op of its program other than the step writes
      its caches or positions (the prefill program writes the caches, and
      has finished before the step's program starts), and the last
      instruction before it that is not a view is a device step of its
      program on its stream, so that the kernel it overlaps is that one.

    Before (one row, inference):
    ```mlir
    %w = zg.weight {name = "w", ...} : () -> tensor<64x64xbf16>
    %y = zg.linear %x, %w {zd.kernel = "few_rows_stream", zplan.stream = "compute"} : ...
    ```
    After:
    ```mlir
    %y = zg.linear %x, %w {zd.kernel = "few_rows_stream", zplan.early, zplan.stream = "compute"} : ...
    ```
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [
    Statistic<"numEarly", "early", "steps whose kernel loads before its wait">,
    Statistic<"numWaiting", "waiting",
              "steps that could but must wait: an operand is written">,
  ];
}

def ZplanMemoryPlan : Pass<"zplan-memory-plan", "mlir::ModuleOp"> {
  let summary = "Give every tensor a static offset in its memory space's arena";
  let description = [{
    Computes liveness over the schedule (`--zplan-schedule` must have run):
    a tensor lives from the instruction that defines it to its last reader;
    a `zg.reshape` result shares its operand's storage and extends its life;
    a gathered parameter ends at its `zd.release`; weights, shards,
    `zg.state`, constants, graph inputs and outputs live for the whole plan.
    The programs (public functions) share one arena: they are laid end to end
    on one timeline, so a program's transient tensors may reuse another's
    bytes, while persistent storage that several programs name (same op, type
    and attributes) gets one offset and is never reused. Tensors are stored in
    their plan dtype (float tensors take `dtype` unless their element type is
    an explicit decision, see docs/plan-format.md 2.0; integers keep theirs). Offsets come from a best-fit placement in one arena per memory
    space (device, host), 256-byte aligned.

    Every op gets `zplan.offsets = array<i64: ...>` (one per result), every
    argument `zplan.offset`, and the module `zplan.arena_bytes` and
    `zplan.peak_live_bytes` (device, host). Where a buffer reuses bytes last
    read or written on another stream, the new writer waits on an event of
    that stream, so that reuse is safe with concurrent streams.

    With `gpu-mem` (device) or `host-mem` (host) non-zero, a plan whose
    arena exceeds the budget fails, saying which arena is over by how much
    and which flags would help.
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", "\"fp32\"",
           "Plan dtype of float tensors (fp32, bf16, fp16)">,
    Option<"gpuMem", "gpu-mem", "uint64_t", "0",
           "Device memory per rank in bytes (0: unlimited)">,
    Option<"hostMem", "host-mem", "uint64_t", "0",
           "Host memory per rank in bytes (0: unlimited)">,
    Option<"deviceReserve", "device-reserve", "uint64_t", "0",
           "Device bytes the backend takes outside the arena (workspace, "
           "CUDA context); counted against gpu-mem">,
  ];
  let statistics = [
    Statistic<"numBuffers", "buffers", "Tensors given storage">,
    Statistic<"numAliases", "aliases", "Tensors sharing another's storage">,
    Statistic<"numReuseEvents", "reuse-events",
              "Events added for cross-stream storage reuse">,
  ];
}

#endif // ZPLAN_COMPILER_PLAN_PASSES_TD
