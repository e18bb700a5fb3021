// Weight loading: every rank reads only its pieces of each source tensor (strided boxes out of an mmap'd
// external-data file), converts the dtype, and keeps its ZeRO flat range of the tp-local tensor.
#include "weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "zk/cpu_kernels.h"
#include "zrt/plan_file.h"

namespace zrt {

MappedFiles::~MappedFiles() {
  for (auto &kv : files_)
    if (kv.second.addr) munmap(kv.second.addr, kv.second.size);
}

Status MappedFiles::get(const std::string &path, const uint8_t **data, size_t *size) {
  auto it = files_.find(path);
  if (it == files_.end()) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return error(Code::not_found, "cannot open weights file '" + path + "': " + std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int e = errno;
      close(fd);
      return error(Code::io_error, "cannot stat weights file '" + path + "': " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      return error(Code::io_error, "weights file '" + path + "' is not a regular file");
    }
    Region r;
    r.size = static_cast<size_t>(st.st_size);
    if (r.size > 0) {
      r.addr = mmap(nullptr, r.size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (r.addr == MAP_FAILED) {
        const int e = errno;
        close(fd);
        return error(Code::io_error, "cannot mmap weights file '" + path + "': " + std::strerror(e));
      }
    }
    close(fd);
    it = files_.emplace(path, r).first;
  }
  *data = static_cast<const uint8_t *>(it->second.addr);
  *size = it->second.size;
  return {};
}

uint64_t random_weight_key(uint64_t seed, const std::string &name) {
  return seed ^ fnv1a64(name.data(), name.size());
}

float random_weight_at(uint64_t key, uint64_t index) {
  // splitmix64 of a key mixing the seed, the name's FNV-1a hash and the index.
  uint64_t z = key ^ (index * 0x9E3779B97F4A7C15ull);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  return static_cast<float>(-0.1 + 0.2 * u);
}

float random_weight_value(uint64_t seed, const std::string &name, uint64_t index) {
  return random_weight_at(random_weight_key(seed, name), index);
}

namespace {

/// Runs body(begin, end) over [0, n) in contiguous chunks on up to `threads` threads (the calling thread
/// takes the first chunk). Each element must be independent of the others.
template <typename Body>
void parallel_rows(int64_t n, int threads, const Body &body) {
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  if (threads <= 1) {
    body(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    const int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) pool.emplace_back([&body, b, e] { body(b, e); });
  }
  body(int64_t{0}, std::min(n, chunk));
  for (std::thread &th : pool) th.join();
}

}  // namespace

Status assemble_weight(const fb::Plan &plan, const fb::WeightBinding &b, int rank, const std::string &base_dir,
                       bool random, uint64_t seed, MappedFiles *files, uint8_t *dst, DType dst_dtype) {
  const fb::WeightSource &src = *plan.weights()->Get(b.source());
  const std::string name = src.name() ? src.name()->str() : "";
  const auto sdt = static_cast<zk::DType>(src.dtype());
  const auto ddt = static_cast<zk::DType>(dst_dtype);
  const bool has_file = src.file() && src.file()->size() > 0;
  // Inline initializers are real values even for graph-only models: only file-backed weights go random.
  random = random && has_file;
  const uint8_t *sdata = nullptr;
  if (has_file && !random) {
    std::string path = src.file()->str();
    if (path[0] != '/') path = base_dir + "/" + path;
    const uint8_t *base = nullptr;
    size_t fsize = 0;
    ZRT_RETURN_IF_ERROR(files->get(path, &base, &fsize));
    if (src.offset() > fsize || src.length() > fsize - src.offset())
      return error(Code::io_error, "weights file '" + path + "' is " + std::to_string(fsize) + " bytes; weight '" + name +
                                       "' needs bytes [" + std::to_string(src.offset()) + ", " +
                                       std::to_string(src.offset() + src.length()) + ")");
    sdata = base + src.offset();
  } else if (!has_file) {
    sdata = src.inline_data() ? src.inline_data()->data() : nullptr;
  }
  const int R = src.shape() ? static_cast<int>(src.shape()->size()) : 0;
  std::vector<int64_t> sshape(R), lshape(R), sst(R), lst(R);
  for (int k = 0; k < R; ++k) {
    sshape[k] = src.shape()->Get(k);
    lshape[k] = b.local_shape()->Get(k);
  }
  int64_t acc = 1, lacc = 1;
  for (int k = R - 1; k >= 0; --k) {
    sst[k] = acc;
    acc *= sshape[k];
    lst[k] = lacc;
    lacc *= lshape[k];
  }
  const fb::RankSlice &rs = *b.ranks()->Get(rank);
  const int64_t fbeg = static_cast<int64_t>(rs.flat_begin()), fend = static_cast<int64_t>(rs.flat_end());
  if (!rs.pieces()) return {};
  const bool fl = zk::is_float(sdt) && zk::is_float(ddt);
  const uint64_t key = random_weight_key(seed, name);
  // Element-wise work (random values, dtype conversion) runs on several threads for large tensors: a 7B
  // model's --init random is billions of values. Plain copies are memory-bound and stay on one thread.
  const bool per_element = random || sdt != ddt;
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  for (const fb::Piece *pc : *rs.pieces()) {
    std::vector<int64_t> a(R), d(R), z(R);
    int64_t rows = 1;
    for (int k = 0; k < R; ++k) {
      a[k] = pc->src_start()->Get(k);
      d[k] = pc->dst_start()->Get(k);
      z[k] = pc->size()->Get(k);
      if (k + 1 < R) rows *= z[k];
    }
    const int64_t run = R ? z[R - 1] : 1;
    if (run == 0 || rows == 0) continue;
    // One contiguous run per row of the box: the innermost dim is contiguous in both tensors.
    auto rows_between = [&](int64_t row_begin, int64_t row_end) {
      for (int64_t row = row_begin; row < row_end; ++row) {
        // The row's start in both tensors: its index over the box's outer dims, last dim fastest.
        int64_t s0 = 0, d0 = 0, rest = row;
        for (int k = R - 1; k >= 0; --k) {
          int64_t i = 0;
          if (k + 1 < R) {
            i = rest % z[k];
            rest /= z[k];
          }
          s0 += (a[k] + i) * sst[k];
          d0 += (d[k] + i) * lst[k];
        }
        // Keep only the part of the run inside this rank's flat range.
        const int64_t lo = std::max(d0, fbeg), hi = std::min(d0 + run, fend);
        if (hi <= lo) continue;
        if (!random && sdt == ddt) {
          const size_t es = zk::dtype_size(sdt);
          std::memcpy(dst + (lo - fbeg) * es, sdata + (s0 + (lo - d0)) * es, static_cast<size_t>(hi - lo) * es);
          continue;
        }
        for (int64_t e = lo; e < hi; ++e) {
          const int64_t si = s0 + (e - d0), di = e - fbeg;
          if (random)
            zk::store_f32(dst, ddt, di, random_weight_at(key, static_cast<uint64_t>(si)));
          else if (fl)
            zk::store_f32(dst, ddt, di, zk::load_f32(sdata, sdt, si));
          else
            zk::store_i64(dst, ddt, di, zk::load_i64(sdata, sdt, si));
        }
      }
    };
    const bool big = per_element && rows * run >= (int64_t{1} << 20);
    parallel_rows(rows, big ? hw : 1, rows_between);
  }
  return {};
}

}  // namespace zrt
