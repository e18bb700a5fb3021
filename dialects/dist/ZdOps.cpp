//===- ZdOps.cpp - zd operation verifiers ---------------------------------===//
//
// Every zd op checks its axis and the shapes its semantics imply. Group sizes
// come from the enclosing module's mesh attributes; without them only the
// relations that hold for any group size are checked.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/ZdDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace zplan::dist;

#define GET_OP_CLASSES
#include "dialects/dist/ZdOps.cpp.inc"

namespace {

/// True when the module around `op` states the size of `axis`.
bool hasMeshAxis(Operation *op, StringRef axis) {
  StringRef name =
      axis == "tp" ? ZdDialect::kTpAttrName : ZdDialect::kDpAttrName;
  auto module = op->getParentOfType<ModuleOp>();
  return module && module->hasAttr(name);
}

LogicalResult verifyAxis(Operation *op, StringRef axis) {
  if (!isValidAxis(axis))
    return op->emitOpError("axis must be \"tp\" or \"dp\", got \"")
           << axis << "\"";
  return success();
}

/// Checks a gather/scatter pair of types: `small` is `large` with dimension
/// `dim` divided by the group size, every other dimension equal.
LogicalResult verifySplitPair(Operation *op, RankedTensorType small,
                              RankedTensorType large, int64_t dim,
                              StringRef axis, StringRef smallName,
                              StringRef largeName) {
  if (failed(verifyAxis(op, axis)))
    return failure();
  if (small.getElementType() != large.getElementType())
    return op->emitOpError("operand and result element types differ");
  if (small.getRank() != large.getRank())
    return op->emitOpError("operand and result ranks differ");
  if (dim < 0 || dim >= small.getRank())
    return op->emitOpError("dim ")
           << dim << " is out of range for rank " << small.getRank();
  for (int64_t i = 0; i < small.getRank(); ++i) {
    if (i == dim)
      continue;
    if (small.getDimSize(i) != large.getDimSize(i))
      return op->emitOpError("dimension ")
             << i << " differs between operand and result ("
             << small.getDimSize(i) << " vs " << large.getDimSize(i) << ")";
  }
  int64_t s = small.getDimSize(dim), l = large.getDimSize(dim);
  if (hasMeshAxis(op, axis)) {
    int64_t group = getMeshAxisSize(op, axis);
    if (s * group != l)
      return op->emitOpError("dimension ")
             << dim << " of the " << largeName << " must be " << s << " x "
             << group << " (the " << axis << " group size), got " << l;
  } else if (s == 0 || l % s != 0) {
    return op->emitOpError("dimension ")
           << dim << " of the " << largeName << " (" << l
           << ") must be a multiple of that of the " << smallName << " (" << s
           << ")";
  }
  return success();
}

int64_t numElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

LogicalResult verifyReduction(Operation *op, StringRef reduction) {
  if (reduction != "sum" && reduction != "max" && reduction != "min")
    return op->emitOpError("reduction must be \"sum\", \"max\" or \"min\", "
                           "got \"")
           << reduction << "\"";
  return success();
}

} // namespace

LogicalResult AllReduceOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return verifyReduction(*this, getReduction());
}

LogicalResult BroadcastOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  int64_t root = getRoot();
  if (root < 0)
    return emitOpError("root must be non-negative, got ") << root;
  if (hasMeshAxis(*this, getAxis()) &&
      root >= getMeshAxisSize(*this, getAxis()))
    return emitOpError("root ")
           << root << " is outside the " << getAxis() << " group of size "
           << getMeshAxisSize(*this, getAxis());
  return success();
}

LogicalResult AllGatherOp::verify() {
  return verifySplitPair(*this, getInput().getType(), getResult().getType(),
                         getDim(), getAxis(), "operand", "result");
}

LogicalResult ReduceScatterOp::verify() {
  if (failed(verifyReduction(*this, getReduction())))
    return failure();
  return verifySplitPair(*this, getResult().getType(), getInput().getType(),
                         getDim(), getAxis(), "result", "operand");
}

LogicalResult LocalSliceOp::verify() {
  return verifySplitPair(*this, getResult().getType(), getInput().getType(),
                         getDim(), getAxis(), "result", "operand");
}

LogicalResult WeightShardOp::verify() {
  auto type = getResult().getType();
  if (type.getRank() != 1)
    return emitOpError("result must be a 1-D flat shard, got rank ")
           << type.getRank();
  if (getDp() < 1)
    return emitOpError("dp must be at least 1, got ") << getDp();
  if (getSpace() != "device" && getSpace() != "host" && getSpace() != "nvme")
    return emitOpError("space must be \"device\", \"host\" or \"nvme\", got \"")
           << getSpace() << "\"";
  if (getSourceShape().size() != getLocalShape().size())
    return emitOpError("source_shape and local_shape ranks differ");
  if (!getValue() && !getFile())
    return emitOpError("needs either a file or an inline value");
  int64_t elements = numElements(getLocalShape());
  int64_t shard = (elements + getDp() - 1) / getDp();
  if (type.getDimSize(0) != shard)
    return emitOpError("shard of a local tensor of ")
           << elements << " elements over dp = " << getDp() << " must have "
           << shard << " elements, got " << type.getDimSize(0);
  if (auto pieces = getPieces()) {
    int64_t tp = getMeshAxisSize(*this, "tp");
    if (hasMeshAxis(*this, "tp") && (int64_t)pieces->size() != tp)
      return emitOpError("pieces has ")
             << pieces->size() << " entries, expected one per tp index (" << tp
             << ")";
  }
  return success();
}

LogicalResult GatherParamOp::verify() {
  auto shard = getShard().getType();
  auto result = getResult().getType();
  if (shard.getRank() != 1)
    return emitOpError("operand must be a 1-D flat shard, got rank ")
           << shard.getRank();
  if (shard.getElementType() != result.getElementType())
    return emitOpError("shard and result element types differ");
  int64_t elements = result.getNumElements();
  int64_t dp = getMeshAxisSize(*this, "dp");
  if (auto def = getShard().getDefiningOp<WeightShardOp>())
    dp = def.getDp();
  int64_t expected = (elements + dp - 1) / dp;
  if (shard.getDimSize(0) != expected)
    return emitOpError("a result of ")
           << elements << " elements over dp = " << dp << " needs a shard of "
           << expected << " elements, got " << shard.getDimSize(0);
  return success();
}

LogicalResult ReleaseOp::verify() {
  // A gathered parameter, or a resident weight's device copy made by
  // zd.prefetch (offload), is what has a lifetime to end.
  Operation *def = getGathered().getDefiningOp();
  if (!def || !isa<GatherParamOp, PrefetchOp>(def))
    return emitOpError(
        "operand must be the result of zd.gather_param or zd.prefetch");
  return success();
}

LogicalResult NvmeWriteOp::verify() {
  // The write moves whole tensors byte for byte: the staging value must be
  // the target's exact type.
  if (getValue().getType() != getTarget().getType())
    return emitOpError("value type ")
           << getValue().getType() << " differs from the target's "
           << getTarget().getType();
  return success();
}
