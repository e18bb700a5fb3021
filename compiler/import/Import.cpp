//===- Import.cpp - ONNX to zg importer -----------------------------------===//
//
// The importer walks the ONNX graph once, in topological order. Every value is
// either a known constant (initializers with inline data, and everything
// computed from constants and shapes alone, which is folded here), a parameter
// reference (external initializers: never read), or an SSA value of the zg
// function. Each node handler infers static result shapes itself: Debian's
// ONNX shape inference stops at opset 17 and skips what it does not know.
//
// Constants reach the function only where a runtime op consumes them. Large
// folded constants are stored compactly: dims along which a constant does not
// vary become a zg.expand of a smaller constant, and a causal additive mask
// becomes zg.causal_mask, which the attention recognition turns into the
// `causal` flag.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Import.h"
#include "compiler/import/ConstTensor.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include "onnx/onnx_pb.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <limits>
#include <queue>
#include <unordered_map>

using namespace mlir;
using namespace zplan::import;
namespace zg = zplan::graph;
using llvm::ArrayRef;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

/// The first and last opset of the default domain that the per-op handling
/// covers. Transformer exports use 13 to 21; the older forms of the accepted
/// ops (Softmax's 2-D coercion, axes and split as attributes) are handled
/// back to opset 7, and opsets 22 to 28 changed none of the accepted ops'
/// semantics (only added element types), which the ONNX node tests of onnx
/// 1.23 confirm (tests/onnx_node).
constexpr int64_t kMinOpset = 7, kMaxOpset = 28;

/// Folded constants with more elements than this are stored compactly.
constexpr int64_t kCompressThreshold = 4096;

/// Ops the importer accepts, with the first opset of the default domain at
/// which it knows the op's form. Ops marked fold-only have no zg counterpart:
/// their inputs must fold to constants.
struct OpEntry {
  int64_t since;
  bool foldOnly;
};

const llvm::StringMap<OpEntry> &opTable() {
  static const llvm::StringMap<OpEntry> table = {
      {"Add", {1, false}},          {"Sub", {1, false}},
      {"Mul", {1, false}},          {"Div", {1, false}},
      {"Pow", {1, false}},          {"Max", {1, false}},
      {"Min", {1, false}},          {"Sum", {1, false}},
      {"Mod", {10, false}},          {"Neg", {1, false}},
      {"Exp", {1, false}},          {"Log", {1, false}},
      {"Sqrt", {1, false}},         {"Reciprocal", {1, false}},
      {"Tanh", {1, false}},         {"Erf", {9, false}},
      {"Sigmoid", {1, false}},      {"Relu", {1, false}},
      {"Cos", {7, false}},          {"Sin", {7, false}},
      {"Abs", {1, false}},          {"Floor", {1, false}},
      {"Ceil", {1, false}},          {"Sign", {9, false}},
      {"Cast", {1, false}},         {"Where", {9, false}},
      {"Equal", {1, false}},        {"Less", {1, false}},
      {"Greater", {1, false}},      {"LessOrEqual", {12, false}},
      {"GreaterOrEqual", {12, false}}, {"And", {1, false}},
      {"Or", {1, false}},           {"Xor", {1, false}},
      {"Not", {1, false}},          {"IsNaN", {9, false}},
      {"MatMul", {1, false}},       {"Gemm", {1, false}},
      {"Transpose", {1, false}},    {"Reshape", {5, false}},
      {"Flatten", {1, false}},      {"Squeeze", {1, false}},
      {"Unsqueeze", {1, false}},    {"Concat", {1, false}},
      {"Slice", {10, false}},       {"Split", {1, false}},
      {"Gather", {1, false}},       {"GatherElements", {11, false}},
      {"GatherND", {11, false}},     {"Expand", {8, false}},
      {"Softmax", {1, false}},     {"ReduceSum", {1, false}},
      {"ReduceMean", {1, false}},   {"ReduceMax", {1, false}},
      {"ReduceMin", {1, false}},     {"ReduceProd", {1, false}},
      {"LayerNormalization", {17, false}}, {"Gelu", {20, false}},
      {"Identity", {1, false}},     {"Dropout", {1, false}},
      {"Shape", {1, false}},        {"Size", {1, false}},
      {"Range", {11, false}},        {"CumSum", {11, false}},
      {"ConstantOfShape", {9, true}}, {"Constant", {1, false}},
      {"Tile", {6, false}},
  };
  return table;
}

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
  const onnx::TensorProto *init = nullptr;  ///< initializer it came from
  std::shared_ptr<ExternalRef> ext;         ///< external data of `init`
  Value v;                                  ///< materialized SSA value
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
  LogicalResult checkOps();
  LogicalResult loadInitializers();
  LogicalResult bindInputs(func::FuncOp &fn);
  LogicalResult sortNodes(std::vector<const onnx::NodeProto *> &order);
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
  LogicalResult normAxis(const onnx::NodeProto &n, int64_t &axis,
                         int64_t rank);
  Location nodeLoc(const onnx::NodeProto &n) {
    return NameLoc::get(StringAttr::get(&ctx, n.name()), fileLoc);
  }

  template <typename OpTy>
  Value emit(Type t, ValueRange operands,
             ArrayRef<NamedAttribute> attrs = {}) {
    return OpTy::create(b, curLoc, TypeRange{t}, operands, attrs)
        ->getResult(0);
  }
  NamedAttribute attr(StringRef name, Attribute a) {
    return NamedAttribute(StringAttr::get(&ctx, name), a);
  }

  // --- Per-op handlers (return failure after reporting).
  LogicalResult importElementwise(const onnx::NodeProto &n);
  LogicalResult importMatMul(const onnx::NodeProto &n);
  LogicalResult importGemm(const onnx::NodeProto &n);
  LogicalResult importReshapeLike(const onnx::NodeProto &n);
  LogicalResult importSlice(const onnx::NodeProto &n);
  LogicalResult importSplit(const onnx::NodeProto &n);
  LogicalResult importGather(const onnx::NodeProto &n);
  LogicalResult importReduce(const onnx::NodeProto &n);
  LogicalResult importFoldOnly(const onnx::NodeProto &n);
  LogicalResult importRange(const onnx::NodeProto &n);
  LogicalResult importCumSum(const onnx::NodeProto &n);
  LogicalResult importGatherND(const onnx::NodeProto &n);
  LogicalResult importGatherElements(const onnx::NodeProto &n);
  LogicalResult importTile(const onnx::NodeProto &n);
  /// Checks constant indices against the dims they index (`dims[k]` for
  /// the k-th of every `depth` entries) and makes them non-negative.
  LogicalResult normIndices(const onnx::NodeProto &n, ConstTensor &idx,
                            ArrayRef<int64_t> dims, int64_t depth);
  /// The static shape the model declares for a value (graph outputs and
  /// value_info), if every dim of it is a number.
  std::optional<Shape> declaredShape(const std::string &name);
  LogicalResult importConstant(const onnx::NodeProto &n);

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

//===----------------------------------------------------------------------===//
// Attributes of NodeProto.
//===----------------------------------------------------------------------===//

const onnx::AttributeProto *findAttr(const onnx::NodeProto &n,
                                     StringRef name) {
  for (const auto &a : n.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
int64_t attrInt(const onnx::NodeProto &n, StringRef name, int64_t dflt) {
  auto *a = findAttr(n, name);
  return a ? a->i() : dflt;
}
double attrFloat(const onnx::NodeProto &n, StringRef name, double dflt) {
  auto *a = findAttr(n, name);
  return a ? a->f() : dflt;
}
std::string attrString(const onnx::NodeProto &n, StringRef name,
                       StringRef dflt) {
  auto *a = findAttr(n, name);
  return a ? a->s() : dflt.str();
}
std::optional<std::vector<int64_t>> attrInts(const onnx::NodeProto &n,
                                             StringRef name) {
  auto *a = findAttr(n, name);
  if (!a)
    return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::string shapeStr(ArrayRef<int64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

} // namespace

//===----------------------------------------------------------------------===//
// Model loading and validation.
//===----------------------------------------------------------------------===//

LogicalResult Importer::load() {
  // Only a regular file of at most 2 GiB (protobuf's limit) is read: a
  // folder or a device such as /dev/zero must not be read into memory.
  llvm::sys::fs::file_status st;
  if (llvm::sys::fs::status(path, st) || !llvm::sys::fs::exists(st))
    return error() << "cannot open ONNX model '" << path << "'";
  if (!llvm::sys::fs::is_regular_file(st))
    return error() << "'" << path << "' is not a regular file";
  if (st.getSize() > (uint64_t(2) << 30))
    return error() << "'" << path << "' is larger than 2 GiB (protobuf's "
                   << "limit); keep the weights as external data";
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return error() << "cannot open ONNX model '" << path << "'";
  std::string bytes(st.getSize(), '\0');
  f.read(bytes.data(), bytes.size());
  if (!f)
    return error() << "cannot read ONNX model '" << path << "'";
  if (bytes.empty())
    return error() << "'" << path << "' is empty, not an ONNX model";
  bool ok = false;
  try {
    ok = model.ParseFromString(bytes);
  } catch (const std::exception &e) {
    ok = false;
  }
  if (!ok)
    return error() << "'" << path
                   << "' is not a valid ONNX model (malformed or truncated "
                      "protobuf)";
  if (!model.has_graph() || model.graph().node_size() == 0)
    return error() << "'" << path << "' holds no graph (malformed or truncated "
                      "ONNX model)";
  for (const auto &o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      opset = o.version();
  if (opset == 0)
    return error() << "unsupported model: it imports no opset of the default "
                      "ONNX domain";
  if (opset < kMinOpset || opset > kMaxOpset)
    return error() << "unsupported opset " << opset
                   << "; zplan imports opsets " << kMinOpset << " to "
                   << kMaxOpset;
  return success();
}

LogicalResult Importer::checkOps() {
  // Every unsupported op is reported at once, so that a user sees the whole
  // gap in one run.
  std::vector<std::string> bad;
  for (const auto &n : model.graph().node()) {
    std::string where = "'" + n.op_type() + "' (node '" + n.name() +
                        "', domain '" + n.domain() + "', opset " +
                        std::to_string(opset) + ")";
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      bad.push_back(where);
      continue;
    }
    auto it = opTable().find(n.op_type());
    if (it == opTable().end() || it->second.since > opset)
      bad.push_back(where);
  }
  if (bad.empty())
    return success();
  auto d = error();
  d << bad.size() << " unsupported op"
    << (bad.size() == 1 ? "" : "s") << ":";
  for (const auto &s : bad)
    d << "\n  " << s;
  return failure();
}

Type Importer::elemType(int32_t dtype) {
  switch (dtype) {
  case kFloat: return Float32Type::get(&ctx);
  case kFloat16: return Float16Type::get(&ctx);
  case kBFloat16: return BFloat16Type::get(&ctx);
  case kDouble: return Float64Type::get(&ctx);
  case kInt64: return IntegerType::get(&ctx, 64);
  case kInt32: return IntegerType::get(&ctx, 32);
  case kBool: return IntegerType::get(&ctx, 1);
  default: return Float32Type::get(&ctx);
  }
}

int32_t Importer::dtypeOf(Type t) {
  if (t.isF32()) return kFloat;
  if (t.isF16()) return kFloat16;
  if (t.isBF16()) return kBFloat16;
  if (t.isF64()) return kDouble;
  if (t.isInteger(64)) return kInt64;
  if (t.isInteger(32)) return kInt32;
  return kBool;
}

LogicalResult Importer::checkExternal(const onnx::TensorProto &t,
                                      int64_t numel, ExternalRef &ref) {
  bool haveLength = false;
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location") {
      ref.location = kv.value();
    } else if (kv.key() == "offset" || kv.key() == "length") {
      int64_t v;
      if (StringRef(kv.value()).getAsInteger(10, v) || v < 0)
        return error() << "initializer '" << t.name() << "': external "
                       << kv.key() << " '" << kv.value()
                       << "' is not a non-negative integer";
      (kv.key() == "offset" ? ref.offset : ref.length) = v;
      haveLength |= kv.key() == "length";
    }
  }
  if (ref.location.empty())
    return error() << "initializer '" << t.name()
                   << "': external data without a location";
  // The location must name a file inside the model's folder: an absolute
  // path or one that climbs out would let a model read any file.
  if (llvm::sys::path::is_absolute(ref.location) || ref.location[0] == '/' ||
      ref.location[0] == '\\')
    return error() << "initializer '" << t.name() << "': external data location '"
                   << ref.location << "' is absolute; it must be relative to "
                   << "the model's folder";
  SmallVector<char> norm(ref.location.begin(), ref.location.end());
  llvm::sys::path::remove_dots(norm, /*remove_dot_dot=*/true);
  StringRef normRef(norm.data(), norm.size());
  if (normRef.starts_with("..") || normRef.empty() || normRef == ".")
    return error() << "initializer '" << t.name() << "': external data location '"
                   << ref.location << "' leaves the model's folder";
  SmallVector<char> full(dir.begin(), dir.end());
  llvm::sys::path::append(full, normRef);
  ref.fullPath = std::string(full.data(), full.size());
  int64_t expected = numel * dtypeSize(t.data_type());
  if (!haveLength)
    ref.length = expected;
  if (ref.length != expected)
    return error() << "initializer '" << t.name() << "': external length "
                   << ref.length << " but " << dtypeName(t.data_type()) << " x "
                   << shapeStr(SmallVector<int64_t>(t.dims().begin(),
                                                    t.dims().end()))
                   << " needs " << expected << " bytes";
  ref.exists = llvm::sys::fs::exists(ref.fullPath);
  if (!ref.exists) {
    if (opts.allowMissingData)
      return success();
    return error() << "initializer '" << t.name() << "': external data file '"
                   << ref.location << "' not found (looked for '"
                   << ref.fullPath << "'; pass --graph-only to compile "
                   << "without the weights)";
  }
  if (!llvm::sys::fs::is_regular_file(ref.fullPath))
    return error() << "initializer '" << t.name() << "': external data '"
                   << ref.location << "' is not a regular file";
  // Symlinks could still lead out of the folder: compare real paths.
  SmallVector<char> realFile, realDir;
  if (!llvm::sys::fs::real_path(ref.fullPath, realFile) &&
      !llvm::sys::fs::real_path(dir, realDir)) {
    std::string rf(realFile.begin(), realFile.end()),
        rd(realDir.begin(), realDir.end());
    if (!StringRef(rf).starts_with(rd + "/"))
      return error() << "initializer '" << t.name()
                     << "': external data location '" << ref.location
                     << "' resolves outside the model's folder";
  }
  auto it = fileSizes.find(ref.fullPath);
  uint64_t size;
  if (it == fileSizes.end()) {
    if (llvm::sys::fs::file_size(ref.fullPath, size))
      return error() << "initializer '" << t.name() << "': cannot read '"
                     << ref.fullPath << "'";
    fileSizes[ref.fullPath] = size;
  } else {
    size = it->second;
  }
  if (uint64_t(ref.offset) > size || uint64_t(ref.length) > size - ref.offset)
    return error() << "initializer '" << t.name() << "': external range ["
                   << ref.offset << ", " << uint64_t(ref.offset) + uint64_t(ref.length)
                   << ") lies outside '" << ref.location << "' (" << size
                   << " bytes)";
  return success();
}

static uint16_t readU16(const char *p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

static double halfToDouble(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(double(mant), -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(double(mant | 0x400), exp - 25);
  return sign ? -v : v;
}

static double bf16ToDouble(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Decodes little-endian raw bytes of a dtype into a ConstTensor.
static void decodeRaw(const char *p, ConstTensor &c) {
  int64_t n = c.numel();
  for (int64_t k = 0; k < n; ++k) {
    switch (c.dtype) {
    case kFloat: {
      float v;
      std::memcpy(&v, p + 4 * k, 4);
      c.f[k] = v;
      break;
    }
    case kDouble: std::memcpy(&c.f[k], p + 8 * k, 8); break;
    case kFloat16: c.f[k] = halfToDouble(readU16(p + 2 * k)); break;
    case kBFloat16: c.f[k] = bf16ToDouble(readU16(p + 2 * k)); break;
    case kInt64: std::memcpy(&c.i[k], p + 8 * k, 8); break;
    case kInt32: {
      int32_t v;
      std::memcpy(&v, p + 4 * k, 4);
      c.i[k] = v;
      break;
    }
    case kBool: c.i[k] = p[k] != 0; break;
    }
  }
}

LogicalResult Importer::readTensorProto(const onnx::TensorProto &t,
                                        const Twine &what, Val &out) {
  if (!isSupportedDType(t.data_type()))
    return error() << what << ": unsupported element type "
                   << dtypeName(t.data_type());
  out.dtype = t.data_type();
  out.shape.assign(t.dims().begin(), t.dims().end());
  auto numel = checkedNumElements(out.shape);
  if (!numel)
    return error() << what << ": shape " << shapeStr(out.shape)
                   << " has a negative dim or too many elements";
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    out.ext = std::make_shared<ExternalRef>();
    if (failed(checkExternal(t, *numel, *out.ext)))
      return failure();
    // Integer buffers (position ids, token types) feed shape-only folding,
    // so their values are read; float parameters are never read.
    if (!isFloatDType(t.data_type()) && out.ext->exists &&
        *numel <= (int64_t(1) << 24)) {
      ConstTensor c(out.dtype, out.shape);
      std::string buf(out.ext->length, '\0');
      std::ifstream f(out.ext->fullPath, std::ios::binary);
      f.seekg(out.ext->offset);
      f.read(buf.data(), out.ext->length);
      if (!f)
        return error() << what << ": cannot read external data from '"
                       << out.ext->fullPath << "'";
      decodeRaw(buf.data(), c);
      out.c = std::make_shared<ConstTensor>(std::move(c));
    }
    return success();
  }
  int64_t size = dtypeSize(out.dtype);
  // The data present is checked against the shape before anything is
  // allocated, so a huge shape without data is an error, not an allocation.
  int64_t have = 0;
  if (!t.raw_data().empty()) {
    if (int64_t(t.raw_data().size()) != *numel * size)
      return error() << what << ": raw_data holds " << t.raw_data().size()
                     << " bytes, " << dtypeName(out.dtype) << " x "
                     << shapeStr(out.shape) << " needs " << *numel * size;
  } else {
    switch (out.dtype) {
    case kFloat: have = t.float_data_size(); break;
    case kDouble: have = t.double_data_size(); break;
    case kInt64: have = t.int64_data_size(); break;
    default: have = t.int32_data_size(); break;
    }
    if (have != *numel)
      return error() << what << ": holds " << have << " values, shape "
                     << shapeStr(out.shape) << " needs " << *numel;
  }
  if (*numel > kMaxFoldElements)
    return error() << what << ": " << *numel
                   << " elements inline; zplan reads at most "
                   << kMaxFoldElements << " (use external data)";
  ConstTensor c(out.dtype, out.shape);
  if (!t.raw_data().empty()) {
    decodeRaw(t.raw_data().data(), c);
  } else {
    switch (out.dtype) {
    case kFloat:
      have = t.float_data_size();
      if (have == *numel)
        for (int64_t k = 0; k < have; ++k)
          c.f[k] = t.float_data(k);
      break;
    case kDouble:
      have = t.double_data_size();
      if (have == *numel)
        for (int64_t k = 0; k < have; ++k)
          c.f[k] = t.double_data(k);
      break;
    case kInt64:
      have = t.int64_data_size();
      if (have == *numel)
        for (int64_t k = 0; k < have; ++k)
          c.i[k] = t.int64_data(k);
      break;
    case kInt32: case kBool:
      have = t.int32_data_size();
      if (have == *numel)
        for (int64_t k = 0; k < have; ++k)
          c.setI(k, t.int32_data(k));
      break;
    case kFloat16: case kBFloat16:
      // 16-bit floats travel as their bit patterns in int32_data.
      have = t.int32_data_size();
      if (have == *numel)
        for (int64_t k = 0; k < have; ++k)
          c.f[k] = out.dtype == kFloat16 ? halfToDouble(t.int32_data(k))
                                         : bf16ToDouble(t.int32_data(k));
      break;
    }
    if (have != *numel)
      return error() << what << ": holds " << have << " values, shape "
                     << shapeStr(out.shape) << " needs " << *numel;
  }
  out.c = std::make_shared<ConstTensor>(std::move(c));
  return success();
}

LogicalResult Importer::loadInitializers() {
  // From IR version 4 on, an initializer that shares its name with a graph
  // input is only that input's default value: the input stays an input.
  // Before, every initializer had to be listed as an input too.
  llvm::StringSet<> inputs;
  if (model.ir_version() >= 4)
    for (const auto &in : model.graph().input())
      inputs.insert(in.name());
  for (const auto &t : model.graph().initializer()) {
    if (inputs.contains(t.name()))
      continue;
    Val v;
    if (failed(readTensorProto(t, "initializer '" + t.name() + "'", v)))
      return failure();
    v.init = &t;
    vals[t.name()] = std::move(v);
  }
  return success();
}

LogicalResult Importer::bindInputs(func::FuncOp &fn) {
  SmallVector<Type> types;
  SmallVector<std::string> names;
  bool firstIntSeen = false;
  for (const auto &in : model.graph().input()) {
    if (vals.count(in.name()) && vals[in.name()].init)
      continue; // an initializer listed as input (IR < 4)
    if (!in.type().has_tensor_type())
      return error() << "graph input '" << in.name() << "' is not a tensor";
    const auto &tt = in.type().tensor_type();
    if (!isSupportedDType(tt.elem_type()))
      return error() << "graph input '" << in.name()
                     << "': unsupported element type "
                     << dtypeName(tt.elem_type());
    if (!tt.has_shape())
      return error() << "graph input '" << in.name() << "' has no shape";
    bool positional = !firstIntSeen && !isFloatDType(tt.elem_type()) &&
                      tt.elem_type() != kBool;
    firstIntSeen |= positional;
    Shape shape;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto &dim = tt.shape().dim(d);
      if (dim.has_dim_value()) {
        if (dim.dim_value() < 0)
          return error() << "graph input '" << in.name() << "': dim " << d
                         << " is negative (" << dim.dim_value() << ")";
        shape.push_back(dim.dim_value());
        continue;
      }
      std::string name = dim.has_dim_param() ? dim.dim_param() : "";
      int64_t value = -1;
      if (!name.empty() && opts.dims.count(name))
        value = opts.dims.at(name);
      else if (!name.empty() && boundDims.count(name))
        value = boundDims[name];
      else if (name == "batch" && opts.batch >= 0)
        value = opts.batch;
      else if (name == "seq" && opts.seq >= 0)
        value = opts.seq;
      else if (positional && d == 0 && opts.batch >= 0)
        value = opts.batch;
      else if (positional && d == 1 && opts.seq >= 0)
        value = opts.seq;
      if (value < 0)
        return error() << "symbolic dim '" << (name.empty() ? "?" : name)
                       << "' (dim " << d << " of graph input '" << in.name()
                       << "') is unbound: pass --dim " 
                       << (name.empty() ? "NAME" : name)
                       << "=VALUE (or --batch/--seq)";
      if (!name.empty())
        boundDims[name] = value;
      shape.push_back(value);
    }
    if (!checkedNumElements(shape))
      return error() << "graph input '" << in.name() << "': shape "
                     << shapeStr(shape) << " has too many elements";
    Val v;
    v.dtype = tt.elem_type();
    v.shape = shape;
    vals[in.name()] = v;
    types.push_back(tensorType(v.dtype, shape));
    names.push_back(in.name());
  }
  fn = func::FuncOp::create(b, fileLoc, "main",
                            FunctionType::get(&ctx, types, {}));
  Block *entry = fn.addEntryBlock();
  for (size_t k = 0; k < names.size(); ++k) {
    vals[names[k]].v = entry->getArgument(k);
    fn.setArgAttr(k, "zg.name", StringAttr::get(&ctx, names[k]));
  }
  b.setInsertionPointToEnd(entry);
  wb.setInsertionPointToStart(entry);
  return success();
}

LogicalResult
Importer::sortNodes(std::vector<const onnx::NodeProto *> &order) {
  const auto &g = model.graph();
  std::unordered_map<std::string, int> producer;
  for (int k = 0; k < g.node_size(); ++k)
    for (const auto &o : g.node(k).output()) {
      if (o.empty())
        continue;
      if (vals.count(o) || !producer.emplace(o, k).second)
        return error() << "node '" << g.node(k).name() << "' ("
                       << g.node(k).op_type() << "): value '" << o
                       << "' is defined more than once";
    }
  std::vector<int> pending(g.node_size(), 0);
  std::vector<std::vector<int>> users(g.node_size());
  for (int k = 0; k < g.node_size(); ++k)
    for (const auto &i : g.node(k).input()) {
      if (i.empty() || vals.count(i))
        continue;
      auto it = producer.find(i);
      if (it == producer.end())
        return error() << "node '" << g.node(k).name() << "' ("
                       << g.node(k).op_type() << ") uses undefined value '"
                       << i << "'";
      ++pending[k];
      users[it->second].push_back(k);
    }
  // Kahn's algorithm with a min-heap on the node index keeps the model's own
  // order whenever it already is topological.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int k = 0; k < g.node_size(); ++k)
    if (!pending[k])
      ready.push(k);
  while (!ready.empty()) {
    int k = ready.top();
    ready.pop();
    order.push_back(&g.node(k));
    for (int u : users[k])
      if (--pending[u] == 0)
        ready.push(u);
  }
  if ((int)order.size() != g.node_size()) {
    for (int k = 0; k < g.node_size(); ++k)
      if (pending[k])
        return error() << "the graph has a cycle through node '"
                       << g.node(k).name() << "' (" << g.node(k).op_type()
                       << ")";
  }
  for (const auto &o : g.output())
    if (!vals.count(o.name()) && !producer.count(o.name()))
      return error() << "graph output '" << o.name() << "' is never defined";
  return success();
}

//===----------------------------------------------------------------------===//
// Materialization of constants and parameters.
//===----------------------------------------------------------------------===//

DenseElementsAttr Importer::toAttr(const ConstTensor &c) {
  auto type = tensorType(c.dtype, c.shape);
  int64_t n = c.numel();
  bool splat = n > 1 && c.isSplat();
  int64_t m = splat ? 1 : n;
  switch (c.dtype) {
  case kFloat: {
    std::vector<float> v(m);
    for (int64_t k = 0; k < m; ++k)
      v[k] = float(c.f[k]);
    return splat ? DenseElementsAttr::get(type, v[0])
                 : DenseElementsAttr::get(type, ArrayRef<float>(v));
  }
  case kDouble:
    return splat ? DenseElementsAttr::get(type, c.f[0])
                 : DenseElementsAttr::get(type, ArrayRef<double>(c.f));
  case kFloat16: case kBFloat16: {
    const llvm::fltSemantics &sem = c.dtype == kFloat16
                                        ? llvm::APFloat::IEEEhalf()
                                        : llvm::APFloat::BFloat();
    std::vector<APFloat> v;
    v.reserve(m);
    for (int64_t k = 0; k < m; ++k) {
      APFloat a(c.f[k]);
      bool lost;
      a.convert(sem, APFloat::rmNearestTiesToEven, &lost);
      v.push_back(a);
    }
    return splat ? DenseElementsAttr::get(type, v[0])
                 : DenseElementsAttr::get(type, ArrayRef<APFloat>(v));
  }
  case kInt64:
    return splat ? DenseElementsAttr::get(type, c.i[0])
                 : DenseElementsAttr::get(type, ArrayRef<int64_t>(c.i));
  case kInt32: {
    std::vector<int32_t> v(m);
    for (int64_t k = 0; k < m; ++k)
      v[k] = int32_t(c.i[k]);
    return splat ? DenseElementsAttr::get(type, v[0])
                 : DenseElementsAttr::get(type, ArrayRef<int32_t>(v));
  }
  default: {
    if (splat)
      return DenseElementsAttr::get(type, bool(c.i[0]));
    SmallVector<bool> v(m);
    for (int64_t k = 0; k < m; ++k)
      v[k] = c.i[k] != 0;
    return DenseElementsAttr::get(type, ArrayRef<bool>(v));
  }
  }
}

/// Returns the masked value when `c` is an additive causal mask: over its two
/// last dims [S, T], 0 where j <= i + (T - S) and one large negative value
/// elsewhere (at least one masked element), the same for every leading
/// index.
static std::optional<double> causalMaskValue(const ConstTensor &c) {
  size_t r = c.shape.size();
  if (!c.isFloat() || r < 2)
    return std::nullopt;
  int64_t s = c.shape[r - 2], t = c.shape[r - 1];
  if (s < 1 || t < 2 || t < s)
    return std::nullopt;
  int64_t n = c.numel(), plane = s * t;
  double masked = c.f[t - 1]; // row 0, last column: masked when t > t - s.
  if (!(masked <= -1e4))
    return std::nullopt;
  for (int64_t base = 0; base < n; base += plane)
    for (int64_t i = 0; i < s; ++i) {
      const double *row = &c.f[base + i * t];
      int64_t lim = i + (t - s);
      for (int64_t j = 0; j < t; ++j)
        if (row[j] != (j <= lim ? 0.0 : masked))
          return std::nullopt;
    }
  return masked;
}

Value Importer::materializeConst(const ConstTensor &stored,
                                 std::optional<Shape> logical) {
  Shape shape = logical ? *logical : stored.shape;
  auto type = tensorType(stored.dtype, shape);
  size_t r = shape.size();
  if (r >= 2 && stored.shape[r - 2] == shape[r - 2] &&
      stored.shape[r - 1] == shape[r - 1])
    if (auto masked = causalMaskValue(stored))
      return zg::CausalMaskOp::create(wb, fileLoc, type,
                                      wb.getF64FloatAttr(*masked));
  if (stored.numel() >= 1 && stored.isSplat()) {
    // A splat is one value whatever its shape: never allocate the shape.
    ConstTensor one(stored.dtype, {});
    one.f = stored.isFloat() ? std::vector<double>{stored.f[0]} : one.f;
    one.i = stored.isFloat() ? one.i : std::vector<int64_t>{stored.i[0]};
    DenseElementsAttr a = toAttr(one);
    return zg::ConstantOp::create(wb, fileLoc, type,
                                  DenseElementsAttr::get(type, a.getSplatValue<Attribute>()));
  }
  // Store a large constant only along the dims where it varies, and expand.
  ConstTensor small = stored.numel() > 1024 ? eval::compress(stored) : stored;
  Value v = zg::ConstantOp::create(
      wb, fileLoc, tensorType(small.dtype, small.shape), toAttr(small));
  if (small.shape != shape)
    v = zg::ExpandOp::create(wb, fileLoc, type, v);
  return v;
}

Value Importer::materialize(Val &v) {
  if (v.v)
    return v.v;
  if (v.init) {
    // A floating initializer with more than one element that a runtime op
    // consumes is a parameter; scalars and integer tensors are constants.
    auto type = tensorType(v.dtype, v.shape);
    bool param = isFloatDType(v.dtype) && (v.ext || v.c->numel() > 1);
    if (v.ext && !v.c)
      param = true;
    if (param) {
      StringRef file = v.ext ? StringRef(v.ext->location) : StringRef();
      SmallVector<NamedAttribute> attrs = {
          attr("name", wb.getStringAttr(v.init->name())),
          attr("file", wb.getStringAttr(file)),
          attr("offset", wb.getI64IntegerAttr(v.ext ? v.ext->offset : 0)),
          attr("length",
               wb.getI64IntegerAttr(v.ext ? v.ext->length
                                          : v.c->numel() * dtypeSize(v.dtype)))};
      if (!v.ext)
        attrs.push_back(attr("value", toAttr(*v.c)));
      v.v = zg::WeightOp::create(wb, fileLoc, TypeRange{type}, ValueRange{},
                                 attrs)
                ->getResult(0);
      return v.v;
    }
  }
  v.v = materializeConst(*v.c, v.shape);
  return v.v;
}

//===----------------------------------------------------------------------===//
// Node handlers.
//===----------------------------------------------------------------------===//

LogicalResult Importer::constInts(const onnx::NodeProto &n, int k,
                                  StringRef what, std::vector<int64_t> &out) {
  Val *v = in(n, k);
  if (!v)
    return nodeError(n) << "missing " << what << " input";
  if (!v->c)
    return nodeError(n) << what << " (input " << k << ", '" << n.input(k)
                        << "') does not fold to a constant (unsupported: "
                        << "zplan plans static shapes)";
  if (v->c->isFloat())
    return nodeError(n) << what << " must be an integer tensor";
  out = full(*v).toInts();
  return success();
}

LogicalResult Importer::normAxis(const onnx::NodeProto &n, int64_t &axis,
                                 int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return nodeError(n) << "axis " << axis << " out of range for rank "
                        << rank;
  if (axis < 0)
    axis += rank;
  return success();
}

static bool allConst(ArrayRef<Val *> vs) {
  return llvm::all_of(vs, [](Val *v) { return v && v->c; });
}

/// A floating initializer with more than one element is a parameter. Layout
/// ops on it (Transpose, Reshape, Gather, ...) are not folded, so that the
/// graph keeps using the parameter itself (a transposed weight stays
/// `transpose(zg.weight)` and is recognised as a linear with trans_w).
static bool isParam(const Val &v) {
  return v.init && isFloatDType(v.dtype) && (!v.c || v.c->numel() > 1);
}

/// The constant value of v for folding a layout op, or null.
static const ConstTensor *foldable(const Val *v) {
  return v && v->c && !isParam(*v) ? v->c.get() : nullptr;
}

LogicalResult Importer::importElementwise(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  using eval::Binary;
  using eval::Unary;
  static const llvm::StringMap<Unary> unaries = {
      {"Neg", Unary::Neg},     {"Exp", Unary::Exp},
      {"Log", Unary::Log},     {"Sqrt", Unary::Sqrt},
      {"Reciprocal", Unary::Reciprocal}, {"Tanh", Unary::Tanh},
      {"Erf", Unary::Erf},     {"Sigmoid", Unary::Sigmoid},
      {"Relu", Unary::Relu},   {"Cos", Unary::Cos},
      {"Sin", Unary::Sin},     {"Abs", Unary::Abs},
      {"Not", Unary::Not},     {"IsNaN", Unary::IsNaN},
      {"Floor", Unary::Floor}, {"Ceil", Unary::Ceil},
      {"Sign", Unary::Sign}};
  static const llvm::StringMap<Binary> binaries = {
      {"Add", Binary::Add},   {"Sub", Binary::Sub},
      {"Mul", Binary::Mul},   {"Div", Binary::Div},
      {"Pow", Binary::Pow},   {"Max", Binary::Max},
      {"Min", Binary::Min},   {"Sum", Binary::Add},
      {"Mod", Binary::Mod},   {"Equal", Binary::Equal},
      {"Less", Binary::Less}, {"Greater", Binary::Greater},
      {"LessOrEqual", Binary::LessEqual},
      {"GreaterOrEqual", Binary::GreaterEqual},
      {"And", Binary::And},   {"Or", Binary::Or},
      {"Xor", Binary::Xor}};

  if (auto it = unaries.find(op); it != unaries.end()) {
    Val *x = in(n, 0);
    if (!x)
      return nodeError(n) << "missing input";
    if (x->c) {
      setConst(n, 0, eval::unary(it->second, *x->c), x->shape);
      return success();
    }
    Value xv = materialize(*x);
    bool boolIn = x->dtype == kBool;
    if ((op == "Not") != boolIn)
      return nodeError(n) << "unsupported input type " << dtypeName(x->dtype);
    auto t = tensorType(x->dtype, x->shape);
    Value r;
    switch (it->second) {
    case Unary::Neg: r = emit<zg::NegOp>(t, xv); break;
    case Unary::Exp: r = emit<zg::ExpOp>(t, xv); break;
    case Unary::Log: r = emit<zg::LogOp>(t, xv); break;
    case Unary::Sqrt: r = emit<zg::SqrtOp>(t, xv); break;
    case Unary::Reciprocal: r = emit<zg::ReciprocalOp>(t, xv); break;
    case Unary::Tanh: r = emit<zg::TanhOp>(t, xv); break;
    case Unary::Erf: r = emit<zg::ErfOp>(t, xv); break;
    case Unary::Sigmoid: r = emit<zg::SigmoidOp>(t, xv); break;
    case Unary::Relu: r = emit<zg::ReluOp>(t, xv); break;
    case Unary::Cos: r = emit<zg::CosOp>(t, xv); break;
    case Unary::Sin: r = emit<zg::SinOp>(t, xv); break;
    case Unary::Abs: r = emit<zg::AbsOp>(t, xv); break;
    case Unary::Not: r = emit<zg::NotOp>(t, xv); break;
    case Unary::IsNaN:
      r = emit<zg::IsNanOp>(tensorType(kBool, x->shape), xv);
      break;
    case Unary::Floor:
    case Unary::Ceil:
      if (!isFloatDType(x->dtype))
        return nodeError(n) << "needs a float input, got "
                            << dtypeName(x->dtype);
      // ceil(x) = -floor(-x): the runtime has floor only.
      if (it->second == Unary::Floor) {
        r = emit<zg::FloorOp>(t, xv);
      } else {
        Value negX = emit<zg::NegOp>(t, xv);
        r = emit<zg::NegOp>(t, emit<zg::FloorOp>(t, negX));
      }
      break;
    case Unary::Sign: {
      // sign(x) = (x > 0) - (x < 0), each comparison cast to x's type. A NaN
      // gives 0 (ONNX leaves NaN to the backend).
      ConstTensor zero(x->dtype, {});
      Value z = materializeConst(zero);
      auto bt = tensorType(kBool, x->shape);
      Value pos = emit<zg::CastOp>(t, emit<zg::GreaterOp>(bt, {xv, z}));
      Value neg = emit<zg::CastOp>(t, emit<zg::LessOp>(bt, {xv, z}));
      r = emit<zg::SubOp>(t, {pos, neg});
      break;
    }
    default:
      return nodeError(n) << "needs a constant input (unsupported at run time)";
    }
    setValue(n, 0, r);
    return success();
  }

  auto bit = binaries.find(op);
  if (bit == binaries.end())
    return nodeError(n) << "internal: not an elementwise op";
  if (n.input_size() < 1)
    return nodeError(n) << "needs inputs";
  // Variadic Max / Min / Sum fold left into binary ops.
  // `cur` points into the value table until the first result exists, so
  // that materializing an input caches its SSA value there.
  Val *cur = in(n, 0), acc;
  if (!cur)
    return nodeError(n) << "missing input 0";
  for (int k = 1; k < n.input_size(); ++k) {
    Val *y = in(n, k);
    if (!y)
      return nodeError(n) << "missing input " << k;
    Val castY;
    if (op == "Pow" && cur->dtype != y->dtype) {
      // Pow (12+) takes an exponent of another numeric type; the result has
      // the base's type, so the exponent is converted to it.
      castY.dtype = cur->dtype;
      castY.shape = y->shape;
      if (y->c) {
        castY.c = std::make_shared<ConstTensor>(eval::cast(*y->c, cur->dtype));
      } else {
        castY.v = emit<zg::CastOp>(tensorType(cur->dtype, y->shape),
                                   materialize(*y));
      }
      y = &castY;
    }
    if (cur->dtype != y->dtype)
      return nodeError(n) << "input types differ: " << dtypeName(cur->dtype)
                          << " and " << dtypeName(y->dtype);
    auto shape = broadcast(cur->shape, y->shape);
    if (!shape)
      return nodeError(n) << "input shapes " << shapeStr(cur->shape) << " and "
                          << shapeStr(y->shape) << " do not broadcast";
    if (!checkedNumElements(*shape))
      return nodeError(n) << "result has too many elements";
    Val r;
    if (cur->c && y->c) {
      // Compact operands give a compact result: broadcast the stored shapes.
      Shape stored = *broadcast(cur->c->shape, y->c->shape);
      // Mod's fmod attribute picks the sign rule for integers (floats always
      // take C fmod).
      Binary bop = bit->second == Binary::Mod && attrInt(n, "fmod", 0)
                       ? Binary::FMod
                       : bit->second;
      ConstTensor c = eval::binary(bop, *cur->c, *y->c, stored);
      if (c.numel() > kCompressThreshold)
        c = eval::compress(std::move(c));
      r.dtype = c.dtype;
      r.shape = *shape;
      r.c = std::make_shared<ConstTensor>(std::move(c));
      acc = std::move(r);
      cur = &acc;
      continue;
    }
    Value a = materialize(*cur), bv = materialize(*y);
    bool cmp = op == "Equal" || op == "Less" || op == "Greater" ||
               op == "LessOrEqual" || op == "GreaterOrEqual" || op == "And" ||
               op == "Or" || op == "Xor";
    bool logical = op == "And" || op == "Or" || op == "Xor";
    if (logical != (cur->dtype == kBool) && op != "Equal")
      return nodeError(n) << "unsupported input type " << dtypeName(cur->dtype);
    auto t = tensorType(cmp ? int32_t(kBool) : cur->dtype, *shape);
    Value v;
    switch (bit->second) {
    case Binary::Add: v = emit<zg::AddOp>(t, {a, bv}); break;
    case Binary::Sub: v = emit<zg::SubOp>(t, {a, bv}); break;
    case Binary::Mul: v = emit<zg::MulOp>(t, {a, bv}); break;
    case Binary::Div: v = emit<zg::DivOp>(t, {a, bv}); break;
    case Binary::Pow: v = emit<zg::PowOp>(t, {a, bv}); break;
    case Binary::Max: v = emit<zg::MaxOp>(t, {a, bv}); break;
    case Binary::Min: v = emit<zg::MinOp>(t, {a, bv}); break;
    case Binary::Equal: v = emit<zg::EqualOp>(t, {a, bv}); break;
    case Binary::Less: v = emit<zg::LessOp>(t, {a, bv}); break;
    case Binary::Greater: v = emit<zg::GreaterOp>(t, {a, bv}); break;
    case Binary::LessEqual: v = emit<zg::LessEqualOp>(t, {a, bv}); break;
    case Binary::GreaterEqual: v = emit<zg::GreaterEqualOp>(t, {a, bv}); break;
    case Binary::And: v = emit<zg::AndOp>(t, {a, bv}); break;
    case Binary::Or: v = emit<zg::OrOp>(t, {a, bv}); break;
    case Binary::Xor: {
      // a xor b = (a and not b) or (not a and b), with the bool ops the
      // runtime has.
      auto na = emit<zg::NotOp>(tensorType(kBool, cur->shape), a);
      auto nb = emit<zg::NotOp>(tensorType(kBool, y->shape), bv);
      v = emit<zg::OrOp>(t, {emit<zg::AndOp>(t, {a, nb}),
                             emit<zg::AndOp>(t, {na, bv})});
      break;
    }
    case Binary::Mod: {
      bool fmod = attrInt(n, "fmod", 0);
      auto fmodAttr = attr("fmod", b.getBoolAttr(true));
      if (fmod || !isFloatDType(cur->dtype)) {
        v = emit<zg::ModOp>(t, {a, bv},
                            {attr("fmod", b.getBoolAttr(fmod))});
        break;
      }
      // Float Mod with fmod = 0 is numpy's mod: the remainder takes the
      // divisor's sign. The runtime's float mod is C's fmod (the dividend's
      // sign), so a non-zero remainder whose sign differs from the
      // divisor's moves by one divisor.
      Value r = emit<zg::ModOp>(t, {a, bv}, {fmodAttr});
      ConstTensor zero(cur->dtype, {});
      Value z = materializeConst(zero);
      auto bt = tensorType(kBool, *shape);
      auto byt = tensorType(kBool, y->shape);
      Value rNeg = emit<zg::LessOp>(bt, {r, z}),
            rPos = emit<zg::GreaterOp>(bt, {r, z});
      Value yNeg = emit<zg::LessOp>(byt, {bv, z}),
            yPos = emit<zg::GreaterOp>(byt, {bv, z});
      Value differ = emit<zg::OrOp>(bt, {emit<zg::AndOp>(bt, {rNeg, yPos}),
                                         emit<zg::AndOp>(bt, {rPos, yNeg})});
      v = emit<zg::WhereOp>(t, {differ, emit<zg::AddOp>(t, {r, bv}), r});
      break;
    }
    default:
      return nodeError(n) << "needs constant inputs (unsupported at run time)";
    }
    r.dtype = dtypeOf(t.getElementType());
    r.shape = *shape;
    r.v = v;
    acc = std::move(r);
    cur = &acc;
  }
  alias(n, 0, *cur);
  return success();
}

LogicalResult Importer::importMatMul(const onnx::NodeProto &n) {
  Val *a = in(n, 0), *bb = in(n, 1);
  if (!a || !bb)
    return nodeError(n) << "needs two inputs";
  if (a->dtype != bb->dtype)
    return nodeError(n) << "input types differ";
  if (a->shape.empty() || bb->shape.empty())
    return nodeError(n) << "inputs must have rank >= 1";
  Shape as = a->shape, bs = bb->shape;
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  if (as.back() != bs[bs.size() - 2])
    return nodeError(n) << "contraction dims differ: " << shapeStr(a->shape)
                        << " x " << shapeStr(bb->shape);
  auto batch = broadcast(ArrayRef<int64_t>(as).drop_back(2),
                         ArrayRef<int64_t>(bs).drop_back(2));
  if (!batch)
    return nodeError(n) << "batch dims do not broadcast: "
                        << shapeStr(a->shape) << " x " << shapeStr(bb->shape);
  Shape out = *batch;
  if (a->shape.size() > 1)
    out.push_back(as[as.size() - 2]);
  if (bb->shape.size() > 1)
    out.push_back(bs.back());
  if (a->c && bb->c) {
    setConst(n, 0, eval::matmul(*a->c, *bb->c, out));
    return success();
  }
  setValue(n, 0,
           emit<zg::MatmulOp>(tensorType(a->dtype, out),
                              {materialize(*a), materialize(*bb)}));
  return success();
}

LogicalResult Importer::importGemm(const onnx::NodeProto &n) {
  // Gemm becomes the generic ops it stands for (transposes, matmul, scale,
  // bias add); the linear recognition folds them back into zg.linear, so
  // Gemm and MatMul + Add exports end up identical.
  Val *a = in(n, 0), *bb = in(n, 1), *c = in(n, 2);
  if (!a || !bb)
    return nodeError(n) << "needs inputs A and B";
  if (a->shape.size() != 2 || bb->shape.size() != 2)
    return nodeError(n) << "A and B must be 2-D, got " << shapeStr(a->shape)
                        << " and " << shapeStr(bb->shape);
  bool ta = attrInt(n, "transA", 0), tb = attrInt(n, "transB", 0);
  double alpha = attrFloat(n, "alpha", 1.0), beta = attrFloat(n, "beta", 1.0);
  int64_t m = ta ? a->shape[1] : a->shape[0], k = ta ? a->shape[0] : a->shape[1];
  int64_t k2 = tb ? bb->shape[1] : bb->shape[0],
          nn = tb ? bb->shape[0] : bb->shape[1];
  if (k != k2)
    return nodeError(n) << "contraction dims differ: " << k << " vs " << k2;
  if (a->dtype != bb->dtype || (c && c->dtype != a->dtype))
    return nodeError(n) << "input types differ";
  Shape out = {m, nn};
  if (c && !broadcast(c->shape, out).has_value())
    return nodeError(n) << "C " << shapeStr(c->shape)
                        << " does not broadcast to " << shapeStr(out);
  auto transposed = [&](Val *v) {
    Value x = materialize(*v);
    Shape s = {v->shape[1], v->shape[0]};
    return emit<zg::TransposeOp>(
        tensorType(v->dtype, s), x,
        {attr("perm", b.getDenseI64ArrayAttr({1, 0}))});
  };
  Value av = ta ? transposed(a) : materialize(*a);
  Value bv = tb ? transposed(bb) : materialize(*bb);
  auto t = tensorType(a->dtype, out);
  Value r = emit<zg::MatmulOp>(t, {av, bv});
  auto scalar = [&](double x) {
    ConstTensor s(a->dtype, {});
    s.set(0, x);
    return materializeConst(s);
  };
  if (alpha != 1.0)
    r = emit<zg::MulOp>(t, {r, scalar(alpha)});
  if (c && beta != 0.0) {
    Value cv;
    if (c->c && beta != 1.0) {
      ConstTensor s(a->dtype, {});
      s.set(0, beta);
      cv = materializeConst(
          eval::binary(eval::Binary::Mul, *c->c, s, c->shape));
    } else {
      cv = materialize(*c);
      if (beta != 1.0)
        cv = emit<zg::MulOp>(cv.getType(), {cv, scalar(beta)});
    }
    r = emit<zg::AddOp>(t, {r, cv});
  }
  setValue(n, 0, r);
  return success();
}

/// The longest Reshape shape accepted: far above any model's rank, far below
/// what makes shape checks slow.
constexpr size_t kMaxReshapeRank = 64;

LogicalResult Importer::importReshapeLike(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  Val *x = in(n, 0);
  if (!x)
    return nodeError(n) << "missing input";
  int64_t rank = x->shape.size();
  Shape out;
  if (op == "Reshape") {
    std::vector<int64_t> s;
    if (failed(constInts(n, 1, "shape", s)))
      return failure();
    bool allowzero = attrInt(n, "allowzero", 0);
    // A shape tensor can be long (a folded ConstantOfShape); no tensor of
    // that rank is useful, and the plan format stops at rank 8 anyway.
    if (s.size() > kMaxReshapeRank)
      return nodeError(n) << "shape has " << s.size()
                          << " entries; zplan handles rank up to "
                          << kMaxReshapeRank;
    // The product of the output dims so far, checked as it grows: checking
    // the whole prefix at every entry was quadratic in the shape's length
    // (fuzz/FINDINGS.md F31).
    int64_t infer = -1, known = 1, sofar = 1;
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t v = s[d];
      if (v == 0 && !allowzero) {
        if ((int64_t)d >= rank)
          return nodeError(n) << "shape entry " << d
                              << " is 0 but the input has rank " << rank;
        v = x->shape[d];
      }
      if (v == -1) {
        if (infer >= 0)
          return nodeError(n) << "shape has more than one -1";
        infer = d;
        out.push_back(1);
        continue;
      }
      if (v < 0)
        return nodeError(n) << "shape entry " << v << " is negative";
      out.push_back(v);
      if (!checkedNumElements({sofar, v}))
        return nodeError(n) << "shape has too many elements";
      sofar *= v;
      known *= v;
    }
    int64_t total = *checkedNumElements(x->shape);
    if (infer >= 0) {
      if (known == 0 || total % known)
        return nodeError(n) << "cannot infer -1: " << total
                            << " elements into " << shapeStr(s);
      out[infer] = total / known;
    }
    if (*checkedNumElements(out) != total)
      return nodeError(n) << "cannot reshape " << shapeStr(x->shape) << " to "
                          << shapeStr(out);
  } else if (op == "Flatten") {
    int64_t axis = attrInt(n, "axis", 1);
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis > rank)
      return nodeError(n) << "axis out of range";
    // Each side is checked on its own: a zero dim keeps the total small
    // while the other side's product can still overflow.
    ArrayRef<int64_t> dims(x->shape);
    auto a = checkedNumElements(dims.take_front(axis));
    auto c = checkedNumElements(dims.drop_front(axis));
    if (!a || !c)
      return nodeError(n) << "flattening " << shapeStr(x->shape)
                          << " at axis " << axis << " overflows int64";
    out = {*a, *c};
  } else if (op == "Squeeze" || op == "Unsqueeze") {
    std::vector<int64_t> axes;
    bool haveAxes = true;
    if (opset >= 13) {
      if (in(n, 1)) {
        if (failed(constInts(n, 1, "axes", axes)))
          return failure();
      } else {
        haveAxes = false;
      }
    } else if (auto a = attrInts(n, "axes")) {
      axes = *a;
    } else {
      haveAxes = false;
    }
    if (op == "Squeeze") {
      SmallVector<bool> drop(rank, false);
      if (!haveAxes) {
        for (int64_t d = 0; d < rank; ++d)
          drop[d] = x->shape[d] == 1;
      }
      for (int64_t a : axes) {
        if (failed(normAxis(n, a, rank)))
          return failure();
        if (x->shape[a] != 1)
          return nodeError(n) << "cannot squeeze dim " << a << " of size "
                              << x->shape[a];
        drop[a] = true;
      }
      for (int64_t d = 0; d < rank; ++d)
        if (!drop[d])
          out.push_back(x->shape[d]);
    } else {
      if (!haveAxes)
        return nodeError(n) << "needs axes";
      int64_t outRank = rank + axes.size();
      SmallVector<bool> ins(outRank, false);
      for (int64_t a : axes) {
        if (failed(normAxis(n, a, outRank)))
          return failure();
        if (ins[a])
          return nodeError(n) << "repeated axis " << a;
        ins[a] = true;
      }
      int64_t src = 0;
      for (int64_t d = 0; d < outRank; ++d)
        out.push_back(ins[d] ? 1 : x->shape[src++]);
      if (foldable(x) && x->c->shape != x->shape) {
        // Keep a compact constant compact: insert the same unit dims.
        ConstTensor c = *x->c;
        Shape stored;
        src = 0;
        for (int64_t d = 0; d < outRank; ++d)
          stored.push_back(ins[d] ? 1 : c.shape[src++]);
        c.shape = stored;
        setConst(n, 0, std::move(c), out);
        return success();
      }
    }
  }
  if (out == x->shape) {
    alias(n, 0, *x);
    return success();
  }
  if (foldable(x)) {
    ConstTensor c = full(*x);
    c.shape = out;
    setConst(n, 0, std::move(c));
    return success();
  }
  setValue(n, 0,
           emit<zg::ReshapeOp>(tensorType(x->dtype, out), materialize(*x)));
  return success();
}

LogicalResult Importer::importSlice(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  if (!x)
    return nodeError(n) << "missing input";
  int64_t rank = x->shape.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (failed(constInts(n, 1, "starts", starts)) ||
      failed(constInts(n, 2, "ends", ends)))
    return failure();
  if (in(n, 3)) {
    if (failed(constInts(n, 3, "axes", axes)))
      return failure();
  } else {
    for (size_t k = 0; k < starts.size(); ++k)
      axes.push_back(k);
  }
  if (in(n, 4)) {
    if (failed(constInts(n, 4, "steps", steps)))
      return failure();
  } else {
    steps.assign(starts.size(), 1);
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return nodeError(n) << "starts, ends, axes and steps differ in length";
  Shape st(rank, 0), sp(rank, 1), sz(x->shape);
  SmallVector<bool> seen(rank, false);
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t a = axes[k];
    if (failed(normAxis(n, a, rank)))
      return failure();
    // normAxis lets axis 0 through at rank 0 (for ops that treat a scalar as
    // [1]); Slice indexes the dims, so the axis must name one.
    if (a >= rank)
      return nodeError(n) << "axis " << a << " out of range for rank " << rank;
    if (seen[a])
      return nodeError(n) << "repeated axis " << a;
    seen[a] = true;
    int64_t dim = x->shape[a], step = steps[k];
    if (step == 0)
      return nodeError(n) << "step is 0";
    // Clamp as the ONNX Slice spec says: negative values count from the end,
    // then starts/ends clamp to [0, dim] (step > 0) or [-1, dim - 1].
    int64_t s = starts[k], e = ends[k];
    if (s < 0) s = std::max<int64_t>(s + dim, step > 0 ? 0 : -1);
    if (e < 0) e = std::max<int64_t>(e + dim, step > 0 ? 0 : -1);
    if (step > 0) {
      s = std::min(s, dim);
      e = std::min(e, dim);
    } else {
      s = std::min(s, dim - 1);
      e = std::min(e, dim - 1);
    }
    // s and e are clamped to [-1, dim], so their difference cannot
    // overflow; the step can be anything, so it never enters a sum.
    int64_t count =
        step > 0 ? (e > s ? (e - s - 1) / step + 1 : 0)
                 : (s > e ? (s - e - 1) / -std::max(step, -std::numeric_limits<int64_t>::max()) + 1
                          : 0);
    st[a] = count ? s : 0;
    sp[a] = step;
    sz[a] = count;
  }
  bool whole = sz == x->shape &&
               llvm::all_of(st, [](int64_t v) { return v == 0; }) &&
               llvm::all_of(sp, [](int64_t v) { return v == 1; });
  if (whole) {
    alias(n, 0, *x);
    return success();
  }
  if (foldable(x)) {
    setConst(n, 0, eval::slice(*x->c, st, sp, sz));
    return success();
  }
  setValue(n, 0,
           emit<zg::SliceOp>(tensorType(x->dtype, sz), materialize(*x),
                             {attr("starts", b.getDenseI64ArrayAttr(st)),
                              attr("steps", b.getDenseI64ArrayAttr(sp))}));
  return success();
}

LogicalResult Importer::importSplit(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  if (!x)
    return nodeError(n) << "missing input";
  int64_t rank = x->shape.size(), axis = attrInt(n, "axis", 0);
  if (failed(normAxis(n, axis, rank)))
    return failure();
  int64_t dim = x->shape[axis], outs = n.output_size();
  std::vector<int64_t> sizes;
  if (opset < 13 && findAttr(n, "split")) {
    sizes = *attrInts(n, "split");
  } else if (in(n, 1)) {
    if (failed(constInts(n, 1, "split", sizes)))
      return failure();
  } else {
    int64_t parts = outs;
    if (opset >= 18 && findAttr(n, "num_outputs"))
      parts = attrInt(n, "num_outputs", outs);
    if (parts != outs || parts <= 0)
      return nodeError(n) << "num_outputs " << parts << " but the node has "
                          << outs << " outputs";
    // Opset 18: the last chunk may be smaller (ceil division).
    int64_t chunk = dim / parts + (dim % parts != 0);
    for (int64_t k = 0; k < parts; ++k)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - k * chunk)));
  }
  if ((int64_t)sizes.size() != outs)
    return nodeError(n) << sizes.size() << " split sizes for " << outs
                        << " outputs";
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0 || s > dim || __builtin_add_overflow(total, s, &total))
      return nodeError(n) << "split size " << s << " out of range [0, "
                          << dim << "]";
  }
  if (total != dim)
    return nodeError(n) << "split sizes add up to " << total << ", dim "
                        << axis << " is " << dim;
  if (foldable(x)) {
    int64_t off = 0;
    for (int64_t k = 0; k < outs; ++k) {
      Shape st(rank, 0), sp(rank, 1), sz(x->shape);
      st[axis] = off;
      sz[axis] = sizes[k];
      setConst(n, k, eval::slice(*x->c, st, sp, sz));
      off += sizes[k];
    }
    return success();
  }
  SmallVector<Type> types;
  for (int64_t s : sizes) {
    Shape sh(x->shape);
    sh[axis] = s;
    types.push_back(tensorType(x->dtype, sh));
  }
  auto split = zg::SplitOp::create(b, curLoc, TypeRange(types),
                                   ValueRange{materialize(*x)},
                                   {attr("axis", b.getI64IntegerAttr(axis))});
  for (int64_t k = 0; k < outs; ++k)
    if (!n.output(k).empty())
      setValue(n, k, split->getResult(k));
  return success();
}

LogicalResult Importer::importGather(const onnx::NodeProto &n) {
  Val *x = in(n, 0), *idx = in(n, 1);
  if (!x || !idx)
    return nodeError(n) << "needs data and indices";
  if (idx->dtype != kInt64 && idx->dtype != kInt32)
    return nodeError(n) << "indices must be int32 or int64";
  int64_t rank = x->shape.size(), axis = attrInt(n, "axis", 0);
  if (failed(normAxis(n, axis, rank)))
    return failure();
  if (foldable(x) && idx->c) {
    ConstTensor out;
    if (!eval::gather(*x->c, *idx->c, axis, out))
      return nodeError(n) << "index out of range for dim " << axis
                          << " of size " << x->shape[axis];
    setConst(n, 0, std::move(out));
    return success();
  }
  Shape out(x->shape.begin(), x->shape.begin() + axis);
  out.append(idx->shape.begin(), idx->shape.end());
  out.append(x->shape.begin() + axis + 1, x->shape.end());
  Value iv;
  if (idx->c) {
    // Constant indices are checked and normalised here, so the runtime only
    // sees indices in range.
    ConstTensor ci = *idx->c;
    for (auto &v : ci.i) {
      if (v < 0)
        v += x->shape[axis];
      if (v < 0 || v >= x->shape[axis])
        return nodeError(n) << "index out of range for dim " << axis
                            << " of size " << x->shape[axis];
    }
    iv = materializeConst(ci);
  } else {
    iv = materialize(*idx);
  }
  setValue(n, 0,
           emit<zg::GatherOp>(tensorType(x->dtype, out), {materialize(*x), iv},
                              {attr("axis", b.getI64IntegerAttr(axis))}));
  return success();
}

LogicalResult Importer::importReduce(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  Val *x = in(n, 0);
  if (!x)
    return nodeError(n) << "missing input";
  int64_t rank = x->shape.size();
  bool keepdims = attrInt(n, "keepdims", 1);
  bool noop = attrInt(n, "noop_with_empty_axes", 0);
  // ReduceSum takes axes as an input from opset 13, the others from 18.
  bool axesInput = op == "ReduceSum" ? opset >= 13 : opset >= 18;
  std::vector<int64_t> axes;
  if (axesInput) {
    if (in(n, 1) && failed(constInts(n, 1, "axes", axes)))
      return failure();
  } else if (auto a = attrInts(n, "axes")) {
    axes = *a;
  }
  if (axes.empty()) {
    if (noop) {
      alias(n, 0, *x);
      return success();
    }
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  for (auto &a : axes)
    if (failed(normAxis(n, a, rank)))
      return failure();
  llvm::sort(axes);
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(axes, d)) {
      if (keepdims)
        out.push_back(1);
    } else {
      out.push_back(x->shape[d]);
    }
  }
  eval::Reduce kind = op == "ReduceSum"    ? eval::Reduce::Sum
                      : op == "ReduceMean" ? eval::Reduce::Mean
                      : op == "ReduceMax"  ? eval::Reduce::Max
                      : op == "ReduceMin"  ? eval::Reduce::Min
                                           : eval::Reduce::Prod;
  if (x->c) {
    setConst(n, 0, eval::reduce(kind, *x->c, axes, keepdims));
    return success();
  }
  auto t = tensorType(x->dtype, out);
  SmallVector<NamedAttribute> attrs = {
      attr("axes", b.getDenseI64ArrayAttr(axes)),
      attr("keepdims", b.getBoolAttr(keepdims))};
  Value xv = materialize(*x), r;
  if (kind == eval::Reduce::Sum)
    r = emit<zg::ReduceSumOp>(t, xv, attrs);
  else if (kind == eval::Reduce::Mean)
    r = emit<zg::ReduceMeanOp>(t, xv, attrs);
  else if (kind == eval::Reduce::Max)
    r = emit<zg::ReduceMaxOp>(t, xv, attrs);
  else if (kind == eval::Reduce::Min)
    r = emit<zg::ReduceMinOp>(t, xv, attrs);
  else
    r = emit<zg::ReduceProdOp>(t, xv, attrs);
  setValue(n, 0, r);
  return success();
}

LogicalResult Importer::importConstant(const onnx::NodeProto &n) {
  if (n.attribute_size() != 1)
    return nodeError(n) << "needs exactly one value attribute";
  const auto &a = n.attribute(0);
  ConstTensor c;
  if (a.name() == "value") {
    Val v;
    if (failed(readTensorProto(a.t(), "node '" + n.name() + "' (Constant)", v)))
      return failure();
    if (!v.c)
      return nodeError(n) << "external data in a Constant node is not supported";
    c = *v.c;
  } else if (a.name() == "value_float") {
    c = ConstTensor(kFloat, {});
    c.set(0, a.f());
  } else if (a.name() == "value_int") {
    c = ConstTensor(kInt64, {});
    c.i[0] = a.i();
  } else if (a.name() == "value_floats") {
    c = ConstTensor(kFloat, {int64_t(a.floats_size())});
    for (int k = 0; k < a.floats_size(); ++k)
      c.set(k, a.floats(k));
  } else if (a.name() == "value_ints") {
    c = ConstTensor(kInt64, {int64_t(a.ints_size())});
    for (int k = 0; k < a.ints_size(); ++k)
      c.i[k] = a.ints(k);
  } else {
    return nodeError(n) << "unsupported attribute '" << a.name() << "'";
  }
  setConst(n, 0, std::move(c));
  return success();
}

LogicalResult Importer::importFoldOnly(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  for (int k = 0; k < n.input_size(); ++k)
    if (!n.input(k).empty() && !vals[n.input(k)].c)
      return nodeError(n) << "input " << k << " ('" << n.input(k)
                          << "') does not fold to a constant, and " << op
                          << " is unsupported at run time";
  if (op == "ConstantOfShape") {
    std::vector<int64_t> shape;
    if (failed(constInts(n, 0, "shape", shape)))
      return failure();
    if (!checkedNumElements(shape))
      return nodeError(n) << "shape " << shapeStr(shape)
                          << " has a negative dim or too many elements";
    if (*checkedNumElements(shape) > kMaxFoldElements)
      return nodeError(n) << "folding would create "
                          << *checkedNumElements(shape)
                          << " elements; the limit is " << kMaxFoldElements;
    ConstTensor c(kFloat, shape);
    if (auto *a = findAttr(n, "value")) {
      Val v;
      if (failed(readTensorProto(a->t(), "node '" + n.name() + "'", v)))
        return failure();
      if (!v.c || v.c->numel() != 1)
        return nodeError(n) << "value must hold exactly one element";
      c = ConstTensor(v.dtype, shape);
      for (int64_t k = 0; k < c.numel(); ++k)
        c.isFloat() ? c.set(k, v.c->getF(0)) : c.setI(k, v.c->getI(0));
    }
    setConst(n, 0, std::move(c));
    return success();
  }
  return nodeError(n) << "internal: no fold-only handler";
}

std::optional<Shape> Importer::declaredShape(const std::string &name) {
  auto fromType = [](const onnx::TypeProto &t) -> std::optional<Shape> {
    if (!t.has_tensor_type() || !t.tensor_type().has_shape())
      return std::nullopt;
    Shape s;
    for (const auto &d : t.tensor_type().shape().dim()) {
      if (!d.has_dim_value() || d.dim_value() < 0)
        return std::nullopt;
      s.push_back(d.dim_value());
    }
    return s;
  };
  for (const auto &v : model.graph().value_info())
    if (v.name() == name)
      return fromType(v.type());
  for (const auto &v : model.graph().output())
    if (v.name() == name)
      return fromType(v.type());
  return std::nullopt;
}

LogicalResult Importer::normIndices(const onnx::NodeProto &n, ConstTensor &idx,
                                    ArrayRef<int64_t> dims, int64_t depth) {
  for (size_t k = 0; k < idx.i.size(); ++k) {
    int64_t dim = dims[k % depth];
    int64_t &v = idx.i[k];
    if (v < 0)
      v += dim;
    if (v < 0 || v >= dim)
      return nodeError(n) << "index " << (v < 0 ? v - dim : v)
                          << " out of range for a dim of size " << dim;
  }
  return success();
}

LogicalResult Importer::importRange(const onnx::NodeProto &n) {
  Val *s = in(n, 0), *l = in(n, 1), *d = in(n, 2);
  if (!s || !l || !d)
    return nodeError(n) << "needs start, limit and delta";
  for (Val *v : {s, l, d})
    if (*checkedNumElements(v->shape) != 1)
      return nodeError(n) << "start, limit and delta must be scalars";
  if (s->dtype != l->dtype || s->dtype != d->dtype)
    return nodeError(n) << "start, limit and delta differ in type";
  if (s->dtype == kBool)
    return nodeError(n) << "unsupported type bool";
  if (d->c && d->c->getF(0) == 0)
    return nodeError(n) << "delta is 0";
  if (!allConst({s, l, d})) {
    // The length depends on the values; zplan plans static shapes, so it
    // must be known: the model's declared shape of the output gives it.
    std::optional<Shape> decl = declaredShape(n.output(0));
    if (!decl || decl->size() != 1)
      return nodeError(n) << "start, limit or delta does not fold to a "
                             "constant and the model declares no static "
                             "length for output '"
                          << n.output(0)
                          << "' (zplan plans static shapes; declare it in "
                             "value_info)";
    auto scalar = [&](Val *v) {
      Value x = materialize(*v);
      if (!v->shape.empty())
        x = emit<zg::ReshapeOp>(tensorType(v->dtype, {}), x);
      return x;
    };
    setValue(n, 0,
             emit<zg::RangeOp>(tensorType(s->dtype, *decl),
                               {scalar(s), scalar(l), scalar(d)}));
    return success();
  }
  double start = s->c->getF(0), limit = l->c->getF(0), delta = d->c->getF(0);
  if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    return nodeError(n) << "start, limit and delta must be finite";
  double cnt = std::ceil((limit - start) / delta);
  if (!(cnt <= double(kMaxFoldElements)))
    return nodeError(n) << "folding would create " << cnt
                        << " elements; the limit is " << kMaxFoldElements;
  int64_t count = cnt > 0 ? int64_t(cnt) : 0;
  ConstTensor c(s->dtype, {count});
  for (int64_t k = 0; k < count; ++k) {
    if (c.isFloat()) {
      c.set(k, start + k * delta);
      continue;
    }
    // Integer ranges in exact arithmetic; a value that leaves int64 is an
    // error rather than a wrap.
    int64_t step, v;
    if (__builtin_mul_overflow(k, d->c->getI(0), &step) ||
        __builtin_add_overflow(s->c->getI(0), step, &v))
      return nodeError(n) << "element " << k << " overflows int64";
    c.setI(k, v);
  }
  setConst(n, 0, std::move(c));
  return success();
}

LogicalResult Importer::importCumSum(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  std::vector<int64_t> ax;
  if (!x || failed(constInts(n, 1, "axis", ax)))
    return failure();
  if (ax.size() != 1)
    return nodeError(n) << "axis must be a scalar";
  int64_t axis = ax[0];
  if (failed(normAxis(n, axis, x->shape.size())))
    return failure();
  // normAxis lets axis 0 through at rank 0; CumSum indexes a dim.
  if (axis >= int64_t(x->shape.size()))
    return nodeError(n) << "axis " << axis << " out of range for rank "
                        << x->shape.size();
  if (x->dtype == kBool)
    return nodeError(n) << "unsupported type bool";
  bool exclusive = attrInt(n, "exclusive", 0), reverse = attrInt(n, "reverse", 0);
  if (x->c) {
    setConst(n, 0, eval::cumsum(*x->c, axis, exclusive, reverse));
    return success();
  }
  setValue(n, 0,
           emit<zg::CumSumOp>(tensorType(x->dtype, x->shape), materialize(*x),
                              {attr("axis", b.getI64IntegerAttr(axis)),
                               attr("exclusive", b.getBoolAttr(exclusive)),
                               attr("reverse", b.getBoolAttr(reverse))}));
  return success();
}

LogicalResult Importer::importGatherND(const onnx::NodeProto &n) {
  Val *x = in(n, 0), *idx = in(n, 1);
  if (!x || !idx)
    return nodeError(n) << "needs data and indices";
  if (idx->dtype != kInt64 && idx->dtype != kInt32)
    return nodeError(n) << "indices must be int32 or int64";
  int64_t bd = attrInt(n, "batch_dims", 0);
  if (idx->shape.empty() || bd < 0 ||
      bd >= (int64_t)std::min(x->shape.size(), idx->shape.size()) ||
      idx->shape.back() < 1 ||
      idx->shape.back() > int64_t(x->shape.size()) - bd)
    return nodeError(n) << "indices " << shapeStr(idx->shape)
                        << " do not fit data " << shapeStr(x->shape);
  for (int64_t d = 0; d < bd; ++d)
    if (x->shape[d] != idx->shape[d])
      return nodeError(n) << "batch dims differ";
  int64_t depth = idx->shape.back();
  if (foldable(x) && idx->c) {
    ConstTensor out;
    if (!eval::gatherND(*x->c, *idx->c, bd, out))
      return nodeError(n) << "index out of range";
    setConst(n, 0, std::move(out));
    return success();
  }
  Shape out(idx->shape.begin(), idx->shape.end() - 1);
  out.append(x->shape.begin() + bd + depth, x->shape.end());
  Value iv;
  if (idx->c) {
    // Constant indices are checked and normalised here, so the runtime only
    // sees indices in range.
    ConstTensor ci = *idx->c;
    if (failed(normIndices(n, ci, ArrayRef<int64_t>(x->shape).slice(bd, depth),
                           depth)))
      return failure();
    iv = materializeConst(ci);
  } else {
    iv = materialize(*idx);
  }
  setValue(n, 0,
           emit<zg::GatherNdOp>(tensorType(x->dtype, out), {materialize(*x), iv},
                                {attr("batch_dims", b.getI64IntegerAttr(bd))}));
  return success();
}

LogicalResult Importer::importGatherElements(const onnx::NodeProto &n) {
  Val *x = in(n, 0), *idx = in(n, 1);
  if (!x || !idx)
    return nodeError(n) << "needs data and indices";
  if (idx->dtype != kInt64 && idx->dtype != kInt32)
    return nodeError(n) << "indices must be int32 or int64";
  int64_t rank = x->shape.size(), axis = attrInt(n, "axis", 0);
  if (failed(normAxis(n, axis, rank)))
    return failure();
  if (axis >= rank)
    return nodeError(n) << "axis " << axis << " out of range for rank "
                        << rank;
  if (int64_t(idx->shape.size()) != rank)
    return nodeError(n) << "indices and data ranks differ";
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && idx->shape[d] > x->shape[d])
      return nodeError(n) << "indices " << shapeStr(idx->shape)
                          << " exceed data " << shapeStr(x->shape)
                          << " off axis " << axis;
  if (foldable(x) && idx->c) {
    ConstTensor out;
    if (!eval::gatherElements(*x->c, *idx->c, axis, out))
      return nodeError(n) << "index out of range";
    setConst(n, 0, std::move(out));
    return success();
  }
  Value iv;
  if (idx->c) {
    ConstTensor ci = *idx->c;
    if (failed(normIndices(n, ci, {x->shape[axis]}, 1)))
      return failure();
    iv = materializeConst(ci);
  } else {
    iv = materialize(*idx);
  }
  setValue(n, 0,
           emit<zg::GatherElementsOp>(
               tensorType(x->dtype, idx->shape), {materialize(*x), iv},
               {attr("axis", b.getI64IntegerAttr(axis))}));
  return success();
}

LogicalResult Importer::importTile(const onnx::NodeProto &n) {
  Val *x = in(n, 0);
  std::vector<int64_t> reps;
  if (!x || failed(constInts(n, 1, "repeats", reps)))
    return failure();
  if (reps.size() != x->shape.size())
    return nodeError(n) << "repeats has " << reps.size()
                        << " entries for rank " << x->shape.size();
  Shape out;
  for (size_t d = 0; d < reps.size(); ++d) {
    int64_t o;
    if (reps[d] < 0)
      return nodeError(n) << "repeat " << reps[d] << " is negative";
    if (__builtin_mul_overflow(x->shape[d], reps[d], &o))
      return nodeError(n) << "the tiled shape overflows int64";
    out.push_back(o);
  }
  if (!checkedNumElements(out))
    return nodeError(n) << "result has too many elements";
  if (out == x->shape) {
    alias(n, 0, *x);
    return success();
  }
  if (foldable(x)) {
    setConst(n, 0, eval::tile(*x->c, reps));
    return success();
  }
  setValue(n, 0,
           emit<zg::TileOp>(tensorType(x->dtype, out), materialize(*x),
                            {attr("repeats", b.getDenseI64ArrayAttr(reps))}));
  return success();
}

LogicalResult Importer::importNode(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  curLoc = nodeLoc(n);
  for (int k = 0; k < n.input_size(); ++k) {
    if (n.input(k).empty())
      continue;
    const Val &v = vals[n.input(k)];
    if (!v.c && !v.v && !v.init)
      return nodeError(n) << "input '" << n.input(k) << "' has no value";
  }
  // Only elementwise ops, Expand, Unsqueeze and the shape queries work on
  // compactly stored constants; every other op sees all elements.
  static const llvm::StringSet<> compactOk = {
      "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mod", "Neg",
      "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Erf", "Sigmoid", "Relu",
      "Cos", "Sin", "Abs", "Floor", "Ceil", "Sign", "Cast", "Where", "Equal",
      "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor",
      "Not", "IsNaN", "Expand", "Unsqueeze", "Shape", "Size", "Identity",
      "Dropout"};
  if (!compactOk.contains(op))
    for (int k = 0; k < n.input_size(); ++k)
      if (!n.input(k).empty() && vals[n.input(k)].c)
        full(vals[n.input(k)]);
  const OpEntry &entry = opTable().find(op)->second;
  // Every required input must be present before any handler looks at it.
  static const llvm::StringMap<int> minInputs = {
      {"Constant", 0}, {"Add", 2}, {"Sub", 2}, {"Mul", 2}, {"Div", 2},
      {"Pow", 2}, {"Mod", 2}, {"Equal", 2}, {"Less", 2}, {"Greater", 2},
      {"LessOrEqual", 2}, {"GreaterOrEqual", 2}, {"And", 2}, {"Or", 2},
      {"Xor", 2}, {"Where", 3}, {"MatMul", 2}, {"Gemm", 2}, {"Reshape", 2},
      {"Expand", 2}, {"Gather", 2}, {"GatherElements", 2}, {"GatherND", 2},
      {"Range", 3}, {"CumSum", 2}, {"Slice", 3}, {"LayerNormalization", 2},
      {"Tile", 2}};
  auto req = minInputs.find(op);
  int need = req == minInputs.end() ? 1 : req->second;
  for (int k = 0; k < need; ++k)
    if (!in(n, k))
      return nodeError(n) << "input " << k << " is missing (" << op
                          << " needs " << need << ")";
  if (n.output_size() < 1 || n.output(0).empty())
    return nodeError(n) << "has no output";
  if (entry.foldOnly)
    return importFoldOnly(n);

  if (op == "Constant")
    return importConstant(n);
  if (op == "Identity" || op == "Dropout") {
    // Inference: Dropout passes its input through and keeps every element.
    Val *x = in(n, 0);
    alias(n, 0, *x);
    if (n.output_size() > 1 && !n.output(1).empty()) {
      ConstTensor keep(kBool, {});
      keep.i[0] = 1;
      Shape ones(x->shape.size(), 1);
      keep.shape = ones;
      setConst(n, 1, std::move(keep), x->shape);
    }
    return success();
  }
  if (op == "Shape" || op == "Size") {
    Val *x = in(n, 0);
    int64_t rank = x->shape.size();
    if (op == "Size") {
      ConstTensor c(kInt64, {});
      c.i[0] = *checkedNumElements(x->shape);
      setConst(n, 0, std::move(c));
      return success();
    }
    int64_t s = attrInt(n, "start", 0), e = attrInt(n, "end", rank);
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    s = std::clamp<int64_t>(s, 0, rank);
    e = std::clamp<int64_t>(e, 0, rank);
    ConstTensor c(kInt64, {std::max<int64_t>(0, e - s)});
    for (int64_t k = s; k < e; ++k)
      c.i[k - s] = x->shape[k];
    setConst(n, 0, std::move(c));
    return success();
  }
  if (op == "MatMul")
    return importMatMul(n);
  if (op == "Gemm")
    return importGemm(n);
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" ||
      op == "Unsqueeze")
    return importReshapeLike(n);
  if (op == "Slice")
    return importSlice(n);
  if (op == "Split")
    return importSplit(n);
  if (op == "Gather")
    return importGather(n);
  if (op == "GatherND")
    return importGatherND(n);
  if (op == "GatherElements")
    return importGatherElements(n);
  if (op == "Range")
    return importRange(n);
  if (op == "CumSum")
    return importCumSum(n);
  if (op == "Tile")
    return importTile(n);
  if (op.starts_with("Reduce"))
    return importReduce(n);

  if (op == "Transpose") {
    Val *x = in(n, 0);
    int64_t rank = x->shape.size();
    std::vector<int64_t> perm;
    if (auto p = attrInts(n, "perm")) {
      perm = *p;
    } else {
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    }
    if ((int64_t)perm.size() != rank)
      return nodeError(n) << "perm has " << perm.size() << " entries for rank "
                          << rank;
    SmallVector<bool> seen(rank, false);
    Shape out;
    for (int64_t &p : perm) {
      if (failed(normAxis(n, p, rank)) || seen[p])
        return nodeError(n) << "perm is not a permutation";
      seen[p] = true;
      out.push_back(x->shape[p]);
    }
    if (llvm::equal(perm, llvm::seq<int64_t>(0, rank))) {
      alias(n, 0, *x);
      return success();
    }
    if (foldable(x)) {
      setConst(n, 0, eval::transpose(*x->c, perm));
      return success();
    }
    setValue(n, 0,
             emit<zg::TransposeOp>(tensorType(x->dtype, out), materialize(*x),
                                   {attr("perm", b.getDenseI64ArrayAttr(perm))}));
    return success();
  }
  if (op == "Concat") {
    SmallVector<Val *> xs;
    for (int k = 0; k < n.input_size(); ++k)
      if (Val *v = in(n, k))
        xs.push_back(v);
    if (xs.empty())
      return nodeError(n) << "needs inputs";
    int64_t rank = xs[0]->shape.size(), axis = attrInt(n, "axis", 0);
    if (failed(normAxis(n, axis, rank)))
      return failure();
    // normAxis lets axis 0 through at rank 0; Concat indexes a dim.
    if (axis >= rank)
      return nodeError(n) << "cannot concatenate rank-0 tensors";
    Shape out = xs[0]->shape;
    out[axis] = 0;
    for (Val *v : xs) {
      if ((int64_t)v->shape.size() != rank || v->dtype != xs[0]->dtype)
        return nodeError(n) << "inputs differ in rank or type";
      for (int64_t d = 0; d < rank; ++d)
        if (d != axis && v->shape[d] != xs[0]->shape[d])
          return nodeError(n) << "input shapes " << shapeStr(xs[0]->shape)
                              << " and " << shapeStr(v->shape)
                              << " differ outside axis " << axis;
      if (__builtin_add_overflow(out[axis], v->shape[axis], &out[axis]))
        return nodeError(n) << "the concatenated dim overflows int64";
    }
    if (llvm::all_of(xs, [](Val *v) { return foldable(v); })) {
      SmallVector<const ConstTensor *> cs;
      for (Val *v : xs)
        cs.push_back(v->c.get());
      setConst(n, 0, eval::concat(cs, axis));
      return success();
    }
    SmallVector<Value> operands;
    for (Val *v : xs)
      if (*checkedNumElements(v->shape) > 0)
        operands.push_back(materialize(*v));
    setValue(n, 0,
             emit<zg::ConcatOp>(tensorType(xs[0]->dtype, out), operands,
                                {attr("axis", b.getI64IntegerAttr(axis))}));
    return success();
  }
  if (op == "Expand") {
    Val *x = in(n, 0);
    std::vector<int64_t> s;
    if (failed(constInts(n, 1, "shape", s)))
      return failure();
    auto out = broadcast(x->shape, s);
    if (!out)
      return nodeError(n) << "cannot expand " << shapeStr(x->shape) << " to "
                          << shapeStr(s);
    if (!checkedNumElements(*out))
      return nodeError(n) << "result has a negative dim or too many elements";
    if (*out == x->shape) {
      alias(n, 0, *x);
      return success();
    }
    if (foldable(x)) {
      // No element is copied: the stored value only gains leading dims.
      ConstTensor c = *x->c;
      c.shape.insert(c.shape.begin(), out->size() - c.shape.size(), 1);
      setConst(n, 0, std::move(c), *out);
      return success();
    }
    setValue(n, 0,
             emit<zg::ExpandOp>(tensorType(x->dtype, *out), materialize(*x)));
    return success();
  }
  if (op == "Where") {
    Val *c = in(n, 0), *x = in(n, 1), *y = in(n, 2);
    if (!c || !x || !y)
      return nodeError(n) << "needs three inputs";
    if (c->dtype != kBool || x->dtype != y->dtype)
      return nodeError(n) << "needs a bool condition and equal branch types";
    auto s1 = broadcast(c->shape, x->shape);
    auto out = s1 ? broadcast(*s1, y->shape) : std::nullopt;
    if (!out)
      return nodeError(n) << "input shapes do not broadcast";
    if (c->c && x->c && y->c) {
      Shape stored =
          *broadcast(*broadcast(c->c->shape, x->c->shape), y->c->shape);
      setConst(n, 0, eval::where(*c->c, *x->c, *y->c, stored), *out);
      return success();
    }
    setValue(n, 0,
             emit<zg::WhereOp>(tensorType(x->dtype, *out),
                               {materialize(*c), materialize(*x),
                                materialize(*y)}));
    return success();
  }
  if (op == "Cast") {
    Val *x = in(n, 0);
    int32_t to = attrInt(n, "to", 0);
    if (!isSupportedDType(to))
      return nodeError(n) << "unsupported target type " << dtypeName(to);
    if (to == x->dtype) {
      alias(n, 0, *x);
      return success();
    }
    if (foldable(x)) {
      setConst(n, 0, eval::cast(*x->c, to), x->shape);
      return success();
    }
    setValue(n, 0, emit<zg::CastOp>(tensorType(to, x->shape), materialize(*x)));
    return success();
  }
  if (op == "Softmax") {
    Val *x = in(n, 0);
    int64_t axis = attrInt(n, "axis", opset >= 13 ? -1 : 1);
    if (failed(normAxis(n, axis, x->shape.size())))
      return failure();
    if (opset < 13 && axis != int64_t(x->shape.size()) - 1) {
      // Before opset 13, Softmax coerces the input to 2-D at `axis` and
      // normalises over all trailing dims together.
      int64_t outer = 1, inner = 1;
      for (size_t d = 0; d < x->shape.size(); ++d)
        (int64_t(d) < axis ? outer : inner) *= x->shape[d];
      auto flatT = tensorType(x->dtype, {outer, inner});
      Value flat = emit<zg::ReshapeOp>(flatT, materialize(*x));
      Value sm = emit<zg::SoftmaxOp>(flatT, flat,
                                     {attr("axis", b.getI64IntegerAttr(1))});
      setValue(n, 0,
               emit<zg::ReshapeOp>(tensorType(x->dtype, x->shape), sm));
      return success();
    }
    if (x->c) {
      setConst(n, 0, eval::softmax(*x->c, axis));
      return success();
    }
    setValue(n, 0,
             emit<zg::SoftmaxOp>(tensorType(x->dtype, x->shape),
                                 materialize(*x),
                                 {attr("axis", b.getI64IntegerAttr(axis))}));
    return success();
  }
  if (op == "LayerNormalization") {
    Val *x = in(n, 0), *scale = in(n, 1), *bias = in(n, 2);
    if (!x || !scale)
      return nodeError(n) << "needs X and Scale";
    int64_t axis = attrInt(n, "axis", -1);
    if (failed(normAxis(n, axis, x->shape.size())))
      return failure();
    ArrayRef<int64_t> norm = ArrayRef<int64_t>(x->shape).drop_front(axis);
    if (!zg::broadcastsTo(scale->shape, norm) ||
        (bias && !zg::broadcastsTo(bias->shape, norm)))
      return nodeError(n) << "scale/bias do not broadcast to "
                          << shapeStr(norm);
    SmallVector<Value> operands = {materialize(*x), materialize(*scale)};
    if (bias)
      operands.push_back(materialize(*bias));
    double eps = attrFloat(n, "epsilon", 1e-5);
    setValue(n, 0,
             emit<zg::LayerNormOp>(
                 tensorType(x->dtype, x->shape), operands,
                 {attr("axis", b.getI64IntegerAttr(axis)),
                  attr("epsilon", b.getF64FloatAttr(eps))}));
    if ((n.output_size() > 1 && !n.output(1).empty()) ||
        (n.output_size() > 2 && !n.output(2).empty())) {
      // The optional Mean and InvStdDev outputs (kept dims of size 1 over
      // the normalised axes) as generic ops.
      SmallVector<int64_t> axes;
      Shape red(x->shape);
      for (int64_t d = axis; d < int64_t(x->shape.size()); ++d) {
        axes.push_back(d);
        red[d] = 1;
      }
      auto rt = tensorType(x->dtype, red);
      auto xt = tensorType(x->dtype, x->shape);
      SmallVector<NamedAttribute> ra = {
          attr("axes", b.getDenseI64ArrayAttr(axes)),
          attr("keepdims", b.getBoolAttr(true))};
      Value xv = materialize(*x);
      Value mean = emit<zg::ReduceMeanOp>(rt, xv, ra);
      Value d = emit<zg::SubOp>(xt, {xv, mean});
      Value sq = emit<zg::MulOp>(xt, {d, d});
      Value var = emit<zg::ReduceMeanOp>(rt, sq, ra);
      ConstTensor e(x->dtype, {});
      e.set(0, eps);
      Value ve = emit<zg::AddOp>(rt, {var, materializeConst(e)});
      Value inv = emit<zg::ReciprocalOp>(rt, emit<zg::SqrtOp>(rt, ve));
      if (n.output_size() > 1 && !n.output(1).empty())
        setValue(n, 1, mean);
      if (n.output_size() > 2 && !n.output(2).empty())
        setValue(n, 2, inv);
    }
    return success();
  }
  if (op == "Gelu") {
    Val *x = in(n, 0);
    std::string approx = attrString(n, "approximate", "none");
    if (approx != "none" && approx != "tanh")
      return nodeError(n) << "unknown approximate '" << approx << "'";
    setValue(n, 0,
             emit<zg::GeluOp>(tensorType(x->dtype, x->shape), materialize(*x),
                              {attr("approximate", b.getStringAttr(approx))}));
    return success();
  }
  return importElementwise(n);
}

//===----------------------------------------------------------------------===//
// Driver.
//===----------------------------------------------------------------------===//

LogicalResult Importer::finishOutputs(func::FuncOp fn) {
  SmallVector<Value> results;
  SmallVector<Type> types;
  for (const auto &o : model.graph().output()) {
    Val &v = vals[o.name()];
    if (o.type().has_tensor_type()) {
      const auto &tt = o.type().tensor_type();
      if (tt.elem_type() != 0 && tt.elem_type() != v.dtype)
        return error() << "graph output '" << o.name() << "' is declared "
                       << dtypeName(tt.elem_type()) << " but computes "
                       << dtypeName(v.dtype);
      if (tt.has_shape()) {
        bool bad = tt.shape().dim_size() != (int)v.shape.size();
        for (int d = 0; !bad && d < tt.shape().dim_size(); ++d)
          bad = tt.shape().dim(d).has_dim_value() &&
                tt.shape().dim(d).dim_value() != v.shape[d];
        if (bad)
          return error() << "graph output '" << o.name()
                         << "': computed shape " << shapeStr(v.shape)
                         << " contradicts the declared shape";
      }
    }
    b.setInsertionPointToEnd(&fn.getBody().front());
    curLoc = fileLoc;
    Value r = materialize(v);
    results.push_back(r);
    types.push_back(r.getType());
  }
  func::ReturnOp::create(b, fileLoc, results);
  fn.setType(FunctionType::get(&ctx, fn.getArgumentTypes(), types));
  for (int k = 0; k < model.graph().output_size(); ++k)
    fn.setResultAttr(k, "zg.name",
                     StringAttr::get(&ctx, model.graph().output(k).name()));
  return success();
}

OwningOpRef<ModuleOp> Importer::run() {
  ctx.loadDialect<zg::GraphDialect, func::FuncDialect>();
  if (failed(load()) || failed(checkOps()) || failed(loadInitializers()))
    return nullptr;
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module->getBody());
  func::FuncOp fn;
  if (failed(bindInputs(fn)))
    return nullptr;
  std::vector<const onnx::NodeProto *> order;
  if (failed(sortNodes(order)))
    return nullptr;
  for (const onnx::NodeProto *n : order) {
    // Folding allocates; a constant over the limit (or memory running out)
    // is an error on the node, never an abort.
    try {
      if (failed(importNode(*n)))
        return nullptr;
    } catch (const FoldLimitError &e) {
      auto d = nodeError(*n) << "folding would create ";
      if (e.elements < 0)
        d << "a constant whose element count overflows";
      else
        d << "a constant of " << e.elements << " elements";
      d << "; the limit is " << kMaxFoldElements;
      return nullptr;
    } catch (const FoldOverflowError &) {
      nodeError(*n) << "integer overflow while folding constants";
      return nullptr;
    } catch (const std::bad_alloc &) {
      nodeError(*n) << "out of memory while folding constants";
      return nullptr;
    }
  }
  if (failed(finishOutputs(fn)))
    return nullptr;
  // Parameters and constants go first, in order of first use, so the printed
  // graph reads like a parameter list followed by the computation.
  Block &body = fn.getBody().front();
  Operation *anchor = nullptr;
  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (!isa<zg::WeightOp, zg::ConstantOp, zg::CausalMaskOp>(op))
      continue;
    if (anchor)
      op.moveAfter(anchor);
    else
      op.moveBefore(&body.front());
    anchor = &op;
  }
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

OwningOpRef<ModuleOp>
zplan::import::importOnnxFile(MLIRContext &context, StringRef path,
                              const ImportOptions &options) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  Importer importer(context, path, options);
  return importer.run();
}
