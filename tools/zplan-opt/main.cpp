//===- main.cpp - zplan-opt -----------------------------------------------===//
//
// Runs single passes over .mlir files for the lit tests.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/InitAll.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  zplan::registerAllDialects(registry);
  zplan::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "zplan pass driver\n", registry));
}
