# MLIR 22 and the ONNX/protobuf stack for the compiler half. Included only when ZPLAN_BUILD_COMPILER is on,
# so that nothing of this leaks into the runtime's targets.
find_package(MLIR REQUIRED CONFIG HINTS /usr/lib/llvm-22/lib/cmake/mlir)
message(STATUS "zplan: MLIR ${MLIR_DIR}, LLVM ${LLVM_PACKAGE_VERSION}")
list(APPEND CMAKE_MODULE_PATH ${MLIR_CMAKE_DIR} ${LLVM_CMAKE_DIR})
set(LLVM_RUNTIME_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/bin)
set(LLVM_LIBRARY_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/lib)
set(MLIR_BINARY_DIR ${CMAKE_BINARY_DIR})
# Debian's LLVM config points at a missing llvm-lit.
set(LLVM_EXTERNAL_LIT /usr/lib/llvm-22/bin/lit CACHE STRING "" FORCE)
include(TableGen)
include(AddLLVM)
include(AddMLIR)
# HandleLLVMOptions would add -fno-exceptions and friends globally; the flags it sets are kept to the
# compiler's targets through zplan_compiler_options() below instead.
separate_arguments(ZPLAN_LLVM_DEFINITIONS NATIVE_COMMAND "${LLVM_DEFINITIONS}")

find_package(Protobuf REQUIRED)
find_package(ONNX REQUIRED CONFIG)

# Options for every compiler-side target: LLVM's defines and include paths, and the one shared MLIR
# library. Every compiler target links libMLIR.so (never the static component libraries: mixing the two
# duplicates global registries), which keeps links fast on small machines.
function(zplan_compiler_options target)
  target_include_directories(${target} SYSTEM PUBLIC ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_definitions(${target} PUBLIC ${ZPLAN_LLVM_DEFINITIONS})
  target_link_libraries(${target} PUBLIC MLIR LLVM)
endfunction()
