// main() of the GPU tests: without a usable CUDA device they report themselves skipped (exit code 77,
// which ctest maps to "skipped" through SKIP_RETURN_CODE) instead of failing.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "zk/cuda_kernels.h"

int main(int argc, char **argv) {
  std::string why;
  if (!zk::cuda::device_usable(0, &why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
