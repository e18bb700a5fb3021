// RUN: zplan-opt %s --split-input-file --zplan-decode-products="fuse=true choose-kernel=true few-rows-max=8 few-rows-max-bytes=4096 stream-kernel=true" | FileCheck %s
// RUN: zplan-opt %s --split-input-file --zplan-decode-products="fuse=true choose-kernel=true few-rows-max=8 few-rows-max-bytes=4096" | FileCheck %s --check-prefix=OFF
// RUN: zplan-opt %s --split-input-file --zplan-decode-products="choose-kernel=true few-rows-max=8 few-rows-max-bytes=128 few-rows-stream-max-bytes=4096 stream-kernel=true" | FileCheck %s --check-prefix=CAP

// Tests that stream-kernel names the streaming few-row kernel
// (zd.kernel = "few_rows_stream", plan 2.14's kernel code 2) on the fused
// products and the products choose-kernel marked that it holds (W [K, N],
// at most 4 rows, every width a multiple of 8: zk/few_rows_kernels.h): at
// one row the q/k/v launch (8, 8 and 16 wide), the gate/up pair and o; not
// a product 12 wide nor one of W [N, K], which keep the cluster kernels
// ("few_rows"). Without stream-kernel every product keeps them (the fused
// ones carry no zd.kernel).
// CHECK-LABEL: func.func @decode
// CHECK: zg.linear_multi %arg0, %arg3, %arg4, %arg5 {zd.kernel = "few_rows_stream"}
// CHECK: zg.linear_gated %arg1, %arg6, %arg7 {act = "silu", zd.kernel = "few_rows_stream"}
// CHECK: zg.linear %arg2, %arg8 {zd.kernel = "few_rows_stream"}
// CHECK: zg.linear %{{.*}}, %arg9 {zd.kernel = "few_rows"}
// CHECK: zg.linear %{{.*}}, %arg10 {trans_w = true, zd.kernel = "few_rows"}
// OFF-LABEL: func.func @decode
// OFF: zg.linear_multi %arg0, %arg3, %arg4, %arg5 :
// OFF: zg.linear_gated %arg1, %arg6, %arg7 {act = "silu"} :
// OFF: zg.linear %arg2, %arg8 {zd.kernel = "few_rows"}
// OFF-NOT: few_rows_stream
func.func @decode(%x: tensor<1x1x8xf32>, %y: tensor<1x1x8xf32>, %z: tensor<1x1x8xf32>, %wq: tensor<8x8xf32>, %wk: tensor<8x8xf32>, %wv: tensor<8x16xf32>, %wg: tensor<8x16xf32>, %wu: tensor<8x16xf32>, %wo: tensor<8x8xf32>, %w12: tensor<8x12xf32>, %wt: tensor<16x8xf32>) -> (tensor<1x1x16xf32>, tensor<1x1x16xf32>, tensor<1x1x8xf32>, tensor<1x1x12xf32>, tensor<1x1x16xf32>) {
  %q = zg.linear %x, %wq : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
  %k = zg.linear %x, %wk : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
  %v = zg.linear %x, %wv : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
  %g = zg.linear %y, %wg : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
  %u = zg.linear %y, %wu : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
  %m = zg.gated %g, %u {act = "silu"} : (tensor<1x1x16xf32>, tensor<1x1x16xf32>) -> tensor<1x1x16xf32>
  %o = zg.linear %z, %wo : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
  %p = zg.linear %q, %w12 : (tensor<1x1x8xf32>, tensor<8x12xf32>) -> tensor<1x1x12xf32>
  %t = zg.linear %k, %wt {trans_w = true} : (tensor<1x1x8xf32>, tensor<16x8xf32>) -> tensor<1x1x16xf32>
  return %v, %m, %o, %p, %t : tensor<1x1x16xf32>, tensor<1x1x16xf32>, tensor<1x1x8xf32>, tensor<1x1x12xf32>, tensor<1x1x16xf32>
}

// -----

// Tests that at 8 rows (above the streaming kernel's 4) nothing is named for
// it: the fused products carry no zd.kernel, the marked product keeps
// "few_rows".
// CHECK-LABEL: func.func @decode
// CHECK-NOT: few_rows_stream
// CHECK: zg.linear_gated %arg0, %arg1, %arg2 {act = "silu"} :
// CHECK: zg.linear %{{.*}}, %arg3 {zd.kernel = "few_rows"}
// CHECK-NOT: few_rows_stream
func.func @decode(%x: tensor<8x8xf32>, %wg: tensor<8x16xf32>, %wu: tensor<8x16xf32>, %wd: tensor<16x8xf32>) -> tensor<8x8xf32> {
  %g = zg.linear %x, %wg : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %u = zg.linear %x, %wu : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %m = zg.gated %g, %u {act = "silu"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %d = zg.linear %m, %wd : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  return %d : tensor<8x8xf32>
}

// -----

// Tests that few-rows-stream-max-bytes caps the weights of the products the
// streaming kernel holds (1536 bytes here, within 4096: marked for it) apart
// from few-rows-max-bytes, which still caps the others (1152 bytes 12 wide,
// over 128: left to cuBLASLt). With fuse the two are one linear_multi, which
// the streaming kernel does not hold (a width of 12): no zd.kernel.
// CHECK-LABEL: func.func @decode
// CHECK: zg.linear_multi %arg0, %arg1, %arg2 : (tensor<1x24xf32>
// CAP: zg.linear %arg0, %arg1 {zd.kernel = "few_rows_stream"} : (tensor<1x24xf32>
// CAP: zg.linear %arg0, %arg2 : (tensor<1x24xf32>
func.func @decode(%x: tensor<1x24xf32>, %w: tensor<24x16xf32>, %w12: tensor<24x12xf32>) -> (tensor<1x16xf32>, tensor<1x12xf32>) {
  %a = zg.linear %x, %w : (tensor<1x24xf32>, tensor<24x16xf32>) -> tensor<1x16xf32>
  %b = zg.linear %x, %w12 : (tensor<1x24xf32>, tensor<24x12xf32>) -> tensor<1x12xf32>
  return %a, %b : tensor<1x16xf32>, tensor<1x12xf32>
}
