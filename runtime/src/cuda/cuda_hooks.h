// The link between the CUDA backend and the NCCL communicator that zrt/backend.h and zrt/communicator.h
// do not carry: while the backend waits for its stream, it asks the communicator (if one registered)
// whether a collective failed or has hung, so that a dead peer ends the run with an error instead of a
// hang. The communicator aborts its NCCL communicators before it reports the failure.
#ifndef ZRT_CUDA_CUDA_HOOKS_H
#define ZRT_CUDA_CUDA_HOOKS_H

#include "zrt/status.h"

namespace zrt {

/// Called while a stream wait has lasted `waited_s` seconds; returns an error to stop waiting.
using CommWatch = Status (*)(void *ctx, double waited_s);
/// Registers (or, with fn == nullptr, removes) the watch. One at a time per process.
void set_comm_watch(CommWatch fn, void *ctx);
/// Runs the registered watch, if any.
Status poll_comm_watch(double waited_s);
/// Waits for `stream` (a cudaStream_t) to drain, polling the watch; the only wait the CUDA runtime code uses.
Status wait_stream(void *stream);

}  // namespace zrt

#endif  // ZRT_CUDA_CUDA_HOOKS_H
