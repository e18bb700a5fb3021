//===- Importer.h - The ONNX importer's state and handlers -----*- C++ -*-===//
//
// Private to compiler/import. Import.cpp is the loader (protobuf, external
// data and its security checks, inputs, topological order, outputs); the op
// table (OpTable.cpp) maps each ONNX op to its first known opset, its number
// of required inputs and its handler; the handlers live in one file per op
// family (ElementwiseOps, LinalgOps, ShapeOps, GatherOps, ReductionOps,
// ControlOps). Values.cpp turns known values into zg constants and weights.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_IMPORT_IMPORTER_H
#define ZPLAN_COMPILER_IMPORT_IMPORTER_H

#include "compiler/import/ConstTensor.h"
#include "compiler/import/Import.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Path.h"

#include "onnx/onnx_pb.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace zplan::import::detail {

using namespace mlir;
using llvm::ArrayRef;
using llvm::SmallVector;
using llvm::StringRef;

/// Folded constants with more elements than this are stored compactly.
constexpr int64_t kCompressThreshold = 4096;

/// A reference to an external-data range, validated.
struct ExternalRef {
  std::string location; ///< as written in the model
  std::string fullPath; ///< resolved against the model's folder
  int64_t offset = 0, length = 0;
  bool exists = false;
};

/// One ONNX value during import.
struct Val {
  int32_t dtype = kFloat;
  Shape shape;
  /// Known value, if any. It may be stored compactly: same rank as `shape`,
  /// with size 1 along dims where the value does not vary (it broadcasts
  /// to `shape`). full() expands it for ops that need every element.
  std::shared_ptr<ConstTensor> c;
  const onnx::TensorProto *init = nullptr; ///< initializer it came from
  std::shared_ptr<ExternalRef> ext;        ///< external data of `init`
  Value v;                                 ///< materialized SSA value
};

class Importer {
public:
  Importer(MLIRContext &ctx, StringRef path, const ImportOptions &opts)
      : ctx(ctx), b(&ctx), wb(&ctx), path(path.str()), opts(opts),
        fileLoc(FileLineColLoc::get(&ctx, path, 0, 0)) {
    dir = llvm::sys::path::parent_path(path).str();
    if (dir.empty())
      dir = ".";
  }

  OwningOpRef<ModuleOp> run();

private:
  // --- Diagnostics.
  InFlightDiagnostic error() { return emitError(fileLoc); }
  InFlightDiagnostic nodeError(const onnx::NodeProto &n) {
    return emitError(fileLoc) << "node '" << n.name() << "' (" << n.op_type()
                              << ", opset " << opset << "): ";
  }

  // --- Model-level steps.
  LogicalResult load();
  LogicalResult checkOps(const onnx::GraphProto &g);
  LogicalResult loadInitializers();
  LogicalResult bindInputs(func::FuncOp &fn);
  LogicalResult sortNodes(const onnx::GraphProto &g,
                          std::vector<const onnx::NodeProto *> &order);
  LogicalResult importNode(const onnx::NodeProto &n);
  LogicalResult finishOutputs(func::FuncOp fn);

  // --- Values.
  LogicalResult readTensorProto(const onnx::TensorProto &t, const Twine &what,
                                Val &out);
  LogicalResult checkExternal(const onnx::TensorProto &t, int64_t numel,
                              ExternalRef &ref);
  Type elemType(int32_t dtype);
  RankedTensorType tensorType(int32_t dtype, ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, elemType(dtype));
  }
  Value materialize(Val &v);
  Value materializeConst(const ConstTensor &c,
                         std::optional<Shape> logical = std::nullopt);
  DenseElementsAttr toAttr(const ConstTensor &c);

  // --- Node helpers.
  Val *in(const onnx::NodeProto &n, int k) {
    if (k >= n.input_size() || n.input(k).empty())
      return nullptr;
    return &vals[n.input(k)];
  }
  /// Sets output k to a constant. `logical` is its shape when `c` is stored
  /// compactly (see Val::c); large constants are compressed here, which
  /// keeps shape-only subgraphs such as the causal mask of batch x seq x seq
  /// at seq x seq elements.
  void setConst(const onnx::NodeProto &n, int k, ConstTensor c,
                std::optional<Shape> logical = std::nullopt) {
    Val &o = vals[n.output(k)];
    o.dtype = c.dtype;
    o.shape = logical ? *logical : c.shape;
    if (c.numel() > kCompressThreshold)
      c = eval::compress(std::move(c));
    o.c = std::make_shared<ConstTensor>(std::move(c));
  }
  /// The value of v with every element present.
  const ConstTensor &full(Val &v) {
    if (v.c && v.c->shape != v.shape)
      v.c = std::make_shared<ConstTensor>(eval::expand(*v.c, v.shape));
    return *v.c;
  }
  void setValue(const onnx::NodeProto &n, int k, Value v) {
    Val &o = vals[n.output(k)];
    auto t = cast<RankedTensorType>(v.getType());
    o.dtype = dtypeOf(t.getElementType());
    o.shape.assign(t.getShape().begin(), t.getShape().end());
    o.v = v;
  }
  void alias(const onnx::NodeProto &n, int k, const Val &v) {
    vals[n.output(k)] = v;
  }
  int32_t dtypeOf(Type t);
  /// Reads an int-list input that must fold to a constant.
  LogicalResult constInts(const onnx::NodeProto &n, int k, StringRef what,
                          std::vector<int64_t> &out);
  LogicalResult normAxis(const onnx::NodeProto &n, int64_t &axis, int64_t rank);
  Location nodeLoc(const onnx::NodeProto &n) {
    return NameLoc::get(StringAttr::get(&ctx, n.name()), fileLoc);
  }

  template <typename OpTy>
  Value emit(Type t, ValueRange operands, ArrayRef<NamedAttribute> attrs = {}) {
    return OpTy::create(b, curLoc, TypeRange{t}, operands, attrs)->getResult(0);
  }
  NamedAttribute attr(StringRef name, Attribute a) {
    return NamedAttribute(StringAttr::get(&ctx, name), a);
  }

  // --- Values (Values.cpp).
  /// The static shape the model declares for a value (graph outputs and
  /// value_info), if every dim of it is a number.
  std::optional<Shape> declaredShape(const std::string &name);

public:
  // --- Per-op handlers, one file per op family (return failure after
  // reporting). The op table (OpTable.cpp) names each op's handler; the
  // handlers are public so that the table can take their addresses.

  // ElementwiseOps.cpp
  LogicalResult importElementwise(const onnx::NodeProto &n);
  LogicalResult importCast(const onnx::NodeProto &n);
  LogicalResult importWhere(const onnx::NodeProto &n);
  LogicalResult importTrilu(const onnx::NodeProto &n);
  LogicalResult importGelu(const onnx::NodeProto &n);
  // LinalgOps.cpp
  LogicalResult importMatMul(const onnx::NodeProto &n);
  LogicalResult importGemm(const onnx::NodeProto &n);
  // ShapeOps.cpp
  LogicalResult importReshapeLike(const onnx::NodeProto &n);
  LogicalResult importSlice(const onnx::NodeProto &n);
  LogicalResult importSplit(const onnx::NodeProto &n);
  LogicalResult importTranspose(const onnx::NodeProto &n);
  LogicalResult importConcat(const onnx::NodeProto &n);
  LogicalResult importExpand(const onnx::NodeProto &n);
  LogicalResult importTile(const onnx::NodeProto &n);
  LogicalResult importRange(const onnx::NodeProto &n);
  LogicalResult importShapeOf(const onnx::NodeProto &n);
  // GatherOps.cpp
  LogicalResult importGather(const onnx::NodeProto &n);
  LogicalResult importGatherND(const onnx::NodeProto &n);
  LogicalResult importGatherElements(const onnx::NodeProto &n);
  LogicalResult importScatterND(const onnx::NodeProto &n);
  // ReductionOps.cpp
  LogicalResult importReduce(const onnx::NodeProto &n);
  LogicalResult importCumSum(const onnx::NodeProto &n);
  LogicalResult importSoftmax(const onnx::NodeProto &n);
  LogicalResult importLayerNorm(const onnx::NodeProto &n);
  // ControlOps.cpp
  LogicalResult importConstant(const onnx::NodeProto &n);
  LogicalResult importConstantOfShape(const onnx::NodeProto &n);
  LogicalResult importIdentity(const onnx::NodeProto &n);
  LogicalResult importIf(const onnx::NodeProto &n);

private:
  // GatherOps.cpp: what the three gathers share.
  /// The data and indices of a gather, or an error naming the node.
  LogicalResult gatherInputs(const onnx::NodeProto &n, Val *&x, Val *&idx);
  /// The gather's result. Constant indices are checked against the data dims
  /// they index (dim `first + k % depth` of the data for the k-th), with an
  /// error naming the dim and the index, and made non-negative, so the runtime
  /// only sees indices in range. With constant data too, `fold` computes the
  /// result (false on an index out of range); otherwise `build` makes the op
  /// from the data and the indices as operands.
  LogicalResult
  finishGather(const onnx::NodeProto &n, Val &x, Val &idx, int64_t first,
               int64_t depth,
               function_ref<bool(const ConstTensor &, ConstTensor &)> fold,
               function_ref<Value(Value, Value)> build);

  MLIRContext &ctx;
  OpBuilder b, wb; ///< ops, and weights/constants at the top of @main
  std::string path, dir;
  ImportOptions opts;
  Location fileLoc;
  Location curLoc = UnknownLoc::get(&ctx);
  onnx::ModelProto model;
  int64_t opset = 0;
  std::unordered_map<std::string, Val> vals;
  std::map<std::string, int64_t> boundDims;
  llvm::StringMap<uint64_t> fileSizes;
};

/// A handler: imports one node, or reports and returns failure.
using Handler = LogicalResult (Importer::*)(const onnx::NodeProto &);

/// One op the importer accepts.
struct OpEntry {
  /// The first opset of the default domain at which the importer knows the
  /// op's form.
  int64_t since;
  /// The inputs that must be present before the handler looks at any.
  int minInputs;
  Handler handler;
  /// Whether the handler takes compactly stored constants (see Val::c);
  /// every other handler sees each constant input with all its elements.
  bool compact;
};

/// The op table (OpTable.cpp): ONNX op name -> entry.
const llvm::StringMap<OpEntry> &opTable();

//===----------------------------------------------------------------------===//
// Attributes of NodeProto.
//===----------------------------------------------------------------------===//

inline const onnx::AttributeProto *findAttr(const onnx::NodeProto &n,
                                            StringRef name) {
  for (const auto &a : n.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
inline int64_t attrInt(const onnx::NodeProto &n, StringRef name, int64_t dflt) {
  auto *a = findAttr(n, name);
  return a ? a->i() : dflt;
}
inline double attrFloat(const onnx::NodeProto &n, StringRef name, double dflt) {
  auto *a = findAttr(n, name);
  return a ? a->f() : dflt;
}
inline std::string attrString(const onnx::NodeProto &n, StringRef name,
                              StringRef dflt) {
  auto *a = findAttr(n, name);
  return a ? a->s() : dflt.str();
}
inline std::optional<std::vector<int64_t>> attrInts(const onnx::NodeProto &n,
                                                    StringRef name) {
  auto *a = findAttr(n, name);
  if (!a)
    return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

inline std::string shapeStr(ArrayRef<int64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

//===----------------------------------------------------------------------===//
// Known values.
//===----------------------------------------------------------------------===//

inline bool allConst(ArrayRef<Val *> vs) {
  return llvm::all_of(vs, [](Val *v) { return v && v->c; });
}

/// A floating initializer with more than one element is a parameter. Layout
/// ops on it (Transpose, Reshape, Gather, ...) are not folded, so that the
/// graph keeps using the parameter itself (a transposed weight stays
/// `transpose(zg.weight)` and is recognised as a linear with trans_w).
inline bool isParam(const Val &v) {
  return v.init && isFloatDType(v.dtype) && (!v.c || v.c->numel() > 1);
}

/// The constant value of v for folding a layout op, or null.
inline const ConstTensor *foldable(const Val *v) {
  return v && v->c && !isParam(*v) ? v->c.get() : nullptr;
}

} // namespace zplan::import::detail

#endif // ZPLAN_COMPILER_IMPORT_IMPORTER_H
