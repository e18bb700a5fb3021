//===- ZdDialect.cpp - the zplan distribution dialect ---------------------===//
//
// Dialect registration and the sharding attribute's syntax and checks.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/ZdDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace zplan::dist;

#include "dialects/dist/ZdOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/dist/ZdAttrs.cpp.inc"

void ZdDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/dist/ZdAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/dist/ZdOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Mesh helpers
//===----------------------------------------------------------------------===//

int64_t zplan::dist::getMeshAxisSize(Operation *op, StringRef axis) {
  StringRef name =
      axis == "tp" ? ZdDialect::kTpAttrName : ZdDialect::kDpAttrName;
  // The op itself may be the module (passes ask with the module in hand).
  for (Operation *cur = op; cur; cur = cur->getParentOp())
    if (auto module = dyn_cast<ModuleOp>(cur))
      if (auto attr = module->getAttrOfType<IntegerAttr>(name))
        return attr.getInt();
  return 1;
}

void zplan::dist::setMesh(ModuleOp module, int64_t tp, int64_t dp) {
  Builder b(module.getContext());
  module->setAttr(ZdDialect::kTpAttrName, b.getI64IntegerAttr(tp));
  module->setAttr(ZdDialect::kDpAttrName, b.getI64IntegerAttr(dp));
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

ShardingAttr ShardingAttr::getReplicated(MLIRContext *ctx, int64_t rank) {
  SmallVector<int64_t> zeros(rank, 0);
  return ShardingAttr::get(ctx, zeros, zeros, {}, false);
}

bool ShardingAttr::isReplicated() const {
  if (getPartial())
    return false;
  return llvm::all_of(getAxes(), [](int64_t a) { return a == kReplicated; });
}

int64_t ShardingAttr::getBlocks(int64_t dim, int64_t tp, int64_t dp) const {
  int64_t axis = getAxes()[dim];
  if (axis == kReplicated)
    return 1;
  if (axis == kDp)
    return dp;
  return getCounts()[dim] ? getCounts()[dim] : tp;
}

int64_t ShardingAttr::getBlockIndex(int64_t dim, int64_t tpIndex,
                                    int64_t dpIndex, int64_t tp) const {
  int64_t axis = getAxes()[dim];
  if (axis == kReplicated)
    return 0;
  if (axis == kDp)
    return dpIndex;
  int64_t count = getCounts()[dim] ? getCounts()[dim] : tp;
  return tpIndex / (tp / count);
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayRef<int64_t> axes,
                                   ArrayRef<int64_t> counts,
                                   ArrayRef<int64_t> segments, bool partial) {
  if (axes.size() != counts.size())
    return emitError() << "sharding has " << axes.size() << " axes but "
                       << counts.size() << " block counts";
  for (auto [i, axis] : llvm::enumerate(axes)) {
    if (axis < kReplicated || axis > kDp)
      return emitError() << "sharding dimension " << i
                         << " has unknown axis code " << axis;
    if (counts[i] < 0 || (counts[i] != 0 && axis != kTp))
      return emitError() << "sharding dimension " << i
                         << ": a block count is only valid on a tp split";
    if (counts[i] == 1)
      return emitError() << "sharding dimension " << i
                         << ": a block count of 1 is a replicated dimension";
  }
  if (!segments.empty()) {
    if (llvm::count(axes, kTp) != 1)
      return emitError() << "segments need exactly one tp-split dimension";
    if (llvm::any_of(segments, [](int64_t s) { return s <= 0; }))
      return emitError() << "segment sizes must be positive";
  }
  return success();
}

// Syntax: `<[tp, _, dp, tp:2]>` with an optional `, partial`.
Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SmallVector<int64_t> axes, counts;
  if (parser.parseLess())
    return {};
  auto parseDim = [&]() -> ParseResult {
    if (succeeded(parser.parseOptionalKeyword("_"))) {
      axes.push_back(kReplicated);
      counts.push_back(0);
      return success();
    }
    StringRef word;
    SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&word))
      return failure();
    if (word == "dp") {
      axes.push_back(kDp);
      counts.push_back(0);
      return success();
    }
    if (word != "tp")
      return parser.emitError(loc, "expected '_', 'tp', 'tp:N' or 'dp', got '")
             << word << "'";
    axes.push_back(kTp);
    int64_t count = 0;
    if (succeeded(parser.parseOptionalColon()) && parser.parseInteger(count))
      return failure();
    counts.push_back(count);
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseDim))
    return {};
  bool partial = false;
  SmallVector<int64_t> segments;
  while (succeeded(parser.parseOptionalComma())) {
    StringRef word;
    if (parser.parseKeyword(&word))
      return {};
    if (word == "partial") {
      partial = true;
      continue;
    }
    if (word != "segments") {
      parser.emitError(parser.getCurrentLocation(),
                       "expected 'partial' or 'segments'");
      return {};
    }
    auto parseSeg = [&]() -> ParseResult {
      int64_t v;
      if (parser.parseInteger(v))
        return failure();
      segments.push_back(v);
      return success();
    };
    if (parser.parseEqual() ||
        parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseSeg))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return ShardingAttr::getChecked(
      [&] { return parser.emitError(parser.getNameLoc()); },
      parser.getContext(), axes, counts, segments, partial);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  for (auto [i, axis] : llvm::enumerate(getAxes())) {
    if (i)
      printer << ", ";
    if (axis == kReplicated)
      printer << "_";
    else if (axis == kDp)
      printer << "dp";
    else if (getCounts()[i])
      printer << "tp:" << getCounts()[i];
    else
      printer << "tp";
  }
  printer << "]";
  if (!getSegments().empty()) {
    printer << ", segments = [";
    llvm::interleaveComma(getSegments(), printer);
    printer << "]";
  }
  if (getPartial())
    printer << ", partial";
  printer << ">";
}
