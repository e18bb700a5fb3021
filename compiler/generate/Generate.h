//===- Generate.h - @prefill and @decode from one forward graph -*- C++ -*-===//
//
// Greedy generation with a planned KV cache (docs/generation.md). The
// exported graph carries no cache; the driver imports it twice, at the
// planned maximum length L and at one token, runs recognition on both, and
// this file derives the two programs of one module:
//
//   @prefill(input_ids [B, L] i64, prompt_lengths [B] i64)
//       -> (next_token [B] i64, logits [B, V])
//   @decode(token [B, 1] i64, positions [B] i64)
//       -> (next_token [B] i64, logits [B, V])
//
// and, for prompts shorter than L, @prefill_<n> (n = 16, 32, ... < L), the
// graph imported at n positions made into a prefill of the same caches.
//
// Every recognised attention writes its keys and values into a persistent
// zg.state of kind kv_cache [B, Hkv, L, D]; @decode attends over the cache
// (zg.cached_attention) and reads the position-indexed constants (rotary
// tables, position ids) at each sequence's cached length.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_GENERATE_GENERATE_H
#define ZPLAN_COMPILER_GENERATE_GENERATE_H

#include "compiler/import/Import.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace zplan::generate {

/// `full` holds the recognised @main imported at sequence length `maxSeq`,
/// `single` the same graph imported at length 1 (same batch). On success
/// `full` holds @prefill and @decode and nothing else; `single` is consumed.
/// Errors (a graph generation cannot use) are reported on the offending op
/// and name it.
mlir::LogicalResult buildGenerationModule(mlir::ModuleOp full,
                                          mlir::ModuleOp single,
                                          int64_t maxSeq);

/// The shorter prefill programs planned beside @prefill for --max-seq
/// `maxSeq`: the powers of two from 16 below it. A prompt of P tokens runs the
/// shortest program of at least P positions (the runtime's choice).
llvm::SmallVector<int64_t> prefillLengths(int64_t maxSeq);

/// Adds @prefill_<width> to `full` (which buildGenerationModule made) from
/// `shorter`, the recognised graph imported at `width` positions: it writes
/// the prompt's keys and values into the same caches and ends like @prefill.
/// `shorter` is consumed.
mlir::LogicalResult addPrefillProgram(mlir::ModuleOp full,
                                      mlir::ModuleOp shorter, int64_t width,
                                      int64_t maxSeq);

/// Imports `model` at `options.seq` = maxSeq and at 1 token (the rank-local
/// batch in `options.batch`), runs recognition on both and derives the
/// generation module. Null (after reporting) on failure.
mlir::OwningOpRef<mlir::ModuleOp>
importForGeneration(mlir::MLIRContext &context, const std::string &model,
                    import::ImportOptions options, int64_t maxSeq);

} // namespace zplan::generate

#endif // ZPLAN_COMPILER_GENERATE_GENERATE_H
