//===- Import.cpp - ONNX to zg importer: the loader
//-------------------------===//
//
// The importer walks the ONNX graph once, in topological order. Every value is
// either a known constant (initializers with inline data, and everything
// computed from constants and shapes alone, which is folded here), a parameter
// reference (external initializers: never read), or an SSA value of the zg
// function. Each node handler infers static result shapes itself: Debian's
// ONNX shape inference stops at opset 17 and skips what it does not know.
//
// This file is the loader: it parses the protobuf, checks external data
// (locations inside the model's folder, ranges inside the files), binds the
// inputs, orders the nodes and hands each to the handler the op table
// (OpTable.cpp) names; the handlers live in one file per op family.
//
// Constants reach the function only where a runtime op consumes them. Large
// folded constants are stored compactly: dims along which a constant does not
// vary become a zg.expand of a smaller constant, and a causal additive mask
// becomes zg.causal_mask, which the attention recognition turns into the
// `causal` flag.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Importer.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <queue>
#include <set>

using namespace mlir;
using namespace zplan::import;
using namespace zplan::import::detail;
namespace zg = zplan::graph;

namespace {

/// The first and last opset of the default domain that the per-op handling
/// covers. Transformer exports use 13 to 21; the older forms of the accepted
/// ops (Softmax's 2-D coercion, axes and split as attributes) are handled
/// back to opset 7, and opsets 22 to 28 changed none of the accepted ops'
/// semantics (only added element types), which the ONNX node tests of onnx
/// 1.23 confirm (tests/onnx_node).
constexpr int64_t kMinOpset = 7, kMaxOpset = 28;

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
    return error() << "'" << path
                   << "' holds no graph (malformed or truncated "
                      "ONNX model)";
  for (const auto &o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      opset = o.version();
  if (opset == 0)
    return error() << "unsupported model: it imports no opset of the default "
                      "ONNX domain";
  if (opset < kMinOpset || opset > kMaxOpset)
    return error() << "unsupported opset " << opset << "; zplan imports opsets "
                   << kMinOpset << " to " << kMaxOpset;
  return success();
}

LogicalResult Importer::checkOps(const onnx::GraphProto &g) {
  // Every unsupported op is reported at once, so that a user sees the whole
  // gap in one run. The ops of an If's branches are checked when the branch
  // is imported (importIf): only the one taken is.
  std::vector<std::string> bad;
  for (const auto &n : g.node()) {
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
  d << bad.size() << " unsupported op" << (bad.size() == 1 ? "" : "s") << ":";
  for (const auto &s : bad)
    d << "\n  " << s;
  return failure();
}

Type Importer::elemType(int32_t dtype) {
  switch (dtype) {
  case kFloat:
    return Float32Type::get(&ctx);
  case kFloat16:
    return Float16Type::get(&ctx);
  case kBFloat16:
    return BFloat16Type::get(&ctx);
  case kDouble:
    return Float64Type::get(&ctx);
  case kInt64:
    return IntegerType::get(&ctx, 64);
  case kInt32:
    return IntegerType::get(&ctx, 32);
  case kBool:
    return IntegerType::get(&ctx, 1);
  default:
    return Float32Type::get(&ctx);
  }
}

int32_t Importer::dtypeOf(Type t) {
  if (t.isF32())
    return kFloat;
  if (t.isF16())
    return kFloat16;
  if (t.isBF16())
    return kBFloat16;
  if (t.isF64())
    return kDouble;
  if (t.isInteger(64))
    return kInt64;
  if (t.isInteger(32))
    return kInt32;
  return kBool;
}

LogicalResult Importer::checkExternal(const onnx::TensorProto &t, int64_t numel,
                                      ExternalRef &ref) {
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
    return error() << "initializer '" << t.name()
                   << "': external data location '" << ref.location
                   << "' is absolute; it must be relative to "
                   << "the model's folder";
  SmallVector<char> norm(ref.location.begin(), ref.location.end());
  llvm::sys::path::remove_dots(norm, /*remove_dot_dot=*/true);
  StringRef normRef(norm.data(), norm.size());
  if (normRef.starts_with("..") || normRef.empty() || normRef == ".")
    return error() << "initializer '" << t.name()
                   << "': external data location '" << ref.location
                   << "' leaves the model's folder";
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
                   << ref.offset << ", "
                   << uint64_t(ref.offset) + uint64_t(ref.length)
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
    case kDouble:
      std::memcpy(&c.f[k], p + 8 * k, 8);
      break;
    case kFloat16:
      c.f[k] = halfToDouble(readU16(p + 2 * k));
      break;
    case kBFloat16:
      c.f[k] = bf16ToDouble(readU16(p + 2 * k));
      break;
    case kInt64:
      std::memcpy(&c.i[k], p + 8 * k, 8);
      break;
    case kInt32: {
      int32_t v;
      std::memcpy(&v, p + 4 * k, 4);
      c.i[k] = v;
      break;
    }
    case kBool:
      c.i[k] = p[k] != 0;
      break;
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
    case kFloat:
      have = t.float_data_size();
      break;
    case kDouble:
      have = t.double_data_size();
      break;
    case kInt64:
      have = t.int64_data_size();
      break;
    default:
      have = t.int32_data_size();
      break;
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
    case kInt32:
    case kBool:
      have = t.int32_data_size();
      if (have == *numel)
        for (int64_t k = 0; k < have; ++k)
          c.setI(k, t.int32_data(k));
      break;
    case kFloat16:
    case kBFloat16:
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

/// Adds to `axes` the dims along which a Concat of `g` (or of a graph inside
/// one of its nodes) reads each value of `rank` (the graph's inputs and their
/// ranks; negative axes normalised): what recognises an input of past keys
/// or values (ImportOptions::emptyPast).
static void concatAxes(const onnx::GraphProto &g,
                       const std::map<std::string, int64_t> &rank,
                       std::map<std::string, std::set<int64_t>> &axes) {
  for (const auto &n : g.node()) {
    // The graphs inside a node (the branches of optimum's merged decoder,
    // whose with-past branch appends to the pasts) read the inputs too.
    for (const auto &a : n.attribute()) {
      if (a.has_g())
        concatAxes(a.g(), rank, axes);
      for (const auto &sub : a.graphs())
        concatAxes(sub, rank, axes);
    }
    if (n.op_type() != "Concat" || !n.domain().empty())
      continue;
    int64_t axis = 0;
    for (const auto &a : n.attribute())
      if (a.name() == "axis")
        axis = a.i();
    for (const auto &x : n.input())
      if (auto r = rank.find(x); r != rank.end())
        axes[x].insert(axis < 0 ? axis + r->second : axis);
  }
}

LogicalResult Importer::bindInputs(func::FuncOp &fn) {
  SmallVector<Type> types;
  SmallVector<std::string> names;
  bool firstIntSeen = false;
  std::map<std::string, int64_t> ranks;
  for (const auto &in : model.graph().input())
    if (in.type().has_tensor_type() && in.type().tensor_type().has_shape())
      ranks[in.name()] = in.type().tensor_type().shape().dim_size();
  std::map<std::string, std::set<int64_t>> concatReads;
  if (opts.emptyPast)
    concatAxes(model.graph(), ranks, concatReads);
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
    // A bound input (opts.fill) follows the token ids: [batch, seq], or
    // [seq] alone, where its dims have names of their own.
    bool filled = opts.fill.count(in.name()) != 0;
    int rank = tt.shape().dim_size();
    // Past keys or values (opts.emptyPast): the one symbolic dim a Concat
    // reads the input along is the past's length.
    int pastDim = -1;
    if (opts.emptyPast && !filled && rank >= 3 && isFloatDType(tt.elem_type()))
      if (auto r = concatReads.find(in.name()); r != concatReads.end())
        for (int64_t d : r->second)
          if (d > 0 && d < rank && !tt.shape().dim(d).has_dim_value())
            pastDim = pastDim < 0 ? d : -2;
    if (pastDim == -2)
      return error() << "graph input '" << in.name()
                     << "' looks like past keys or values (a float input of "
                        "rank "
                     << rank
                     << " that a Concat reads), but Concats read it along "
                        "more than one symbolic dim: which is the past's "
                        "length is not known";
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
      if (d == pastDim) {
        // An empty past; its length's name cannot also be another dim's.
        if (!name.empty() && boundDims.count(name) && boundDims[name] != 0)
          return error() << "graph input '" << in.name()
                         << "' (past keys or values): its past length, dim "
                         << d << " '" << name
                         << "', is also another input's dim, bound to "
                         << boundDims[name] << "; it cannot be emptied";
        value = 0;
      } else if (!name.empty() && opts.dims.count(name))
        value = opts.dims.at(name);
      else if (!name.empty() && boundDims.count(name))
        value = boundDims[name];
      else if (name == "batch" && opts.batch >= 0)
        value = opts.batch;
      else if (name == "seq" && opts.seq >= 0)
        value = opts.seq;
      else if ((positional || pastDim >= 0) && d == 0 && opts.batch >= 0)
        value = opts.batch;
      else if (positional && d == 1 && opts.seq >= 0)
        value = opts.seq;
      else if (filled && d == rank - 1 && rank <= 2 && opts.seq >= 0)
        value = opts.seq;
      else if (filled && d == 0 && rank == 2 && opts.batch >= 0)
        value = opts.batch;
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
    if (pastDim >= 0) {
      // No elements: the Concat that appends the new keys or values to it
      // is imported as the new ones (ShapeOps.cpp, importConcat).
      v.c = std::make_shared<ConstTensor>(v.dtype, shape);
      vals[in.name()] = std::move(v);
      continue;
    }
    if (auto fill = opts.fill.find(in.name()); fill != opts.fill.end()) {
      // A bound input: stored compactly (size 1 where it does not vary).
      using Fill = ImportOptions::Fill;
      if (fill->second == Fill::Arange && shape.empty())
        return error() << "graph input '" << in.name()
                       << "' is a scalar; it cannot hold positions";
      Shape stored(shape.size(), 1);
      if (fill->second == Fill::Arange)
        stored.back() = shape.back();
      ConstTensor c(v.dtype, stored);
      for (int64_t k = 0; k < c.numel(); ++k)
        c.set(k, fill->second == Fill::Arange ? double(k)
                 : fill->second == Fill::Ones ? 1.0
                                              : 0.0);
      v.c = std::make_shared<ConstTensor>(std::move(c));
      vals[in.name()] = std::move(v);
      continue;
    }
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

/// Adds to `out` the values that the nodes of `g` (and of the graphs inside
/// them) read from outside `g`: what a node holding `g` (an If's branch)
/// depends on besides its inputs.
static void outerReads(const onnx::GraphProto &g, std::set<std::string> &out) {
  std::set<std::string> defined, read;
  for (const auto &i : g.input())
    defined.insert(i.name());
  for (const auto &t : g.initializer())
    defined.insert(t.name());
  for (const auto &n : g.node()) {
    for (const auto &o : n.output())
      defined.insert(o);
    for (const auto &i : n.input())
      read.insert(i);
    for (const auto &a : n.attribute()) {
      if (a.has_g())
        outerReads(a.g(), read);
      for (const auto &sub : a.graphs())
        outerReads(sub, read);
    }
  }
  for (const auto &r : read)
    if (!r.empty() && !defined.count(r))
      out.insert(r);
}

LogicalResult Importer::sortNodes(const onnx::GraphProto &g,
                                  std::vector<const onnx::NodeProto *> &order) {
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
  for (int k = 0; k < g.node_size(); ++k) {
    // A node's inputs, and what the graphs inside it (an If's branches) read
    // from outside them.
    std::set<std::string> reads(g.node(k).input().begin(),
                                g.node(k).input().end());
    for (const auto &a : g.node(k).attribute()) {
      if (a.has_g())
        outerReads(a.g(), reads);
      for (const auto &sub : a.graphs())
        outerReads(sub, reads);
    }
    for (const auto &i : reads) {
      if (i.empty() || vals.count(i))
        continue;
      auto it = producer.find(i);
      if (it == producer.end())
        return error() << "node '" << g.node(k).name() << "' ("
                       << g.node(k).op_type() << ") uses undefined value '" << i
                       << "'";
      ++pending[k];
      users[it->second].push_back(k);
    }
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
// Nodes.
//===----------------------------------------------------------------------===//

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
  // checkOps has refused every op outside the table.
  const OpEntry &entry = opTable().find(op)->second;
  // Only some handlers work on compactly stored constants; every other op
  // sees all elements.
  if (!entry.compact)
    for (int k = 0; k < n.input_size(); ++k)
      if (!n.input(k).empty() && vals[n.input(k)].c)
        full(vals[n.input(k)]);
  // Every required input must be present before any handler looks at it.
  for (int k = 0; k < entry.minInputs; ++k)
    if (!in(n, k))
      return nodeError(n) << "input " << k << " is missing (" << op << " needs "
                          << entry.minInputs << ")";
  if (n.output_size() < 1 || n.output(0).empty())
    return nodeError(n) << "has no output";
  return (this->*entry.handler)(n);
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
          return error() << "graph output '" << o.name() << "': computed shape "
                         << shapeStr(v.shape)
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
  if (failed(load()) || failed(checkOps(model.graph())) ||
      failed(loadInitializers()))
    return nullptr;
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module->getBody());
  func::FuncOp fn;
  if (failed(bindInputs(fn)))
    return nullptr;
  std::vector<const onnx::NodeProto *> order;
  if (failed(sortNodes(model.graph(), order)))
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
