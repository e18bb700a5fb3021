//===- Import.h - ONNX to zg importer ---------------------------*- C++ -*-===//
//
// Reads an ONNX model (protobuf, external data by reference) and builds a
// module with one `func.func @main` of zg ops, every shape static.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_COMPILER_IMPORT_IMPORT_H
#define ZPLAN_COMPILER_IMPORT_IMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <map>
#include <string>

namespace zplan::import {

/// How symbolic dims are bound. A graph input dim named NAME (ONNX
/// dim_param) takes, in this order:
///   1. `dims[NAME]` when present (--dim NAME=V);
///   2. `batch` when NAME is "batch", `seq` when NAME is "seq" (if >= 0);
///   3. positionally, for the first graph input of integer type only: its
///      dim 0 takes `batch` and its dim 1 takes `seq` (if >= 0); and for an
///      input bound by `fill`, of rank 1 or 2, its last dim takes `seq` and
///      dim 0 of a rank-2 one `batch`; and for an input of past keys or
///      values (`emptyPast`), dim 0 takes `batch`. A name bound this way is
///      bound to that value everywhere else too.
/// The past length of an input of past keys or values (`emptyPast`) takes 0
/// before all of these.
/// A dim left unbound is an error naming the dim and the input.
struct ImportOptions {
  std::map<std::string, int64_t> dims;
  int64_t batch = -1, seq = -1;
  /// Accept external-data files that do not exist (graph-only exports such
  /// as tests/models/bench): locations and lengths are still checked, and the
  /// plan refers to the files by name. Off by default: a missing file is an
  /// error.
  bool allowMissingData = false;
  /// Graph inputs that get a value instead of becoming arguments of the
  /// function: the input is then a known value, folded like a constant
  /// (generation binds an export's attention_mask to ones and its
  /// position_ids to arange(seq): compiler/generate). Names the graph does
  /// not have are ignored.
  enum class Fill {
    Zeros,
    Ones,
    Arange, ///< arange(n) along the last dim, the same over the others
  };
  std::map<std::string, Fill> fill;
  /// Bind each graph input of past keys or values to an empty past instead
  /// of making it an argument (generation: the graph is then the one without
  /// a cache, compiler/generate). Such an input is recognised by its role,
  /// not its name: a float input of rank >= 3 that a Concat reads along a
  /// symbolic dim (the past's length; the graph appends the new keys or
  /// values there). That dim takes 0, a symbolic dim 0 the batch, and its
  /// other dims are bound as any input's (static in the exports seen: heads
  /// and head dim).
  bool emptyPast = false;
};

/// Imports the model at `path`. Emits diagnostics (naming the file and the
/// node) and returns null on failure. The module holds the imported generic
/// graph; run the recognition passes (compiler/transforms) on it to get
/// zg.linear, zg.attention and friends.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxFile(mlir::MLIRContext &context,
                                                 llvm::StringRef path,
                                                 const ImportOptions &options);

} // namespace zplan::import

#endif // ZPLAN_COMPILER_IMPORT_IMPORT_H
