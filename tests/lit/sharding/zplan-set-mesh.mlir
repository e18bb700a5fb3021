// RUN: zplan-opt --split-input-file --zplan-set-mesh="tp=2 dp=4" %s | FileCheck %s
// RUN: zplan-opt --split-input-file --zplan-set-mesh %s | FileCheck %s --check-prefix=DEFAULT

// Tests that the mesh is recorded on the module, replacing an older one.
// CHECK-LABEL: module attributes {zd.dp = 4 : i64, zd.tp = 2 : i64}
// CHECK: func.func @f
// DEFAULT-LABEL: module attributes {zd.dp = 1 : i64, zd.tp = 1 : i64}
module attributes {zd.tp = 8 : i64} {
func.func @f() {
  return
}
}
