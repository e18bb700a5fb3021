// kernel_args.h - a plan step's kernel arguments, built alike by the CPU and CUDA backends: its tensors as the
// descriptors the reference and CUDA kernels take (zk::In, zk::Out: one data pointer, dtype and shape), and
// the arguments an opcode derives from its ints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "zk/cpu_kernels.h"
#include "zrt/backend.h"

namespace zrt {

/// `t` as a kernel argument of type Arg (zk::In or zk::Out): its data, dtype and shape.
template <class Arg>
Arg kernel_arg(const TensorRef &t) {
  Arg r;
  r.data = t.data;
  r.dtype = static_cast<zk::DType>(t.dtype);
  r.shape.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) r.shape.d[i] = t.shape[i];
  return r;
}
inline zk::In in_of(const TensorRef &t) { return kernel_arg<zk::In>(t); }
inline zk::Out out_of(const TensorRef &t) { return kernel_arg<zk::Out>(t); }

/// Input i of step s, or an absent optional operand (no data) where the step has fewer.
inline zk::In opt_in(const Step &s, size_t i) { return i < s.inputs.size() ? in_of(s.inputs[i]) : zk::In{}; }
/// Output i of step s, or an absent optional result (no data) where the step has fewer.
inline zk::Out opt_out(const Step &s, size_t i) { return i < s.outputs.size() ? out_of(s.outputs[i]) : zk::Out{}; }

/// decode_layer's operands (plan 2.17, zrt/ops.def), the residual absent where the step has none.
inline zk::cpu::DecodeLayerIn decode_layer_in(const Step &s) {
  auto i = [&](size_t k) { return in_of(s.inputs[k]); };
  return {i(0), opt_in(s, 16), i(4), i(5), i(6), i(7), i(8), i(9), i(10), i(11), i(12), i(13), i(14), i(15)};
}

/// local_slice's slice bounds: the starts (rank values), then the steps (rank values, all 1). This tp rank's
/// part along dim ints[0] starts at tp_index * the part's size; every other dim is whole.
inline std::vector<int64_t> local_slice_bounds(const Step &s, int tp_index) {
  const int r = s.inputs[0].rank;
  const int64_t dim = s.ints[0];
  std::vector<int64_t> se(2 * static_cast<size_t>(r), 0);
  for (int k = 0; k < r; ++k) se[r + k] = 1;
  se[dim] = static_cast<int64_t>(tp_index) * s.outputs[0].shape[dim];
  return se;
}

}  // namespace zrt
