// The step decoder shared by the CPU and CUDA backends (see step_decoder.h).
#include "step_decoder.h"

#include <string>

namespace zrt {

Status decode_step(const fb::Instr &in, int index, const std::vector<TensorRef> &tensors, Step *out) {
  const OpInfo *info = op_info(in.op());
  // The verifier has refused unknown opcodes and bad indices already; these checks keep the decoder safe
  // on its own (tests call it directly).
  if (!info) return error(Code::internal, "instruction " + std::to_string(index) + ": unknown opcode " + std::to_string(in.op()));
  Step s;
  s.op = info->op;
  s.info = info;
  s.category = info->category;
  s.axis = static_cast<Axis>(in.axis());
  // gather_param always runs over dp; the plan may leave its axis unset.
  if (s.op == Op::gather_param) s.axis = Axis::dp;
  s.stream = static_cast<uint8_t>(in.stream());
  s.index = index;
  s.name = in.name() ? in.name()->str() : "";
  const int n = static_cast<int>(tensors.size());
  if (in.inputs())
    for (int t : *in.inputs()) {
      if (t == -1) {
        s.inputs.push_back(TensorRef{});
        continue;
      }
      if (t < 0 || t >= n) return error(Code::internal, "instruction " + std::to_string(index) + ": bad input index");
      s.inputs.push_back(tensors[t]);
    }
  if (in.outputs())
    for (int t : *in.outputs()) {
      if (t < 0 || t >= n) return error(Code::internal, "instruction " + std::to_string(index) + ": bad output index");
      s.outputs.push_back(tensors[t]);
    }
  if (in.ints()) s.ints.assign(in.ints()->begin(), in.ints()->end());
  if (in.floats()) s.floats.assign(in.floats()->begin(), in.floats()->end());
  if (in.waits()) s.waits.assign(in.waits()->begin(), in.waits()->end());
  s.signal = in.signal();
  s.early = in.early();
  *out = std::move(s);
  return {};
}

}  // namespace zrt
