// The NCCL communicator: collectives on device memory over one NCCL communicator per mesh group (tp, dp,
// world), bootstrapped over the host communicator it wraps, MPI under mpirun or TCP under torchrun (world
// rank 0 makes one unique id per group and broadcasts them all); the control plane (agreement, host
// broadcasts, output gathers) stays on that communicator.
#ifndef ZRT_NCCL_NCCL_COMMUNICATOR_H
#define ZRT_NCCL_NCCL_COMMUNICATOR_H

#include <memory>

#include "zrt/communicator.h"

namespace zrt {

// make_nccl_communicator() is declared in zrt/communicator.h. It wraps an MPI or TCP communicator over the world;
// NCCL communicators are created by set_mesh() (none for a group of one, where a collective is a copy).
// Collectives are enqueued on the stream they are given (the CUDA backend's native_stream()); their errors
// and hangs are caught asynchronously (ncclCommGetAsyncError, a timeout of ZRT_NCCL_TIMEOUT_S seconds,
// default 600) while the backend waits, and end in ncclCommAbort rather than a hang.

}  // namespace zrt

#endif  // ZRT_NCCL_NCCL_COMMUNICATOR_H
