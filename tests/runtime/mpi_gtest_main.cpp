// The main() of the runtime tests that run under mpirun: MPI around GoogleTest. Every rank prints its own
// report (a failure may happen on one rank only); the exit code is the worst over the ranks.
//
// A run that tested nothing fails too. Each ctest case selects its tests by a filter on the world size
// (--gtest_filter=World2.*), and the tests skip themselves when the launch has another world: a filter that
// matches no test (a renamed suite) or a test skipped under the launch meant for it would otherwise pass
// having compared nothing.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest &u = *::testing::UnitTest::GetInstance();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (u.test_to_run_count() == 0) {
    std::fprintf(stderr, "rank %d: FAIL: no test ran (the filter matches none)\n", rank);
    rc = 1;
  } else if (u.skipped_test_count() > 0) {
    std::fprintf(stderr, "rank %d: FAIL: %d test(s) skipped under the launch meant for them\n", rank,
                 u.skipped_test_count());
    rc = 1;
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
