//===- Consolidate.cpp - zplan consolidate --------------------------------===//
//
// Puts the trained parameters of a sharded checkpoint back together, one
// tensor at a time: each parameter's full tensor is assembled from the saved
// slices by full-tensor coordinates (the runtime's checkpoint reader,
// runtime/src/checkpoint/format.h, verifying every block it reads), converted
// to the output dtype and appended to the output, so that host memory holds
// one tensor (plus the reader's few cached blocks), never the model.
//
// The ONNX output is the source model (recorded in the manifest, or --model)
// with every trained initializer moved to external data in OUT.data, and the
// other external initializers copied there, so that the result stands alone.
// Parameters that training made and the model lacks are put in:
//   - NAME#k, the k-th use of an initializer NAME that the exporter shared
//     between several uses (zg-build-train-step splits them): a new
//     initializer, and the k-th consuming node (graph order) reads it;
//   - NAME.bias restored by --restore-zero-biases for the linear of
//     NAME.weight: the Gemm's C input, or an Add after the MatMul.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/Consolidate.h"

#include "checkpoint/format.h"

#include "onnx/onnx_pb.h"
#include <google/protobuf/unknown_field_set.h>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <vector>

using namespace zplan;
namespace ckpt = zrt::ckpt;

namespace {

int fail(const std::string &msg) {
  std::cerr << "zplan consolidate: error: " << msg << "\n";
  return 1;
}

/// One trained parameter: the saved tensors holding it (the fp32 master
/// parts where the plan kept them, else the parameter or its shards).
struct Param {
  std::string name;
  std::vector<int> records;
  std::vector<int64_t> shape;
  zrt::DType dtype = zrt::DType::f32;
  uint64_t numel() const {
    uint64_t n = 1;
    for (int64_t d : shape)
      n *= uint64_t(d);
    return n;
  }
};

std::vector<Param> collectParams(const ckpt::Manifest &m) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> weights, master;
  const auto *ts = m.get().tensors();
  for (size_t i = 0; i < ts->size(); ++i) {
    const auto &t = *ts->Get(i);
    std::string kind = t.kind()->str(), param = t.param()->str();
    bool isMaster = kind == "master";
    if (!isMaster && kind != "param" && kind != "param_shard")
      continue;
    if (!weights.count(param) && !master.count(param))
      order.push_back(param);
    (isMaster ? master : weights)[param].push_back(int(i));
  }
  std::vector<Param> out;
  for (const std::string &name : order) {
    Param p;
    p.name = name;
    p.records = master.count(name) ? master[name] : weights[name];
    const auto &t = *ts->Get(p.records.front());
    p.shape.assign(t.full_shape()->begin(), t.full_shape()->end());
    p.dtype = zrt::DType(t.dtype());
    out.push_back(std::move(p));
  }
  return out;
}

/// A bar on stderr, redrawn in place, only when stderr is a terminal.
class Progress {
public:
  Progress(size_t total, bool enabled)
      : total(total), on(enabled && isatty(fileno(stderr))) {}
  void update(size_t done, uint64_t bytes, const std::string &name) {
    if (!on)
      return;
    int width = 30, fill = total ? int(width * done / total) : width;
    std::string bar(size_t(fill), '=');
    bar.resize(size_t(width), ' ');
    std::fprintf(stderr, "\r[%s] %zu/%zu tensors, %.1f MiB  %-40.40s", bar.c_str(),
                 done, total, double(bytes) / (1 << 20), name.c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (on)
      std::fprintf(stderr, "\n");
  }

private:
  size_t total;
  bool on;
};

/// The output data file: tensors appended at 64-byte aligned offsets.
class DataFile {
public:
  ~DataFile() {
    if (f)
      std::fclose(f);
  }
  zrt::Status open(const std::string &p) {
    path = p;
    f = std::fopen(p.c_str(), "wb");
    if (!f)
      return zrt::error(zrt::Code::io_error, "cannot create '" + p +
                                                 "': " + std::strerror(errno));
    return {};
  }
  /// Pads to the next 64-byte boundary and returns the offset there.
  uint64_t align() {
    static const char zeros[64] = {};
    size_t pad = size_t((64 - offset % 64) % 64);
    if (pad && std::fwrite(zeros, 1, pad, f) != pad)
      ok = false;
    offset += pad;
    return offset;
  }
  void append(const void *data, size_t n) {
    if (n && std::fwrite(data, 1, n, f) != n)
      ok = false;
    offset += n;
  }
  zrt::Status close() {
    bool good = ok && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    good = std::fclose(f) == 0 && good;
    f = nullptr;
    if (!good)
      return zrt::error(zrt::Code::io_error, "cannot write '" + path + "'");
    return {};
  }
  uint64_t offset = 0;

private:
  FILE *f = nullptr;
  std::string path;
  bool ok = true;
};

zrt::Status assemble(ckpt::RankFiles &files, const ckpt::Manifest &m,
                     const Param &p, zrt::DType dt, std::vector<uint8_t> &buf) {
  uint64_t n = p.numel();
  // assign() keeps the capacity: the buffer grows to the largest tensor once.
  buf.assign(size_t(n * zrt::dtype_size(dt)), 0);
  std::vector<ckpt::Run> whole = {{0, 0, n}};
  return ckpt::fill_from_sources(files, ckpt::source_runs(m, p.records), whole,
                                 buf.data(), dt,
                                 "checkpoint '" + m.dir() + "', parameter '" +
                                     p.name + "'");
}

std::string dirOf(const std::string &p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? "." : (s == 0 ? "/" : p.substr(0, s));
}
std::string baseOf(const std::string &p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string jsonString(const std::string &s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += char(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", c);
      r += b;
    } else {
      r += char(c);
    }
  }
  return r + "\"";
}

const char *safetensorsDtype(zrt::DType t) {
  switch (t) {
  case zrt::DType::f32:
    return "F32";
  case zrt::DType::bf16:
    return "BF16";
  case zrt::DType::f16:
    return "F16";
  case zrt::DType::i64:
    return "I64";
  case zrt::DType::i32:
    return "I32";
  default:
    return "BOOL";
  }
}

/// The name a tensor gets in the safetensors output, and whether it is
/// stored transposed there (2-D only).
struct OutName {
  std::string name;
  bool transpose = false;
};

bool loadModel(const std::string &path, onnx::ModelProto *model,
               std::string *err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *err = "cannot open the source model '" + path +
           "' (pass --model MODEL.onnx)";
    return false;
  }
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  if (!model->ParseFromString(bytes)) {
    *err = "'" + path + "' is not an ONNX model";
    return false;
  }
  return true;
}

std::string metadata(const google::protobuf::RepeatedPtrField<
                         onnx::StringStringEntryProto> &props,
                     const std::string &key) {
  for (const auto &p : props)
    if (p.key() == key)
      return p.value();
  return "";
}

/// A metadata_props entry of a message whose metadata_props field (NodeProto:
/// 9, GraphProto: 16) is newer than the ONNX classes this builds with, so that
/// protobuf keeps it among the message's unknown fields: each is a length-delimited StringStringEntryProto
/// (key = field 1, value = field 2), decoded here from the wire format.
std::string unknownMetadata(const google::protobuf::UnknownFieldSet &u,
                            int number, const std::string &key) {
  auto varint = [](const std::string &b, size_t &at, uint64_t *v) {
    *v = 0;
    for (int shift = 0; at < b.size() && shift < 64; shift += 7) {
      uint8_t c = uint8_t(b[at++]);
      *v |= uint64_t(c & 0x7F) << shift;
      if (!(c & 0x80))
        return true;
    }
    return false;
  };
  for (int f = 0; f < u.field_count(); ++f) {
    const google::protobuf::UnknownField &field = u.field(f);
    if (field.number() != number ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    const std::string &entry = field.length_delimited();
    std::string k, v;
    for (size_t j = 0; j < entry.size();) {
      uint64_t tag = 0, len = 0;
      // Both fields of the entry are strings (wire type 2); anything else
      // means this is not the entry expected.
      if (!varint(entry, j, &tag) || (tag & 7) != 2 || !varint(entry, j, &len) ||
          len > entry.size() - j)
        break;
      std::string bytes = entry.substr(j, size_t(len));
      j += size_t(len);
      if ((tag >> 3) == 1)
        k = bytes;
      else if ((tag >> 3) == 2)
        v = bytes;
    }
    if (k == key)
      return v;
  }
  return "";
}

std::string nodeMetadata(const onnx::NodeProto &n, const std::string &key) {
  return unknownMetadata(n.unknown_fields(), 9, key);
}

/// GraphProto.metadata_props is field 16, equally newer than these classes.
std::string graphMetadata(const onnx::GraphProto &g, const std::string &key) {
  return unknownMetadata(g.unknown_fields(), 16, key);
}

/// Splits a torch.export placeholder name (a parameter's dotted name with
/// every '.' made '_', after "p_") back into dotted components, choosing the
/// split whose components are known (from the model's dotted names, digits)
/// wherever possible: "m_transformer_h_0_ln_2_weight" with "ln_1" known gives
/// "m.transformer.h.0.ln_2.weight". Used only when the export carries no
/// graph signature.
std::string undoPlaceholder(const std::string &ph,
                            const std::set<std::string> &known) {
  std::vector<std::string> tok;
  std::stringstream ss(ph);
  for (std::string t; std::getline(ss, t, '_');)
    tok.push_back(t);
  size_t n = tok.size();
  // best[i]: (unknown components, components) of the best split of tok[i..].
  std::vector<std::pair<int, int>> best(n + 1, {1 << 20, 0});
  std::vector<size_t> next(n + 1, n);
  best[n] = {0, 0};
  for (size_t i = n; i-- > 0;) {
    std::string comp;
    for (size_t j = i; j < n; ++j) {
      comp += (j > i ? "_" : "") + tok[j];
      bool digits = comp.find_first_not_of("0123456789") == std::string::npos;
      int unknown = known.count(comp) || digits ? 0 : 1;
      std::pair<int, int> c = {best[j + 1].first + unknown,
                               best[j + 1].second + 1};
      // Fewer unknown components, then fewer components: "ln_2" stays one
      // component rather than an unknown "ln" and a digit.
      if (c.first < best[i].first ||
          (c.first == best[i].first && c.second < best[i].second)) {
        best[i] = c;
        next[i] = j + 1;
      }
    }
  }
  std::string out;
  for (size_t i = 0; i < n; i = next[i]) {
    std::string comp;
    for (size_t j = i; j < next[i]; ++j)
      comp += (j > i ? "_" : "") + tok[j];
    out += (out.empty() ? "" : ".") + comp;
  }
  return out;
}

/// The module parameter names (Hugging Face names) of the trained tensors,
/// from the metadata torch.onnx.export(dynamo=True) writes: each node's
/// `pkg.torch.onnx.fx_node` names the parameters (`%p_...` placeholders) it
/// read, the model's graph signature maps placeholders to names, and the
/// name scopes with their classes give the wrapper prefix to drop (the scopes
/// above the first transformers class). An initializer the exporter
/// materialised as a transposed copy for a MatMul of aten.linear is written
/// transposed, in the module's own layout.
bool hfNames(const std::vector<Param> &params, const std::string &modelPath,
             std::vector<OutName> *out, std::string *err) {
  onnx::ModelProto model;
  if (!loadModel(modelPath, &model, err))
    return false;
  const onnx::GraphProto &g = model.graph();
  std::map<std::string, std::string> signature;
  // torch.onnx writes the signature on the graph; older exports on the model.
  std::string sig = graphMetadata(g, "pkg.torch.export.ExportedProgram.graph_signature");
  if (sig.empty())
    sig = metadata(model.metadata_props(),
                   "pkg.torch.export.ExportedProgram.graph_signature");
  std::stringstream lines(sig);
  for (std::string line; std::getline(lines, line);) {
    size_t colon = line.find(": PARAMETER target='");
    if (colon == std::string::npos)
      continue;
    size_t b = colon + std::strlen(": PARAMETER target='"),
           e = line.find('\'', b);
    if (e != std::string::npos)
      signature[line.substr(0, colon)] = line.substr(b, e - b);
  }
  std::set<std::string> inits, known;
  for (const auto &t : g.initializer())
    inits.insert(t.name());
  for (const std::string &name : inits) {
    if (name.find('.') == std::string::npos)
      continue;
    std::stringstream ss(name);
    for (std::string c; std::getline(ss, c, '.');)
      known.insert(c);
  }
  std::map<std::string, std::vector<const onnx::NodeProto *>> readers;
  std::string prefix;
  bool prefixFound = false;
  for (const auto &n : g.node()) {
    for (const std::string &x : n.input()) {
      auto &v = readers[x];
      if (v.empty() || v.back() != &n)
        v.push_back(&n);
    }
    if (prefixFound)
      continue;
    // Python-list text: ['', 'm', 'm.model', ...] and the classes beside them.
    auto list = [](const std::string &text) {
      std::vector<std::string> r;
      for (size_t i = 0; (i = text.find('\'', i)) != std::string::npos;) {
        size_t e = text.find('\'', i + 1);
        if (e == std::string::npos)
          break;
        r.push_back(text.substr(i + 1, e - i - 1));
        i = e + 1;
      }
      return r;
    };
    std::vector<std::string> scopes = list(
        nodeMetadata(n, "pkg.torch.onnx.name_scopes"));
    std::vector<std::string> classes = list(
        nodeMetadata(n, "pkg.torch.onnx.class_hierarchy"));
    for (size_t i = 0; i < scopes.size() && i < classes.size(); ++i)
      if (classes[i].rfind("transformers.", 0) == 0) {
        prefix = scopes[i].empty() ? "" : scopes[i] + ".";
        prefixFound = true;
        break;
      }
  }
  auto targetOf = [&](const std::string &ph) {
    auto it = signature.find(ph);
    if (it != signature.end())
      return it->second;
    return undoPlaceholder(ph.substr(2), known);
  };
  auto placeholders = [](const onnx::NodeProto &n) {
    std::vector<std::string> r;
    std::string fx = nodeMetadata(n, "pkg.torch.onnx.fx_node");
    size_t args = fx.find("args = (");
    for (size_t i = args; i != std::string::npos &&
                          (i = fx.find("%p_", i)) != std::string::npos;) {
      size_t e = i + 1;
      while (e < fx.size() && (std::isalnum((unsigned char)fx[e]) || fx[e] == '_'))
        ++e;
      r.push_back(fx.substr(i + 1, e - i - 1));
      i = e;
    }
    return r;
  };
  auto lastPart = [](const std::string &name) {
    size_t d = name.rfind('.');
    return d == std::string::npos ? name : name.substr(d + 1);
  };
  std::set<std::string> targets;
  for (const auto &kv : signature)
    targets.insert(kv.second);
  out->assign(params.size(), OutName());
  std::map<std::string, size_t> done;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string &p = params[i].name;
    std::string base = p;
    int k = -1;
    size_t hash = p.rfind('#');
    if (hash != std::string::npos && inits.count(p.substr(0, hash))) {
      base = p.substr(0, hash);
      k = std::atoi(p.c_str() + hash + 1);
    }
    OutName &o = (*out)[i];
    // An initializer named as a parameter (the exporter names them so).
    if (k < 0 && inits.count(p) &&
        (targets.count(p) || (signature.empty() && p.find('.') != std::string::npos))) {
      o.name = p;
    } else if (inits.count(base)) {
      const auto &users = readers[base];
      std::vector<const onnx::NodeProto *> look;
      if (k >= 0 && k < int(users.size()))
        look.push_back(users[size_t(k)]);
      else if (k < 0)
        look = users;
      for (const onnx::NodeProto *n : look) {
        for (const std::string &ph : placeholders(*n)) {
          std::string t = targetOf(ph);
          bool linear = n->op_type() == "MatMul" &&
                        nodeMetadata(*n, "pkg.torch.onnx.fx_node")
                                .find("aten.linear") != std::string::npos;
          if (k >= 0 ? lastPart(t) == lastPart(base)
                     : (linear && lastPart(t) == "weight")) {
            o.name = t;
            o.transpose = k < 0 && linear && params[i].shape.size() == 2;
            break;
          }
        }
        if (!o.name.empty())
          break;
      }
    }
    if (o.name.empty())
      continue;  // restored biases are named after their weights below
    done[p] = i;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    OutName &o = (*out)[i];
    const std::string &p = params[i].name;
    const std::string bias = ".bias", weight = ".weight";
    if (o.name.empty() && p.size() > bias.size() &&
        p.compare(p.size() - bias.size(), bias.size(), bias) == 0) {
      auto it = done.find(p.substr(0, p.size() - bias.size()) + weight);
      const std::string &w = it == done.end() ? std::string() : (*out)[it->second].name;
      if (w.size() > weight.size() &&
          w.compare(w.size() - weight.size(), weight.size(), weight) == 0)
        o.name = w.substr(0, w.size() - weight.size()) + bias;
    }
    if (o.name.empty()) {
      *err = "--hf-names: no module parameter name for '" + p + "' in the "
             "export metadata of '" + modelPath + "' (write it without "
             "--hf-names)";
      return false;
    }
    if (!prefix.empty() && o.name.rfind(prefix, 0) == 0)
      o.name = o.name.substr(prefix.size());
  }
  std::set<std::string> seen;
  for (const OutName &o : *out)
    if (!seen.insert(o.name).second) {
      *err = "--hf-names: two tensors map to '" + o.name + "'";
      return false;
    }
  return true;
}

/// safetensors: an 8-byte little-endian header length, the JSON header
/// (name -> dtype, shape, data_offsets; __metadata__), then the data. The
/// offsets follow from the shapes, so the header is written first and the
/// tensors streamed after it.
int writeSafetensors(const ckpt::Manifest &m, const std::vector<Param> &params,
                     const std::vector<OutName> &names, const std::string &out,
                     bool progress) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\",\"zplan.producer\":" +
                       jsonString(m.get().producer() ? m.get().producer()->str()
                                                     : "") +
                       ",\"zplan.step\":\"" + std::to_string(m.get().step()) +
                       "\"}";
  uint64_t at = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param &p = params[i];
    uint64_t bytes = p.numel() * zrt::dtype_size(p.dtype);
    std::vector<int64_t> shape = p.shape;
    if (names[i].transpose)
      std::reverse(shape.begin(), shape.end());
    header += "," + jsonString(names[i].name) + ":{\"dtype\":\"" +
              safetensorsDtype(p.dtype) + "\",\"shape\":[";
    for (size_t k = 0; k < shape.size(); ++k)
      header += (k ? "," : "") + std::to_string(shape[k]);
    header += "],\"data_offsets\":[" + std::to_string(at) + "," +
              std::to_string(at + bytes) + "]}";
    at += bytes;
  }
  header += "}";
  while (header.size() % 8)
    header += ' ';
  std::string tmp = out + ".tmp";
  DataFile f;
  zrt::Status st = f.open(tmp);
  if (!st.ok())
    return fail(st.message());
  uint64_t n = header.size();
  f.append(&n, 8);
  f.append(header.data(), header.size());
  ckpt::RankFiles files(m);
  st = files.check_all();
  if (!st.ok())
    return fail(st.message());
  std::vector<uint8_t> buf, flipped;
  Progress bar(params.size(), progress);
  for (size_t i = 0; i < params.size(); ++i) {
    st = assemble(files, m, params[i], params[i].dtype, buf);
    if (!st.ok())
      return fail(st.message());
    if (names[i].transpose) {
      // [rows, cols] -> [cols, rows], element by element.
      size_t es = zrt::dtype_size(params[i].dtype);
      size_t rows = size_t(params[i].shape[0]), cols = size_t(params[i].shape[1]);
      flipped.resize(buf.size());
      for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c)
          std::memcpy(&flipped[(c * rows + r) * es], &buf[(r * cols + c) * es], es);
      buf.swap(flipped);
    }
    f.append(buf.data(), buf.size());
    bar.update(i + 1, f.offset, params[i].name);
  }
  bar.finish();
  st = f.close();
  if (!st.ok() || std::rename(tmp.c_str(), out.c_str()) != 0)
    return fail(st.ok() ? "cannot rename '" + tmp + "' to '" + out + "'"
                        : st.message());
  std::cout << "zplan consolidate: wrote " << out << " (" << params.size()
            << " tensors, " << f.offset << " bytes) from " << m.dir()
            << " (step " << m.get().step() << ")\n";
  return 0;
}

bool onnxToZrt(int t, zrt::DType *out) {
  switch (t) {
  case onnx::TensorProto::FLOAT:
    *out = zrt::DType::f32;
    return true;
  case onnx::TensorProto::BFLOAT16:
    *out = zrt::DType::bf16;
    return true;
  case onnx::TensorProto::FLOAT16:
    *out = zrt::DType::f16;
    return true;
  default:
    return false;
  }
}

void setExternal(onnx::TensorProto &t, const std::string &location,
                 uint64_t offset, uint64_t length) {
  t.clear_raw_data();
  t.clear_float_data();
  t.clear_int32_data();
  t.clear_int64_data();
  t.clear_double_data();
  t.clear_uint64_data();
  t.clear_string_data();
  t.clear_external_data();
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char *k, const std::string &v) {
    auto *e = t.add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  add("length", std::to_string(length));
}

/// Moves node `from` of the graph to position `to` (< from), keeping the
/// order of the others: a new node must come right after its producer, as
/// ONNX wants nodes in topological order.
void moveNode(onnx::GraphProto &g, int from, int to) {
  for (int i = from; i > to; --i)
    g.mutable_node()->SwapElements(i, i - 1);
}

int writeOnnx(const ckpt::Manifest &m, const std::vector<Param> &params,
              const std::string &modelPath, const std::string &out,
              bool progress) {
  onnx::ModelProto model;
  std::string err;
  if (!loadModel(modelPath, &model, &err))
    return fail(err);
  onnx::GraphProto &g = *model.mutable_graph();

  auto initIndex = [&](const std::string &name) {
    for (int i = 0; i < g.initializer_size(); ++i)
      if (g.initializer(i).name() == name)
        return i;
    return -1;
  };
  // The distinct nodes reading each name, in the graph order of the source
  // model: edits below rewire and insert nodes, and the k-th use means the
  // k-th of the model as exported. (A repeated field keeps its elements in
  // place when it grows or swaps, so the pointers stay valid.)
  std::map<std::string, std::vector<onnx::NodeProto *>> readers;
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto *n = g.mutable_node(i);
    for (int k = 0; k < n->input_size(); ++k) {
      std::vector<onnx::NodeProto *> &v = readers[n->input(k)];
      if (v.empty() || v.back() != n)
        v.push_back(n);
    }
  }
  auto consumers = [&](const std::string &name) {
    auto it = readers.find(name);
    return it == readers.end() ? std::vector<onnx::NodeProto *>() : it->second;
  };
  auto indexOf = [&](const onnx::NodeProto *n) {
    for (int i = 0; i < g.node_size(); ++i)
      if (&g.node(i) == n)
        return i;
    return -1;
  };
  auto shapeOf = [](const onnx::TensorProto &t) {
    return std::vector<int64_t>(t.dims().begin(), t.dims().end());
  };

  // First map every parameter onto an initializer of the (edited) graph;
  // nothing is written before all of them are placed.
  std::vector<std::string> target(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Param &p = params[i];
    int at = initIndex(p.name);
    if (at >= 0) {
      if (shapeOf(g.initializer(at)) != p.shape)
        return fail("parameter '" + p.name + "' is " +
                    ckpt::shape_str(p.shape) + " in the checkpoint, " +
                    ckpt::shape_str(shapeOf(g.initializer(at))) + " in '" +
                    modelPath + "': the checkpoint is of another model");
      target[i] = p.name;
      continue;
    }
    size_t hash = p.name.rfind('#');
    if (hash != std::string::npos && hash + 1 < p.name.size() &&
        p.name.find_first_not_of("0123456789", hash + 1) == std::string::npos) {
      std::string base = p.name.substr(0, hash);
      int k = std::atoi(p.name.c_str() + hash + 1);
      int src = initIndex(base);
      std::vector<onnx::NodeProto *> users = consumers(base);
      if (src < 0 || k >= int(users.size()))
        return fail("parameter '" + p.name + "' is use " + std::to_string(k) +
                    " of initializer '" + base + "', which '" + modelPath +
                    "' does not have (it has " + std::to_string(users.size()) +
                    " uses)");
      onnx::TensorProto copy = g.initializer(src);
      copy.set_name(p.name);
      *g.add_initializer() = copy;
      for (std::string &x : *users[size_t(k)]->mutable_input())
        if (x == base)
          x = p.name;
      target[i] = p.name;
      continue;
    }
    const std::string suffix = ".bias";
    if (p.name.size() > suffix.size() &&
        p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) ==
            0 &&
        p.shape.size() == 1) {
      std::string stem = p.name.substr(0, p.name.size() - suffix.size());
      std::string weight = initIndex(stem + ".weight") >= 0 ? stem + ".weight" : stem;
      std::vector<onnx::NodeProto *> users = consumers(weight);
      int w = initIndex(weight);
      if (w >= 0 && users.size() == 1) {
        onnx::NodeProto &n = *users[0];
        onnx::TensorProto bias;
        bias.set_name(p.name);
        bias.set_data_type(g.initializer(w).data_type());
        bias.add_dims(p.shape[0]);
        if (n.op_type() == "Gemm" &&
            (n.input_size() == 2 || n.input(2).empty())) {
          if (n.input_size() == 2)
            n.add_input(p.name);
          else
            n.set_input(2, p.name);
          *g.add_initializer() = bias;
          target[i] = p.name;
          continue;
        }
        if (n.op_type() == "MatMul" && n.input(1) == weight) {
          std::string outName = n.output(0);
          n.set_output(0, outName + "__zplan_no_bias");
          onnx::NodeProto *add = g.add_node();
          add->set_op_type("Add");
          add->set_name(n.name() + "__zplan_bias");
          add->add_input(outName + "__zplan_no_bias");
          add->add_input(p.name);
          add->add_output(outName);
          moveNode(g, g.node_size() - 1, indexOf(&n) + 1);
          *g.add_initializer() = bias;
          target[i] = p.name;
          continue;
        }
      }
      return fail("parameter '" + p.name + "' (a restored bias) has no "
                  "single Gemm or MatMul reading '" + weight + "' in '" +
                  modelPath + "' to add it to");
    }
    return fail("parameter '" + p.name + "' of the checkpoint has no "
                "initializer in '" + modelPath +
                "': the checkpoint is of another model (pass --model)");
  }

  // Then stream: trained tensors from the checkpoint, the other external
  // initializers copied from the source model's files.
  std::string dataName = baseOf(out) + ".data";
  std::string dataPath = dirOf(out) + "/" + dataName, dataTmp = dataPath + ".tmp";
  DataFile data;
  zrt::Status st = data.open(dataTmp);
  if (!st.ok())
    return fail(st.message());
  ckpt::RankFiles files(m);
  st = files.check_all();
  if (!st.ok())
    return fail(st.message());
  std::vector<uint8_t> buf;
  Progress bar(params.size(), progress);
  std::vector<bool> trained(size_t(g.initializer_size()), false);
  for (size_t i = 0; i < params.size(); ++i) {
    int at = initIndex(target[i]);
    onnx::TensorProto &t = *g.mutable_initializer(at);
    trained[size_t(at)] = true;
    zrt::DType dt;
    if (!onnxToZrt(t.data_type(), &dt))
      return fail("initializer '" + t.name() + "' of '" + modelPath +
                  "' has ONNX data type " + std::to_string(t.data_type()) +
                  ", not a float type training writes");
    st = assemble(files, m, params[i], dt, buf);
    if (!st.ok())
      return fail(st.message());
    uint64_t off = data.align();
    data.append(buf.data(), buf.size());
    setExternal(t, dataName, off, buf.size());
    bar.update(i + 1, data.offset, params[i].name);
  }
  bar.finish();
  std::string modelDir = dirOf(modelPath);
  for (int i = 0; i < g.initializer_size(); ++i) {
    onnx::TensorProto &t = *g.mutable_initializer(i);
    if (trained[size_t(i)] ||
        t.data_location() != onnx::TensorProto::EXTERNAL)
      continue;
    std::string loc;
    uint64_t off = 0, len = 0;
    bool hasLen = false;
    for (const auto &e : t.external_data()) {
      if (e.key() == "location")
        loc = e.value();
      else if (e.key() == "offset")
        off = std::stoull(e.value());
      else if (e.key() == "length") {
        len = std::stoull(e.value());
        hasLen = true;
      }
    }
    std::string src = loc.empty() || loc[0] == '/' ? loc : modelDir + "/" + loc;
    std::ifstream f(src, std::ios::binary);
    if (!f)
      return fail("cannot open '" + src + "', the external data of '" +
                  t.name() + "' in '" + modelPath + "'");
    if (!hasLen) {
      f.seekg(0, std::ios::end);
      len = uint64_t(f.tellg()) - off;
    }
    f.seekg(std::streamoff(off));
    uint64_t to = data.align();
    std::vector<char> chunk(size_t(std::min<uint64_t>(len, 4 << 20)));
    for (uint64_t left = len; left > 0;) {
      size_t n = size_t(std::min<uint64_t>(left, chunk.size()));
      if (!f.read(chunk.data(), std::streamsize(n)))
        return fail("'" + src + "' is shorter than initializer '" + t.name() +
                    "' needs");
      data.append(chunk.data(), n);
      left -= n;
    }
    setExternal(t, dataName, to, len);
  }
  st = data.close();
  if (!st.ok())
    return fail(st.message());
  std::string modelTmp = out + ".tmp";
  {
    std::ofstream o(modelTmp, std::ios::binary | std::ios::trunc);
    if (!o || !model.SerializeToOstream(&o) || !o.flush())
      return fail("cannot write '" + modelTmp + "'");
  }
  if (std::rename(dataTmp.c_str(), dataPath.c_str()) != 0 ||
      std::rename(modelTmp.c_str(), out.c_str()) != 0)
    return fail("cannot rename the output into place at '" + out + "'");
  std::cout << "zplan consolidate: wrote " << out << " and " << dataPath
            << " (" << params.size() << " trained tensors, " << data.offset
            << " bytes of data) from " << m.dir() << " (step "
            << m.get().step() << "), source model " << modelPath << "\n";
  return 0;
}

} // namespace

CLI::App *driver::addConsolidateCommand(CLI::App &app,
                                        ConsolidateOptions &opts) {
  CLI::App *cmd = app.add_subcommand(
      "consolidate", "Write the full trained model of a sharded checkpoint "
                     "(streamed tensor by tensor)");
  cmd->add_option("checkpoint", opts.checkpoint,
                  "A --save-dir folder (its latest checkpoint) or one "
                  "checkpoint folder")
      ->required();
  cmd->add_option("-o,--output", opts.output,
                  "Output file (default trained.onnx / trained.safetensors)");
  cmd->add_option("--model", opts.model,
                  "The source ONNX model (default: the one the checkpoint "
                  "records)");
  cmd->add_option("--format", opts.format,
                  "onnx: the source model with the trained weights as "
                  "external data; safetensors: the trained tensors by name")
      ->check(CLI::IsMember({"onnx", "safetensors"}))
      ->capture_default_str();
  cmd->add_flag("--hf-names", opts.hfNames,
                "--format safetensors: name tensors as the exported module's "
                "parameters (Hugging Face names, from torch.onnx's export "
                "metadata in the source model), in the module's layout");
  cmd->add_flag("--no-progress", opts.noProgress,
                "No progress bar (there is none unless stderr is a terminal)");
  return cmd;
}

int driver::consolidateCommand(const ConsolidateOptions &opts) {
  std::string dir;
  zrt::Status st = ckpt::resolve_checkpoint(opts.checkpoint, &dir);
  std::unique_ptr<ckpt::Manifest> m;
  if (st.ok())
    st = ckpt::Manifest::load(dir, &m);
  if (!st.ok())
    return fail(st.message());
  std::vector<Param> params = collectParams(*m);
  if (params.empty())
    return fail("checkpoint '" + dir + "' holds no parameters");
  std::string out = opts.output;
  if (out.empty())
    out = opts.format == "onnx" ? "trained.onnx" : "trained.safetensors";
  std::string model = opts.model;
  if (model.empty())
    model = m->get().model() ? m->get().model()->str() : "";
  if (opts.hfNames && opts.format != "safetensors")
    return fail("--hf-names goes with --format safetensors");
  if (opts.format == "safetensors") {
    std::vector<OutName> names(params.size());
    for (size_t i = 0; i < params.size(); ++i)
      names[i].name = params[i].name;
    std::string err;
    if (opts.hfNames && model.empty())
      return fail("--hf-names: checkpoint '" + dir + "' does not record its "
                  "source model: pass --model MODEL.onnx");
    if (opts.hfNames && !hfNames(params, model, &names, &err))
      return fail(err);
    return writeSafetensors(*m, params, names, out, !opts.noProgress);
  }
  if (model.empty())
    return fail("checkpoint '" + dir + "' does not record its source model: "
                "pass --model MODEL.onnx");
  return writeOnnx(*m, params, model, out, !opts.noProgress);
}
