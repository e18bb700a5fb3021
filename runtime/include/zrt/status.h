// zrt/status.h - the runtime's one error type and the checking macros for the libraries it calls.
//
// Every fallible runtime function returns a Status. A failed call to an external library is turned into a
// Status that records the library's own message, the expression, the file and the line, by one macro per
// library: ZRT_MPI_CHECK here; the CUDA backend adds ZRT_CUDA_CHECK, ZRT_CUBLAS_CHECK and ZRT_NCCL_CHECK
// in the same shape (a status_from_<lib>() function plus a macro that returns from the enclosing function).
#ifndef ZRT_STATUS_H
#define ZRT_STATUS_H

#include <string>
#include <utility>

namespace zrt {

enum class Code {
  ok = 0,
  invalid_argument,  // a caller's mistake: unknown input name, wrong size, bad flag
  not_found,         // a file that does not exist
  io_error,          // a file that cannot be read, is short or malformed
  plan_invalid,      // the plan failed verification (header, FlatBuffer, indices, shapes, ranges)
  mismatch,          // the plan does not fit the launch, or ranks disagree
  comm_error,        // the communicator (MPI, NCCL) failed
  backend_error,     // a kernel or device call failed
  internal,
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  bool ok() const { return code_ == Code::ok; }
  Code code() const { return code_; }
  const std::string &message() const { return message_; }
  /// Prefixes the message with context ("loading weight 'w1': ...").
  Status with_context(const std::string &ctx) const {
    return ok() ? *this : Status(code_, ctx + ": " + message_);
  }

 private:
  Code code_ = Code::ok;
  std::string message_;
};

inline Status error(Code code, std::string message) { return Status(code, std::move(message)); }

/// Builds the Status of a failed MPI call (rc != MPI_SUCCESS) with MPI's error string.
Status status_from_mpi(int rc, const char *expr, const char *file, int line);

}  // namespace zrt

#define ZRT_RETURN_IF_ERROR(expr)               \
  do {                                          \
    ::zrt::Status zrt_status_ = (expr);         \
    if (!zrt_status_.ok()) return zrt_status_;  \
  } while (0)

/// Returns a comm_error Status from the enclosing function when an MPI call fails. MPI_SUCCESS is 0 by the
/// MPI standard, which keeps this header free of mpi.h.
#define ZRT_MPI_CHECK(expr)                                                      \
  do {                                                                           \
    int zrt_mpi_rc_ = (expr);                                                    \
    if (zrt_mpi_rc_ != 0) return ::zrt::status_from_mpi(zrt_mpi_rc_, #expr, __FILE__, __LINE__); \
  } while (0)

#endif  // ZRT_STATUS_H
