// zplan-nvme-bench DIR [--bytes N] [--block B] [--depth D] [--threads T] [--repeat R]
//
// Measures what the runtime's NVMe layer (runtime/src/nvme/nvme_store.h) reads and writes per second on the
// file system of DIR: it creates a file of N bytes there the way zrun does, writes it in blocks of B bytes,
// then reads it back R times with D requests in flight on T threads, each block into its own aligned staging
// buffer, as the plan's reads run ahead of their use. Direct I/O bypasses the page cache, so a read right
// after the write measures the disk; where the file system refuses O_DIRECT the tool says so and its figures
// are the page cache's. The median read rate is what zplan --nvme-bandwidth should be given.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <sys/statfs.h>
#include <vector>

#include "nvme/nvme_store.h"

namespace {

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr,
               "zplan-nvme-bench: %s\nusage: zplan-nvme-bench DIR [--bytes N] [--block B] [--depth D] [--threads T] "
               "[--repeat R]\n  (N, B with an optional K, M or G suffix, binary; defaults 4G, 64M, 8, 4, 3)\n",
               why);
  std::exit(2);
}

uint64_t parse_bytes(const char *s) {
  char *end = nullptr;
  const double v = std::strtod(s, &end);
  uint64_t mult = 1;
  if (end && *end) {
    switch (*end) {
      case 'K': case 'k': mult = 1ull << 10; break;
      case 'M': case 'm': mult = 1ull << 20; break;
      case 'G': case 'g': mult = 1ull << 30; break;
      default: usage((std::string("bad size '") + s + "'").c_str());
    }
  }
  if (!(v > 0)) usage((std::string("bad size '") + s + "'").c_str());
  return static_cast<uint64_t>(v * static_cast<double>(mult));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Streams the file through `bufs` (one per request in flight): the whole file, block by block, keeping up to
// bufs.size() requests queued. Returns the seconds it took.
double stream(zrt::NvmeStore &store, bool write, uint64_t bytes, uint64_t block,
              std::vector<std::unique_ptr<zrt::AlignedBuffer>> &bufs) {
  std::vector<zrt::NvmeStore::Ticket> slot(bufs.size(), 0);
  const auto t0 = std::chrono::steady_clock::now();
  size_t k = 0;
  for (uint64_t off = 0; off < bytes; off += block, k = (k + 1) % bufs.size()) {
    if (slot[k]) {
      zrt::Status st = store.wait(slot[k]);
      if (!st.ok()) usage(st.message().c_str());
    }
    const uint64_t n = std::min(block, bytes - off);
    zrt::Status st = write ? store.submit_write(off, bufs[k]->data(), n, &slot[k])
                           : store.submit_read(off, bufs[k]->data(), n, &slot[k]);
    if (!st.ok()) usage(st.message().c_str());
  }
  zrt::Status st = store.wait_all();
  if (!st.ok()) usage(st.message().c_str());
  return seconds_since(t0);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') usage("give the folder to measure first");
  const std::string dir = argv[1];
  uint64_t bytes = 4ull << 30, block = 64ull << 20;
  int depth = 8, threads = 4, repeat = 3;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const char *v = argv[++i];
    if (a == "--bytes") bytes = parse_bytes(v);
    else if (a == "--block") block = parse_bytes(v);
    else if (a == "--depth") depth = std::atoi(v);
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--repeat") repeat = std::atoi(v);
    else usage(("unknown flag " + a).c_str());
  }
  const uint32_t align = 4096;
  block = (block + align - 1) / align * align;
  bytes = (bytes + block - 1) / block * block;
  if (depth < 1 || threads < 1 || repeat < 1) usage("--depth, --threads and --repeat must be at least 1");

  std::unique_ptr<zrt::NvmeStore> store;
  std::string note;
  zrt::Status st = zrt::NvmeStore::open(dir, "zplan-nvme-bench.tmp", bytes, align, threads, &store, &note);
  if (!st.ok()) usage(st.message().c_str());
  if (!note.empty()) std::printf("nvme-bench: note: %s: the figures below are the page cache's, not the disk's\n", note.c_str());
  struct statfs fs {};
  statfs(dir.c_str(), &fs);
  std::printf("nvme-bench: %s (file system magic 0x%lx), file %s of %llu B, block %llu B, %d in flight, %d threads, %s I/O\n",
              dir.c_str(), static_cast<unsigned long>(fs.f_type), store->path().c_str(),
              static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(block), depth, threads,
              store->direct() ? "direct" : "buffered");
  std::vector<std::unique_ptr<zrt::AlignedBuffer>> bufs;
  for (int k = 0; k < depth; ++k) {
    bufs.push_back(std::make_unique<zrt::AlignedBuffer>(block, align));
    if (!bufs.back()->ok()) usage("out of host memory for the staging buffers");
    std::memset(bufs.back()->data(), 0x5a + k, block);
  }
  const double ws = stream(*store, true, bytes, block, bufs);
  std::printf("nvme-bench: write %llu B in %.3f s: %.2f GB/s\n", static_cast<unsigned long long>(bytes), ws,
              static_cast<double>(bytes) / ws / 1e9);
  std::vector<double> rates;
  for (int r = 0; r < repeat; ++r) {
    const double rs = stream(*store, false, bytes, block, bufs);
    rates.push_back(static_cast<double>(bytes) / rs / 1e9);
    std::printf("nvme-bench: read %llu B in %.3f s: %.2f GB/s\n", static_cast<unsigned long long>(bytes), rs, rates.back());
  }
  // Every byte was counted by the store's own counters: the figures above are what it moved.
  std::sort(rates.begin(), rates.end());
  std::printf("nvme-bench: median read %.2f GB/s over %d runs; counted read %llu B, written %llu B\n",
              rates[rates.size() / 2], repeat, static_cast<unsigned long long>(store->bytes_read()),
              static_cast<unsigned long long>(store->bytes_written()));
  const std::string path = store->path();
  store.reset();
  std::remove(path.c_str());
  return 0;
}
