// zrun - runs a zplan plan on every rank of an MPI job, or of a torchrun job (`torchrun --nproc-per-node
// WORLD zrun PLAN ...`: the ranks then talk over TCP; zrt/communicator.h, make_communicator_from_env).
//
//   mpirun -np WORLD zrun PLAN --input NAME=FILE.npy ... [--random-inputs] --output NAME=FILE.npy
//          [--repeat N] [--init file|random] [--seed N] [--timeout SECONDS]
//          [--expect NAME=FILE.npy [--tolerance T]] [--cuda-graph] [--check-collectives]
//
// Input files hold the global batch (each dp group takes its rows); output files receive the whole
// global output, written by rank 0. Every rank prints its planned and measured peak arena bytes and the
// wall time of the run. --expect compares an output with a reference file and prints the largest
// absolute difference; the exit status is 3 when it exceeds --tolerance.
//
//   mpirun -np WORLD zrun PLAN --train --data TOKENS.npy --steps N [--lr X] [--seed S]
//          [--losses-out F.npy] [--grad-norms-out F.npy] [--save-dir DIR --save-every K] [--resume DIR]
//
// trains with a plan made by zplan --train: its init program once, then one train step per step
// (zrt::Session::train_step). TOKENS.npy is an integer array [samples, seq]; step k takes the next global
// batch of samples (wrapping around at the end), each rank its dp rows. Rank 0 prints the loss, the
// gradient norm and tokens/s per step; the two -out files get them as float64 arrays. The data is checked
// (dtype, shape, enough samples, every id inside the embedding table) before the first step.
// --save-dir writes a sharded checkpoint every K steps (docs/checkpoint-format.md); --resume loads one,
// saved under any (tp, dp, zero, offload), before the first step and continues from its step and data
// position until step N.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "zk/cpu_kernels.h"
#include "zrt/npy.h"
#include "zrt/zrt.h"

namespace {

struct Args {
  std::string plan;
  std::vector<std::pair<std::string, std::string>> inputs, outputs, expects;
  double tolerance = 1e-4;
  bool random_inputs = false;
  bool cuda_graph = false;
  bool check_collectives = false;
  int repeat = 1;
  int warmup = 0;
  bool init_random = false;
  uint64_t seed = 0;
  // A stuck peer must not hang the job forever: each phase (open, every run of the plan) gets this long
  // unless --timeout says otherwise (0 turns the watchdog off).
  double timeout = 300;
  zrt::BackendKind backend = zrt::BackendKind::cpu;
  // --train
  bool train = false;
  std::string data, losses_out, grad_norms_out;
  int64_t steps = 0;
  int64_t micro_batches = 0;  // 0: as the plan says (1 for a train_step plan)
  double lr = -1;             // < 0: the plan's schedule
  std::string save_dir, resume;
  int64_t save_every = 0;
  // --generate (docs/generation.md)
  bool generate = false;
  std::string prompt, prompt_lengths, tokens_out;
  int64_t max_new_tokens = -1;
  std::vector<int64_t> stop;
  double temperature = 0, top_p = 1;
  int64_t top_k = 0;
  // NVMe offload (docs/nvme.md)
  std::string nvme_path;
  int nvme_threads = 4;
};

// The rank as the launcher tells it, for messages printed before MPI is up (only rank 0 prints those):
// an MPI launcher's, else torchrun's RANK.
int launcher_rank() {
  for (const char *v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK"})
    if (const char *s = std::getenv(v)) return std::atoi(s);
  return 0;
}

/// Checks one NAME=FILE.npy value; CLI11 prefixes the message with the flag's name.
const CLI::Validator kNameEqualsFile(
    [](std::string &s) -> std::string {
      const size_t eq = s.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == s.size()) return "expects NAME=FILE.npy, got '" + s + "'";
      return "";
    },
    "");

/// A number in [lo, hi], checked on the text so that the message says what was given.
CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string &s) -> std::string {
        char *end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0' || !(d >= lo && d <= hi))
          return "expects a number in [" + std::to_string(static_cast<long long>(lo)) + ", " +
                 std::to_string(static_cast<long long>(hi)) + "], got '" + s + "'";
        return "";
      },
      "");
}

std::vector<std::pair<std::string, std::string>> split_pairs(const std::vector<std::string> &values) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string &s : values) {
    const size_t eq = s.find('=');
    out.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  return out;
}

/// The command line, parsed by CLI11 as zplan's is. Every rank parses it (each needs the values), but only the
/// launcher's rank 0 prints a complaint or the help. Returns -1 to go on, or the exit status.
int parse_args(int argc, char **argv, Args *a) {
  CLI::App app{"zrun: runs a zplan plan on every rank of an MPI job"};
  // Unknown flags and a second plan land in remaining(), so that the messages can say which is which.
  app.allow_extras();
  std::vector<std::string> inputs, outputs, expects;
  // Counts and the seed are read as doubles, as before CLI11 ("1e3" is a valid --repeat), then range-checked.
  double repeat = a->repeat, warmup = a->warmup, seed = 0;
  std::string init = "file", backend = "cpu";
  app.add_option("plan", a->plan, "Plan file written by zplan");
  // One value per occurrence: a vector option would otherwise swallow the plan that follows it.
  app.add_option("--input", inputs, "Bind an input from a .npy file holding the global batch (repeatable)")
      ->type_name("NAME=FILE.npy")->check(kNameEqualsFile)->allow_extra_args(false);
  app.add_flag("--random-inputs", a->random_inputs, "Bind random values to every input (--input files override them)");
  app.add_option("--output", outputs, "Write an output (gathered on rank 0) to a .npy file (repeatable)")
      ->type_name("NAME=FILE.npy")->check(kNameEqualsFile)->allow_extra_args(false);
  app.add_option("--repeat", repeat, "Timed runs of the plan")->type_name("N")->check(number_in(1, 1e6))->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed runs before the timed ones")->type_name("N")->check(number_in(0, 1e6))->capture_default_str();
  app.add_option("--init", init, "Parameters from the weight files, or random")->check(CLI::IsMember({"file", "random"}))
      ->capture_default_str();
  app.add_option("--seed", seed, "Seed of --init random and --random-inputs")->type_name("N")->check(number_in(0, 9e15));
  app.add_option("--timeout", a->timeout, "Seconds each phase may take before the job is stopped (0: no watchdog)")
      ->type_name("SECONDS")->check(number_in(0, 1e7))->capture_default_str();
  app.add_option("--backend", backend, "Where the plan runs")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--expect", expects, "Compare an output with a reference .npy file (repeatable); exit 3 beyond --tolerance")
      ->type_name("NAME=FILE.npy")->check(kNameEqualsFile)->allow_extra_args(false);
  app.add_option("--tolerance", a->tolerance, "Largest absolute difference --expect accepts")
      ->type_name("T")->check(number_in(0, 1e30))->capture_default_str();
  app.add_flag("--cuda-graph", a->cuda_graph, "cuda: capture the step as a CUDA graph and replay it");
  app.add_flag("--check-collectives", a->check_collectives,
               "Before each collective, every rank agrees its sequence number, op, group, bytes and dtype; a "
               "mismatch ends the job naming both sides (also ZRT_CHECK_COLLECTIVES=1)");

  double steps = 0, micro = 0;
  app.add_option("--micro-batches", micro,
                 "--train: micro-batches per step of a plan made with zplan --micro-batches (the same M)")
      ->type_name("M")->check(number_in(1, 1e6));
  double max_new = -1;
  app.add_flag("--generate", a->generate,
               "Greedy generation with a plan made by zplan --generate: one prefill, then one decode step per token");
  app.add_option("--prompt", a->prompt, "--generate: integer prompt ids [B, P] (.npy)")->type_name("IDS.npy");
  app.add_option("--prompt-lengths", a->prompt_lengths,
                 "--generate: integer [B] (.npy): prompt b is its first lengths[b] ids (default: all P)")
      ->type_name("LENS.npy");
  app.add_option("--max-new-tokens", max_new, "--generate: tokens to generate per sequence")->type_name("N");
  app.add_option("--temperature", a->temperature, "--generate: sampling temperature (0: greedy, the default)")
      ->type_name("T");
  app.add_option("--top-k", a->top_k, "--generate: sample among the K largest logits (0: all)")->type_name("K");
  app.add_option("--top-p", a->top_p, "--generate: nucleus sampling threshold in [0, 1] (1: off)")->type_name("P");
  app.add_option("--stop", a->stop, "--generate: a token that ends its sequence (repeatable)")->type_name("ID");
  app.add_option("--tokens-out", a->tokens_out, "--generate: write prompt and new tokens, int64 [B, P + new]")
      ->type_name("OUT.npy");
  app.add_option("--nvme-path", a->nvme_path,
                 "Folder of the NVMe offload files (default: the one the plan names, zplan --nvme-path)")
      ->type_name("DIR");
  app.add_option("--nvme-threads", a->nvme_threads, "Threads that run the NVMe reads and writes")
      ->type_name("N")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_flag("--train", a->train, "Train with a plan made by zplan --train (init once, then --steps train steps)");
  app.add_option("--data", a->data, "--train: integer token array [samples, seq] (.npy)")->type_name("TOKENS.npy");
  app.add_option("--steps", steps, "--train: train until step N (a resumed run continues after the checkpoint's step)")
      ->type_name("N")->check(number_in(1, 1e9));
  double save_every = 0;
  app.add_option("--save-dir", a->save_dir, "--train: write sharded checkpoints under this folder (with --save-every)")
      ->type_name("DIR");
  app.add_option("--save-every", save_every, "--train: save a checkpoint after every K-th step")->type_name("K")
      ->check(number_in(1, 1e9));
  app.add_option("--resume", a->resume,
                 "--train: load a checkpoint (a --save-dir folder, or one checkpoint in it) before the first step; "
                 "it may come from another tp, dp, zero stage or offload")
      ->type_name("DIR");
  app.add_option("--lr", a->lr, "--train: learning rate (overrides the plan's schedule)")->type_name("X")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--losses-out", a->losses_out, "--train: write the per-step loss (float64) to this .npy file")
      ->type_name("F.npy");
  app.add_option("--grad-norms-out", a->grad_norms_out,
                 "--train: write the per-step gradient norm before clipping (float64) to this .npy file")
      ->type_name("F.npy");

  const bool speak = launcher_rank() == 0;
  auto fail = [&](const std::string &msg) {
    if (speak) std::fprintf(stderr, "zrun: error: %s\nRun with --help for the flags.\n", msg.c_str());
    return 2;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    if (speak) std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError &e) {
    return fail(e.what());
  }
  for (const std::string &extra : app.remaining()) {
    if (!extra.empty() && extra[0] == '-') return fail("unknown flag '" + extra + "'");
    return fail("unexpected argument '" + extra + "' (one plan file only)");
  }
  if (a->plan.empty()) return fail("no plan file given");
  a->inputs = split_pairs(inputs);
  a->outputs = split_pairs(outputs);
  a->expects = split_pairs(expects);
  a->repeat = static_cast<int>(repeat);
  a->warmup = static_cast<int>(warmup);
  a->seed = static_cast<uint64_t>(seed);
  a->init_random = init == "random";
  a->backend = backend == "cuda" ? zrt::BackendKind::cuda : zrt::BackendKind::cpu;
  a->steps = static_cast<int64_t>(steps);
  a->micro_batches = static_cast<int64_t>(micro);
  a->save_every = static_cast<int64_t>(save_every);
  if (a->generate) {
    if (a->train) return fail("--generate and --train are different runs: give one");
    if (a->prompt.empty()) return fail("--generate needs --prompt IDS.npy");
    if (max_new < 0 || max_new != std::floor(max_new) || max_new > 1e9)
      return fail("--generate needs --max-new-tokens N with N a whole number >= 0 (got " +
                  (max_new < -0.5 && max_new > -1.5 ? std::string("none") : std::to_string(max_new)) + ")");
    a->max_new_tokens = static_cast<int64_t>(max_new);
    if (!(a->temperature >= 0) || !std::isfinite(a->temperature)) return fail("--temperature must be a finite T >= 0");
    if (a->top_k < 0) return fail("--top-k must be >= 0 (0: off)");
    if (!(a->top_p >= 0 && a->top_p <= 1)) return fail("--top-p must be in [0, 1]");
    if (!a->inputs.empty() || a->random_inputs || !a->outputs.empty() || !a->expects.empty())
      return fail("--generate takes its input from --prompt; --input, --random-inputs, --output and --expect do not "
                  "apply");
  } else if (!a->prompt.empty() || !a->prompt_lengths.empty() || max_new != -1 || !a->stop.empty() ||
             !a->tokens_out.empty()) {
    return fail("--prompt, --prompt-lengths, --max-new-tokens, --stop and --tokens-out need --generate");
  }
  if (a->train) {
    if (a->data.empty()) return fail("--train needs --data TOKENS.npy");
    if (a->steps < 1) return fail("--train needs --steps N (N >= 1)");
    if (!a->inputs.empty() || a->random_inputs || !a->outputs.empty() || !a->expects.empty())
      return fail("--train takes its batches from --data; --input, --random-inputs, --output and --expect do not apply");
    if (a->save_dir.empty() != (a->save_every == 0))
      return fail("--save-dir and --save-every go together: checkpoints need a folder and an interval");
  } else if (!a->data.empty() || a->steps || a->lr >= 0 || a->micro_batches || !a->losses_out.empty() ||
             !a->grad_norms_out.empty() || !a->save_dir.empty() || a->save_every || !a->resume.empty()) {
    return fail("--data, --steps, --lr, --micro-batches, --losses-out, --grad-norms-out, --save-dir, --save-every and "
                "--resume need --train");
  }
  return -1;
}

/// Ends the process when the run takes longer than the limit, so that a dead or stuck peer cannot hang
/// the job: exiting without MPI_Finalize makes mpirun stop every other rank.
class Watchdog {
 public:
  explicit Watchdog(double seconds) : seconds_(seconds) {
    if (seconds <= 0) return;
    deadline_ = deadline_from_now();
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mu_);
      // kick() moves the deadline; only a deadline that passes unmoved stops the job.
      while (!done_ && std::chrono::steady_clock::now() < deadline_) cv_.wait_until(lock, deadline_);
      if (!done_) {
        std::fprintf(stderr, "zrun: rank %d: timed out after %g s (a peer may have died or stalled); stopping the job\n",
                     launcher_rank(), seconds);
        std::fflush(stderr);
        std::_Exit(124);
      }
    });
  }
  /// Restarts the countdown: called when a phase (a run of the plan) has finished.
  void kick() {
    if (seconds_ <= 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    deadline_ = deadline_from_now();
    cv_.notify_all();
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::chrono::steady_clock::time_point deadline_from_now() const {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds_));
  }
  double seconds_;
  std::chrono::steady_clock::time_point deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

/// Element i of a buffer of `dtype` as a double (the comparison of --expect is done in float64); the
/// float formats decode through the reference kernels' conversions.
double element_as_double(zrt::DType dtype, const uint8_t *p, size_t i) {
  switch (dtype) {
    case zrt::DType::i64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case zrt::DType::i32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    default:
      // zk::DType numbers the element types as plan.fbs does, like zrt::DType.
      return zk::load_f32(p, static_cast<zk::DType>(dtype), static_cast<int64_t>(i));
  }
}

/// A failure after every rank is running: print it on this rank and stop the whole job, since the other
/// ranks may already wait in a collective.
[[noreturn]] void die(int rank, const std::string &msg) {
  std::fprintf(stderr, "zrun: rank %d: error: %s\n", rank, msg.c_str());
  std::fflush(stderr);
  zrt::abort_job(1);
}

/// Writes a 1-D float64 .npy file (zrt's writer covers the plan's dtypes, which have no float64).
std::string write_f64_npy(const std::string &path, const std::vector<double> &v) {
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(v.size()) + ",), }";
  // Magic (6) + version (2) + header length (2) + header + '\n' is a multiple of 64.
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) return "cannot open '" + tmp + "' for writing: " + std::strerror(errno);
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(header.size() & 0xFF),
                                 static_cast<unsigned char>(header.size() >> 8)};
  bool ok = std::fwrite(pre, 1, 10, f) == 10 && std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(v.data(), sizeof(double), v.size(), f) == v.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return "cannot write '" + path + "'";
  }
  return {};
}

/// NVMe traffic per run or step, as the I/O layer counted it: every rank prints its file, what loading
/// wrote, and the bytes each run read and wrote ("per run read R B written W B" when all runs agree, which
/// the e2e tests compare with the plan report's figures).
struct NvmeTally {
  uint64_t load_read = 0, load_written = 0, last_read = 0, last_written = 0;
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  void start(const zrt::MemoryReport &m) {
    load_read = last_read = m.nvme_bytes_read;
    load_written = last_written = m.nvme_bytes_written;
  }
  void note(const zrt::MemoryReport &m) {
    runs.emplace_back(m.nvme_bytes_read - last_read, m.nvme_bytes_written - last_written);
    last_read = m.nvme_bytes_read;
    last_written = m.nvme_bytes_written;
  }
  void print(const zrt::RankInfo &ri, const zrt::MemoryReport &m, const char *what) const {
    if (m.nvme_file.empty()) return;
    bool equal = true;
    for (const auto &r : runs) equal = equal && r == runs.front();
    std::printf("zrun: rank %d nvme: file %s (%llu B, %s I/O); before the first %s read %llu B written %llu B; ", ri.rank,
                m.nvme_file.c_str(), static_cast<unsigned long long>(m.nvme_file_bytes), m.nvme_direct ? "direct" : "buffered",
                what, static_cast<unsigned long long>(load_read), static_cast<unsigned long long>(load_written));
    if (runs.empty()) std::printf("no %ss", what);
    else if (equal)
      std::printf("per %s read %llu B written %llu B (%zu %ss)", what, static_cast<unsigned long long>(runs.front().first),
                  static_cast<unsigned long long>(runs.front().second), runs.size(), what);
    else
      for (size_t k = 0; k < runs.size(); ++k)
        std::printf("%s %zu read %llu B written %llu B; ", what, k + 1, static_cast<unsigned long long>(runs[k].first),
                    static_cast<unsigned long long>(runs[k].second));
    std::printf("; unplanned waits %llu\n", static_cast<unsigned long long>(m.nvme_unplanned_waits));
  }
};

/// zrun --train: checks the data against the plan, runs init once and then --steps train steps.
int train(const Args &args, zrt::Session &s, Watchdog &watchdog) {
  const zrt::RankInfo ri = s.rank_info();
  // The training program and its one batch input.
  const zrt::ProgramInfo *prog = nullptr;
  bool has_init = false;
  for (const zrt::ProgramInfo &p : s.programs()) {
    if (p.name == "train_step" || (p.name == "micro_step" && !prog)) prog = &p;
    has_init = has_init || p.name == "init";
  }
  if (!prog) die(ri.rank, "the plan has no train_step or micro_step program: make it with zplan --train");
  // A plan that accumulates runs micro_step once per micro-batch, then optimizer_step. The plan records
  // how many (optimizer_step's scalar input micro_batches, zplan --micro-batches); --micro-batches may
  // repeat it, and must then say the same. A plan without the record needs the flag.
  int64_t micro = 1;
  if (prog->name == "micro_step") {
    int64_t planned = 0;
    for (const zrt::ProgramInfo& p : s.programs())
      if (p.name == "optimizer_step")
        for (const zrt::ScalarInfo& x : p.scalars)
          if (x.name == "micro_batches") planned = static_cast<int64_t>(x.default_value);
    if (planned > 0 && args.micro_batches > 0 && args.micro_batches != planned)
      die(ri.rank, "--micro-batches " + std::to_string(args.micro_batches) +
                       ": the plan was made with zplan --micro-batches " + std::to_string(planned) +
                       " (drop the flag, or pass " + std::to_string(planned) + ")");
    micro = planned > 0 ? planned : args.micro_batches;
    if (micro < 1)
      die(ri.rank,
          "this plan accumulates micro-batches (micro_step, optimizer_step) but does not record how many: "
          "pass "
          "--micro-batches M, the M it was compiled with");
  } else if (args.micro_batches > 1) {
    die(ri.rank, "--micro-batches " + std::to_string(args.micro_batches) + ": this plan has one train_step per step "
                 "(compile it with zplan --micro-batches to accumulate)");
  }
  if (prog->inputs.size() != 1) {
    std::string names;
    for (const auto &io : prog->inputs) names += (names.empty() ? "'" : ", '") + io.name + "'";
    die(ri.rank, prog->name + " has " + std::to_string(prog->inputs.size()) + " inputs (" + names +
                     "); zrun --train feeds exactly one token input");
  }
  const zrt::IOInfo &in = prog->inputs[0];
  if (in.global_shape.size() != 2 || (in.dtype != zrt::DType::i64 && in.dtype != zrt::DType::i32))
    die(ri.rank, prog->name + "'s input '" + in.name + "' is not an integer [batch, seq] tensor");
  const int64_t batch = in.global_shape[0] * micro, seq = in.global_shape[1];

  // The data, checked whole before the first step.
  zrt::NpyArray data;
  zrt::Status st = zrt::read_npy(args.data, &data);
  if (!st.ok()) die(ri.rank, "--data: " + st.message());
  if (data.dtype != zrt::DType::i64 && data.dtype != zrt::DType::i32)
    die(ri.rank, "--data '" + args.data + "' holds " + zrt::dtype_name(data.dtype) +
                     " values; token ids must be an int64 or int32 array [samples, seq]");
  if (data.shape.size() != 2 || data.shape[1] != seq) {
    std::string got = "[";
    for (int64_t d : data.shape) got += std::to_string(d) + ",";
    die(ri.rank, "--data '" + args.data + "' has shape " + got + "]; the plan trains on [samples, " +
                     std::to_string(seq) + "] (sequence length " + std::to_string(seq) + ")");
  }
  const int64_t samples = data.shape[0];
  if (samples < batch)
    die(ri.rank, "--data '" + args.data + "' holds " + std::to_string(samples) + " samples, fewer than the plan's global batch of " +
                     std::to_string(batch));
  std::vector<int64_t> ids(static_cast<size_t>(samples * seq));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = zk::load_i64(data.data.data(), static_cast<zk::DType>(data.dtype), static_cast<int64_t>(i));
  int64_t lo = 0, hi = 0;
  if (s.input_id_range(in.name, &lo, &hi))
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < lo || ids[i] >= hi)
        die(ri.rank, "--data '" + args.data + "': sample " + std::to_string(i / seq) + ", position " + std::to_string(i % seq) +
                         " is token id " + std::to_string(ids[i]) + ", outside the vocabulary [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + ")");
  if (has_init) {
    st = s.run("init");
    if (!st.ok()) die(ri.rank, st.message());
    watchdog.kick();
  }
  // A checkpoint replaces what init wrote; it fails on every rank alike (open-style agreement), before any
  // step, naming the file.
  zrt::TrainingState pos;
  double lr = args.lr;
  if (!args.resume.empty()) {
    zrt::CheckpointInfo info;
    const auto t0 = std::chrono::steady_clock::now();
    st = s.load_checkpoint(args.resume, &pos, &info);
    if (!st.ok()) {
      if (ri.rank == 0) std::fprintf(stderr, "zrun: error: --resume: %s\n", st.message().c_str());
      return 1;
    }
    watchdog.kick();
    if (ri.rank == 0)
      std::printf("zrun: resumed from %s: step %lld, %lld samples seen; saved at tp %d dp %d zero %d (%s), %d tensors, "
                  "%llu bytes read by rank 0 in %.3f s\n",
                  info.dir.c_str(), static_cast<long long>(pos.step), static_cast<long long>(pos.samples), info.tp, info.dp,
                  info.zero_stage, info.same_plan ? "this plan" : "resharded", info.tensors_loaded,
                  static_cast<unsigned long long>(info.bytes_read),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    // The learning rate set over the schedule when the checkpoint was saved stays, unless --lr says otherwise.
    if (lr < 0 && pos.lr >= 0) lr = pos.lr;
  }
  if (lr >= 0) {
    st = s.set_scalar("lr", lr);
    if (!st.ok()) die(ri.rank, st.message());
  }
  // fp16 dynamic loss scaling keeps its scale and its count of skipped steps in the plan's state
  // (zplan --dtype fp16); they are printed after each step.
  auto scalar_state = [&](const char *name) -> std::function<double()> {
    for (const zrt::StateInfo &x : s.state())
      if (x.name == name && x.dtype == zrt::DType::f32 && x.local_bytes() == 4)
        return [&s, name, rank = ri.rank] {
          float v = 0;
          const zrt::Status rs = s.read_state(name, &v, sizeof v);
          if (!rs.ok()) die(rank, rs.message());
          return static_cast<double>(v);
        };
    return {};
  };
  const std::function<double()> loss_scale = scalar_state("loss_scale"), skipped = scalar_state("skipped_steps");
  const size_t elem = zrt::dtype_size(in.dtype);
  std::vector<uint8_t> buf(static_cast<size_t>(batch * seq) * elem);
  std::vector<double> losses, norms, step_s;
  double total_s = 0;
  if (pos.step >= args.steps && ri.rank == 0)
    std::printf("zrun: the checkpoint is at step %lld, --steps %lld: nothing to train\n", static_cast<long long>(pos.step),
                static_cast<long long>(args.steps));
  const int64_t first = pos.step;
  NvmeTally nvme;
  nvme.start(s.memory_report());
  for (int64_t k = first; k < args.steps; ++k) {
    // Global batch k: the next `batch` samples from the data position, wrapping around the data.
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t sample = (pos.samples + b) % samples;
      for (int64_t t = 0; t < seq; ++t)
        zk::store_i64(buf.data(), static_cast<zk::DType>(in.dtype), b * seq + t, ids[static_cast<size_t>(sample * seq + t)]);
    }
    zrt::StepResult r;
    const auto t0 = std::chrono::steady_clock::now();
    st = s.train_step(in.name, buf.data(), buf.size(), k + 1, &r);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) die(ri.rank, "step " + std::to_string(k + 1) + ": " + st.message());
    watchdog.kick();
    nvme.note(s.memory_report());
    total_s += sec;
    step_s.push_back(sec);
    losses.push_back(r.loss);
    norms.push_back(r.grad_norm);
    std::string scaling;
    if (loss_scale && skipped) {
      char text[96];
      std::snprintf(text, sizeof text, " loss_scale %.17g skipped_steps %.0f", loss_scale(), skipped());
      scaling = text;
    }
    if (ri.rank == 0)
      std::printf("zrun: step %lld loss %.6f grad_norm %.6f%s (%.3f ms, %.0f tokens/s)\n", static_cast<long long>(k + 1),
                  r.loss, r.grad_norm, scaling.c_str(), sec * 1e3, static_cast<double>(batch * seq) / sec);
    pos.step = k + 1;
    pos.samples += batch;
    pos.lr = lr;
    if (args.save_every > 0 && pos.step % args.save_every == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      st = s.save_checkpoint(args.save_dir, pos);
      if (!st.ok()) die(ri.rank, "saving the checkpoint of step " + std::to_string(pos.step) + ": " + st.message());
      watchdog.kick();
      if (ri.rank == 0)
        std::printf("zrun: saved checkpoint of step %lld under %s (%.3f s)\n", static_cast<long long>(pos.step),
                    args.save_dir.c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::fflush(stdout);
  }
  if (ri.rank == 0) {
    const int64_t ran = std::max<int64_t>(0, args.steps - first);
    std::printf("zrun: trained %lld steps of %lld x %lld tokens: %.0f tokens/s\n", static_cast<long long>(ran),
                static_cast<long long>(batch), static_cast<long long>(seq),
                ran ? static_cast<double>(batch * seq * ran) / total_s : 0.0);
    // The first step pays for first-touch work (cuBLAS heuristics, NCCL connections, graph capture); the
    // median of the later steps is the steady rate.
    if (step_s.size() > 1) {
      std::vector<double> later(step_s.begin() + 1, step_s.end());
      std::sort(later.begin(), later.end());
      const double med = later[later.size() / 2];
      std::printf("zrun: steady step (median of steps 2-%lld): %.3f ms, %.0f tokens/s\n",
                  static_cast<long long>(step_s.size()), med * 1e3, static_cast<double>(batch * seq) / med);
    }
    for (const auto &[path, v] : {std::make_pair(args.losses_out, &losses), std::make_pair(args.grad_norms_out, &norms)}) {
      if (path.empty()) continue;
      const std::string e = write_f64_npy(path, *v);
      if (!e.empty()) die(ri.rank, e);
    }
    std::fflush(stdout);
  }
  // Every rank's planned and measured process peak, as the forward path prints it.
  const zrt::MemoryReport m = s.memory_report();
  std::printf("zrun: rank %d/%d (tp %d/%d, dp %d/%d): training runtime scratch %llu B; planned process peak %llu B; "
              "measured process peak %llu B\n",
              ri.rank, ri.world, ri.tp_index(), ri.tp, ri.dp_index(), ri.dp,
              static_cast<unsigned long long>(m.runtime_scratch_bytes),
              static_cast<unsigned long long>(m.planned_peak_bytes),
              static_cast<unsigned long long>(m.measured_process_peak_bytes));
  nvme.print(ri, m, "step");
  std::fflush(stdout);
  return 0;
}

/// Reads an integer .npy file as int64 values; the shape goes to `shape`.
std::vector<int64_t> read_ids(int rank, const std::string &path, const char *flag, std::vector<int64_t> *shape) {
  zrt::NpyArray a;
  zrt::Status st = zrt::read_npy(path, &a);
  if (!st.ok()) die(rank, std::string(flag) + " '" + path + "': " + st.message());
  if (a.dtype != zrt::DType::i64 && a.dtype != zrt::DType::i32)
    die(rank, std::string(flag) + " '" + path + "' must hold integers (int64 or int32)");
  std::vector<int64_t> v(static_cast<size_t>(a.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = zk::load_i64(a.data.data(), static_cast<zk::DType>(a.dtype), static_cast<int64_t>(i));
  *shape = a.shape;
  return v;
}

/// zrun --generate: checks the prompt and the token budget against the plan, then one prefill and a decode
/// step per new token (zrt::Session::prefill / decode_step), all greedy.
int generate(const Args &args, zrt::Session &s, Watchdog &watchdog) {
  const zrt::RankInfo ri = s.rank_info();
  int64_t planned_b = 0, L = 0;
  zrt::Status st = s.generation_shape(&planned_b, &L);
  if (!st.ok()) die(ri.rank, st.message());
  std::vector<int64_t> shape;
  const std::vector<int64_t> prompt = read_ids(ri.rank, args.prompt, "--prompt", &shape);
  if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1)
    die(ri.rank, "--prompt '" + args.prompt + "' must be a non-empty [B, P] array of ids");
  const int64_t B = shape[0], P = shape[1];
  if (B > planned_b)
    die(ri.rank, "--prompt holds " + std::to_string(B) + " prompts; the plan was made for at most " +
                     std::to_string(planned_b) + " (zplan --batch)");
  std::vector<int64_t> lengths(static_cast<size_t>(B), P);
  if (!args.prompt_lengths.empty()) {
    std::vector<int64_t> ls;
    lengths = read_ids(ri.rank, args.prompt_lengths, "--prompt-lengths", &ls);
    if (ls != std::vector<int64_t>{B}) die(ri.rank, "--prompt-lengths must be [" + std::to_string(B) + "]");
    for (int64_t b = 0; b < B; ++b)
      if (lengths[b] < 1 || lengths[b] > P)
        die(ri.rank, "--prompt-lengths: prompt " + std::to_string(b) + " has length " + std::to_string(lengths[b]) +
                         ", outside [1, " + std::to_string(P) + "]");
  }
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  if (longest > L)
    die(ri.rank, "a prompt of " + std::to_string(longest) + " tokens is longer than the planned cache of " +
                     std::to_string(L) + " positions (zplan --max-seq)");
  // The last new token is never fed back, so the cache holds prompt + new - 1 positions.
  const int64_t N = args.max_new_tokens;
  if (N > 0 && longest + N - 1 > L)
    die(ri.rank, "--max-new-tokens " + std::to_string(N) + " after a prompt of " + std::to_string(longest) +
                     " tokens needs " + std::to_string(longest + N - 1) + " cache positions; the plan has " +
                     std::to_string(L) + " (zplan --max-seq): at most " + std::to_string(L - longest + 1));
  int64_t lo = 0, hi = 0;
  if (s.input_id_range("input_ids", &lo, &hi))
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < lengths[b]; ++t)
        if (prompt[b * P + t] < lo || prompt[b * P + t] >= hi)
          die(ri.rank, "--prompt id [" + std::to_string(b) + ", " + std::to_string(t) + "] is " +
                           std::to_string(prompt[b * P + t]) + ", outside the vocabulary [" + std::to_string(lo) +
                           ", " + std::to_string(hi) + ")");
  for (int64_t id : args.stop)
    if (id < lo || id >= hi) die(ri.rank, "--stop " + std::to_string(id) + " is outside the vocabulary");
  // The sampler's settings: run inputs of a plan whose programs sample (docs/sampling.md).
  bool samples = false;
  for (const zrt::ProgramInfo &p : s.programs())
    for (const zrt::ScalarInfo &x : p.scalars) samples = samples || x.name == "temperature";
  if (samples) {
    for (const auto &[name, value] : {std::pair<const char *, double>{"temperature", args.temperature},
                                      {"top_k", static_cast<double>(args.top_k)},
                                      {"top_p", args.top_p},
                                      {"seed", static_cast<double>(args.seed)}}) {
      st = s.set_scalar(name, value);
      if (!st.ok()) die(ri.rank, st.message());
    }
  } else if (args.temperature != 0 || args.top_k != 0 || args.top_p != 1) {
    die(ri.rank, "this plan decodes greedily only (no sampler): drop --temperature, --top-k and --top-p");
  }

  // Each row: its prompt, then its new tokens; a sequence that stopped is padded with its stop token.
  std::vector<std::vector<int64_t>> seqs(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) seqs[b].assign(prompt.begin() + b * P, prompt.begin() + b * P + lengths[b]);
  std::vector<int64_t> next(static_cast<size_t>(B)), pos(lengths);
  std::vector<bool> done(static_cast<size_t>(B), false);
  auto take = [&](int64_t b, int64_t tok) {
    if (done[b]) {
      seqs[b].push_back(seqs[b].back());
      return;
    }
    seqs[b].push_back(tok);
    done[b] = std::find(args.stop.begin(), args.stop.end(), tok) != args.stop.end();
  };
  using Clock = std::chrono::steady_clock;
  double ttft = 0, decode_s = 0;
  int64_t steps = 0;
  for (int w = 0; N > 0 && w < args.warmup; ++w) {
    // --warmup N: N untimed prefills of the same prompt, each followed by two decode steps (kernels loaded,
    // GEMM algorithms chosen, the decode program's CUDA graph captured), as benchmarks warm their peers. The
    // timed prefill below rewrites the cache from position 0.
    watchdog.kick();
    st = s.prefill(prompt.data(), B, P, lengths.data(), next.data());
    std::vector<int64_t> wpos(lengths);
    for (int k = 0; k < 2 && st.ok() && longest + k < L; ++k) {
      st = s.decode_step(next.data(), wpos.data(), B, next.data());
      for (int64_t &p : wpos) ++p;
    }
    if (!st.ok()) die(ri.rank, "--warmup: " + st.message());
  }
  if (N > 0) {
    watchdog.kick();
    const auto t0 = Clock::now();
    st = s.prefill(prompt.data(), B, P, lengths.data(), next.data());
    if (!st.ok()) die(ri.rank, st.message());
    ttft = std::chrono::duration<double>(Clock::now() - t0).count();
    for (int64_t b = 0; b < B; ++b) take(b, next[b]);
    const auto t1 = Clock::now();
    for (int64_t k = 1; k < N && !std::all_of(done.begin(), done.end(), [](bool d) { return d; }); ++k) {
      watchdog.kick();
      std::vector<int64_t> tok(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) tok[b] = seqs[b].back();
      st = s.decode_step(tok.data(), pos.data(), B, next.data());
      if (!st.ok()) die(ri.rank, st.message());
      for (int64_t b = 0; b < B; ++b) {
        take(b, next[b]);
        ++pos[b];
      }
      ++steps;
    }
    decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  }
  watchdog.kick();
  const int64_t width = P + (N > 0 ? steps + 1 : 0);
  if (ri.rank == 0) {
    int64_t prompt_tokens = 0;
    for (int64_t l : lengths) prompt_tokens += l;
    std::printf("zrun: generated %lld new tokens for %lld sequences (prompt %lld, cache %lld)\n",
                static_cast<long long>(N > 0 ? steps + 1 : 0), static_cast<long long>(B), static_cast<long long>(P),
                static_cast<long long>(L));
    std::printf("zrun: time to first token %.3f ms, prefill %.1f tokens/s, decode %.1f tokens/s\n", ttft * 1e3,
                ttft > 0 ? static_cast<double>(prompt_tokens) / ttft : 0.0,
                decode_s > 0 ? static_cast<double>(B * steps) / decode_s : 0.0);
    if (!args.tokens_out.empty()) {
      std::vector<int64_t> out(static_cast<size_t>(B * width), 0);
      for (int64_t b = 0; b < B; ++b) {
        // Rows shorter than the widest (shorter prompts) end with their last token repeated.
        for (int64_t t = 0; t < width; ++t)
          out[b * width + t] = t < static_cast<int64_t>(seqs[b].size()) ? seqs[b][t] : seqs[b].back();
      }
      st = zrt::write_npy(args.tokens_out, zrt::DType::i64, {B, width}, out.data());
      if (!st.ok()) die(ri.rank, "--tokens-out: " + st.message());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  Args args;
  if (const int rc = parse_args(argc, argv, &args); rc >= 0) return rc;
  Watchdog watchdog(args.timeout);
  // The CUDA backend captures the step as a CUDA graph after the first run and replays it (plans without
  // collectives); it reads the switch from the environment so that apps of the library get it too.
  // Generation replays its decode program once per token with the same shapes and addresses: graphs are on
  // (the prefill, run once, is never captured).
  // ZRT_CUDA_GRAPH=0 in the environment still turns them off (for ZRT_CUDA_PROFILE, which needs them off).
  if (args.cuda_graph) setenv("ZRT_CUDA_GRAPH", "1", 1);
  else if (args.generate) setenv("ZRT_CUDA_GRAPH", "1", 0);
  // The communicators read the order check's switch when they are made, as apps of the library do.
  if (args.check_collectives) setenv("ZRT_CHECK_COLLECTIVES", "1", 1);
  // The attention kernels' selectors serve the kernel library's direct callers (GPU tests, benchmarks); a plan
  // names its kernels (zplan --cuda-arch, --attention-kernel), so a run under them is not what they suggest.
  for (const char *var : {"ZK_CUDA_ATTENTION", "ZK_CUDA_ATTENTION_GRAD", "ZK_CUDA_ATTENTION_PLAIN"})
    if (const char *v = std::getenv(var); v && *v && launcher_rank() == 0)
      std::fprintf(stderr,
                   "zrun: note: %s=%s is set but changes nothing here: plans name their attention kernels "
                   "(zplan --attention-kernel NAME for A/B runs)\n",
                   var, v);

  zrt::Options opts;
  opts.init = args.init_random ? zrt::InitMode::random : zrt::InitMode::file;
  opts.seed = args.seed;
  opts.backend = args.backend;
  opts.nvme_path = args.nvme_path;
  opts.nvme_threads = args.nvme_threads;
  std::unique_ptr<zrt::Session> s;
  zrt::Status st = zrt::Session::open(args.plan, opts, &s);
  if (!st.ok()) {
    // open() made every rank agree on the same message: rank 0 alone prints it.
    if (launcher_rank() == 0) std::fprintf(stderr, "zrun: error: %s\n", st.message().c_str());
    zrt::shutdown();
    return 1;
  }
  const zrt::RankInfo ri = s->rank_info();
  if (args.generate) {
    const int rc = generate(args, *s, watchdog);
    s.reset();
    zrt::shutdown();
    return rc;
  }
  if (args.train) {
    const int rc = train(args, *s, watchdog);
    s.reset();
    zrt::shutdown();
    return rc;
  }

  // Inputs: random values first (when asked), then files, which override them; every rank reads the
  // global file and keeps its rows. Names are checked both ways.
  if (args.random_inputs) {
    st = s->bind_random_inputs(args.seed);
    if (!st.ok()) die(ri.rank, st.message());
  }
  for (const auto &in : args.inputs) {
    const zrt::IOInfo *info = nullptr;
    for (const auto &io : s->inputs())
      if (io.name == in.first) info = &io;
    if (!info) die(ri.rank, "the plan has no input named '" + in.first + "'");
    zrt::NpyArray a;
    st = zrt::read_npy(in.second, &a, info->dtype == zrt::DType::bf16);
    if (!st.ok()) die(ri.rank, st.message());
    if (a.dtype != info->dtype || a.shape != info->global_shape) {
      std::string want = "[", got = "[";
      for (int64_t d : info->global_shape) want += std::to_string(d) + ",";
      for (int64_t d : a.shape) got += std::to_string(d) + ",";
      die(ri.rank, "input '" + in.first + "' from '" + in.second + "' is " + zrt::dtype_name(a.dtype) + " " + got +
                       "], the plan expects " + zrt::dtype_name(info->dtype) + " " + want + "]");
    }
    st = s->bind_input(in.first, a.data.data(), a.data.size());
    if (!st.ok()) die(ri.rank, st.message());
  }
  if (!args.random_inputs) {
    for (const auto &io : s->inputs()) {
      bool given = false;
      for (const auto &in : args.inputs) given = given || in.first == io.name;
      if (!given) die(ri.rank, "input '" + io.name + "' is not bound: pass --input " + io.name + "=FILE.npy or --random-inputs");
    }
  }
  for (const auto &out : args.outputs) {
    bool known = false;
    for (const auto &io : s->outputs()) known = known || io.name == out.first;
    if (!known) die(ri.rank, "the plan has no output named '" + out.first + "'");
  }

  // --warmup runs are not timed (first-run allocation, CUDA graph capture); then --repeat timed runs,
  // reported as mean, min and median (the median is what benchmarks compare).
  NvmeTally nvme;
  nvme.start(s->memory_report());
  for (int r = 0; r < args.warmup; ++r) {
    st = s->run();
    if (!st.ok()) die(ri.rank, st.message());
    nvme.note(s->memory_report());
    watchdog.kick();
  }
  std::vector<double> times;
  for (int r = 0; r < args.repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    st = s->run();
    const auto t1 = std::chrono::steady_clock::now();
    if (!st.ok()) die(ri.rank, st.message());
    nvme.note(s->memory_report());
    watchdog.kick();
    times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  double total_ms = 0;
  for (double t : times) total_ms += t;
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double best_ms = sorted.front();
  const size_t n = sorted.size();
  const double median_ms = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);

  // Every output named by --output or --expect is gathered to rank 0 once; rank 0 writes and compares.
  bool expect_failed = false;
  std::vector<std::string> names;
  for (const auto &out : args.outputs) names.push_back(out.first);
  for (const auto &ex : args.expects)
    if (std::find(names.begin(), names.end(), ex.first) == names.end()) names.push_back(ex.first);
  for (const std::string &name : names) {
    const zrt::IOInfo *info = nullptr;
    for (const auto &io : s->outputs())
      if (io.name == name) info = &io;
    if (!info) die(ri.rank, "the plan has no output named '" + name + "'");
    std::vector<uint8_t> buf(ri.rank == 0 ? info->global_bytes() : 0);
    st = s->read_output(name, buf.data(), buf.size());
    if (!st.ok()) die(ri.rank, st.message());
    if (ri.rank != 0) continue;
    for (const auto &out : args.outputs) {
      if (out.first != name) continue;
      st = zrt::write_npy(out.second, info->dtype, info->global_shape, buf.data());
      if (!st.ok()) die(ri.rank, st.message());
    }
    for (const auto &ex : args.expects) {
      if (ex.first != name) continue;
      zrt::NpyArray ref;
      st = zrt::read_npy(ex.second, &ref);
      if (!st.ok()) die(ri.rank, st.message());
      if (ref.shape != info->global_shape) die(ri.rank, "--expect " + name + ": '" + ex.second + "' has another shape than the output");
      double max_err = 0;
      const size_t n = static_cast<size_t>(ref.numel());
      for (size_t i = 0; i < n; ++i) {
        const double d = std::fabs(element_as_double(info->dtype, buf.data(), i) - element_as_double(ref.dtype, ref.data.data(), i));
        if (!(d <= max_err)) max_err = d;  // NaN propagates as a failure
      }
      const bool ok = max_err <= args.tolerance;
      expect_failed = expect_failed || !ok;
      std::printf("zrun: output '%s' vs %s: max abs difference %.3g (tolerance %g): %s\n", name.c_str(), ex.second.c_str(),
                  max_err, args.tolerance, ok ? "ok" : "FAILED");
    }
  }

  const zrt::MemoryReport m = s->memory_report();
  std::printf(
      "zrun: rank %d/%d (tp %d/%d, dp %d/%d): planned arena device %llu B host %llu B; measured device %llu B host "
      "%llu B (instructions %llu B / %llu B); runtime scratch %llu B; run %.3f ms (mean of %d, min %.3f ms, median %.3f ms); "
      "planned process peak %llu B; measured process peak %llu B\n",
      ri.rank, ri.world, ri.tp_index(), ri.tp, ri.dp_index(), ri.dp,
      static_cast<unsigned long long>(m.planned_arena_bytes[0]), static_cast<unsigned long long>(m.planned_arena_bytes[1]),
      static_cast<unsigned long long>(m.measured_arena_bytes[0]), static_cast<unsigned long long>(m.measured_arena_bytes[1]),
      static_cast<unsigned long long>(m.measured_instr_bytes[0]), static_cast<unsigned long long>(m.measured_instr_bytes[1]),
      static_cast<unsigned long long>(m.runtime_scratch_bytes), total_ms / args.repeat, args.repeat, best_ms,
      median_ms, static_cast<unsigned long long>(m.planned_peak_bytes),
      static_cast<unsigned long long>(m.measured_process_peak_bytes));
  nvme.print(ri, m, "run");
  std::fflush(stdout);
  s.reset();
  zrt::shutdown();
  return expect_failed ? 3 : 0;
}
