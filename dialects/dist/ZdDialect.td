//===- ZdDialect.td - the zplan distribution dialect --------*- tablegen -*-===//
//
// The `zd` dialect describes how tensors are distributed over the device mesh
// (tp x dp) and the communication and memory traffic that distribution needs:
// sharding annotations, collectives, ZeRO parameter gather/release and
// host/device transfers. See docs/dist-contract.md.
//
//===----------------------------------------------------------------------===//

#ifndef ZPLAN_DIALECTS_DIST_ZDDIALECT_TD
#define ZPLAN_DIALECTS_DIST_ZDDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Zd_Dialect : Dialect {
  let name = "zd";
  let summary = "zplan distribution dialect: mesh shardings, collectives, ZeRO, offload";
  let description = [{
    The mesh is given by the module attributes `zd.tp` and `zd.dp`
    (world = tp * dp; rank r has tp index r % tp and dp index r / tp).
    After tensor-parallel partitioning every tensor type is rank-local; the
    ops of this dialect move data between ranks or memory spaces.
  }];
  let cppNamespace = "::zplan::dist";
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    /// Names of the module attributes that hold the mesh.
    static constexpr llvm::StringLiteral kTpAttrName = "zd.tp";
    static constexpr llvm::StringLiteral kDpAttrName = "zd.dp";
  }];
}

class Zd_Op<string mnemonic, list<Trait> traits = []>
    : Op<Zd_Dialect, mnemonic, traits>;

#endif // ZPLAN_DIALECTS_DIST_ZDDIALECT_TD
