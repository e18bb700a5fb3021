//===- FoldTranspose.cpp - --zplan-fold-transpose -------------------------===//
//
// Folds transposes of the last two dims into the matrix products that read
// or produce them (zg.matmul's trans_a / trans_b), so that the plan holds no
// copy BLAS could have avoided by reading an operand transposed; and the
// head split / merge transposes around a forward attention into its
// seq_major bits, so that the attention reads the projections' [B, S, H, D]
// outputs and writes the output projection's input in place of four copies
// per layer; and then the last-dim split of a fused q/k/v projection into the
// attention's `packed` operands, so that it reads q, k and v out of the
// projection's [B, S, 3D] output in place of three more copies. A head
// split transpose in front of a rotary embedding whose only reader is the
// attention folds through it (the rotary goes sequence-major) under the
// `rotary` option.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SetVector.h"

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANFOLDTRANSPOSE
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

/// The input of `v`'s zg.transpose when that transpose swaps exactly the
/// last two dims of an operand of rank >= 2; null otherwise.
Value swappedLast2(Value v) {
  auto t = v.getDefiningOp<graph::TransposeOp>();
  if (!t)
    return nullptr;
  ArrayRef<int64_t> perm = t.getPerm();
  int64_t n = perm.size();
  if (n < 2)
    return nullptr;
  for (int64_t i = 0; i < n - 2; ++i)
    if (perm[i] != i)
      return nullptr;
  if (perm[n - 2] != n - 1 || perm[n - 1] != n - 2)
    return nullptr;
  return t.getInput();
}

int64_t rankOf(Value v) { return cast<ShapedType>(v.getType()).getRank(); }

/// Whether `t` is a rank-4 zg.transpose that swaps dims 1 and 2 (the head
/// split [B, S, H, D] -> [B, H, S, D], or the merge back).
bool swapsHeads(graph::TransposeOp t) {
  return t && t.getPerm() == ArrayRef<int64_t>{0, 2, 1, 3};
}

struct FoldTransposePass
    : impl::ZplanFoldTransposeBase<FoldTransposePass> {
  using ZplanFoldTransposeBase::ZplanFoldTransposeBase;

  void runOnOperation() override {
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(getOperation());
    if (failed(funcs))
      return signalPassFailure();
    for (func::FuncOp func : *funcs) {
      foldProgram(func.getBody().front());
      foldHeadTransposes(func.getBody().front());
      foldPackedOperands(func.getBody().front());
    }
  }

  /// The source tensor and element offset of `part` when it is a piece of a
  /// rank-3 [B, S, W] tensor along its last dim (a zg.split result, or a
  /// unit-step zg.slice that keeps the other dims whole) and has one reader;
  /// a null value otherwise.
  static std::pair<Value, int64_t> lastDimPart(Value part) {
    if (!part.hasOneUse() || rankOf(part) != 3)
      return {nullptr, 0};
    if (auto split = part.getDefiningOp<graph::SplitOp>()) {
      Value src = split.getInput();
      if (rankOf(src) != 3 || (split.getAxis() != 2 && split.getAxis() != -1))
        return {nullptr, 0};
      int64_t offset = 0;
      for (Value r : split.getResults()) {
        if (r == part)
          return {src, offset};
        offset += cast<ShapedType>(r.getType()).getDimSize(2);
      }
      return {nullptr, 0};
    }
    if (auto slice = part.getDefiningOp<graph::SliceOp>()) {
      Value src = slice.getInput();
      ArrayRef<int64_t> in = cast<ShapedType>(src.getType()).getShape();
      ArrayRef<int64_t> out = cast<ShapedType>(part.getType()).getShape();
      ArrayRef<int64_t> starts = slice.getStarts(), steps = slice.getSteps();
      if (in.size() != 3 || starts.size() != 3 || steps.size() != 3 ||
          in[0] != out[0] || in[1] != out[1] || starts[0] != 0 ||
          starts[1] != 0 || steps[0] != 1 || steps[1] != 1 || steps[2] != 1)
        return {nullptr, 0};
      return {src, starts[2]};
    }
    return {nullptr, 0};
  }

  /// A sequence-major q, k or v that is a reshape [B, S, H * D] ->
  /// [B, S, H, D] of a last-dim piece of a [B, S, W] tensor, with no other
  /// reader along the way, is read by the attention out of that tensor: the
  /// operand becomes the tensor, and `packed` holds its element offset,
  /// row stride W and heads. Forward attentions only, as above: the training
  /// forward's gradient op reads its operands as they are.
  void foldPackedOperands(Block &body) {
    SmallVector<graph::AttentionOp> attentions(
        body.getOps<graph::AttentionOp>());
    for (graph::AttentionOp att : attentions) {
      if (att.getLse() || att.getPacked())
        continue;
      SmallVector<int64_t> packed(9, 0);
      // The reshapes go before the pieces' producers: a split dies only once
      // all its pieces' reshapes have gone.
      SmallVector<Operation *> reshapes;
      llvm::SetVector<Operation *> producers;
      bool any = false;
      for (unsigned i = 0; i < 3; ++i) {
        Value operand = att->getOperand(i);
        auto reshape = operand.getDefiningOp<graph::ReshapeOp>();
        if (!(att.getSeqMajorBits() & (int64_t(1) << i)) || !reshape ||
            !operand.hasOneUse() || rankOf(operand) != 4)
          continue;
        ArrayRef<int64_t> shape =
            cast<ShapedType>(operand.getType()).getShape();
        Value part = reshape.getInput();
        if (rankOf(part) != 3)
          continue;
        ArrayRef<int64_t> partShape =
            cast<ShapedType>(part.getType()).getShape();
        if (partShape[0] != shape[0] || partShape[1] != shape[1] ||
            partShape[2] != shape[2] * shape[3])
          continue;
        auto [src, offset] = lastDimPart(part);
        if (!src)
          continue;
        att->setOperand(i, src);
        packed[3 * i] = offset;
        packed[3 * i + 1] = cast<ShapedType>(src.getType()).getDimSize(2);
        packed[3 * i + 2] = shape[2];
        reshapes.push_back(reshape);
        producers.insert(part.getDefiningOp());
        any = true;
      }
      if (!any)
        continue;
      att.setPacked(ArrayRef<int64_t>(packed));
      for (Operation *op : reshapes)
        op->erase();
      for (Operation *op : producers)
        if (op->use_empty())
          op->erase();
    }
  }

  /// Whether operand `index` of `att` was a head-major zg.rotary of a head
  /// split transpose, each with no other reader, that now reads and writes
  /// sequence-major (llama's q and k): the rotary is rebuilt on the
  /// transpose's input with `seq_major` set, the attention reads its result,
  /// and both the transpose and the old rotary go. The tables index by
  /// position either way (the op's verifier checks them against the
  /// head-major view).
  bool foldThroughRotary(graph::AttentionOp att, unsigned index) {
    Value operand = att->getOperand(index);
    auto rot = operand.getDefiningOp<graph::RotaryOp>();
    if (!rot || rot.getSeqMajor() || !operand.hasOneUse())
      return false;
    auto t = rot.getInput().getDefiningOp<graph::TransposeOp>();
    if (!swapsHeads(t) || !t->hasOneUse())
      return false;
    OpBuilder b(rot);
    auto folded = graph::RotaryOp::create(
        b, rot.getLoc(), t.getInput().getType(), t.getInput(), rot.getCos(),
        rot.getSin(), rot.getInverse(), /*seq_major=*/true);
    // Keep every attribute the passes before set (names, streams).
    for (NamedAttribute a : rot->getAttrs())
      if (a.getName() != rot.getSeqMajorAttrName())
        folded->setAttr(a.getName(), a.getValue());
    att->setOperand(index, folded.getResult());
    rot.erase();
    t.erase();
    ++numRotaryTransposes;
    return true;
  }

  /// q, k, v transposes with no other reader, and a result transpose that is
  /// the only reader, become the attention's seq_major bits. The training
  /// forward (with an lse) keeps head-major operands: its gradient op reads
  /// them.
  void foldHeadTransposes(Block &body) {
    SmallVector<graph::AttentionOp> attentions(
        body.getOps<graph::AttentionOp>());
    for (graph::AttentionOp att : attentions) {
      if (att.getLse())
        continue;
      int64_t bits = att.getSeqMajorBits();
      SmallVector<Operation *> dead;
      for (auto [index, bit] : {std::pair<unsigned, int64_t>{0, 1}, {1, 2}, {2, 4}}) {
        if (!(bits & bit) && foldRotary && foldThroughRotary(att, index)) {
          bits |= bit;
          continue;
        }
        auto t = att->getOperand(index).getDefiningOp<graph::TransposeOp>();
        if ((bits & bit) || !swapsHeads(t) || !t->hasOneUse())
          continue;
        att->setOperand(index, t.getInput());
        bits |= bit;
        dead.push_back(t);
        ++numHeadTransposes;
      }
      graph::TransposeOp merge;
      if (!(bits & 8) && att.getResult().hasOneUse())
        merge = dyn_cast<graph::TransposeOp>(*att.getResult().user_begin());
      if (merge && !swapsHeads(merge))
        merge = nullptr;
      if (bits == att.getSeqMajorBits() && !merge)
        continue;
      if (!merge) {
        att.setSeqMajorAttr(
            IntegerAttr::get(IntegerType::get(att.getContext(), 64), bits));
      } else {
        // The result changes type: a new op in the merge's layout, with every
        // attribute the passes before set.
        OpBuilder b(att);
        auto folded = graph::AttentionOp::create(
            b, att.getLoc(), TypeRange{merge.getType()}, att->getOperands(),
            att->getAttrs());
        folded.setSeqMajorAttr(
            IntegerAttr::get(IntegerType::get(att.getContext(), 64), bits | 8));
        merge.getResult().replaceAllUsesWith(folded.getResult());
        merge.erase();
        att.erase();
        ++numHeadTransposes;
      }
      for (Operation *op : dead)
        if (op->use_empty())
          op->erase();
    }
  }

  void foldProgram(Block &body) {
    SmallVector<graph::MatmulOp> products(body.getOps<graph::MatmulOp>());
    llvm::SetVector<Operation *> maybeDead;
    for (graph::MatmulOp mm : products) {
      // Operands: read through the transpose.
      for (unsigned k = 0; k < 2; ++k) {
        Value operand = mm->getOperand(k);
        Value source = swappedLast2(operand);
        if (!source || rankOf(operand) < 2)
          continue;
        maybeDead.insert(operand.getDefiningOp());
        mm->setOperand(k, source);
        StringRef flag = k == 0 ? "trans_a" : "trans_b";
        bool was = k == 0 ? mm.getTransA() : mm.getTransB();
        mm->setAttr(flag, BoolAttr::get(mm.getContext(), !was));
        ++numOperands;
      }
    }
    // Results: (A B)^T = B^T A^T, when the transpose is the only reader.
    for (graph::MatmulOp mm : products) {
      if (!mm->hasOneUse() || rankOf(mm.getLhs()) < 2 ||
          rankOf(mm.getRhs()) < 2)
        continue;
      auto t = dyn_cast<graph::TransposeOp>(*mm->user_begin());
      if (!t || swappedLast2(t.getResult()) != mm.getResult() ||
          maybeDead.contains(t))
        continue;
      OpBuilder b(t);
      auto folded = graph::MatmulOp::create(
          b, mm.getLoc(), t.getType(), mm.getRhs(), mm.getLhs(),
          /*trans_a=*/!mm.getTransB(), /*trans_b=*/!mm.getTransA());
      // Keep every attribute the passes before set (names, streams).
      for (NamedAttribute a : mm->getAttrs())
        if (a.getName() != "trans_a" && a.getName() != "trans_b")
          folded->setAttr(a.getName(), a.getValue());
      t.getResult().replaceAllUsesWith(folded.getResult());
      t.erase();
      mm.erase();
      ++numResults;
    }
    for (Operation *op : maybeDead)
      if (op && op->use_empty())
        op->erase();
  }
};

} // namespace
} // namespace zplan::plan
