//===- Report.cpp - The memory/communication report
//------------------------===//

#include "compiler/plan/Report.h"

#include <nlohmann/json.hpp>
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace zplan::plan {
std::string formatBytes(uint64_t bytes, const char *countSuffix) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%llu%s (%.2f %s)",
                static_cast<unsigned long long>(bytes), countSuffix, v,
                units[u]);
  return buf;
}

namespace {

std::string human(uint64_t bytes) { return formatBytes(bytes); }

/// The generation figures (docs/generation.md): the KV cache, what fits the
/// device, and ZeRO-Inference's traffic per decode step.
std::string formatGeneration(const PlanSummary &s) {
  const GenerationFigures &g = s.generation;
  const MemoryFigures &m = s.memory;
  std::ostringstream os;
  const int64_t localBatch = g.batch / s.dp;
  const uint64_t positions = uint64_t(localBatch) * uint64_t(g.maxSeq);
  os << "generation: batch " << g.batch << " (" << localBatch
     << " per rank), max-seq " << g.maxSeq << ", per rank:\n";
  os << "  KV cache bytes             " << human(g.kvCacheBytes) << ", "
     << (positions ? g.kvCacheBytes / positions : 0)
     << " per sequence position\n";
  if (g.gpuMem && positions) {
    // The cache and the prefill's activations grow with batch x L; the
    // weights, gathered parameters, workspace and reserve do not.
    const uint64_t scaling = g.kvCacheBytes + m.activationBytes;
    const uint64_t fixed =
        m.plannedPeakBytes() - std::min(m.plannedPeakBytes(), scaling);
    const uint64_t perPosition = (scaling + positions - 1) / positions;
    const uint64_t fit =
        g.gpuMem > fixed && perPosition ? (g.gpuMem - fixed) / perPosition : 0;
    os << "  largest batch x L in --gpu-mem " << human(g.gpuMem) << ": " << fit
       << " sequence positions per rank (" << perPosition
       << " bytes each: cache and prefill activations; " << human(fixed)
       << " fixed), e.g. batch " << (g.maxSeq ? fit / uint64_t(g.maxSeq) : 0)
       << " per rank at L = " << g.maxSeq << "\n";
  } else {
    os << "  largest batch x L          give --gpu-mem to compute it\n";
  }
  const uint64_t moved = g.decodePrefetchBytes + g.decodeGatherBytes;
  if (moved) {
    os << "  ZeRO-Inference per decode step: " << human(g.decodePrefetchBytes)
       << " host -> device, " << human(g.decodeGatherBytes)
       << " gathered from dp peers; "
       << human(localBatch ? moved / uint64_t(localBatch) : moved)
       << " per token\n";
    if (g.linkBandwidth > 0) {
      // The link that bounds a step: the host link when parameters come
      // from host memory (the gathers then run over the dp interconnect at
      // the same time), else the dp link the gathers use.
      const bool host = g.decodePrefetchBytes > 0;
      const uint64_t bound = host ? g.decodePrefetchBytes : g.decodeGatherBytes;
      const double floor = double(bound) / g.linkBandwidth;
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    "  floor at --link-bandwidth %.3g GB/s (%s): %.6f s per "
                    "decode step, at most %.1f tokens/s per rank\n",
                    g.linkBandwidth / 1e9,
                    host ? "host -> device bytes" : "gathered bytes", floor,
                    floor > 0 ? double(localBatch) / floor : 0.0);
      os << buf;
    }
  }
  return os.str();
}

} // namespace

std::string formatReport(const PlanSummary &s) {
  std::ostringstream os;
  const MemoryFigures &m = s.memory;
  os << "zplan report: world " << s.world << " (tp " << s.tp << " x dp " << s.dp
     << "), dtype " << dtypeName(s.dtype).str() << ", " << s.numInstructions
     << " instructions, " << s.numTensors << " tensors, " << s.numWeights
     << " weight sources\n";
  // Every rank holds the same local shapes, so the figures are the same on
  // every rank; they are printed per rank all the same, as the plan records.
  for (int r = 0; r < s.world; ++r) {
    os << "rank " << r << " (tp " << r % s.tp << ", dp " << r / s.tp << "):\n";
    os << "  resident weight bytes      " << human(m.residentWeightBytes)
       << "\n";
    os << "  peak gathered param bytes  " << human(m.peakGatheredParamBytes)
       << "\n";
    os << "  activation bytes (peak)    " << human(m.activationBytes) << "\n";
    if (m.optimizerGradBytes)
      os << "  gradients (optimizer)      " << human(m.optimizerGradBytes)
         << " (what the updates read)\n";
    if (m.activationsForBackwardBytes)
      os << "  activations for backward   "
         << human(m.activationsForBackwardBytes)
         << " (alive across the loss)\n";
    os << "  collective buffer bytes    " << human(m.collectiveBufferBytes)
       << "\n";
    // Training state (format 2), printed when the plan holds any.
    if (m.gradBytes || m.masterBytes || m.momentBytes || m.stateBytes ||
        m.bucketBytes) {
      os << "  gradient buffer bytes      " << human(m.gradBytes) << "\n";
      os << "  master weight bytes        " << human(m.masterBytes) << "\n";
      os << "  optimizer moment bytes     " << human(m.momentBytes) << "\n";
      os << "  other state bytes          " << human(m.stateBytes) << "\n";
      os << "  gradient bucket bytes      " << human(m.bucketBytes)
         << " (peak)\n";
    }
    // Offload: how much of the state above lives in host memory.
    if (m.hostWeightBytes || m.hostGradBytes || m.hostMasterBytes ||
        m.hostMomentBytes || m.hostStateBytes)
      os << "  of which in host memory    params " << human(m.hostWeightBytes)
         << ", gradients " << human(m.hostGradBytes) << ", master "
         << human(m.hostMasterBytes) << ", moments " << human(m.hostMomentBytes)
         << ", other " << human(m.hostStateBytes) << "\n";
    if (m.arenaBytes[2])
      os << "  of which on NVMe           params " << human(m.nvmeWeightBytes)
         << ", master " << human(m.nvmeMasterBytes) << ", moments "
         << human(m.nvmeMomentBytes) << ", other " << human(m.nvmeStateBytes)
         << "\n";
    os << "  workspace bytes            " << human(m.workspaceBytes) << "\n";
    os << "  device arena               " << human(m.arenaBytes[0]) << "\n";
    if (m.runtimeReserveBytes)
      os << "  runtime reserve            " << human(m.runtimeReserveBytes)
         << " (CUDA context, communicators)\n";
    os << "  planned peak (device)      " << human(m.plannedPeakBytes())
       << "\n";
    os << "  planned host bytes         " << human(m.arenaBytes[1]) << "\n";
  }
  if (s.generation.present)
    os << formatGeneration(s);
  if (s.nvme.present) {
    const NvmeFigures &n = s.nvme;
    os << "NVMe offload (docs/nvme.md), per rank:\n";
    os << "  file                       " << human(n.fileBytes) << " under '"
       << n.path << "' (direct I/O, " << n.alignment << "-byte aligned)\n";
    for (const std::string &p : n.programs) {
      auto r = n.readBytes.find(p), w = n.writeBytes.find(p);
      if (r == n.readBytes.end() && w == n.writeBytes.end())
        continue;
      os << "  @" << p << " run: read "
         << human(r == n.readBytes.end() ? 0 : r->second) << ", written "
         << human(w == n.writeBytes.end() ? 0 : w->second) << "\n";
    }
    char floor[64];
    std::snprintf(floor, sizeof(floor), "%.3f ms", n.floorSeconds() * 1e3);
    os << "  per step (" << n.step() << "): read " << human(n.stepReadBytes())
       << ", written " << human(n.stepWriteBytes()) << "; time floor " << floor
       << " at " << human(uint64_t(n.bandwidth)) << "/s (--nvme-bandwidth)\n";
  }
  if (!s.hostCopies.bytes.empty()) {
    // Every byte a run moves over the host link sets a floor on its time:
    // the copies run in order on the copy stream, at most at the link's rate.
    const double rate = s.generation.linkBandwidth;
    os << "host -> device copies, per rank:\n";
    for (const std::string &p : s.programs) {
      auto it = s.hostCopies.bytes.find(p);
      if (it == s.hostCopies.bytes.end())
        continue;
      os << "  @" << p << " run: " << human(it->second);
      if (rate > 0) {
        char buf[96];
        std::snprintf(buf, sizeof(buf),
                      "; floor %.3f ms at --link-bandwidth %.3g GB/s",
                      double(it->second) / rate * 1e3, rate / 1e9);
        os << buf;
      }
      os << "\n";
    }
    // The copy window of each program that copies parameters; one line when
    // every program has the same (a generation plan's prefill buckets and
    // decode step usually do).
    std::set<int64_t> windows;
    for (const auto &[p, w] : s.hostCopies.windowBytes)
      windows.insert(w);
    for (const auto &[p, w] : s.hostCopies.windowBytes) {
      os << "  parameter copies"
         << (windows.size() == 1 ? std::string() : " of @" + p);
      if (w == 0)
        os << " one parameter ahead of their use (--prefetch-bytes 0)\n";
      else
        os << " issued up to " << human(uint64_t(w))
           << " ahead of their use (--prefetch-bytes, counted in fp32 "
              "bytes)\n";
      if (windows.size() == 1)
        break;
    }
  }
  if (!s.earlySteps.empty()) {
    // The steps --zplan-early-loads marked (plan 2.18): what the CUDA backend
    // runs with the first weight (or cache) loads before the wait.
    os << "early loads (steps whose kernel reads weights before waiting for "
          "the previous one):";
    for (const auto &[p, n] : s.earlySteps)
      os << " @" << p << " " << n;
    os << "\n";
  }
  os << "communication per step, per rank (bytes sent, ring algorithms):\n";
  if (s.comm.empty())
    os << "  none\n";
  for (const auto &[kind, axes] : s.comm)
    for (const auto &[axis, f] : axes)
      os << "  " << kind << " over " << axis << ": " << f.count
         << " calls, payload " << human(f.payloadBytes) << ", sent "
         << human(f.sentBytes) << "\n";
  char hash[32];
  std::snprintf(hash, sizeof(hash), "0x%016llx",
                static_cast<unsigned long long>(s.collectiveHash));
  os << "collective hash " << hash << "\n";
  return os.str();
}

std::string NvmeFigures::step() const {
  auto has = [&](const char *p) { return llvm::is_contained(programs, p); };
  if (has("train_step"))
    return "@train_step";
  if (has("micro_step") && has("optimizer_step"))
    return std::to_string(microBatches) + " x @micro_step + @optimizer_step";
  if (has("decode"))
    return "@decode";
  return has("main") ? "@main" : programs.empty() ? "" : "@" + programs[0];
}

uint64_t
NvmeFigures::stepBytes(const std::map<std::string, uint64_t> &perRun) const {
  auto of = [&](const char *p) -> uint64_t {
    auto it = perRun.find(p);
    return it == perRun.end() ? 0 : it->second;
  };
  auto has = [&](const char *p) { return llvm::is_contained(programs, p); };
  if (has("train_step"))
    return of("train_step");
  if (has("micro_step") && has("optimizer_step"))
    return uint64_t(microBatches) * of("micro_step") + of("optimizer_step");
  if (has("decode"))
    return of("decode");
  if (has("main"))
    return of("main");
  return programs.empty() ? 0 : of(programs[0].c_str());
}

std::string formatReportJson(const PlanSummary &s) {
  using nlohmann::json;
  const MemoryFigures &m = s.memory;
  json comm = json::object(), payload = json::object(), calls = json::object();
  for (const auto &[kind, axes] : s.comm)
    for (const auto &[axis, f] : axes) {
      comm[kind][axis] = f.sentBytes;
      payload[kind][axis] = f.payloadBytes;
      calls[kind][axis] = f.count;
    }
  json ranks = json::array();
  for (int r = 0; r < s.world; ++r)
    ranks.push_back({{"rank", r},
                     {"tp_index", r % s.tp},
                     {"dp_index", r / s.tp},
                     {"resident_weight_bytes", m.residentWeightBytes},
                     {"peak_gathered_param_bytes", m.peakGatheredParamBytes},
                     {"activation_bytes", m.activationBytes},
                     {"activations_for_backward_bytes",
                      m.activationsForBackwardBytes},
                     {"param_bytes", m.residentWeightBytes},
                     {"grad_bytes", m.gradBytes},
                     {"optimizer_grad_bytes", m.optimizerGradBytes},
                     {"master_bytes", m.masterBytes},
                     {"moment_bytes", m.momentBytes},
                     {"state_bytes", m.stateBytes},
                     {"bucket_bytes", m.bucketBytes},
                     {"host_param_bytes", m.hostWeightBytes},
                     {"host_grad_bytes", m.hostGradBytes},
                     {"host_master_bytes", m.hostMasterBytes},
                     {"host_moment_bytes", m.hostMomentBytes},
                     {"host_state_bytes", m.hostStateBytes},
                     {"nvme_param_bytes", m.nvmeWeightBytes},
                     {"nvme_master_bytes", m.nvmeMasterBytes},
                     {"nvme_moment_bytes", m.nvmeMomentBytes},
                     {"nvme_state_bytes", m.nvmeStateBytes},
                     {"nvme_file_bytes", m.arenaBytes[2]},
                     {"collective_buffer_bytes", m.collectiveBufferBytes},
                     {"workspace_bytes", m.workspaceBytes},
                     {"device_arena_bytes", m.arenaBytes[0]},
                     {"runtime_reserve_bytes", m.runtimeReserveBytes},
                     {"planned_peak_bytes", m.plannedPeakBytes()},
                     {"planned_host_bytes", m.arenaBytes[1]},
                     {"comm", comm},
                     {"comm_payload", payload},
                     {"comm_calls", calls}});
  json out = {
      {"world", s.world},
      {"tp", s.tp},
      {"dp", s.dp},
      {"dtype", dtypeName(s.dtype).str()},
      {"instructions", s.numInstructions},
      {"tensors", s.numTensors},
      {"collective_hash", s.collectiveHash},
      {"programs", s.programs},
      {"generation",
       s.generation.present
           ? json{{"batch", s.generation.batch},
                  {"max_seq", s.generation.maxSeq},
                  {"kv_cache_bytes", s.generation.kvCacheBytes},
                  {"decode_prefetch_bytes", s.generation.decodePrefetchBytes},
                  {"decode_gather_bytes", s.generation.decodeGatherBytes}}
           : json(nullptr)},
      {"nvme", s.nvme.present
                   ? json{{"file_bytes", s.nvme.fileBytes},
                          {"alignment", s.nvme.alignment},
                          {"path", s.nvme.path},
                          {"read_bytes_per_run", s.nvme.readBytes},
                          {"write_bytes_per_run", s.nvme.writeBytes},
                          {"step", s.nvme.step()},
                          {"step_read_bytes", s.nvme.stepReadBytes()},
                          {"step_write_bytes", s.nvme.stepWriteBytes()},
                          {"bandwidth_bytes_per_second", s.nvme.bandwidth},
                          {"step_floor_seconds", s.nvme.floorSeconds()}}
                   : json(nullptr)},
      {"host_copies",
       s.hostCopies.bytes.empty()
           ? json(nullptr)
           : json{{"bytes_per_run", s.hostCopies.bytes},
                  {"window_bytes", s.hostCopies.windowBytes},
                  {"link_bandwidth_bytes_per_second",
                   s.generation.linkBandwidth}}},
      {"ranks", ranks}};
  return out.dump(2) + "\n";
}

} // namespace zplan::plan
