//===- ZeroStateBytesTest.cpp - model-state bytes against ZeRO's formulas -===//
//
// Compiles the shared gpt2 and llama models with `zplan --train --dtype bf16`
// at each ZeRO stage and checks the report's model-state figures against the
// formulas of the ZeRO paper, computed here from the parameter count Psi read
// from the ONNX initializers (not from the plan): bf16 with AdamW holds 2 Psi
// of parameters, 2 Psi of gradients and 12 Psi of optimizer state (4 Psi each
// of fp32 master weights, first and second moments). Stage 1 divides the
// optimizer state by dp, stage 2 also the gradients, stage 3 also the
// parameters. Each partitioned tensor is padded to a multiple of dp elements,
// so a rank holds ceil(n / dp) of its n elements: the padding is at most dp
// elements per tensor.
//
// One deliberate difference from the paper's 2 Psi of gradients: zplan reduces
// gradients in fp32 (the contract's mixed precision, as DeepSpeed's bf16
// optimizer accumulates them), so the gradients the updates read are 4 bytes
// per element: 4 Psi at stage 0 and this rank's 4 Psi / dp part at stages 1-3
// (stage 1 also holds every whole bf16 gradient at the end of the backward,
// a transient the activations figure counts).
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace {

/// The trainable tensors of an ONNX export, as element counts: every float
/// initializer of rank 1 or 2 that a node reads. A 1-D one read by several
/// nodes stands for that many parameters (exporters merge equal initial
/// values, e.g. every layer-norm scale of a fresh model); a matrix read
/// twice is one tied parameter (the GPT-2 embedding and LM head).
std::vector<int64_t> parameterSizes(const std::string& path) {
  onnx::ModelProto model;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(model.ParseFromIstream(&in)) << path;
  std::map<std::string, int> readers;
  for (const onnx::NodeProto& n : model.graph().node())
    for (const std::string& i : n.input()) ++readers[i];
  std::vector<int64_t> sizes;
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    if (t.data_type() != onnx::TensorProto::FLOAT || (t.dims_size() != 1 && t.dims_size() != 2) ||
        !readers.count(t.name()))
      continue;
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    int copies = t.dims_size() == 1 ? readers[t.name()] : 1;
    for (int k = 0; k < copies; ++k) sizes.push_back(n);
  }
  return sizes;
}

nlohmann::json compileReport(const std::string& model, int zero, int world) {
  std::string dir = std::string(ZPLAN_MODELS_DIR) + "/" + model;
  std::string base = std::string(ZPLAN_WORK_DIR) + "/zero-state-" + model + "-zero" + std::to_string(zero) +
                     "-world" + std::to_string(world);
  std::string cmd = std::string(ZPLAN_BIN_DIR) + "/zplan " + dir + "/model.onnx --train --batch " +
                    std::to_string(std::max(2, world)) + " --seq 16 --dtype bf16 " + "--zero " +
                    std::to_string(zero) + " --world " + std::to_string(world) + " --report-json " + base +
                    ".json -o " + base + ".zplan 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(base + ".json");
  return nlohmann::json::parse(in, nullptr, false);
}

void checkStage(const std::string& model, int zero, int world) {
  SCOPED_TRACE(model + " zero " + std::to_string(zero) + " world " + std::to_string(world));
  std::vector<int64_t> sizes = parameterSizes(std::string(ZPLAN_MODELS_DIR) + "/" + model + "/model.onnx");
  ASSERT_FALSE(sizes.empty());
  int64_t psi = 0, part = 0, tensors = int64_t(sizes.size());
  const int64_t dp = world;
  for (int64_t n : sizes) {
    psi += n;
    part += (n + dp - 1) / dp;  // ceil(n / dp): the padded partition
  }
  // The padding is bounded by dp elements per tensor.
  ASSERT_LE(part * dp - psi, tensors * dp);
  nlohmann::json report = compileReport(model, zero, world);
  ASSERT_FALSE(report.is_discarded());
  ASSERT_EQ(report["ranks"].size(), size_t(world));
  for (const nlohmann::json& r : report["ranks"]) {
    const int64_t params = r["param_bytes"], master = r["master_bytes"], moments = r["moment_bytes"],
                  grads = r["optimizer_grad_bytes"];
    // Parameters: 2 Psi (bf16), partitioned at stage 3.
    EXPECT_EQ(params, zero == 3 ? 2 * part : 2 * psi);
    // Optimizer state: 12 Psi, partitioned from stage 1 on.
    const int64_t elems = zero >= 1 ? part : psi;
    EXPECT_EQ(master, 4 * elems);
    EXPECT_EQ(moments, 8 * elems);
    EXPECT_EQ(master + moments, 12 * elems);
    // Gradients the updates read: fp32, partitioned from stage 1 on.
    EXPECT_EQ(grads, 4 * elems);
    std::printf(
        "%s zero %d dp %lld: Psi %lld; per rank params %lld, grads "
        "%lld, master %lld, moments %lld bytes\n",
        model.c_str(), zero, static_cast<long long>(dp), static_cast<long long>(psi),
        static_cast<long long>(params), static_cast<long long>(grads), static_cast<long long>(master),
        static_cast<long long>(moments));
  }
}

TEST(ZeroStateBytes, Gpt2) {
  checkStage("gpt2", 0, 1);
  // Stage 0 over dp: every rank holds everything (the whole fp32 master).
  checkStage("gpt2", 0, 2);
  for (int zero : {1, 2, 3}) checkStage("gpt2", zero, 2);
}

TEST(ZeroStateBytes, Llama) {
  checkStage("llama", 0, 1);
  for (int zero : {1, 2, 3}) checkStage("llama", zero, 2);
  // dp 3: padding (no tensor of llama divides by 3; a batch of 3).
  checkStage("llama", 1, 3);
  checkStage("llama", 3, 3);
}

}  // namespace
