// train_runtime_test.cpp - the training step end to end on one CPU rank: `zplan --train` compiles a shared
// model, the runtime's C++ API runs @init once and five steps (@train_step, or @micro_step twice and
// @optimizer_step), and every step's loss and global gradient norm must match PyTorch's
// (tests/models/<model>/train_losses.npy, train_grad_norms.npy; recipe in ../shared/models/README.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "zrt/zrt.h"

namespace {

// Reads a little-endian int64 or float64 .npy file (format 1.0) into `out` as raw 8-byte values.
template <typename T>
bool read_npy(const std::string &path, std::vector<T> *out) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(1, 5, "NUMPY") != 0 || bytes[6] != 1) return false;
  size_t header = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
  size_t start = 10 + header;
  out->resize((bytes.size() - start) / sizeof(T));
  std::memcpy(out->data(), bytes.data() + start, out->size() * sizeof(T));
  return true;
}

void train(const std::string &model, const std::string &extra_flags, int micro_batches, double tolerance) {
  std::string dir = std::string(ZPLAN_MODELS_DIR) + "/" + model;
  std::string plan = std::string(ZPLAN_WORK_DIR) + "/train-" + model + "-mb" + std::to_string(micro_batches) +
                     ".zplan";
  std::string cmd = std::string(ZPLAN_BIN_DIR) + "/zplan " + dir + "/model.onnx --batch 2 --seq 16 --train " +
                    "--clip-grad 1.0 --lr 1e-3 --weight-decay 0.01 --micro-batches " +
                    std::to_string(micro_batches) + " " + extra_flags + " -o " + plan;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  std::vector<int64_t> ids;
  std::vector<double> losses, norms;
  ASSERT_TRUE(read_npy(dir + "/input_ids.npy", &ids));
  ASSERT_TRUE(read_npy(dir + "/train_losses.npy", &losses));
  ASSERT_TRUE(read_npy(dir + "/train_grad_norms.npy", &norms));
  ASSERT_EQ(ids.size(), 32u);
  ASSERT_EQ(losses.size(), 5u);

  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open(plan, {}, &s);
  ASSERT_TRUE(st.ok()) << st.message();
  st = s->run("init");
  ASSERT_TRUE(st.ok()) << st.message();
  size_t rows = ids.size() / 16 / micro_batches * 16;  // elements of one micro-batch
  for (int t = 1; t <= 5; ++t) {
    ASSERT_TRUE(s->set_scalar("step", t).ok());
    if (micro_batches == 1) {
      st = s->bind_input("input_ids", ids.data(), ids.size() * 8);
      if (st.ok()) st = s->run("train_step");
    } else {
      for (int k = 0; k < micro_batches && st.ok(); ++k) {
        st = s->bind_input("input_ids", ids.data() + k * rows, rows * 8);
        if (st.ok()) st = s->run("micro_step");
      }
      if (st.ok()) st = s->run("optimizer_step");
    }
    ASSERT_TRUE(st.ok()) << "step " << t << ": " << st.message();
    float loss = 0, norm = 0;
    ASSERT_TRUE(s->read_output("loss", &loss, 4).ok());
    ASSERT_TRUE(s->read_output("grad_norm", &norm, 4).ok());
    std::printf("%s (%d micro-batches) step %d: loss %.8f (PyTorch %.8f), grad norm %.8f (PyTorch %.8f)\n",
                model.c_str(), micro_batches, t, loss, losses[t - 1], norm, norms[t - 1]);
    EXPECT_NEAR(loss, losses[t - 1], tolerance * losses[t - 1]) << "step " << t;
    EXPECT_NEAR(norm, norms[t - 1], tolerance * norms[t - 1]) << "step " << t;
  }
}

TEST(TrainRuntime, LlamaFiveSteps) { train("llama", "", 1, 1e-4); }
// The export dropped GPT-2's zero Conv1D biases, which PyTorch trains (docs/training-contract.md).
TEST(TrainRuntime, Gpt2FiveSteps) { train("gpt2", "--restore-zero-biases", 1, 1e-4); }
// Two micro-batches of one sample match the batch of two (PyTorch's batch-2 references) within 1e-5.
TEST(TrainRuntime, LlamaTwoMicroBatches) { train("llama", "", 2, 1e-5); }
TEST(TrainRuntime, Gpt2TwoMicroBatches) { train("gpt2", "--restore-zero-biases", 2, 1e-5); }
TEST(TrainRuntime, LlamaSelectiveRecompute) { train("llama", "--recompute selective", 1, 1e-4); }

}  // namespace
