// Internal: reading and verifying a plan file before anything is allocated or executed.
#ifndef ZRT_SRC_PLAN_H
#define ZRT_SRC_PLAN_H

#include <memory>
#include <string>
#include <vector>

#include "zrt/plan_generated.h"
#include "zrt/status.h"
#include "zrt/types.h"

namespace zrt {

/// What the plan must match: the launch as MPI and the caller see it.
struct Launch {
  int world = 1;
  int rank = 0;
  BackendKind backend = BackendKind::cpu;
};

/// A verified plan and the bytes it lives in.
class PlanFile {
 public:
  /// Reads `path` (whole) and verifies it; `label` names the plan in messages.
  static Status load(const std::string &path, const Launch &launch, std::unique_ptr<PlanFile> *out);
  /// Verifies a plan held in memory (header + FlatBuffer); weight paths resolve against base_dir.
  static Status from_bytes(std::vector<uint8_t> bytes, const std::string &label, const std::string &base_dir,
                           const Launch &launch, std::unique_ptr<PlanFile> *out);

  const fb::Plan &plan() const { return *plan_; }
  /// FNV-1a 64 of the whole file: every rank must hold the same plan.
  uint64_t file_hash() const { return file_hash_; }
  /// The collective-sequence hash as recomputed from the instructions.
  uint64_t collective_hash() const { return collective_hash_; }
  const std::string &base_dir() const { return base_dir_; }
  const std::string &label() const { return label_; }

 private:
  std::vector<uint8_t> bytes_;
  const fb::Plan *plan_ = nullptr;
  uint64_t file_hash_ = 0;
  uint64_t collective_hash_ = 0;
  std::string base_dir_;
  std::string label_;
};

/// Runs every check of docs/design.md in order on a file image: size, magic, CRC, FlatBuffers verifier,
/// version, fingerprint, then indices, dtypes, shapes, arena ranges, attribute counts, weight pieces, and
/// the collective hash. On success *plan points into `file`.
Status verify_plan(const uint8_t *file, size_t n, const Launch &launch, const fb::Plan **plan,
                   uint64_t *collective_hash);

/// Recomputes a program's collective hash from its instructions.
uint64_t compute_collective_hash(const fb::Plan &plan, const fb::Program &program);
/// The hashes of every program, folded in program order (what the ranks compare at start-up).
uint64_t compute_collective_hash(const fb::Plan &plan);

}  // namespace zrt

#endif  // ZRT_SRC_PLAN_H
