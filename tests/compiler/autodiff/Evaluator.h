//===- Evaluator.h - a float64 interpreter of zg functions ------*- C++ -*-===//
//
// The independent oracle of the gradient tests: it runs a zg function in
// double precision, straight from each op's documented semantics, with no
// code shared with the gradient rules or the runtime's kernels. Integers and
// booleans are held as doubles too (exact below 2^53).
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_TESTS_COMPILER_AUTODIFF_EVALUATOR_H
#define ZPLAN_TESTS_COMPILER_AUTODIFF_EVALUATOR_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace zplan::test {

/// A dense row-major tensor of doubles.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> s, double fill = 0.0);
  int64_t size() const { return static_cast<int64_t>(data.size()); }
};

/// Persistent tensors shared by several programs: parameters (read from
/// their external data under `weightDir` at first use) and zg.state tensors,
/// by name. zg.assign, zg.accumulate and zg.adamw write here.
struct PersistentState {
  std::string weightDir;
  std::map<std::string, Tensor> tensors;
};

/// The tensors that the ranks of one tp group hand each other: each rank's
/// interpreter runs on its own thread and meets the others at every
/// collective (zd.all_reduce, zd.all_gather), in program order.
class TpGroup {
public:
  explicit TpGroup(int size) : size(size), posted(size) {}
  int groupSize() const { return size; }
  /// Posts `t` as rank `rank`'s part and returns every rank's part.
  std::vector<Tensor> exchange(int rank, const Tensor &t);

private:
  void barrier();
  int size;
  std::vector<Tensor> posted;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
};

/// Which rank of which tp group an evaluation is (absent: a whole program),
/// and which rank of which dp group (ZeRO: zd.weight_shard, zd.gather_param,
/// collectives over "dp").
struct TpRank {
  int rank = 0;
  TpGroup *group = nullptr;
  int dpRank = 0;
  TpGroup *dpGroup = nullptr;
};

/// Runs `func` on `args` (one per argument) and returns its results, or an
/// empty vector (with `error` set) on an op it does not know. Without
/// `state`, weights need inline values and writes to persistent tensors are
/// errors.
std::vector<Tensor> evaluate(mlir::func::FuncOp func,
                             const std::vector<Tensor> &args,
                             std::string *error = nullptr,
                             PersistentState *state = nullptr,
                             TpRank tp = {});

} // namespace zplan::test

#endif // ZPLAN_TESTS_COMPILER_AUTODIFF_EVALUATOR_H
