// The checkpoint format: CRC-32C, durable writes, the manifest container and its verification, slices
// as runs of full-tensor coordinates, and verified byte-range reads of the rank files.
#include "checkpoint/format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "zk/cpu_kernels.h"

namespace zrt {
namespace ckpt {

namespace {

struct Crc32cTable {
  uint32_t t[8][256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};

// Slicing by 8: eight table lookups per 8 bytes, for processors without the CRC32 instruction.
uint32_t crc32c_soft(const uint8_t *p, size_t n, uint32_t c) {
  static const Crc32cTable tab;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= c;
    c = tab.t[7][w & 0xFF] ^ tab.t[6][(w >> 8) & 0xFF] ^ tab.t[5][(w >> 16) & 0xFF] ^ tab.t[4][(w >> 24) & 0xFF] ^
        tab.t[3][(w >> 32) & 0xFF] ^ tab.t[2][(w >> 40) & 0xFF] ^ tab.t[1][(w >> 48) & 0xFF] ^ tab.t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = tab.t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const uint8_t *p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

std::string errno_text() { return std::strerror(errno); }

Status read_whole(const std::string &path, size_t limit, std::vector<uint8_t> *out, const char *what) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return error(errno == ENOENT ? Code::not_found : Code::io_error,
                           std::string("cannot open ") + what + " '" + path + "': " + errno_text());
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return error(Code::io_error, std::string(what) + " '" + path + "' is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > limit) {
    close(fd);
    return error(Code::io_error, std::string(what) + " '" + path + "' is " + std::to_string(st.st_size) +
                                     " bytes, more than a checkpoint ever writes there");
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out->size()) {
    const ssize_t r = pread(fd, out->data() + got, out->size() - got, static_cast<off_t>(got));
    if (r <= 0) {
      close(fd);
      return error(Code::io_error, std::string("cannot read ") + what + " '" + path + "'");
    }
    got += static_cast<size_t>(r);
  }
  close(fd);
  return {};
}

}  // namespace

uint32_t crc32c(const void *data, size_t n, uint32_t crc) {
  const auto *p = static_cast<const uint8_t *>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  crc = hw ? crc32c_hw(p, n, crc) : crc32c_soft(p, n, crc);
#else
  crc = crc32c_soft(p, n, crc);
#endif
  return ~crc;
}

std::string shape_str(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::vector<Run> slice_runs(const std::vector<int64_t> &full_shape, const std::vector<int64_t> &local_shape,
                            const std::vector<Box> &pieces_in, uint64_t flat_begin, uint64_t flat_end) {
  const int R = static_cast<int>(full_shape.size());
  std::vector<Box> identity;
  const std::vector<Box> *pieces = &pieces_in;
  if (pieces_in.empty() && full_shape == local_shape) {
    identity.push_back({std::vector<int64_t>(R, 0), std::vector<int64_t>(R, 0), full_shape});
    pieces = &identity;
  }
  std::vector<int64_t> fst(R), lst(R);
  int64_t fa = 1, la = 1;
  for (int k = R - 1; k >= 0; --k) {
    fst[k] = fa;
    fa *= full_shape[k];
    lst[k] = la;
    la *= local_shape[k];
  }
  std::vector<Run> runs;
  for (const Box &b : *pieces) {
    if (static_cast<int>(b.size.size()) != R) continue;
    int64_t rows = 1;
    for (int k = 0; k + 1 < R; ++k) rows *= b.size[k];
    const int64_t run = R ? b.size[R - 1] : 1;
    if (run <= 0 || rows <= 0) continue;
    std::vector<int64_t> idx(R, 0);
    for (int64_t row = 0; row < rows; ++row) {
      int64_t s0 = 0, d0 = 0;
      for (int k = 0; k < R; ++k) {
        const int64_t i = k + 1 < R ? idx[k] : 0;
        s0 += (b.src[k] + i) * fst[k];
        d0 += (b.dst[k] + i) * lst[k];
      }
      const int64_t lo = std::max<int64_t>(d0, static_cast<int64_t>(flat_begin));
      const int64_t hi = std::min<int64_t>(d0 + run, static_cast<int64_t>(flat_end));
      if (hi > lo) runs.push_back({static_cast<uint64_t>(s0 + (lo - d0)), static_cast<uint64_t>(lo) - flat_begin,
                                   static_cast<uint64_t>(hi - lo)});
      for (int k = R - 2; k >= 0; --k) {
        if (++idx[k] < b.size[k]) break;
        idx[k] = 0;
      }
    }
  }
  std::sort(runs.begin(), runs.end(), [](const Run &a, const Run &b) { return a.local < b.local; });
  std::vector<Run> merged;
  for (const Run &r : runs) {
    if (!merged.empty() && merged.back().local + merged.back().len == r.local &&
        merged.back().full + merged.back().len == r.full) {
      merged.back().len += r.len;
      continue;
    }
    merged.push_back(r);
  }
  return merged;
}

Status sync_dir(const std::string &dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return error(Code::io_error, "cannot open folder '" + dir + "' to sync it: " + errno_text());
  const int rc = fsync(fd);
  const std::string e = errno_text();
  close(fd);
  if (rc != 0) return error(Code::io_error, "cannot fsync folder '" + dir + "': " + e);
  return {};
}

Status write_file_durable(const std::string &path, const void *data, size_t bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error(Code::io_error, "cannot create '" + tmp + "': " + errno_text());
  const auto *p = static_cast<const uint8_t *>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t w = write(fd, p + done, bytes - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string e = errno_text();
      close(fd);
      return error(Code::io_error, "cannot write '" + tmp + "': " + e);
    }
    done += static_cast<size_t>(w);
  }
  if (fsync(fd) != 0) {
    const std::string e = errno_text();
    close(fd);
    return error(Code::io_error, "cannot fsync '" + tmp + "': " + e);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0)
    return error(Code::io_error, "cannot rename '" + tmp + "' to '" + path + "': " + errno_text());
  const size_t slash = path.rfind('/');
  return sync_dir(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)));
}

std::vector<uint8_t> manifest_file_image(const uint8_t *payload, size_t bytes) {
  std::vector<uint8_t> out(kManifestHeaderBytes + bytes);
  std::memcpy(out.data(), kManifestMagic, 8);
  const uint64_t n = bytes;
  const uint32_t crc = crc32c(payload, bytes), zero = 0;
  std::memcpy(out.data() + 8, &n, 8);
  std::memcpy(out.data() + 16, &crc, 4);
  std::memcpy(out.data() + 20, &zero, 4);
  std::memcpy(out.data() + kManifestHeaderBytes, payload, bytes);
  return out;
}

Status resolve_checkpoint(const std::string &path, std::string *step_dir) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return error(Code::not_found, "checkpoint '" + path + "' does not exist");
  if (!S_ISDIR(st.st_mode)) return error(Code::invalid_argument, "checkpoint '" + path + "' is not a folder");
  const std::string manifest = path + "/" + kManifestName, latest = path + "/" + kLatestName;
  if (stat(manifest.c_str(), &st) == 0) {
    *step_dir = path;
    return {};
  }
  std::vector<uint8_t> text;
  Status s = read_whole(latest, 4096, &text, "checkpoint pointer");
  if (!s.ok()) {
    if (s.code() == Code::not_found)
      return error(Code::not_found, "'" + path + "' holds no checkpoint: neither '" + kLatestName + "' nor '" +
                                        kManifestName + "' is there (a save that never completed leaves neither)");
    return s;
  }
  std::string name(text.begin(), text.end());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return error(Code::io_error, "checkpoint pointer '" + latest + "' does not name a checkpoint folder ('" + name + "')");
  *step_dir = path + "/" + name;
  if (stat((*step_dir + "/" + kManifestName).c_str(), &st) != 0)
    return error(Code::not_found, "checkpoint pointer '" + latest + "' names '" + name + "', which has no " +
                                      kManifestName);
  return {};
}

std::string Manifest::rank_file_path(int rank) const {
  const auto *f = m_->files()->Get(static_cast<flatbuffers::uoffset_t>(rank));
  return dir_ + "/" + f->name()->str();
}

Status Manifest::load(const std::string &step_dir, std::unique_ptr<Manifest> *out) {
  std::unique_ptr<Manifest> m(new Manifest());
  m->dir_ = step_dir;
  m->path_ = step_dir + "/" + kManifestName;
  const std::string &p = m->path_;
  ZRT_RETURN_IF_ERROR(read_whole(p, size_t(1) << 32, &m->bytes_, "checkpoint manifest"));
  const std::vector<uint8_t> &b = m->bytes_;
  auto bad = [&](const std::string &why) { return error(Code::io_error, "checkpoint manifest '" + p + "' " + why); };
  if (b.size() < kManifestHeaderBytes || std::memcmp(b.data(), kManifestMagic, 8) != 0)
    return bad("is not a zplan checkpoint manifest (bad magic)");
  uint64_t n = 0;
  uint32_t crc = 0;
  std::memcpy(&n, b.data() + 8, 8);
  std::memcpy(&crc, b.data() + 16, 4);
  if (n != b.size() - kManifestHeaderBytes)
    return bad("is truncated or padded: the header says " + std::to_string(n) + " payload bytes, the file has " +
               std::to_string(b.size() - kManifestHeaderBytes));
  const uint8_t *payload = b.data() + kManifestHeaderBytes;
  const uint32_t got = crc32c(payload, n);
  if (got != crc) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "stored %08x, computed %08x", crc, got);
    return bad(std::string("fails its CRC-32C check (") + buf + "): the file is corrupt");
  }
  flatbuffers::Verifier v(payload, n);
  if (!fb::VerifyManifestBuffer(v)) return bad("holds no valid manifest (FlatBuffers verifier)");
  const fb::Manifest &mf = *fb::GetManifest(payload);
  m->m_ = &mf;
  if (mf.format_major() != kFormatMajor)
    return bad("has format " + std::to_string(mf.format_major()) + "." + std::to_string(mf.format_minor()) +
               "; this runtime reads format " + std::to_string(kFormatMajor) + ".x");
  const int world = mf.world();
  if (world < 1 || !mf.files() || static_cast<int>(mf.files()->size()) != world || !mf.tensors() || mf.block_bytes() == 0)
    return bad("is inconsistent: world " + std::to_string(world) + ", " +
               std::to_string(mf.files() ? mf.files()->size() : 0) + " rank files");
  for (int r = 0; r < world; ++r) {
    const fb::RankFile &f = *mf.files()->Get(r);
    const uint64_t blocks = (f.bytes() + mf.block_bytes() - 1) / mf.block_bytes();
    if (f.rank() != r || !f.name() || f.name()->size() == 0 || f.name()->str().find('/') != std::string::npos ||
        !f.block_crc32c() || f.block_crc32c()->size() != blocks)
      return bad("is inconsistent: rank file entry " + std::to_string(r) + " is malformed");
  }
  for (const fb::Tensor *t : *mf.tensors()) {
    if (!t->name() || !t->kind() || !t->param() || !t->full_shape() || !t->local_shape() || !t->slices() ||
        t->full_shape()->size() != t->local_shape()->size() || t->dtype() > static_cast<uint8_t>(DType::bool8))
      return bad("is inconsistent: a tensor record is malformed");
    const std::string tn = t->name()->str();
    const size_t R = t->full_shape()->size();
    uint64_t local = 1;
    for (size_t k = 0; k < R; ++k) {
      if (t->full_shape()->Get(k) < 0 || t->local_shape()->Get(k) < 0) return bad("is inconsistent: tensor '" + tn + "' has a negative dim");
      local *= static_cast<uint64_t>(t->local_shape()->Get(k));
    }
    const size_t es = dtype_size(static_cast<DType>(t->dtype()));
    for (const fb::Slice *s : *t->slices()) {
      if (s->rank() < 0 || s->rank() >= world || s->flat_end() < s->flat_begin() || s->flat_begin() > local)
        return bad("is inconsistent: a slice of tensor '" + tn + "' is out of range");
      const uint64_t bytes = (s->flat_end() - s->flat_begin()) * es;
      const uint64_t fsize = mf.files()->Get(s->rank())->bytes();
      if (s->offset() > fsize || bytes > fsize - s->offset())
        return bad("is inconsistent: rank " + std::to_string(s->rank()) + "'s slice of tensor '" + tn +
                   "' lies outside its file");
      if (s->pieces())
        for (const fb::Box *x : *s->pieces()) {
          if (!x->src_start() || !x->dst_start() || !x->size() || x->src_start()->size() != R ||
              x->dst_start()->size() != R || x->size()->size() != R)
            return bad("is inconsistent: a piece of tensor '" + tn + "' has the wrong rank");
          for (size_t k = 0; k < R; ++k) {
            const int64_t a = x->src_start()->Get(k), d = x->dst_start()->Get(k), z = x->size()->Get(k);
            if (a < 0 || d < 0 || z < 0 || a + z > t->full_shape()->Get(k) || d + z > t->local_shape()->Get(k))
              return bad("is inconsistent: a piece of tensor '" + tn + "' lies outside its shapes");
          }
        }
    }
  }
  *out = std::move(m);
  return {};
}

RankFiles::~RankFiles() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

Status RankFiles::check_all() {
  const fb::Manifest &mf = m_.get();
  fds_.assign(static_cast<size_t>(mf.world()), -1);
  for (int r = 0; r < mf.world(); ++r) {
    const std::string p = m_.rank_file_path(r);
    const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      return error(errno == ENOENT ? Code::not_found : Code::io_error,
                   "checkpoint file '" + p + "' (rank " + std::to_string(r) + "'s data) cannot be opened: " + errno_text());
    fds_[static_cast<size_t>(r)] = fd;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      return error(Code::io_error, "checkpoint file '" + p + "' is not a regular file");
    const uint64_t want = mf.files()->Get(r)->bytes();
    if (static_cast<uint64_t>(st.st_size) != want)
      return error(Code::io_error, "checkpoint file '" + p + "' is " + std::to_string(st.st_size) + " bytes; the manifest records " +
                                       std::to_string(want) + (static_cast<uint64_t>(st.st_size) < want ? " (truncated)" : ""));
  }
  return {};
}

Status RankFiles::block(int rank, uint64_t block, const std::vector<uint8_t> **data) {
  ++clock_;
  for (Cached &c : cache_)
    if (c.rank == rank && c.block == block) {
      c.used = clock_;
      *data = &c.data;
      return {};
    }
  // Two blocks per file, at least 16 and at most 64 (64 MiB at the default block size).
  const size_t cap = std::min<size_t>(64, std::max<size_t>(16, 2 * fds_.size()));
  Cached *slot = nullptr;
  if (cache_.size() < cap) {
    cache_.emplace_back();
    slot = &cache_.back();
  } else {
    slot = &*std::min_element(cache_.begin(), cache_.end(), [](const Cached &a, const Cached &b) { return a.used < b.used; });
  }
  slot->rank = -1;
  const fb::Manifest &mf = m_.get();
  const fb::RankFile &f = *mf.files()->Get(rank);
  const uint64_t bb = mf.block_bytes();
  const uint64_t begin = block * bb, n = std::min<uint64_t>(bb, f.bytes() - begin);
  slot->data.resize(static_cast<size_t>(n));
  size_t got = 0;
  while (got < n) {
    const ssize_t r = pread(fds_[static_cast<size_t>(rank)], slot->data.data() + got, n - got, static_cast<off_t>(begin + got));
    if (r <= 0)
      return error(Code::io_error, "cannot read checkpoint file '" + m_.rank_file_path(rank) + "' at byte " +
                                       std::to_string(begin + got) + (r == 0 ? ": unexpected end of file" : ": " + errno_text()));
    got += static_cast<size_t>(r);
  }
  bytes_read_ += n;
  const uint32_t want = f.block_crc32c()->Get(static_cast<flatbuffers::uoffset_t>(block)), c = crc32c(slot->data.data(), n);
  if (c != want) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "stored %08x, computed %08x", want, c);
    return error(Code::io_error, "checkpoint file '" + m_.rank_file_path(rank) + "': block " + std::to_string(block) +
                                     " (bytes " + std::to_string(begin) + "-" + std::to_string(begin + n) +
                                     ") fails its CRC-32C check (" + buf + "): the file is corrupt");
  }
  slot->rank = rank;
  slot->block = block;
  slot->used = clock_;
  *data = &slot->data;
  return {};
}

Status RankFiles::read(int rank, uint64_t offset, uint64_t bytes, uint8_t *dst) {
  if (fds_.empty()) ZRT_RETURN_IF_ERROR(check_all());
  const uint64_t bb = m_.get().block_bytes();
  while (bytes > 0) {
    const uint64_t b = offset / bb, in = offset - b * bb;
    const std::vector<uint8_t> *data = nullptr;
    ZRT_RETURN_IF_ERROR(block(rank, b, &data));
    if (in >= data->size()) return error(Code::internal, "checkpoint read past the end of '" + m_.rank_file_path(rank) + "'");
    const uint64_t take = std::min<uint64_t>(bytes, data->size() - in);
    std::memcpy(dst, data->data() + in, static_cast<size_t>(take));
    dst += take;
    offset += take;
    bytes -= take;
  }
  return {};
}

std::vector<SourceRun> source_runs(const Manifest &m, const std::vector<int> &records) {
  std::vector<SourceRun> out;
  for (int ri : records) {
    const fb::Tensor &t = *m.get().tensors()->Get(static_cast<flatbuffers::uoffset_t>(ri));
    const std::vector<int64_t> full(t.full_shape()->begin(), t.full_shape()->end()),
        local(t.local_shape()->begin(), t.local_shape()->end());
    const DType dt = static_cast<DType>(t.dtype());
    const size_t es = dtype_size(dt);
    for (const fb::Slice *s : *t.slices()) {
      std::vector<Box> pieces;
      if (s->pieces())
        for (const fb::Box *x : *s->pieces())
          pieces.push_back({{x->src_start()->begin(), x->src_start()->end()},
                            {x->dst_start()->begin(), x->dst_start()->end()},
                            {x->size()->begin(), x->size()->end()}});
      for (const Run &r : slice_runs(full, local, pieces, s->flat_begin(), s->flat_end()))
        out.push_back({r.full, r.len, s->rank(), s->offset() + r.local * es, dt});
    }
  }
  std::sort(out.begin(), out.end(), [](const SourceRun &a, const SourceRun &b) {
    return a.full != b.full ? a.full < b.full : a.rank < b.rank;
  });
  return out;
}

Status fill_from_sources(RankFiles &files, const std::vector<SourceRun> &src, const std::vector<Run> &dst_runs,
                         uint8_t *dst, DType dst_dtype, const std::string &what) {
  struct Copy {
    int rank;
    uint64_t byte, dst_elem, count;
    DType dtype;
  };
  std::vector<Copy> copies;
  // ends[i]: the largest end of src[0..i], so that the first source that can reach an index is found by a
  // binary search even when sources overlap.
  std::vector<uint64_t> ends(src.size());
  for (size_t i = 0; i < src.size(); ++i) ends[i] = std::max(i ? ends[i - 1] : 0, src[i].full + src[i].len);
  for (const Run &d : dst_runs) {
    uint64_t pos = d.full;
    const uint64_t end = d.full + d.len;
    size_t i = static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), pos) - ends.begin());
    for (; pos < end && i < src.size(); ++i) {
      const SourceRun &s = src[i];
      if (s.full > pos) break;
      if (s.full + s.len <= pos) continue;
      const uint64_t n = std::min(end, s.full + s.len) - pos;
      copies.push_back({s.rank, s.byte + (pos - s.full) * dtype_size(s.dtype), d.local + (pos - d.full), n, s.dtype});
      pos += n;
    }
    if (pos < end)
      return error(Code::io_error, what + ": element " + std::to_string(pos) + " of the full tensor is in no saved slice");
  }
  std::sort(copies.begin(), copies.end(),
            [](const Copy &a, const Copy &b) { return a.rank != b.rank ? a.rank < b.rank : a.byte < b.byte; });
  std::vector<uint8_t> tmp;
  const size_t des = dtype_size(dst_dtype);
  for (const Copy &c : copies) {
    if (c.dtype == dst_dtype) {
      ZRT_RETURN_IF_ERROR(files.read(c.rank, c.byte, c.count * des, dst + c.dst_elem * des));
      continue;
    }
    const size_t ses = dtype_size(c.dtype);
    tmp.resize(static_cast<size_t>(c.count * ses));
    ZRT_RETURN_IF_ERROR(files.read(c.rank, c.byte, c.count * ses, tmp.data()));
    const auto sdt = static_cast<zk::DType>(c.dtype), ddt = static_cast<zk::DType>(dst_dtype);
    const bool fl = zk::is_float(sdt) && zk::is_float(ddt);
    for (uint64_t e = 0; e < c.count; ++e) {
      const auto di = static_cast<int64_t>(c.dst_elem + e), si = static_cast<int64_t>(e);
      if (fl)
        zk::store_f32(dst, ddt, di, zk::load_f32(tmp.data(), sdt, si));
      else
        zk::store_i64(dst, ddt, di, zk::load_i64(tmp.data(), sdt, si));
    }
  }
  return {};
}

}  // namespace ckpt
}  // namespace zrt
