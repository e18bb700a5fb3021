//===- MergeLinears.cpp - --zplan-merge-linears ---------------------------===//
//
// The linears that read one activation (llama's q / k / v, its gate / up)
// become one matrix product over a merged weight, and slices of its result.
// After tensor parallelism each weight is this rank's part, so the merged
// weight is the concatenation of the local parts: the per-rank pieces of
// every former weight, shifted to its columns, assembled into one tensor at
// load time (the emitter writes one binding per part).
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"

#include <map>
#include <tuple>

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANMERGELINEARS
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;
using namespace zplan;
namespace zg = zplan::graph;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The weight of a linear that can be merged, or null: a file-backed
/// zg.weight on the device, read by this linear alone, not already merged.
zg::WeightOp mergeableWeight(zg::LinearOp lin) {
  auto w = lin.getWeight().getDefiningOp<zg::WeightOp>();
  if (!w || lin.getBias() || !w->hasOneUse() || w.getValue() ||
      w.getFile().empty() || w->hasAttr("zd.parts") ||
      w->hasAttr("zd.space") || rtt(w.getResult()).getRank() != 2 ||
      !isa<FloatType>(rtt(w.getResult()).getElementType()))
    return nullptr;
  return w;
}

/// What linears must share to be merged.
struct GroupKey {
  Value input;
  bool transW;
  double alpha;
  Type elt;
  int64_t k;
  bool operator<(const GroupKey &o) const {
    return std::make_tuple(input.getAsOpaquePointer(), transW, alpha,
                           elt.getAsOpaquePointer(), k) <
           std::make_tuple(o.input.getAsOpaquePointer(), o.transW, o.alpha,
                           o.elt.getAsOpaquePointer(), o.k);
  }
};

/// The pieces of `w` per tp rank (one whole-tensor piece each when it has no
/// zd.pieces), with dst_start[dim] shifted by `shift`.
ArrayAttr shiftedPieces(zg::WeightOp w, int64_t dim, int64_t shift,
                        int64_t tp) {
  Builder b(w.getContext());
  auto local = rtt(w.getResult()).getShape();
  auto shiftOne = [&](DenseI64ArrayAttr src, DenseI64ArrayAttr dst,
                      DenseI64ArrayAttr size) {
    SmallVector<int64_t> d(dst.asArrayRef());
    d[dim] += shift;
    return b.getDictionaryAttr(
        {b.getNamedAttr("src_start", src),
         b.getNamedAttr("dst_start", b.getDenseI64ArrayAttr(d)),
         b.getNamedAttr("size", size)});
  };
  SmallVector<Attribute> perTp;
  auto pieces = w->getAttrOfType<ArrayAttr>("zd.pieces");
  if (!pieces) {
    SmallVector<int64_t> zero(local.size(), 0);
    Attribute one = shiftOne(b.getDenseI64ArrayAttr(zero),
                             b.getDenseI64ArrayAttr(zero),
                             b.getDenseI64ArrayAttr(local));
    perTp.assign(tp, b.getArrayAttr({one}));
    return b.getArrayAttr(perTp);
  }
  for (Attribute rank : pieces) {
    SmallVector<Attribute> list;
    for (Attribute p : cast<ArrayAttr>(rank)) {
      auto dict = cast<DictionaryAttr>(p);
      list.push_back(shiftOne(dict.getAs<DenseI64ArrayAttr>("src_start"),
                              dict.getAs<DenseI64ArrayAttr>("dst_start"),
                              dict.getAs<DenseI64ArrayAttr>("size")));
    }
    perTp.push_back(b.getArrayAttr(list));
  }
  return b.getArrayAttr(perTp);
}

struct ZplanMergeLinearsPass
    : plan::impl::ZplanMergeLinearsBase<ZplanMergeLinearsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Training modules keep one tensor per parameter (see the description).
    bool training = false;
    module.walk([&](Operation *op) {
      if (isa<zg::AdamwOp, zg::AccumulateOp>(op))
        training = true;
    });
    if (training)
      return;
    int64_t tp = 1;
    if (auto a = module->getAttrOfType<IntegerAttr>("zd.tp"))
      tp = a.getInt();
    for (auto func : module.getOps<func::FuncOp>())
      if (failed(mergeIn(func, tp)))
        return signalPassFailure();
  }

  LogicalResult mergeIn(func::FuncOp func, int64_t tp) {
    // Groups in block order, so that the rewrite is deterministic.
    std::map<GroupKey, unsigned> index;
    SmallVector<SmallVector<zg::LinearOp>> groups;
    func.walk([&](zg::LinearOp lin) {
      zg::WeightOp w = mergeableWeight(lin);
      if (!w)
        return;
      auto ws = rtt(w.getResult()).getShape();
      GroupKey key{lin.getInput(), lin.getTransW(),
                   lin.getAlpha().convertToDouble(),
                   rtt(w.getResult()).getElementType(),
                   lin.getTransW() ? ws[1] : ws[0]};
      auto [it, fresh] = index.try_emplace(key, groups.size());
      if (fresh)
        groups.emplace_back();
      groups[it->second].push_back(lin);
    });
    for (auto &group : groups)
      if (group.size() >= 2)
        merge(group, tp);
    return success();
  }

  void merge(SmallVector<zg::LinearOp> group, int64_t tp) {
    zg::LinearOp first = group.front();
    bool transW = first.getTransW();
    int64_t nDim = transW ? 0 : 1;
    auto w0 = cast<zg::WeightOp>(first.getWeight().getDefiningOp());
    Type elt = rtt(w0.getResult()).getElementType();
    int64_t k = rtt(w0.getResult()).getShape()[transW ? 1 : 0];
    OpBuilder b(w0);
    // The parts: each former weight's source and its pieces, moved to its
    // columns of the merged weight.
    SmallVector<Attribute> parts;
    SmallVector<int64_t> widths;
    std::string name;
    int64_t total = 0;
    for (zg::LinearOp member : group) {
      auto w = cast<zg::WeightOp>(member.getWeight().getDefiningOp());
      auto local = rtt(w.getResult()).getShape();
      auto source = w->getAttrOfType<DenseI64ArrayAttr>("zd.source_shape");
      parts.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("name", w.getNameAttr()),
           b.getNamedAttr("file", w.getFileAttr()),
           b.getNamedAttr("offset", w.getOffsetAttr()),
           b.getNamedAttr("length", w.getLengthAttr()),
           b.getNamedAttr("source_shape",
                          source ? source : b.getDenseI64ArrayAttr(local)),
           b.getNamedAttr("pieces", shiftedPieces(w, nDim, total, tp))}));
      name += (name.empty() ? "" : "+") + w.getName().str();
      widths.push_back(local[nDim]);
      total += local[nDim];
    }
    SmallVector<int64_t> shape = transW ? SmallVector<int64_t>{total, k}
                                        : SmallVector<int64_t>{k, total};
    auto wType = RankedTensorType::get(shape, elt);
    int64_t bytes = total * k * ((elt.getIntOrFloatBitWidth() + 7) / 8);
    // The merged weight is a zg.weight of its own shape; its bytes come
    // from the parts (the emitter reads zd.parts, not file/offset).
    auto merged = zg::WeightOp::create(
        b, w0.getLoc(), wType, b.getStringAttr(name), w0.getFileAttr(),
        b.getI64IntegerAttr(0), b.getI64IntegerAttr(bytes), ElementsAttr());
    merged->setAttr("zd.parts", b.getArrayAttr(parts));
    merged->setAttr("zd.merge_dim", b.getI64IntegerAttr(nDim));

    b.setInsertionPoint(first);
    auto outShape = rtt(first.getResult()).getShape();
    SmallVector<int64_t> wide(outShape);
    wide.back() = total;
    auto lin = zg::LinearOp::create(
        b, first.getLoc(), RankedTensorType::get(wide, rtt(first.getResult()).getElementType()),
        first.getInput(), merged.getResult(), Value(), first.getTransWAttr(),
        first.getAlphaAttr());
    int64_t at = 0;
    SmallVector<Value> slices;
    for (auto [i, width] : llvm::enumerate(widths)) {
      zg::LinearOp old = group[i];
      SmallVector<int64_t> starts(wide.size(), 0), steps(wide.size(), 1);
      starts.back() = at;
      at += width;
      slices.push_back(zg::SliceOp::create(b, old.getLoc(), old.getType(),
                                           lin, b.getDenseI64ArrayAttr(starts),
                                           b.getDenseI64ArrayAttr(steps)));
    }
    // Only now, with every slice in place before the first former linear,
    // can the former linears and their weights go.
    for (auto [old, part] : llvm::zip(group, slices)) {
      Operation *weight = old.getWeight().getDefiningOp();
      old.getResult().replaceAllUsesWith(part);
      old->erase();
      weight->erase();
      ++numMerged;
    }
    ++numGroups;
  }
};

} // namespace
