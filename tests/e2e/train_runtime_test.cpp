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
  // Each test its own plan file: ctest runs these tests as separate processes at once, and LlamaFiveSteps
  // and LlamaSelectiveRecompute compiled different plans to one path.
  std::string plan = std::string(ZPLAN_WORK_DIR) + "/train-" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".zplan";
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

// fp16 with dynamic loss scaling from a scale far too large (2^40): every step overflows until the halved
// scale fits, and each of those steps must be skipped whole (parameters, master weights, moments and the
// step count unchanged, bit for bit, read through read_state), with the scale halved and the skip counted;
// the loss of a skipped step is the first step's again (same parameters, same batch). Then the next five
// (applied) steps give PyTorch's five losses within 2e-2.
TEST(TrainRuntime, Fp16OverflowSkipsSteps) {
  const std::string dir = std::string(ZPLAN_MODELS_DIR) + "/gpt2";
  const std::string plan = std::string(ZPLAN_WORK_DIR) + "/train-gpt2-fp16-overflow.zplan";
  const std::string cmd =
      std::string(ZPLAN_BIN_DIR) + "/zplan " + dir + "/model.onnx --batch 2 --seq 16 --train " +
      "--clip-grad 1.0 --restore-zero-biases --dtype fp16 --initial-loss-scale 1099511627776 -o " + plan;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<int64_t> ids;
  std::vector<double> losses;
  ASSERT_TRUE(read_npy(dir + "/input_ids.npy", &ids));
  ASSERT_TRUE(read_npy(dir + "/train_losses.npy", &losses));
  ASSERT_EQ(losses.size(), 5u);

  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open(plan, {}, &s);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(s->run("init").ok());
  auto read = [&](const zrt::StateInfo& x) {
    std::vector<uint8_t> bytes(x.local_bytes());
    zrt::Status rs = s->read_state(x.name, bytes.data(), bytes.size());
    EXPECT_TRUE(rs.ok()) << x.name << ": " << rs.message();
    return bytes;
  };
  auto scalar = [&](const std::string& name) {
    for (const zrt::StateInfo& x : s->state())
      if (x.name == name) {
        std::vector<uint8_t> b = read(x);
        float v = 0;
        std::memcpy(&v, b.data(), 4);
        return static_cast<double>(v);
      }
    ADD_FAILURE() << "the plan has no state '" << name << "'";
    return 0.0;
  };
  // Everything the update writes: parameters, master parts and moments.
  std::vector<zrt::StateInfo> updated;
  for (const zrt::StateInfo& x : s->state())
    if (x.kind == "param" || x.kind == "param_shard" || x.kind == "master" || x.kind == "moment1" ||
        x.kind == "moment2")
      updated.push_back(x);
  ASSERT_GT(updated.size(), 10u);
  EXPECT_EQ(scalar("loss_scale"), 1099511627776.0);

  std::vector<double> applied;
  double first_loss = 0;
  int skipped = 0;
  for (int t = 1; t <= 40 && applied.size() < 5; ++t) {
    std::vector<std::vector<uint8_t>> before;
    for (const zrt::StateInfo& x : updated) before.push_back(read(x));
    const double scale = scalar("loss_scale"), count = scalar("optimizer_steps");
    // The loss output is stored in fp16: train_step reads it whatever its dtype.
    zrt::StepResult r;
    st = s->train_step("input_ids", ids.data(), ids.size() * 8, t, &r);
    ASSERT_TRUE(st.ok()) << "step " << t << ": " << st.message();
    const double loss = r.loss;
    if (t == 1) first_loss = loss;
    const bool skip = scalar("skipped_steps") == skipped + 1;
    std::printf("step %d: loss %.6f, scale %g -> %g, %s\n", t, loss, scale, scalar("loss_scale"),
                skip ? "skipped" : "applied");
    if (skip) {
      ++skipped;
      // Skipped steps come first, all of them, before any update.
      EXPECT_TRUE(applied.empty()) << "step " << t;
      EXPECT_EQ(loss, first_loss) << "step " << t;
      EXPECT_EQ(scalar("loss_scale"), scale / 2) << "step " << t;
      EXPECT_EQ(scalar("optimizer_steps"), count) << "step " << t;
      for (size_t k = 0; k < updated.size(); ++k)
        EXPECT_TRUE(read(updated[k]) == before[k]) << updated[k].name << " changed on skipped step " << t;
    } else {
      EXPECT_EQ(scalar("skipped_steps"), skipped) << "step " << t;
      EXPECT_EQ(scalar("loss_scale"), scale) << "step " << t;  // the window (1000) is far away
      EXPECT_EQ(scalar("optimizer_steps"), count + 1) << "step " << t;
      size_t changed = 0;
      for (size_t k = 0; k < updated.size(); ++k) changed += read(updated[k]) != before[k];
      EXPECT_EQ(changed, updated.size()) << "step " << t;
      applied.push_back(loss);
    }
  }
  // 2^40 halves to 2^17 before the scaled gradients fit in fp16: over 20 skipped steps.
  EXPECT_GE(skipped, 20);
  ASSERT_EQ(applied.size(), 5u);
  for (size_t k = 0; k < 5; ++k)
    EXPECT_NEAR(applied[k], losses[k], 2e-2 * losses[k]) << "applied step " << k + 1;
}

TEST(TrainRuntime, LlamaFiveSteps) { train("llama", "", 1, 1e-4); }
// The export dropped GPT-2's zero Conv1D biases, which PyTorch trains (docs/training-contract.md).
TEST(TrainRuntime, Gpt2FiveSteps) { train("gpt2", "--restore-zero-biases", 1, 1e-4); }
// Two micro-batches of one sample match the batch of two (PyTorch's batch-2 references) within 1e-5.
TEST(TrainRuntime, LlamaTwoMicroBatches) { train("llama", "", 2, 1e-5); }
TEST(TrainRuntime, Gpt2TwoMicroBatches) { train("gpt2", "--restore-zero-biases", 2, 1e-5); }
TEST(TrainRuntime, LlamaSelectiveRecompute) { train("llama", "--recompute selective", 1, 1e-4); }

}  // namespace
