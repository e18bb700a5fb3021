// Internal: the step decoder shared by every backend. It turns a verified plan instruction into a Step
// whose tensor references point into the arenas, with the registry entry and category that the backends
// and the executor route by, so that no backend reads the plan or repeats opcode ranges.
#ifndef ZRT_SRC_STEP_DECODER_H
#define ZRT_SRC_STEP_DECODER_H

#include <vector>

#include "zrt/backend.h"
#include "zrt/plan_generated.h"
#include "zrt/status.h"

namespace zrt {

/// Decodes instruction `index` of a verified plan. `tensors` holds every plan tensor placed in its arena;
/// an optional operand given as -1 becomes a TensorRef with data nullptr.
Status decode_step(const fb::Instr &instr, int index, const std::vector<TensorRef> &tensors, Step *out);

}  // namespace zrt

#endif  // ZRT_SRC_STEP_DECODER_H
