//===- OverlapChunks.cpp - --zplan-overlap-chunks -------------------------===//
//
// Splits the batch of a tensor-parallel program into chunks and interleaves
// them so that one chunk's collectives run on the comm stream while another
// chunk computes. In one sequence's data flow nothing is independent of a
// row-parallel layer's all_reduce: the next op (the residual add) reads it.
// With the batch in two chunks, chunk 0's all_reduce has chunk 1's layer to
// hide behind, and chunk 1's all_reduce chunk 0's next layer.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/MemoryPlanAnalysis.h"
#include "compiler/plan/OpInfo.h"
#include "compiler/plan/Passes.h"
#include "compiler/sharding/BatchSplit.h"

#include "dialects/dist/ZdDialect.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <tuple>

namespace zplan::plan {
#define GEN_PASS_DEF_ZPLANOVERLAPCHUNKS
#include "compiler/plan/Passes.h.inc"
} // namespace zplan::plan

using namespace mlir;

namespace zplan::plan {
namespace {

struct OverlapChunksPass : impl::ZplanOverlapChunksBase<OverlapChunksPass> {
  using ZplanOverlapChunksBase::ZplanOverlapChunksBase;

  void runOnOperation() override {
    if (chunks < 1) {
      getOperation().emitError()
          << "zplan-overlap-chunks: chunks must be at least 1, got "
          << int64_t(chunks);
      return signalPassFailure();
    }
    if (chunks == 1)
      return;
    FailureOr<SmallVector<func::FuncOp>> funcs = getPrograms(getOperation());
    if (failed(funcs))
      return signalPassFailure();
    for (func::FuncOp func : *funcs)
      chunkProgram(func);
  }

  /// Why `func` is left whole, or an empty string when it can be chunked:
  /// only forward programs over a tp mesh. A training step or a generation
  /// program holds state written in place, and ZeRO gathers or offload
  /// prefetches would be issued once per chunk.
  std::string whyNot(func::FuncOp func) {
    bool tpCollective = false;
    std::string why;
    func.walk([&](Operation *op) {
      if (op->getNumRegions() && op != func)
        why = "an op with regions";
      else if (isa<graph::StateOp>(op) || isStateWriteOp(op))
        why = "state written in place";
      else if (isa<dist::GatherParamOp, dist::PrefetchOp, dist::EvictOp>(op))
        why = "ZeRO gathers or offload copies";
      tpCollective |= isCollectiveOp(op) && axisOf(op) == AxisKind::Tp;
    });
    if (why.empty() && !tpCollective)
      why = "no tp collective to overlap";
    return why;
  }

  void chunkProgram(func::FuncOp func) {
    MLIRContext *ctx = func.getContext();
    if (std::string why = whyNot(func); !why.empty()) {
      ++numSkipped;
      return;
    }
    const int64_t n = chunks;
    // The chunk's program: the batch divided by n with ZeRO's batch rules.
    // An op those rules cannot split leaves the program whole (a remark says
    // which), so the errors of the trial are not the user's.
    OwningOpRef<func::FuncOp> chunk(cast<func::FuncOp>(func->clone()));
    std::string failure;
    {
      ScopedDiagnosticHandler trial(ctx, [&](Diagnostic &diag) {
        if (failure.empty())
          failure = diag.str();
        return success();
      });
      if (failed(sharding::splitBatch(*chunk, n)))
        failure = failure.empty() ? "the batch does not split" : failure;
    }
    if (!failure.empty()) {
      func.emitRemark() << "zplan-overlap-chunks: @" << func.getName()
                        << " stays one chunk: " << failure;
      ++numSkipped;
      return;
    }

    Block &body = chunk->getBody().front();
    // Values that depend on the batch inputs differ per chunk; the rest
    // (weights, constants, shapes, and constants cut to a chunk's rows) are
    // the same in every chunk and computed once.
    llvm::DenseSet<Value> perChunk;
    for (BlockArgument arg : body.getArguments())
      if (cast<RankedTensorType>(arg.getType()).getRank() > 0)
        perChunk.insert(arg);
    // Segment of each op: the number of collectives on its longest path
    // from the inputs. Ordering chunk-minor within a segment puts each
    // chunk's collective before the other chunk's work of the same segment.
    llvm::DenseMap<Operation *, int64_t> segment;
    llvm::SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator()) {
      int64_t seg = 0;
      bool dependent = false;
      for (Value operand : op.getOperands()) {
        dependent |= perChunk.contains(operand);
        if (Operation *def = operand.getDefiningOp())
          seg = std::max(seg, segment.lookup(def) +
                                  (isCollectiveOp(def) ? 1 : 0));
      }
      segment[&op] = seg;
      if (dependent)
        for (Value r : op.getResults())
          perChunk.insert(r);
      ops.push_back(&op);
    }
    Operation *ret = body.getTerminator();
    for (auto [v, whole] :
         llvm::zip(ret->getOperands(), func.getFunctionType().getResults())) {
      auto type = cast<RankedTensorType>(v.getType());
      auto wholeType = cast<RankedTensorType>(whole);
      bool split = perChunk.contains(v);
      if (split ? type.getRank() == 0 ||
                      type.getDimSize(0) * n != wholeType.getDimSize(0)
                : type != wholeType) {
        func.emitRemark() << "zplan-overlap-chunks: @" << func.getName()
                          << " stays one chunk: a result does not carry "
                             "the batch in dimension 0";
        ++numSkipped;
        return;
      }
    }

    // (segment, chunk, position): shared ops take chunk 0's place; the
    // inputs' slices open their chunk.
    struct Entry {
      int64_t seg, chunk, pos;
      Operation *op; // null: the slices of the inputs
    };
    llvm::SmallVector<Entry> order;
    for (int64_t c = 0; c < n; ++c)
      order.push_back({0, c, -1, nullptr});
    for (auto [pos, op] : llvm::enumerate(ops)) {
      bool dependent = llvm::any_of(op->getResults(), [&](Value r) {
        return perChunk.contains(r);
      });
      for (int64_t c = 0; c < (dependent ? n : 1); ++c)
        order.push_back({segment[op], c, int64_t(pos), op});
    }
    llvm::stable_sort(order, [](const Entry &a, const Entry &b) {
      return std::tie(a.seg, a.chunk, a.pos) < std::tie(b.seg, b.chunk, b.pos);
    });

    // Rebuild the program's block: new ops go before the old ones, which
    // are erased at the end.
    Block &target = func.getBody().front();
    Operation *oldReturn = target.getTerminator();
    llvm::SmallVector<Operation *> oldOps;
    for (Operation &op : target.without_terminator())
      oldOps.push_back(&op);
    OpBuilder b(ctx);
    b.setInsertionPoint(&target, target.begin());
    llvm::SmallVector<IRMapping> map(n);
    for (const Entry &e : order) {
      if (!e.op) {
        for (auto [arg, whole] :
             llvm::zip(body.getArguments(), target.getArguments())) {
          auto type = cast<RankedTensorType>(arg.getType());
          if (type.getRank() == 0) {
            map[e.chunk].map(arg, whole);
            continue;
          }
          SmallVector<int64_t> starts(type.getRank(), 0),
              steps(type.getRank(), 1);
          starts[0] = e.chunk * type.getDimSize(0);
          Value rows = graph::SliceOp::create(
                           b, whole.getLoc(), type, whole,
                           b.getDenseI64ArrayAttr(starts),
                           b.getDenseI64ArrayAttr(steps))
                           .getResult();
          map[e.chunk].map(arg, rows);
        }
        continue;
      }
      Operation *copy = b.clone(*e.op, map[e.chunk]);
      bool shared = !llvm::any_of(e.op->getResults(), [&](Value r) {
        return perChunk.contains(r);
      });
      if (shared)
        for (int64_t c = 1; c < n; ++c)
          for (auto [from, to] : llvm::zip(e.op->getResults(),
                                           copy->getResults()))
            map[c].map(from, to);
      if (isCollectiveOp(e.op) && !shared)
        ++numChunkedCollectives;
    }
    SmallVector<Value> results;
    for (auto [v, whole] :
         llvm::zip(ret->getOperands(), func.getFunctionType().getResults())) {
      if (!perChunk.contains(v)) {
        results.push_back(map[0].lookup(v));
        continue;
      }
      SmallVector<Value> parts;
      for (int64_t c = 0; c < n; ++c)
        parts.push_back(map[c].lookup(v));
      results.push_back(graph::ConcatOp::create(b, v.getLoc(), whole, parts,
                                                b.getI64IntegerAttr(0))
                            .getResult());
    }
    oldReturn->setOperands(results);
    for (Operation *op : llvm::reverse(oldOps)) {
      op->dropAllUses();
      op->erase();
    }
    // The memory plan reads this mark (MemoryPlanAnalysis.cpp): in a chunked
    // program a tp collective's operands stay reserved until the compute
    // stream waits for it.
    func->setAttr("zplan.overlap_chunks", b.getI64IntegerAttr(n));
    ++numChunked;
  }
};

} // namespace
} // namespace zplan::plan
