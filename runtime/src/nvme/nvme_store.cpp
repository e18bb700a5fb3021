// NvmeStore: the rank's file, O_DIRECT where the file system takes it, and a pool of threads that run the
// queued reads and writes (pread / pwrite loops). See nvme_store.h.
#include "nvme/nvme_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>

namespace zrt {

namespace {
std::string errno_text(int e) { return std::strerror(e); }
}  // namespace

AlignedBuffer::AlignedBuffer(size_t bytes, size_t alignment) : n_(bytes) {
  if (!bytes) return;
  const size_t a = alignment < sizeof(void *) ? sizeof(void *) : alignment;
  void *p = nullptr;
  if (::posix_memalign(&p, a, (bytes + a - 1) / a * a) == 0) {
    p_ = static_cast<uint8_t *>(p);
    std::memset(p_, 0, bytes);
  }
}

AlignedBuffer::~AlignedBuffer() { std::free(p_); }

NvmeStore::~NvmeStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread &t : threads_) t.join();
  if (fd_ >= 0) ::close(fd_);
}

Status NvmeStore::open(const std::string &dir, const std::string &file_name, uint64_t bytes, uint32_t alignment,
                       int threads, std::unique_ptr<NvmeStore> *out, std::string *note) {
  if (dir.empty())
    return error(Code::invalid_argument, "the plan keeps tensors on NVMe but names no folder for them: compile with "
                                         "zplan --nvme-path DIR, or run with zrun --nvme-path DIR");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    return error(Code::invalid_argument, "NVMe alignment " + std::to_string(alignment) + " is not a power of two");
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return error(Code::not_found, "NVMe path '" + dir + "': " + errno_text(errno) + " (it must be an existing folder)");
  if (!S_ISDIR(st.st_mode)) return error(Code::invalid_argument, "NVMe path '" + dir + "' is not a folder");
  if (::access(dir.c_str(), W_OK) != 0)
    return error(Code::io_error, "NVMe path '" + dir + "' is not writable: " + errno_text(errno));
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (free_bytes < bytes)
      return error(Code::io_error, "NVMe path '" + dir + "' has " + std::to_string(free_bytes) +
                                       " bytes free; this rank's file needs " + std::to_string(bytes));
  }
  std::unique_ptr<NvmeStore> s(new NvmeStore());
  s->path_ = dir + (dir.back() == '/' ? "" : "/") + file_name;
  s->bytes_ = bytes;
  s->alignment_ = alignment;
  // A file left by an earlier run of the same plan is replaced: its contents are that run's state.
  ::unlink(s->path_.c_str());
  s->fd_ = ::open(s->path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  s->direct_ = s->fd_ >= 0;
  if (s->fd_ < 0 && errno == EINVAL) {
    s->fd_ = ::open(s->path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (note && s->fd_ >= 0)
      *note = "the file system of '" + dir + "' does not take O_DIRECT: the NVMe file uses buffered I/O";
  }
  if (s->fd_ < 0) return error(Code::io_error, "cannot create '" + s->path_ + "': " + errno_text(errno));
  // Zero-filled by extension: states initialised to zero need no writes, and a short disk shows here.
  if (bytes && ::posix_fallocate(s->fd_, 0, static_cast<off_t>(bytes)) != 0 &&
      ::ftruncate(s->fd_, static_cast<off_t>(bytes)) != 0)
    return error(Code::io_error, "cannot size '" + s->path_ + "' to " + std::to_string(bytes) + " bytes: " +
                                     errno_text(errno));
  for (int i = 0; i < (threads > 0 ? threads : 1); ++i) s->threads_.emplace_back([p = s.get()] { p->worker(); });
  *out = std::move(s);
  return {};
}

Status NvmeStore::check(uint64_t offset, const void *buf, uint64_t bytes, const char *what) const {
  const uint64_t a = alignment_;
  if (offset > bytes_ || bytes > bytes_ - offset)
    return error(Code::internal, std::string(what) + " of [" + std::to_string(offset) + ", " +
                                     std::to_string(offset + bytes) + ") runs past the end of '" + path_ + "' (" +
                                     std::to_string(bytes_) + " bytes)");
  if (offset % a || bytes % a || reinterpret_cast<uintptr_t>(buf) % a)
    return error(Code::internal, std::string(what) + " at offset " + std::to_string(offset) + " of " +
                                     std::to_string(bytes) + " bytes is not aligned to " + std::to_string(a) +
                                     " (the plan's NVMe alignment)");
  return {};
}

Status NvmeStore::transfer(const Request &r) {
  auto *p = static_cast<uint8_t *>(r.buf);
  uint64_t done = 0;
  while (done < r.bytes) {
    const off_t at = static_cast<off_t>(r.offset + done);
    const ssize_t n = r.write ? ::pwrite(fd_, p + done, r.bytes - done, at) : ::pread(fd_, p + done, r.bytes - done, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return error(Code::io_error, std::string(r.write ? "writing" : "reading") + " [" + std::to_string(r.offset) +
                                       ", " + std::to_string(r.offset + r.bytes) + ") of '" + path_ + "': " +
                                       (n < 0 ? errno_text(errno) : std::string("end of file")));
    done += static_cast<uint64_t>(n);
  }
  (r.write ? written_ : read_) += r.bytes;
  return {};
}

void NvmeStore::worker() {
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      r = queue_.front();
      queue_.pop_front();
    }
    Status st = transfer(r);
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_[r.ticket] = st;
      --outstanding_;
    }
    done_cv_.notify_all();
  }
}

Status NvmeStore::submit(Request r, Ticket *ticket) {
  ZRT_RETURN_IF_ERROR(check(r.offset, r.buf, r.bytes, r.write ? "a write" : "a read"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    r.ticket = next_++;
    *ticket = r.ticket;
    ++outstanding_;
    queue_.push_back(r);
  }
  work_cv_.notify_one();
  return {};
}

NvmeStore::Request NvmeStore::request(bool write, uint64_t offset, const void *buf, uint64_t bytes) {
  Request r;
  r.write = write;
  r.offset = offset;
  r.buf = const_cast<void *>(buf);
  r.bytes = bytes;
  return r;
}

Status NvmeStore::submit_read(uint64_t offset, void *dst, uint64_t bytes, Ticket *ticket) {
  return submit(request(false, offset, dst, bytes), ticket);
}

Status NvmeStore::submit_write(uint64_t offset, const void *src, uint64_t bytes, Ticket *ticket) {
  return submit(request(true, offset, src, bytes), ticket);
}

Status NvmeStore::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ticket == 0 || ticket >= next_) return error(Code::internal, "NVMe: waiting for an unknown request");
  for (;;) {
    auto it = finished_.find(ticket);
    if (it != finished_.end()) {
      Status st = it->second;
      finished_.erase(it);
      return st;
    }
    // A ticket that is neither finished nor outstanding was waited for already (wait_all cleared it).
    if (outstanding_ == 0) return {};
    done_cv_.wait(lock);
  }
}

Status NvmeStore::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return outstanding_ == 0; });
  Status first;
  for (auto &kv : finished_)
    if (!kv.second.ok() && first.ok()) first = kv.second;
  finished_.clear();
  return first;
}

Status NvmeStore::read(uint64_t offset, void *dst, uint64_t bytes) {
  ZRT_RETURN_IF_ERROR(check(offset, dst, bytes, "a read"));
  return transfer(request(false, offset, dst, bytes));
}

Status NvmeStore::write(uint64_t offset, const void *src, uint64_t bytes) {
  ZRT_RETURN_IF_ERROR(check(offset, src, bytes, "a write"));
  return transfer(request(true, offset, src, bytes));
}

}  // namespace zrt
