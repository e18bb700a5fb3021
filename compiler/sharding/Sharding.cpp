//===- Sharding.cpp - tp sharding of one tensor ---------------------------===//

#include "compiler/sharding/Sharding.h"
#include "dialects/graph/GraphOps.h"

using namespace mlir;
using namespace zplan;
using namespace zplan::sharding;

dist::ShardingAttr Shard::toAttr(MLIRContext *ctx, int64_t tp) const {
  SmallVector<int64_t> axes(rank, dist::ShardingAttr::kReplicated);
  SmallVector<int64_t> counts(rank, 0);
  if (dim >= 0) {
    axes[dim] = dist::ShardingAttr::kTp;
    counts[dim] = blocks == tp ? 0 : blocks;
  }
  return dist::ShardingAttr::get(ctx, axes, counts, segments, partial);
}

Shard Shard::fromAttr(dist::ShardingAttr attr, int64_t tp) {
  Shard s = Shard::replicated(attr.getRank());
  s.partial = attr.getPartial();
  for (auto [i, axis] : llvm::enumerate(attr.getAxes())) {
    if (axis != dist::ShardingAttr::kTp)
      continue;
    s.dim = i;
    s.blocks = attr.getCounts()[i] ? attr.getCounts()[i] : tp;
  }
  s.segments.assign(attr.getSegments().begin(), attr.getSegments().end());
  return s;
}

SmallVector<int64_t> zplan::sharding::localShape(ArrayRef<int64_t> shape,
                                                 const Shard &s) {
  SmallVector<int64_t> out(shape);
  if (s.dim < 0 || s.dim >= (int64_t)out.size())
    return out;
  if (!s.segments.empty()) {
    int64_t total = 0;
    for (int64_t seg : s.segments)
      total += seg / s.blocks;
    out[s.dim] = total;
  } else {
    out[s.dim] = (shape[s.dim] + s.blocks - 1) / s.blocks;
  }
  return out;
}

ArrayAttr zplan::sharding::buildPieces(Builder &b, ArrayRef<int64_t> shape,
                                       const Shard &s, int64_t tp) {
  SmallVector<Attribute> perRank;
  int64_t rank = shape.size();
  auto piece = [&](int64_t srcStart, int64_t dstStart, int64_t size) {
    SmallVector<int64_t> src(rank, 0), dst(rank, 0), sz(shape);
    src[s.dim] = srcStart;
    dst[s.dim] = dstStart;
    sz[s.dim] = size;
    NamedAttribute fields[] = {
        b.getNamedAttr("dst_start", b.getDenseI64ArrayAttr(dst)),
        b.getNamedAttr("size", b.getDenseI64ArrayAttr(sz)),
        b.getNamedAttr("src_start", b.getDenseI64ArrayAttr(src))};
    return b.getDictionaryAttr(fields);
  };
  for (int64_t t = 0; t < tp; ++t) {
    int64_t block = t / (tp / s.blocks);
    SmallVector<Attribute> pieces;
    if (s.segments.empty()) {
      int64_t local = (shape[s.dim] + s.blocks - 1) / s.blocks;
      int64_t start = block * local;
      int64_t size = std::min(local, shape[s.dim] - start);
      // A rank whose block lies wholly in the vocabulary padding gets no
      // piece: its rows stay zero.
      if (size > 0)
        pieces.push_back(piece(start, 0, size));
    } else {
      int64_t src = 0, dst = 0;
      for (int64_t seg : s.segments) {
        int64_t local = seg / s.blocks;
        pieces.push_back(piece(src + block * local, dst, local));
        src += seg;
        dst += local;
      }
    }
    perRank.push_back(b.getArrayAttr(pieces));
  }
  return b.getArrayAttr(perRank);
}

std::optional<Shard> zplan::sharding::readShard(Operation *op,
                                                StringRef attrName, unsigned i,
                                                int64_t tp) {
  auto arr = op->getAttrOfType<ArrayAttr>(attrName);
  if (!arr || i >= arr.size())
    return std::nullopt;
  auto attr = dyn_cast<dist::ShardingAttr>(arr[i]);
  if (!attr)
    return std::nullopt;
  return Shard::fromAttr(attr, tp);
}

int64_t zplan::sharding::byteSize(RankedTensorType type) {
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * ((bits + 7) / 8);
}

// Maps dimension `d` of a reshape's input to the result dimension that
// carries its split into `blocks` parts, or -1 when the split cannot pass
// (it is not the outermost dimension of its reshape group, or the result
// dimension does not divide). Groups are the runs of input and result
// dimensions with equal element counts.
int64_t zplan::sharding::mapReshapeDim(ArrayRef<int64_t> in,
                                       ArrayRef<int64_t> out, int64_t d,
                                       int64_t blocks, bool hasSegments) {
  size_t i = 0, j = 0, n = in.size(), m = out.size();
  while (i < n || j < m) {
    size_t gi = i, gj = j;
    int64_t pi = 1, pj = 1;
    if (i < n)
      pi *= in[i++];
    if (j < m)
      pj *= out[j++];
    while (pi != pj) {
      if (pi < pj && i < n)
        pi *= in[i++];
      else if (pj < pi && j < m)
        pj *= out[j++];
      else
        return -1;
    }
    if ((size_t)d < gi || (size_t)d >= i)
      continue;
    size_t firstIn = gi;
    while (firstIn < i && in[firstIn] == 1)
      ++firstIn;
    size_t firstOut = gj;
    while (firstOut < j && out[firstOut] == 1)
      ++firstOut;
    if (firstIn != (size_t)d || firstOut >= j)
      return -1;
    // The same dimension size passes any split, padded or segmented.
    if (in[d] == out[firstOut] && i - gi == 1 && j - gj == 1)
      return firstOut;
    if (hasSegments || in[d] % blocks || out[firstOut] % blocks)
      return -1;
    return firstOut;
  }
  return -1;


}

/// A zd.weight_shard of `w`: this dp rank's flat part, loaded from w's source.
Value zplan::sharding::createWeightShard(OpBuilder &b, graph::WeightOp w, int64_t dp, int64_t shard,
                StringRef role, bool onHost) {
  auto type = cast<RankedTensorType>(w.getResult().getType());
  SmallVector<int64_t> source(type.getShape());
  if (auto s = w->getAttrOfType<DenseI64ArrayAttr>(kSourceShape))
    source.assign(s.asArrayRef().begin(), s.asArrayRef().end());
  SmallVector<NamedAttribute> attrs = {
      b.getNamedAttr("name", w.getNameAttr()),
      b.getNamedAttr("source_shape", b.getDenseI64ArrayAttr(source)),
      b.getNamedAttr("local_shape", b.getDenseI64ArrayAttr(type.getShape())),
      b.getNamedAttr("dp", b.getI64IntegerAttr(dp)),
      b.getNamedAttr("space", b.getStringAttr(onHost ? "host" : "device"))};
  if (!w.getFile().empty()) {
    attrs.push_back(b.getNamedAttr("file", w.getFileAttr()));
    attrs.push_back(b.getNamedAttr("offset", w.getOffsetAttr()));
    attrs.push_back(b.getNamedAttr("length", w.getLengthAttr()));
  }
  if (auto v = w.getValueAttr())
    attrs.push_back(b.getNamedAttr("value", v));
  if (auto pieces = w->getAttrOfType<ArrayAttr>(kPieces))
    attrs.push_back(b.getNamedAttr("pieces", pieces));
  auto op = dist::WeightShardOp::create(
      b, w.getLoc(),
      TypeRange{RankedTensorType::get({shard}, type.getElementType())},
      ValueRange{}, attrs);
  if (!role.empty())
    op->setAttr("zd.role", b.getStringAttr(role));
  return op.getResult();
}
