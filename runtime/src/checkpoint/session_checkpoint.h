// Internal: Session::save_checkpoint / load_checkpoint over what the session holds. The session hands over
// only what a checkpoint needs (the plan, the mesh, the control-plane communicator, state access and its
// error agreement), so that the executor's internals stay in session.cpp.
#ifndef ZRT_SRC_CHECKPOINT_SESSION_CHECKPOINT_H
#define ZRT_SRC_CHECKPOINT_SESSION_CHECKPOINT_H

#include <functional>
#include <string>

#include "zrt/communicator.h"
#include "zrt/plan_generated.h"
#include "zrt/zrt.h"

namespace zrt {
namespace ckpt {

struct SessionAccess {
  const zrt::fb::Plan *plan = nullptr;
  RankInfo ri;
  Communicator *comm = nullptr;
  uint64_t plan_hash = 0;
  std::string base_dir;  // the plan's folder: relative weight paths resolve against it
  Session *session = nullptr;
  /// Every rank calls it at the same point; all return the lowest failing rank's error.
  std::function<Status(const Status &)> agree;
};

Status save(const SessionAccess &a, const std::string &root, const TrainingState &ts);
Status load(const SessionAccess &a, const std::string &path, TrainingState *ts, CheckpointInfo *info);

}  // namespace ckpt
}  // namespace zrt

#endif  // ZRT_SRC_CHECKPOINT_SESSION_CHECKPOINT_H
