// zrt/zrt.h - the zplan runtime's C++ API: load a plan, bind inputs, run, read outputs, query memory.
//
//   std::unique_ptr<zrt::Session> s;
//   zrt::Status st = zrt::Session::open("model.zplan", {}, &s);     // collective over the MPI job
//   st = s->bind_input("input_ids", ids.data(), ids.size() * 8);     // the global batch
//   st = s->run();
//   st = s->read_output("logits", out.data(), out.size() * 4);      // the global output, on rank 0
//   zrt::shutdown();                                                 // MPI_Finalize if zrt started MPI
//
// A plan holds one or more named programs (format 2): run() runs "main" (or the only program), run(name)
// any other, e.g. "init" once and then "train_step" per step. Inputs and scalar inputs are set by name for
// every program that has them; an output name refers to the last program run that has it. Persistent state
// (parameters, master weights, moments, gradient buffers) is read and written by name, this rank's part.
//
// Every rank of the job makes the same calls in the same order: open(), run() and read_output() are
// collective. Errors come back as Status; open() makes all ranks agree, so a problem on one rank (a
// corrupt plan, a missing weights file, a world size the plan was not made for) fails open() on every
// rank with the same message and nobody hangs.
#ifndef ZRT_ZRT_H
#define ZRT_ZRT_H

#include <memory>
#include <string>
#include <vector>

#include "zrt/status.h"
#include "zrt/types.h"

namespace zrt {

enum class InitMode {
  file,    // weights come from the plan's sources (external data files, inline initializers)
  random,  // file-backed weights get deterministic random values (graph-only benchmark models)
};

/// What one training step reports (the plan's outputs "loss" and "grad_norm"; NaN when it has none).
struct StepResult {
  double loss = 0.0;
  double grad_norm = 0.0;
};

/// Where a training run stands: a checkpoint records it and resuming restores it.
struct TrainingState {
  int64_t step = 0;     // optimizer steps completed
  int64_t samples = 0;  // the data position: global samples consumed
  double lr = -1;       // a learning rate set over the plan's schedule (< 0: the schedule's own)
};

/// What load_checkpoint found.
struct CheckpointInfo {
  std::string dir;       // the checkpoint folder read (the one `latest` names, or the one given)
  std::string producer;  // the saving plan's producer (its zplan command line)
  int world = 0, tp = 0, dp = 0, zero_stage = 0;
  bool same_plan = false;    // saved by this very plan file; otherwise the slices were resharded
  int tensors_loaded = 0;    // state tensors of this plan filled from the checkpoint
  uint64_t bytes_read = 0;   // bytes this rank read from the rank files (whole verified blocks)
};

struct Options {
  InitMode init = InitMode::file;
  uint64_t seed = 0;
  BackendKind backend = BackendKind::cpu;
  /// The folder of the NVMe files (plan 2.3); empty: the folder the plan names (zplan --nvme-path).
  std::string nvme_path;
  /// Threads that run the NVMe reads and writes.
  int nvme_threads = 4;
};

class Session {
 public:
  /// Loads, verifies and prepares a plan; allocates its arenas and loads this rank's weights. Collective.
  static Status open(const std::string &plan_path, const Options &options, std::unique_ptr<Session> *out);
  /// The same for a plan file image held in memory; relative weight paths resolve against base_dir.
  static Status open_buffer(const void *data, size_t bytes, const std::string &base_dir, const Options &options,
                            std::unique_ptr<Session> *out);
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  const RankInfo &rank_info() const;
  /// The inputs and outputs of the default program ("main", or the first).
  const std::vector<IOInfo> &inputs() const;
  const std::vector<IOInfo> &outputs() const;
  /// Every program of the plan, in plan order.
  const std::vector<ProgramInfo> &programs() const;
  /// The plan's state table (every persistent tensor but constants), with this rank's slices.
  const std::vector<StateInfo> &state() const;
  /// The plan's producer string ("zplan 0.1 (...)").
  std::string producer() const;

  /// Binds a graph input from the global tensor (`bytes` == IOInfo::global_bytes()); this rank keeps the
  /// rows of its dp group when the input is batch-split. Every program with an input of that name takes it.
  Status bind_input(const std::string &name, const void *data, size_t bytes);
  /// Binds every input to deterministic random values (floats uniform in [-1, 1); integer ids in
  /// [0, rows of the table they index), found from the embedding or gather that reads them).
  Status bind_random_inputs(uint64_t seed);
  /// Sets a scalar run input (e.g. "lr", "step") of every program that has it; unset scalars take the
  /// plan's default. Takes effect at the next run.
  Status set_scalar(const std::string &name, double value);
  /// Runs the default program once. Collective.
  Status run();
  /// Runs the named program once. Collective.
  Status run(const std::string &program);
  /// Reads / writes this rank's part of a persistent tensor (StateInfo::local_bytes() bytes, the dtype and
  /// flat range state() gives). Not collective.
  Status read_state(const std::string &name, void *data, size_t bytes);
  Status write_state(const std::string &name, const void *data, size_t bytes);

  /// One training step of a plan made by `zplan --train`: binds the global batch `data` to the training
  /// input `input`, sets the scalar "step" (1-based) and runs "train_step". A plan with "micro_step" and
  /// "optimizer_step" instead gets the batch split into consecutive micro-batches of micro_step's input
  /// size, one micro_step each, then optimizer_step. Reads "loss" and "grad_norm" (replicated on every
  /// rank). Set "lr" with set_scalar() to override the plan's schedule. Collective.
  Status train_step(const std::string &input, const void *data, size_t bytes, int64_t step, StepResult *out);
  /// Generation (docs/generation.md), with a plan made by `zplan --generate --max-seq L --batch B`: the
  /// planned global batch B and cache length L. Fails for a plan without @prefill and @decode.
  Status generation_shape(int64_t *batch, int64_t *max_seq) const;
  /// The next tokens are drawn by the plan's sampler from the scalars "temperature" (default 0: greedy),
  /// "top_k", "top_p" and "seed" (set_scalar); prefill draws at step 0 and decode step k at step k.
  /// Runs @prefill on `batch` <= B prompts: `prompt` is [batch, prompt_len] row-major, sequence b's prompt
  /// its first lengths[b] tokens (1 <= lengths[b] <= prompt_len <= L; the rest is ignored). Writes each
  /// prompt's keys and values into the KV cache from position 0 and the greedy next token of every
  /// sequence into next[batch] (on every rank). Rows past `batch` up to B are planned work filled with copies
  /// of row 0. Every id is checked against the embedding table first. Collective.
  Status prefill(const int64_t *prompt, int64_t batch, int64_t prompt_len, const int64_t *lengths, int64_t *next);
  /// Runs @decode once: token[b] sits at position positions[b] (the number of tokens sequence b has in the
  /// cache, 0 <= positions[b] < L); its keys and values are written there and next[batch] gets the greedy
  /// next token of every sequence (on every rank). Collective.
  Status decode_step(const int64_t *tokens, const int64_t *positions, int64_t batch, int64_t *next);
  /// For an integer input that indexes a table (embedding, gather): ids must lie in [lo, hi). Returns false
  /// when no program reads the input as ids.
  bool input_id_range(const std::string &name, int64_t *lo, int64_t *hi) const;
  /// Assembles the global output on `root` (other ranks may pass data == nullptr). Collective.
  Status read_output(const std::string &name, void *data, size_t bytes, int root = 0);
  /// This rank's own output tensor (its rows), `bytes` == local elements * dtype size.
  Status read_local_output(const std::string &name, void *data, size_t bytes, std::vector<int64_t> *local_shape);

  /// Writes a sharded checkpoint under the folder `dir` (docs/checkpoint-format.md): every rank its
  /// slices of the parameters, master weights, moments and other state (not gradient buffers), rank 0 a
  /// manifest placing each slice in its full tensor, with CRC-32C checksums and `state`. Files are written
  /// under temporary names, fsynced and renamed; `dir/latest` switches to the new checkpoint last, so a
  /// crash mid-save leaves the previous checkpoint the loadable one. Collective.
  Status save_checkpoint(const std::string &dir, const TrainingState &state);
  /// Fills this plan's state from a checkpoint (`path`: a folder holding `latest`, or one checkpoint
  /// folder), whatever (tp, dp, zero, offload) saved it: each rank reads only the blocks holding its slices,
  /// by full-tensor coordinates, verifying their checksums. Gradient buffers are left as they are. A missing,
  /// corrupt, truncated or foreign checkpoint fails on every rank with a message naming the file. Collective.
  Status load_checkpoint(const std::string &path, TrainingState *state, CheckpointInfo *info = nullptr);

  MemoryReport memory_report() const;

  struct Impl;

 private:
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Ends MPI if zrt started it. Call once, after every Session is gone.
void shutdown();
/// Stops every rank of the job at once (MPI_Abort) with `code`; for a rank that cannot continue while the
/// others may wait in a collective.
[[noreturn]] void abort_job(int code);

}  // namespace zrt

#endif  // ZRT_ZRT_H
