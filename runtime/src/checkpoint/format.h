// Internal: the checkpoint format (docs/checkpoint-format.md) without MPI or a session: CRC-32C, the
// manifest container, durable file writes, the mapping of a slice onto full-tensor coordinates, and
// verified byte-range reads of the rank files. The runtime's save/load (session_checkpoint.cpp) and
// `zplan consolidate` both build on it.
#ifndef ZRT_SRC_CHECKPOINT_FORMAT_H
#define ZRT_SRC_CHECKPOINT_FORMAT_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zrt/checkpoint_generated.h"
#include "zrt/status.h"
#include "zrt/types.h"

namespace zrt {
namespace ckpt {

constexpr uint16_t kFormatMajor = 1;
constexpr uint16_t kFormatMinor = 0;
/// The manifest file: a 24-byte header (this magic, u64 payload bytes, u32 CRC-32C of the payload, u32 0)
/// and the FlatBuffer of runtime/schema/checkpoint.fbs.
constexpr char kManifestMagic[8] = {'Z', 'C', 'K', 'P', 'T', 'v', '1', '\n'};
constexpr size_t kManifestHeaderBytes = 24;
constexpr const char *kManifestName = "manifest.zckpt";
/// The file in a checkpoint root that names the newest complete checkpoint directory.
constexpr const char *kLatestName = "latest";
constexpr uint64_t kBlockBytes = 1u << 20;

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `n` bytes, continuing from `crc` (0 to start).
/// Uses the SSE4.2 instruction where the processor has it.
uint32_t crc32c(const void *data, size_t n, uint32_t crc = 0);

/// A box of the full tensor placed in the tp-local tensor (the plan's Piece).
struct Box {
  std::vector<int64_t> src, dst, size;
};

/// `len` consecutive elements at flat index `full` of the full tensor are the elements at `local` of a
/// slice (counted from the slice's flat_begin).
struct Run {
  uint64_t full = 0, local = 0, len = 0;
};

/// The runs of the slice [flat_begin, flat_end) of the tp-local tensor assembled by `pieces`, in slice
/// order, adjacent runs merged. Elements of the slice that no piece covers (padding) appear in no run.
/// An empty `pieces` with full_shape == local_shape means the identity.
std::vector<Run> slice_runs(const std::vector<int64_t> &full_shape, const std::vector<int64_t> &local_shape,
                            const std::vector<Box> &pieces, uint64_t flat_begin, uint64_t flat_end);

/// Writes `path` durably: to path.tmp, fsync, rename, fsync of the folder.
Status write_file_durable(const std::string &path, const void *data, size_t bytes);
/// fsync of a folder, so that a rename inside it survives a crash.
Status sync_dir(const std::string &dir);
/// Writes a whole file (header + payload) for a manifest FlatBuffer.
std::vector<uint8_t> manifest_file_image(const uint8_t *payload, size_t bytes);

/// Resolves what the user named: a checkpoint root (holding `latest`) or one checkpoint directory
/// (holding the manifest). *step_dir is the checkpoint directory.
Status resolve_checkpoint(const std::string &path, std::string *step_dir);

/// A manifest read and verified (header, CRC-32C, FlatBuffers verifier, version, and that every slice lies
/// inside its rank file and agrees with its tensor's shapes).
class Manifest {
 public:
  static Status load(const std::string &step_dir, std::unique_ptr<Manifest> *out);
  const fb::Manifest &get() const { return *m_; }
  const std::string &dir() const { return dir_; }
  const std::string &path() const { return path_; }
  std::string rank_file_path(int rank) const;

 private:
  std::vector<uint8_t> bytes_;
  const fb::Manifest *m_ = nullptr;
  std::string dir_, path_;
};

/// Byte-range reads of the rank files. Every block a read touches is read whole once and its CRC-32C
/// checked, so no byte is used unverified; errors name the file.
class RankFiles {
 public:
  explicit RankFiles(const Manifest &m) : m_(m) {}
  ~RankFiles();
  RankFiles(const RankFiles &) = delete;
  RankFiles &operator=(const RankFiles &) = delete;
  /// Every rank file exists, is a regular file and has the size the manifest records.
  Status check_all();
  Status read(int rank, uint64_t offset, uint64_t bytes, uint8_t *dst);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  /// The verified block, from the cache or read now.
  Status block(int rank, uint64_t block, const std::vector<uint8_t> **data);
  const Manifest &m_;
  std::vector<int> fds_;
  // Recently verified blocks. The reads of one tensor come sorted by file and offset, but consecutive
  // tensors revisit the blocks of the previous ones (small tensors share a block; a resharded tensor reads
  // from several files), so a few blocks per file are kept, least recently used first out.
  struct Cached {
    int rank = -1;
    uint64_t block = 0, used = 0;
    std::vector<uint8_t> data;
  };
  std::vector<Cached> cache_;
  uint64_t clock_ = 0;
  uint64_t bytes_read_ = 0;
};

/// A saved tensor's slices as runs with their byte positions, sorted by full-tensor index.
struct SourceRun {
  uint64_t full = 0, len = 0;
  int rank = 0;
  uint64_t byte = 0;  // byte offset of element `full` in the rank file
  DType dtype = DType::f32;
};
/// The source runs of the manifest's tensors `records`, sorted by `full`.
std::vector<SourceRun> source_runs(const Manifest &m, const std::vector<int> &records);

/// Fills the destination slice described by `dst_runs` (zeros stay where no run lands) from `src`,
/// converting the dtype; fails naming `what` when an element of a run is missing from the sources.
Status fill_from_sources(RankFiles &files, const std::vector<SourceRun> &src, const std::vector<Run> &dst_runs,
                         uint8_t *dst, DType dst_dtype, const std::string &what);

/// The shapes as "[a, b]".
std::string shape_str(const std::vector<int64_t> &s);

}  // namespace ckpt
}  // namespace zrt

#endif  // ZRT_SRC_CHECKPOINT_FORMAT_H
