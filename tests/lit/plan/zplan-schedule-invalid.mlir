// RUN: zplan-opt --allow-unregistered-dialect --split-input-file --verify-diagnostics --zplan-schedule %s

// Tests that an op with a region is refused: a collective under control flow
// could run on some ranks and not on others.
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error@+1 {{zplan-schedule: ops with regions are not supported}}
    "test.region"() ({
      %r = zd.all_reduce %x {axis = "tp"} : tensor<4xf32>
      "test.yield"() : () -> ()
    }) : () -> ()
    return %x : tensor<4xf32>
  }
}

// -----

// Tests that a module without a public function body has no program.
// expected-error@+1 {{zplan: the module has no public function with a body (each one is a program of the plan)}}
module {
  func.func private @main(tensor<4xf32>) -> tensor<4xf32>
}

// -----

// Tests that a collective on an element type the plan cannot store is
// refused (it could not enter the collective hash).
module attributes {zd.tp = 2 : i64} {
  func.func @main(%x: tensor<4xi8>) -> tensor<4xi8> {
    // expected-error@+1 {{zplan-schedule: collective on unsupported element type 'i8'}}
    %r = zd.all_reduce %x {axis = "tp"} : tensor<4xi8>
    return %r : tensor<4xi8>
  }
}
