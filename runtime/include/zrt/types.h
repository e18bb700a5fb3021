// zrt/types.h - value types shared by the runtime's public API and its backend/communicator interfaces.
#ifndef ZRT_TYPES_H
#define ZRT_TYPES_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zrt {

/// Element types; the values equal zrt::fb::DType in runtime/schema/plan.fbs.
enum class DType : uint8_t { f32 = 0, bf16 = 1, f16 = 2, i64 = 3, i32 = 4, bool8 = 5 };
/// Memory spaces; the values equal zrt::fb::MemSpace. Each space is one arena per rank.
/// `nvme` (plan 2.3) is a file per rank, not an arena: kNumMemSpaces counts the arenas only.
enum class MemSpace : uint8_t { device = 0, host = 1, nvme = 2 };
constexpr int kNumMemSpaces = 2;
/// Mesh axes of a collective; the values equal zrt::fb::Axis.
enum class Axis : uint8_t { none = 0, tp = 1, dp = 2, world = 3 };
/// Backends; the values equal zrt::fb::Backend.
enum class BackendKind : uint8_t { cpu = 0, cuda = 1 };

/// Element-wise reductions of all_reduce / reduce_scatter; the values are the plan's reduction ints.
enum class Reduction : uint8_t { sum = 0, max = 1, min = 2 };

size_t dtype_size(DType t);
const char *dtype_name(DType t);

/// Where this process sits in the mesh: world = tp x dp, tp index r % tp, dp index r / tp.
struct RankInfo {
  int rank = 0;
  int world = 1;
  int tp = 1;
  int dp = 1;
  int tp_index() const { return rank % tp; }
  int dp_index() const { return rank / tp; }
};

/// A graph input or output as the plan declares it (global shape: the whole batch).
struct IOInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> global_shape;
  bool batch_split = false;
  size_t global_bytes() const;
};

/// A scalar run input of a program (learning rate, step number) and the value it takes unless set.
struct ScalarInfo {
  std::string name;
  DType dtype = DType::f32;
  double default_value = 0.0;
};

/// One named program of a plan ("main"; "init", "train_step", ... for training).
struct ProgramInfo {
  std::string name;
  std::vector<IOInfo> inputs, outputs;
  std::vector<ScalarInfo> scalars;
};

/// One persistent tensor of the plan's state table, as this rank holds it: the flat range
/// [flat_begin, flat_end) of the tp-local tensor (local_shape) assembled from the full tensor.
struct StateInfo {
  std::string name;
  std::string kind;   // param, param_shard, master, moment1, moment2, grad, scalar
  std::string param;  // the parameter it belongs to
  DType dtype = DType::f32;
  std::vector<int64_t> full_shape, local_shape;
  uint64_t flat_begin = 0, flat_end = 0;
  size_t local_bytes() const { return static_cast<size_t>(flat_end - flat_begin) * dtype_size(dtype); }
};

/// Planned and measured memory of this rank, in bytes, per memory space (index by MemSpace).
struct MemoryReport {
  int rank = 0;
  uint64_t planned_arena_bytes[kNumMemSpaces] = {};
  /// High-water mark of arena bytes written: the largest offset + bytes of any tensor that an instruction
  /// wrote, or that the runtime filled (weights, constants, bound inputs).
  uint64_t measured_arena_bytes[kNumMemSpaces] = {};
  /// The same, counting instruction outputs only.
  uint64_t measured_instr_bytes[kNumMemSpaces] = {};
  /// Memory the runtime holds outside the plan's arenas: kernel scratch and collective staging, sized once
  /// at load time from the plan.
  uint64_t runtime_scratch_bytes = 0;
  /// The plan's own figures (RankMemory).
  uint64_t planned_peak_bytes = 0;
  uint64_t planned_host_bytes = 0;
  /// Measured: the highest device memory in use by the whole process (cuda: cudaMemGetInfo, sampled after
  /// allocations and after every run), comparable with planned_peak_bytes; 0 on cpu.
  uint64_t measured_process_peak_bytes = 0;
  /// NVMe offload (plan 2.3): this rank's file, its bytes as planned, whether it is read with direct I/O,
  /// and the bytes the I/O layer moved since load (counted per completed request, load time included).
  std::string nvme_file;
  uint64_t nvme_file_bytes = 0;
  bool nvme_direct = false;
  uint64_t nvme_bytes_read = 0;
  uint64_t nvme_bytes_written = 0;
  /// Instructions the executor held back for an NVMe transfer that no plan event ordered them after; a
  /// correct plan has none (tests check it).
  uint64_t nvme_unplanned_waits = 0;
};

}  // namespace zrt

#endif  // ZRT_TYPES_H
