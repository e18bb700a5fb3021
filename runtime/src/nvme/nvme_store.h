// The NVMe store of a plan (plan 2.3, docs/nvme.md): one file per rank that holds every tensor of the plan's
// nvme space at the offsets the compiler planned, read into and written from host staging buffers with
// direct I/O (O_DIRECT) by a small pool of threads, so that reads run ahead of their use while the executor
// issues other instructions.
//
// The store counts what it moves: every byte read or written by a completed request is added to the
// counters, so the figures a run reports are what the disk was asked for, not what the plan promised.
#ifndef ZRT_NVME_STORE_H
#define ZRT_NVME_STORE_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "zrt/status.h"

namespace zrt {

/// Host memory aligned for direct I/O (load time and state reads; the staging buffers of a run are the
/// plan's, in the host arena).
class AlignedBuffer {
 public:
  AlignedBuffer(size_t bytes, size_t alignment);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
  uint8_t *data() const { return p_; }
  bool ok() const { return p_ != nullptr || n_ == 0; }

 private:
  uint8_t *p_ = nullptr;
  size_t n_ = 0;
};

class NvmeStore {
 public:
  /// A submitted request; wait() on it before touching its buffer or file range.
  using Ticket = uint64_t;

  ~NvmeStore();

  /// Creates (or replaces) `dir`/`file_name` of `bytes` bytes, zero-filled. `alignment` is the plan's: every
  /// request's offset, size and buffer address are multiples of it. Refuses, naming the folder, a path that
  /// does not exist, is not a folder, is not writable or has fewer than `bytes` bytes free. Direct I/O is
  /// used where the file system takes it; where it does not (tmpfs), the store says so in `note` and uses
  /// ordinary reads and writes, so that the same plan still runs.
  static Status open(const std::string &dir, const std::string &file_name, uint64_t bytes, uint32_t alignment,
                     int threads, std::unique_ptr<NvmeStore> *out, std::string *note);

  /// Queues a read of [offset, offset + bytes) of the file into `dst` / a write of `src` there.
  Status submit_read(uint64_t offset, void *dst, uint64_t bytes, Ticket *ticket);
  Status submit_write(uint64_t offset, const void *src, uint64_t bytes, Ticket *ticket);
  /// Blocks until the request is done; returns its status (an I/O error names the file and the range).
  Status wait(Ticket ticket);
  /// Blocks until every request submitted so far is done.
  Status wait_all();

  /// Synchronous transfers for load time and for state reads and writes between runs. They go through the
  /// same counters.
  Status read(uint64_t offset, void *dst, uint64_t bytes);
  Status write(uint64_t offset, const void *src, uint64_t bytes);

  const std::string &path() const { return path_; }
  uint64_t file_bytes() const { return bytes_; }
  bool direct() const { return direct_; }
  uint32_t alignment() const { return alignment_; }
  /// Bytes moved by completed requests since the store was opened.
  uint64_t bytes_read() const { return read_.load(); }
  uint64_t bytes_written() const { return written_.load(); }

 private:
  struct Request {
    Ticket ticket = 0;
    bool write = false;
    uint64_t offset = 0, bytes = 0;
    void *buf = nullptr;
  };
  /// A read into `buf` (write false) or a write from it (a write's buffer is only read, so it may be const).
  static Request request(bool write, uint64_t offset, const void *buf, uint64_t bytes);
  NvmeStore() = default;
  Status check(uint64_t offset, const void *buf, uint64_t bytes, const char *what) const;
  Status transfer(const Request &r);
  Status submit(Request r, Ticket *ticket);
  void worker();

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  uint32_t alignment_ = 4096;
  uint64_t bytes_ = 0;
  std::atomic<uint64_t> read_{0}, written_{0};

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Request> queue_;
  // Tickets are handed out in order. `outstanding_` counts requests queued or running; `finished_` holds
  // the status of each finished request until it is waited for (wait_all() clears it).
  Ticket next_ = 1;
  uint64_t outstanding_ = 0;
  std::unordered_map<Ticket, Status> finished_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace zrt

#endif  // ZRT_NVME_STORE_H
