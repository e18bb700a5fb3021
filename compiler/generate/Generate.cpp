//===- Generate.cpp - @prefill and @decode from one forward graph ---------===//
//
// The decode program is the graph imported at one token, checked op by op
// against the graph imported at --max-seq L: the two must have the same
// structure, and the only values allowed to differ are constants indexed by
// position (a rotary cos/sin table, GPT-2's position ids), whose one-token
// version must equal row 0 of the L-token one. Those are replaced by a gather
// of the L-row table at each sequence's cached length; any other constant
// that depends on the length is a graph generation cannot offset, and an
// error names it. Every recognised attention becomes a write of the new keys
// and values into the layer's cache and an attention over the cache.
//
//===----------------------------------------------------------------------===//

#include "compiler/generate/Generate.h"

#include "compiler/transforms/Passes.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace zplan;
namespace zg = zplan::graph;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elt) {
  return RankedTensorType::get(shape, elt);
}

int64_t product(ArrayRef<int64_t> s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

/// The module's one function, or an error on the module.
FailureOr<func::FuncOp> onlyFunction(ModuleOp m) {
  SmallVector<func::FuncOp> funcs(m.getOps<func::FuncOp>());
  if (funcs.size() != 1) {
    m.emitError("generation: expected one imported function, found ")
        << funcs.size();
    return failure();
  }
  return funcs.front();
}

/// A splat i64 constant of the given shape.
Value i64Splat(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
               int64_t value) {
  auto type = tensorOf(shape, b.getI64Type());
  return zg::ConstantOp::create(
      b, loc, type,
      cast<ElementsAttr>(
          DenseElementsAttr::get(type, b.getI64IntegerAttr(value).getValue())));
}

/// The element at flat index `i` of a dense constant as a double.
double elementAt(DenseElementsAttr a, int64_t i) {
  if (isa<FloatType>(a.getElementType()))
    return (*(a.value_begin<APFloat>() + (a.isSplat() ? 0 : i)))
        .convertToDouble();
  return double(
      (*(a.value_begin<APInt>() + (a.isSplat() ? 0 : i))).getSExtValue());
}

/// Whether `small` (one position) equals position 0 of `table` along `axis`.
bool isRowZero(DenseElementsAttr small, DenseElementsAttr table,
               ArrayRef<int64_t> smallShape, ArrayRef<int64_t> tableShape) {
  int64_t n = product(smallShape);
  SmallVector<int64_t> index(smallShape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    // The same multi-index addresses the table (the axis index is 0 in both).
    // A dim of 1 in the table broadcasts (index 0).
    int64_t flat = 0;
    for (size_t d = 0; d < tableShape.size(); ++d)
      flat = flat * tableShape[d] + (tableShape[d] == 1 ? 0 : index[d]);
    if (elementAt(small, i) != elementAt(table, flat))
      return false;
    for (int64_t d = int64_t(smallShape.size()) - 1; d >= 0; --d) {
      if (++index[d] < smallShape[d])
        break;
      index[d] = 0;
    }
  }
  return true;
}

std::string shapeStr(ArrayRef<int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// Whether the `count` equal-sized slices of `a` along its flat outer extent
/// hold the same elements.
bool sameSlices(DenseElementsAttr a, int64_t count) {
  if (a.isSplat())
    return true;
  int64_t n = a.getNumElements() / count;
  for (int64_t s = 1; s < count; ++s)
    for (int64_t i = 0; i < n; ++i)
      if (elementAt(a, i) != elementAt(a, s * n + i))
        return false;
  return true;
}

/// A constant of `type` holding the first type-sized slice of `table`'s
/// elements (its first row along the flat outer extent).
Value firstSlice(OpBuilder &b, zg::ConstantOp table, RankedTensorType type) {
  auto a = cast<DenseElementsAttr>(table.getValue());
  DenseElementsAttr slice;
  if (a.isSplat())
    slice = DenseElementsAttr::get(type, a.getSplatValue<Attribute>());
  else if (isa<FloatType>(a.getElementType()))
    slice = DenseElementsAttr::get(
        type, llvm::to_vector(llvm::make_range(
                  a.value_begin<APFloat>(),
                  a.value_begin<APFloat>() + type.getNumElements())));
  else
    slice = DenseElementsAttr::get(
        type, llvm::to_vector(llvm::make_range(
                  a.value_begin<APInt>(),
                  a.value_begin<APInt>() + type.getNumElements())));
  return zg::ConstantOp::create(b, table.getLoc(), type,
                                cast<ElementsAttr>(slice));
}

/// " (read by node 'NAME')" for the first reader of `v` that carries an ONNX
/// node's name: a folded constant has only the file's location, so an error
/// on it names the node that reads it.
std::string readBy(Value v) {
  for (Operation *user : v.getUsers()) {
    std::string name;
    user->getLoc()->walk([&](Location loc) {
      if (auto named = dyn_cast<NameLoc>(loc)) {
        name = named.getName().str();
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (!name.empty())
      return " (read by node '" + name + "')";
  }
  return "";
}

/// How many dims a position table `v` without a batch dim (its position axis
/// first) takes in front so that each sequence reads its own rows: every
/// reader is a broadcasting elementwise op (or a rotary reading `v` as its
/// cos or sin) whose result has those dims more than `v`, the first of them
/// the batch (nanoGPT's `wte(idx) + wpe(arange(T))`: one; a rotary table
/// [S, D] against q [B, H, S, D]: two, [B, 1]), or an embedding whose rows
/// only such readers read, all the same count. None when a reader is another
/// op or the readers disagree.
std::optional<int64_t> leadingDims(Value v, int64_t batch) {
  int64_t rank = rtt(v).getRank();
  std::optional<int64_t> n;
  for (Operation *user : v.getUsers()) {
    std::optional<int64_t> m;
    if (auto emb = dyn_cast<zg::EmbeddingOp>(user)) {
      if (emb.getIds() != v)
        return std::nullopt;
      m = leadingDims(emb.getResult(), batch);
    } else if (isa<zg::AddOp, zg::SubOp, zg::MulOp, zg::DivOp, zg::MaxOp,
                   zg::MinOp>(user) ||
               (isa<zg::RotaryOp>(user) && user->getOperand(0) != v)) {
      auto result = rtt(user->getResult(0));
      if (result.getRank() > rank && result.getDimSize(0) == batch)
        m = result.getRank() - rank;
    }
    if (!m || (n && *n != *m))
      return std::nullopt;
    n = m;
  }
  return n;
}

/// Replaces the one-position constant `small` of the decode program by the
/// rows of the L-position `table` at `pos` (one row per sequence). `logical`
/// is the table's shape where the graph reads it: its own, or the shape a
/// zg.expand broadcasts it to (the importer stores a constant along the dims
/// where it varies), whose dims of 1 in the table the rows broadcast along.
LogicalResult replaceByPositionRows(zg::ConstantOp small, zg::ConstantOp table,
                                    ArrayRef<int64_t> logical, Value pos,
                                    int64_t maxSeq) {
  auto s1 = rtt(small.getResult()).getShape();
  auto sL = rtt(table.getResult()).getShape();
  int64_t axis = -1;
  bool other = s1.size() != sL.size() || logical.size() != sL.size();
  for (size_t d = 0; !other && d < s1.size(); ++d) {
    if (sL[d] != logical[d] && sL[d] != 1)
      other = true;
    else if (s1[d] == logical[d])
      continue;
    else if (s1[d] == 1 && sL[d] == maxSeq && axis < 0)
      axis = int64_t(d);
    else
      other = true;
  }
  auto a1 = dyn_cast<DenseElementsAttr>(small.getValue());
  auto aL = dyn_cast<DenseElementsAttr>(table.getValue());
  if (other || axis < 0 || !a1 || !aL || !isRowZero(a1, aL, s1, sL))
    return small.emitError("generation: constant ")
           << shapeStr(s1) << readBy(small.getResult())
           << " depends on the sequence length (it is "
           << shapeStr(sL) << " at --max-seq " << maxSeq
           << ") but is not a table indexed by position whose first row it "
              "is; generation cannot offset it by the cached length";
  int64_t batch = rtt(pos).getDimSize(0);
  int64_t lead = product(sL.take_front(axis));
  // A table whose leading dim is the batch (OPT's position ids [B, L], made
  // from an attention mask of ones; a rotary table [B, 1, L, D] from an
  // export's position_ids [B, L]) holds one row per sequence; the other
  // leading dims must be 1 and the rows the same, which the gather below
  // then reads once per sequence.
  if (lead != 1 && (sL[0] != batch || lead != batch || !sameSlices(aL, lead)))
    return small.emitError("generation: position table ")
           << shapeStr(sL) << readBy(small.getResult())
           << " has leading dims before its position axis that are not the "
              "batch over equal rows; generation cannot offset it per sequence";
  SmallVector<int64_t> out(s1);
  if (batch > 1 && axis == 0) {
    // No batch dim: the rows per sequence go in front, where the readers
    // broadcast the batch (and ones for the dims they broadcast between).
    std::optional<int64_t> n = leadingDims(small.getResult(), batch);
    if (!n)
      return small.emitError("generation: position table ")
             << shapeStr(sL) << readBy(small.getResult())
             << " has no batch dim, and its readers are not all elementwise "
                "ops that broadcast it over the same leading dims, the batch "
                "first (or embeddings that only such ops read); per-sequence "
                "positions need them";
    out.insert(out.begin(), *n - 1, 1);
    out.insert(out.begin(), batch);
  } else if (batch > 1) {
    if (s1[0] != 1 && s1[0] != batch)
      return small.emitError("generation: position table ")
             << shapeStr(sL) << readBy(small.getResult())
             << " does not broadcast over the batch in dim 0; per-sequence "
                "positions need it to";
    out[0] = batch;
  }
  Type elt = rtt(small.getResult()).getElementType();
  OpBuilder b(small);
  Location loc = small.getLoc();
  int64_t rest = product(sL) / maxSeq / lead;
  Value rows =
      lead == 1
          ? zg::ReshapeOp::create(b, loc, tensorOf({maxSeq, rest}, elt),
                                  b.clone(*table)->getResult(0))
                .getResult()
          : firstSlice(b, table, tensorOf({maxSeq, rest}, elt));
  Value picked = zg::GatherOp::create(b, loc, tensorOf({batch, rest}, elt),
                                      rows, pos, b.getI64IntegerAttr(0));
  Value shaped = zg::ReshapeOp::create(b, loc, tensorOf(out, elt), picked);
  // Position ids index a table of the model's positions: --max-seq must fit.
  if (isa<IntegerType>(elt)) {
    int64_t largest = 0;
    for (int64_t i = 0; i < product(sL); ++i)
      largest = std::max<int64_t>(largest, int64_t(elementAt(aL, i)));
    for (Operation *user : small->getUsers())
      if (auto emb = dyn_cast<zg::EmbeddingOp>(user))
        if (largest >= rtt(emb.getTable()).getDimSize(0))
          return emb.emitError("generation: --max-seq ")
                 << maxSeq << " exceeds the model's "
                 << rtt(emb.getTable()).getDimSize(0) << " positions";
  }
  small.getResult().replaceAllUsesWith(shaped);
  small->erase();
  return success();
}

/// The constant an attention's additive mask is, through expands and
/// reshapes (the importer stores a constant along the dims where it varies),
/// and its own shape; null when it is computed.
std::pair<DenseElementsAttr, ArrayRef<int64_t>> constantMask(Value mask) {
  while (Operation *def = mask.getDefiningOp()) {
    if (isa<zg::ExpandOp, zg::ReshapeOp>(def)) {
      mask = def->getOperand(0);
      continue;
    }
    if (auto c = dyn_cast<zg::ConstantOp>(def))
      return {dyn_cast<DenseElementsAttr>(c.getValue()),
              rtt(c.getResult()).getShape()};
    break;
  }
  return {};
}

/// In words, what a constant additive mask [..., S, S] (query rows, key
/// columns) does beyond a causal mask, for the error that refuses it; empty
/// when it is not of that form.
std::string describeMask(DenseElementsAttr a, ArrayRef<int64_t> shape) {
  if (!a || shape.size() < 2 || shape.back() != shape[shape.size() - 2])
    return "";
  int64_t s = shape.back(), n = product(shape);
  bool bias = false, future = false;
  int64_t window = -1;
  for (int64_t k = 0; k < n; ++k) {
    int64_t i = (k / s) % s, j = k % s;
    double v = elementAt(a, k);
    bool masked = v <= -1e4;
    bias |= !masked && v != 0.0;
    future |= j > i && !masked;
    if (j <= i && masked && (window < 0 || i - j < window))
      window = i - j;
  }
  if (bias)
    return "adds a bias to the scores (a position bias such as ALiBi's, as "
           "BLOOM and MPT have)";
  if (window >= 0)
    return "is a sliding window of " + std::to_string(window) +
           " positions (each position sees itself and the " +
           std::to_string(window - 1) +
           " before it); it is causal, and plans, while --max-seq is at most " +
           std::to_string(window);
  if (future)
    return "lets positions see later ones (it is not causal)";
  return "";
}

/// Broadcasts two shapes (numpy rules); false when they do not.
bool broadcast(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
               SmallVectorImpl<int64_t> &out) {
  size_t n = std::max(a.size(), b.size());
  out.assign(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1)
      return false;
    out[i] = x == 1 ? y : x;
  }
  return true;
}

/// After a position table became per-sequence (dim 0: 1 -> B), the results
/// that broadcast it grow too: elementwise ops take the broadcast of their
/// operands, embeddings their ids' shape.
void refreshTypes(func::FuncOp func) {
  for (Operation &op : func.getBody().front()) {
    if (op.getNumResults() != 1 || op.getNumOperands() == 0)
      continue;
    auto type = dyn_cast<RankedTensorType>(op.getResult(0).getType());
    if (!type)
      continue;
    SmallVector<int64_t> shape;
    if (isa<zg::AddOp, zg::SubOp, zg::MulOp, zg::DivOp, zg::PowOp, zg::MaxOp,
            zg::MinOp, zg::WhereOp>(op)) {
      shape.assign(rtt(op.getOperand(0)).getShape().begin(),
                   rtt(op.getOperand(0)).getShape().end());
      for (Value v : op.getOperands().drop_front()) {
        SmallVector<int64_t> next;
        if (!broadcast(shape, rtt(v).getShape(), next))
          return; // the verifier names it
        shape = next;
      }
    } else if (auto emb = dyn_cast<zg::EmbeddingOp>(op)) {
      shape.assign(rtt(emb.getIds()).getShape().begin(),
                   rtt(emb.getIds()).getShape().end());
      shape.push_back(rtt(emb.getTable()).getDimSize(1));
    } else if (op.hasTrait<OpTrait::SameOperandsAndResultShape>() ||
               op.hasTrait<OpTrait::SameOperandsAndResultType>()) {
      shape.assign(rtt(op.getOperand(0)).getShape().begin(),
                   rtt(op.getOperand(0)).getShape().end());
    } else {
      continue;
    }
    if (ArrayRef<int64_t>(shape) != type.getShape())
      op.getResult(0).setType(tensorOf(shape, type.getElementType()));
  }
}

/// The layer's two caches, [B, Hkv, L, D], named after the layer.
std::pair<Value, Value> makeCaches(OpBuilder &b, Location loc, int64_t layer,
                                   RankedTensorType kv, int64_t maxSeq) {
  auto shape = kv.getShape();
  auto type =
      tensorOf({shape[0], shape[1], maxSeq, shape[3]}, kv.getElementType());
  auto make = [&](StringRef which) {
    auto st = zg::StateOp::create(
        b, loc, type,
        b.getStringAttr("kv_cache." + std::to_string(layer) + "." +
                        which.str()),
        b.getStringAttr("kv_cache"), b.getStringAttr(""),
        b.getStringAttr("zeros"));
    // The global key/value head count: the plan's state table records the
    // heads each rank holds once tp has split them.
    st->setAttr("zg.kv_heads", b.getI64IntegerAttr(shape[1]));
    return st.getResult();
  };
  Value k = make("k");
  return {k, make("v")};
}

/// Appends a rank-0 run input (a scalar the runtime fills before every run,
/// `zg.default` unless the caller sets it) named `name`.
Value addScalarArgument(func::FuncOp func, Type elt, StringRef name,
                        Attribute value) {
  Builder b(func.getContext());
  unsigned n = func.getNumArguments();
  (void)func.insertArgument(
      n, RankedTensorType::get({}, elt),
      b.getDictionaryAttr({b.getNamedAttr("zg.name", b.getStringAttr(name)),
                           b.getNamedAttr("zg.default", value)}),
      func.getLoc());
  return func.getArgument(n);
}

/// Ends a program with the next token of each row of `rows` [B, V] and the
/// rows themselves as outputs. The token is drawn by zg.sample
/// (docs/sampling.md) from the run inputs temperature (default 0: greedy, the
/// arg max with the lowest index on ties, as torch.argmax), top_k (0: off),
/// top_p (1: off), seed and step (the caller advances it once per token).
/// The logits' rows [B, V] a program outputs: the logits themselves where
/// they are [B, V], else a copy of the row `pick()` names for each sequence
/// of [B, S, V]. A copy rather than a view: an output lives for the whole
/// plan, and a view would make the memory plan keep its base activation
/// alive too.
Value logitsRows(OpBuilder &b, Location loc, Value logits,
                 llvm::function_ref<Value()> pick) {
  auto shape = rtt(logits).getShape();
  if (shape.size() == 2)
    return logits;
  return zg::TakeRowsOp::create(
      b, loc, tensorOf({shape[0], shape[2]}, rtt(logits).getElementType()),
      logits, pick());
}

void finish(func::FuncOp func, Value rows, Operation *ret) {
  OpBuilder b(ret);
  Location loc = ret->getLoc();
  auto shape = rtt(rows).getShape();
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  Value temperature =
      addScalarArgument(func, f32, "temperature", b.getF64FloatAttr(0.0));
  Value topK = addScalarArgument(func, i64, "top_k", b.getI64IntegerAttr(0));
  Value topP = addScalarArgument(func, f32, "top_p", b.getF64FloatAttr(1.0));
  Value seed = addScalarArgument(func, i64, "seed", b.getI64IntegerAttr(0));
  Value step = addScalarArgument(func, i64, "step", b.getI64IntegerAttr(0));
  Value next = zg::SampleOp::create(b, loc, tensorOf({shape[0]}, i64), rows,
                                    temperature, topK, topP, seed, step);
  func::ReturnOp::create(b, loc, ValueRange{next, rows});
  ret->erase();
  func.setType(FunctionType::get(func.getContext(), func.getArgumentTypes(),
                                 {next.getType(), rows.getType()}));
  func.setResultAttrs(0, b.getDictionaryAttr(b.getNamedAttr(
                             "zg.name", b.getStringAttr("next_token"))));
  func.setResultAttrs(1, b.getDictionaryAttr(b.getNamedAttr(
                             "zg.name", b.getStringAttr("logits"))));
}

/// The logits [B, S, V] (or the last position's, [B, 1, V] or [B, V]) the
/// program returns, or an error.
FailureOr<Value> logitsOf(func::FuncOp func, int64_t seq) {
  Operation *ret = func.getBody().front().getTerminator();
  auto type = ret->getNumOperands() == 1
                  ? rtt(ret->getOperand(0))
                  : RankedTensorType::get({}, Builder(func).getI64Type());
  if (!isa<FloatType>(type.getElementType()) ||
      (type.getRank() != 2 &&
       (type.getRank() != 3 ||
        (type.getDimSize(1) != seq && type.getDimSize(1) != 1)))) {
    func.emitError("generation: the graph must have one output, the logits "
                   "[batch, sequence, vocabulary] or the last position's "
                   "([batch, 1, vocabulary] or [batch, vocabulary])");
    return failure();
  }
  return ret->getOperand(0);
}

/// Whether the program's logits are the last position's only: [B, V], or
/// [B, 1, V] over more than one position.
bool lastOnly(func::FuncOp func, int64_t seq) {
  auto type = rtt(func.getBody().front().getTerminator()->getOperand(0));
  return type.getRank() == 2 || (seq > 1 && type.getDimSize(1) == 1);
}

/// Whether `op` gathers the last of `seq` positions along dim 1 of
/// [B, seq, D] at a scalar constant (`hidden[:, -1, :]`, whose logits are
/// [B, V]; the importer stores the index as seq - 1).
bool isLastPositionGather(Operation *op, int64_t seq) {
  auto g = dyn_cast<zg::GatherOp>(op);
  if (!g || g.getAxis() != 1 || rtt(g.getData()).getRank() != 3 ||
      rtt(g.getData()).getDimSize(1) != seq ||
      rtt(g.getIndices()).getRank() != 0)
    return false;
  auto c = g.getIndices().getDefiningOp<zg::ConstantOp>();
  auto a = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : nullptr;
  if (!a)
    return false;
  int64_t i = int64_t(elementAt(a, 0));
  return i == seq - 1 || i == -1;
}

/// Whether every reader of the constant `c` is a last-position gather over
/// `seq` positions: the index differs with the length, the position does
/// not.
bool onlyLastPositionIndex(zg::ConstantOp c, int64_t seq) {
  return !c->use_empty() && llvm::all_of(c->getUsers(), [&](Operation *user) {
    return isLastPositionGather(user, seq);
  });
}

/// Whether `op` takes the last of `seq` > 1 positions along dim 1 of
/// [B, seq, D], whole along the other dims: how an export that returns only
/// the last position's logits (`logits_to_keep=1`: [B, 1, V]) picks the
/// hidden state it applies the head to. At one token the importer drops the
/// slice (it is the identity there).
bool isLastPositionSlice(Operation *op, int64_t seq) {
  auto s = dyn_cast<zg::SliceOp>(op);
  if (!s || seq <= 1)
    return false;
  auto in = rtt(s.getInput()).getShape(), out = rtt(s.getResult()).getShape();
  if (in.size() != 3 || in[1] != seq || out[1] != 1 ||
      s.getStarts()[1] != seq - 1)
    return false;
  for (int d : {0, 2})
    if (in[d] != out[d] || s.getStarts()[d] != 0 || s.getSteps()[d] != 1)
      return false;
  return true;
}

/// In a program over `seq` positions whose logits are the last position's
/// only: each slice of the last position ([B, 1, D]) or gather of it
/// ([B, D]) becomes the row `last[b]` of each sequence (its last prompt
/// position; right padding follows it), in the same shape. Such logits
/// without either are an error.
LogicalResult pickLastRows(func::FuncOp func, Value last, int64_t seq) {
  SmallVector<Operation *> picks;
  func.walk([&](Operation *op) {
    if (isLastPositionSlice(op, seq) || isLastPositionGather(op, seq))
      picks.push_back(op);
  });
  if (picks.empty())
    return func.emitError("generation: the logits are the last position's "
                          "only, but no slice or gather of the last position "
                          "along the sequence (dim 1 of [batch, sequence, "
                          "hidden]) was found; generation needs to pick each "
                          "prompt's last position instead");
  for (Operation *op : picks) {
    OpBuilder b(op);
    auto type = rtt(op->getResult(0));
    Value x = op->getOperand(0);
    auto shape = rtt(x).getShape();
    Value rows = zg::TakeRowsOp::create(
        b, op->getLoc(), tensorOf({shape[0], shape[2]}, type.getElementType()),
        x, last);
    if (rows.getType() != type)
      rows = zg::ReshapeOp::create(b, op->getLoc(), type, rows);
    Operation *index =
        op->getNumOperands() > 1 ? op->getOperand(1).getDefiningOp() : nullptr;
    op->getResult(0).replaceAllUsesWith(rows);
    op->erase();
    if (index && index->use_empty())
      index->erase();
  }
  return success();
}

/// The one input [B, S] of token ids, renamed; or an error. The inputs that
/// generation supplies itself (importForGeneration binds them) are constants
/// by now.
FailureOr<BlockArgument> tokenInput(func::FuncOp func, int64_t seq,
                                    StringRef name) {
  if (func.getNumArguments() > 1) {
    std::string names;
    for (unsigned k = 0; k < func.getNumArguments(); ++k)
      if (auto n = func.getArgAttrOfType<StringAttr>(k, "zg.name"))
        names += (names.empty() ? "'" : ", '") + n.getValue().str() + "'";
    func.emitError("generation: the graph must have one input, the token "
                   "ids [batch, sequence], besides those generation supplies "
                   "itself (attention_mask: ones; position_ids, "
                   "cache_position: each sequence's positions; "
                   "token_type_ids: zeros; past keys and values: an empty "
                   "past; use_cache_branch: false); it has ")
        << func.getNumArguments() << ": " << names
        << " (inputs under other names cannot be generated from; an input "
           "of past keys or values is bound only when it is a float tensor "
           "of rank >= 3 that a Concat reads along a symbolic dim, its "
           "past length)";
    return failure();
  }
  if (func.getNumArguments() != 1 || rtt(func.getArgument(0)).getRank() != 2 ||
      rtt(func.getArgument(0)).getDimSize(1) != seq ||
      !isa<IntegerType>(rtt(func.getArgument(0)).getElementType())) {
    func.emitError("generation: the graph must have one input, the token ids "
                   "[batch, sequence]");
    return failure();
  }
  Builder b(func.getContext());
  func.setArgAttr(0, "zg.name", b.getStringAttr(name));
  return func.getArgument(0);
}

/// Appends a [B] i64 argument named `name`.
Value addLengthArgument(func::FuncOp func, int64_t batch, StringRef name) {
  Builder b(func.getContext());
  auto type = tensorOf({batch}, b.getI64Type());
  unsigned n = func.getNumArguments();
  (void)func.insertArgument(
      n, type,
      b.getDictionaryAttr(b.getNamedAttr("zg.name", b.getStringAttr(name))),
      func.getLoc());
  return func.getArgument(n);
}

/// Replaces each transpose that moves only dims of size 1 by a reshape: the
/// elements keep their order, so the result is a view of the input rather
/// than a copy. A decode step has one query row, so its per-head transposes
/// ([B, 1, H, D] <-> [B, H, 1, D]) are all of this kind: four copy kernels per
/// layer that the step no longer launches.
void unitTransposesToViews(func::FuncOp func) {
  SmallVector<zg::TransposeOp> unit;
  func.walk([&](zg::TransposeOp t) {
    auto in = rtt(t.getInput()).getShape();
    SmallVector<int64_t> kept;
    for (int64_t d : t.getPerm())
      if (in[d] != 1)
        kept.push_back(d);
    if (llvm::is_sorted(kept))
      unit.push_back(t);
  });
  for (zg::TransposeOp t : unit) {
    OpBuilder b(t);
    Value view = zg::ReshapeOp::create(b, t.getLoc(), t.getType(), t.getInput());
    t.getResult().replaceAllUsesWith(view);
    t->erase();
  }
}

/// Turns a forward graph over `width` <= maxSeq positions into a prefill
/// program: every attention (in layer order) also writes its keys and values
/// into the layer's cache [B, Hkv, maxSeq, D] from position 0, and the
/// program ends with the next token drawn from each sequence's last prompt
/// row (`prompt_lengths[b] - 1`). Logits of the last position only
/// ([B, 1, V]) take that row where the graph slices the last position.
LogicalResult derivePrefill(func::FuncOp func,
                            ArrayRef<zg::AttentionOp> attentions, int64_t batch,
                            int64_t maxSeq) {
  Block &body = func.getBody().front();
  Value lengths = addLengthArgument(func, batch, "prompt_lengths");
  OpBuilder b(&body, body.begin());
  Value zeros = i64Splat(b, func.getLoc(), {batch}, 0);
  // Each sequence's last prompt position.
  auto lastRow = [&](Location loc) -> Value {
    return zg::SubOp::create(b, loc, lengths.getType(), lengths,
                             i64Splat(b, loc, {batch}, 1));
  };
  // Logits of the last position only: each sequence's last prompt position
  // is picked where the graph slices the last one.
  int64_t width = rtt(func.getArgument(0)).getDimSize(1);
  if (lastOnly(func, width) &&
      failed(pickLastRows(func, lastRow(func.getLoc()), width)))
    return failure();
  for (auto [layer, attention] : llvm::enumerate(attentions)) {
    zg::AttentionOp a = attention;
    b.setInsertionPoint(a);
    auto [kc, vc] = makeCaches(b, a.getLoc(), layer, rtt(a.getK()), maxSeq);
    zg::KvWriteOp::create(b, a.getLoc(), kc, a.getK(), zeros);
    zg::KvWriteOp::create(b, a.getLoc(), vc, a.getV(), zeros);
  }
  Operation *ret = body.getTerminator();
  Value logits = ret->getOperand(0);
  auto shape = rtt(logits).getShape();
  b.setInsertionPoint(ret);
  Value rows = logitsRows(b, ret->getLoc(), logits, [&] {
    return shape[1] == 1 ? zeros : lastRow(ret->getLoc());
  });
  finish(func, rows, ret);
  return success();
}

/// Keeps only the output named `logits` of a graph that has others (the
/// present keys and values `present.<layer>.key` / `.value` of an export
/// made with use_cache=True, as optimum's decoder_model.onnx: generation
/// plans its own cache) and erases what only they read. Before recognition,
/// so that a key or value another output also reads is recognised as in a
/// graph without it.
void keepOnlyLogits(ModuleOp m) {
  FailureOr<func::FuncOp> funcOr = onlyFunction(m);
  if (failed(funcOr) || (*funcOr).getNumResults() < 2)
    return;
  func::FuncOp func = *funcOr;
  std::optional<unsigned> logits;
  for (unsigned r = 0; r < func.getNumResults(); ++r)
    if (auto name = func.getResultAttrOfType<StringAttr>(r, "zg.name");
        name && name.getValue() == "logits")
      logits = r;
  if (!logits)
    return;
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  Value kept = ret->getOperand(*logits);
  DictionaryAttr attrs = func.getResultAttrDict(*logits);
  ret->setOperands(kept);
  func.setType(FunctionType::get(func.getContext(), func.getArgumentTypes(),
                                 {kept.getType()}));
  func.setResultAttrs(0, attrs);
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
    if (isOpTriviallyDead(&op))
      op.erase();
}

} // namespace

SmallVector<int64_t> generate::prefillLengths(int64_t maxSeq) {
  SmallVector<int64_t> lengths;
  for (int64_t n = 16; n < maxSeq; n *= 2)
    lengths.push_back(n);
  return lengths;
}

LogicalResult generate::addPrefillProgram(ModuleOp full, ModuleOp shorter,
                                          int64_t width, int64_t maxSeq) {
  FailureOr<func::FuncOp> funcOr = onlyFunction(shorter);
  if (failed(funcOr))
    return failure();
  func::FuncOp func = *funcOr;
  FailureOr<BlockArgument> ids = tokenInput(func, width, "input_ids");
  if (failed(ids) || failed(logitsOf(func, width)))
    return failure();
  SmallVector<zg::AttentionOp> attentions(
      func.getBody().front().getOps<zg::AttentionOp>());
  if (failed(derivePrefill(func, attentions, rtt(*ids).getDimSize(0), maxSeq)))
    return failure();
  func.setSymName(("prefill_" + std::to_string(width)));
  func->remove();
  full.getBody()->push_back(func);
  if (failed(mlir::verify(full)))
    return full.emitError("generation: the prefill program of ")
           << width << " positions does not verify (see the error above)";
  return success();
}

LogicalResult generate::buildGenerationModule(ModuleOp full, ModuleOp single,
                                              int64_t maxSeq) {
  FailureOr<func::FuncOp> prefillOr = onlyFunction(full);
  FailureOr<func::FuncOp> decodeOr = onlyFunction(single);
  if (failed(prefillOr) || failed(decodeOr))
    return failure();
  func::FuncOp prefill = *prefillOr, decode = *decodeOr;
  // The first failure alone: the two imports would say the same twice.
  FailureOr<BlockArgument> ids = tokenInput(prefill, maxSeq, "input_ids");
  if (failed(ids) || failed(logitsOf(prefill, maxSeq)) ||
      failed(tokenInput(decode, 1, "token")) || failed(logitsOf(decode, 1)))
    return failure();
  int64_t batch = rtt(*ids).getDimSize(0);

  // A mask the cached attention cannot apply, named before the walk (at one
  // token such a mask is a single 0, so the imports differ in structure).
  {
    int64_t layer = 0;
    WalkResult masks = prefill.walk([&](zg::AttentionOp a) {
      if (a.getMask()) {
        auto [attr, shape] = constantMask(a.getMask());
        std::string what = describeMask(attr, shape);
        if (!what.empty()) {
          a.emitError("generation: the mask of attention ")
              << layer << " " << what
              << "; generation's cached attention applies a causal mask only";
          return WalkResult::interrupt();
        }
      }
      ++layer;
      return WalkResult::advance();
    });
    if (masks.wasInterrupted())
      return failure();
  }

  // A causal mask that no attention absorbed: an attention core the
  // recognition does not take (scores capped by tanh before the mask, as
  // Gemma 2's attn_logit_softcapping). Named before the walk, which would
  // only see the mask differ at one token.
  {
    WalkResult unrecognised = prefill.walk([&](zg::CausalMaskOp cm) {
      if (cm->use_empty())
        return WalkResult::advance();
      cm.emitError("generation: a causal mask")
          << readBy(cm.getResult())
          << " is not consumed by a recognised attention: the attention "
             "core has a form the recognition does not take (such as scores "
             "capped by tanh before the mask, Gemma 2's "
             "attn_logit_softcapping); generation's cached attention needs "
             "softmax(q k^T * scale + causal mask) v";
      return WalkResult::interrupt();
    });
    if (unrecognised.wasInterrupted())
      return failure();
  }

  // The two imports, op by op.
  struct Table {
    zg::ConstantOp small, table;
    SmallVector<int64_t> logical; // the table's shape where the graph reads it
  };
  SmallVector<Table> tables;
  SmallVector<std::pair<zg::AttentionOp, zg::AttentionOp>> attentions;
  Block &bL = prefill.getBody().front(), &b1 = decode.getBody().front();
  // Where each value comes from: a block argument's number, or the walk step
  // of the op that defines it and the result's number. The two imports must
  // wire their ops alike, with the same attributes: a recognition that
  // matched differently at one token (a one-element position table taken for
  // a scale) is a different graph, however alike the op names.
  using Place = std::pair<int64_t, unsigned>;
  DenseMap<Value, Place> placeL, place1;
  for (BlockArgument a : bL.getArguments())
    placeL[a] = {-1 - int64_t(a.getArgNumber()), 0};
  for (BlockArgument a : b1.getArguments())
    place1[a] = {-1 - int64_t(a.getArgNumber()), 0};
  int64_t step = 0;
  auto itL = bL.begin(), it1 = b1.begin();
  for (; itL != bL.end() && it1 != b1.end(); ++itL, ++it1, ++step) {
    // The slice of the last position, dropped at one token (the identity).
    if (isLastPositionSlice(&*itL, maxSeq) && !isa<zg::SliceOp>(*it1)) {
      placeL[itL->getResult(0)] = placeL.lookup(itL->getOperand(0));
      if (++itL == bL.end())
        break;
    }
    // A position table broadcast by zg.expand at L positions (the importer
    // stores a constant along the dims where it varies) whose one-position
    // row is a splat, stored whole (TorchScript exports' rotary cos/sin
    // [B, 1, S, D] with position 0's cos 1 and sin 0): the one-token import
    // has the constant alone. The expand is skipped; the table is read
    // through it (its shape is the table's logical shape).
    bool skipped = false;
    while (!isa<zg::ExpandOp>(*it1)) {
      auto expand = dyn_cast<zg::ExpandOp>(*itL);
      auto entry = !expand ? tables.end()
                           : llvm::find_if(tables, [&](Table &t) {
                               return t.table.getResult() ==
                                          expand->getOperand(0) &&
                                      expand->getOperand(0).hasOneUse();
                             });
      if (entry == tables.end())
        break;
      entry->logical = llvm::to_vector(rtt(expand.getResult()).getShape());
      placeL[expand.getResult()] = placeL.lookup(expand->getOperand(0));
      if ((skipped = ++itL == bL.end()))
        break;
    }
    if (skipped)
      break;
    Operation &oL = *itL, &o1 = *it1;
    if (oL.getName() != o1.getName() ||
        oL.getNumOperands() != o1.getNumOperands() ||
        oL.getNumResults() != o1.getNumResults())
      return o1.emitError("generation: the graph imported at one token has ")
             << o1.getName() << " where the graph at --max-seq " << maxSeq
             << " has " << oL.getName()
             << "; its structure depends on the sequence length, which "
                "generation cannot plan";
    for (unsigned i = 0; i < o1.getNumOperands(); ++i)
      if (placeL.lookup(oL.getOperand(i)) != place1.lookup(o1.getOperand(i)))
        return o1.emitError("generation: operand ")
               << i << " of " << o1.getName()
               << " comes from another op in the graph imported at one token "
                  "than in the graph at --max-seq "
               << maxSeq
               << "; its structure depends on the sequence length, which "
                  "generation cannot plan";
    // An attention over one position needs no causal mask: `causal` may
    // differ.
    auto attrs = [](Operation &op) {
      NamedAttrList list(op.getAttrDictionary());
      if (isa<zg::AttentionOp>(op))
        list.erase("causal");
      return list.getDictionary(op.getContext());
    };
    if (!isa<zg::ConstantOp>(o1) && attrs(oL) != attrs(o1))
      return o1.emitError("generation: ")
             << o1.getName() << " has the attributes " << attrs(o1)
             << " in the graph imported at one token and " << attrs(oL)
             << " at --max-seq " << maxSeq
             << "; its structure depends on the sequence length, which "
                "generation cannot plan";
    for (unsigned r = 0; r < o1.getNumResults(); ++r) {
      placeL[oL.getResult(r)] = {step, r};
      place1[o1.getResult(r)] = {step, r};
    }
    if (auto c1 = dyn_cast<zg::ConstantOp>(o1)) {
      auto cL = cast<zg::ConstantOp>(oL);
      if (c1.getType() != cL.getType())
        tables.push_back(
            {c1, cL, llvm::to_vector(rtt(cL.getResult()).getShape())});
      else if (c1.getValue() != cL.getValue() && maxSeq != 1 &&
               !(onlyLastPositionIndex(c1, 1) &&
                 onlyLastPositionIndex(cL, maxSeq)))
        return c1.emitError("generation: a constant of shape ")
               << shapeStr(rtt(c1.getResult()).getShape())
               << readBy(c1.getResult())
               << " changes with the sequence length; generation cannot "
                  "offset it by the cached length";
    }
    if (auto a1 = dyn_cast<zg::AttentionOp>(o1))
      attentions.push_back({cast<zg::AttentionOp>(oL), a1});
  }
  if (itL != bL.end() || it1 != b1.end())
    return decode.emitError("generation: the graphs imported at one token and "
                            "at --max-seq differ in length");
  if (attentions.empty())
    return prefill.emitError(
        "generation: no attention was recognised; generation needs the "
        "attention core of a causal language model (zg.attention)");
  for (auto [layer, pair] : llvm::enumerate(attentions)) {
    zg::AttentionOp aL = pair.first, a1 = pair.second;
    // An attention with neither a causal flag nor a mask sees every
    // position: an encoder's, or that of an export traced at one new token
    // (optimum 1.x's decoder_with_past_model.onnx of GPT-2: transformers 4's
    // SDPA attention takes no causal mask for one query), which is a decode
    // step only. Say so, as the file beside it generates.
    if (!aL.getCausal() && !aL.getMask() && !a1.getMask())
      return aL.emitError("generation: attention ")
             << layer
             << " is not plain causal self-attention (it has no causal mask: "
                "every position sees every other, as in an encoder, or in an "
                "export traced at one new token, such as optimum's "
                "decoder_with_past_model.onnx of GPT-2, a decode step only: "
                "use its decoder_model.onnx or decoder_model_merged.onnx); "
                "generation needs a causal language model";
    if (!aL.getCausal() || aL.getMask() || a1.getMask() ||
        aL->getNumResults() != 1)
      return aL.emitError("generation: attention ")
             << layer
             << " is not plain causal self-attention (an additive mask, or "
                "no causal mask); generation needs a causal language model";
  }

  // @decode: positions, the tables read at them, attention over the caches.
  Value positions = addLengthArgument(decode, batch, "positions");
  for (Table &t : tables)
    if (failed(replaceByPositionRows(t.small, t.table, t.logical, positions,
                                     maxSeq)))
      return failure();
  for (auto [layer, pair] : llvm::enumerate(attentions)) {
    zg::AttentionOp a = pair.second;
    OpBuilder b(a);
    Location loc = a.getLoc();
    auto [kc, vc] = makeCaches(b, loc, layer, rtt(a.getK()), maxSeq);
    zg::KvWriteOp::create(b, loc, kc, a.getK(), positions);
    zg::KvWriteOp::create(b, loc, vc, a.getV(), positions);
    Value out = zg::CachedAttentionOp::create(b, loc, a.getType(0), a.getQ(),
                                              kc, vc, positions, a.getScale());
    a.getResult().replaceAllUsesWith(out);
    a->erase();
  }
  refreshTypes(decode);
  unitTransposesToViews(decode);
  {
    Operation *ret = b1.getTerminator();
    Value logits = ret->getOperand(0);
    auto shape = rtt(logits).getShape();
    OpBuilder b(ret);
    Value rows = logitsRows(b, ret->getLoc(), logits, [&] {
      return i64Splat(b, ret->getLoc(), {shape[0]}, 0);
    });
    finish(decode, rows, ret);
  }

  // @prefill: the prompt's keys and values go into the caches from position
  // 0; the next token comes from each sequence's last prompt position.
  SmallVector<zg::AttentionOp> prefillAttentions;
  for (auto &pair : attentions)
    prefillAttentions.push_back(pair.first);
  if (failed(derivePrefill(prefill, prefillAttentions, batch, maxSeq)))
    return failure();

  prefill.setSymName("prefill");
  decode.setSymName("decode");
  decode->remove();
  full.getBody()->push_back(decode);
  if (failed(mlir::verify(full)))
    return full.emitError("generation: the derived programs do not verify "
                          "(see the error above): the graph has a "
                          "position-dependent part generation cannot plan");
  return success();
}

OwningOpRef<ModuleOp>
generate::importForGeneration(MLIRContext &context, const std::string &model,
                              import::ImportOptions options, int64_t maxSeq) {
  // The inputs that Hugging Face / optimum exports carry besides input_ids,
  // bound to what generation feeds a sequence: no padding inside a sequence
  // (right-padded prompts are shorter sequences), positions 0 .. n-1 from
  // the start of the sequence, one token type. Bound as constants, they fold
  // like the exports without them: the mask into the causal mask, the
  // positions into position tables that @decode reads at each sequence's
  // cached length.
  using Fill = import::ImportOptions::Fill;
  options.fill.insert({{"attention_mask", Fill::Ones},
                       {"position_ids", Fill::Arange},
                       {"cache_position", Fill::Arange},
                       {"token_type_ids", Fill::Zeros},
                       {"use_cache_branch", Fill::Zeros}});
  // Past keys and values (optimum's decoder_with_past_model.onnx, exports
  // called with past_key_values): an empty past, which makes the graph the
  // one without a cache (the new keys and values appended to nothing are the
  // new ones) and the attention_mask, past + sequence long, the sequence's
  // length. Generation plans its own cache. optimum's merged decoder
  // (decoder_model_merged.onnx) chooses between its graphs without and with
  // a past by use_cache_branch: false, the one without, imported as the
  // branch its If takes (compiler/import/ControlOps.cpp, importIf).
  options.emptyPast = true;
  options.seq = maxSeq;
  OwningOpRef<ModuleOp> full = import::importOnnxFile(context, model, options);
  if (!full)
    return nullptr;
  options.seq = 1;
  OwningOpRef<ModuleOp> single =
      import::importOnnxFile(context, model, options);
  if (!single)
    return nullptr;
  for (ModuleOp m : {*full, *single}) {
    keepOnlyLogits(m);
    PassManager pm(&context, ModuleOp::getOperationName());
    transforms::buildRecognitionPipeline(pm);
    if (failed(pm.run(m)))
      return nullptr;
  }
  if (failed(buildGenerationModule(*full, *single, maxSeq)))
    return nullptr;
  // Shorter prefill programs, so that a prompt shorter than L is not
  // computed at L positions: the runtime runs the shortest that holds it.
  for (int64_t width : prefillLengths(maxSeq)) {
    options.seq = width;
    OwningOpRef<ModuleOp> shorter =
        import::importOnnxFile(context, model, options);
    if (!shorter)
      return nullptr;
    keepOnlyLogits(*shorter);
    PassManager pm(&context, ModuleOp::getOperationName());
    transforms::buildRecognitionPipeline(pm);
    if (failed(pm.run(*shorter)) ||
        failed(addPrefillProgram(*full, *shorter, width, maxSeq)))
      return nullptr;
  }
  return full;
}
