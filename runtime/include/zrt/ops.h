// zrt/ops.h - the op registry (zrt/ops.def) as C++: the zrt::Op enum, each op's signature and category,
// and lookups by number and by name.
//
// Header-only and free of FlatBuffers, MLIR and MPI: the compiler maps its ops onto opcodes with it, the
// runtime's verifier checks instructions against it, and the step decoder routes instructions by it. It is
// the only list of opcodes; runtime/schema/plan.fbs stores Instr.op as a plain ushort that refers here.
#ifndef ZRT_OPS_H
#define ZRT_OPS_H

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace zrt {

/// What kind of instruction an op is. The verifier applies one shape rule family per category (unary,
/// binary, select, reduce) or a per-op rule (compute, state_write); the executor sends collective and
/// zero steps to the communicator and everything else to the backend.
enum class OpCategory : uint8_t {
  unary,        // one operand, out has its shape
  binary,       // two operands broadcast to out's shape
  select,       // where: three operands broadcast
  reduce,       // ints [keepdims, axis...]
  compute,      // any other kernel: per-op shape rule
  collective,   // runs on the communicator over the instruction's axis
  zero,         // ZeRO parameter gathering and release
  transfer,     // host <-> device copies
  state_write,  // updates persistent tensors in place
};

const char *op_category_name(OpCategory c);

#define ZRT_PER_OP (-1)
#define ZRT_OPT(i) (1u << (i))
#define ZRT_NOT_IN_PLACE 0u
#define ZRT_IN_PLACE(a, b, c) \
  (static_cast<uint32_t>((a) + 1) | (static_cast<uint32_t>((b) + 1) << 4) | (static_cast<uint32_t>((c) + 1) << 8))
/// Result k written in place over operand src (k < 8, src < 15), for results past the third; or them together.
#define ZRT_IN_PLACE_AT(k, src) (static_cast<uint32_t>((src) + 1) << (4 * (k)))

/// Every opcode by name; the values are the numbers stored in plan files.
enum class Op : uint16_t {
#define ZRT_OP(id, name, code, ...) id = code,
#include "zrt/ops.def"
#undef ZRT_OP
};

/// One registry entry.
struct OpInfo {
  Op op;
  const char *name;
  OpCategory category;
  int min_in, max_in;
  uint32_t optional_in;  // bit i: operand i may be -1
  int min_out, max_out;
  int min_ints, max_ints;  // min_ints == ZRT_PER_OP: the op's shape rule checks the count
  int floats;
  uint32_t in_place;  // 4 bits per result k: 1 + the operand it overwrites, 0 for a fresh result

  constexpr uint16_t code() const { return static_cast<uint16_t>(op); }
  constexpr bool optional_input(int i) const { return i >= 0 && i < 32 && ((optional_in >> i) & 1u) != 0; }
  /// The operand that result k overwrites in place, or -1.
  constexpr int in_place_input(int k) const {
    return k < 0 || k >= 8 ? -1 : static_cast<int>((in_place >> (4 * k)) & 0xFu) - 1;
  }
  /// Whether the op exchanges data between ranks (counted in the collective hash, run by the
  /// communicator): every collective, and gather_param.
  constexpr bool communicates() const { return category == OpCategory::collective || op == Op::gather_param; }
  /// Whether the executor hands the step to the communicator rather than the backend.
  constexpr bool on_communicator() const { return communicates(); }
};

namespace ops_detail {
// inline: one table for the whole program (a plain constexpr array has internal linkage, so every translation
// unit would hold its own copy and the inline lookups below would return pointers into different ones).
inline constexpr OpInfo kTable[] = {
#define ZRT_OP(id, nm, code, cat, min_in, max_in, opt, min_out, max_out, min_ints, max_ints, floats, in_place) \
  {Op::id, nm, OpCategory::cat, min_in, max_in, opt, min_out, max_out, min_ints,                                \
   (min_ints) == ZRT_PER_OP ? 0 : (max_ints), floats, in_place},
#include "zrt/ops.def"
#undef ZRT_OP
};
constexpr size_t kCount = sizeof(kTable) / sizeof(kTable[0]);
constexpr uint16_t kMaxCode = 255;

constexpr bool codes_unique_and_small() {
  for (size_t i = 0; i < kCount; ++i) {
    if (kTable[i].code() > kMaxCode) return false;
    for (size_t j = i + 1; j < kCount; ++j)
      if (kTable[i].code() == kTable[j].code()) return false;
  }
  return true;
}
static_assert(codes_unique_and_small(), "zrt/ops.def: opcode numbers must be unique and at most 255");

constexpr bool str_eq(const char *a, const char *b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
constexpr bool names_unique() {
  for (size_t i = 0; i < kCount; ++i)
    for (size_t j = i + 1; j < kCount; ++j)
      if (str_eq(kTable[i].name, kTable[j].name)) return false;
  return true;
}
static_assert(names_unique(), "zrt/ops.def: op names must be unique");

constexpr bool signatures_sane() {
  for (size_t i = 0; i < kCount; ++i) {
    const OpInfo &o = kTable[i];
    if (o.min_in < 0 || o.max_in < o.min_in || o.min_out < 0 || o.max_out < o.min_out || o.floats < 0) return false;
    if (o.min_ints != ZRT_PER_OP && (o.min_ints < 0 || o.max_ints < o.min_ints)) return false;
    for (int k = 0; k < 8; ++k) {
      const int src = static_cast<int>((o.in_place >> (4 * k)) & 0xFu) - 1;
      if (src >= 0 && (k >= o.min_out || src >= o.min_in)) return false;  // in place only over required slots
    }
  }
  return true;
}
static_assert(signatures_sane(), "zrt/ops.def: an entry's counts are inconsistent");
}  // namespace ops_detail

/// Every registry entry, in registry order.
inline const OpInfo *op_table(size_t *count) {
  *count = ops_detail::kCount;
  return ops_detail::kTable;
}

/// The entry of opcode `code`, or nullptr when the registry has no such op.
inline const OpInfo *op_info(uint16_t code) {
  struct Index {
    int16_t at[ops_detail::kMaxCode + 1];
    Index() {
      for (auto &a : at) a = -1;
      for (size_t i = 0; i < ops_detail::kCount; ++i) at[ops_detail::kTable[i].code()] = static_cast<int16_t>(i);
    }
  };
  static const Index index;
  if (code > ops_detail::kMaxCode || index.at[code] < 0) return nullptr;
  return &ops_detail::kTable[index.at[code]];
}
inline const OpInfo &op_info(Op op) { return *op_info(static_cast<uint16_t>(op)); }

/// The entry named `name` ("add", "all_reduce"; not the C++ identifier "and_"), or nullptr.
inline const OpInfo *op_info_by_name(const char *name, size_t length) {
  for (size_t i = 0; i < ops_detail::kCount; ++i) {
    const char *n = ops_detail::kTable[i].name;
    if (std::strlen(n) == length && std::memcmp(n, name, length) == 0) return &ops_detail::kTable[i];
  }
  return nullptr;
}

/// How far the promise behind a step marked early (plan 2.18, Instr.early) must reach: that no step writes the
/// operands its kernel loads before it waits for the previous kernel on its stream (programmatic dependent
/// launch), so that those loads cannot see a value the previous kernel is still writing.
enum class EarlyScope : uint8_t {
  none,     // the op's kernels load nothing before the wait: a step of it may not be marked early
  plan,     // no instruction of any program writes them (inference weights; not ZeRO-3 gathers, offload copies
            // or trained parameters)
  program,  // no other instruction of the step's program writes them (the step writes them itself, in place,
            // after its wait), and the step is not the first of its program on its stream, so that the kernel
            // it follows is one of its program's (the KV caches and positions of rope_attention, which the
            // prefill program writes too, and whose kernels have finished before that one starts)
};

/// The operands a step of `op` with `num_inputs` operands loads before the wait when it is marked early, and
/// their scope. One table for the compiler (--zplan-early-loads decides), the verifier (checks the claim) and
/// the CUDA kernels (which load exactly these early): the few-row products' weights (W; matmul's b),
/// decode_layer's weights and norm scale (inputs 8 to 15), rope_attention's caches and positions (5 to 7).
struct EarlyOperands {
  EarlyScope scope = EarlyScope::none;
  uint32_t mask = 0;  // bit i: operand i
  constexpr bool has(int i) const { return i >= 0 && i < 32 && ((mask >> i) & 1u) != 0; }
};
constexpr EarlyOperands early_operands(Op op, int num_inputs) {
  uint32_t from1 = 0, from3 = 0;
  for (int i = 1; i < num_inputs && i < 32; ++i) from1 |= 1u << i;
  for (int i = 3; i < num_inputs && i < 32; ++i) from3 |= 1u << i;
  switch (op) {
    case Op::matmul:
    case Op::linear: return {EarlyScope::plan, 1u << 1};
    case Op::linear_multi: return {EarlyScope::plan, from1};
    case Op::linear_gated: return {EarlyScope::plan, (1u << 1) | (1u << 2)};
    case Op::norm_products: return {EarlyScope::plan, from3};
    case Op::decode_layer: return {EarlyScope::plan, 0xFFu << 8};
    case Op::rope_attention: return {EarlyScope::program, (1u << 5) | (1u << 6) | (1u << 7)};
    default: return {};
  }
}

/// The op's name, or "?" for an unknown number.
inline const char *op_name(uint16_t code) {
  const OpInfo *o = op_info(code);
  return o ? o->name : "?";
}
inline const char *op_name(Op op) { return op_name(static_cast<uint16_t>(op)); }

inline const char *op_category_name(OpCategory c) {
  switch (c) {
    case OpCategory::unary: return "unary";
    case OpCategory::binary: return "binary";
    case OpCategory::select: return "select";
    case OpCategory::reduce: return "reduce";
    case OpCategory::compute: return "compute";
    case OpCategory::collective: return "collective";
    case OpCategory::zero: return "zero";
    case OpCategory::transfer: return "transfer";
    case OpCategory::state_write: return "state_write";
  }
  return "?";
}

}  // namespace zrt

#endif  // ZRT_OPS_H
