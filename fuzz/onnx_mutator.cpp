//===- onnx_mutator.cpp - structure-aware mutations of ONNX models --------===//
//
// libFuzzer's byte mutations rarely turn one valid protobuf into another, so
// most of them only test the parser. This custom mutator parses the model
// and changes what the importer interprets: dims, attribute integers, op
// types, edges between nodes, element types, external-data keys and tensor
// bytes; then it serialises the model again. Inputs that do not parse fall
// back to byte mutations, so malformed protobuf is still covered.
//
//===----------------------------------------------------------------------===//

#include "onnx/onnx_pb.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace {

/// Values that sit on the edges of what shape arithmetic handles.
int64_t interesting(std::mt19937_64 &rng) {
  static const int64_t values[] = {0,
                                   1,
                                   -1,
                                   2,
                                   3,
                                   -2,
                                   7,
                                   64,
                                   4096,
                                   int64_t(1) << 31,
                                   (int64_t(1) << 31) - 1,
                                   int64_t(1) << 32,
                                   int64_t(1) << 40,
                                   int64_t(1) << 62,
                                   INT64_MAX,
                                   INT64_MIN,
                                   INT64_MIN + 1};
  if (rng() % 4 == 0)
    return int64_t(rng() % 17) - 8;
  return values[rng() % (sizeof(values) / sizeof(values[0]))];
}

const char *const kOps[] = {
    "Add",       "Sub",          "Mul",       "Div",         "Pow",
    "Max",       "Min",          "Mod",       "Neg",         "Sqrt",
    "Cast",      "Where",        "Equal",     "Less",        "MatMul",
    "Gemm",      "Transpose",    "Reshape",   "Flatten",     "Squeeze",
    "Unsqueeze", "Concat",       "Slice",     "Split",       "Gather",
    "GatherElements", "GatherND", "Expand",   "Softmax",     "ReduceSum",
    "ReduceMean", "ReduceMax",   "ReduceProd", "LayerNormalization",
    "Identity",  "Shape",        "Size",      "Range",       "CumSum",
    "ConstantOfShape", "Constant", "Tile",    "Trilu",       "Einsum"};

/// Every value name the graph defines or uses.
std::vector<std::string> valueNames(const onnx::GraphProto &g) {
  std::vector<std::string> names;
  for (const auto &i : g.input())
    names.push_back(i.name());
  for (const auto &t : g.initializer())
    names.push_back(t.name());
  for (const auto &n : g.node())
    for (const auto &o : n.output())
      names.push_back(o);
  return names;
}

void mutateTensor(onnx::TensorProto &t, std::mt19937_64 &rng) {
  switch (rng() % 5) {
  case 0:
    if (t.dims_size())
      t.set_dims(rng() % t.dims_size(), interesting(rng));
    else
      t.add_dims(interesting(rng));
    break;
  case 1:
    t.set_data_type(int32_t(rng() % 17));
    break;
  case 2: {
    std::string raw = t.raw_data();
    raw.resize(raw.size() + 16);
    size_t n = LLVMFuzzerMutate(reinterpret_cast<uint8_t *>(&raw[0]),
                                raw.size() - 16, raw.size());
    raw.resize(n);
    t.set_raw_data(raw);
    break;
  }
  case 3: {
    // External data: location, offset and length are strings the importer
    // must validate.
    static const char *const keys[] = {"location", "offset", "length"};
    static const char *const vals[] = {"data.bin", "escape.bin", "../data.bin",
                                       "/etc/hostname", "0", "8", "-1",
                                       "4096", "99999999999999999999", ""};
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto *e = t.add_external_data();
    e->set_key(keys[rng() % 3]);
    e->set_value(vals[rng() % 10]);
    break;
  }
  default:
    if (t.dims_size())
      t.mutable_dims()->RemoveLast();
    break;
  }
}

void mutateNode(onnx::GraphProto &g, onnx::NodeProto &n, std::mt19937_64 &rng) {
  switch (rng() % 6) {
  case 0:
    n.set_op_type(kOps[rng() % (sizeof(kOps) / sizeof(kOps[0]))]);
    break;
  case 1: {
    auto names = valueNames(g);
    if (names.empty())
      break;
    if (n.input_size() && rng() % 3)
      n.set_input(rng() % n.input_size(), names[rng() % names.size()]);
    else
      n.add_input(rng() % 4 ? names[rng() % names.size()] : std::string());
    break;
  }
  case 2:
    if (n.input_size())
      n.mutable_input()->RemoveLast();
    break;
  case 3: {
    // An integer attribute (axis, perm, axes, to, keepdims, ...).
    if (!n.attribute_size()) {
      auto *a = n.add_attribute();
      static const char *const names[] = {"axis", "perm", "axes", "to",
                                          "keepdims", "transB", "split"};
      a->set_name(names[rng() % 7]);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(interesting(rng));
      break;
    }
    auto *a = n.mutable_attribute(rng() % n.attribute_size());
    if (a->ints_size() && rng() % 2)
      a->set_ints(rng() % a->ints_size(), interesting(rng));
    else if (a->ints_size() && rng() % 2)
      a->add_ints(interesting(rng));
    else if (a->has_t())
      mutateTensor(*a->mutable_t(), rng);
    else
      a->set_i(interesting(rng));
    break;
  }
  case 4:
    n.set_domain(rng() % 2 ? "" : "com.microsoft");
    break;
  default: {
    // Duplicate the node: its outputs are then defined twice unless renamed.
    auto *c = g.add_node();
    *c = n;
    for (int k = 0; k < c->output_size(); ++k)
      if (rng() % 2)
        c->set_output(k, c->output(k) + "_dup");
    break;
  }
  }
}

void mutateModel(onnx::ModelProto &m, std::mt19937_64 &rng) {
  onnx::GraphProto &g = *m.mutable_graph();
  switch (rng() % 6) {
  case 0:
  case 1:
  case 2:
    if (g.node_size())
      mutateNode(g, *g.mutable_node(rng() % g.node_size()), rng);
    break;
  case 3:
    if (g.initializer_size())
      mutateTensor(*g.mutable_initializer(rng() % g.initializer_size()), rng);
    break;
  case 4: {
    // A graph input's dims (dim_value or a symbolic dim_param).
    if (!g.input_size())
      break;
    auto *t = g.mutable_input(rng() % g.input_size())
                  ->mutable_type()
                  ->mutable_tensor_type();
    auto *s = t->mutable_shape();
    if (!s->dim_size() || rng() % 4 == 0) {
      s->add_dim()->set_dim_value(interesting(rng));
      break;
    }
    auto *d = s->mutable_dim(rng() % s->dim_size());
    if (rng() % 3 == 0)
      d->set_dim_param(rng() % 2 ? "batch" : "seq");
    else
      d->set_dim_value(interesting(rng));
    if (rng() % 8 == 0)
      t->set_elem_type(int32_t(rng() % 17));
    break;
  }
  default:
    if (m.opset_import_size())
      m.mutable_opset_import(0)->set_version(int64_t(rng() % 25));
    break;
  }
}

} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned int seed) {
  std::mt19937_64 rng(seed);
  onnx::ModelProto m;
  // One mutation in eight stays a byte mutation even for a parseable model,
  // so that the parser's own error paths keep being exercised.
  if (rng() % 8 == 0 || !m.ParseFromArray(data, int(size)) || !m.has_graph())
    return LLVMFuzzerMutate(data, size, maxSize);
  int rounds = 1 + int(rng() % 3);
  for (int r = 0; r < rounds; ++r)
    mutateModel(m, rng);
  std::string out;
  if (!m.SerializeToString(&out) || out.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
