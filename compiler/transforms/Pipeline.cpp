//===- Pipeline.cpp - the recognition pipeline ----------------------------===//
//
// The order matters where one recognised op feeds another pattern: GELU,
// SiLU and the rotary embedding first (they only look at elementwise and
// data-movement ops), then norms and softmax,
// then linear layers (which the attention pattern does not depend on), then
// attention, embeddings and the tied-weight marking that needs both
// embeddings and linears.
//
//===----------------------------------------------------------------------===//

#include "compiler/transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void zplan::transforms::buildRecognitionPipeline(OpPassManager &pm) {
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(createRecogniseGelu());
  fn.addPass(createRecogniseSilu());
  fn.addPass(createRecogniseRotary());
  fn.addPass(createRecogniseLayerNorm());
  fn.addPass(createRecogniseRmsNorm());
  fn.addPass(createRecogniseSoftmax());
  fn.addPass(createRecogniseLinear());
  fn.addPass(createRecogniseAttention());
  fn.addPass(createRecogniseEmbedding());
  fn.addPass(createRecogniseTiedEmbedding());
}

void zplan::transforms::registerRecognitionPipeline() {
  PassPipelineRegistration<>(
      "zg-recognise", "Run every recognition pass, as zplan import does",
      [](OpPassManager &pm) { buildRecognitionPipeline(pm); });
}
