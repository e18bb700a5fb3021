//===- Passes.td - recognition passes on zg ----------------*- tablegen -*-===//
//
// Each pass rewrites one structural pattern of generic zg ops into the
// recognised op. Matches look at op kinds, shapes and constant values only,
// never at names.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_TRANSFORMS_PASSES_TD
#define ZPLAN_COMPILER_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def RecogniseSilu : Pass<"zg-recognise-silu", "mlir::func::FuncOp"> {
  let summary = "x * sigmoid(x) -> zg.silu";
  let description = [{
    Rewrites `zg.mul(x, zg.sigmoid(x))` (either operand order) into
    `zg.silu(x)`. A sigmoid with other users stays for them.

    Before: `%s = zg.sigmoid %x` ; `%y = zg.mul %x, %s`
    After:  `%y = zg.silu %x`
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numSilu", "num-silu", "SiLUs recognised">];
}

def RecogniseRotary : Pass<"zg-recognise-rotary", "mlir::func::FuncOp"> {
  let summary = "x * cos + rotate_half(x) * sin -> zg.rotary";
  let description = [{
    Recognises the rotary position embedding as Hugging Face writes it:
    `x * cos + rotate_half(x) * sin` with
    `rotate_half(x) = concat(-x[..., h:], x[..., :h], axis = -1)` (the halves
    as zg.slice or zg.split results of x itself, h half of x's last dim),
    both products and the sum in either operand order, and cos / sin of one
    type that broadcasts to x with x's last dim. It becomes
    `zg.rotary(x, cos, sin)`. A partial rotary (halves sliced from a tensor
    wider than the rotated part) and the interleaved form stay as they are.

    Before: `%c = zg.mul %x, %cos` ; `%r = zg.concat(zg.neg(%x[h:]), %x[:h])` ;
            `%y = zg.add %c, zg.mul(%r, %sin)`
    After:  `%y = zg.rotary %x, %cos, %sin`
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numRotary", "num-rotary", "rotary embeddings recognised">];
}

def RecogniseGelu : Pass<"zg-recognise-gelu", "mlir::func::FuncOp"> {
  let summary = "tanh and erf forms of GELU -> zg.gelu";
  let description = [{
    Recognises `0.5 * x * (1 + erf(x / sqrt(2)))` (also `x * (1 / sqrt(2))`
    inside erf, and 0.5 applied to x, to the bracket or to the product) as
    `zg.gelu {approximate = "none"}`, and
    `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))` (x^3 as
    pow(x, 3) or x * x * x) as `zg.gelu {approximate = "tanh"}`. Constants
    must match to 1e-4 relative.

    Before: `%e = zg.erf(%x * 0.7071)` ; `%y = (%x * 0.5) * (%e + 1)`
    After:  `%y = zg.gelu %x {approximate = "none"}`
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numGelu", "num-gelu", "GELUs recognised">];
}

def RecogniseRmsNorm : Pass<"zg-recognise-rms-norm", "mlir::func::FuncOp"> {
  let summary = "decomposed RMS norm -> zg.rms_norm";
  let description = [{
    Recognises `x * reciprocal(sqrt(reduce_mean(x^2, last axis) + eps))`
    and the variants `x / sqrt(...)`, `x^2` as `x * x`, followed by an
    optional multiplication with a scale of shape [D] (either side), and
    rewrites it to `zg.rms_norm(x, scale) {epsilon}`.

    Before: `%p = zg.pow %x, 2` ; `%m = zg.reduce_mean %p {axes = [-1]}` ;
            `%r = zg.reciprocal(zg.sqrt(%m + eps))` ; `%y = %w * (%x * %r)`
    After:  `%y = zg.rms_norm %x, %w {epsilon = eps}`
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numRmsNorm", "num-rms-norm", "RMS norms recognised">];
}

def RecogniseLayerNorm : Pass<"zg-recognise-layer-norm", "mlir::func::FuncOp"> {
  let summary = "decomposed layer norm -> zg.layer_norm";
  let description = [{
    Recognises `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)` over the
    last axis (the division also as multiplication with the reciprocal), with
    an optional scale multiplication and bias addition, and rewrites it to
    `zg.layer_norm(x, scale, bias) {axis = rank - 1, epsilon}`. Without a
    scale, a constant 1 scale is created.

    Before: `%d = %x - reduce_mean(%x)` ; `%v = reduce_mean(%d * %d)` ;
            `%y = %d / sqrt(%v + eps) * %g + %b`
    After:  `%y = zg.layer_norm %x, %g, %b {axis = 2, epsilon = eps}`
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numLayerNorm", "num-layer-norm", "layer norms recognised">];
}

def RecogniseSoftmax : Pass<"zg-recognise-softmax", "mlir::func::FuncOp"> {
  let summary = "exp(x - max) / sum(exp(x - max)) -> zg.softmax";
  let description = [{
    Recognises the decomposed softmax over one axis, with or without the
    max subtraction: `e = exp(x - reduce_max(x, a))`,
    `y = e / reduce_sum(e, a)` (keepdims), and rewrites it to
    `zg.softmax(x) {axis = a}`.
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numSoftmax", "num-softmax", "softmaxes recognised">];
}

def RecogniseLinear : Pass<"zg-recognise-linear", "mlir::func::FuncOp"> {
  let summary = "matmul by a weight (+ bias) -> zg.linear";
  let description = [{
    Rewrites `zg.matmul(x, W)` where W is a 2-D `zg.weight` ([K, N]) or a
    `zg.transpose` of one ([N, K] stored, `trans_w = true`), with an
    optional following `zg.add` of a 1-D bias [N] (either operand order) and
    an optional scalar constant multiplication (alpha), into `zg.linear`.
    A `zg.reshape` that flattens the leading dims of x before a 2-D linear
    and one that restores them afterwards (the Gemm form of 3-D
    activations) are folded away.

    Before: `%t = zg.transpose %w {perm = [1, 0]}` ; `%y = zg.matmul %x, %t`
    After:  `%y = zg.linear %x, %w {trans_w = true}`
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numLinear", "num-linear", "linear layers recognised">];
}

def RecogniseAttention : Pass<"zg-recognise-attention", "mlir::func::FuncOp"> {
  let summary = "softmax(scale * q k^T + mask) v -> zg.attention";
  let description = [{
    Recognises the attention core on 4-D tensors:
    `p = softmax(scale * matmul(q, kT) + mask, axis = -1)`,
    optionally `p = where(is_nan(p), 0, p)`, then `matmul(p, v)`.
    kT is `transpose(k, [0, 1, 3, 2])`, or `transpose(x, [0, 2, 3, 1])` of a
    [B, T, H, D] tensor. The scale may be a multiplication or division by a
    scalar constant after the product or multiplications of q and kT.
    The mask may be additive (`zg.causal_mask` gives `causal = true`, an
    all-zero constant is dropped, anything else becomes the mask operand) or
    boolean (`where(m, scores, -big)`, turned into an additive mask).
    K / V heads repeated for grouped-query attention
    (`reshape(expand(reshape(kv)))`, the exporters' repeat_kv) are taken
    from before the repetition.

    Before: `%s = zg.mul(zg.matmul(%q, %kt), 0.125)` ; `%a = zg.add %s, %cm` ;
            `%p = zg.softmax %a {axis = 3}` ; `%o = zg.matmul %p, %v`
    After:  `%o = zg.attention %q, %k, %v {causal = true, scale = 0.125}`
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numAttention", "num-attention", "attention cores recognised">];
}

def RecogniseEmbedding : Pass<"zg-recognise-embedding", "mlir::func::FuncOp"> {
  let summary = "gather(weight, ids, axis 0) -> zg.embedding";
  let description = [{
    Rewrites `zg.gather(W, ids) {axis = 0}` where W is a 2-D `zg.weight` and
    ids are integers computed at run time (or a graph input) into
    `zg.embedding(W, ids)`. Gathers by constant indices (position tables
    whose indices fold) are embeddings as well.
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numEmbedding", "num-embedding", "embeddings recognised">];
}

def RecogniseTiedEmbedding
    : Pass<"zg-recognise-tied-embedding", "mlir::func::FuncOp"> {
  let summary = "mark a weight shared by an embedding and a linear";
  let description = [{
    A `zg.weight` that is the table of a `zg.embedding` and the weight of a
    `zg.linear` (the LM head of a tied model) gets the unit attribute
    `zg.tied`, so that the planner shards both uses alike. The importer
    already gives each initializer one `zg.weight`; this pass only marks it.
  }];
  let dependentDialects = ["zplan::graph::GraphDialect"];
  let statistics = [Statistic<"numTied", "num-tied", "tied weights marked">];
}

#endif // ZPLAN_COMPILER_TRANSFORMS_PASSES_TD
