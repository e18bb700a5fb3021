//===- OpInfo.h - What the planner needs to know about each op ------------===//
//
// One table from the zg/zd ops to the plan's vocabulary: which ops become
// instructions and which only define storage (weights, shards, constants),
// the stream each instruction runs on, its plan.fbs opcode, and the plan
// dtype of every tensor. The schedule, the memory plan and the emitter all
// read it, so that they never disagree about an op.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_PLAN_OPINFO_H
#define ZPLAN_COMPILER_PLAN_OPINFO_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/StringRef.h"

#include "zrt/ops.h"

#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <string>

namespace zplan::plan {

/// plan.fbs DType numbers.
enum class PlanDType : uint8_t {
  F32 = 0,
  BF16 = 1,
  F16 = 2,
  I64 = 3,
  I32 = 4,
  Bool8 = 5
};

/// plan.fbs Stream numbers.
enum class StreamKind : uint8_t { Compute = 0, Comm = 1, Copy = 2, Io = 3 };
/// The number of streams (plan 2.3 added io for NVMe transfers).
constexpr unsigned kNumStreams = 4;

/// plan.fbs Axis numbers.
enum class AxisKind : uint8_t { None = 0, Tp = 1, Dp = 2, World = 3 };

/// Opcodes the planner names directly, from the runtime's op registry
/// (zrt/ops.def), which holds every number.
namespace opc {
constexpr uint16_t code(zrt::Op op) { return static_cast<uint16_t>(op); }
constexpr uint16_t kCopy = code(zrt::Op::copy), kCast = code(zrt::Op::cast),
                   kReshape = code(zrt::Op::reshape),
                   kSlice = code(zrt::Op::slice),
                   kAllReduce = code(zrt::Op::all_reduce),
                   kAllGather = code(zrt::Op::all_gather),
                   kReduceScatter = code(zrt::Op::reduce_scatter),
                   kBroadcast = code(zrt::Op::broadcast),
                   kBarrier = code(zrt::Op::barrier),
                   kGatherParam = code(zrt::Op::gather_param),
                   kRelease = code(zrt::Op::release),
                   kPrefetch = code(zrt::Op::prefetch),
                   kEvict = code(zrt::Op::evict),
                   kNvmeRead = code(zrt::Op::nvme_read),
                   kNvmeWrite = code(zrt::Op::nvme_write);
} // namespace opc

/// Parses "fp32" | "bf16" | "fp16" into the plan dtype of float tensors.
std::optional<PlanDType> parseFloatDType(llvm::StringRef name);
llvm::StringRef dtypeName(PlanDType dtype);

/// The plan dtype a tensor of element type `type` is stored in: float types
/// take `floatDType`, integers and i1 keep their own.
std::optional<PlanDType> planDTypeOf(mlir::Type elementType,
                                     PlanDType floatDType);
/// The plan dtype that stores a float element type exactly (f32, bf16, f16);
/// none for other types.
std::optional<PlanDType> exactFloatDType(mlir::Type elementType);
unsigned dtypeBytes(PlanDType dtype);

/// The plan dtype of a value. Non-float values keep their own type. A float
/// value takes `floatDType` (--dtype) unless its element type is an explicit
/// decision: when the module carries `zplan.exact_dtypes` every float keeps
/// its own element type; otherwise the values whose type the training
/// contract fixes keep it too (zg.state results, rank-0 scalar arguments,
/// zg.sum_squares, the lse result of zg.attention). nullopt for element
/// types the plan cannot hold.
std::optional<PlanDType> planDTypeOfValue(mlir::Value value,
                                          PlanDType floatDType);

/// Ops that define storage live for the whole run and run no instruction:
/// zg.weight, zd.weight_shard, zg.state, zg.constant, zg.causal_mask.
bool isStorageOp(mlir::Operation *op);

/// Persistent storage (zg.weight, zd.weight_shard, zg.state): storage ops
/// with the same key are one tensor, in one program or across the programs
/// of the module. The key is the op name, the type and every attribute (name,
/// source, pieces, ...); empty for other values.
std::string persistentKey(mlir::Value value);

/// A zd.weight_shard with zd.role = "master": ZeRO's fp32 master part of a
/// parameter (docs/training-contract.md, section 7).
bool isMasterShard(mlir::Value value);

/// The ops that write persistent state in place: zg.assign, zg.adamw,
/// zg.accumulate, zg.kv_write, zd.nvme_write (no results), zg.rope_kv_write
/// and zg.rope_attention (whose result, the rotated q or the attention's
/// output, comes first in the plan op's outputs), and zg.decode_layer (its two
/// results first, then the caches and the sync state).
bool isStateWriteOp(mlir::Operation *op);

/// The operands a state-write op overwrites (assign and accumulate: the
/// target; adamw: param, m, v), in the order of the plan op's outputs.
llvm::SmallVector<mlir::Value, 3> writtenOperands(mlir::Operation *op);

/// The value a zg.assign writes when it writes one number everywhere (its
/// value is a splat zg.constant): the plan fills the target instead of
/// copying from a constant, so no constant of the target's size is stored in
/// the plan file or in memory (an optimizer moment is as large as its
/// parameter).
std::optional<double> fillValueOf(mlir::Operation *op);

/// Whether a zg.constant is only ever the value of fills (see fillValueOf):
/// it then has no plan tensor.
bool isFillOnlyConstant(mlir::Operation *op);

/// True for the communicating instructions plan.fbs hashes: all_reduce,
/// all_gather, reduce_scatter, broadcast, gather_param.
bool isCollectiveOp(mlir::Operation *op);

/// Results that share their operand's storage (zg.reshape).
bool isViewOp(mlir::Operation *op);

/// The stream an instruction runs on: comm for collectives and gathers, copy
/// for host/device transfers, io for NVMe transfers, compute for everything
/// else.
StreamKind streamOf(mlir::Operation *op);
llvm::StringRef streamName(StreamKind stream);

/// The mesh axis of a collective (gather_param runs over dp), else None.
AxisKind axisOf(mlir::Operation *op);

/// The plan opcode of an instruction op; nullopt for ops the plan cannot
/// express (the emitter names them in its error). zg.<name> and zd.<name>
/// map onto the registry op of the same name; the exceptions are named in
/// OpInfo.cpp (zg.gelu by its approximation, zg.split lowered to one slice per
/// result and reported as kSlice).
std::optional<uint16_t> opcodeOf(mlir::Operation *op);

/// The memory space (0 device, 1 host, 2 nvme) of a value: host for
/// host-placed shards and weights, evicted copies and NVMe staging buffers;
/// nvme for storage placed in the rank's NVMe file.
unsigned spaceOf(mlir::Value value);

/// Number of elements of a statically shaped tensor value.
uint64_t elementCount(mlir::Value value);

/// A readable name for an op: its NameLoc (the ONNX node name) if it has one.
std::string opName(mlir::Operation *op);

} // namespace zplan::plan

#endif // ZPLAN_COMPILER_PLAN_OPINFO_H
