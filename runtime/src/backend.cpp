// Backend selection. The CUDA backend registers here when the build has it (ZRT_HAVE_CUDA).
#include "zrt/backend.h"

namespace zrt {

#ifdef ZRT_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend();
#endif

Status make_backend(BackendKind kind, std::unique_ptr<Backend> *out) {
  switch (kind) {
    case BackendKind::cpu: *out = make_cpu_backend(); return {};
    case BackendKind::cuda:
#ifdef ZRT_HAVE_CUDA
      *out = make_cuda_backend();
      return {};
#else
      return error(Code::mismatch, "this zrt was built without the cuda backend");
#endif
  }
  return error(Code::invalid_argument, "unknown backend");
}

}  // namespace zrt
