// RUN: zplan-opt %s --split-input-file --zplan-attention-kernels=dtype=bf16 | FileCheck %s --check-prefix=SM90
// RUN: zplan-opt %s --split-input-file "--zplan-attention-kernels=dtype=bf16 arch=80" | FileCheck %s --check-prefix=SM80
// RUN: zplan-opt %s --split-input-file "--zplan-attention-kernels=dtype=bf16 kernel=fa4x2" | FileCheck %s --check-prefix=AB
// RUN: zplan-opt %s --split-input-file --zplan-attention-kernels=dtype=fp32 | FileCheck %s --check-prefix=FP32

// Tests the compiler's choice of each attention's CUDA kernel (plan 2.11,
// kernels/cuda/include/zk/attention_kernels.h). In a bf16 plan, head dims 64
// and 128 take the tensor-core kernels: the wgmma kernel wg3 for sm_90 (the
// default arch), the register kernels elsewhere (fa4x1r at head dim 64, fa4x1
// at 128); kernel=NAME (zplan --attention-kernel) replaces that choice. Head
// dim 32, and every attention of an fp32 plan, run the exact kernel, rows.
// SM90-LABEL: func.func @heads
// SM90: zg.attention {{.*}}zd.kernel = "wg3"{{.*}} -> tensor<1x2x8x64xf32>
// SM90: zg.attention {{.*}}zd.kernel = "wg3"{{.*}} -> tensor<1x2x8x128xf32>
// SM90: zg.attention {{.*}}zd.kernel = "rows"{{.*}} -> tensor<1x2x8x32xf32>
// SM80-LABEL: func.func @heads
// SM80: zg.attention {{.*}}zd.kernel = "fa4x1r"{{.*}} -> tensor<1x2x8x64xf32>
// SM80: zg.attention {{.*}}zd.kernel = "fa4x1"{{.*}} -> tensor<1x2x8x128xf32>
// SM80: zg.attention {{.*}}zd.kernel = "rows"{{.*}} -> tensor<1x2x8x32xf32>
// AB-LABEL: func.func @heads
// AB: zg.attention {{.*}}zd.kernel = "fa4x2"{{.*}} -> tensor<1x2x8x64xf32>
// AB: zg.attention {{.*}}zd.kernel = "fa4x2"{{.*}} -> tensor<1x2x8x128xf32>
// AB: zg.attention {{.*}}zd.kernel = "rows"{{.*}} -> tensor<1x2x8x32xf32>
// FP32-LABEL: func.func @heads
// FP32-COUNT-3: zd.kernel = "rows"
func.func @heads(%q64: tensor<1x2x8x64xf32>, %q128: tensor<1x2x8x128xf32>, %q32: tensor<1x2x8x32xf32>) -> (tensor<1x2x8x64xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8x32xf32>) {
  %a = zg.attention %q64, %q64, %q64 {causal = true, scale = 0.125 : f64} : (tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>) -> tensor<1x2x8x64xf32>
  %b = zg.attention %q128, %q128, %q128 {causal = true, scale = 0.125 : f64} : (tensor<1x2x8x128xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8x128xf32>) -> tensor<1x2x8x128xf32>
  %c = zg.attention %q32, %q32, %q32 {causal = true, scale = 0.125 : f64} : (tensor<1x2x8x32xf32>, tensor<1x2x8x32xf32>, tensor<1x2x8x32xf32>) -> tensor<1x2x8x32xf32>
  return %a, %b, %c : tensor<1x2x8x64xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8x32xf32>
}

// -----

// Packed operands (a fused q/k/v projection read in place): rows start at
// element offsets that are multiples of 8 (16 bytes in bf16) and the row
// stride is one too, so the tensor-core kernels take the first attention;
// an offset of 4 (8 bytes) leaves the second to the exact kernel on every arch.
// SM90-LABEL: func.func @packed
// SM90: zg.attention {{.*}}zd.kernel = "wg3"
// SM90: zg.attention {{.*}}zd.kernel = "rows"
// SM80-LABEL: func.func @packed
// SM80: zg.attention {{.*}}zd.kernel = "fa4x1r"
// SM80: zg.attention {{.*}}zd.kernel = "rows"
func.func @packed(%x: tensor<1x8x392xf32>) -> (tensor<1x8x2x64xf32>, tensor<1x8x2x64xf32>) {
  %a = zg.attention %x, %x, %x {causal = true, packed = array<i64: 0, 392, 2, 128, 392, 2, 256, 392, 2>, scale = 0.125 : f64, seq_major = 15 : i64} : (tensor<1x8x392xf32>, tensor<1x8x392xf32>, tensor<1x8x392xf32>) -> tensor<1x8x2x64xf32>
  %b = zg.attention %x, %x, %x {causal = true, packed = array<i64: 4, 392, 2, 132, 392, 2, 260, 392, 2>, scale = 0.125 : f64, seq_major = 15 : i64} : (tensor<1x8x392xf32>, tensor<1x8x392xf32>, tensor<1x8x392xf32>) -> tensor<1x8x2x64xf32>
  return %a, %b : tensor<1x8x2x64xf32>, tensor<1x8x2x64xf32>
}

// -----

// The backward: the register kernels (mma) at head dim 64, WMMA at 128, the
// exact kernel at 32 and in fp32 plans; the arch does not change it.
// SM90-LABEL: func.func @backward
// SM90: zg.attention_grad {{.*}}zd.kernel = "mma"
// SM90: zg.attention_grad {{.*}}zd.kernel = "wmma"
// SM90: zg.attention_grad {{.*}}zd.kernel = "exact"
// SM80-LABEL: func.func @backward
// SM80: zg.attention_grad {{.*}}zd.kernel = "mma"
// SM80: zg.attention_grad {{.*}}zd.kernel = "wmma"
// FP32-LABEL: func.func @backward
// FP32-COUNT-3: zd.kernel = "exact"
func.func @backward(%q64: tensor<1x2x8x64xf32>, %l: tensor<1x2x8xf32>, %q128: tensor<1x2x8x128xf32>, %q32: tensor<1x2x8x32xf32>) -> (tensor<1x2x8x64xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8x32xf32>) {
  %a:3 = zg.attention_grad %q64, %q64, %q64, %q64, %q64, %l {causal = true, scale = 0.125 : f64} : (tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x2x8xf32>) -> (tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>)
  %b:3 = zg.attention_grad %q128, %q128, %q128, %q128, %q128, %l {causal = true, scale = 0.125 : f64} : (tensor<1x2x8x128xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8xf32>) -> (tensor<1x2x8x128xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8x128xf32>)
  %c:3 = zg.attention_grad %q32, %q32, %q32, %q32, %q32, %l {causal = true, scale = 0.125 : f64} : (tensor<1x2x8x32xf32>, tensor<1x2x8x32xf32>, tensor<1x2x8x32xf32>, tensor<1x2x8x32xf32>, tensor<1x2x8x32xf32>, tensor<1x2x8xf32>) -> (tensor<1x2x8x32xf32>, tensor<1x2x8x32xf32>, tensor<1x2x8x32xf32>)
  return %a#0, %b#0, %c#0 : tensor<1x2x8x64xf32>, tensor<1x2x8x128xf32>, tensor<1x2x8x32xf32>
}
