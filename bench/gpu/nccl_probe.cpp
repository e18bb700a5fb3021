// Measures what one NCCL communicator costs in device memory and what it delivers, under the configuration
// the runtime uses (runtime/src/nccl/nccl_communicator.cpp) or another one given through the environment:
//   mpirun -np 2 -x NCCL_NVLS_ENABLE=0 [-x NCCL_RUNTIME_CONNECT=0] zplan_nccl_probe [CTAS]
// One process per GPU. Each rank prints one JSON line: device bytes in use (cudaMemGetInfo) after the
// context, after ncclCommInitRankConfig, and after an all_reduce, all_gather and reduce_scatter of 32 MiB
// (its own buffers subtracted), and the median all_reduce time over 20 runs with its bus bandwidth.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

size_t used_bytes() {
  size_t free_b = 0, total_b = 0;
  cudaDeviceSynchronize();
  cudaMemGetInfo(&free_b, &total_b);
  return total_b - free_b;
}

#define CHECK(cond, what)                                              \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "nccl_probe: %s failed (line %d)\n", what, __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                    \
    }                                                                  \
  } while (0)

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int ctas = argc > 1 ? std::atoi(argv[1]) : 0;
  int ngpu = 0;
  CHECK(cudaGetDeviceCount(&ngpu) == cudaSuccess && ngpu >= world, "one GPU per rank");
  CHECK(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
  cudaFree(nullptr);
  const size_t base = used_bytes();
  ncclUniqueId id;
  if (rank == 0) CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (ctas > 0) {
    config.minCTAs = ctas;
    config.maxCTAs = ctas;
  }
  ncclComm_t comm;
  CHECK(ncclCommInitRankConfig(&comm, world, id, rank, &config) == ncclSuccess, "ncclCommInitRankConfig");
  const size_t after_init = used_bytes();
  const size_t bytes = size_t{32} << 20;
  void *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, bytes * world) == cudaSuccess && cudaMalloc(&b, bytes * world) == cudaSuccess, "cudaMalloc");
  cudaMemset(a, 0, bytes * world);
  const size_t buffers = used_bytes() - after_init;
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  const size_t count = bytes / 2;  // bf16 elements
  CHECK(ncclAllReduce(a, b, count, ncclBfloat16, ncclSum, comm, st) == ncclSuccess, "ncclAllReduce");
  CHECK(ncclAllGather(a, b, bytes, ncclUint8, comm, st) == ncclSuccess, "ncclAllGather");
  CHECK(ncclReduceScatter(a, b, count / world, ncclBfloat16, ncclSum, comm, st) == ncclSuccess, "ncclReduceScatter");
  // Small messages too: they pick the LL protocols and the tree, which connect lazily otherwise.
  CHECK(ncclAllReduce(a, b, 1024, ncclBfloat16, ncclSum, comm, st) == ncclSuccess, "ncclAllReduce small");
  cudaStreamSynchronize(st);
  const size_t after_coll = used_bytes() - buffers;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int i = 0; i < 25; ++i) {
    cudaEventRecord(e0, st);
    ncclAllReduce(a, b, count, ncclBfloat16, ncclSum, comm, st);
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (i >= 5) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  // Bus bandwidth of an all_reduce: 2 (n - 1) / n of the bytes per rank, over the time.
  const double busbw = 2.0 * (world - 1) / world * static_cast<double>(bytes) / (med * 1e-3) / 1e9;
  const char *rc = std::getenv("NCCL_RUNTIME_CONNECT");
  const char *bs = std::getenv("NCCL_BUFFSIZE");
  std::printf("{\"rank\": %d, \"ctas\": %d, \"runtime_connect\": \"%s\", \"buffsize\": \"%s\", \"context_mib\": %.1f, "
              "\"init_mib\": %.1f, \"after_collectives_mib\": %.1f, \"allreduce_32mib_ms\": %.4f, \"busbw_gbs\": %.1f}\n",
              rank, ctas, rc ? rc : "", bs ? bs : "", base / 1048576.0, (after_init - base) / 1048576.0,
              (after_coll - base) / 1048576.0, med, busbw);
  std::fflush(stdout);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
