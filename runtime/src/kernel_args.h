// kernel_args.h - a plan's tensor as a kernel argument: the descriptors the reference and CUDA kernels take
// (zk::In, zk::Out: one data pointer, dtype and shape), built alike by the CPU and CUDA backends.
#pragma once

#include <cstddef>

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

}  // namespace zrt
