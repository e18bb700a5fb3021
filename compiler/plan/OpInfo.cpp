//===- OpInfo.cpp - What the planner needs to know about each op ----------===//

#include "compiler/plan/OpInfo.h"

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace zplan::plan {

std::optional<PlanDType> parseFloatDType(llvm::StringRef name) {
  if (name == "fp32")
    return PlanDType::F32;
  if (name == "bf16")
    return PlanDType::BF16;
  if (name == "fp16")
    return PlanDType::F16;
  return std::nullopt;
}

llvm::StringRef dtypeName(PlanDType dtype) {
  switch (dtype) {
  case PlanDType::F32:
    return "fp32";
  case PlanDType::BF16:
    return "bf16";
  case PlanDType::F16:
    return "fp16";
  case PlanDType::I64:
    return "i64";
  case PlanDType::I32:
    return "i32";
  case PlanDType::Bool8:
    return "bool";
  }
  return "?";
}

std::optional<PlanDType> planDTypeOf(Type elementType, PlanDType floatDType) {
  if (isa<FloatType>(elementType))
    return floatDType;
  if (auto intType = dyn_cast<IntegerType>(elementType)) {
    switch (intType.getWidth()) {
    case 1:
      return PlanDType::Bool8;
    case 32:
      return PlanDType::I32;
    case 64:
      return PlanDType::I64;
    default:
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<PlanDType> exactFloatDType(Type elementType) {
  if (elementType.isF32())
    return PlanDType::F32;
  if (elementType.isBF16())
    return PlanDType::BF16;
  if (elementType.isF16())
    return PlanDType::F16;
  return std::nullopt;
}

unsigned dtypeBytes(PlanDType dtype) {
  switch (dtype) {
  case PlanDType::F32:
  case PlanDType::I32:
    return 4;
  case PlanDType::BF16:
  case PlanDType::F16:
    return 2;
  case PlanDType::I64:
    return 8;
  case PlanDType::Bool8:
    return 1;
  }
  return 0;
}

std::optional<PlanDType> planDTypeOfValue(Value value, PlanDType floatDType) {
  Type et = cast<ShapedType>(value.getType()).getElementType();
  if (!isa<FloatType>(et))
    return planDTypeOf(et, floatDType);
  Operation *def = value.getDefiningOp();
  Operation *scope = def ? def : value.getParentBlock()->getParentOp();
  auto module = scope->getParentOfType<ModuleOp>();
  if (module && module->hasAttr("zplan.exact_dtypes"))
    return exactFloatDType(et);
  if (!def)
    return cast<ShapedType>(value.getType()).getRank() == 0
               ? exactFloatDType(et)
               : floatDType;
  // A generation KV cache holds the keys and values the attention computes:
  // it is planned in the compute dtype, so that kv_write stores them as they
  // are (half the bytes of an fp32 cache under bf16, and the decode step
  // reads them at that size).
  if (auto st = dyn_cast<graph::StateOp>(def); st && st.getKind() == "kv_cache")
    return floatDType;
  // An NVMe staging buffer holds its file tensor's bytes.
  if (isa<dist::NvmeReadOp>(def))
    return planDTypeOfValue(def->getOperand(0), floatDType);
  // Mixed precision keeps the optimizer's side in fp32: master parts, and the
  // ops ZeRO marks `zplan.own_dtype` (the gradient's fp32 reduction chain).
  if (isa<graph::StateOp, graph::SumSquaresOp>(def) || isMasterShard(value) ||
      def->hasAttr("zplan.own_dtype"))
    return exactFloatDType(et);
  if (isa<graph::AttentionOp>(def) &&
      cast<OpResult>(value).getResultNumber() == 1)
    return exactFloatDType(et);
  return floatDType;
}

bool isStorageOp(Operation *op) {
  return isa<graph::WeightOp, dist::WeightShardOp, graph::StateOp,
             graph::ConstantOp, graph::CausalMaskOp>(op);
}

std::string persistentKey(Value value) {
  Operation *def = value.getDefiningOp();
  if (!def || !isa<graph::WeightOp, dist::WeightShardOp, graph::StateOp>(def))
    return {};
  // Two storage ops are one tensor when everything about them agrees: the
  // name alone is not enough, since one program may hold a parameter twice
  // with different sharding (a tied weight split two ways).
  std::string key;
  llvm::raw_string_ostream os(key);
  os << def->getName() << "|" << value.getType() << "|"
     << def->getAttrDictionary();
  return key;
}

bool isMasterShard(Value value) {
  auto shard = value.getDefiningOp<dist::WeightShardOp>();
  if (!shard)
    return false;
  auto role = shard->getAttrOfType<StringAttr>("zd.role");
  return role && role.getValue() == "master";
}

bool isStateWriteOp(Operation *op) {
  return isa<graph::AssignOp, graph::AdamwOp, graph::AccumulateOp,
             graph::KvWriteOp, graph::RopeKvWriteOp, graph::RopeAttentionOp,
             graph::DecodeLayerOp, dist::NvmeWriteOp>(op);
}

llvm::SmallVector<Value, 3> writtenOperands(Operation *op) {
  if (auto a = dyn_cast<graph::AdamwOp>(op))
    return {a.getParam(), a.getM(), a.getV()};
  if (auto r = dyn_cast<graph::RopeKvWriteOp>(op))
    return {r.getKCache(), r.getVCache()};
  if (auto r = dyn_cast<graph::RopeAttentionOp>(op))
    return {r.getKCache(), r.getVCache()};
  if (auto l = dyn_cast<graph::DecodeLayerOp>(op))
    return {l.getKCache(), l.getVCache(), l.getSync()};
  if (isa<graph::AssignOp, graph::AccumulateOp, graph::KvWriteOp,
          dist::NvmeWriteOp>(op))
    return {op->getOperand(0)};
  return {};
}

static std::optional<double> splatValueOf(Operation *constant) {
  auto c = dyn_cast_or_null<graph::ConstantOp>(constant);
  if (!c)
    return std::nullopt;
  auto splat = dyn_cast<SplatElementsAttr>(c.getValue());
  if (!splat)
    return std::nullopt;
  Type elem = splat.getElementType();
  if (isa<FloatType>(elem))
    return splat.getSplatValue<APFloat>().convertToDouble();
  if (elem.isInteger(32) || elem.isInteger(64))
    return double(splat.getSplatValue<APInt>().getSExtValue());
  return std::nullopt;
}

std::optional<double> fillValueOf(Operation *op) {
  auto assign = dyn_cast<graph::AssignOp>(op);
  if (!assign)
    return std::nullopt;
  return splatValueOf(assign.getValue().getDefiningOp());
}

bool isFillOnlyConstant(Operation *op) {
  if (!splatValueOf(op) || op->use_empty())
    return false;
  return llvm::all_of(op->getUses(), [](OpOperand &use) {
    auto assign = dyn_cast<graph::AssignOp>(use.getOwner());
    return assign && use.getOperandNumber() == 1;
  });
}

bool isCollectiveOp(Operation *op) {
  return isa<dist::AllReduceOp, dist::AllGatherOp, dist::ReduceScatterOp,
             dist::BroadcastOp, dist::GatherParamOp>(op);
}

bool isViewOp(Operation *op) { return isa<graph::ReshapeOp>(op); }

StreamKind streamOf(Operation *op) {
  if (isCollectiveOp(op))
    return StreamKind::Comm;
  if (isa<dist::PrefetchOp, dist::EvictOp>(op))
    return StreamKind::Copy;
  if (isa<dist::NvmeReadOp, dist::NvmeWriteOp>(op))
    return StreamKind::Io;
  return StreamKind::Compute;
}

llvm::StringRef streamName(StreamKind stream) {
  switch (stream) {
  case StreamKind::Compute:
    return "compute";
  case StreamKind::Comm:
    return "comm";
  case StreamKind::Copy:
    return "copy";
  case StreamKind::Io:
    return "io";
  }
  return "?";
}

AxisKind axisOf(Operation *op) {
  if (isa<dist::GatherParamOp>(op))
    return AxisKind::Dp;
  if (auto axis = op->getAttrOfType<StringAttr>("axis")) {
    if (axis.getValue() == "tp")
      return AxisKind::Tp;
    if (axis.getValue() == "dp")
      return AxisKind::Dp;
  }
  return AxisKind::None;
}

std::optional<uint16_t> opcodeOf(Operation *op) {
  // Special cases, named here: ops whose plan opcode is not their own name.
  if (auto gelu = dyn_cast<graph::GeluOp>(op))
    return opc::code(gelu.getApproximate() == "tanh" ? zrt::Op::gelu_tanh
                                                     : zrt::Op::gelu_erf);
  if (isa<graph::SplitOp>(op))
    return opc::kSlice;
  if (auto g = dyn_cast<graph::GeluGradOp>(op))
    return opc::code(g.getApproximate() == "tanh" ? zrt::Op::gelu_tanh_grad
                                                  : zrt::Op::gelu_erf_grad);
  // zg.assign is a copy, or a cast when the plan dtypes differ (the emitter
  // decides; both are local, so the schedule does not care which).
  if (isa<graph::AssignOp>(op))
    return opc::kCopy;
  // Every other zg / zd op maps onto the registry op of the same name. Storage
  // ops (zg.weight, zg.constant, ...) have no registry entry and so no opcode.
  StringRef dialect = op->getName().getDialectNamespace();
  if (dialect != "zg" && dialect != "zd")
    return std::nullopt;
  StringRef name = op->getName().stripDialect();
  if (const zrt::OpInfo *info = zrt::op_info_by_name(name.data(), name.size()))
    return info->code();
  return std::nullopt;
}

unsigned spaceOf(Value value) {
  Operation *def = value.getDefiningOp();
  if (!def)
    return 0;
  auto byName = [](StringRef space) -> unsigned {
    return space == "host" ? 1 : space == "nvme" ? 2 : 0;
  };
  if (auto shard = dyn_cast<dist::WeightShardOp>(def))
    return byName(shard.getSpace());
  if (isa<graph::WeightOp, graph::StateOp>(def)) {
    auto space = def->getAttrOfType<StringAttr>("zd.space");
    return space ? byName(space.getValue()) : 0;
  }
  // Evictions and staging reads land on the host, and so does what an op
  // that ZeRO or NVMe offload placed there (`zd.on_host`) computes.
  if (isa<dist::EvictOp, dist::NvmeReadOp>(def) || def->hasAttr("zd.on_host"))
    return 1;
  return 0;
}

uint64_t elementCount(Value value) {
  auto type = cast<ShapedType>(value.getType());
  uint64_t n = 1;
  for (int64_t d : type.getShape())
    n *= static_cast<uint64_t>(d);
  return n;
}

std::string opName(Operation *op) {
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (auto name = dyn_cast<NameLoc>(inner))
        return name.getName().str();
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto weight = dyn_cast<graph::WeightOp>(op))
    return weight.getName().str();
  if (auto shard = dyn_cast<dist::WeightShardOp>(op))
    return shard.getName().str();
  return op->getName().getStringRef().str();
}

} // namespace zplan::plan
