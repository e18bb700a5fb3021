// The main() of the runtime tests that run under mpirun: MPI around GoogleTest. Every rank prints its own
// report (a failure may happen on one rank only); the exit code is the worst over the ranks.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
