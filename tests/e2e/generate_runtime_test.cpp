// generate_runtime_test.cpp - generation through the runtime's C++ and C APIs on one CPU rank, against two
// oracles that do not share the KV cache:
//  - every decode step's logits equal the logits of a prefill over the whole sequence so far (a second
//    session that never decodes) within 1e-4, and the greedy tokens equal the reference
//    (tests/models/<model>/expected_generate.npy: Hugging Face generate's for gpt2 and llama, onnxruntime's
//    full recompute for the other families);
//  - prompts of different lengths in one batch give each sequence the tokens it gets alone (batch 1);
//  - the C API's prefill and decode step give the C++ API's tokens;
//  - a bf16 plan (cache in bf16) generates what the fp32 model would within bf16's error: at every step its
//    logits are within 5% of the fp32 logits' RMS of an fp32 prefill over the same tokens, the token it
//    picks is within twice that step's difference of the fp32 best, and wherever the fp32 margin between the
//    best and second-best token exceeds twice the difference, the token is the reference's.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "zrt/zrt_c.h"

namespace {

constexpr int64_t kBatch = 2, kPrompt = 16, kNew = 24, kMaxSeq = 40, kVocab = 512;

bool read_i64_npy(const std::string& path, std::vector<int64_t>* out) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(1, 5, "NUMPY") != 0 || bytes[6] != 1) return false;
  const size_t header = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
  const size_t start = 10 + header;
  out->resize((bytes.size() - start) / 8);
  std::memcpy(out->data(), bytes.data() + start, out->size() * 8);
  return true;
}

/// The path of a file of the shared test model `model`.
std::string model_file(const std::string& model, const std::string& name) {
  return std::string(ZPLAN_MODELS_DIR) + "/" + model + "/" + name;
}

/// Compiles a generation plan of `model`. Each test has its own plan file: ctest runs the tests of this
/// binary as separate processes at once, and two compiles writing one path would race on its `.tmp`.
std::string compile(const std::string& model, const std::string& dtype = "fp32") {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string plan =
      std::string(ZPLAN_WORK_DIR) + "/generate-" + test + "-" + model + "-" + dtype + ".zplan";
  const std::string cmd = std::string(ZPLAN_BIN_DIR) + "/zplan " + model_file(model, "model.onnx") +
                          " --generate --max-seq " + std::to_string(kMaxSeq) + " --batch " +
                          std::to_string(kBatch) + " --dtype " + dtype + " -o " + plan;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return plan;
}

std::unique_ptr<zrt::Session> open(const std::string& plan) {
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open(plan, {}, &s);
  EXPECT_TRUE(st.ok()) << st.message();
  return s;
}

/// The larger of `worst` and `d`, NaN once either is NaN (std::max(worst, NaN) is worst, which would let a
/// NaN logit pass every bound below).
double worse(double worst, double d) { return std::isnan(d) ? d : std::max(worst, d); }

std::vector<float> logits(zrt::Session& s) {
  std::vector<float> l(static_cast<size_t>(kBatch * kVocab));
  zrt::Status st = s.read_output("logits", l.data(), l.size() * 4);
  EXPECT_TRUE(st.ok()) << st.message();
  return l;
}

/// The logits of a bf16 plan, widened to float.
std::vector<float> logits_bf16(zrt::Session& s) {
  std::vector<uint16_t> h(static_cast<size_t>(kBatch * kVocab));
  zrt::Status st = s.read_output("logits", h.data(), h.size() * 2);
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<float> l(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(h[i]) << 16;
    std::memcpy(&l[i], &bits, 4);
  }
  return l;
}

/// The tokens of every row so far: the prompts [kBatch, kPrompt] first, then one greedy token per step.
using Rows = std::vector<std::vector<int64_t>>;

Rows prompt_rows(const std::vector<int64_t>& ids) {
  Rows seq(kBatch);
  for (int64_t r = 0; r < kBatch; ++r)
    seq[r].assign(ids.begin() + r * kPrompt, ids.begin() + (r + 1) * kPrompt);
  return seq;
}

/// One decode step of `s` over each row's last token at its position; the greedy tokens into `next`.
zrt::Status decode_last(zrt::Session& s, const Rows& seq, std::vector<int64_t>* next) {
  std::vector<int64_t> tok(kBatch), pos(kBatch);
  for (int64_t r = 0; r < kBatch; ++r) {
    tok[r] = seq[r].back();
    pos[r] = static_cast<int64_t>(seq[r].size()) - 1;
  }
  return s.decode_step(tok.data(), pos.data(), kBatch, next->data());
}

/// The oracle of a decode step: a prefill of every row so far in `full`, a session whose cache no decode
/// touched; its greedy tokens into `tokens`, its logits readable from `full` afterwards.
zrt::Status prefill_all(zrt::Session& full, const Rows& seq, std::vector<int64_t>* tokens) {
  const int64_t n = static_cast<int64_t>(seq[0].size());
  std::vector<int64_t> all, lens(kBatch, n);
  for (int64_t r = 0; r < kBatch; ++r) all.insert(all.end(), seq[r].begin(), seq[r].end());
  tokens->resize(kBatch);
  return full.prefill(all.data(), kBatch, n, lens.data(), tokens->data());
}

void decode_matches_prefill(const std::string& model) {
  const std::string plan = compile(model);
  std::vector<int64_t> ids, expected;
  ASSERT_TRUE(read_i64_npy(model_file(model, "input_ids.npy"), &ids));
  ASSERT_TRUE(read_i64_npy(model_file(model, "expected_generate.npy"), &expected));
  ASSERT_EQ(ids.size(), static_cast<size_t>(kBatch * kPrompt));
  ASSERT_EQ(expected.size(), static_cast<size_t>(kBatch * (kPrompt + kNew)));
  auto dec = open(plan), full = open(plan);
  ASSERT_TRUE(dec && full);
  int64_t b = 0, l = 0;
  ASSERT_TRUE(dec->generation_shape(&b, &l).ok());
  EXPECT_EQ(b, kBatch);
  EXPECT_EQ(l, kMaxSeq);

  Rows seq = prompt_rows(ids);
  std::vector<int64_t> lengths(kBatch, kPrompt), next(kBatch), ignored;
  zrt::Status st = dec->prefill(ids.data(), kBatch, kPrompt, lengths.data(), next.data());
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t r = 0; r < kBatch; ++r) seq[r].push_back(next[r]);
  double worst = 0;
  for (int64_t k = 1; k < kNew; ++k) {
    st = decode_last(*dec, seq, &next);
    ASSERT_TRUE(st.ok()) << "step " << k << ": " << st.message();
    const std::vector<float> got = logits(*dec);
    const int64_t n = static_cast<int64_t>(seq[0].size());
    st = prefill_all(*full, seq, &ignored);
    ASSERT_TRUE(st.ok()) << st.message();
    const std::vector<float> want = logits(*full);
    double diff = 0;
    for (size_t i = 0; i < got.size(); ++i)
      diff = worse(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    EXPECT_LE(diff, 1e-4) << model << " decode step " << k << " (position " << n - 1 << ")";
    worst = worse(worst, diff);
    for (int64_t r = 0; r < kBatch; ++r) {
      EXPECT_EQ(next[r], ignored[r]) << "step " << k << " row " << r;
      seq[r].push_back(next[r]);
    }
  }
  std::printf("%s: %lld decode steps, largest |decode - prefill| logit difference %.3g\n", model.c_str(),
              static_cast<long long>(kNew - 1), worst);
  for (int64_t r = 0; r < kBatch; ++r)
    for (int64_t t = 0; t < kPrompt + kNew; ++t)
      EXPECT_EQ(seq[r][t], expected[r * (kPrompt + kNew) + t])
          << model << " token [" << r << ", " << t << "]";
}

TEST(GenerateRuntime, GptDecodeLogitsEqualPrefill) { decode_matches_prefill("gpt2"); }

// The bf16 plan against the fp32 model, teacher-forced: after each of its steps (the prefill, then every
// decode step over its bf16 cache) an fp32 session prefills the same tokens and gives the reference logits.
void bf16_follows_fp32(const std::string& model) {
  const std::string plan16 = compile(model, "bf16"), plan32 = compile(model);
  std::vector<int64_t> ids, expected;
  ASSERT_TRUE(read_i64_npy(model_file(model, "input_ids.npy"), &ids));
  ASSERT_TRUE(read_i64_npy(model_file(model, "expected_generate.npy"), &expected));
  auto half = open(plan16), full = open(plan32);
  ASSERT_TRUE(half && full);
  Rows seq = prompt_rows(ids);
  std::vector<int64_t> lengths(kBatch, kPrompt), next(kBatch), ignored;
  zrt::Status st = half->prefill(ids.data(), kBatch, kPrompt, lengths.data(), next.data());
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<bool> same_as_hf(kBatch, true);
  double worst = 0;
  int64_t forced = 0, agreed = 0;
  for (int64_t k = 0; k < kNew; ++k) {
    if (k > 0) {
      st = decode_last(*half, seq, &next);
      ASSERT_TRUE(st.ok()) << "step " << k << ": " << st.message();
    }
    const std::vector<float> got = logits_bf16(*half);
    st = prefill_all(*full, seq, &ignored);
    ASSERT_TRUE(st.ok()) << st.message();
    const std::vector<float> want = logits(*full);
    for (int64_t r = 0; r < kBatch; ++r) {
      const float* g = got.data() + r * kVocab;
      const float* w = want.data() + r * kVocab;
      double ss = 0, diff = 0;
      for (int64_t v = 0; v < kVocab; ++v) {
        ss += static_cast<double>(w[v]) * w[v];
        diff = worse(diff, std::fabs(static_cast<double>(g[v]) - w[v]));
      }
      const double rms = std::sqrt(ss / kVocab);
      EXPECT_LE(diff, 0.05 * rms) << model << " step " << k << " row " << r;
      worst = worse(worst, diff / rms);
      // The fp32 best and second best.
      int64_t best = 0;
      for (int64_t v = 1; v < kVocab; ++v)
        if (w[v] > w[best]) best = v;
      float second = -INFINITY;
      for (int64_t v = 0; v < kVocab; ++v)
        if (v != best) second = std::max(second, w[v]);
      EXPECT_GE(w[next[r]], w[best] - 2 * diff) << model << " step " << k << " row " << r << ": token " << next[r];
      const int64_t hf = expected[r * (kPrompt + kNew) + kPrompt + k];
      if (same_as_hf[r] && w[best] - second > 2 * diff) {
        ++forced;
        EXPECT_EQ(next[r], hf) << model << " step " << k << " row " << r << " (fp32 margin " << w[best] - second
                               << ", bf16 difference " << diff << ")";
      }
      agreed += same_as_hf[r] && next[r] == hf;
      same_as_hf[r] = same_as_hf[r] && next[r] == hf;
      seq[r].push_back(next[r]);
    }
  }
  std::printf("%s bf16: largest |bf16 - fp32| logit difference %.3g of the logits' RMS; %lld of %lld tokens equal "
              "the reference's before any divergence, %lld of them where the margin required it\n",
              model.c_str(), worst, static_cast<long long>(agreed), static_cast<long long>(kBatch * kNew),
              static_cast<long long>(forced));
}

TEST(GenerateRuntime, GptBf16FollowsFp32) { bf16_follows_fp32("gpt2"); }
TEST(GenerateRuntime, LlamaBf16FollowsFp32) { bf16_follows_fp32("llama"); }
TEST(GenerateRuntime, Qwen2Bf16FollowsFp32) { bf16_follows_fp32("qwen2"); }
TEST(GenerateRuntime, MistralBf16FollowsFp32) { bf16_follows_fp32("mistral"); }
TEST(GenerateRuntime, Phi3Bf16FollowsFp32) { bf16_follows_fp32("phi3"); }
TEST(GenerateRuntime, GemmaBf16FollowsFp32) { bf16_follows_fp32("gemma"); }
TEST(GenerateRuntime, GptNeoxBf16FollowsFp32) { bf16_follows_fp32("gpt_neox"); }
TEST(GenerateRuntime, OptBf16FollowsFp32) { bf16_follows_fp32("opt"); }
TEST(GenerateRuntime, LlamaDecodeLogitsEqualPrefill) { decode_matches_prefill("llama"); }
// The other decoder families (tests/models/README.md): q/k/v biases (qwen2), fused qkv and gate/up (phi3), one
// K/V head and head dim 16 (gemma), partial rotary and parallel residual (gpt_neox), learned positions at
// offset 2 (opt); their tokens against onnxruntime's full recompute.
TEST(GenerateRuntime, Qwen2DecodeLogitsEqualPrefill) { decode_matches_prefill("qwen2"); }
TEST(GenerateRuntime, MistralDecodeLogitsEqualPrefill) { decode_matches_prefill("mistral"); }
TEST(GenerateRuntime, Phi3DecodeLogitsEqualPrefill) { decode_matches_prefill("phi3"); }
TEST(GenerateRuntime, GemmaDecodeLogitsEqualPrefill) { decode_matches_prefill("gemma"); }
TEST(GenerateRuntime, GptNeoxDecodeLogitsEqualPrefill) { decode_matches_prefill("gpt_neox"); }
TEST(GenerateRuntime, OptDecodeLogitsEqualPrefill) { decode_matches_prefill("opt"); }

// Greedy tokens of `prompts` (row-major [batch, width], row r its first lengths[r] ids), `steps` new each.
std::vector<std::vector<int64_t>> greedy(zrt::Session& s, const std::vector<int64_t>& prompts, int64_t batch,
                                         int64_t width, const std::vector<int64_t>& lengths, int64_t steps) {
  std::vector<std::vector<int64_t>> out(batch);
  std::vector<int64_t> next(batch), pos(lengths), tok(batch);
  zrt::Status st = s.prefill(prompts.data(), batch, width, lengths.data(), next.data());
  EXPECT_TRUE(st.ok()) << st.message();
  for (int64_t k = 0; k < steps && st.ok(); ++k) {
    for (int64_t r = 0; r < batch; ++r) out[r].push_back(next[r]);
    if (k + 1 == steps) break;
    for (int64_t r = 0; r < batch; ++r) tok[r] = next[r];
    st = s.decode_step(tok.data(), pos.data(), batch, next.data());
    EXPECT_TRUE(st.ok()) << st.message();
    for (int64_t r = 0; r < batch; ++r) ++pos[r];
  }
  return out;
}

void prompts_of_different_lengths(const std::string& model) {
  const std::string plan = compile(model);
  std::vector<int64_t> ids;
  ASSERT_TRUE(read_i64_npy(model_file(model, "input_ids.npy"), &ids));
  auto s = open(plan);
  ASSERT_TRUE(s);
  const std::vector<int64_t> lengths = {kPrompt, 9};
  const auto batched = greedy(*s, ids, kBatch, kPrompt, lengths, 12);
  for (int64_t r = 0; r < kBatch; ++r) {
    std::vector<int64_t> one(ids.begin() + r * kPrompt, ids.begin() + r * kPrompt + lengths[r]);
    const auto alone = greedy(*s, one, 1, lengths[r], {lengths[r]}, 12);
    EXPECT_EQ(batched[r], alone[0]) << model << " row " << r << " (prompt of " << lengths[r] << " tokens)";
  }
}

TEST(GenerateRuntime, PromptsOfDifferentLengths) { prompts_of_different_lengths("llama"); }
// Learned positions (opt) and partial rotary (gpt_neox): each sequence's positions continue at its own length.
TEST(GenerateRuntime, OptPromptsOfDifferentLengths) { prompts_of_different_lengths("opt"); }
TEST(GenerateRuntime, GptNeoxPromptsOfDifferentLengths) { prompts_of_different_lengths("gpt_neox"); }

TEST(GenerateRuntime, CApiMatchesCpp) {
  const std::string plan = compile("gpt2");
  std::vector<int64_t> ids, expected;
  ASSERT_TRUE(read_i64_npy(model_file("gpt2", "input_ids.npy"), &ids));
  ASSERT_TRUE(read_i64_npy(model_file("gpt2", "expected_generate.npy"), &expected));
  zrt_session* s = nullptr;
  ASSERT_EQ(zrt_open(plan.c_str(), 0, 0, &s), 0) << zrt_last_error();
  int64_t b = 0, l = 0;
  ASSERT_EQ(zrt_generation_shape(s, &b, &l), 0);
  EXPECT_EQ(b, kBatch);
  EXPECT_EQ(l, kMaxSeq);
  std::vector<int64_t> lengths(kBatch, kPrompt), next(kBatch), pos(kBatch, kPrompt);
  ASSERT_EQ(zrt_prefill(s, ids.data(), kBatch, kPrompt, lengths.data(), next.data()), 0) << zrt_last_error();
  for (int64_t k = 0; k < 4; ++k) {
    for (int64_t r = 0; r < kBatch; ++r) EXPECT_EQ(next[r], expected[r * (kPrompt + kNew) + kPrompt + k]);
    std::vector<int64_t> tok(next);
    ASSERT_EQ(zrt_decode_step(s, tok.data(), pos.data(), kBatch, next.data()), 0) << zrt_last_error();
    for (int64_t& p : pos) ++p;
  }
  // Bad input is refused before anything runs: a position outside the cache, an id outside the vocabulary.
  std::vector<int64_t> far(kBatch, kMaxSeq), tok(kBatch, 1), oov(kBatch, kVocab);
  EXPECT_NE(zrt_decode_step(s, tok.data(), far.data(), kBatch, next.data()), 0);
  EXPECT_NE(std::string(zrt_last_error()).find("outside the planned cache"), std::string::npos)
      << zrt_last_error();
  EXPECT_NE(zrt_decode_step(s, oov.data(), pos.data(), kBatch, next.data()), 0);
  EXPECT_NE(std::string(zrt_last_error()).find("outside the vocabulary"), std::string::npos)
      << zrt_last_error();
  EXPECT_NE(zrt_prefill(s, ids.data(), kBatch + 1, kPrompt, lengths.data(), next.data()), 0);
  zrt_close(s);
}

}  // namespace
