//===- GraphOps.td - zg operations -------------------------*- tablegen -*-===//
//
// Every op works on statically shaped tensors. Semantics are ONNX's unless the
// description says otherwise; the runtime implements exactly what is written
// here.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_GRAPH_GRAPHOPS_TD
#define ZPLAN_DIALECTS_GRAPH_GRAPHOPS_TD

include "dialects/graph/GraphDialect.td"
include "dialects/graph/GradientOpInterface.td"
include "dialects/graph/TpShardingOpInterface.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Ops that carry a reverse-mode rule (GraphGradients.cpp).
def ZG_Gradient : DeclareOpInterfaceMethods<GradientOpInterface>;

// Every op states its tensor-parallel rule (TpShardingOpInterface.td): its
// own (GraphTpRules.cpp), the elementwise one, or computed whole.
def ZG_Tp : DeclareOpInterfaceMethods<TpShardingOpInterface>;
def ZG_TpElementwise : TraitList<[TpElementwise, TpShardingOpInterface]>;
def ZG_TpWhole : TraitList<[TpWhole, TpShardingOpInterface]>;
// A linear's bias is added once, after the row-parallel sum; the vocabulary
// ops offset ids by this rank's block of rows.
def ZG_TpLinear : DeclareOpInterfaceMethods<TpShardingOpInterface,
                                            ["getTpAddendAfterSum"]>;
def ZG_TpVocab : DeclareOpInterfaceMethods<TpShardingOpInterface,
                                           ["getTpVocabStride"]>;

def ZG_Tensor : StaticShapeTensorOf<[AnyType]>;
def ZG_BoolTensor : StaticShapeTensorOf<[I1]>;
def ZG_IntTensor : StaticShapeTensorOf<[I32, I64]>;

class ZG_Op<string mnemonic, list<Trait> traits = []>
    : Op<Graph_Dialect, mnemonic, traits> {
  // One generic-looking syntax for every op keeps the printed graph uniform
  // and easy to CHECK in lit tests.
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Elementwise unary ops.
//===----------------------------------------------------------------------===//

class ZG_UnaryOp<string mnemonic, string formula>
    : ZG_Op<mnemonic, [Pure, SameOperandsAndResultType, ZG_Gradient,
                         ZG_TpElementwise]> {
  let summary = "elementwise " # mnemonic;
  let description = "Elementwise: `result[i] = " # formula # "`. The result "
                    "has the operand's shape and element type.";
  let arguments = (ins ZG_Tensor:$input);
  let results = (outs ZG_Tensor:$result);
}

def ZG_NegOp : ZG_UnaryOp<"neg", "-input[i]">;
def ZG_ExpOp : ZG_UnaryOp<"exp", "exp(input[i])">;
def ZG_LogOp : ZG_UnaryOp<"log", "log(input[i])">;
def ZG_SqrtOp : ZG_UnaryOp<"sqrt", "sqrt(input[i])">;
def ZG_ReciprocalOp : ZG_UnaryOp<"reciprocal", "1 / input[i]">;
def ZG_TanhOp : ZG_UnaryOp<"tanh", "tanh(input[i])">;
def ZG_ErfOp : ZG_UnaryOp<"erf", "erf(input[i])">;
def ZG_SigmoidOp : ZG_UnaryOp<"sigmoid", "1 / (1 + exp(-input[i]))">;
def ZG_ReluOp : ZG_UnaryOp<"relu", "max(input[i], 0)">;
def ZG_CosOp : ZG_UnaryOp<"cos", "cos(input[i])">;
def ZG_SinOp : ZG_UnaryOp<"sin", "sin(input[i])">;
def ZG_AbsOp : ZG_UnaryOp<"abs", "|input[i]|">;
def ZG_SiluOp : ZG_UnaryOp<"silu", "input[i] * sigmoid(input[i])">;

def ZG_NotOp
    : ZG_Op<"not", [Pure, SameOperandsAndResultType, ZG_TpElementwise]> {
  let summary = "elementwise logical not";
  let description = "`result[i] = !input[i]` on i1 tensors (ONNX Not).";
  let arguments = (ins ZG_BoolTensor:$input);
  let results = (outs ZG_BoolTensor:$result);
}

def ZG_IsNanOp
    : ZG_Op<"is_nan", [Pure, SameOperandsAndResultShape, ZG_TpElementwise]> {
  let summary = "elementwise NaN test";
  let description = [{
    `result[i] = isnan(input[i])` (ONNX IsNaN; plan opcode is_nan). Exporters
    emit it after a softmax to zero fully masked rows; the attention
    recognition absorbs that pattern (zg.attention gives zeros for fully
    masked rows), and any other use runs as is.
  }];
  let arguments = (ins ZG_Tensor:$input);
  let results = (outs ZG_BoolTensor:$result);
}

def ZG_CastOp : ZG_Op<"cast", [Pure, SameOperandsAndResultShape, ZG_Gradient,
                               ZG_TpElementwise]> {
  let summary = "element type conversion";
  let description = [{
    Converts every element to the result's element type (ONNX Cast). Float to
    integer truncates toward zero; bool is 0 / 1; anything non-zero casts to
    true.
  }];
  let arguments = (ins ZG_Tensor:$input);
  let results = (outs ZG_Tensor:$result);
}

def ZG_GeluOp : ZG_Op<"gelu", [Pure, SameOperandsAndResultType, ZG_Gradient,
                               ZG_TpElementwise]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `approximate = "none"`: `0.5 x (1 + erf(x / sqrt(2)))`.
    `approximate = "tanh"`: `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
    Same semantics as ONNX Gelu (opset 20).
  }];
  let arguments = (ins ZG_Tensor:$input, StrAttr:$approximate);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise binary ops with numpy broadcasting.
//===----------------------------------------------------------------------===//

class ZG_BinaryOp<string mnemonic, string formula, Type resultType = ZG_Tensor>
    : ZG_Op<mnemonic, [Pure, ZG_Gradient, ZG_TpElementwise]> {
  let summary = "elementwise " # mnemonic # " with broadcasting";
  let description = "`result = " # formula # "` with numpy (ONNX "
                    "multidirectional) broadcasting of lhs and rhs to the "
                    "result's shape. Both operands have the same element type.";
  let arguments = (ins ZG_Tensor:$lhs, ZG_Tensor:$rhs);
  let results = (outs resultType:$result);
  let hasVerifier = 1;
}

def ZG_AddOp : ZG_BinaryOp<"add", "lhs + rhs">;
def ZG_SubOp : ZG_BinaryOp<"sub", "lhs - rhs">;
def ZG_MulOp : ZG_BinaryOp<"mul", "lhs * rhs">;
def ZG_DivOp : ZG_BinaryOp<"div", "lhs / rhs (integers truncate)">;
def ZG_PowOp : ZG_BinaryOp<"pow", "pow(lhs, rhs)">;
def ZG_MaxOp : ZG_BinaryOp<"max", "max(lhs, rhs)">;
def ZG_MinOp : ZG_BinaryOp<"min", "min(lhs, rhs)">;
def ZG_EqualOp : ZG_BinaryOp<"equal", "lhs == rhs", ZG_BoolTensor>;
def ZG_LessOp : ZG_BinaryOp<"less", "lhs < rhs", ZG_BoolTensor>;
def ZG_GreaterOp : ZG_BinaryOp<"greater", "lhs > rhs", ZG_BoolTensor>;
def ZG_LessEqualOp : ZG_BinaryOp<"less_equal", "lhs <= rhs", ZG_BoolTensor>;
def ZG_GreaterEqualOp
    : ZG_BinaryOp<"greater_equal", "lhs >= rhs", ZG_BoolTensor>;
def ZG_AndOp : ZG_BinaryOp<"and", "lhs && rhs (i1)", ZG_BoolTensor>;
def ZG_OrOp : ZG_BinaryOp<"or", "lhs || rhs (i1)", ZG_BoolTensor>;

def ZG_WhereOp : ZG_Op<"where", [Pure, ZG_Gradient, ZG_TpElementwise]> {
  let summary = "elementwise select with broadcasting";
  let description = [{
    `result = condition ? lhs : rhs`, all three broadcast (numpy rules) to the
    result's shape (ONNX Where).
  }];
  let arguments = (ins ZG_BoolTensor:$condition, ZG_Tensor:$lhs,
                   ZG_Tensor:$rhs);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra.
//===----------------------------------------------------------------------===//

def ZG_MatmulOp : ZG_Op<"matmul", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "matrix product with ONNX MatMul semantics";
  let description = [{
    numpy.matmul: a 1-D lhs is treated as [1, K] and a 1-D rhs as [K, 1] (the
    added dim is removed from the result); the leading (batch) dims of both
    broadcast. Result: [...batch, M, N].

    `trans_a` / `trans_b` (operands of rank >= 2 only) read that operand with
    its last two dims swapped, as the plan's matmul and BLAS do. The importer
    and the gradient rules never set them: --zplan-fold-transpose does, after
    sharding, in place of a zg.transpose of the operand or of the result.
  }];
  let arguments = (ins ZG_Tensor:$lhs, ZG_Tensor:$rhs,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_b);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_LinearOp : ZG_Op<"linear", [Pure, ZG_Gradient, ZG_TpLinear]> {
  let summary = "fully connected layer";
  let description = [{
    `result[..., n] = alpha * sum_k input[..., k] * W[k, n] + bias[n]`.
    `weight` is stored [K, N] when `trans_w` is false and [N, K] (PyTorch's
    nn.Linear layout) when it is true. `bias` is optional, of shape [N]. The
    input has rank >= 1; the result has the input's shape with the last dim
    replaced by N.

    Example:
    ```mlir
    %y = zg.linear %x, %w, %b {alpha = 1.0 : f64, trans_w = false}
        : (tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<256xf32>)
        -> tensor<2x16x256xf32>
    ```
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$weight,
                   Optional<ZG_Tensor>:$bias,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_w,
                   DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Normalisation and friends.
//===----------------------------------------------------------------------===//

def ZG_SoftmaxOp
    : ZG_Op<"softmax", [Pure, SameOperandsAndResultType, ZG_Gradient, ZG_Tp]> {
  let summary = "softmax along one axis";
  let description = [{
    `exp(x - max) / sum(exp(x - max))` along `axis` (opset-13 semantics; axis
    is normalised to [0, rank)).
  }];
  let arguments = (ins ZG_Tensor:$input, I64Attr:$axis);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_LayerNormOp : ZG_Op<"layer_norm", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "layer normalisation";
  let description = [{
    Normalises over the trailing dims [axis, rank): `(x - mean) /
    sqrt(var + epsilon) * scale + bias` with the biased variance, computed in
    fp32 (ONNX LayerNormalization, stash_type 1). `scale` and the optional
    `bias` have the shape of the normalised dims (or broadcast to it). `axis`
    is normalised to [0, rank).
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$scale,
                   Optional<ZG_Tensor>:$bias, I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_RmsNormOp : ZG_Op<"rms_norm", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "root mean square normalisation over the last axis";
  let description = [{
    `x / sqrt(mean(x^2 over the last axis) + epsilon) * scale`, with `scale`
    of shape [D] (optional: 1 when absent).
  }];
  let arguments = (ins ZG_Tensor:$input, Optional<ZG_Tensor>:$scale,
                   F64Attr:$epsilon);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

class ZG_ReduceOp<string mnemonic, string what>
    : ZG_Op<mnemonic, [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = what # " over axes";
  let description = "The " # what # " over `axes` (normalised to [0, rank), "
                    "sorted, unique; never empty). With `keepdims` the reduced "
                    "dims stay with size 1, otherwise they are removed.";
  let arguments = (ins ZG_Tensor:$input, DenseI64ArrayAttr:$axes,
                   BoolAttr:$keepdims);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_ReduceSumOp : ZG_ReduceOp<"reduce_sum", "sum">;
def ZG_ReduceMeanOp : ZG_ReduceOp<"reduce_mean", "mean">;
def ZG_ReduceMaxOp : ZG_ReduceOp<"reduce_max", "maximum">;

//===----------------------------------------------------------------------===//
// Data movement.
//===----------------------------------------------------------------------===//

def ZG_TransposeOp : ZG_Op<"transpose", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "permutation of dims";
  let description = "`result` dim i is `input` dim `perm[i]` (ONNX Transpose).";
  let arguments = (ins ZG_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_ReshapeOp : ZG_Op<"reshape", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "reshape to the result's static shape";
  let description = "Row-major reinterpretation; element counts are equal.";
  let arguments = (ins ZG_Tensor:$input);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_ConcatOp : ZG_Op<"concat", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "concatenation along one axis";
  let description = "Operands in order along `axis` (in [0, rank)).";
  let arguments = (ins Variadic<ZG_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_SliceOp : ZG_Op<"slice", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "strided slice";
  let description = [{
    One start and one step per input dim (starts in [0, dim), steps non-zero,
    negative steps walk backwards); the result's shape gives the number of
    elements taken along each dim: `result[i...] = input[starts + i * steps]`.
    The importer clamps ONNX Slice's starts/ends/axes into this form.
  }];
  let arguments = (ins ZG_Tensor:$input, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$steps);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_SplitOp : ZG_Op<"split", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "split into consecutive parts along one axis";
  let description = [{
    The results, in order, are consecutive pieces of `input` along `axis`;
    their sizes along `axis` come from the result types and add up to the
    input's dim. The planner lowers it to one `slice` per result.
  }];
  let arguments = (ins ZG_Tensor:$input, I64Attr:$axis);
  let results = (outs Variadic<ZG_Tensor>:$results);
  let hasVerifier = 1;
}

def ZG_GatherOp : ZG_Op<"gather", [Pure, ZG_Gradient, ZG_TpWhole]> {
  let summary = "ONNX Gather";
  let description = [{
    `result` has shape `data[:axis] + indices.shape + data[axis+1:]`; negative
    indices count from the end of dim `axis`.
  }];
  let arguments = (ins ZG_Tensor:$data, ZG_IntTensor:$indices, I64Attr:$axis);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_ExpandOp : ZG_Op<"expand", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "broadcast to the result's shape";
  let description = "numpy broadcasting of `input` to the result's shape, "
                    "which must equal the broadcast of the two shapes.";
  let arguments = (ins ZG_Tensor:$input);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_EmbeddingOp : ZG_Op<"embedding", [Pure, ZG_Gradient, ZG_TpVocab]> {
  let summary = "embedding lookup";
  let description = [{
    `result[ids..., :] = table[ids[ids...], :]` with table [V, D] and integer
    ids in [0, V): result shape `ids.shape + [D]`.
  }];
  let arguments = (ins ZG_Tensor:$table, ZG_IntTensor:$ids);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Further ONNX ops on run-time values. Exports of decoder families use them
// on values that do not fold (position arithmetic, cumulative masks, index
// selection); each maps onto the runtime op of the same name. They carry no
// reverse-mode rule: a train step that differentiates through one is refused.
//===----------------------------------------------------------------------===//

def ZG_FloorOp
    : ZG_Op<"floor", [Pure, SameOperandsAndResultType, ZG_TpElementwise]> {
  let summary = "elementwise floor";
  let description = "`result[i] = floor(input[i])` on float tensors (ONNX "
                    "Floor).";
  let arguments = (ins ZG_Tensor:$input);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_ModOp : ZG_Op<"mod", [Pure, ZG_TpElementwise]> {
  let summary = "elementwise remainder with broadcasting";
  let description = [{
    ONNX Mod. With `fmod` false (integers only) the remainder takes the
    divisor's sign, as Python's `%`; with `fmod` true it is C's fmod (the
    dividend's sign), the only form ONNX allows for floats.
  }];
  let arguments = (ins ZG_Tensor:$lhs, ZG_Tensor:$rhs, BoolAttr:$fmod);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

class ZG_PlainReduceOp<string mnemonic, string what>
    : ZG_Op<mnemonic, [Pure, ZG_Tp]> {
  let summary = what # " over axes";
  let description = "The " # what # " over `axes` (normalised to [0, rank), "
                    "sorted, unique; never empty). With `keepdims` the reduced "
                    "dims stay with size 1, otherwise they are removed.";
  let arguments = (ins ZG_Tensor:$input, DenseI64ArrayAttr:$axes,
                   BoolAttr:$keepdims);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_ReduceMinOp : ZG_PlainReduceOp<"reduce_min", "minimum">;
def ZG_ReduceProdOp : ZG_PlainReduceOp<"reduce_prod", "product">;

def ZG_CumSumOp : ZG_Op<"cumsum", [Pure, SameOperandsAndResultType, ZG_Tp]> {
  let summary = "cumulative sum along one axis";
  let description = [{
    ONNX CumSum along `axis` (in [0, rank)): `exclusive` leaves the element
    itself out of its sum, `reverse` sums from the end.
  }];
  let arguments = (ins ZG_Tensor:$input, I64Attr:$axis, BoolAttr:$exclusive,
                   BoolAttr:$reverse);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_RangeOp : ZG_Op<"range", [Pure, ZG_TpWhole]> {
  let summary = "arithmetic sequence";
  let description = [{
    ONNX Range: `result[i] = start + i * delta` for i in [0, n), with n the
    result's static length, which must equal `ceil((limit - start) / delta)`
    (the importer takes it from constant operands or from the model's
    declared shape). start, limit and delta are rank-0 of the result's type.
  }];
  let arguments = (ins ZG_Tensor:$start, ZG_Tensor:$limit, ZG_Tensor:$delta);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_GatherNdOp : ZG_Op<"gather_nd", [Pure, ZG_TpWhole]> {
  let summary = "ONNX GatherND";
  let description = [{
    The last dim of `indices` holds index tuples into the dims of `data`
    after the first `batch_dims` (which data and indices share); the result
    is `indices.shape[:-1] + data.shape[batch_dims + depth:]`. Negative
    indices count from the end.
  }];
  let arguments = (ins ZG_Tensor:$data, ZG_IntTensor:$indices,
                   I64Attr:$batch_dims);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_GatherElementsOp : ZG_Op<"gather_elements", [Pure, ZG_TpWhole]> {
  let summary = "ONNX GatherElements";
  let description = [{
    `result[i...] = data[i... with dim axis replaced by indices[i...]]`; the
    result has the indices' shape, indices have the data's rank and do not
    exceed it off `axis`. Negative indices count from the end.
  }];
  let arguments = (ins ZG_Tensor:$data, ZG_IntTensor:$indices,
                   I64Attr:$axis);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_TileOp : ZG_Op<"tile", [Pure, ZG_Tp]> {
  let summary = "ONNX Tile";
  let description = "The input repeated `repeats[k]` times along each dim k "
                    "(one non-negative repeat per dim).";
  let arguments = (ins ZG_Tensor:$input, DenseI64ArrayAttr:$repeats);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention.
//===----------------------------------------------------------------------===//

def ZG_AttentionOp : ZG_Op<"attention", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "scaled dot-product attention core";
  let description = [{
    q [B, Hq, S, D], k [B, Hkv, T, D], v [B, Hkv, T, D], optional additive
    mask broadcastable to [B, Hq, S, T]. Hq is a multiple of Hkv: query head h
    uses kv head h / (Hq / Hkv) (grouped-query attention).
    `scores = scale * q k^T + mask`; with `causal`, position j is masked for
    query i when j > i + (T - S). `result = softmax(scores) v` : [B, Hq, S, D].
    A fully masked row gives zeros.

    With a second result type, the op also returns `lse` [B, Hq, S] (f32):
    `log(sum_j exp(scores[i, j]))` per query row, over the unmasked keys.

    `seq_major` (bits 1 q, 2 k, 4 v, 8 result; absent = 0) stores an operand
    sequence-major: q [B, S, Hq, D], k and v [B, T, Hkv, D], result
    [B, S, Hq, D]. The shapes above are then the logical ones, dims 1 and 2
    swapped. --zplan-fold-transpose folds the head split / merge transposes
    around a forward attention into these bits; the lse keeps [B, Hq, S].

    `packed` (absent: none) reads operands out of a fused projection: nine
    ints, the offset, row stride and heads of q, k and v in turn. An operand
    with a row stride W > 0 is a sequence-major [B, S, W] tensor whose
    [B, S, heads, D] part (D the result's head dim) starts at that element
    offset of each row; one with row stride 0 is not packed, and its offset
    and heads are 0. --zplan-fold-transpose folds the last-dim split of a
    fused q/k/v projection (GPT-2's c_attn) into it; the plan carries it as
    the attention's ints 2..10 (plan 2.8).
  }];
  let arguments = (ins ZG_Tensor:$q, ZG_Tensor:$k, ZG_Tensor:$v,
                   Optional<ZG_Tensor>:$mask, F64Attr:$scale,
                   BoolAttr:$causal, OptionalAttr<I64Attr>:$seq_major,
                   OptionalAttr<ConfinedAttr<DenseI64ArrayAttr, [
                     DenseArrayCount<9>,
                     DenseArrayNonNegative<DenseI64ArrayAttr>]>>:$packed);
  let extraClassDeclaration = [{
    /// The seq_major bits (0 when absent).
    int64_t getSeqMajorBits() {
      return getSeqMajor() ? int64_t(*getSeqMajor()) : 0;
    }
    /// The logical head-major [B, H, S, D] shape of operand `bit` (1 q,
    /// 2 k, 4 v, 8 result) of shape `shape`.
    ::llvm::SmallVector<int64_t> headMajorShape(::llvm::ArrayRef<int64_t> shape,
                                                int64_t bit) {
      ::llvm::SmallVector<int64_t> s(shape);
      if ((getSeqMajorBits() & bit) && s.size() == 4)
        std::swap(s[1], s[2]);
      return s;
    }
  }];
  // The optional second result `lse` [B, Hq, S] (f32) is the log-sum-exp of
  // each query row's scaled, masked scores; the training step keeps it for
  // the flash-style backward (zg.attention_grad). A fully masked row has
  // lse = -inf.
  let results = (outs ZG_Tensor:$result, Optional<ZG_Tensor>:$lse);
  let hasVerifier = 1;
}

def ZG_RotaryOp : ZG_Op<"rotary", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "rotary position embedding (Hugging Face rotate_half form)";
  let description = [{
    x [..., D] with D even, h = D / 2; `cos` and `sin` have one shape that
    broadcasts (numpy rules) to x's, with a last dim of D. With c and s the
    tables broadcast to x:

        result[..., i]     = x[..., i] c[..., i]     - x[..., i + h] s[..., i]
        result[..., i + h] = x[..., i + h] c[..., i + h] + x[..., i] s[..., i + h]

    for i < h, that is `x * cos + rotate_half(x) * sin` with
    `rotate_half(x) = concat(-x[..., h:], x[..., :h])` (the Hugging Face
    exporters' form, which --zg-recognise-rotary folds into this op).

    With `inverse`, the op applies the transposed map, the vector-Jacobian
    product of the forward one with respect to x:

        result[..., i]     = x[..., i] c[..., i]     + x[..., i + h] s[..., i + h]
        result[..., i + h] = x[..., i + h] c[..., i + h] - x[..., i] s[..., i]

    When the tables are a rotation (c and s repeat over the two halves, and
    c^2 + s^2 = 1), that is the rotation by the opposite angle. The result
    has x's type.

    With `seq_major`, x and the result are a rank-4 [B, S, H, D] stored
    sequence-major, while the op means the rotation of its head-major view
    [B, H, S, D]: the tables broadcast to that view (llama's [1, 1, S, D] or
    [B, 1, S, D]), so each (b, s, h) row takes the table row of position s.
    --zplan-fold-transpose sets it when it folds the head split transpose
    in front of a rotary whose only reader is a forward attention (whose q
    or k then becomes sequence-major too).

    Example:
    ```mlir
    %y = zg.rotary %x, %cos, %sin
        : (tensor<2x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>)
        -> tensor<2x4x8x16xf32>
    ```
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$cos, ZG_Tensor:$sin,
                   DefaultValuedAttr<BoolAttr, "false">:$inverse,
                   DefaultValuedAttr<BoolAttr, "false">:$seq_major);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_CausalMaskOp : ZG_Op<"causal_mask", [Pure, ZG_TpWhole]> {
  let summary = "additive causal mask";
  let description = [{
    Result [..., S, T] (rank >= 2): 0 where j <= i + (T - S), else
    `masked_value` (e.g. -inf or the dtype's lowest value). The importer
    produces it instead of a large folded constant; the attention recognition
    turns it into `causal = true`. It never reaches the runtime.
  }];
  let arguments = (ins F64Attr:$masked_value);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Parameters and constants.
//===----------------------------------------------------------------------===//

def ZG_ConstantOp : ZG_Op<"constant", [Pure, ZG_TpWhole]> {
  let summary = "constant tensor";
  let description = "A small constant; `value`'s type is the result type.";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_WeightOp : ZG_Op<"weight", [Pure, ZG_TpWhole]> {
  let summary = "model parameter";
  let description = [{
    A parameter of the model, by reference: `file` is the external-data path
    as written in the model (relative to the model's folder), `offset` and
    `length` the byte range there, holding the result's element type in
    little-endian row-major order. A small inline initializer has an empty
    `file` and its values in `value`. `name` is the ONNX initializer name (for
    reports only: nothing matches on it).

    Example:
    ```mlir
    %w = zg.weight {file = "model.onnx.data", length = 16384 : i64,
                    name = "w", offset = 0 : i64} : () -> tensor<64x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, StrAttr:$file, I64Attr:$offset,
                   I64Attr:$length, OptionalAttr<ElementsAttr>:$value);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Training: persistent state and its in-place updates.
//
// docs/training-contract.md is the agreement these ops implement. Persistent
// values are the results of zg.weight, zd.weight_shard and zg.state; the only
// writes to them are zg.assign, zg.adamw and zg.accumulate, which have no
// results and are ordered after every earlier read of their targets.
//===----------------------------------------------------------------------===//

def ZG_StateOp : ZG_Op<"state", [Pure, ZG_Tp]> {
  let summary = "persistent training state that is not a parameter";
  let description = [{
    A tensor that outlives a program run: an fp32 master weight, an Adam
    moment, a gradient-accumulation buffer, the loss scale, a counter. `kind`
    is one of `master`, `moment1`, `moment2`, `grad`, `scalar`; `of` names
    the parameter it belongs to (empty for none); `init` says how the `@init`
    program fills it: `"zeros"`, `"copy_of_param"` (the parameter named by
    `of`, converted to the result's element type) or a float constant. Two
    programs that name the same state (same `name`) mean the same bytes.

    Example:
    ```mlir
    %m = zg.state {init = "zeros", kind = "moment1", name = "w.exp_avg",
                   of = "w"} : () -> tensor<64x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, StrAttr:$kind,
                   DefaultValuedStrAttr<StrAttr, "">:$of, AnyAttr:$init);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_AssignOp : ZG_Op<"assign", [ZG_Tp]> {
  let summary = "copy a value into persistent storage";
  let description = [{
    Copies `value` into the storage of the persistent `target` (a zg.weight,
    zd.weight_shard or zg.state result). Shapes are equal; when the element
    types differ the value is converted (an fp32 master weight assigned to a
    bf16 parameter). No result: the op exists for its write.
  }];
  let arguments = (ins ZG_Tensor:$target, ZG_Tensor:$value);
  let hasVerifier = 1;
}

def ZG_AccumulateOp : ZG_Op<"accumulate", [ZG_Tp]> {
  let summary = "add a value into persistent storage";
  let description = [{
    `target += value` in place, for gradient accumulation over micro-batches.
    `target` is persistent; shapes and element types are equal.
  }];
  let arguments = (ins ZG_Tensor:$target, ZG_Tensor:$value);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Generation (docs/generation.md): the KV cache and greedy selection.
//===----------------------------------------------------------------------===//

def ZG_KvWriteOp : ZG_Op<"kv_write", [ZG_Tp]> {
  let summary = "write new keys or values into a persistent KV cache";
  let description = [{
    `cache` [B, H, L, D] is a persistent `zg.state` of kind `kv_cache`;
    `value` [B, H, S, D] holds the keys (or values) of S new positions and
    `pos` [B] (i64) the cached length of each sequence: in place,
    `cache[b, h, pos[b] + j, :] = value[b, h, j, :]` for j < S where
    pos[b] + j < L (rows past the cache are dropped). No result: the op exists
    for its write, like zg.accumulate.
  }];
  let arguments = (ins ZG_Tensor:$cache, ZG_Tensor:$value, ZG_IntTensor:$pos);
  let hasVerifier = 1;
}

def ZG_CachedAttentionOp : ZG_Op<"cached_attention", [Pure, ZG_Tp]> {
  let summary = "attention of new queries over a KV cache";
  let description = [{
    q [B, Hq, S, D], k and v caches [B, Hkv, L, D], pos [B] (i64): query row
    i of sequence b sits at position pos[b] + i and attends to the cached
    keys t <= pos[b] + i (causal over the cache; the caller has written the
    new keys at pos[b] .. pos[b] + S - 1 first). `result = softmax(scale *
    q k^T) v` : [B, Hq, S, D]; Hq is a multiple of Hkv (query head h uses kv
    head h / (Hq / Hkv)).
  }];
  let arguments = (ins ZG_Tensor:$q, ZG_Tensor:$k, ZG_Tensor:$v,
                   ZG_IntTensor:$pos, F64Attr:$scale);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_ArgmaxOp : ZG_Op<"argmax", [Pure, ZG_TpWhole]> {
  let summary = "index of the largest element along the last axis";
  let description = [{
    x [..., V] (float) -> [...] (i64): the first index of the maximum of each
    row (torch.argmax's tie rule), greedy decoding's next token.
  }];
  let arguments = (ins ZG_Tensor:$input);
  let results = (outs ZG_IntTensor:$result);
  let hasVerifier = 1;
}

def ZG_TakeRowsOp : ZG_Op<"take_rows", [Pure, ZG_TpWhole]> {
  let summary = "one row per batch entry, at a per-entry index";
  let description = [{
    x [B, S, ...], index [B] (i64) -> [B, ...]: `result[b] = x[b, index[b]]`
    (the logits of each sequence's last real position).
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_IntTensor:$index);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_AdamwOp : ZG_Op<"adamw", [ZG_Tp]> {
  let summary = "one AdamW step on a parameter, in place";
  let description = [{
    torch.optim.AdamW exactly, with t = `step` (1-based) and
    g = grad * grad_scale:

        param = param - lr * weight_decay * param
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        param = param - lr * (m / (1 - beta1^t))
                      / (sqrt(v / (1 - beta2^t)) + eps)

    `param`, `m` and `v` are persistent and updated in place; `grad` has
    their shape. `lr` and `grad_scale` are float scalars (rank 0), `step` an
    integer scalar.

    Example:
    ```mlir
    zg.adamw %w, %g, %m, %v, %lr, %step, %scale
        {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64,
         weight_decay = 0.01 : f64}
        : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>,
           tensor<f32>, tensor<i64>, tensor<f32>) -> ()
    ```
  }];
  let arguments = (ins ZG_Tensor:$param, ZG_Tensor:$grad, ZG_Tensor:$m,
                   ZG_Tensor:$v, ZG_Tensor:$lr, ZG_Tensor:$step,
                   ZG_Tensor:$grad_scale, F64Attr:$beta1, F64Attr:$beta2,
                   F64Attr:$eps, F64Attr:$weight_decay);
  let hasVerifier = 1;
}

def ZG_SumSquaresOp : ZG_Op<"sum_squares", [Pure, ZG_Gradient, ZG_Tp]> {
  let summary = "sum of squares of every element";
  let description = [{
    `result = sum_i input[i]^2` as an f32 scalar (rank 0), accumulated in
    double. The global gradient norm is the square root of the sum of these
    over every gradient.
  }];
  let arguments = (ins ZG_Tensor:$input);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Generation: drawing the next token.
//===----------------------------------------------------------------------===//

def ZG_SampleOp : ZG_Op<"sample", [Pure, ZG_TpWhole]> {
  let summary = "draws one token id per row of logits";
  let description = [{
    `ids[b]` is drawn from `softmax(logits[b] / temperature)` restricted to
    the `top_k` largest logits (0: all) and then to the smallest prefix of
    those, largest first, whose probability reaches `top_p` (1: all).
    `temperature` 0 is greedy: the arg max, the lowest index on ties. The
    draw is a pure function of its operands and the row: a counter-based
    generator (Philox4x32-10) keyed by `seed` at counter (`b`, `step`), so
    every rank and every backend draws the same ids, and the op may be
    recomputed. The logits must be whole (a vocabulary-parallel producer is
    gathered first). docs/sampling.md gives the exact procedure.

    Operands: logits [B, V] float; temperature and top_p f32 scalars;
    top_k, seed and step i64 scalars (rank 0). Result: ids [B] i64.
  }];
  let arguments = (ins ZG_Tensor:$logits, ZG_Tensor:$temperature,
                   ZG_Tensor:$top_k, ZG_Tensor:$top_p, ZG_Tensor:$seed,
                   ZG_Tensor:$step);
  let results = (outs ZG_Tensor:$ids);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Training: gradient ops the backward needs beyond the forward ops.
//
// A `zd.vocab_stride` attribute on embedding_grad, label_pick and
// label_pick_grad means the same as on zg.embedding: the vocabulary is split
// over tp and this rank holds rows [tp_index * vocab_stride, + V_local).
// Absent, the op sees the whole vocabulary.
//===----------------------------------------------------------------------===//

class ZG_ActivationGradOp<string mnemonic, string forward>
    : ZG_Op<mnemonic, [Pure, SameOperandsAndResultType, ZG_TpElementwise]> {
  let summary = "gradient of " # forward;
  let description = "`dx = dy * f'(x)` where f is " # forward # "; x, dy and "
                    "dx have one type.";
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$grad);
  let results = (outs ZG_Tensor:$result);
}

def ZG_SiluGradOp : ZG_ActivationGradOp<"silu_grad", "zg.silu">;

def ZG_GeluGradOp : ZG_Op<"gelu_grad", [Pure, SameOperandsAndResultType,
                                         ZG_TpElementwise]> {
  let summary = "gradient of zg.gelu";
  let description = [{
    `dx = dy * gelu'(x)` for the erf form (`approximate = "none"`, plan
    opcode gelu_erf_grad) or the tanh form (`"tanh"`, gelu_tanh_grad).
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$grad,
                   StrAttr:$approximate);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_SoftmaxGradOp : ZG_Op<"softmax_grad",
                             [Pure, SameOperandsAndResultType, ZG_Tp]> {
  let summary = "gradient of zg.softmax from its output";
  let description = [{
    `dx = y * (dy - sum(dy * y, axis))` where y is the softmax's result.
  }];
  let arguments = (ins ZG_Tensor:$output, ZG_Tensor:$grad, I64Attr:$axis);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_LayerNormGradOp : ZG_Op<"layer_norm_grad", [Pure, ZG_TpWhole]> {
  let summary = "gradient of zg.layer_norm";
  let description = [{
    From the forward input x, the scale and dy: dx (x's type), dscale and
    dbias (scale's type; summed over the leading dims [0, axis)). The scale
    has exactly the shape of the normalised dims [axis, rank). The bias does
    not enter the gradients, so it is no operand.
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$scale, ZG_Tensor:$grad,
                   I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs ZG_Tensor:$grad_input, ZG_Tensor:$grad_scale,
                  ZG_Tensor:$grad_bias);
  let hasVerifier = 1;
}

def ZG_RmsNormGradOp : ZG_Op<"rms_norm_grad", [Pure, ZG_TpWhole]> {
  let summary = "gradient of zg.rms_norm";
  let description = [{
    From the forward input x, the scale [D] and dy: dx (x's type) and dscale
    (scale's type, summed over every leading dim). Normalisation is over the
    last axis.
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$scale, ZG_Tensor:$grad,
                   F64Attr:$epsilon);
  let results = (outs ZG_Tensor:$grad_input, ZG_Tensor:$grad_scale);
  let hasVerifier = 1;
}

def ZG_AttentionGradOp : ZG_Op<"attention_grad", [Pure, ZG_Tp]> {
  let summary = "flash-style gradient of zg.attention";
  let description = [{
    From q, k, v, the forward output `out`, its gradient `dout`, the forward's
    `lse` [B, Hq, S] (f32) and the optional mask, with the forward's `scale`
    and `causal`: dq (q's type), dk (k's), dv (v's). The probabilities are
    recomputed as exp(scores - lse); dk and dv sum over the query heads that
    share a kv head (grouped-query attention). The mask gets no gradient.
  }];
  let arguments = (ins ZG_Tensor:$q, ZG_Tensor:$k, ZG_Tensor:$v,
                   ZG_Tensor:$out, ZG_Tensor:$grad, ZG_Tensor:$lse,
                   Optional<ZG_Tensor>:$mask, F64Attr:$scale,
                   BoolAttr:$causal);
  let results = (outs ZG_Tensor:$grad_q, ZG_Tensor:$grad_k,
                  ZG_Tensor:$grad_v);
  let hasVerifier = 1;
}

def ZG_EmbeddingGradOp : ZG_Op<"embedding_grad", [Pure, ZG_TpVocab]> {
  let summary = "gradient of zg.embedding's table";
  let description = [{
    ids (integer) and dy [..ids, D] give dtable [V, D]: zero, then every row
    of dy is added into the table row its id names. Under tp (see
    `zd.vocab_stride` above) ids outside this rank's rows are skipped.
  }];
  let arguments = (ins ZG_IntTensor:$ids, ZG_Tensor:$grad);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_LabelPickOp : ZG_Op<"label_pick", [Pure, ZG_Gradient, ZG_TpVocab]> {
  let summary = "the logit of each row's label";
  let description = [{
    logits [N, V], labels [N] (integer) give out [N]:
    `out[n] = logits[n, labels[n]]`, and 0 when `labels[n] == ignore_index`.
    Under tp (`zd.vocab_stride`) a label outside this rank's rows also gives
    0, so that the sum over tp is the picked logit.
  }];
  let arguments = (ins ZG_Tensor:$logits, ZG_IntTensor:$labels,
                   I64Attr:$ignore_index);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_LabelPickGradOp : ZG_Op<"label_pick_grad", [Pure, ZG_TpVocab]> {
  let summary = "gradient of zg.label_pick";
  let description = [{
    labels [N] and dy [N] give dlogits [N, V]: zero except
    `dlogits[n, labels[n]] = dy[n]` for labels that are not `ignore_index`
    (and, under tp, in this rank's rows).
  }];
  let arguments = (ins ZG_IntTensor:$labels, ZG_Tensor:$grad,
                   I64Attr:$ignore_index);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fused ops: made by --zplan-fuse (compiler/plan/Fuse.cpp) just before the
// schedule, so that the plan holds the fused steps and the memory plan their
// buffers. Nothing before that pass creates or expects them.
//===----------------------------------------------------------------------===//

def ZG_LinearGeluOp : ZG_Op<"linear_gelu", [Pure, ZG_TpWhole]> {
  let summary = "zg.linear followed by tanh GELU, as one step";
  let description = [{
    `gelu_tanh(alpha * input x W + bias)`: the operands and attributes of
    `zg.linear`, the result that of the GELU that followed it (one matrix
    product with the GELU epilogue on the GPU).
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$weight,
                   Optional<ZG_Tensor>:$bias,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_w,
                   DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs ZG_Tensor:$result);
}

def ZG_ResidualNormOp : ZG_Op<"residual_norm", [Pure, ZG_TpWhole]> {
  let summary = "residual add followed by a last-axis layer or RMS norm";
  let description = [{
    `sum = input + residual` (equal shapes, no broadcasting) and
    `normed = norm(sum) * scale (+ bias)` over the last axis, both results
    written by one step: `kind` is "layer" (zg.layer_norm, bias optional) or
    "rms" (zg.rms_norm, no bias).
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$residual,
                   ZG_Tensor:$scale, Optional<ZG_Tensor>:$bias,
                   StrAttr:$kind, F64Attr:$epsilon);
  let results = (outs ZG_Tensor:$sum, ZG_Tensor:$normed);
}

def ZG_LinearResidualOp : ZG_Op<"linear_residual", [Pure, ZG_TpWhole]> {
  let summary = "zg.linear followed by the residual add, as one step";
  let description = [{
    `alpha * input x W + bias + residual`: the operands and attributes of
    `zg.linear`, and the residual the `zg.add` after it added (the result's
    type: no broadcasting). One matrix product on the GPU whose epilogue
    adds the residual (cuBLASLt's C operand with beta = 1), so that the
    product's own result is never written and read back; the sum is rounded
    once, from fp32, where the unfused steps rounded the product and then
    the sum.

    Example:
    ```mlir
    %s = zg.linear_residual %x, %w, %r {alpha = 1.0 : f64, trans_w = true}
        : (tensor<4x64xbf16>, tensor<32x64xbf16>, tensor<4x32xbf16>)
        -> tensor<4x32xbf16>
    ```
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$weight,
                   ZG_Tensor:$residual, Optional<ZG_Tensor>:$bias,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_w,
                   DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_GatedOp : ZG_Op<"gated", [Pure, SameOperandsAndResultType, ZG_TpWhole]> {
  let summary = "act(gate) * up, as one step";
  let description = [{
    `act(gate) * up` elementwise with equal shapes; `act` is "silu",
    "gelu_tanh" or "gelu_erf" (the gated MLP's activation and product).
  }];
  let arguments = (ins ZG_Tensor:$gate, ZG_Tensor:$up, StrAttr:$act);
  let results = (outs ZG_Tensor:$result);
}

def ZG_LinearMultiOp : ZG_Op<"linear_multi", [Pure, ZG_TpWhole]> {
  let summary = "several bias-free linears of one input, as one step";
  let description = [{
    `result_i = alpha * input x weights_i` for two to four weights that share
    the input, `trans_w`, `alpha` and the element type (llama's q / k / v
    projections of one layer's normed activation). Written by
    `--zplan-decode-products` in a decode program, where the input has few
    rows: one few-row kernel launch reads every weight (kernels/cuda/
    skinny_gemm.cu), where three cuBLASLt products each paid their own fixed
    cost. Each result is what `zg.linear` of its weight gives.
  }];
  let arguments = (ins ZG_Tensor:$input, Variadic<ZG_Tensor>:$weights,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_w,
                   DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs Variadic<ZG_Tensor>:$results);
  let hasVerifier = 1;
}

def ZG_LinearGatedOp : ZG_Op<"linear_gated", [Pure, ZG_TpWhole]> {
  let summary = "act(input x gate_weight) * (input x up_weight), as one step";
  let description = [{
    The gated MLP's two bias-free projections of one input and their
    `zg.gated` combination: `act(alpha * input x gate) * (alpha * input x
    up)`, `act` "silu", "gelu_tanh" or "gelu_erf". Written by
    `--zplan-decode-products` in a decode program (few rows): one few-row
    kernel launch reads both weights and writes the gated product, where the
    unfused step ran two products and an elementwise kernel. The CPU
    reference rounds as the unfused ops do (each product, then the
    activation, then the product of the two, each to the storage type).
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$gate_weight,
                   ZG_Tensor:$up_weight, StrAttr:$act,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_w,
                   DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_RopeKvWriteOp : ZG_Op<"rope_kv_write", [ZG_TpWhole]> {
  let summary = "a decode step's rotary embedding of q and k and its cache writes, as one step";
  let description = [{
    `result = rotary(q, cos, sin)`; in place, `k_cache[b, h, pos[b] + j] =
    rotary(k, cos, sin)[b, h, j]` and `v_cache[b, h, pos[b] + j] = v[b, h,
    j]` for j < S where pos[b] + j < L: the two `zg.rotary` (forward, head-
    major) and two `zg.kv_write` of one attention layer in a decode program.
    q [B, Hq, S, D], k and v [B, Hkv, S, D], the caches [B, Hkv, L, D]
    (persistent `kv_cache` states), cos and sin [1 or B, 1, 1 or S, D].
    Written by `--zplan-decode-products`, so that the decode step runs one
    kernel where it ran four; each value is rounded as the unfused ops round
    it.
  }];
  let arguments = (ins ZG_Tensor:$q, ZG_Tensor:$k, ZG_Tensor:$v,
                   ZG_Tensor:$cos, ZG_Tensor:$sin, ZG_Tensor:$k_cache,
                   ZG_Tensor:$v_cache, ZG_IntTensor:$pos);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_RopeAttentionOp : ZG_Op<"rope_attention", [ZG_TpWhole]> {
  let summary = "a decode step's rotary embedding, cache writes and attention, as one step";
  let description = [{
    `zg.rope_kv_write` then `zg.cached_attention` of its rotated q: in place,
    `k_cache[b, h, pos[b] + j] = rotary(k, cos, sin)[b, h, j]` and
    `v_cache[b, h, pos[b] + j] = v[b, h, j]` for j < S where pos[b] + j < L;
    `result = cached_attention(rotary(q, cos, sin), k_cache, v_cache, pos,
    scale)`. Operands and types as `zg.rope_kv_write`'s; the result is
    shaped and typed like q. Written by `--zplan-decode-products`
    (`rope-attention`), so that a decode layer's attention is one kernel: the
    attention's blocks rotate the queries they read and the new keys of their
    own range of the cache, which they write; each value is rounded as the
    unfused ops round it.
  }];
  let arguments = (ins ZG_Tensor:$q, ZG_Tensor:$k, ZG_Tensor:$v,
                   ZG_Tensor:$cos, ZG_Tensor:$sin, ZG_Tensor:$k_cache,
                   ZG_Tensor:$v_cache, ZG_IntTensor:$pos, F64Attr:$scale);
  let results = (outs ZG_Tensor:$result);
  let hasVerifier = 1;
}

def ZG_DecodeLayerOp : ZG_Op<"decode_layer", [ZG_TpWhole]> {
  let summary = "a llama-style decoder layer at decode, as one step";
  let description = [{
    One decoder layer of a decode step (one new token per sequence, S = 1),
    the composition of the steps it replaces, each value rounded where they
    round it:
      sum1 = input + residual (no residual: sum1 = input);
      q, k, v = rms_norm(sum1) * norm1 x wq, wk, wv;
      in place, k_cache[b, :, pos[b]] = rotary(k), v_cache[b, :, pos[b]] = v;
      attn = cached_attention(rotary(q), k_cache, v_cache, pos, scale);
      o = attn x wo; residual_out = sum1 + o;
      h = act(rms_norm(residual_out) * norm2 x w_gate) * (... x w_up);
      result = h x w_down.
    input and residual [B, 1, d] (or [B, d]); the caches [B, Hkv, L, Dh]
    (kv_cache states); cos and sin [1 or B, 1, 1, Dh]; weights W [K, N]
    (wq [d, Hq Dh], wk and wv [d, Hkv Dh], wo [Hq Dh, d], w_gate and w_up
    [d, F], w_down [F, d]); `sync` a zero-initialised i32 state that the GPU
    kernel's grid barrier counts in and leaves zero. Written by
    `--zplan-decode-products` (`decode-layer`), so that the GPU runs a layer
    as one persistent kernel (kernels/cuda/decode_layer.cu).
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$k_cache,
                   ZG_Tensor:$v_cache, ZG_IntTensor:$sync, ZG_IntTensor:$pos,
                   ZG_Tensor:$cos, ZG_Tensor:$sin, ZG_Tensor:$norm1,
                   ZG_Tensor:$wq, ZG_Tensor:$wk, ZG_Tensor:$wv, ZG_Tensor:$wo,
                   ZG_Tensor:$norm2, ZG_Tensor:$w_gate, ZG_Tensor:$w_up,
                   ZG_Tensor:$w_down, Optional<ZG_Tensor>:$residual,
                   F64Attr:$epsilon, F64Attr:$scale, StrAttr:$act);
  let results = (outs ZG_Tensor:$result, ZG_Tensor:$residual_out);
  let hasVerifier = 1;
}

def ZG_NormProductsOp : ZG_Op<"norm_products", [Pure, ZG_TpWhole]> {
  let summary = "residual add and RMS norm folded into the few-row products that read it";
  let description = [{
    `sum = input + residual` (equal shapes), `normed = rms_norm(sum) *
    scale` over the last axis (epsilon), then the products of `normed`: with
    `act` empty, `products_i = alpha * normed x weights_i` for one to four
    weights (as zg.linear_multi); with `act` "silu", "gelu_tanh" or
    "gelu_erf", one product `act(alpha * normed x weights_0) * (alpha *
    normed x weights_1)` (as zg.linear_gated). Written by
    `--zplan-decode-products` in a decode program (at most 4 rows, W [K, N]
    with N a multiple of 8), where the residual_norm step (or the add and
    rms_norm) before a layer's q / k / v or gate / up products then costs no
    kernel of its own: the few-row kernel normalises the rows in each block.
    Each value is rounded as the unfused ops round it.
  }];
  let arguments = (ins ZG_Tensor:$input, ZG_Tensor:$residual,
                   ZG_Tensor:$scale, Variadic<ZG_Tensor>:$weights,
                   DefaultValuedAttr<StrAttr, "\"\"">:$act, F64Attr:$epsilon,
                   DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs ZG_Tensor:$sum, Variadic<ZG_Tensor>:$products);
  let hasVerifier = 1;
}

#endif // ZPLAN_DIALECTS_GRAPH_GRAPHOPS_TD
