// Sharded checkpoints of a running session (docs/checkpoint-format.md).
//
// Save: rank 0 creates a fresh checkpoint folder, every rank writes its slices into its own data file
// (temporary name, fsync, rename), rank 0 gathers the block checksums and writes the manifest the same
// way, and only then replaces `latest`. Until that last rename the previous checkpoint is the one a loader
// finds, so a crash at any point leaves it loadable.
//
// Load: every rank maps each tensor of its plan onto full-tensor coordinates (the state table's pieces and
// flat range), finds which saved slices hold those elements and at which byte of which rank file, and
// reads just those blocks. The same code serves the same plan and any resharded one.
#include "checkpoint/session_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "checkpoint/format.h"

namespace zrt {
namespace ckpt {

namespace {

using PlanEntry = zrt::fb::StateEntry;

std::string kind_name(const PlanEntry &e) { return zrt::fb::EnumNameStateKind(e.kind()); }

bool same_vec(const flatbuffers::Vector<int64_t> *a, const flatbuffers::Vector<int64_t> *b) {
  const size_t na = a ? a->size() : 0, nb = b ? b->size() : 0;
  if (na != nb) return false;
  for (size_t i = 0; i < na; ++i)
    if (a->Get(static_cast<flatbuffers::uoffset_t>(i)) != b->Get(static_cast<flatbuffers::uoffset_t>(i))) return false;
  return true;
}

/// Two ranks hold the same elements of a tensor (a tp or dp replica): same flat range, same pieces.
bool same_slice(const zrt::fb::RankSlice &a, const zrt::fb::RankSlice &b) {
  if (a.flat_begin() != b.flat_begin() || a.flat_end() != b.flat_end()) return false;
  const size_t na = a.pieces() ? a.pieces()->size() : 0, nb = b.pieces() ? b.pieces()->size() : 0;
  if (na != nb) return false;
  for (size_t i = 0; i < na; ++i) {
    const auto *x = a.pieces()->Get(static_cast<flatbuffers::uoffset_t>(i));
    const auto *y = b.pieces()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (!same_vec(x->src_start(), y->src_start()) || !same_vec(x->dst_start(), y->dst_start()) ||
        !same_vec(x->size(), y->size()))
      return false;
  }
  return true;
}

/// Gradient buffers hold nothing between steps that the next step reads: they are not saved.
bool saved_kind(const PlanEntry &e) { return e.kind() != zrt::fb::StateKind::grad; }

/// Where each rank's slices go in its data file: for rank r, (entry, byte offset) in state order, and
/// the file's size. A rank writes an entry unless a lower rank holds the identical slice.
struct Layout {
  std::vector<std::vector<std::pair<int, uint64_t>>> slices;  // per rank
  std::vector<uint64_t> bytes;                                // per rank
};

Layout plan_layout(const SessionAccess &a) {
  const zrt::fb::Plan &p = *a.plan;
  const int world = a.ri.world;
  Layout l;
  l.slices.resize(static_cast<size_t>(world));
  l.bytes.assign(static_cast<size_t>(world), 0);
  if (!p.state()) return l;
  auto dtype_of = [&](const PlanEntry &e) {
    return static_cast<DType>(p.tensors()->Get(static_cast<flatbuffers::uoffset_t>(e.tensor()))->dtype());
  };
  // A parameter whose master part has its dtype (fp32 training) holds the same values as the master: the
  // master is saved, and loading takes parameters from masters, so the copy is not written twice.
  std::map<std::string, DType> master_dtype;
  for (const PlanEntry *e : *p.state())
    if (e->kind() == zrt::fb::StateKind::master && e->param()) master_dtype[e->param()->str()] = dtype_of(*e);
  for (size_t i = 0; i < p.state()->size(); ++i) {
    const PlanEntry &e = *p.state()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (!saved_kind(e)) continue;
    if ((e.kind() == zrt::fb::StateKind::param || e.kind() == zrt::fb::StateKind::param_shard) && e.param()) {
      auto it = master_dtype.find(e.param()->str());
      if (it != master_dtype.end() && it->second == dtype_of(e)) continue;
    }
    const size_t es = dtype_size(dtype_of(e));
    for (int r = 0; r < world; ++r) {
      const auto &rs = *e.ranks()->Get(static_cast<flatbuffers::uoffset_t>(r));
      bool replica = false;
      for (int q = 0; q < r && !replica; ++q) replica = same_slice(rs, *e.ranks()->Get(static_cast<flatbuffers::uoffset_t>(q)));
      if (replica) continue;
      l.slices[static_cast<size_t>(r)].emplace_back(static_cast<int>(i), l.bytes[static_cast<size_t>(r)]);
      l.bytes[static_cast<size_t>(r)] += (rs.flat_end() - rs.flat_begin()) * es;
    }
  }
  return l;
}

std::string rank_file_name(int r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05d.bin", r);
  return buf;
}

int pause_ms() {
  // Test hook (tests/e2e/checkpoint_kill.sh): a pause after every slice and before the manifest, so that a
  // test can kill a rank in the middle of a save.
  const char *v = std::getenv("ZRT_CHECKPOINT_PAUSE_MS");
  return v ? std::atoi(v) : 0;
}

void pause() {
  if (const int ms = pause_ms(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

Status make_dir(const std::string &d) {
  if (mkdir(d.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return {};
    return error(Code::io_error, "'" + d + "' exists and is not a folder");
  }
  return error(Code::io_error, "cannot create folder '" + d + "': " + std::strerror(errno));
}

Status make_dirs(const std::string &d) {
  for (size_t at = 1; (at = d.find('/', at)) != std::string::npos; ++at) {
    struct stat st;
    const std::string part = d.substr(0, at);
    if (stat(part.c_str(), &st) != 0) ZRT_RETURN_IF_ERROR(make_dir(part));
  }
  return make_dir(d);
}

/// Rank 0: a new, empty folder for the checkpoint of `step`. A name already taken (a save of the same step
/// earlier, complete or not) is never reused, so that no complete checkpoint is ever overwritten.
Status new_step_dir(const std::string &root, int64_t step, std::string *name) {
  ZRT_RETURN_IF_ERROR(make_dirs(root));
  char base[48];
  std::snprintf(base, sizeof(base), "step-%08lld", static_cast<long long>(step));
  for (int k = 0; k < 100000; ++k) {
    *name = k ? std::string(base) + "." + std::to_string(k) : std::string(base);
    const std::string d = root + "/" + *name;
    if (mkdir(d.c_str(), 0755) == 0) return sync_dir(root);
    if (errno != EEXIST) return error(Code::io_error, "cannot create folder '" + d + "': " + std::strerror(errno));
  }
  return error(Code::io_error, "no free checkpoint folder name under '" + root + "'");
}

std::string absolute(const std::string &p) {
  char buf[PATH_MAX];
  if (realpath(p.c_str(), buf)) return buf;
  return p;
}

/// The source model, for consolidation: the producer's first argument where it exists, else a file of
/// that name beside the first external-data file.
std::string find_model(const SessionAccess &a) {
  const zrt::fb::Plan &p = *a.plan;
  const std::string prod = p.producer() ? p.producer()->str() : "";
  const size_t open = prod.find('(');
  if (open == std::string::npos) return "";
  size_t end = prod.find_first_of(" )", open + 1);
  if (end == std::string::npos) return "";
  const std::string model = prod.substr(open + 1, end - open - 1);
  struct stat st;
  if (!model.empty() && model[0] == '/' && stat(model.c_str(), &st) == 0) return model;
  const std::string base = model.substr(model.rfind('/') == std::string::npos ? 0 : model.rfind('/') + 1);
  if (p.weights())
    for (const auto *w : *p.weights()) {
      if (!w->file() || w->file()->size() == 0) continue;
      std::string f = w->file()->str();
      if (f[0] != '/') f = (a.base_dir.empty() ? std::string(".") : a.base_dir) + "/" + f;
      const std::string cand = f.substr(0, f.rfind('/') + 1) + base;
      if (stat(cand.c_str(), &st) == 0) return absolute(cand);
    }
  return "";
}

/// Writes this rank's data file: its slices in layout order, the CRC-32C of every block.
Status write_rank_file(const SessionAccess &a, const Layout &l, const std::string &dir, std::vector<uint32_t> *crcs) {
  const zrt::fb::Plan &p = *a.plan;
  const int r = a.ri.rank;
  const std::string path = dir + "/" + rank_file_name(r), tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) return error(Code::io_error, "cannot create checkpoint file '" + tmp + "': " + std::strerror(errno));
  uint32_t crc = 0;
  uint64_t fill = 0, written = 0;
  std::vector<uint8_t> buf;
  Status st;
  for (const auto &[ei, off] : l.slices[static_cast<size_t>(r)]) {
    const PlanEntry &e = *p.state()->Get(static_cast<flatbuffers::uoffset_t>(ei));
    const std::string name = e.name()->str();
    const auto &rs = *e.ranks()->Get(static_cast<flatbuffers::uoffset_t>(r));
    const size_t es = dtype_size(static_cast<DType>(p.tensors()->Get(static_cast<flatbuffers::uoffset_t>(e.tensor()))->dtype()));
    buf.resize(static_cast<size_t>((rs.flat_end() - rs.flat_begin()) * es));
    if (written != off) st = error(Code::internal, "checkpoint layout out of step at '" + name + "'");
    if (st.ok()) st = a.session->read_state(name, buf.data(), buf.size());
    if (!st.ok()) break;
    if (std::fwrite(buf.data(), 1, buf.size(), f) != buf.size()) {
      st = error(Code::io_error, "cannot write checkpoint file '" + tmp + "': " + std::strerror(errno));
      break;
    }
    written += buf.size();
    for (size_t at = 0; at < buf.size();) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(buf.size() - at, kBlockBytes - fill));
      crc = crc32c(buf.data() + at, take, crc);
      fill += take;
      at += take;
      if (fill == kBlockBytes) {
        crcs->push_back(crc);
        crc = 0;
        fill = 0;
      }
    }
    pause();
  }
  if (fill) crcs->push_back(crc);
  if (std::fflush(f) != 0 && st.ok()) st = error(Code::io_error, "cannot write checkpoint file '" + tmp + "': " + std::strerror(errno));
  if (st.ok() && fsync(fileno(f)) != 0) st = error(Code::io_error, "cannot fsync checkpoint file '" + tmp + "': " + std::strerror(errno));
  if (std::fclose(f) != 0 && st.ok()) st = error(Code::io_error, "cannot close checkpoint file '" + tmp + "'");
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    st = error(Code::io_error, "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  if (!st.ok()) std::remove(tmp.c_str());
  return st;
}

flatbuffers::Offset<flatbuffers::Vector<int64_t>> vec(flatbuffers::FlatBufferBuilder &b, const flatbuffers::Vector<int64_t> *v) {
  return v ? b.CreateVector(v->data(), v->size()) : b.CreateVector(std::vector<int64_t>{});
}

/// Rank 0: the manifest's FlatBuffer.
std::vector<uint8_t> build_manifest(const SessionAccess &a, const Layout &l, const TrainingState &ts,
                                    const std::vector<std::vector<uint32_t>> &crcs) {
  const zrt::fb::Plan &p = *a.plan;
  flatbuffers::FlatBufferBuilder b(1 << 16);
  std::vector<flatbuffers::Offset<fb::RankFile>> files;
  for (int r = 0; r < a.ri.world; ++r)
    files.push_back(fb::CreateRankFile(b, r, b.CreateString(rank_file_name(r)), l.bytes[static_cast<size_t>(r)],
                                       b.CreateVector(crcs[static_cast<size_t>(r)])));
  // Per entry, the ranks that wrote it and where.
  std::map<int, std::vector<std::pair<int, uint64_t>>> writers;
  for (int r = 0; r < a.ri.world; ++r)
    for (const auto &[ei, off] : l.slices[static_cast<size_t>(r)]) writers[ei].emplace_back(r, off);
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const auto &[ei, ws] : writers) {
    const PlanEntry &e = *p.state()->Get(static_cast<flatbuffers::uoffset_t>(ei));
    std::vector<flatbuffers::Offset<fb::Slice>> slices;
    for (const auto &[r, off] : ws) {
      const auto &rs = *e.ranks()->Get(static_cast<flatbuffers::uoffset_t>(r));
      std::vector<flatbuffers::Offset<fb::Box>> boxes;
      if (rs.pieces())
        for (const auto *pc : *rs.pieces())
          boxes.push_back(fb::CreateBox(b, vec(b, pc->src_start()), vec(b, pc->dst_start()), vec(b, pc->size())));
      slices.push_back(fb::CreateSlice(b, r, b.CreateVector(boxes), rs.flat_begin(), rs.flat_end(), off));
    }
    const auto dt = p.tensors()->Get(static_cast<flatbuffers::uoffset_t>(e.tensor()))->dtype();
    tensors.push_back(fb::CreateTensor(b, b.CreateString(e.name()->str()), b.CreateString(kind_name(e)),
                                       b.CreateString(e.param() ? e.param()->str() : e.name()->str()),
                                       static_cast<uint8_t>(dt), vec(b, e.full_shape()), vec(b, e.local_shape()),
                                       b.CreateVector(slices)));
  }
  std::vector<flatbuffers::Offset<fb::Source>> sources;
  if (p.weights())
    for (const auto *w : *p.weights()) {
      std::string f = w->file() ? w->file()->str() : "";
      if (!f.empty() && f[0] != '/') f = absolute((a.base_dir.empty() ? std::string(".") : a.base_dir) + "/" + f);
      sources.push_back(fb::CreateSource(b, b.CreateString(w->name() ? w->name()->str() : ""), b.CreateString(f),
                                         w->offset(), w->length(), static_cast<uint8_t>(w->dtype()), vec(b, w->shape())));
    }
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto root = fb::CreateManifest(
      b, kFormatMajor, kFormatMinor, b.CreateString(p.producer() ? p.producer()->str() : ""), a.plan_hash, a.ri.world,
      a.ri.tp, a.ri.dp, p.zero_stage(), ts.step, ts.samples, ts.lr, kBlockBytes, b.CreateVector(files),
      b.CreateVector(tensors), b.CreateVector(sources), b.CreateString(find_model(a)), static_cast<int64_t>(now));
  fb::FinishManifestBuffer(b, root);
  return manifest_file_image(b.GetBufferPointer(), b.GetSize());
}

}  // namespace

Status save(const SessionAccess &a, const std::string &root, const TrainingState &ts) {
  if (root.empty()) return error(Code::invalid_argument, "save_checkpoint: empty folder name");
  const int rank = a.ri.rank, world = a.ri.world;
  // 1. Rank 0 makes the folder; everybody learns its name.
  std::string name;
  Status st;
  if (rank == 0) st = new_step_dir(root, ts.step, &name);
  ZRT_RETURN_IF_ERROR(a.agree(st));
  uint64_t len = name.size();
  ZRT_RETURN_IF_ERROR(a.comm->broadcast_host(&len, sizeof(len), 0));
  name.resize(static_cast<size_t>(len));
  if (len) ZRT_RETURN_IF_ERROR(a.comm->broadcast_host(&name[0], name.size(), 0));
  const std::string dir = root + "/" + name;
  // 2. Every rank writes its data file.
  const Layout l = plan_layout(a);
  std::vector<uint32_t> crcs;
  st = write_rank_file(a, l, dir, &crcs);
  ZRT_RETURN_IF_ERROR(a.agree(st));
  // 3. Rank 0 gathers the block checksums (each rank's count follows from the layout).
  std::vector<size_t> counts(static_cast<size_t>(world));
  size_t total = 0;
  for (int r = 0; r < world; ++r) {
    counts[static_cast<size_t>(r)] = static_cast<size_t>((l.bytes[static_cast<size_t>(r)] + kBlockBytes - 1) / kBlockBytes) * 4;
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<uint32_t> all(rank == 0 ? total / 4 : 0);
  ZRT_RETURN_IF_ERROR(a.comm->gather_host(crcs.data(), all.data(), counts.data(), 0));
  // 4. Rank 0: the manifest, then the pointer. The folder is whole before `latest` names it.
  if (rank == 0) {
    std::vector<std::vector<uint32_t>> per(static_cast<size_t>(world));
    size_t at = 0;
    for (int r = 0; r < world; ++r) {
      per[static_cast<size_t>(r)].assign(all.begin() + static_cast<long>(at), all.begin() + static_cast<long>(at + counts[static_cast<size_t>(r)] / 4));
      at += counts[static_cast<size_t>(r)] / 4;
    }
    const std::vector<uint8_t> image = build_manifest(a, l, ts, per);
    pause();
    st = write_file_durable(dir + "/" + kManifestName, image.data(), image.size());
    if (st.ok()) {
      const std::string text = name + "\n";
      st = write_file_durable(root + "/" + kLatestName, text.data(), text.size());
    }
  }
  return a.agree(st);
}

namespace {

/// The manifest's tensors by parameter and kind class.
struct Index {
  std::map<std::string, std::vector<int>> weights, master, moment1, moment2, by_name;
};

Index index_manifest(const Manifest &m) {
  Index ix;
  const auto *ts = m.get().tensors();
  for (size_t i = 0; i < ts->size(); ++i) {
    const fb::Tensor &t = *ts->Get(static_cast<flatbuffers::uoffset_t>(i));
    const std::string kind = t.kind()->str(), param = t.param()->str();
    const int ii = static_cast<int>(i);
    if (kind == "param" || kind == "param_shard") ix.weights[param].push_back(ii);
    else if (kind == "master") ix.master[param].push_back(ii);
    else if (kind == "moment1") ix.moment1[param].push_back(ii);
    else if (kind == "moment2") ix.moment2[param].push_back(ii);
    ix.by_name[t.name()->str()].push_back(ii);
  }
  return ix;
}

/// The saved tensors that hold the values of plan entry `e`, or an error naming the manifest.
Status match(const Manifest &m, const Index &ix, const PlanEntry &e, std::vector<int> *records) {
  const std::string kind = kind_name(e), param = e.param() ? e.param()->str() : e.name()->str();
  const std::string &mp = m.path();
  const std::string producer = m.get().producer() ? m.get().producer()->str() : "";
  auto find = [&](const std::map<std::string, std::vector<int>> &map, const std::string &key) -> const std::vector<int> * {
    auto it = map.find(key);
    return it == map.end() ? nullptr : &it->second;
  };
  const std::vector<int> *rec = nullptr;
  if (kind == "param" || kind == "param_shard" || kind == "master") {
    // The fp32 master part is the truth where the plan keeps one (the parameter may be a bf16 copy).
    rec = find(ix.master, param);
    if (!rec) rec = find(ix.weights, param);
    if (!rec)
      return error(Code::mismatch, "checkpoint manifest '" + mp + "' has no parameter '" + param +
                                       "' that this plan needs: it was saved from another model (by " + producer + ")");
  } else if (kind == "moment1" || kind == "moment2") {
    rec = find(kind == "moment1" ? ix.moment1 : ix.moment2, param);
    if (!rec)
      return error(Code::mismatch, "checkpoint manifest '" + mp + "' has no optimizer state " + kind + " of '" + param +
                                       "': it was saved from another model or by a plan without that state (" + producer + ")");
  } else {
    rec = find(ix.by_name, e.name()->str());
    if (!rec)
      return error(Code::mismatch, "checkpoint manifest '" + mp + "' has no state '" + e.name()->str() + "' (" + kind +
                                       ") that this plan needs (saved by " + producer + ")");
  }
  std::vector<int64_t> want;
  if (e.full_shape()) want.assign(e.full_shape()->begin(), e.full_shape()->end());
  for (int r : *rec) {
    const fb::Tensor &t = *m.get().tensors()->Get(static_cast<flatbuffers::uoffset_t>(r));
    const std::vector<int64_t> got(t.full_shape()->begin(), t.full_shape()->end());
    if (got != want)
      return error(Code::mismatch, "checkpoint manifest '" + mp + "': '" + t.name()->str() + "' has shape " + shape_str(got) +
                                       ", this plan's '" + e.name()->str() + "' " + shape_str(want) +
                                       ": it was saved from another model (by " + producer + ")");
  }
  *records = *rec;
  return {};
}

Status load_local(const SessionAccess &a, const std::string &path, TrainingState *ts, CheckpointInfo *info) {
  std::string dir;
  ZRT_RETURN_IF_ERROR(resolve_checkpoint(path, &dir));
  std::unique_ptr<Manifest> m;
  ZRT_RETURN_IF_ERROR(Manifest::load(dir, &m));
  const fb::Manifest &mf = m->get();
  const zrt::fb::Plan &p = *a.plan;
  // Everything is matched before any byte is read: a foreign checkpoint fails here, naming the manifest.
  const Index ix = index_manifest(*m);
  std::vector<std::pair<int, std::vector<int>>> plan;
  if (p.state())
    for (size_t i = 0; i < p.state()->size(); ++i) {
      const PlanEntry &e = *p.state()->Get(static_cast<flatbuffers::uoffset_t>(i));
      if (!saved_kind(e)) continue;
      std::vector<int> rec;
      ZRT_RETURN_IF_ERROR(match(*m, ix, e, &rec));
      plan.emplace_back(static_cast<int>(i), std::move(rec));
    }
  RankFiles files(*m);
  ZRT_RETURN_IF_ERROR(files.check_all());
  std::vector<uint8_t> buf;
  for (const auto &[ei, rec] : plan) {
    const PlanEntry &e = *p.state()->Get(static_cast<flatbuffers::uoffset_t>(ei));
    const auto &rs = *e.ranks()->Get(static_cast<flatbuffers::uoffset_t>(a.ri.rank));
    const DType dt = static_cast<DType>(p.tensors()->Get(static_cast<flatbuffers::uoffset_t>(e.tensor()))->dtype());
    std::vector<Box> pieces;
    if (rs.pieces())
      for (const auto *pc : *rs.pieces())
        pieces.push_back({{pc->src_start()->begin(), pc->src_start()->end()},
                          {pc->dst_start()->begin(), pc->dst_start()->end()},
                          {pc->size()->begin(), pc->size()->end()}});
    const std::vector<int64_t> full(e.full_shape()->begin(), e.full_shape()->end()),
        local(e.local_shape()->begin(), e.local_shape()->end());
    // Padding (elements no piece covers: the tail of the last ZeRO partition, vocabulary padding) stays 0.
    buf.assign(static_cast<size_t>((rs.flat_end() - rs.flat_begin()) * dtype_size(dt)), 0);
    const std::vector<Run> runs = slice_runs(full, local, pieces, rs.flat_begin(), rs.flat_end());
    ZRT_RETURN_IF_ERROR(fill_from_sources(files, source_runs(*m, rec), runs, buf.data(), dt,
                                          "checkpoint '" + dir + "', tensor '" + e.name()->str() + "'"));
    ZRT_RETURN_IF_ERROR(a.session->write_state(e.name()->str(), buf.data(), buf.size()));
  }
  ts->step = mf.step();
  ts->samples = mf.samples();
  ts->lr = mf.lr();
  if (info) {
    info->dir = dir;
    info->producer = mf.producer() ? mf.producer()->str() : "";
    info->world = mf.world();
    info->tp = mf.tp();
    info->dp = mf.dp();
    info->zero_stage = mf.zero_stage();
    info->same_plan = mf.plan_hash() == a.plan_hash;
    info->tensors_loaded = static_cast<int>(plan.size());
    info->bytes_read = files.bytes_read();
  }
  return {};
}

}  // namespace

Status load(const SessionAccess &a, const std::string &path, TrainingState *ts, CheckpointInfo *info) {
  return a.agree(load_local(a, path, ts, info));
}

}  // namespace ckpt
}  // namespace zrt
