// Internal: assembling this rank's part of each weight from its source (mmap'd external data, inline
// bytes, or deterministic random values).
#ifndef ZRT_SRC_WEIGHTS_H
#define ZRT_SRC_WEIGHTS_H

#include <map>
#include <string>

#include "zrt/plan_generated.h"
#include "zrt/status.h"
#include "zrt/types.h"

namespace zrt {

/// Read-only mappings of external-data files, each mapped once and unmapped when the cache dies.
class MappedFiles {
 public:
  MappedFiles() = default;
  MappedFiles(const MappedFiles &) = delete;
  MappedFiles &operator=(const MappedFiles &) = delete;
  ~MappedFiles();
  Status get(const std::string &path, const uint8_t **data, size_t *size);

 private:
  struct Region {
    void *addr = nullptr;
    size_t size = 0;
  };
  std::map<std::string, Region> files_;
};

/// The value --init random gives element `index` (row-major in the full, unsharded shape) of the weight
/// named `name`: uniform in [-0.1, 0.1), a function of (seed, name, index) only, so that every sharding of
/// the same weight sees the same values.
float random_weight_value(uint64_t seed, const std::string &name, uint64_t index);

/// The same value split in two: the key of (seed, name) once per tensor, then the value of each index.
/// random_weight_value(seed, name, i) == random_weight_at(random_weight_key(seed, name), i).
uint64_t random_weight_key(uint64_t seed, const std::string &name);
float random_weight_at(uint64_t key, uint64_t index);

/// Fills `dst` (the tensor's storage, `dst_elems` elements of `dst_dtype`, zeroed by the caller) with the
/// flat range of the tp-local tensor that `rank` keeps. `base_dir` resolves relative source paths.
Status assemble_weight(const fb::Plan &plan, const fb::WeightBinding &binding, int rank, const std::string &base_dir,
                       bool random, uint64_t seed, MappedFiles *files, uint8_t *dst, DType dst_dtype);

}  // namespace zrt

#endif  // ZRT_SRC_WEIGHTS_H
