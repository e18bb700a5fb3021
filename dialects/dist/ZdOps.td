//===- ZdOps.td - zd operations ------------------------------*- tablegen -*-===//
//
// Collectives, ZeRO parameter handling and host/device transfers. Every op
// works on ranked tensors whose types are rank-local and verifies its shapes.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_DIST_ZDOPS_TD
#define ZPLAN_DIALECTS_DIST_ZDOPS_TD

include "dialects/dist/ZdDialect.td"
include "dialects/dist/ZdAttrs.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

def Zd_AllReduceOp : Zd_Op<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "sum (or max, min) over a mesh axis";
  let description = [{
    Every rank of the `axis` group ("tp" or "dp") receives the elementwise
    `reduction` ("sum", the default, "max" or "min") of the group's tensors.
    The vocabulary-parallel cross-entropy uses "max" for the row maxima.

    ```mlir
    %y = zd.all_reduce %x {axis = "tp"} : tensor<2x16x64xf32>
    %m = zd.all_reduce %r {axis = "tp", reduction = "max"} : tensor<32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis,
                   DefaultValuedStrAttr<StrAttr, "sum">:$reduction);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Zd_AllGatherOp : Zd_Op<"all_gather"> {
  let summary = "concatenate the group's tensors along a dimension";
  let description = [{
    Dimension `dim` of the result is the group size times that of the
    operand; the parts are concatenated in group order.

    ```mlir
    %y = zd.all_gather %x {axis = "tp", dim = 2 : i64}
        : tensor<2x16x128xf32> -> tensor<2x16x512xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Zd_ReduceScatterOp : Zd_Op<"reduce_scatter"> {
  let summary = "sum over the group, then keep this rank's part along a dim";
  let description = [{
    Dimension `dim` of the operand is the group size times that of the
    result; rank i of the group keeps part i of the `reduction` ("sum", the
    default, "max" or "min").

    ```mlir
    %y = zd.reduce_scatter %x {axis = "dp", dim = 0 : i64}
        : tensor<8x64xf32> -> tensor<4x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis, I64Attr:$dim,
                   DefaultValuedStrAttr<StrAttr, "sum">:$reduction);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Zd_LocalSliceOp : Zd_Op<"local_slice", [Pure]> {
  let summary = "keep this rank's part of a tensor every rank of the group holds";
  let description = [{
    The operand is the same on every rank of the `axis` group; rank i keeps
    part i along `dim` (the operand's size there is the group size times the
    result's). No communication: it is a slice at offset i * size. The
    tensor-parallel passes use it where a training step needs a whole
    activation split (the gradient of a split parameter computed whole).

    ```mlir
    %y = zd.local_slice %x {axis = "tp", dim = 1 : i64}
        : tensor<32x64xf32> -> tensor<32x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Zd_BroadcastOp : Zd_Op<"broadcast", [SameOperandsAndResultType]> {
  let summary = "copy the root's tensor to every rank of the group";
  let description = [{
    ```mlir
    %y = zd.broadcast %x {axis = "dp", root = 0 : i64} : tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis, I64Attr:$root);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// ZeRO
//===----------------------------------------------------------------------===//

def Zd_WeightShardOp : Zd_Op<"weight_shard", [Pure]> {
  let summary = "this dp rank's flat ZeRO-3 shard of a tp-local parameter";
  let description = [{
    The parameter is described as in `zg.weight` (name; file, offset and
    length of its external data, or the inline `value`), plus the full
    `source_shape`, the tp-local shape `local_shape`, the optional per-tp-index
    `pieces` (see docs/dist-contract.md) and the dp group size. The result is
    the flat 1-D shard of ceil(elements(local_shape) / dp) elements: the
    tp-local tensor flattened and zero-padded to dp * shard elements, of which
    dp rank d holds part d. `space` is "device" or "host" (offload).

    ```mlir
    %s = zd.weight_shard {name = "w", file = "m.data", offset = 0 : i64,
                          length = 16384 : i64,
                          source_shape = array<i64: 64, 64>,
                          local_shape = array<i64: 64, 64>, dp = 2 : i64,
                          space = "device"} : tensor<2048xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<StrAttr>:$file,
                       OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<I64Attr>:$length,
                       OptionalAttr<ElementsAttr>:$value,
                       DenseI64ArrayAttr:$source_shape,
                       DenseI64ArrayAttr:$local_shape,
                       OptionalAttr<ArrayAttr>:$pieces, I64Attr:$dp,
                       StrAttr:$space);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Zd_GatherParamOp : Zd_Op<"gather_param"> {
  let summary = "all_gather of a ZeRO shard over dp into the tp-local tensor";
  let description = [{
    Gathers the flat shards of the dp group and drops the zero padding: the
    result has the parameter's tp-local shape. Its storage stays alive until
    the matching `zd.release`.

    ```mlir
    %w = zd.gather_param %s : tensor<2048xf32> -> tensor<64x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$shard);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$shard attr-dict `:` type($shard) `->` type($result)";
  let hasVerifier = 1;
}

def Zd_ReleaseOp : Zd_Op<"release"> {
  let summary = "end of a gathered parameter's lifetime";
  let description = [{
    No data moves; the storage of the gathered parameter (the result of
    `zd.gather_param`, or the device copy `zd.prefetch` made of a resident
    weight) may be reused by any op scheduled after this one.

    ```mlir
    zd.release %w : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$gathered);
  let assemblyFormat = "$gathered attr-dict `:` type($gathered)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Host/device traffic
//===----------------------------------------------------------------------===//

def Zd_PrefetchOp : Zd_Op<"prefetch", [SameOperandsAndResultType]> {
  let summary = "copy a host-resident tensor to the device (copy stream)";
  let description = [{
    ```mlir
    %d = zd.prefetch %h : tensor<2048xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Zd_EvictOp : Zd_Op<"evict", [SameOperandsAndResultType]> {
  let summary = "copy a device tensor to host memory (copy stream)";
  let description = [{
    ```mlir
    %h = zd.evict %d : tensor<2048xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Zd_NvmeReadOp : Zd_Op<"nvme_read", [SameOperandsAndResultType]> {
  let summary = "read a tensor kept on NVMe into a host staging buffer (io stream)";
  let description = [{
    The operand is a parameter shard, master part or moment that `--zplan-nvme`
    placed in the rank's NVMe file (space "nvme"); the result is a transient
    host tensor holding its bytes. The read is issued ahead of its use (the
    prefetch window) and completes asynchronously.

    ```mlir
    %h = zd.nvme_read %f : tensor<2048xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Zd_NvmeWriteOp : Zd_Op<"nvme_write", []> {
  let summary = "write a host tensor back to its place on NVMe (io stream)";
  let description = [{
    Overwrites the NVMe-resident `target` (space "nvme") with `value`, a host
    tensor of the same type: the optimizer's updated master part and moments,
    or a parameter shard after its update.

    ```mlir
    zd.nvme_write %f, %h : tensor<2048xf32>, tensor<2048xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$target, AnyRankedTensor:$value);
  let assemblyFormat =
      "$target `,` $value attr-dict `:` type($target) `,` type($value)";
  let hasVerifier = 1;
}

#endif // ZPLAN_DIALECTS_DIST_ZDOPS_TD
