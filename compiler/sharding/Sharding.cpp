//===- Sharding.cpp - tp sharding of one tensor ---------------------------===//

#include "compiler/sharding/Sharding.h"
#include "dialects/graph/GraphOps.h"

using namespace mlir;
using namespace zplan;
using namespace zplan::sharding;

dist::ShardingAttr zplan::sharding::toAttr(const Shard &s, MLIRContext *ctx,
                                           int64_t tp) {
  SmallVector<int64_t> axes(s.rank, dist::ShardingAttr::kReplicated);
  SmallVector<int64_t> counts(s.rank, 0);
  if (s.dim >= 0) {
    axes[s.dim] = dist::ShardingAttr::kTp;
    counts[s.dim] = s.blocks == tp ? 0 : s.blocks;
  }
  return dist::ShardingAttr::get(ctx, axes, counts, s.segments, s.partial);
}

Shard zplan::sharding::fromAttr(dist::ShardingAttr attr, int64_t tp) {
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
  return fromAttr(attr, tp);
}

Value zplan::sharding::writtenTarget(Operation *op) {
  if (isa<graph::AdamwOp, graph::AssignOp, graph::AccumulateOp>(op))
    return op->getOperand(0);
  return Value();
}

int64_t zplan::sharding::byteSize(RankedTensorType type) {
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * ((bits + 7) / 8);
}

/// A zd.weight_shard of `w`: this dp rank's flat part, loaded from w's source.
Value zplan::sharding::createWeightShard(OpBuilder &b, graph::WeightOp w,
                                         int64_t dp, int64_t shard,
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
