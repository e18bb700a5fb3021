// RUN: not zplan-opt %s "--zplan-attention-kernels=kernel=nope" 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not zplan-opt %s "--zplan-attention-kernels=kernel=wg2 arch=80" 2>&1 | FileCheck %s --check-prefix=ARCH
// RUN: not zplan-opt %s "--zplan-attention-kernels=arch=9" 2>&1 | FileCheck %s --check-prefix=NUMBER

// Tests the pass's refusals: a kernel the table does not have (the message
// lists the ones it has), a wgmma kernel for a device other than sm_90, and an
// arch that is no compute capability.
// NAME: error: --attention-kernel 'nope' is not a CUDA attention kernel; the kernels: rows, wmma, old, {{.*}}, wg2, wg2r, wg2pp
// ARCH: error: --attention-kernel wg2 needs wgmma code built for sm_90a: compute capability 9.0 only, but --cuda-arch is sm_80
// NUMBER: error: --zplan-attention-kernels: arch 9 is not a compute capability (90 for sm_90)
func.func @f(%q: tensor<1x2x8x64xf32>) -> tensor<1x2x8x64xf32> {
  %a = zg.attention %q, %q, %q {causal = true, scale = 0.125 : f64} : (tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x2x8x64xf32>) -> tensor<1x2x8x64xf32>
  return %a : tensor<1x2x8x64xf32>
}
