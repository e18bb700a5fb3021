//===- ZdAttrs.td - zd attributes ----------------------------*- tablegen -*-===//
//
// The sharding attribute: one entry per tensor dimension plus a partial-sum
// marker over tp.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_DIST_ZDATTRS_TD
#define ZPLAN_DIALECTS_DIST_ZDATTRS_TD

include "dialects/dist/ZdDialect.td"

def Zd_ShardingAttr : AttrDef<Zd_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "per-dimension split of a tensor over the mesh";
  let description = [{
    `#zd.sharding<[tp, _, dp]>` splits dimension 0 over tp, keeps dimension 1
    whole and splits dimension 2 over dp. `tp:C` splits a dimension into C
    blocks (C divides tp) with block index tp_index / (tp / C): each block is
    replicated on tp / C consecutive ranks (GQA K/V heads when tp exceeds the
    K/V head count). A trailing `partial` marks a partial sum over tp.

    `axes[i]` is 0 (replicated), 1 (tp) or 2 (dp); `counts[i]` is the block
    count for a `tp:C` dimension and 0 for a split over the whole group.

    `segments = [64, 64, 64]` says that the (single) tp-split dimension is a
    concatenation of fused parts of these global sizes, each split on its own
    (a fused QKV projection): a rank holds its block of every segment, in
    segment order.
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$axes,
                        ArrayRefParameter<"int64_t">:$counts,
                        ArrayRefParameter<"int64_t">:$segments,
                        "bool":$partial);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    static constexpr int64_t kReplicated = 0;
    static constexpr int64_t kTp = 1;
    static constexpr int64_t kDp = 2;
    /// A fully replicated sharding of the given rank.
    static ShardingAttr getReplicated(::mlir::MLIRContext *ctx, int64_t rank);
    int64_t getRank() const { return getAxes().size(); }
    bool isReplicated() const;
    /// The number of blocks dimension `dim` is cut into for the given mesh.
    int64_t getBlocks(int64_t dim, int64_t tp, int64_t dp) const;
    /// The block of dimension `dim` that the rank with the given tp/dp index
    /// holds.
    int64_t getBlockIndex(int64_t dim, int64_t tpIndex, int64_t dpIndex,
                          int64_t tp) const;
  }];
}

#endif // ZPLAN_DIALECTS_DIST_ZDATTRS_TD
