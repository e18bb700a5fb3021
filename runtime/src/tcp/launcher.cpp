// make_communicator_from_env: which host communicator the launcher's environment asks for.
//
// mpirun (Open MPI, MPICH, Intel MPI through PMI, Slurm's PMIx) gives an MPI world, found by the variables
// each sets in every rank. torchrun gives no MPI world, only RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT:
// those start the TCP communicator. Without either, the process is a world of one, as it always was (MPI's
// singleton start). ZRT_COMM=mpi|tcp decides explicitly, e.g. for torchrun's variables inside an MPI job.
#include <cstdlib>
#include <cstring>
#include <string>

#include "zrt/communicator.h"

namespace zrt {

namespace {

bool under_mpi_launcher() {
  for (const char *v : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

Status make_tcp_from_env(std::unique_ptr<Communicator> *out) {
  TcpConfig c;
  Status s = tcp_config_from_env(&c);
  if (!s.ok()) return s.with_context("the TCP communicator (torchrun's environment)");
  return make_tcp_communicator(c, out);
}

}  // namespace

Status make_communicator_from_env(std::unique_ptr<Communicator> *out) {
  if (const char *c = std::getenv("ZRT_COMM")) {
    if (std::strcmp(c, "mpi") == 0) return make_mpi_communicator(out);
    if (std::strcmp(c, "tcp") == 0) return make_tcp_from_env(out);
    return error(Code::invalid_argument, std::string("ZRT_COMM='") + c + "': expected mpi or tcp");
  }
  if (under_mpi_launcher()) return make_mpi_communicator(out);
  const char *w = std::getenv("WORLD_SIZE");
  if (w && std::strtol(w, nullptr, 10) > 1) return make_tcp_from_env(out);
  return make_mpi_communicator(out);
}

}  // namespace zrt
