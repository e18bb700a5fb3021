// fuzz_plan_load.cpp - libFuzzer target: plan file bytes -> verifier, weight assembly, session, executor.
//
// A plan file may be damaged in transit or written by another version, so every byte of it is untrusted
// until the runtime has verified it. Each input is a plan file image and goes through, in order:
//   1. verify_plan() on the bytes as they are (size, magic, CRC, FlatBuffers verifier, ...);
//   2. the same payload under a freshly computed header, so that mutations reach the FlatBuffers verifier and
//      the semantic checks behind the CRC. The launch takes its world size from the plan's own fingerprint
//      (so that plans for 2 or 4 ranks are checked as deeply as single-rank ones) and each rank is verified;
//   3. for every rank a verified plan accepts, every weight binding is assembled (assemble_weight: from the
//      plan's inline data, from deterministic random values, and from the external file `weights.bin`, 4 KiB,
//      which the fuzzer's folder holds) into a buffer of exactly the tensor's reserved bytes, so that a
//      piece the verifier let through which writes outside its tensor is an AddressSanitizer report here
//      (inside the session's arena it would corrupt a neighbour silently);
//   4. a plan for one rank is opened through the public loader (zrt::Session::open_buffer) and, when small,
//      run once on random inputs: a plan the verifier accepts must execute without a memory error.
// Any crash, sanitizer report or hang is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "fuzz_common.h"
#include "plan.h"
#include "weights.h"
#include "zrt/plan_file.h"
#include "zrt/zrt.h"

namespace {

std::string g_dir;  // relative weight files resolve here; it holds weights.bin (4 KiB) and nothing else

// The FlatBuffer payload of an input: what follows a 24-byte header when the input starts with the magic,
// else the whole input (a bare FlatBuffer).
std::vector<uint8_t> payload_of(const uint8_t *data, size_t size) {
  if (size >= zrt::kPlanHeaderBytes && std::memcmp(data, zrt::kPlanMagic, sizeof(zrt::kPlanMagic)) == 0)
    return std::vector<uint8_t>(data + zrt::kPlanHeaderBytes, data + size);
  return std::vector<uint8_t>(data, data + size);
}

std::vector<uint8_t> with_header(const std::vector<uint8_t> &payload) {
  const zrt::PlanHeader h = zrt::make_plan_header(payload.data(), payload.size());
  std::vector<uint8_t> file(sizeof(h) + payload.size());
  std::memcpy(file.data(), &h, sizeof(h));
  if (!payload.empty()) std::memcpy(file.data() + sizeof(h), payload.data(), payload.size());
  return file;
}

// Assembles every weight of a verified plan for `rank` into exactly-sized heap buffers.
void assemble_all(const zrt::fb::Plan &plan, int rank) {
  if (!plan.bindings() || !plan.tensors()) return;
  zrt::MappedFiles files;
  for (const zrt::fb::WeightBinding *b : *plan.bindings()) {
    const zrt::fb::Tensor *t = plan.tensors()->Get(b->tensor());
    // The verifier bounds every tensor by its arena; a fuzzer still has only so much memory.
    if (t->bytes() > (uint64_t{1} << 26)) continue;
    for (bool random : {true, false}) {
      std::vector<uint8_t> dst(static_cast<size_t>(t->bytes()));
      (void)zrt::assemble_weight(plan, *b, rank, g_dir, random, 1, &files, dst.data(),
                                 static_cast<zrt::DType>(t->dtype()));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  g_dir = zfuzz::make_dir("plan");
  // The plans compiled from the hostile control model name "weights.bin" beside the plan.
  FILE *f = std::fopen((g_dir + "/weights.bin").c_str(), "wb");
  if (!f) {
    std::perror("weights.bin");
    std::abort();
  }
  for (int i = 0; i < 4096; ++i) std::fputc((i * 37 + 11) & 0xFF, f);
  std::fclose(f);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // 1. The bytes as they are. The runtime reads a plan into a vector, which is at least 8-byte aligned;
  //    the copy gives the verifier the same alignment.
  std::vector<uint8_t> raw(data, data + size);
  const zrt::fb::Plan *plan = nullptr;
  uint64_t chash = 0;
  zrt::Launch one;
  // The outcome is that of the bytes as they are, for a one-rank launch (what zrun on one rank says).
  const zrt::Status raw_status = zrt::verify_plan(raw.data(), raw.size(), one, &plan, &chash);
  if (raw_status.ok()) zfuzz::accepted();
  else if (raw_status.message().empty()) zfuzz::unexpected("fuzz_plan_load", "a refusal without a message");
  else zfuzz::refused(raw_status.message());

  // 2. The payload behind a valid header.
  const std::vector<uint8_t> file = with_header(payload_of(data, size));
  const uint8_t *payload = file.data() + zrt::kPlanHeaderBytes;
  const size_t len = file.size() - zrt::kPlanHeaderBytes;
  int world = 1;
  {
    flatbuffers::Verifier v(payload, len);
    if (len >= 8 && zrt::fb::PlanBufferHasIdentifier(payload) && zrt::fb::VerifyPlanBuffer(v)) {
      const zrt::fb::Fingerprint *fp = zrt::fb::GetPlan(payload)->fingerprint();
      if (fp && fp->world() >= 1 && fp->world() <= 8) world = fp->world();
    }
  }
  for (int rank = 0; rank < world; ++rank) {
    zrt::Launch l;
    l.world = world;
    l.rank = rank;
    plan = nullptr;
    if (!zrt::verify_plan(file.data(), file.size(), l, &plan, &chash).ok()) break;
    // 3. Weight assembly for this rank.
    assemble_all(*plan, rank);
  }

  // 4. The public loader and the executor, for plans that a single process can run.
  if (world == 1) {
    zrt::Options o;
    o.init = zrt::InitMode::random;
    std::unique_ptr<zrt::Session> s;
    if (zrt::Session::open_buffer(file.data(), file.size(), g_dir, o, &s).ok()) {
      const zrt::MemoryReport m = s->memory_report();
      if (m.planned_arena_bytes[0] + m.planned_arena_bytes[1] <= (uint64_t{1} << 22) &&
          s->bind_random_inputs(7).ok())
        (void)s->run();
    }
  }
  return 0;
}
