//===- EmitPlan.cpp - Scheduled, memory-planned IR to a plan file ---------===//
//
// Reads the schedule (streams, events) and the memory plan (offsets) from the
// IR, recomputes the tensor facts with the same liveness analysis the memory
// plan used, and writes every table of plan.fbs. Opcode numbers, dtypes,
// spaces and kinds are cast from the numbers plan.fbs documents, so that the
// code does not depend on flatc's enum naming flags.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/EmitPlan.h"
#include "compiler/plan/Passes.h"

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "zk/attention_kernels.h"
#include "zk/cuda_workspace.h"
#include "zk/few_rows_kernels.h"
#include "zrt/collective_staging.h"
#include "zrt/plan_file.h"
#include "zrt/plan_generated.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cstring>
#include <set>
#include <filesystem>
#include <set>

using namespace mlir;
namespace fb = zrt::fb;
namespace fs = std::filesystem;

namespace zplan::plan {
namespace {

/// The code of the few-row kernel --zplan-decode-products chose for a
/// product (zk/few_rows_kernels.h): 0 when none was chosen, -1 (after an
/// error naming the op) for a name that is no few-row kernel.
int fewRowsKernel(mlir::Operation *op) {
  auto name = op->getAttrOfType<mlir::StringAttr>("zd.kernel");
  if (!name)
    return 0;
  int code = zk::cuda::few_rows_code(name.str().c_str());
  if (code < 0)
    op->emitOpError("zd.kernel '")
        << name.getValue()
        << "' is not a few-row kernel of "
           "kernels/cuda/include/zk/few_rows_kernels.h (few_rows, "
           "few_rows_stream)";
  return code;
}

/// Plan 2.15: the cuBLASLt algorithm --zplan-gemm-algos chose for a product
/// (zd.gemm_algo), after [trans_w, kernel 0]; nothing when none was chosen.
void appendGemmAlgo(mlir::Operation *op, std::vector<int64_t> &ints) {
  auto algo = op->getAttrOfType<mlir::DenseI64ArrayAttr>("zd.gemm_algo");
  if (!algo)
    return;
  ints.resize(1);
  ints.push_back(0);
  ints.insert(ints.end(), algo.asArrayRef().begin(), algo.asArrayRef().end());
}

/// The code of the attention kernel --zplan-attention-kernels chose (a name
/// of zk/attention_kernels.h in zd.kernel): 0 when none was chosen, -1 (after
/// an error naming the op) for a name the table does not have.
int attentionKernelCode(mlir::Operation *op, bool grad) {
  auto name = op->getAttrOfType<mlir::StringAttr>("zd.kernel");
  if (!name)
    return 0;
  const zk::cuda::AttentionKernel *k =
      grad ? zk::cuda::attention_grad_kernel(name.str().c_str())
           : zk::cuda::attention_kernel(name.str().c_str());
  if (k)
    return k->code;
  op->emitOpError("zd.kernel '")
      << name.getValue() << "' is not a CUDA attention"
      << (grad ? " backward" : "")
      << " kernel of kernels/cuda/include/zk/attention_kernels.h";
  return -1;
}

/// The largest constant carried inline in a plan file.
constexpr uint64_t kMaxInlineConstantBytes = 64ull << 20;

std::vector<int64_t> shapeOf(Value v) {
  auto shape = cast<ShapedType>(v.getType()).getShape();
  return {shape.begin(), shape.end()};
}

/// Appends `value` in `dtype`'s little-endian encoding (floats rounded to
/// nearest even, as the runtime's own conversions do).
void appendFloat(std::vector<uint8_t> &out, double value, PlanDType dtype) {
  auto put = [&](uint64_t bits, unsigned bytes) {
    for (unsigned i = 0; i < bytes; ++i)
      out.push_back(uint8_t(bits >> (8 * i)));
  };
  llvm::APFloat f(value);
  bool lost = false;
  switch (dtype) {
  case PlanDType::F32:
    f.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven,
              &lost);
    put(f.bitcastToAPInt().getZExtValue(), 4);
    return;
  case PlanDType::BF16:
    f.convert(llvm::APFloat::BFloat(), llvm::APFloat::rmNearestTiesToEven,
              &lost);
    put(f.bitcastToAPInt().getZExtValue(), 2);
    return;
  case PlanDType::F16:
    f.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven,
              &lost);
    put(f.bitcastToAPInt().getZExtValue(), 2);
    return;
  default:
    return;
  }
}

void appendInt(std::vector<uint8_t> &out, int64_t value, PlanDType dtype) {
  unsigned bytes = dtypeBytes(dtype);
  for (unsigned i = 0; i < bytes; ++i)
    out.push_back(uint8_t(uint64_t(value) >> (8 * i)));
}

/// The elements of a constant in `dtype`, or failure for attribute kinds
/// whose values cannot be enumerated.
LogicalResult encodeElements(ElementsAttr attr, PlanDType dtype,
                             std::vector<uint8_t> &out) {
  Type et = attr.getElementType();
  // Fast path for the common case (f32 tables such as RoPE's cos/sin, up to
  // millions of elements): plain floats, rounded to bf16 by bit arithmetic.
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (dense && et.isF32() &&
      (dtype == PlanDType::F32 || dtype == PlanDType::BF16)) {
    out.reserve(out.size() + dense.getNumElements() * dtypeBytes(dtype));
    for (float v : dense.getValues<float>()) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (dtype == PlanDType::F32) {
        for (int i = 0; i < 4; ++i)
          out.push_back(uint8_t(bits >> (8 * i)));
        continue;
      }
      uint16_t half;
      if ((bits & 0x7FFFFFFFu) > 0x7F800000u) // NaN stays a quiet NaN
        half = uint16_t((bits >> 16) | 0x0040u);
      else // round to nearest, ties to even
        half = uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
      out.push_back(uint8_t(half));
      out.push_back(uint8_t(half >> 8));
    }
    return success();
  }
  if (isa<FloatType>(et)) {
    auto values = attr.tryGetValues<llvm::APFloat>();
    if (!values)
      return failure();
    for (const llvm::APFloat &v : *values)
      appendFloat(out, v.convertToDouble(), dtype);
    return success();
  }
  if (isa<IntegerType>(et)) {
    auto values = attr.tryGetValues<llvm::APInt>();
    if (!values)
      return failure();
    bool isBool = et.getIntOrFloatBitWidth() == 1;
    for (const llvm::APInt &v : *values)
      appendInt(out, isBool ? int64_t(v.getZExtValue()) : v.getSExtValue(),
                dtype);
    return success();
  }
  return failure();
}

/// The causal mask zg.causal_mask stands for, materialised: 0 where
/// j <= i + (T - S), else the masked value; leading dims repeat it.
void encodeCausalMask(graph::CausalMaskOp op, PlanDType dtype,
                      std::vector<uint8_t> &out) {
  std::vector<int64_t> shape = shapeOf(op.getResult());
  int64_t s = shape[shape.size() - 2], t = shape.back();
  uint64_t outer = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i)
    outer *= uint64_t(shape[i]);
  double masked = op.getMaskedValue().convertToDouble();
  for (uint64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < t; ++j)
        appendFloat(out, j <= i + (t - s) ? 0.0 : masked, dtype);
}

/// The source's own dtype for a weight stored with element type `et`.
std::optional<PlanDType> sourceDType(Type et) {
  if (std::optional<PlanDType> exact = exactFloatDType(et))
    return exact;
  return planDTypeOf(et, PlanDType::F32);
}

/// The largest device workspace a training kernel of the plan takes on the
/// cuda backend (zk/cuda_workspace.h, the rules the kernels size it by): the
/// runtime allocates it beside the GEMM workspace, so the plan counts it.
uint64_t kernelWorkspaceBytes(ArrayRef<func::FuncOp> funcs, PlanDType dtype) {
  namespace ws = zk::cuda::workspace;
  auto shapeOf = [](Value v) { return cast<ShapedType>(v.getType()).getShape(); };
  auto normRows = [&](Value x, int64_t axis) {
    ArrayRef<int64_t> s = shapeOf(x);
    int64_t rank = s.size(), rows = 1, n = 1;
    if (axis < 0)
      axis += rank;
    for (int64_t d = 0; d < rank; ++d)
      (d < axis ? rows : n) *= s[d];
    return ws::norm_grad(rows, n);
  };
  uint64_t most = 0;
  for (func::FuncOp f : funcs)
    f.walk([&](Operation *op) {
      uint64_t b = 0;
      if (auto a = dyn_cast<graph::AttentionGradOp>(op)) {
        ArrayRef<int64_t> q = shapeOf(a.getQ());
        if (q.size() == 4)
          b = ws::attention_grad(q[0], q[1], q[2]);
      } else if (auto n = dyn_cast<graph::LayerNormGradOp>(op)) {
        b = normRows(n.getInput(), n.getAxis());
      } else if (auto r = dyn_cast<graph::RmsNormGradOp>(op)) {
        b = normRows(r.getInput(), int64_t(shapeOf(r.getInput()).size()) - 1);
      } else if (isa<graph::SumSquaresOp>(op)) {
        b = ws::sum_squares();
      } else if (auto c = dyn_cast<graph::CachedAttentionOp>(op)) {
        // The decode attention's per-chunk partial results.
        ArrayRef<int64_t> q = shapeOf(c.getQ()), k = shapeOf(c.getK());
        if (q.size() == 4 && k.size() == 4)
          b = ws::cached_attention(q[0], q[1], q[2], q[3], k[1], k[2]);
      } else if (auto r = dyn_cast<graph::RopeAttentionOp>(op)) {
        // The same, and room for the rotated q in the plan's float dtype.
        ArrayRef<int64_t> q = shapeOf(r.getQ()), k = shapeOf(r.getKCache());
        if (q.size() == 4 && k.size() == 4)
          b = ws::rope_attention(q[0], q[1], q[2], q[3], k[1], k[2],
                                 dtypeBytes(dtype));
      } else if (auto l = dyn_cast<graph::DecodeLayerOp>(op)) {
        // The persistent layer's intermediates and partial sums (its
        // barrier's counts are the plan's sync state).
        ArrayRef<int64_t> x = shapeOf(l.getInput()), c = shapeOf(l.getKCache());
        int64_t d = x.back(), rows = 1;
        for (int64_t e : x.drop_back())
          rows *= e;
        if (c.size() == 4 && c[3] > 0)
          b = ws::decode_layer(ws::DecodeLayerDims{
              rows, d, shapeOf(l.getWq())[1] / c[3], c[1], c[3],
              shapeOf(l.getWGate())[1], int64_t(dtypeBytes(dtype))});
      }
      most = std::max(most, b);
    });
  return most;
}

/// The opcode of a gated product's activation ("silu", "gelu_tanh",
/// "gelu_erf"), which the fused steps carry as an int.
int64_t actOpcode(StringRef act) {
  return act == "silu" ? 15 : act == "gelu_tanh" ? 13 : 14;
}

struct Emitter {
  ModuleOp module;
  const EmitOptions &options;
  PlanSummary &summary;
  flatbuffers::FlatBufferBuilder fbb{1 << 20};
  /// Every program and the plan's one tensor table.
  ModuleLiveness lv;
  /// The program being emitted: its function, liveness and tensor mapping.
  func::FuncOp func;
  const Liveness *plv = nullptr;
  const std::vector<int> *globalOf = nullptr;
  PlanDType floatDType = PlanDType::F32;

  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  std::vector<flatbuffers::Offset<fb::Constant>> constants;
  std::vector<flatbuffers::Offset<fb::WeightSource>> weights;
  std::vector<flatbuffers::Offset<fb::WeightBinding>> bindings;
  std::vector<flatbuffers::Offset<fb::Instr>> instrs;
  std::vector<flatbuffers::Offset<fb::StateEntry>> stateEntries;
  /// Per parameter name: what its state entry and the entries of the state
  /// that belongs to it (master weights, moments, gradients) are built from.
  struct ParamLayout {
    std::vector<int64_t> localShape, sourceShape;
    uint64_t localElements = 0;
    std::vector<flatbuffers::Offset<
        flatbuffers::Vector<flatbuffers::Offset<fb::Piece>>>>
        perTp;
  };
  std::map<std::string, ParamLayout> paramLayouts;
  std::set<std::string> stateNames;
  std::map<std::string, int> sourceIndex;
  std::vector<uint64_t> offsets;
  std::vector<int> constantOf;
  uint64_t hash = zrt::kFnvOffsetBasis;
  /// The largest collective staging of the run (noteStaging), planned with the workspace on cuda.
  uint64_t stagingBytes = 0;
  /// The mesh axes (AxisKind) of the collectives over more than one rank.
  std::set<int> usedGroups;

  Emitter(ModuleOp module, const EmitOptions &options, PlanSummary &summary)
      : module(module), options(options), summary(summary) {}

  int64_t meshAttr(StringRef name) {
    if (auto a = module->getAttrOfType<IntegerAttr>(name))
      return a.getInt();
    return 1;
  }

  int root(int i) const {
    while (lv.tensors[i].aliasOf >= 0)
      i = lv.tensors[i].aliasOf;
    return i;
  }

  LogicalResult readOffsets() {
    offsets.assign(lv.tensors.size(), 0);
    for (auto [p, f] : llvm::enumerate(lv.funcs)) {
      const Liveness &pl = lv.programs[p];
      const std::vector<int> &gof = lv.globalOf[p];
      Block &body = f.getBody().front();
      for (BlockArgument arg : body.getArguments()) {
        auto a =
            f.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), attr::kOffset);
        if (!a)
          return f.emitError()
                 << "zplan-emit: argument " << arg.getArgNumber()
                 << " has no zplan.offset (run --zplan-memory-plan first)";
        offsets[gof[pl.indexOf.lookup(arg)]] = uint64_t(a.getInt());
      }
      for (Operation &op : body.without_terminator()) {
        if (op.getNumResults() == 0)
          continue;
        auto a = op.getAttrOfType<DenseI64ArrayAttr>(attr::kOffsets);
        if (!a || a.size() != int64_t(op.getNumResults()))
          return op.emitError() << "zplan-emit: op has no zplan.offsets for "
                                   "each result (run --zplan-memory-plan first)";
        for (auto [r, off] : llvm::zip(op.getResults(), a.asArrayRef()))
          offsets[gof[pl.indexOf.lookup(r)]] = uint64_t(off);
      }
    }
    return success();
  }

  std::string tensorName(const TensorInfo &t, int index) {
    if (auto arg = dyn_cast<BlockArgument>(t.value)) {
      auto owner = cast<func::FuncOp>(arg.getOwner()->getParentOp());
      if (auto n =
              owner.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "zg.name"))
        return n.str();
      return "arg" + std::to_string(arg.getArgNumber());
    }
    Operation *def = t.value.getDefiningOp();
    std::string base = opName(def);
    if (def->getNumResults() > 1)
      base += ":" + std::to_string(cast<OpResult>(t.value).getResultNumber());
    if (base == def->getName().getStringRef())
      base += "#" + std::to_string(index);
    return base;
  }

  LogicalResult emitTensors() {
    constantOf.assign(lv.tensors.size(), -1);
    for (size_t i = 0; i < lv.tensors.size(); ++i) {
      const TensorInfo &t = lv.tensors[i];
      Operation *def = t.value.getDefiningOp();
      if (t.kind == TensorKind::Constant) {
        // Constants travel inline in the plan file; a huge one (typically a
        // causal mask that no attention absorbed) would bloat every plan.
        if (t.bytes > kMaxInlineConstantBytes)
          return def->emitError()
                 << "zplan-emit: constant of " << t.bytes
                 << " bytes is too large to carry inline in the plan (limit "
                 << kMaxInlineConstantBytes << ")"
                 << (isa<graph::CausalMaskOp>(def)
                         ? ": this causal mask should have been absorbed by "
                           "a recognised zg.attention"
                         : "");
        std::vector<uint8_t> data;
        if (options.figuresOnly) {
          // The estimator reads the summary only.
        } else if (auto mask = dyn_cast<graph::CausalMaskOp>(def)) {
          encodeCausalMask(mask, t.dtype, data);
        } else {
          auto value = cast<graph::ConstantOp>(def).getValue();
          if (failed(encodeElements(value, t.dtype, data)))
            return def->emitError()
                   << "zplan-emit: cannot read the elements of this constant";
        }
        std::vector<int64_t> shape = shapeOf(t.value);
        constantOf[i] = int(constants.size());
        constants.push_back(fb::CreateConstant(
            fbb, static_cast<fb::DType>(t.dtype), fbb.CreateVector(shape),
            fbb.CreateVector(data)));
      }
      int r = root(int(i));
      std::vector<int64_t> shape = shapeOf(t.value);
      tensors.push_back(fb::CreateTensor(
          fbb, fbb.CreateString(tensorName(t, int(i))),
          static_cast<fb::DType>(t.dtype), fbb.CreateVector(shape),
          static_cast<fb::MemSpace>(lv.tensors[r].space), offsets[r],
          lv.tensors[r].reservedBytes(), static_cast<fb::TensorKind>(t.kind),
          constantOf[i], t.aliasOf >= 0 ? r : -1));
    }
    summary.numTensors = tensors.size();
    return success();
  }

  /// A path the runtime can open: relative to the plan's folder when one
  /// exists, else absolute.
  std::string weightPath(StringRef file) {
    std::error_code ec;
    fs::path model = fs::absolute(fs::path(options.modelDir), ec);
    fs::path abs = (model / file.str()).lexically_normal();
    fs::path planDir =
        fs::absolute(fs::path(options.planPath), ec).parent_path();
    fs::path rel = abs.lexically_relative(planDir.lexically_normal());
    if (!rel.empty())
      return rel.string();
    return abs.string();
  }

  /// Adds (or finds) the WeightSource for a weight's source attributes.
  FailureOr<int> sourceFor(Operation *op, StringRef name, StringAttr file,
                           IntegerAttr offset, IntegerAttr length,
                           ElementsAttr value, Type elementType,
                           ArrayRef<int64_t> sourceShape) {
    std::optional<PlanDType> dt = sourceDType(elementType);
    if (!dt)
      return op->emitError() << "zplan-emit: weight element type "
                             << elementType << " has no plan dtype";
    std::string path = file && !file.getValue().empty()
                           ? weightPath(file.getValue())
                           : std::string();
    std::string key = name.str() + "\x1f" + path + "\x1f" +
                      std::to_string(offset ? offset.getInt() : 0) + "\x1f" +
                      std::to_string(length ? length.getInt() : 0);
    if (path.empty())
      key += "\x1f" + std::to_string(reinterpret_cast<uintptr_t>(
                          value ? value.getAsOpaquePointer() : nullptr));
    auto it = sourceIndex.find(key);
    if (it != sourceIndex.end())
      return it->second;
    flatbuffers::Offset<flatbuffers::Vector<uint8_t>> inlineData = 0;
    if (path.empty()) {
      if (!value)
        return op->emitError()
               << "zplan-emit: weight '" << name
               << "' has neither an external file nor an inline value";
      std::vector<uint8_t> data;
      if (failed(encodeElements(value, *dt, data)))
        return op->emitError() << "zplan-emit: cannot read the inline value "
                                  "of weight '"
                               << name << "'";
      inlineData = fbb.CreateVector(data);
    }
    std::vector<int64_t> shape(sourceShape.begin(), sourceShape.end());
    int index = int(weights.size());
    weights.push_back(fb::CreateWeightSource(
        fbb, fbb.CreateString(name.str()), fbb.CreateString(path),
        offset ? uint64_t(offset.getInt()) : 0,
        length ? uint64_t(length.getInt()) : 0, static_cast<fb::DType>(*dt),
        fbb.CreateVector(shape), inlineData));
    sourceIndex[key] = index;
    return index;
  }

  /// The per-tp-index piece lists of `zd.pieces` (or one whole-tensor piece
  /// when absent).
  FailureOr<std::vector<
      flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Piece>>>>>
  piecesFor(Operation *op, ArrayAttr pieces, ArrayRef<int64_t> localShape,
            ArrayRef<int64_t> sourceShape, int tp) {
    std::vector<flatbuffers::Offset<
        flatbuffers::Vector<flatbuffers::Offset<fb::Piece>>>>
        perTp;
    if (!pieces) {
      if (localShape != sourceShape)
        return op->emitError()
               << "zplan-emit: weight's local shape differs from its source "
                  "shape but it has no zd.pieces";
      std::vector<int64_t> zero(localShape.size(), 0);
      std::vector<int64_t> size(localShape.begin(), localShape.end());
      auto piece =
          fb::CreatePiece(fbb, fbb.CreateVector(zero), fbb.CreateVector(zero),
                          fbb.CreateVector(size));
      auto list =
          fbb.CreateVector(std::vector<flatbuffers::Offset<fb::Piece>>{piece});
      perTp.assign(tp, list);
      return perTp;
    }
    if (int64_t(pieces.size()) != tp)
      return op->emitError() << "zplan-emit: zd.pieces has " << pieces.size()
                             << " lists but tp is " << tp;
    for (Attribute perRank : pieces) {
      auto list = dyn_cast<ArrayAttr>(perRank);
      if (!list)
        return op->emitError() << "zplan-emit: zd.pieces entries must be "
                                  "arrays of piece dictionaries";
      std::vector<flatbuffers::Offset<fb::Piece>> out;
      for (Attribute p : list) {
        auto dict = dyn_cast<DictionaryAttr>(p);
        auto src = dict ? dict.getAs<DenseI64ArrayAttr>("src_start") : nullptr;
        auto dst = dict ? dict.getAs<DenseI64ArrayAttr>("dst_start") : nullptr;
        auto size = dict ? dict.getAs<DenseI64ArrayAttr>("size") : nullptr;
        if (!src || !dst || !size)
          return op->emitError() << "zplan-emit: a zd.pieces entry lacks "
                                    "src_start, dst_start or size";
        std::vector<int64_t> s(src.asArrayRef().begin(),
                               src.asArrayRef().end());
        std::vector<int64_t> d(dst.asArrayRef().begin(),
                               dst.asArrayRef().end());
        std::vector<int64_t> z(size.asArrayRef().begin(),
                               size.asArrayRef().end());
        out.push_back(fb::CreatePiece(fbb, fbb.CreateVector(s),
                                      fbb.CreateVector(d),
                                      fbb.CreateVector(z)));
      }
      perTp.push_back(fbb.CreateVector(out));
    }
    return perTp;
  }

  /// The bindings of a merged weight's parts (zd.parts of --zplan-merge-
  /// linears), consecutive and all onto tensor `i`, and its state entry:
  /// the local tensor as a part of the parts' full tensors concatenated
  /// along zd.merge_dim (so that every persistent tensor stays named).
  LogicalResult emitPartBindings(size_t i, Operation *def, ArrayAttr parts,
                                 Type et) {
    const TensorInfo &t = lv.tensors[i];
    std::vector<int64_t> localShape = shapeOf(t.value);
    uint64_t localElements = elementCount(t.value);
    auto dimAttr = def->getAttrOfType<IntegerAttr>("zd.merge_dim");
    if (!dimAttr || dimAttr.getInt() < 0 ||
        dimAttr.getInt() >= int64_t(localShape.size()))
      return def->emitError()
             << "zplan-emit: a merged weight needs zd.merge_dim in [0, "
             << localShape.size() << ")";
    size_t dim = size_t(dimAttr.getInt());
    std::vector<int64_t> fullShape;
    // The state entry's pieces per tp index: each part's, moved to the
    // part's place in the concatenated full tensor.
    std::vector<std::vector<flatbuffers::Offset<fb::Piece>>> statePieces(
        summary.tp);
    for (Attribute a : parts) {
      auto part = dyn_cast<DictionaryAttr>(a);
      auto name = part ? part.getAs<StringAttr>("name") : nullptr;
      auto file = part ? part.getAs<StringAttr>("file") : nullptr;
      auto offset = part ? part.getAs<IntegerAttr>("offset") : nullptr;
      auto length = part ? part.getAs<IntegerAttr>("length") : nullptr;
      auto shape = part ? part.getAs<DenseI64ArrayAttr>("source_shape")
                        : nullptr;
      auto pieces = part ? part.getAs<ArrayAttr>("pieces") : nullptr;
      if (!name || !file || !offset || !length || !shape || !pieces)
        return def->emitError() << "zplan-emit: a zd.parts entry lacks name, "
                                   "file, offset, length, source_shape or "
                                   "pieces";
      std::vector<int64_t> sourceShape(shape.asArrayRef().begin(),
                                       shape.asArrayRef().end());
      FailureOr<int> source = sourceFor(def, name.getValue(), file, offset,
                                        length, ElementsAttr(), et,
                                        sourceShape);
      if (failed(source))
        return failure();
      auto perTp = piecesFor(def, pieces, localShape, sourceShape, summary.tp);
      if (failed(perTp))
        return failure();
      std::vector<flatbuffers::Offset<fb::RankSlice>> ranks;
      for (int r = 0; r < summary.world; ++r)
        ranks.push_back(fb::CreateRankSlice(fbb, (*perTp)[r % summary.tp], 0,
                                            localElements));
      bindings.push_back(fb::CreateWeightBinding(
          fbb, int(i), *source, fbb.CreateVector(localShape),
          fbb.CreateVector(ranks)));
      if (fullShape.empty()) {
        fullShape = sourceShape;
        fullShape[dim] = 0;
      }
      for (auto [tpIndex, list] : llvm::enumerate(pieces)) {
        if (tpIndex >= statePieces.size())
          break;
        for (Attribute p : cast<ArrayAttr>(list)) {
          auto d = cast<DictionaryAttr>(p);
          std::vector<int64_t> src(
              d.getAs<DenseI64ArrayAttr>("src_start").asArrayRef().begin(),
              d.getAs<DenseI64ArrayAttr>("src_start").asArrayRef().end());
          src[dim] += fullShape[dim];
          auto dst = d.getAs<DenseI64ArrayAttr>("dst_start").asArrayRef();
          auto size = d.getAs<DenseI64ArrayAttr>("size").asArrayRef();
          statePieces[tpIndex].push_back(fb::CreatePiece(
              fbb, fbb.CreateVector(src),
              fbb.CreateVector(std::vector<int64_t>(dst.begin(), dst.end())),
              fbb.CreateVector(std::vector<int64_t>(size.begin(), size.end()))));
        }
      }
      fullShape[dim] += sourceShape[dim];
    }
    std::vector<flatbuffers::Offset<fb::RankSlice>> stateRanks;
    for (int r = 0; r < summary.world; ++r)
      stateRanks.push_back(fb::CreateRankSlice(
          fbb, fbb.CreateVector(statePieces[r % summary.tp]), 0,
          localElements));
    std::string name = cast<graph::WeightOp>(def).getName().str();
    stateNames.insert(name);
    stateEntries.push_back(fb::CreateStateEntry(
        fbb, fbb.CreateString(name), int(i), fb::StateKind::param,
        fbb.CreateString(name), fbb.CreateVector(fullShape),
        fbb.CreateVector(localShape), fbb.CreateVector(stateRanks),
        fb::StateInit::from_source, 0.0));
    return success();
  }

  LogicalResult emitBindings() {
    int tp = summary.tp, dp = summary.dp, world = summary.world;
    for (size_t i = 0; i < lv.tensors.size(); ++i) {
      const TensorInfo &t = lv.tensors[i];
      if (t.kind != TensorKind::Weight && t.kind != TensorKind::WeightShard)
        continue;
      Operation *def = t.value.getDefiningOp();
      std::vector<int64_t> localShape, sourceShape;
      ArrayAttr pieces;
      FailureOr<int> source = failure();
      uint64_t shardElements = 0;
      Type et = cast<ShapedType>(t.value.getType()).getElementType();
      // A weight --zplan-merge-linears made: one binding per part, each
      // writing its pieces into the merged tensor.
      if (auto parts = def->getAttrOfType<ArrayAttr>("zd.parts")) {
        if (failed(emitPartBindings(i, def, parts, et)))
          return failure();
        continue;
      }
      if (auto w = dyn_cast<graph::WeightOp>(def)) {
        localShape = shapeOf(t.value);
        sourceShape = localShape;
        if (auto s = def->getAttrOfType<DenseI64ArrayAttr>("zd.source_shape"))
          sourceShape.assign(s.asArrayRef().begin(), s.asArrayRef().end());
        pieces = def->getAttrOfType<ArrayAttr>("zd.pieces");
        source =
            sourceFor(def, w.getName(), w.getFileAttr(), w.getOffsetAttr(),
                      w.getLengthAttr(), w.getValueAttr(), et, sourceShape);
      } else {
        auto s = cast<dist::WeightShardOp>(def);
        localShape.assign(s.getLocalShape().begin(), s.getLocalShape().end());
        sourceShape.assign(s.getSourceShape().begin(),
                           s.getSourceShape().end());
        pieces = s.getPiecesAttr();
        shardElements = elementCount(t.value);
        if (s.getDp() != dp)
          return def->emitError()
                 << "zplan-emit: shard made for dp = " << s.getDp()
                 << " but the mesh has dp = " << dp;
        source =
            sourceFor(def, s.getName(), s.getFileAttr(), s.getOffsetAttr(),
                      s.getLengthAttr(), s.getValueAttr(), et, sourceShape);
      }
      if (failed(source))
        return failure();
      auto perTp = piecesFor(def, pieces, localShape, sourceShape, tp);
      if (failed(perTp))
        return failure();
      uint64_t localElements = 1;
      for (int64_t d : localShape)
        localElements *= uint64_t(d);
      std::vector<flatbuffers::Offset<fb::RankSlice>> ranks;
      for (int r = 0; r < world; ++r) {
        int tpIndex = r % tp, dpIndex = r / tp;
        uint64_t begin = 0, end = localElements;
        if (t.kind == TensorKind::WeightShard) {
          begin = uint64_t(dpIndex) * shardElements;
          end = begin + shardElements;
        }
        ranks.push_back(
            fb::CreateRankSlice(fbb, (*perTp)[tpIndex], begin, end));
      }
      auto ranksVec = fbb.CreateVector(ranks);
      auto localVec = fbb.CreateVector(localShape);
      bindings.push_back(
          fb::CreateWeightBinding(fbb, int(i), *source, localVec, ranksVec));
      // The parameter's state entry: the same slices, named after it.
      std::string name = isa<graph::WeightOp>(def)
                             ? cast<graph::WeightOp>(def).getName().str()
                             : cast<dist::WeightShardOp>(def).getName().str();
      // One program may hold a parameter twice with different sharding: the
      // second copy's state entry gets a distinct name.
      std::string entryName = name;
      if (!stateNames.insert(entryName).second)
        entryName = name + "#" + std::to_string(i);
      stateNames.insert(entryName);
      stateEntries.push_back(fb::CreateStateEntry(
          fbb, fbb.CreateString(entryName), int(i),
          t.kind == TensorKind::Weight ? fb::StateKind::param
          : isMasterShard(t.value)     ? fb::StateKind::master
                                       : fb::StateKind::param_shard,
          fbb.CreateString(name), fbb.CreateVector(sourceShape), localVec,
          ranksVec, fb::StateInit::from_source, 0.0));
      if (paramLayouts.count(name))
        continue;
      ParamLayout &layout = paramLayouts[name];
      layout.localShape = localShape;
      layout.sourceShape = sourceShape;
      layout.localElements = localElements;
      layout.perTp = *perTp;
    }
    summary.numWeights = weights.size();
    return success();
  }

  /// State entries of zg.state tensors. A state that belongs to a parameter
  /// (`of`) takes the parameter's layout when it has the parameter's local
  /// element count (the same pieces, the whole tp-local tensor), or is its
  /// ZeRO partition when it is flat with ceil(local / dp) elements (dp index
  /// d keeps block d); any other state is its own full tensor on every rank.
  LogicalResult emitState() {
    int tp = summary.tp, dp = summary.dp, world = summary.world;
    for (size_t i = 0; i < lv.tensors.size(); ++i) {
      const TensorInfo &t = lv.tensors[i];
      auto st = t.value.getDefiningOp<graph::StateOp>();
      if (!st || t.aliasOf >= 0)
        continue;
      StringRef kind = st.getKind();
      fb::StateKind sk = kind == "master"     ? fb::StateKind::master
                         : kind == "moment1"  ? fb::StateKind::moment1
                         : kind == "moment2"  ? fb::StateKind::moment2
                         : kind == "grad"     ? fb::StateKind::grad
                         : kind == "kv_cache" ? fb::StateKind::kv_cache
                                              : fb::StateKind::scalar;
      fb::StateInit init = fb::StateInit::zeros;
      double initValue = 0.0;
      Attribute ia = st.getInit();
      if (auto f = dyn_cast<FloatAttr>(ia)) {
        init = fb::StateInit::constant;
        initValue = f.getValueAsDouble();
      } else if (auto str = dyn_cast<StringAttr>(ia);
                 str && str.getValue() == "copy_of_param") {
        init = fb::StateInit::copy_of_param;
      }
      std::vector<int64_t> shape = shapeOf(t.value);
      uint64_t n = elementCount(t.value);
      std::vector<int64_t> full = shape, local = shape;
      std::vector<flatbuffers::Offset<fb::RankSlice>> ranks;
      auto it = paramLayouts.find(st.getOf().str());
      auto kvHeads = st->getAttrOfType<IntegerAttr>("zg.kv_heads");
      if (sk == fb::StateKind::kv_cache && kvHeads && shape.size() == 4 &&
          shape[1] > 0 && kvHeads.getInt() % shape[1] == 0) {
        // A KV cache [B, H, L, D]: dp index d holds the global batch rows
        // [d B, (d + 1) B); its heads are the tp block of its tp index, one
        // block per group of tp / blocks ranks when tp is larger than the
        // key/value head count (docs/generation.md).
        int64_t blocks = kvHeads.getInt() / shape[1];
        full = {shape[0] * dp, kvHeads.getInt(), shape[2], shape[3]};
        for (int r = 0; r < world; ++r) {
          int64_t block = blocks == 1 ? 0 : (r % tp) / (tp / blocks);
          std::vector<int64_t> src = {(r / tp) * shape[0], block * shape[1],
                                      0, 0};
          std::vector<int64_t> zero(4, 0);
          auto piece = fb::CreatePiece(fbb, fbb.CreateVector(src),
                                       fbb.CreateVector(zero),
                                       fbb.CreateVector(shape));
          ranks.push_back(fb::CreateRankSlice(
              fbb,
              fbb.CreateVector(
                  std::vector<flatbuffers::Offset<fb::Piece>>{piece}),
              0, n));
        }
      } else if (it != paramLayouts.end() &&
          (n == it->second.localElements ||
           (shape.size() == 1 &&
            n == (it->second.localElements + uint64_t(dp) - 1) / uint64_t(dp)))) {
        const ParamLayout &pl = it->second;
        full = pl.sourceShape;
        local = pl.localShape;
        bool partition = n != pl.localElements;
        for (int r = 0; r < world; ++r) {
          uint64_t begin = partition ? uint64_t(r / tp) * n : 0;
          ranks.push_back(
              fb::CreateRankSlice(fbb, pl.perTp[r % tp], begin, begin + n));
        }
      } else {
        std::vector<int64_t> zero(shape.size(), 0);
        auto piece = fb::CreatePiece(fbb, fbb.CreateVector(zero),
                                     fbb.CreateVector(zero),
                                     fbb.CreateVector(shape));
        auto list = fbb.CreateVector(
            std::vector<flatbuffers::Offset<fb::Piece>>{piece});
        for (int r = 0; r < world; ++r)
          ranks.push_back(fb::CreateRankSlice(fbb, list, 0, n));
      }
      if (sk == fb::StateKind::kv_cache) {
        GenerationFigures &g = summary.generation;
        g.present = true;
        g.kvCacheBytes += n * dtypeBytes(t.dtype);
        g.batch = full[0];
        g.maxSeq = full[2];
      }
      stateNames.insert(st.getName().str());
      stateEntries.push_back(fb::CreateStateEntry(
          fbb, fbb.CreateString(st.getName().str()), int(i), sk,
          fbb.CreateString(st.getOf().str()), fbb.CreateVector(full),
          fbb.CreateVector(local), fbb.CreateVector(ranks), init, initValue));
    }
    return success();
  }

  void countComm(Operation *op, uint16_t opcode, AxisKind axis,
                 uint64_t inBytes, uint64_t outBytes) {
    static const std::map<uint16_t, std::string> kinds = {
        {opc::kAllReduce, "all_reduce"},
        {opc::kAllGather, "all_gather"},
        {opc::kReduceScatter, "reduce_scatter"},
        {opc::kBroadcast, "broadcast"},
        {opc::kGatherParam, "gather_param"}};
    uint64_t n =
        axis == AxisKind::Tp ? uint64_t(summary.tp) : uint64_t(summary.dp);
    std::string axisName = axis == AxisKind::Tp ? "tp" : "dp";
    CommFigure &f = summary.comm[kinds.at(opcode)][axisName];
    f.count += 1;
    uint64_t payload = 0, sent = 0;
    switch (opcode) {
    case opc::kAllReduce:
      payload = inBytes;
      sent = 2 * (n - 1) * inBytes / n;
      break;
    case opc::kAllGather:
    case opc::kGatherParam:
      payload = outBytes;
      sent = (n - 1) * inBytes;
      break;
    case opc::kReduceScatter:
      payload = inBytes;
      sent = (n - 1) * inBytes / n;
      break;
    case opc::kBroadcast:
      payload = inBytes;
      sent = n > 1 ? inBytes : 0;
      break;
    }
    f.payloadBytes += payload;
    f.sentBytes += sent;
  }

  /// The plan tensor of a value of the program being emitted.
  int indexOf(Value v) { return (*globalOf)[plv->indexOf.lookup(v)]; }

  static int64_t reductionCode(StringRef r) {
    return r == "max" ? 1 : r == "min" ? 2 : 0;
  }

  /// The device staging a collective needs on the cuda runtime, by the rule the runtime applies
  /// (zrt/collective_staging.h). The largest need is planned with the workspace, so that no device byte of
  /// the run is left out of the plan.
  void noteStaging(Operation *op) {
    const int inIndex = indexOf(op->getOperand(0)), outIndex = indexOf(op->getResult(0));
    const uint64_t es = dtypeBytes(lv.tensors[inIndex].dtype);
    const int ri = root(inIndex), ro = root(outIndex);
    zrt::CollectiveExtent e;
    e.in_begin = offsets[ri];
    e.in_bytes = elementCount(op->getOperand(0)) * es;
    e.out_begin = offsets[ro];
    e.out_bytes = elementCount(op->getResult(0)) * es;
    e.out_reserved = alignArena(lv.tensors[outIndex].bytes);
    e.same_space = lv.tensors[ri].space == lv.tensors[ro].space;
    auto outerOf = [](Value v, int64_t dim) {
      int64_t outer = 1;
      auto shape = cast<ShapedType>(v.getType()).getShape();
      for (int64_t k = 0; k < dim && k < int64_t(shape.size()); ++k)
        outer *= shape[k];
      return outer;
    };
    uint64_t need = 0;
    if (auto g = dyn_cast<dist::AllGatherOp>(op))
      need = zrt::collective_staging_bytes(
          zrt::StagedCollective::all_gather, e,
          outerOf(op->getOperand(0), g.getDim()), summary.dp);
    else if (auto r = dyn_cast<dist::ReduceScatterOp>(op))
      need = zrt::collective_staging_bytes(
          zrt::StagedCollective::reduce_scatter, e,
          outerOf(op->getResult(0), r.getDim()), summary.dp);
    else if (isa<dist::GatherParamOp>(op))
      need = zrt::collective_staging_bytes(zrt::StagedCollective::gather_param,
                                           e, 1, summary.dp);
    stagingBytes = std::max(stagingBytes, need);
  }

  LogicalResult emitInstr(Operation *op) {
    std::optional<uint16_t> opcode = opcodeOf(op);
    if (!opcode)
      return op->emitError()
             << "zplan-emit: op " << op->getName() << " has no plan opcode";
    std::vector<int32_t> inputs, outputs;
    std::optional<double> fill = fillValueOf(op);
    for (Value v : op->getOperands())
      if (!fill || v != cast<graph::AssignOp>(op).getValue())
        inputs.push_back(indexOf(v));
    for (Value v : op->getResults())
      outputs.push_back(indexOf(v));
    // Writes to persistent state name their targets as the plan op's outputs
    // (the registry's in-place results); zg.assign reads only its value and
    // is a copy, or a cast when the plan dtypes differ.
    if (isStateWriteOp(op)) {
      for (Value v : writtenOperands(op))
        outputs.push_back(indexOf(v));
      if (fill) {
        inputs.clear();
        opcode = opc::code(zrt::Op::fill);
      } else if (auto assign = dyn_cast<graph::AssignOp>(op)) {
        inputs = {indexOf(assign.getValue())};
        if (lv.tensors[outputs[0]].dtype != lv.tensors[inputs[0]].dtype)
          opcode = opc::kCast;
      }
    }
    std::vector<int64_t> ints;
    std::vector<double> floats;
    if (fill)
      floats = {*fill};
    AxisKind axis = AxisKind::None;

    auto streamAttr = op->getAttrOfType<StringAttr>(attr::kStream);
    if (!streamAttr)
      return op->emitError()
             << "zplan-emit: op has no zplan.stream (run --zplan-schedule)";
    uint8_t stream = streamAttr.getValue() == "comm"   ? 1
                     : streamAttr.getValue() == "copy" ? 2
                     : streamAttr.getValue() == "io"   ? 3
                                                       : 0;
    std::vector<int32_t> waits;
    if (auto w = op->getAttrOfType<DenseI64ArrayAttr>(attr::kWaits))
      for (int64_t e : w.asArrayRef())
        waits.push_back(int32_t(e));
    int32_t signal = -1;
    if (auto s = op->getAttrOfType<IntegerAttr>(attr::kSignal))
      signal = int32_t(s.getInt());

    // zg.split becomes one slice per result; only the last one signals,
    // and the first one waits, so stream order covers the others.
    if (auto split = dyn_cast<graph::SplitOp>(op)) {
      auto inShape = cast<ShapedType>(split.getInput().getType()).getShape();
      int64_t axisDim = split.getAxis(), at = 0;
      for (auto [k, r] : llvm::enumerate(split.getResults())) {
        std::vector<int64_t> sliceInts(inShape.size(), 0);
        sliceInts[axisDim] = at;
        sliceInts.insert(sliceInts.end(), inShape.size(), 1);
        at += cast<ShapedType>(r.getType()).getShape()[axisDim];
        std::vector<int32_t> out = {indexOf(r)};
        bool lastOne = k + 1 == split.getNumResults();
        instrs.push_back(fb::CreateInstr(
            fbb, opc::kSlice, fbb.CreateVector(inputs),
            fbb.CreateVector(out), fbb.CreateVector(sliceInts),
            fbb.CreateVector(std::vector<double>{}), static_cast<fb::Axis>(0),
            static_cast<fb::Stream>(stream),
            fbb.CreateVector(k == 0 ? waits : std::vector<int32_t>{}),
            lastOne ? signal : -1, fbb.CreateString(opName(op))));
      }
      return success();
    }

    LogicalResult ok = success();
    llvm::TypeSwitch<Operation *>(op)
        .Case([&](graph::MatmulOp m) {
          ints = {m.getTransA() ? 1 : 0, m.getTransB() ? 1 : 0};
          // Plans 2.9 / 2.14: the kernel --zplan-decode-products chose,
          // only when it chose a few-row kernel (other plans keep their
          // bytes).
          int kernel = fewRowsKernel(m);
          if (kernel < 0)
            ok = failure();
          else if (kernel > 0)
            ints.push_back(kernel);
        })
        .Case([&](graph::LinearOp l) {
          ints = {l.getTransW() ? 1 : 0};
          int kernel = fewRowsKernel(l);
          if (kernel < 0)
            ok = failure();
          else if (kernel > 0)
            ints.push_back(kernel);
          else
            appendGemmAlgo(l, ints);
          floats = {l.getAlpha().convertToDouble()};
        })
        .Case([&](graph::LinearMultiOp l) {
          // Plan 2.14: ints [trans_w, kernel] where a kernel was chosen
          // (without it the cluster kernels).
          ints = {l.getTransW() ? 1 : 0};
          int kernel = fewRowsKernel(l);
          if (kernel < 0)
            ok = failure();
          else if (kernel > 0)
            ints.push_back(kernel);
          floats = {l.getAlpha().convertToDouble()};
        })
        .Case([&](graph::NormProductsOp n) {
          // Plan 2.12: ints [trans_w (0: W [K, N]), act (0: the products,
          // else the opcode of the gated form's activation)].
          ints = {0, n.getAct().empty() ? 0 : actOpcode(n.getAct())};
          floats = {n.getAlpha().convertToDouble(),
                    n.getEpsilon().convertToDouble()};
        })
        .Case([&](graph::LinearGatedOp l) {
          ints = {l.getTransW() ? 1 : 0, actOpcode(l.getAct())};
          // Plan 2.14: the kernel as linear_multi's.
          int kernel = fewRowsKernel(l);
          if (kernel < 0)
            ok = failure();
          else if (kernel > 0)
            ints.push_back(kernel);
          floats = {l.getAlpha().convertToDouble()};
        })
        .Case([&](graph::SoftmaxOp s) { ints = {int64_t(s.getAxis())}; })
        .Case([&](graph::LayerNormOp l) {
          ints = {int64_t(l.getAxis())};
          floats = {l.getEpsilon().convertToDouble()};
        })
        .Case([&](graph::RotaryOp r) {
          // Plan 2.10: the second int only when set, so that other plans
          // keep their instruction bytes.
          ints = {r.getInverse() ? 1 : 0};
          if (r.getSeqMajor())
            ints.push_back(1);
        })
        .Case([&](graph::RmsNormOp r) {
          floats = {r.getEpsilon().convertToDouble()};
        })
        .Case<graph::ReduceSumOp, graph::ReduceMeanOp, graph::ReduceMaxOp,
              graph::ReduceMinOp, graph::ReduceProdOp>([&](auto r) {
          ints.push_back(r.getKeepdims() ? 1 : 0);
          for (int64_t a : r.getAxes())
            ints.push_back(a);
        })
        .Case([&](graph::TransposeOp t) {
          ints.assign(t.getPerm().begin(), t.getPerm().end());
        })
        .Case([&](graph::ConcatOp c) { ints = {int64_t(c.getAxis())}; })
        .Case([&](graph::SliceOp s) {
          ints.assign(s.getStarts().begin(), s.getStarts().end());
          ints.insert(ints.end(), s.getSteps().begin(), s.getSteps().end());
        })
        .Case([&](graph::GatherOp g) { ints = {int64_t(g.getAxis())}; })
        .Case([&](graph::ModOp m) { ints = {m.getFmod() ? 1 : 0}; })
        .Case([&](graph::CumSumOp c) {
          ints = {int64_t(c.getAxis()), c.getExclusive() ? 1 : 0,
                  c.getReverse() ? 1 : 0};
        })
        .Case([&](graph::GatherNdOp g) { ints = {int64_t(g.getBatchDims())}; })
        .Case([&](graph::GatherElementsOp g) { ints = {int64_t(g.getAxis())}; })
        .Case([&](graph::TileOp t) {
          ints.assign(t.getRepeats().begin(), t.getRepeats().end());
        })
        .Case([&](graph::EmbeddingOp e) {
          auto stride = op->getAttrOfType<IntegerAttr>("zd.vocab_stride");
          ints = {stride ? stride.getInt() : 0};
        })
        .Case([&](graph::LinearGeluOp l) {
          ints = {l.getTransW() ? 1 : 0};
          floats = {l.getAlpha().convertToDouble()};
        })
        .Case([&](graph::LinearResidualOp l) {
          ints = {l.getTransW() ? 1 : 0};
          appendGemmAlgo(l, ints);
          floats = {l.getAlpha().convertToDouble()};
        })
        .Case([&](graph::ResidualNormOp r) {
          ints = {r.getKind() == "rms" ? 1 : 0};
          floats = {r.getEpsilon().convertToDouble()};
        })
        .Case([&](graph::GatedOp g) {
          ints = {actOpcode(g.getAct())};
        })
        .Case([&](graph::AttentionOp a) {
          // The seq_major bits only when some are set, so that plans without
          // folded head transposes keep their instruction bytes.
          ints = {a.getCausal() ? 1 : 0};
          if (int64_t bits = a.getSeqMajorBits())
            ints.push_back(bits);
          // Plan 2.8: q, k and v's packing (offset, row stride, heads) after
          // the bits, only when --zplan-fold-transpose packed some operand
          // (which is then sequence-major, so the bits are there).
          if (std::optional<ArrayRef<int64_t>> packed = a.getPacked())
            ints.insert(ints.end(), packed->begin(), packed->end());
          // Plan 2.11: the kernel --zplan-attention-kernels chose (the cuda
          // target), int 11: the ints before it are then all written, zeros
          // where unused.
          if (int code = attentionKernelCode(op, /*grad=*/false); code < 0) {
            ok = failure();
          } else if (code > 0) {
            ints.resize(11, 0);
            ints.push_back(code);
          }
          floats = {a.getScale().convertToDouble()};
        })
        .Case([&](graph::SampleOp) {
          // Under a batch split over dp the rows are this rank's part; the
          // sampler then numbers them globally (docs/sampling.md).
          if (llvm::any_of(func.getArguments(), [&](BlockArgument a) {
                return func.getArgAttr(a.getArgNumber(), "zd.batch_split");
              }))
            ints = {1};
        })
        .Case([&](graph::CachedAttentionOp a) {
          floats = {a.getScale().convertToDouble()};
        })
        .Case([&](graph::RopeAttentionOp a) {
          floats = {a.getScale().convertToDouble()};
        })
        .Case([&](graph::DecodeLayerOp l) {
          // Plan 2.17: ints [act opcode]; floats [epsilon, scale].
          ints = {actOpcode(l.getAct())};
          floats = {l.getEpsilon().convertToDouble(),
                    l.getScale().convertToDouble()};
        })
        .Case([&](dist::AllGatherOp g) { ints = {int64_t(g.getDim())}; })
        .Case([&](dist::LocalSliceOp l) { ints = {int64_t(l.getDim())}; })
        .Case([&](dist::AllReduceOp r) {
          // The reduction int only when it is not the default sum, so that
          // forward plans keep their 1.x instruction bytes.
          if (int64_t red = reductionCode(r.getReduction()))
            ints = {red};
        })
        .Case([&](dist::ReduceScatterOp r) {
          ints = {int64_t(r.getDim())};
          if (int64_t red = reductionCode(r.getReduction()))
            ints.push_back(red);
        })
        .Case([&](graph::SoftmaxGradOp g) { ints = {int64_t(g.getAxis())}; })
        .Case([&](graph::LayerNormGradOp g) {
          ints = {int64_t(g.getAxis())};
          floats = {g.getEpsilon().convertToDouble()};
        })
        .Case([&](graph::RmsNormGradOp g) {
          floats = {g.getEpsilon().convertToDouble()};
        })
        .Case([&](graph::AttentionGradOp a) {
          ints = {a.getCausal() ? 1 : 0};
          if (int code = attentionKernelCode(op, /*grad=*/true); code < 0)
            ok = failure();
          else if (code > 0)
            ints.push_back(code);
          floats = {a.getScale().convertToDouble()};
        })
        .Case<graph::EmbeddingGradOp>([&](auto) {
          auto stride = op->getAttrOfType<IntegerAttr>("zd.vocab_stride");
          ints = {stride ? stride.getInt() : 0};
        })
        .Case<graph::LabelPickOp, graph::LabelPickGradOp>([&](auto l) {
          auto stride = op->getAttrOfType<IntegerAttr>("zd.vocab_stride");
          ints = {stride ? stride.getInt() : 0, l.getIgnoreIndex()};
        })
        .Case([&](graph::AdamwOp a) {
          floats = {a.getBeta1().convertToDouble(),
                    a.getBeta2().convertToDouble(),
                    a.getEps().convertToDouble(),
                    a.getWeightDecay().convertToDouble()};
        })
        .Case([&](dist::BroadcastOp b) { ints = {int64_t(b.getRoot())}; })
        .Default([](Operation *) {});
    if (failed(ok))
      return failure();

    if (isa<dist::NvmeReadOp, dist::NvmeWriteOp>(op)) {
      // Whole aligned ranges move, padding included: the figure is what the
      // runtime asks the disk for.
      const TensorInfo &file = lv.tensors[indexOf(op->getOperand(0))];
      auto &perProgram = isa<dist::NvmeReadOp>(op) ? summary.nvme.readBytes
                                                   : summary.nvme.writeBytes;
      perProgram[func.getName().str()] += file.reservedBytes();
    }
    if (isCollectiveOp(op)) {
      axis = axisOf(op);
      const TensorInfo &in = lv.tensors[indexOf(op->getOperand(0))];
      const TensorInfo &out = lv.tensors[indexOf(op->getResult(0))];
      hash = zrt::collective_hash_step(hash, *opcode, uint8_t(axis),
                                       uint8_t(in.dtype),
                                       elementCount(op->getOperand(0)));
      countComm(op, *opcode, axis, in.bytes, out.bytes);
      noteStaging(op);
      // The NCCL communicators the runtime will make: one per group kind
      // of more than one rank that a collective runs over.
      const int groupSize = axis == AxisKind::Tp   ? summary.tp
                            : axis == AxisKind::Dp ? summary.dp
                                                   : summary.world;
      if (groupSize > 1)
        usedGroups.insert(int(axis));
    }
    // Plan 2.18: --zplan-early-loads' decision that the kernel loads its
    // early operands before the wait for the previous kernel.
    const bool early = op->hasAttr(attr::kEarly);
    if (early)
      ++summary.earlySteps[func.getName().str()];
    instrs.push_back(fb::CreateInstr(
        fbb, *opcode, fbb.CreateVector(inputs), fbb.CreateVector(outputs),
        fbb.CreateVector(ints), fbb.CreateVector(floats),
        static_cast<fb::Axis>(axis), static_cast<fb::Stream>(stream),
        fbb.CreateVector(waits), signal, fbb.CreateString(opName(op)), early));
    return success();
  }

  /// A rank-0 argument with a `zg.default` is a scalar run input.
  std::optional<double> scalarDefault(unsigned n) {
    Attribute a = func.getArgAttr(n, "zg.default");
    if (!a || cast<ShapedType>(func.getArgument(n).getType()).getRank() != 0)
      return std::nullopt;
    if (auto f = dyn_cast<FloatAttr>(a))
      return f.getValueAsDouble();
    if (auto i = dyn_cast<IntegerAttr>(a))
      return double(i.getValue().getSExtValue());
    return std::nullopt;
  }

  LogicalResult emitIO(std::vector<flatbuffers::Offset<fb::IOBinding>> &ins,
                       std::vector<flatbuffers::Offset<fb::IOBinding>> &outs,
                       std::vector<flatbuffers::Offset<fb::ScalarInput>> &scalars) {
    int dp = summary.dp;
    Block &body = func.getBody().front();
    for (BlockArgument arg : body.getArguments()) {
      unsigned n = arg.getArgNumber();
      auto name = func.getArgAttrOfType<StringAttr>(n, "zg.name");
      std::string argName = name ? name.str() : "arg" + std::to_string(n);
      const TensorInfo &t = lv.tensors[indexOf(arg)];
      if (func.getArgAttr(n, "zg.default")) {
        std::optional<double> def = scalarDefault(n);
        if (!def)
          return func.emitError()
                 << "zplan-emit: argument " << n << " ('" << argName
                 << "') has a zg.default but is not a rank-0 tensor with a "
                    "float or integer default";
        scalars.push_back(fb::CreateScalarInput(
            fbb, fbb.CreateString(argName), indexOf(arg),
            static_cast<fb::DType>(t.dtype), *def));
        continue;
      }
      bool split = func.getArgAttr(n, "zd.batch_split") != nullptr;
      std::vector<int64_t> shape = shapeOf(arg);
      if (split && !shape.empty())
        shape[0] *= dp;
      ins.push_back(fb::CreateIOBinding(
          fbb, fbb.CreateString(argName), indexOf(arg),
          static_cast<fb::DType>(t.dtype), fbb.CreateVector(shape), split));
    }
    Operation *ret = body.getTerminator();
    for (auto [n, v] : llvm::enumerate(ret->getOperands())) {
      auto name = func.getResultAttrOfType<StringAttr>(n, "zg.name");
      bool split = func.getResultAttr(n, "zd.batch_split") != nullptr;
      std::vector<int64_t> shape = shapeOf(v);
      if (split && !shape.empty())
        shape[0] *= dp;
      const TensorInfo &t = lv.tensors[indexOf(v)];
      outs.push_back(fb::CreateIOBinding(
          fbb, fbb.CreateString(name ? name.str() : "out" + std::to_string(n)),
          indexOf(v), static_cast<fb::DType>(t.dtype), fbb.CreateVector(shape),
          split));
    }
    return success();
  }

  /// The parameter bytes one @decode step moves onto each rank's device:
  /// host -> device copies and, under ZeRO-3, the dp - 1 parts of every
  /// gathered parameter that other ranks send (docs/generation.md).
  void noteDecodeTraffic(Operation *op) {
    GenerationFigures &g = summary.generation;
    if (isa<dist::PrefetchOp>(op))
      g.decodePrefetchBytes += exactBytes(op->getOperand(0));
    else if (isa<dist::GatherParamOp>(op))
      g.decodeGatherBytes += exactBytes(op->getResult(0)) *
                             uint64_t(summary.dp - 1) / uint64_t(summary.dp);
  }

  /// The bytes of a tensor in the plan's dtype (as the runtime holds it).
  uint64_t exactBytes(Value v) {
    auto dt = planDTypeOfValue(v, summary.dtype);
    return elementCount(v) * (dt ? dtypeBytes(*dt) : 4);
  }

  /// One Program table: instructions, bindings, scalars, events, hash.
  FailureOr<flatbuffers::Offset<fb::Program>> emitProgram(size_t p) {
    func = lv.funcs[p];
    plv = &lv.programs[p];
    globalOf = &lv.globalOf[p];
    instrs.clear();
    hash = zrt::kFnvOffsetBasis;
    auto eventsAttr = func->getAttrOfType<IntegerAttr>(attr::kNumEvents);
    auto hashAttr = func->getAttrOfType<IntegerAttr>(attr::kCollectiveHash);
    if (!eventsAttr || !hashAttr)
      return func.emitError() << "zplan-emit: @" << func.getName()
                              << " has no schedule (run --zplan-schedule)";
    for (Operation *op : plv->steps) {
      if (failed(emitInstr(op)))
        return failure();
      if (func.getName() == "decode")
        noteDecodeTraffic(op);
      if (isa<dist::PrefetchOp>(op))
        summary.hostCopies.bytes[func.getName().str()] +=
            exactBytes(op->getOperand(0));
    }
    if (auto window = func->getAttrOfType<IntegerAttr>(
            "zplan.copy_window_bytes"))
      summary.hostCopies.windowBytes[func.getName().str()] = window.getInt();
    summary.numInstructions += instrs.size();
    uint64_t recorded = hashAttr.getValue().getZExtValue();
    if (recorded != hash)
      return func.emitError()
             << "zplan-emit: the collective sequence changed after "
                "scheduling (hash "
             << recorded << " recorded, " << hash << " emitted)";
    if (p == 0 || func.getName() == "main")
      summary.collectiveHash = hash;
    std::vector<flatbuffers::Offset<fb::IOBinding>> ins, outs;
    std::vector<flatbuffers::Offset<fb::ScalarInput>> scalars;
    if (failed(emitIO(ins, outs, scalars)))
      return failure();
    summary.programs.push_back(func.getName().str());
    summary.nvme.programs.push_back(func.getName().str());
    return fb::CreateProgram(
        fbb, fbb.CreateString(func.getName().str()), fbb.CreateVector(ins),
        fbb.CreateVector(outs), fbb.CreateVector(scalars),
        fbb.CreateVector(instrs), int32_t(eventsAttr.getInt()), hash);
  }

  LogicalResult run(std::vector<uint8_t> &payload) {
    auto dtypeAttr = module->getAttrOfType<StringAttr>(attr::kDType);
    auto arenaAttr =
        module->getAttrOfType<DenseI64ArrayAttr>(attr::kArenaBytes);
    if (!dtypeAttr || !arenaAttr || arenaAttr.size() < 2 ||
        arenaAttr.size() > 3)
      return module.emitError() << "zplan-emit: the module lacks the "
                                   "schedule or the memory plan (run "
                                   "--zplan-schedule and --zplan-memory-plan)";
    floatDType = *parseFloatDType(dtypeAttr.getValue());
    summary.tp = int(meshAttr("zd.tp"));
    summary.dp = int(meshAttr("zd.dp"));
    summary.world = summary.tp * summary.dp;
    summary.dtype = floatDType;

    FailureOr<ModuleLiveness> built = ModuleLiveness::build(module, floatDType);
    if (failed(built))
      return failure();
    lv = std::move(*built);
    if (failed(readOffsets()) || failed(emitTensors()) ||
        failed(emitBindings()) || failed(emitState()))
      return failure();
    std::vector<flatbuffers::Offset<fb::Program>> programs;
    for (size_t p = 0; p < lv.funcs.size(); ++p) {
      auto prog = emitProgram(p);
      if (failed(prog))
        return failure();
      programs.push_back(*prog);
    }

    uint64_t arena[kNumSpaces] = {
        uint64_t(arenaAttr[0]), uint64_t(arenaAttr[1]),
        arenaAttr.size() > 2 ? uint64_t(arenaAttr[2]) : 0};
    summary.memory = computeMemoryFigures(lv, arena);
    summary.memory.workspaceBytes += options.reserve.workspaceBytes;
    // The cuda runtime allocates exactly the plan's workspace: the GEMM workspace, then the collective
    // staging.
    if (options.backend == 1)
      summary.memory.workspaceBytes += alignArena(stagingBytes) +
                                       alignArena(kernelWorkspaceBytes(lv.funcs, floatDType));
    summary.memory.runtimeReserveBytes = options.reserve.reserveBytes;
    if (options.backend == 1)
      summary.memory.runtimeReserveBytes +=
          options.reserve.commOverride
              ? options.reserve.commBytes
              : uint64_t(usedGroups.size()) * options.reserve.commBytesPerGroup;
    const MemoryFigures &m = summary.memory;
    std::vector<flatbuffers::Offset<fb::RankMemory>> memory;
    for (int r = 0; r < summary.world; ++r) {
      std::vector<uint64_t> spaces = {arena[0], arena[1]};
      if (arena[2])
        spaces.push_back(arena[2]);
      auto arenas = fbb.CreateVector(spaces);
      fb::RankMemoryBuilder b(fbb);
      b.add_rank(r);
      b.add_arena_bytes(arenas);
      b.add_resident_weight_bytes(m.residentWeightBytes);
      b.add_peak_gathered_param_bytes(m.peakGatheredParamBytes);
      b.add_activation_bytes(m.activationBytes);
      b.add_collective_buffer_bytes(m.collectiveBufferBytes);
      b.add_workspace_bytes(m.workspaceBytes);
      b.add_planned_peak_bytes(m.plannedPeakBytes());
      b.add_planned_host_bytes(arena[1]);
      b.add_runtime_reserve_bytes(m.runtimeReserveBytes);
      b.add_param_bytes(m.residentWeightBytes);
      b.add_grad_bytes(m.gradBytes);
      b.add_master_bytes(m.masterBytes);
      b.add_moment_bytes(m.momentBytes);
      b.add_state_bytes(m.stateBytes);
      b.add_bucket_bytes(m.bucketBytes);
      memory.push_back(b.Finish());
    }

    auto fingerprint =
        fb::CreateFingerprint(fbb, summary.world, summary.tp, summary.dp,
                              static_cast<fb::Backend>(options.backend),
                              static_cast<fb::DType>(floatDType));
    // Plan 2.3: the NVMe store, when a tensor lives there.
    flatbuffers::Offset<fb::NvmeStore> nvme = 0;
    if (arena[2]) {
      auto path = module->getAttrOfType<StringAttr>("zplan.nvme_path");
      auto align = module->getAttrOfType<IntegerAttr>("zplan.nvme_alignment");
      summary.nvme.present = true;
      summary.nvme.fileBytes = arena[2];
      summary.nvme.alignment = align ? uint32_t(align.getInt()) : 4096;
      summary.nvme.path = path ? path.getValue().str() : "";
      nvme = fb::CreateNvmeStore(fbb, fbb.CreateString(summary.nvme.path),
                                 summary.nvme.alignment);
    }
    // Format 2: the 1.x single-stream fields stay empty; every program
    // carries its own.
    auto plan = fb::CreatePlan(
        fbb, zrt::kPlanVersionMajor, zrt::kPlanVersionMinor, fingerprint,
        fbb.CreateString(options.producer), fbb.CreateVector(tensors),
        fbb.CreateVector(constants), fbb.CreateVector(weights),
        fbb.CreateVector(bindings), 0, 0, 0, 0,
        fbb.CreateVector(memory), 0, options.zeroStage,
        fbb.CreateVector(programs), fbb.CreateVector(stateEntries), nvme);
    fb::FinishPlanBuffer(fbb, plan);
    payload.assign(fbb.GetBufferPointer(),
                   fbb.GetBufferPointer() + fbb.GetSize());
    return success();
  }
};

} // namespace

LogicalResult emitPlan(ModuleOp module, const EmitOptions &options,
                       std::vector<uint8_t> &payload, PlanSummary &summary) {
  Emitter emitter(module, options, summary);
  return emitter.run(payload);
}

} // namespace zplan::plan
