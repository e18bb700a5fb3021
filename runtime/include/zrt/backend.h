// zrt/backend.h - the interface a compute backend implements (cpu here; cuda in runtime/src/cuda/).
//
// The executor decodes the plan once, at load time, into Steps whose tensor references already point into
// the arenas the backend allocated; the hot path then calls execute() per compute step and never
// allocates. Collectives and ZeRO gathers do not reach the backend: the executor hands them to the
// Communicator, asking the backend only for block copies (copy_blocks) to permute gathered data.
//
// Adding a backend:
//   1. implement this class (allocate() returns memory the backend's kernels can address; write/read move
//      bytes between host memory and an arena; execute() runs one compute step on the step's stream);
//   2. return it from make_backend() in runtime/src/backend.cpp for its BackendKind;
//   3. pair it with a Communicator that understands its pointers (cuda: NCCL on device pointers, with the
//      stream from stream()).
#ifndef ZRT_BACKEND_H
#define ZRT_BACKEND_H

#include <memory>
#include <vector>

#include "zrt/ops.h"
#include "zrt/status.h"
#include "zrt/types.h"

namespace zrt {

constexpr int kMaxRank = 8;

/// A tensor as a step sees it: a pointer into an arena plus the plan's local shape.
struct TensorRef {
  void *data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  uint64_t bytes = 0;  // reserved bytes (>= elements * dtype size)
  MemSpace space = MemSpace::device;
  int index = -1;      // the plan's tensor index, for messages
  uint64_t file_offset = 0;  // space nvme: the byte offset in the rank's NVMe file (data is then nullptr)
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
};

/// One decoded instruction, as the shared step decoder (runtime/src/step_decoder.h) makes it from the plan
/// for every backend. `op` and `info` come from the op registry (zrt/ops.def), which documents the operand
/// and attribute layout of each opcode; `category` routes it. An optional operand that is absent has data
/// nullptr. Backends map categories and opcodes onto kernels and never read the plan themselves.
struct Step {
  Op op = Op::copy;
  const OpInfo *info = nullptr;
  OpCategory category = OpCategory::unary;
  Axis axis = Axis::none;
  uint8_t stream = 0;      // zrt::fb::Stream: 0 compute, 1 comm, 2 copy
  std::vector<int> waits;  // the plan's events this instruction waits on before it starts
  int signal = -1;         // the plan's event recorded when it completes, or -1
  int index = 0;           // instruction index in its program
  /// Plan 2.18: the kernel may load the op's early operands (zrt/ops.h, early_operands) before it waits for
  /// the previous kernel on its stream; the compiler decided it and the verifier checked that no step writes
  /// them. False for older plans.
  bool early = false;
  std::string name;
  std::vector<TensorRef> inputs;
  std::vector<TensorRef> outputs;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char *name() const = 0;
  virtual BackendKind kind() const = 0;

  /// Allocates `bytes` of memory in `space` (one arena, or runtime scratch). Called only at load time.
  virtual Status allocate(MemSpace space, size_t bytes, void **out) = 0;
  /// Frees what allocate() returned.
  virtual void deallocate(MemSpace space, void *p) = 0;
  /// Copies host memory into an arena / an arena into host memory (loading, binding, reading back).
  virtual Status write(MemSpace space, void *dst, const void *src, size_t bytes) = 0;
  virtual Status read(MemSpace space, void *dst, const void *src, size_t bytes) = 0;
  virtual Status zero(MemSpace space, void *dst, size_t bytes) = 0;
  /// `count` blocks of `block` bytes: block i goes from src + i * src_stride to dst + i * dst_stride.
  /// Used to permute the data of all_gather / reduce_scatter along a dimension other than the first.
  virtual Status copy_blocks(void *dst, size_t dst_stride, const void *src, size_t src_stride, size_t block,
                             size_t count) = 0;

  /// Called once with every compute step before anything runs: check support, size workspaces. Returns
  /// the bytes of scratch the backend allocated for itself (reported in MemoryReport).
  virtual Status prepare(const RankInfo &rank, const std::vector<Step> &steps, size_t *scratch_bytes) = 0;
  /// The largest event count of the plan's programs (event ids are per program), before the first run.
  virtual Status set_num_events(int num_events) { (void)num_events; return {}; }
  /// Called at the start of every run of program `program` (its index in the plan). A backend that replays
  /// a captured run (collectives included) sets *replayed, and the executor then issues no step of this
  /// run: synchronize() launches the replay. A capture belongs to one program.
  virtual Status begin_run(int program, bool *replayed) {
    (void)program;
    *replayed = false;
    return {};
  }
  /// Around every instruction, compute step or collective: enter() makes the step's stream wait for the
  /// plan's waits and makes that stream the one copy_blocks() uses; leave() records the step's signal.
  /// Backends that run everything in order (cpu) need neither.
  virtual Status enter(const Step &step) { (void)step; return {}; }
  virtual Status leave(const Step &step) { (void)step; return {}; }
  /// Blocks the calling thread until the plan's event `event` (recorded by leave()) has completed: the
  /// executor calls it before it hands a host buffer that device work fills or reads to the NVMe store
  /// (plan 2.3). Backends that run everything in order (cpu) return at once.
  virtual Status host_wait(int event) { (void)event; return {}; }
  /// Called at load when a plan has NVMe instructions: the executor runs them itself, outside the backend's
  /// streams, so a backend that captures and replays whole runs (cuda graphs) must not.
  virtual void disallow_capture() {}
  /// Runs one compute step (elementwise .. attention, reshape, fill, prefetch/evict).
  virtual Status execute(const Step &step) = 0;
  /// Waits for every step queued so far.
  virtual Status synchronize() = 0;
  /// The native stream a communicator should use (cudaStream_t on cuda), nullptr on cpu.
  virtual void *native_stream(uint8_t stream) { (void)stream; return nullptr; }
  /// The highest device memory in use by this process seen so far (cudaMemGetInfo on cuda: context,
  /// arenas, workspace and communicator buffers together); 0 where the backend cannot tell.
  virtual uint64_t process_peak_bytes() { return 0; }
};

/// The CPU backend: the reference kernels on ordinary memory.
std::unique_ptr<Backend> make_cpu_backend();
/// The backend for `kind`, or an error when this build lacks it.
Status make_backend(BackendKind kind, std::unique_ptr<Backend> *out);

}  // namespace zrt

#endif  // ZRT_BACKEND_H
