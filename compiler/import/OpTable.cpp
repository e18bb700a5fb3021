//===- OpTable.cpp - The ONNX ops the importer accepts --------------------===//
//
// One entry per ONNX op of the default domain: the first opset at which the
// importer knows the op's form, the inputs that must be present, the handler
// (one file per op family) and whether the handler takes compactly stored
// constants. An op missing here, or used below its `since` opset, is refused
// by checkOps with every other such op of the model at once.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/Importer.h"

using namespace zplan::import::detail;

const llvm::StringMap<OpEntry> &zplan::import::detail::opTable() {
  // clang-format off
  // {op, {since, required inputs, handler, takes compact constants}}
  static const llvm::StringMap<OpEntry> table = {
      // Elementwise (ElementwiseOps.cpp).
      {"Add", {1, 2, &Importer::importElementwise, true}},
      {"Sub", {1, 2, &Importer::importElementwise, true}},
      {"Mul", {1, 2, &Importer::importElementwise, true}},
      {"Div", {1, 2, &Importer::importElementwise, true}},
      {"Pow", {1, 2, &Importer::importElementwise, true}},
      {"Max", {1, 1, &Importer::importElementwise, true}},
      {"Min", {1, 1, &Importer::importElementwise, true}},
      {"Sum", {1, 1, &Importer::importElementwise, true}},
      {"Mod", {10, 2, &Importer::importElementwise, true}},
      {"Neg", {1, 1, &Importer::importElementwise, true}},
      {"Exp", {1, 1, &Importer::importElementwise, true}},
      {"Log", {1, 1, &Importer::importElementwise, true}},
      {"Sqrt", {1, 1, &Importer::importElementwise, true}},
      {"Reciprocal", {1, 1, &Importer::importElementwise, true}},
      {"Tanh", {1, 1, &Importer::importElementwise, true}},
      {"Erf", {9, 1, &Importer::importElementwise, true}},
      {"Sigmoid", {1, 1, &Importer::importElementwise, true}},
      {"Relu", {1, 1, &Importer::importElementwise, true}},
      {"Cos", {7, 1, &Importer::importElementwise, true}},
      {"Sin", {7, 1, &Importer::importElementwise, true}},
      {"Abs", {1, 1, &Importer::importElementwise, true}},
      {"Floor", {1, 1, &Importer::importElementwise, true}},
      {"Ceil", {1, 1, &Importer::importElementwise, true}},
      {"Sign", {9, 1, &Importer::importElementwise, true}},
      {"Equal", {1, 2, &Importer::importElementwise, true}},
      {"Less", {1, 2, &Importer::importElementwise, true}},
      {"Greater", {1, 2, &Importer::importElementwise, true}},
      {"LessOrEqual", {12, 2, &Importer::importElementwise, true}},
      {"GreaterOrEqual", {12, 2, &Importer::importElementwise, true}},
      {"And", {1, 2, &Importer::importElementwise, true}},
      {"Or", {1, 2, &Importer::importElementwise, true}},
      {"Xor", {1, 2, &Importer::importElementwise, true}},
      {"Not", {1, 1, &Importer::importElementwise, true}},
      {"IsNaN", {9, 1, &Importer::importElementwise, true}},
      {"Cast", {1, 1, &Importer::importCast, true}},
      {"Where", {9, 3, &Importer::importWhere, true}},
      {"Trilu", {14, 1, &Importer::importTrilu, false}},
      {"Gelu", {20, 1, &Importer::importGelu, false}},
      // Linear algebra (LinalgOps.cpp).
      {"MatMul", {1, 2, &Importer::importMatMul, false}},
      {"Gemm", {1, 2, &Importer::importGemm, false}},
      // Shape and layout (ShapeOps.cpp).
      {"Reshape", {5, 2, &Importer::importReshapeLike, false}},
      {"Flatten", {1, 1, &Importer::importReshapeLike, false}},
      {"Squeeze", {1, 1, &Importer::importReshapeLike, false}},
      {"Unsqueeze", {1, 1, &Importer::importReshapeLike, true}},
      {"Transpose", {1, 1, &Importer::importTranspose, false}},
      {"Concat", {1, 1, &Importer::importConcat, false}},
      {"Slice", {10, 3, &Importer::importSlice, false}},
      {"Split", {1, 1, &Importer::importSplit, false}},
      {"Expand", {8, 2, &Importer::importExpand, true}},
      {"Tile", {6, 2, &Importer::importTile, false}},
      {"Range", {11, 3, &Importer::importRange, false}},
      {"Shape", {1, 1, &Importer::importShapeOf, true}},
      {"Size", {1, 1, &Importer::importShapeOf, true}},
      // Gather (GatherOps.cpp).
      {"Gather", {1, 2, &Importer::importGather, false}},
      {"GatherElements", {11, 2, &Importer::importGatherElements, false}},
      {"GatherND", {11, 2, &Importer::importGatherND, false}},
      {"ScatterND", {11, 3, &Importer::importScatterND, false}},
      // Reductions and normalisation (ReductionOps.cpp).
      {"ReduceSum", {1, 1, &Importer::importReduce, false}},
      {"ReduceMean", {1, 1, &Importer::importReduce, false}},
      {"ReduceMax", {1, 1, &Importer::importReduce, false}},
      {"ReduceMin", {1, 1, &Importer::importReduce, false}},
      {"ReduceProd", {1, 1, &Importer::importReduce, false}},
      {"CumSum", {11, 2, &Importer::importCumSum, false}},
      {"Softmax", {1, 1, &Importer::importSoftmax, false}},
      {"LayerNormalization", {17, 2, &Importer::importLayerNorm, false}},
      // Constants and plumbing (ControlOps.cpp).
      {"Constant", {1, 0, &Importer::importConstant, false}},
      {"ConstantOfShape", {9, 1, &Importer::importConstantOfShape, false}},
      {"Identity", {1, 1, &Importer::importIdentity, true}},
      {"Dropout", {1, 1, &Importer::importIdentity, true}},
      {"If", {1, 1, &Importer::importIf, false}},
  };
  // clang-format on
  return table;
}
