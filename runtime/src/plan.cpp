// Reading and verifying plan files. Every check runs before the executor allocates anything, in the order
// docs/design.md gives: size, magic, CRC, FlatBuffers verifier, version, fingerprint, then every index,
// dtype, shape, arena range, attribute count and weight piece, and finally the collective hash.
#include "plan.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "zk/attention_kernels.h"
#include "zk/few_rows_kernels.h"
#include "zrt/ops.h"
#include "zrt/plan_file.h"

namespace zrt {
namespace {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Shape to_shape(const flatbuffers::Vector<int64_t> *v) {
  Shape s;
  if (v) s.assign(v->begin(), v->end());
  return s;
}

/// Shapes bigger than this are rejected; it also keeps every size product below int64 overflow.
constexpr int64_t kHuge = int64_t{1} << 50;

/// Element count, saturating at kHuge (so a hostile shape cannot overflow); -1 for a negative dim.
int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return -1;
    if (d > 0 && n > kHuge / d) return kHuge;
    n *= d;
  }
  return n;
}

bool broadcasts_to(const Shape &in, const Shape &out) {
  if (in.size() > out.size()) return false;
  for (size_t k = 0; k < in.size(); ++k) {
    int64_t a = in[in.size() - 1 - k], b = out[out.size() - 1 - k];
    if (a != 1 && a != b) return false;
  }
  return true;
}

bool broadcast_shape(const Shape &a, const Shape &b, Shape *out) {
  size_t r = std::max(a.size(), b.size());
  Shape o(r);
  for (size_t k = 0; k < r; ++k) {
    int64_t x = k < a.size() ? a[a.size() - 1 - k] : 1, y = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (x != y && x != 1 && y != 1) return false;
    o[r - 1 - k] = x == 1 ? y : x;
  }
  *out = o;
  return true;
}

struct TInfo {
  DType dtype = DType::f32;
  Shape shape;
  int64_t numel = 0;
  MemSpace space = MemSpace::device;
  uint64_t offset = 0, bytes = 0;
  fb::TensorKind kind = fb::TensorKind::activation;
  std::string name;
};

template <class T>
bool aligned8(const flatbuffers::Vector<T> *v) {
  return !v || v->size() == 0 || reinterpret_cast<uintptr_t>(v->Data()) % 8 == 0;
}

/// FlatBuffers 2.0's verifier checks a vector's length field for 4-byte alignment but not its 8-byte
/// elements; a corrupt (CRC-valid) file could make the runtime read misaligned 64-bit values, which is
/// undefined behaviour. Every vector of 8-byte scalars is checked here before anything reads it.
bool wide_vectors_aligned(const fb::Plan &p) {
  if (p.tensors())
    for (const fb::Tensor *t : *p.tensors())
      if (!aligned8(t->shape())) return false;
  if (p.constants())
    for (const fb::Constant *c : *p.constants())
      if (!aligned8(c->shape())) return false;
  if (p.weights())
    for (const fb::WeightSource *w : *p.weights())
      if (!aligned8(w->shape())) return false;
  if (p.bindings())
    for (const fb::WeightBinding *b : *p.bindings()) {
      if (!aligned8(b->local_shape())) return false;
      if (b->ranks())
        for (const fb::RankSlice *r : *b->ranks())
          if (r->pieces())
            for (const fb::Piece *pc : *r->pieces())
              if (!aligned8(pc->src_start()) || !aligned8(pc->dst_start()) || !aligned8(pc->size())) return false;
    }
  for (const auto *v : {p.inputs(), p.outputs()})
    if (v)
      for (const fb::IOBinding *b : *v)
        if (!aligned8(b->global_shape())) return false;
  if (p.instrs())
    for (const fb::Instr *in : *p.instrs())
      if (!aligned8(in->ints()) || !aligned8(in->floats())) return false;
  if (p.memory())
    for (const fb::RankMemory *m : *p.memory())
      if (!aligned8(m->arena_bytes())) return false;
  auto slices_aligned = [](const flatbuffers::Vector<flatbuffers::Offset<fb::RankSlice>> *ranks) {
    if (ranks)
      for (const fb::RankSlice *r : *ranks)
        if (r->pieces())
          for (const fb::Piece *pc : *r->pieces())
            if (!aligned8(pc->src_start()) || !aligned8(pc->dst_start()) || !aligned8(pc->size())) return false;
    return true;
  };
  if (p.programs())
    for (const fb::Program *prog : *p.programs()) {
      for (const auto *v : {prog->inputs(), prog->outputs()})
        if (v)
          for (const fb::IOBinding *b : *v)
            if (!aligned8(b->global_shape())) return false;
      if (prog->instrs())
        for (const fb::Instr *in : *prog->instrs())
          if (!aligned8(in->ints()) || !aligned8(in->floats())) return false;
    }
  if (p.state())
    for (const fb::StateEntry *e : *p.state())
      if (!aligned8(e->full_shape()) || !aligned8(e->local_shape()) || !slices_aligned(e->ranks())) return false;
  return true;
}

class Verifier {
 public:
  Verifier(const fb::Plan &p, const Launch &l) : p_(p), l_(l) {}
  Status run();

 private:
  Status fail(const std::string &m) { return error(Code::plan_invalid, m); }
  std::string tn(int i) const {
    return "tensor " + std::to_string(i) + (i >= 0 && i < (int)t_.size() ? " '" + t_[i].name + "'" : "");
  }
  Status check_tensors();
  Status check_constants_and_weights();
  Status check_io(const fb::Program &prog, const std::string &pn);
  Status check_programs();
  Status check_state();
  Status check_slices(const std::string &what, int tensor, const Shape &full, const Shape &local,
                      const flatbuffers::Vector<flatbuffers::Offset<fb::RankSlice>> *ranks);
  Status check_instr(int idx, const fb::Instr &in);
  Status check_early();
  Status check_shapes(const OpInfo &sig, const fb::Instr &in, const std::vector<int> &ins, const std::vector<int> &outs,
                      const std::string &where);
  int group(fb::Axis a) const {
    switch (a) {
      case fb::Axis::tp: return tp_;
      case fb::Axis::dp: return dp_;
      case fb::Axis::world: return world_;
      default: return 1;
    }
  }

  const fb::Plan &p_;
  const Launch &l_;
  int tp_ = 1, dp_ = 1, world_ = 1;
  std::vector<TInfo> t_;
  // Per plan space: device and host arenas, and the nvme file (plan 2.3).
  static constexpr int kPlanSpaces = 3;
  uint64_t arena_[kPlanSpaces] = {};
  uint64_t nvme_alignment_ = 4096;
  int num_events_ = 0;        // of the program being checked
  std::string program_;       // its name, for messages
};

/// Kinds whose bytes persist across runs and programs and that only the allowed ops may write.
bool persistent_state(fb::TensorKind k) {
  switch (k) {
    case fb::TensorKind::weight:
    case fb::TensorKind::weight_shard:
    case fb::TensorKind::grad:
    case fb::TensorKind::master:
    case fb::TensorKind::moment:
    case fb::TensorKind::state: return true;
    default: return false;
  }
}

Status Verifier::run() {
  const std::string have = std::to_string(p_.version_major()) + "." + std::to_string(p_.version_minor());
  const std::string mine = std::to_string(kPlanVersionMajor) + "." + std::to_string(kPlanVersionMinor);
  if (p_.version_major() < kPlanVersionMajor)
    return error(Code::mismatch, "plan format version " + have + " is older than this runtime's " + mine +
                                     " (format 2 added named programs and training state): recompile the model "
                                     "with this release's zplan");
  if (p_.version_major() != kPlanVersionMajor)
    return error(Code::mismatch, "plan format version " + have + " is not supported (this runtime reads " +
                                     std::to_string(kPlanVersionMajor) + ".x up to " + mine + ")");
  if (p_.version_minor() > kPlanVersionMinor)
    return error(Code::mismatch, "plan format version " + have + " is newer than this runtime's " + mine);
  const fb::Fingerprint *fp = p_.fingerprint();
  if (!fp) return fail("the plan has no fingerprint");
  world_ = fp->world();
  tp_ = fp->tp();
  dp_ = fp->dp();
  // In 64 bits: a corrupt tp x dp must not overflow int.
  if (tp_ < 1 || dp_ < 1 || static_cast<int64_t>(world_) != static_cast<int64_t>(tp_) * dp_)
    return fail("fingerprint mesh is inconsistent: world " + std::to_string(world_) + " != tp " + std::to_string(tp_) +
                " x dp " + std::to_string(dp_));
  if (world_ != l_.world)
    return error(Code::mismatch, "the plan is for " + std::to_string(world_) + " ranks (tp " + std::to_string(tp_) +
                                     " x dp " + std::to_string(dp_) + ") but the job has " + std::to_string(l_.world) +
                                     " (start it with mpirun -np " + std::to_string(world_) + ")");
  if (static_cast<int>(fp->backend()) != static_cast<int>(l_.backend))
    return error(Code::mismatch, std::string("the plan is for backend '") + fb::EnumNameBackend(fp->backend()) +
                                     "' but this launch runs backend '" +
                                     (l_.backend == BackendKind::cpu ? "cpu" : "cuda") + "'");
  if (static_cast<int>(fp->dtype()) > static_cast<int>(fb::DType::MAX)) return fail("fingerprint dtype is unknown");
  const auto *mem = p_.memory();
  if (!mem || static_cast<int>(mem->size()) != world_)
    return fail("Plan.memory must hold one RankMemory per rank (" + std::to_string(world_) + "), it holds " +
                std::to_string(mem ? mem->size() : 0));
  const fb::RankMemory *rm = mem->Get(l_.rank);
  if (!rm) return fail("Plan.memory has no entry for rank " + std::to_string(l_.rank));
  if (rm->arena_bytes())
    for (size_t s = 0; s < rm->arena_bytes()->size() && s < kPlanSpaces; ++s) arena_[s] = rm->arena_bytes()->Get(s);
  if (arena_[2]) {
    const fb::NvmeStore *nv = p_.nvme();
    if (!nv) return fail("the plan has an nvme space of " + std::to_string(arena_[2]) + " bytes but no Plan.nvme");
    nvme_alignment_ = nv->alignment();
    if (nvme_alignment_ < 512 || (nvme_alignment_ & (nvme_alignment_ - 1)) != 0)
      return fail("Plan.nvme.alignment " + std::to_string(nvme_alignment_) + " is not a power of two of at least 512");
  }
  ZRT_RETURN_IF_ERROR(check_tensors());
  ZRT_RETURN_IF_ERROR(check_constants_and_weights());
  ZRT_RETURN_IF_ERROR(check_programs());
  ZRT_RETURN_IF_ERROR(check_state());
  return {};
}

Status Verifier::check_programs() {
  // Format 2 keeps every instruction stream in Plan.programs; the 1.x fields must be empty so that no
  // reader can mistake them for a program.
  if ((p_.inputs() && p_.inputs()->size()) || (p_.outputs() && p_.outputs()->size()) ||
      (p_.instrs() && p_.instrs()->size()) || p_.num_events() != 0 || p_.collective_hash() != 0)
    return fail("Plan.inputs, outputs, instrs, num_events and collective_hash must be empty in format 2 (each "
                "Program carries its own)");
  const auto *progs = p_.programs();
  if (!progs || progs->size() == 0) return fail("the plan has no programs");
  std::vector<std::string> names;
  for (size_t pi = 0; pi < progs->size(); ++pi) {
    const fb::Program &prog = *progs->Get(pi);
    program_ = prog.name() ? prog.name()->str() : "";
    const std::string pn = "program " + std::to_string(pi) + " '" + program_ + "'";
    if (program_.empty()) return fail(pn + ": has no name");
    if (std::find(names.begin(), names.end(), program_) != names.end()) return fail(pn + ": the name is used twice");
    names.push_back(program_);
    ZRT_RETURN_IF_ERROR(check_io(prog, pn));
    if (prog.num_events() < 0) return fail(pn + ": num_events is negative");
    num_events_ = prog.num_events();
    if (const auto *instrs = prog.instrs())
      for (size_t i = 0; i < instrs->size(); ++i) {
        Status st = check_instr(static_cast<int>(i), *instrs->Get(i));
        if (!st.ok()) return progs->size() > 1 ? st.with_context(pn) : st;
      }
    const uint64_t h = compute_collective_hash(p_, prog);
    if (h != prog.collective_hash()) {
      char buf[160];
      std::snprintf(buf, sizeof(buf),
                    "collective hash mismatch: the plan records 0x%016llx, its instructions hash to 0x%016llx",
                    static_cast<unsigned long long>(prog.collective_hash()), static_cast<unsigned long long>(h));
      return fail(progs->size() > 1 ? pn + ": " + buf : std::string(buf));
    }
  }
  return check_early();
}

/// Plan 2.18: a step marked early (Instr.early) has its kernel load the op's early operands (zrt/ops.h,
/// early_operands) before it waits for the previous kernel on its stream, which may then still be writing. The
/// claim holds only where no step writes those bytes: no instruction of any program for the weights of the
/// products and of decode_layer (EarlyScope::plan), no other instruction of the step's own program for
/// rope_attention's caches and positions (EarlyScope::program), whose step must also follow an instruction of
/// its program on its stream. A plan that claims it elsewhere (a wrong compiler, a hostile file) is refused
/// here, naming the step and the writer, so that it cannot make a kernel read a half-written tensor.
/// Writes are compared as byte ranges of the arenas, so views and reused bytes count too. O(n log n) in the
/// instructions: the written ranges are merged once, each merged range remembering its one writer (or -1 for
/// several), so a query only meets the ranges of the step itself before it finds another writer or ends.
Status Verifier::check_early() {
  const auto *progs = p_.programs();
  struct Written {
    int space;
    uint64_t begin, end;
    int64_t owner;  // program << 32 | instruction; -1 once several instructions write the range
  };
  auto owner_of = [](size_t pi, size_t i) { return static_cast<int64_t>(pi) << 32 | static_cast<int64_t>(i); };
  bool any = false;
  std::vector<Written> all;                      // every program's writes (EarlyScope::plan)
  std::vector<std::vector<Written>> per(progs->size());  // each program's (EarlyScope::program)
  for (size_t pi = 0; pi < progs->size(); ++pi) {
    const auto *instrs = progs->Get(pi)->instrs();
    if (!instrs) continue;
    for (size_t i = 0; i < instrs->size(); ++i) {
      const fb::Instr &in = *instrs->Get(i);
      any = any || in.early();
      if (in.outputs())
        for (int t : *in.outputs()) {
          const TInfo &ti = t_[static_cast<size_t>(t)];
          if (ti.bytes == 0) continue;
          const Written w{static_cast<int>(ti.space), ti.offset, ti.offset + ti.bytes, owner_of(pi, i)};
          all.push_back(w);
          per[pi].push_back(w);
        }
    }
  }
  if (!any) return {};
  auto merge = [](std::vector<Written> &v) {
    std::sort(v.begin(), v.end(), [](const Written &a, const Written &b) {
      return a.space != b.space ? a.space < b.space : a.begin < b.begin;
    });
    std::vector<Written> m;
    for (const Written &w : v) {
      if (!m.empty() && m.back().space == w.space && w.begin < m.back().end) {
        m.back().end = std::max(m.back().end, w.end);
        if (m.back().owner != w.owner) m.back().owner = -1;
      } else {
        m.push_back(w);
      }
    }
    v = std::move(m);
  };
  merge(all);
  for (auto &v : per) merge(v);
  // Whether a merged range other than one written by `self` alone overlaps [begin, end) of `space`.
  auto written_by_other = [](const std::vector<Written> &v, int space, uint64_t begin, uint64_t end, int64_t self) {
    auto it = std::lower_bound(v.begin(), v.end(), std::make_pair(space, begin), [](const Written &w, const auto &k) {
      return w.space != k.first ? w.space < k.first : w.end <= k.second;
    });
    for (; it != v.end() && it->space == space && it->begin < end; ++it)
      if (it->owner != self) return true;
    return false;
  };
  for (size_t pi = 0; pi < progs->size(); ++pi) {
    const fb::Program &prog = *progs->Get(pi);
    const auto *instrs = prog.instrs();
    if (!instrs) continue;
    const std::string pn = "program '" + (prog.name() ? prog.name()->str() : std::string()) + "'";
    uint32_t streams_seen = 0;  // the streams an earlier instruction that launches work ran on
    for (size_t i = 0; i < instrs->size(); ++i) {
      const fb::Instr &in = *instrs->Get(i);
      const Op op = static_cast<Op>(in.op());
      const bool launches = op != Op::reshape && op != Op::release;
      const uint32_t stream_bit = 1u << static_cast<unsigned>(in.stream());
      if (in.early()) {
        const int nin = in.inputs() ? static_cast<int>(in.inputs()->size()) : 0;
        const EarlyOperands eo = early_operands(op, nin);
        const std::string where = pn + " instruction " + std::to_string(i) + " (" + op_name(in.op()) +
                                  (in.name() ? " '" + in.name()->str() + "'" : "") + ")";
        if (eo.scope == EarlyScope::none)
          return fail(where + ": is marked early (plan 2.18), but a " + op_name(in.op()) +
                      " step loads nothing before its wait for the previous kernel");
        if (eo.scope == EarlyScope::program && !(streams_seen & stream_bit))
          return fail(where + ": is marked early, but no instruction of its program runs before it on its "
                      "stream: the kernel its early loads would overlap is another program's");
        for (int k = 0; k < nin; ++k) {
          const int t = in.inputs()->Get(k);
          if (!eo.has(k) || t < 0) continue;
          const TInfo &ti = t_[static_cast<size_t>(t)];
          if (ti.bytes == 0) continue;
          const bool plan_wide = eo.scope == EarlyScope::plan;
          if (!written_by_other(plan_wide ? all : per[pi], static_cast<int>(ti.space), ti.offset,
                                ti.offset + ti.bytes, plan_wide ? -2 : owner_of(pi, i)))
            continue;
          // Name the first writer, in the step's own program first.
          std::string writer;
          for (size_t n = 0; writer.empty() && n < (plan_wide ? progs->size() : 1); ++n) {
            const size_t pj = n == 0 ? pi : n <= pi ? n - 1 : n;
            const auto *js = progs->Get(pj)->instrs();
            for (size_t j = 0; writer.empty() && js && j < js->size(); ++j) {
              const fb::Instr &w = *js->Get(j);
              if ((pj == pi && j == i && !plan_wide) || !w.outputs()) continue;
              for (int o : *w.outputs()) {
                const TInfo &to = t_[static_cast<size_t>(o)];
                if (to.space == ti.space && to.offset < ti.offset + ti.bytes && ti.offset < to.offset + to.bytes) {
                  const auto *pnm = progs->Get(pj)->name();
                  writer = "instruction " + std::to_string(j) + " (" + op_name(w.op()) +
                           (w.name() ? " '" + w.name()->str() + "'" : "") + ") of program '" +
                           (pnm ? pnm->str() : std::string()) + "'";
                  break;
                }
              }
            }
          }
          return fail(where + ": is marked early, but its input " + std::to_string(k) + " (" + tn(t) +
                      ") is written by " + writer + ": its kernel would load it before the previous kernel has " +
                      "finished (plan 2.18 allows early loads only of " +
                      (plan_wide ? "tensors no step of the plan writes" : "tensors no other step of the program writes") +
                      "; recompile the plan)");
        }
      }
      if (launches) streams_seen |= stream_bit;
    }
  }
  return {};
}

Status Verifier::check_slices(const std::string &bn, int tensor, const Shape &ss, const Shape &ls,
                              const flatbuffers::Vector<flatbuffers::Offset<fb::RankSlice>> *ranks) {
  const TInfo &ti = t_[tensor];
  if (ls.size() != ss.size()) return fail(bn + ": local shape " + shape_str(ls) + " and full shape " + shape_str(ss) + " differ in rank");
  if (numel(ls) < 0 || numel(ls) >= kHuge) return fail(bn + ": bad local shape " + shape_str(ls));
  if (numel(ss) < 0 || numel(ss) >= kHuge) return fail(bn + ": bad full shape " + shape_str(ss));
  const int64_t local_n = numel(ls);
  if (!ranks || static_cast<int>(ranks->size()) != world_)
    return fail(bn + ": needs one RankSlice per rank (" + std::to_string(world_) + ")");
  for (int r = 0; r < world_; ++r) {
    const fb::RankSlice *rs = ranks->Get(r);
    const std::string rn = bn + " (" + tn(tensor) + "), rank " + std::to_string(r);
    if (rs->flat_end() < rs->flat_begin()) return fail(rn + ": flat range is reversed");
    const uint64_t keep = rs->flat_end() - rs->flat_begin();
    if (keep != static_cast<uint64_t>(ti.numel))
      return fail(rn + ": keeps " + std::to_string(keep) + " elements, the tensor holds " + std::to_string(ti.numel));
    const bool whole = rs->flat_begin() == 0 && keep == static_cast<uint64_t>(local_n);
    if (ti.kind == fb::TensorKind::weight && !whole)
      return fail(rn + ": a resident weight must keep the whole local tensor [0, " + std::to_string(local_n) + ")");
    if (ti.kind == fb::TensorKind::weight_shard || !whole) {
      // Shards are gathered over dp in group order, so dp index d must hold the d-th block.
      const uint64_t want = static_cast<uint64_t>(r / tp_) * keep;
      if (rs->flat_begin() != want || keep * dp_ < static_cast<uint64_t>(local_n))
        return fail(rn + ": a ZeRO shard of dp index " + std::to_string(r / tp_) + " must keep [" +
                    std::to_string(want) + ", " + std::to_string(want + keep) + ") and dp shards must cover " +
                    std::to_string(local_n) + " elements");
    }
    if (!rs->pieces()) continue;
    for (size_t pi = 0; pi < rs->pieces()->size(); ++pi) {
      const fb::Piece *pc = rs->pieces()->Get(pi);
      Shape a = to_shape(pc->src_start()), d = to_shape(pc->dst_start()), z = to_shape(pc->size());
      const std::string pn = rn + ", piece " + std::to_string(pi);
      if (a.size() != ss.size() || d.size() != ss.size() || z.size() != ss.size())
        return fail(pn + ": src_start, dst_start and size must have the source's rank " + std::to_string(ss.size()));
      for (size_t k = 0; k < ss.size(); ++k)
        if (z[k] < 0 || a[k] < 0 || d[k] < 0 || a[k] > ss[k] || z[k] > ss[k] - a[k] || d[k] > ls[k] ||
            z[k] > ls[k] - d[k])
          return fail(pn + ": box src " + shape_str(a) + " dst " + shape_str(d) + " size " + shape_str(z) +
                      " is outside the source " + shape_str(ss) + " or the local tensor " + shape_str(ls));
    }
  }
  return {};
}

Status Verifier::check_state() {
  const auto *st = p_.state();
  if (!st) return {};
  std::vector<std::string> names;
  std::vector<bool> seen(t_.size(), false);
  for (size_t i = 0; i < st->size(); ++i) {
    const fb::StateEntry &e = *st->Get(i);
    const std::string name = e.name() ? e.name()->str() : "";
    const std::string sn = "state " + std::to_string(i) + " '" + name + "'";
    if (name.empty()) return fail(sn + ": has no name");
    if (std::find(names.begin(), names.end(), name) != names.end()) return fail(sn + ": the name is used twice");
    names.push_back(name);
    if (e.tensor() < 0 || e.tensor() >= static_cast<int>(t_.size()))
      return fail(sn + ": tensor index " + std::to_string(e.tensor()) + " is out of range");
    if (seen[e.tensor()]) return fail(sn + ": " + tn(e.tensor()) + " is named by two state entries");
    seen[e.tensor()] = true;
    if (e.kind() > fb::StateKind::MAX) return fail(sn + ": unknown kind");
    if (e.init() > fb::StateInit::MAX) return fail(sn + ": unknown init");
    fb::TensorKind want;
    switch (e.kind()) {
      case fb::StateKind::param: want = fb::TensorKind::weight; break;
      case fb::StateKind::param_shard: want = fb::TensorKind::weight_shard; break;
      case fb::StateKind::master: want = fb::TensorKind::master; break;
      case fb::StateKind::moment1:
      case fb::StateKind::moment2: want = fb::TensorKind::moment; break;
      case fb::StateKind::grad: want = fb::TensorKind::grad; break;
      default: want = fb::TensorKind::state; break;
    }
    // ZeRO's master part of a parameter is loaded from the parameter's source like a shard.
    const bool master_shard = e.kind() == fb::StateKind::master && t_[e.tensor()].kind == fb::TensorKind::weight_shard;
    if (t_[e.tensor()].kind != want && !master_shard)
      return fail(sn + ": a state of kind " + fb::EnumNameStateKind(e.kind()) + " must name a tensor of kind " +
                  fb::EnumNameTensorKind(want) + ", " + tn(e.tensor()) + " is " + fb::EnumNameTensorKind(t_[e.tensor()].kind));
    ZRT_RETURN_IF_ERROR(check_slices(sn, e.tensor(), to_shape(e.full_shape()), to_shape(e.local_shape()), e.ranks()));
  }
  // Every persistent tensor is named, so that checkpoints can find all of it.
  for (size_t t = 0; t < t_.size(); ++t)
    if (persistent_state(t_[t].kind) && !seen[t] && t_[t].kind != fb::TensorKind::weight &&
        t_[t].kind != fb::TensorKind::weight_shard)
      return fail(tn(static_cast<int>(t)) + " of kind " + fb::EnumNameTensorKind(t_[t].kind) + " has no state entry");
  return {};
}

Status Verifier::check_tensors() {
  const auto *ts = p_.tensors();
  const size_t n = ts ? ts->size() : 0;
  t_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const fb::Tensor *t = ts->Get(i);
    TInfo &ti = t_[i];
    ti.name = t->name() ? t->name()->str() : "";
    const std::string w = tn(static_cast<int>(i));
    if (static_cast<int>(t->dtype()) < 0 || t->dtype() > fb::DType::MAX) return fail(w + ": unknown dtype");
    if (static_cast<int>(t->space()) < 0 || t->space() > fb::MemSpace::MAX) return fail(w + ": unknown memory space");
    if (static_cast<int>(t->kind()) < 0 || t->kind() > fb::TensorKind::MAX) return fail(w + ": unknown kind");
    ti.dtype = static_cast<DType>(t->dtype());
    ti.space = static_cast<MemSpace>(t->space());
    ti.kind = t->kind();
    ti.shape = to_shape(t->shape());
    if (ti.shape.size() > static_cast<size_t>(8)) return fail(w + ": rank " + std::to_string(ti.shape.size()) + " > 8");
    int64_t ne = 1;
    for (int64_t d : ti.shape) {
      if (d < 0) return fail(w + ": negative dimension in shape " + shape_str(ti.shape));
      if (d > 0 && ne > (int64_t{1} << 50) / d) return fail(w + ": shape " + shape_str(ti.shape) + " is too large");
      ne *= d;
    }
    ti.numel = ne;
    ti.offset = t->offset();
    ti.bytes = t->bytes();
    const uint64_t need = static_cast<uint64_t>(ne) * dtype_size(ti.dtype);
    if (ti.bytes < need)
      return fail(w + ": reserves " + std::to_string(ti.bytes) + " bytes, its shape " + shape_str(ti.shape) +
                  " needs " + std::to_string(need));
    const uint64_t arena = arena_[static_cast<int>(ti.space)];
    if (ti.offset > arena || ti.bytes > arena - ti.offset)
      return fail(w + ": [" + std::to_string(ti.offset) + ", " + std::to_string(ti.offset + ti.bytes) +
                  ") overflows the " + fb::EnumNameMemSpace(t->space()) + " arena of " + std::to_string(arena) +
                  " bytes of rank " + std::to_string(l_.rank));
    if (ti.offset % 8 != 0 && dtype_size(ti.dtype) > 1 && ti.offset % dtype_size(ti.dtype) != 0)
      return fail(w + ": offset " + std::to_string(ti.offset) + " is not aligned to its element size");
    if (ti.space == MemSpace::nvme && (ti.offset % nvme_alignment_ || ti.bytes % nvme_alignment_))
      return fail(w + ": the nvme range [" + std::to_string(ti.offset) + ", " + std::to_string(ti.offset + ti.bytes) +
                  ") is not aligned to " + std::to_string(nvme_alignment_));
  }
  // An arena far larger than the tensors placed in it is a corrupt or mistaken plan; refusing it keeps a
  // flipped bit from turning into a huge allocation.
  for (int sp = 0; sp < kPlanSpaces; ++sp) {
    uint64_t extent = 0;
    for (const TInfo &ti : t_)
      if (static_cast<int>(ti.space) == sp) extent = std::max(extent, ti.offset + ti.bytes);
    if (arena_[sp] > 2 * extent + (uint64_t{1} << 20))
      return fail(std::string("the ") + fb::EnumNameMemSpace(static_cast<fb::MemSpace>(sp)) + " arena of rank " +
                  std::to_string(l_.rank) + " is " + std::to_string(arena_[sp]) + " bytes but its tensors end at " +
                  std::to_string(extent));
  }
  for (size_t i = 0; i < n; ++i) {
    const fb::Tensor *t = ts->Get(i);
    const std::string w = tn(static_cast<int>(i));
    if (t->alias_of() != -1) {
      const int b = t->alias_of();
      if (b < 0 || b >= static_cast<int>(n) || b == static_cast<int>(i))
        return fail(w + ": alias_of " + std::to_string(b) + " is not a tensor index");
      if (t_[b].space != t_[i].space || t_[b].offset != t_[i].offset || t_[b].bytes != t_[i].bytes)
        return fail(w + ": an alias must have the space, offset and bytes of its base " + tn(b));
    }
    if (t->kind() == fb::TensorKind::constant) {
      const int c = t->constant();
      if (!p_.constants() || c < 0 || c >= static_cast<int>(p_.constants()->size()))
        return fail(w + ": constant index " + std::to_string(c) + " is out of range");
    }
  }
  return {};
}

Status Verifier::check_constants_and_weights() {
  const int nt = static_cast<int>(t_.size());
  if (const auto *cs = p_.constants()) {
    for (size_t i = 0; i < cs->size(); ++i) {
      const fb::Constant *c = cs->Get(i);
      if (c->dtype() > fb::DType::MAX) return fail("constant " + std::to_string(i) + ": unknown dtype");
      Shape s = to_shape(c->shape());
      if (numel(s) < 0 || numel(s) >= kHuge) return fail("constant " + std::to_string(i) + ": bad shape " + shape_str(s));
      const uint64_t need = static_cast<uint64_t>(numel(s)) * dtype_size(static_cast<DType>(c->dtype()));
      const uint64_t have = c->data() ? c->data()->size() : 0;
      if (have != need)
        return fail("constant " + std::to_string(i) + ": holds " + std::to_string(have) + " bytes, shape " +
                    shape_str(s) + " needs " + std::to_string(need));
    }
    for (int i = 0; i < nt; ++i) {
      const fb::Tensor *t = p_.tensors()->Get(i);
      if (t->kind() != fb::TensorKind::constant) continue;
      const fb::Constant *c = cs->Get(t->constant());
      if (numel(to_shape(c->shape())) != t_[i].numel || static_cast<DType>(c->dtype()) != t_[i].dtype)
        return fail(tn(i) + ": its constant's dtype or element count differs from the tensor's");
    }
  }
  const auto *ws = p_.weights();
  const int nw = ws ? static_cast<int>(ws->size()) : 0;
  for (int i = 0; i < nw; ++i) {
    const fb::WeightSource *w = ws->Get(i);
    const std::string wn = "weight " + std::to_string(i) + " '" + (w->name() ? w->name()->str() : "") + "'";
    if (w->dtype() > fb::DType::MAX) return fail(wn + ": unknown dtype");
    Shape s = to_shape(w->shape());
    if (s.size() > 8) return fail(wn + ": rank > 8");
    if (numel(s) < 0 || numel(s) >= kHuge) return fail(wn + ": bad shape " + shape_str(s));
    const uint64_t need = static_cast<uint64_t>(numel(s)) * dtype_size(static_cast<DType>(w->dtype()));
    const bool has_file = w->file() && w->file()->size() > 0;
    if (has_file) {
      if (w->length() != need)
        return fail(wn + ": length " + std::to_string(w->length()) + " differs from its shape's " + std::to_string(need) +
                    " bytes");
      if (w->offset() > UINT64_MAX - w->length()) return fail(wn + ": offset + length overflows");
    } else {
      const uint64_t have = w->inline_data() ? w->inline_data()->size() : 0;
      if (have != need)
        return fail(wn + ": has no file and " + std::to_string(have) + " inline bytes, its shape needs " +
                    std::to_string(need));
    }
  }
  const auto *bs = p_.bindings();
  if (!bs) return {};
  for (size_t bi = 0; bi < bs->size(); ++bi) {
    const fb::WeightBinding *b = bs->Get(bi);
    const std::string bn = "weight binding " + std::to_string(bi);
    if (b->tensor() < 0 || b->tensor() >= nt) return fail(bn + ": tensor index " + std::to_string(b->tensor()) + " is out of range");
    if (b->source() < 0 || b->source() >= nw) return fail(bn + ": source index " + std::to_string(b->source()) + " is out of range");
    const TInfo &ti = t_[b->tensor()];
    if (ti.kind != fb::TensorKind::weight && ti.kind != fb::TensorKind::weight_shard)
      return fail(bn + ": " + tn(b->tensor()) + " is not a weight or weight_shard tensor");
    const fb::WeightSource *src = ws->Get(b->source());
    ZRT_RETURN_IF_ERROR(check_slices(bn, b->tensor(), to_shape(src->shape()), to_shape(b->local_shape()), b->ranks()));
    // Several bindings may fill one tensor (a merged weight's parts): the runtime assembles a run of them into one
    // buffer, so they must be adjacent, and resident.
    for (size_t bj = 0; bj + 1 < bi; ++bj)
      if (bs->Get(bj)->tensor() == b->tensor() && bs->Get(bi - 1)->tensor() != b->tensor())
        return fail(bn + ": binds " + tn(b->tensor()) + " like binding " + std::to_string(bj) +
                    ", but the bindings of one tensor must be adjacent");
    if (bi > 0 && bs->Get(bi - 1)->tensor() == b->tensor() && ti.kind != fb::TensorKind::weight)
      return fail(bn + ": only a resident weight may be filled by several bindings");
  }
  return {};
}

Status Verifier::check_io(const fb::Program &prog, const std::string &pn) {
  const bool many = p_.programs()->size() > 1;
  std::vector<std::string> input_names;
  for (int pass = 0; pass < 2; ++pass) {
    const auto *v = pass == 0 ? prog.inputs() : prog.outputs();
    if (!v) continue;
    for (size_t i = 0; i < v->size(); ++i) {
      const fb::IOBinding *b = v->Get(i);
      const std::string bn = (many ? pn + ": " : std::string()) + (pass == 0 ? "input" : "output") + " '" +
                             (b->name() ? b->name()->str() : "") + "'";
      if (pass == 0 && b->name()) input_names.push_back(b->name()->str());
      if (!b->name() || b->name()->size() == 0) return fail(bn + ": has no name");
      if (b->tensor() < 0 || b->tensor() >= static_cast<int>(t_.size()))
        return fail(bn + ": tensor index " + std::to_string(b->tensor()) + " is out of range");
      const TInfo &ti = t_[b->tensor()];
      if (static_cast<DType>(b->dtype()) != ti.dtype) return fail(bn + ": dtype differs from " + tn(b->tensor()));
      Shape g = to_shape(b->global_shape());
      if (g.size() != ti.shape.size()) return fail(bn + ": global shape " + shape_str(g) + " and local shape " + shape_str(ti.shape) + " differ in rank");
      for (size_t k = 0; k < g.size(); ++k) {
        int64_t want = g[k];
        if (k == 0 && b->batch_split()) {
          if (g[0] % dp_ != 0)
            return fail(bn + ": batch " + std::to_string(g[0]) + " is not divisible by dp " + std::to_string(dp_));
          want = g[0] / dp_;
        }
        if (ti.shape[k] != want)
          return fail(bn + ": local shape " + shape_str(ti.shape) + " does not match global shape " + shape_str(g) +
                      (b->batch_split() ? " split over dp " + std::to_string(dp_) : ""));
      }
      if (b->batch_split() && g.empty()) return fail(bn + ": batch_split needs rank >= 1");
      if (pass == 0 && ti.kind != fb::TensorKind::input) return fail(bn + ": " + tn(b->tensor()) + " is not of kind input");
    }
  }
  if (const auto *sc = prog.scalars())
    for (size_t i = 0; i < sc->size(); ++i) {
      const fb::ScalarInput *x = sc->Get(i);
      const std::string name = x->name() ? x->name()->str() : "";
      const std::string bn = (many ? pn + ": " : std::string()) + "scalar input '" + name + "'";
      if (name.empty()) return fail(bn + ": has no name");
      if (std::find(input_names.begin(), input_names.end(), name) != input_names.end())
        return fail(bn + ": the name is used twice among the program's inputs");
      input_names.push_back(name);
      if (x->tensor() < 0 || x->tensor() >= static_cast<int>(t_.size()))
        return fail(bn + ": tensor index " + std::to_string(x->tensor()) + " is out of range");
      const TInfo &ti = t_[x->tensor()];
      if (ti.kind != fb::TensorKind::input || !ti.shape.empty() || static_cast<DType>(x->dtype()) != ti.dtype ||
          ti.dtype == DType::bool8)
        return fail(bn + ": " + tn(x->tensor()) + " must be a numeric rank-0 input tensor of the scalar's dtype");
      if (!std::isfinite(x->default_value())) return fail(bn + ": the default value is not finite");
    }
  return {};
}

Status Verifier::check_instr(int idx, const fb::Instr &in) {
  const OpInfo *info = op_info(in.op());
  std::string where = "instruction " + std::to_string(idx) + " (" + (info ? info->name : "?") +
                      (in.name() ? " '" + in.name()->str() + "'" : "") + ")";
  if (!info) return fail(where + ": unknown opcode " + std::to_string(in.op()) + " (not in the op registry)");
  const Op op = info->op;
  const OpInfo &sig = *info;
  const int nin = in.inputs() ? static_cast<int>(in.inputs()->size()) : 0;
  const int nout = in.outputs() ? static_cast<int>(in.outputs()->size()) : 0;
  const int nints = in.ints() ? static_cast<int>(in.ints()->size()) : 0;
  const int nfl = in.floats() ? static_cast<int>(in.floats()->size()) : 0;
  auto range = [](int lo, int hi) { return std::to_string(lo) + (hi != lo ? " to " + std::to_string(hi) : ""); };
  if (nin < sig.min_in || nin > sig.max_in)
    return fail(where + ": has " + std::to_string(nin) + " inputs, expects " + range(sig.min_in, sig.max_in));
  if (nout < sig.min_out || nout > sig.max_out)
    return fail(where + ": has " + std::to_string(nout) + " outputs, expects " + range(sig.min_out, sig.max_out));
  if (sig.min_ints != ZRT_PER_OP && (nints < sig.min_ints || nints > sig.max_ints))
    return fail(where + ": has " + std::to_string(nints) + " ints, expects " + range(sig.min_ints, sig.max_ints));
  if (nfl != sig.floats) return fail(where + ": has " + std::to_string(nfl) + " floats, expects " + std::to_string(sig.floats));
  std::vector<int> ins, outs;
  for (int i = 0; i < nin; ++i) {
    int t = in.inputs()->Get(i);
    if (t == -1 && sig.optional_input(i)) { ins.push_back(-1); continue; }
    if (t < 0 || t >= static_cast<int>(t_.size())) return fail(where + ": input " + std::to_string(i) + " is tensor index " + std::to_string(t) + ", out of range");
    ins.push_back(t);
  }
  for (int i = 0; i < nout; ++i) {
    int t = in.outputs()->Get(i);
    if (t < 0 || t >= static_cast<int>(t_.size())) return fail(where + ": output " + std::to_string(i) + " is tensor index " + std::to_string(t) + ", out of range");
    const auto k = t_[t].kind;
    if (k == fb::TensorKind::input || k == fb::TensorKind::constant) {
      // Prefetch and evict may move tensors between spaces; nothing else writes a bound tensor.
      if (sig.category != OpCategory::transfer)
        return fail(where + ": writes " + tn(t) + ", which is a bound " + fb::EnumNameTensorKind(k) + " tensor");
    } else if (persistent_state(k)) {
      // Persistent state changes only through the registry's in-place state writes and explicit copies
      // (copy, cast, fill: zg.assign and initialisation); prefetch/evict move it between spaces.
      const bool allowed = sig.category == OpCategory::state_write || sig.category == OpCategory::transfer ||
                           op == Op::copy || op == Op::cast || op == Op::fill;
      if (!allowed)
        return fail(where + ": writes " + tn(t) + ", which is persistent " + fb::EnumNameTensorKind(k) +
                    " state; only state-writing ops (adamw, accumulate) and copy, cast or fill may");
    }
    outs.push_back(t);
  }
  // Results written in place must name the very tensor of the operand they overwrite.
  for (int k = 0; k < nout; ++k) {
    const int src = sig.in_place_input(k);
    if (src >= 0 && outs[k] != ins[src])
      return fail(where + ": output " + std::to_string(k) + " is " + tn(outs[k]) + " but the op writes it in place over input " +
                  std::to_string(src) + " (" + tn(ins[src]) + ")");
  }
  if (in.axis() > fb::Axis::MAX) return fail(where + ": unknown axis");
  if (sig.category == OpCategory::collective && in.axis() == fb::Axis::none)
    return fail(where + ": a collective needs an axis (tp, dp or world)");
  if (op == Op::gather_param && in.axis() != fb::Axis::dp && in.axis() != fb::Axis::none)
    return fail(where + ": gather_param runs over dp");
  if (in.stream() > fb::Stream::MAX) return fail(where + ": unknown stream");
  // NVMe tensors are only ever moved whole by nvme_read / nvme_write, which run on the io stream: no kernel
  // may be handed a file offset as a pointer.
  const bool is_io = op == Op::nvme_read || op == Op::nvme_write;
  if (is_io != (in.stream() == fb::Stream::io))
    return fail(where + (is_io ? ": NVMe transfers run on the io stream" : ": only NVMe transfers run on the io stream"));
  if (!is_io)
    for (const auto *v : {&ins, &outs})
      for (int t : *v)
        if (t >= 0 && t_[t].space == MemSpace::nvme)
          return fail(where + ": names " + tn(t) + ", an nvme tensor; only nvme_read and nvme_write may");
  if (in.waits())
    for (int e : *in.waits())
      if (e < 0 || e >= num_events_) return fail(where + ": waits on event " + std::to_string(e) + ", out of range");
  if (in.signal() < -1 || in.signal() >= num_events_) return fail(where + ": signals event " + std::to_string(in.signal()) + ", out of range");
  return check_shapes(sig, in, ins, outs, where);
}

Status Verifier::check_shapes(const OpInfo &sig, const fb::Instr &in, const std::vector<int> &ins, const std::vector<int> &outs,
                              const std::string &where) {
  auto I = [&](size_t i) -> const TInfo & { return t_[ins[i]]; };
  auto O = [&]() -> const TInfo & { return t_[outs[0]]; };
  auto ints = [&](int i) { return in.ints()->Get(i); };
  auto bad = [&](const std::string &m) { return fail(where + ": " + m); };
  auto is_fl = [](DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; };
  auto Ok = [&](size_t k) -> const TInfo & { return t_[outs[k]]; };
  auto is_int = [](DType d) { return d == DType::i64 || d == DType::i32; };
  auto scalar = [](const TInfo &t) { return t.shape.empty(); };
  const Op op = sig.op;
  const int nints = in.ints() ? static_cast<int>(in.ints()->size()) : 0;
  // Plan 2.15: a product's cuBLASLt algorithm (--zplan-gemm-algos) follows [trans_w, kernel 0] as seven ints,
  // none negative; whether this cuBLASLt runs it is the CUDA backend's check.
  // A product's x [.., K] times W ([K, N], or [N, K] with ints[0] set) into an output [.., N]: linear's and
  // linear_residual's shape rule, giving K and N.
  auto check_product = [&](int64_t *K, int64_t *N) -> Status {
    const Shape &x = I(0).shape, &w = I(1).shape;
    if (x.empty() || w.size() != 2) return bad("x must have rank >= 1 and W rank 2");
    const bool tw = ints(0) != 0;
    *K = tw ? w[1] : w[0], *N = tw ? w[0] : w[1];
    if (x.back() != *K) return bad("W " + shape_str(w) + " does not match x " + shape_str(x));
    Shape o = x;
    o.back() = *N;
    if (o != O().shape) return bad("output shape " + shape_str(O().shape) + " should be " + shape_str(o));
    return {};
  };
  auto check_gemm_algo = [&]() -> Status {
    if (nints <= 2) return {};
    if (nints != 2 + 7 || ints(1) != 0)
      return bad("ints must be [trans_w, 0] followed by the seven ints of a cuBLASLt algorithm (kernel 0), got " +
                 std::to_string(nints) + " ints");
    for (int i = 2; i < nints; ++i)
      if (ints(i) < 0) return bad("the cuBLASLt algorithm's ints must not be negative");
    return {};
  };
  switch (sig.category) {
    case OpCategory::unary:
      if (I(0).shape != O().shape) return bad("input shape " + shape_str(I(0).shape) + " differs from output shape " + shape_str(O().shape));
      if (op == Op::is_nan) {
        if (!is_fl(I(0).dtype) || O().dtype != DType::bool8) return bad("is_nan maps a float dtype to bool8");
        return {};
      }
      if (op != Op::cast && op != Op::copy && I(0).dtype != O().dtype) return bad("input and output dtypes differ");
      if (op == Op::not_ && I(0).dtype != DType::bool8) return bad("not needs bool8");
      if (op == Op::floor && !is_fl(I(0).dtype)) return bad("floor needs a float dtype");
      return {};
    case OpCategory::binary:
    case OpCategory::select: {
      Shape bc = I(0).shape;
      for (size_t i = 1; i < ins.size(); ++i)
        if (!broadcast_shape(bc, I(i).shape, &bc)) return bad("operands " + shape_str(I(0).shape) + " and " + shape_str(I(i).shape) + " do not broadcast");
      if (bc != O().shape) return bad("broadcast shape " + shape_str(bc) + " differs from output shape " + shape_str(O().shape));
      if (op == Op::mod && ints(0) != 0 && ints(0) != 1) return bad("fmod must be 0 or 1");
      if (op == Op::mod && ints(0) == 0 && (is_fl(I(0).dtype) || is_fl(I(1).dtype))) return bad("integer mod (fmod 0) needs integer operands");
      return {};
    }
    case OpCategory::reduce: {
      const Shape &x = I(0).shape;
      if (nints < 2 || nints - 1 > static_cast<int>(x.size())) return bad("ints must be [keepdims, axis...] with 1 to rank axes");
      std::vector<bool> red(x.size(), false);
      for (int i = 1; i < nints; ++i) {
        int64_t a = ints(i);
        if (a < 0 || a >= static_cast<int64_t>(x.size()) || red[a]) return bad("axis " + std::to_string(a) + " is out of range or repeated");
        red[a] = true;
      }
      Shape o;
      for (size_t k = 0; k < x.size(); ++k)
        if (!red[k]) o.push_back(x[k]);
        else if (ints(0)) o.push_back(1);
      if (o != O().shape) return bad("output shape " + shape_str(O().shape) + " should be " + shape_str(o));
      if (I(0).dtype != O().dtype) return bad("input and output dtypes differ");
      return {};
    }
    case OpCategory::state_write: {
      if (op == Op::decode_layer) {
        // Plan 2.17 (ops.def): a decoder layer at decode.
        const Shape &x = I(0).shape, &c = I(1).shape;
        const DType e = I(0).dtype;
        if (!is_fl(e)) return bad("x must be a float dtype");
        if (x.size() < 2 || x.size() > 3 || (x.size() == 3 && x[1] != 1))
          return bad("x must be [B, d] or [B, 1, d], got " + shape_str(x));
        if (c.size() != 4 || I(2).shape != c || c[0] != x[0] || c[1] < 1 || c[3] < 2 || c[3] % 2 != 0)
          return bad("the caches must be one shape [B, Hkv, L, Dh] with x's B and an even Dh, got " + shape_str(c));
        const int64_t d = x.back(), hkv = c[1], dh = c[3];
        if (x[0] < 1 || d < 1 || c[2] < 1) return bad("x's rows and width and the caches' length must be at least 1");
        auto mat = [&](size_t i, int64_t k, int64_t n) {
          const Shape &w = I(i).shape;
          return I(i).dtype == e && w.size() == 2 && w[0] == k && (n < 0 || w[1] == n);
        };
        if (!mat(8, d, -1) || I(8).shape[1] % dh != 0) return bad("wq must be [d, heads x Dh] of x's dtype");
        const int64_t hq = I(8).shape[1] / dh;
        if (hq < 1 || hq % hkv != 0)
          return bad("query heads (" + std::to_string(hq) + ") are not a multiple of kv heads (" + std::to_string(hkv) + ")");
        if (!mat(9, d, hkv * dh) || !mat(10, d, hkv * dh)) return bad("wk and wv must be [d, kv_heads x Dh]");
        if (!mat(11, hq * dh, d)) return bad("wo must be [heads x Dh, d]");
        if (!mat(13, d, -1)) return bad("w_gate must be [d, ffn]");
        const int64_t f = I(13).shape[1];
        if (f < 1) return bad("w_gate must be [d, ffn] with ffn at least 1");
        if (!mat(14, d, f) || !mat(15, f, d)) return bad("w_up must be w_gate's shape and w_down [ffn, d]");
        for (size_t i : {size_t{7}, size_t{12}})
          if (I(i).dtype != e || I(i).shape != Shape{d}) return bad("norm1 and norm2 must be [d] of x's dtype");
        if (I(1).dtype != e || I(2).dtype != e) return bad("the caches must be x's dtype");
        if (ins.size() > 16 && ins[16] >= 0 && (I(16).shape != x || I(16).dtype != e))
          return bad("residual must be x's shape and dtype");
        if (Ok(0).shape != x || Ok(0).dtype != e || Ok(1).shape != x || Ok(1).dtype != e)
          return bad("out and residual_out must be x's shape and dtype");
        const Shape &t = I(5).shape;
        if (I(6).shape != t || I(6).dtype != I(5).dtype || !is_fl(I(5).dtype) || t.size() != 4 ||
            (t[0] != 1 && t[0] != x[0]) || t[1] != 1 || t[2] != 1 || t[3] != dh)
          return bad("cos and sin must be one float dtype [1 or B, 1, 1, Dh], got " + shape_str(t));
        if (I(4).shape != Shape{x[0]} || I(4).dtype != DType::i64) return bad("pos must be i64 [B]");
        if (I(3).shape.size() != 1 || I(3).dtype != DType::i32) return bad("sync must be i32 [n]");
        const int64_t act = ints(0);
        if (act != static_cast<int64_t>(Op::silu) && act != static_cast<int64_t>(Op::gelu_tanh) &&
            act != static_cast<int64_t>(Op::gelu_erf))
          return bad("act must be the opcode of silu, gelu_tanh or gelu_erf, got " + std::to_string(act));
        return {};
      }
      if (op == Op::rope_kv_write || op == Op::rope_attention) {
        const Shape &q = I(0).shape, &k = I(1).shape, &c = I(5).shape, &t = I(3).shape;
        if (q.size() != 4 || k.size() != 4 || c.size() != 4) return bad("q, k and the caches must be rank 4");
        if (I(2).shape != k || I(6).shape != c) return bad("v must be shaped like k and the v cache like the k cache");
        if (q[0] != k[0] || q[2] != k[2] || q[3] != k[3] || q[3] % 2 != 0)
          return bad("q " + shape_str(q) + " and k " + shape_str(k) + " must share B, S and an even D");
        if (c[0] != k[0] || c[1] != k[1] || c[3] != k[3] || k[2] > c[2])
          return bad("k " + shape_str(k) + " does not fit the cache " + shape_str(c));
        const DType e = I(0).dtype;
        if (!is_fl(e) || I(1).dtype != e || I(2).dtype != e || I(5).dtype != e || I(6).dtype != e || O().dtype != e)
          return bad("q, k, v, the caches and out0 must share one float dtype");
        if (O().shape != q) return bad("out0 must be shaped like q");
        if (I(3).shape != I(4).shape || I(3).dtype != I(4).dtype || !is_fl(I(3).dtype) || t.size() != 4 ||
            (t[0] != 1 && t[0] != q[0]) || t[1] != 1 || (t[2] != 1 && t[2] != q[2]) || t[3] != q[3])
          return bad("cos and sin must be one float dtype [1 or B, 1, 1 or S, D], got " + shape_str(t));
        if (I(7).shape != Shape{c[0]} || I(7).dtype != DType::i64) return bad("pos must be i64 [B]");
        if (op == Op::rope_attention && (k[1] <= 0 || q[1] % k[1] != 0))
          return bad("query heads (" + std::to_string(q[1]) + ") are not a multiple of kv heads (" +
                     std::to_string(k[1]) + ")");
        return {};
      }
      const TInfo &p = I(0), &v = I(1);
      if (op == Op::kv_write) {
        if (p.shape.size() != 4 || v.shape.size() != 4 || v.shape[0] != p.shape[0] || v.shape[1] != p.shape[1] ||
            v.shape[3] != p.shape[3] || v.shape[2] > p.shape[2])
          return bad("value " + shape_str(v.shape) + " does not fit the cache " + shape_str(p.shape));
        if (p.dtype != v.dtype) return bad("value and cache dtypes differ");
        if (I(2).shape != Shape{p.shape[0]} || I(2).dtype != DType::i64) return bad("pos must be i64 [B]");
        return {};
      }
      if (!is_fl(p.dtype) || !is_fl(v.dtype)) return bad("target and value must be float tensors");
      if (v.numel != p.numel) return bad("value holds " + std::to_string(v.numel) + " elements, target " + tn(ins[0]) + " holds " + std::to_string(p.numel));
      if (op == Op::adamw) {
        for (int k : {2, 3})
          if (I(k).numel != p.numel || !is_fl(I(k).dtype)) return bad(std::string(k == 2 ? "m" : "v") + " must be a float tensor of the parameter's size");
        if (!scalar(I(4)) || I(4).dtype != DType::f32) return bad("lr must be an f32 scalar (rank 0)");
        if (!scalar(I(5)) || I(5).dtype != DType::i64) return bad("step must be an i64 scalar (rank 0)");
        if (!scalar(I(6)) || I(6).dtype != DType::f32) return bad("grad_scale must be an f32 scalar (rank 0)");
      }
      return {};
    }
    default: break;
  }
  const int g = group(in.axis());
  switch (op) {
    case Op::matmul: {
      Shape a = I(0).shape, b = I(1).shape;
      if (a.empty() || b.empty()) return bad("operands must have rank >= 1");
      const bool av = a.size() == 1, bv = b.size() == 1;
      if (av) a.insert(a.begin(), 1);
      if (bv) b.push_back(1);
      if (ints(0) && !av) std::swap(a[a.size() - 1], a[a.size() - 2]);
      if (ints(1) && !bv) std::swap(b[b.size() - 1], b[b.size() - 2]);
      if (a.back() != b[b.size() - 2]) return bad("contraction dims differ: " + shape_str(I(0).shape) + " x " + shape_str(I(1).shape));
      Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2), bc;
      if (!broadcast_shape(ba, bb, &bc)) return bad("batch dims do not broadcast");
      if (!av) bc.push_back(a[a.size() - 2]);
      if (!bv) bc.push_back(b.back());
      if (bc != O().shape) return bad("output shape " + shape_str(O().shape) + " is not the product's " + shape_str(bc));
      if (!is_fl(I(0).dtype) || !is_fl(I(1).dtype) || !is_fl(O().dtype)) return bad("operands must be float");
      if (nints > 2 && ints(2) != 0) {
        // Plans 2.9 / 2.14: the few-row kernel the compiler chose (zk/few_rows_kernels.h).
        const int64_t rows = O().numel / (b.back() ? b.back() : 1), n = b.back();
        if (ints(2) != 1 && ints(2) != 2)
          return bad("ints[2] (kernel) " + std::to_string(ints(2)) +
                     " is not 0 (cuBLASLt), 1 (the few-row kernels) or 2 (the streaming kernel)");
        if (I(1).shape.size() != 2 || ints(0) || rows > zk::cuda::kFewRowsMaxRows)
          return bad("ints[2] (kernel) names a few-row kernel for a product that is not of at most 16 rows against "
                     "a 2-D operand");
        if (ints(2) == 2 && !zk::cuda::stream_holds(ints(1) != 0, rows, a.back(), &n, 1))
          return bad("ints[2] (kernel) 2: the streaming kernel does not hold this product (W [K, N], at most 4 "
                     "rows, K x rows within 16384, N a multiple of 8)");
      }
      return {};
    }
    case Op::residual_norm: {
      const Shape &x = I(0).shape;
      if (x.empty() || I(1).shape != x || O().shape != x || t_[outs[1]].shape != x)
        return bad("input, residual, sum and normed must have one shape");
      if (!is_fl(I(0).dtype) || I(1).dtype != I(0).dtype || O().dtype != I(0).dtype || t_[outs[1]].dtype != I(0).dtype)
        return bad("operands must share one float dtype");
      if (I(2).numel != x.back() || (ins.size() > 3 && ins[3] >= 0 && I(3).numel != x.back()))
        return bad("scale and bias must have the last dim's size");
      if (ints(0) != 0 && ints(0) != 1) return bad("ints[0] must be 0 (layer) or 1 (rms)");
      return {};
    }
    case Op::gated: {
      if (I(0).shape != O().shape || I(1).shape != O().shape) return bad("gate, up and output must have one shape");
      if (!is_fl(O().dtype) || I(0).dtype != O().dtype || I(1).dtype != O().dtype) return bad("operands must share one float dtype");
      if (ints(0) != static_cast<int>(Op::silu) && ints(0) != static_cast<int>(Op::gelu_tanh) &&
          ints(0) != static_cast<int>(Op::gelu_erf))
        return bad("ints[0] must be the opcode of silu, gelu_tanh or gelu_erf");
      return {};
    }
    case Op::linear_gelu:
    case Op::linear: {
      int64_t K = 0, N = 0;
      if (Status st = check_product(&K, &N); !st.ok()) return st;
      const bool tw = ints(0) != 0;
      if (ins.size() > 2 && ins[2] >= 0 && I(2).numel != N) return bad("bias must have N elements");
      if (nints > 1 && ints(1) != 0) {
        // Plans 2.9 / 2.14: the few-row kernel the compiler chose (zk/few_rows_kernels.h).
        const int64_t rows = O().numel / (N ? N : 1);
        if (ints(1) != 1 && ints(1) != 2)
          return bad("ints[1] (kernel) " + std::to_string(ints(1)) +
                     " is not 0 (cuBLASLt), 1 (the few-row kernels) or 2 (the streaming kernel)");
        if (K == 0 || rows > zk::cuda::kFewRowsMaxRows)
          return bad("ints[1] (kernel) names a few-row kernel for a product that is not of 1 to 16 rows");
        if (ints(1) == 2 && !zk::cuda::stream_holds(tw, rows, K, &N, 1))
          return bad("ints[1] (kernel) 2: the streaming kernel does not hold this product (W [K, N], at most 4 "
                     "rows, K x rows within 16384, N a multiple of 8)");
      }
      if (op == Op::linear) return check_gemm_algo();
      return {};
    }
    case Op::linear_residual: {
      // Plan 2.13: linear's rule, in2 the residual (the output's shape and dtype), in3 the optional bias.
      int64_t K = 0, N = 0;
      if (Status st = check_product(&K, &N); !st.ok()) return st;
      if (I(2).shape != O().shape || I(2).dtype != O().dtype)
        return bad("the residual must have the output's shape and dtype, got " + shape_str(I(2).shape));
      if (ins.size() > 3 && ins[3] >= 0 && I(3).numel != N) return bad("bias must have N elements");
      if (nints == 2) return bad("ints must be [trans_w] or [trans_w, 0, the seven ints of a cuBLASLt algorithm]");
      return check_gemm_algo();
    }
    case Op::linear_multi:
    case Op::linear_gated: {
      // Few-row products of one input (plan 2.9): each weight's product as linear's, equal dtypes.
      const Shape &x = I(0).shape;
      if (x.empty()) return bad("x must have rank >= 1");
      const bool tw = ints(0) != 0;
      const size_t nw = ins.size() - 1;
      if (op == Op::linear_multi && outs.size() != nw) return bad("needs one output per weight");
      if (op == Op::linear_gated) {
        if (I(1).shape != I(2).shape) return bad("the gate and up weights must have one shape");
        if (ints(1) != static_cast<int>(Op::silu) && ints(1) != static_cast<int>(Op::gelu_tanh) &&
            ints(1) != static_cast<int>(Op::gelu_erf))
          return bad("ints[1] must be the opcode of silu, gelu_tanh or gelu_erf");
      }
      int64_t rows = 1;
      for (size_t d = 0; d + 1 < x.size(); ++d) rows *= x[d];
      if (rows > 16) return bad("a fused few-row product takes at most 16 rows, x is " + shape_str(x));
      // Plan 2.14: the few-row kernel (zk/few_rows_kernels.h), linear_multi's ints[1], linear_gated's ints[2];
      // without it the cluster kernels.
      const int kslot = op == Op::linear_multi ? 1 : 2;
      if (nints > kslot) {
        const int64_t code = ints(kslot);
        if (code != 1 && code != 2)
          return bad("ints[" + std::to_string(kslot) + "] (kernel) " + std::to_string(code) +
                     " is not 1 (the few-row kernels) or 2 (the streaming kernel)");
        if (code == 2) {
          std::vector<int64_t> widths;
          for (size_t i = 0; i < nw && op == Op::linear_multi; ++i) widths.push_back(tw ? I(1 + i).shape[0] : I(1 + i).shape.back());
          if (op == Op::linear_gated) widths.push_back(tw ? I(1).shape[0] : I(1).shape.back());
          if (I(1).shape.size() != 2 ||
              !zk::cuda::stream_holds(tw, rows, x.back(), widths.data(), static_cast<int>(widths.size())))
            return bad("ints[" + std::to_string(kslot) +
                       "] (kernel) 2: the streaming kernel does not hold this product (W [K, N], at most 4 rows, K x "
                       "rows within 16384, widths a multiple of 8)");
        }
      }
      for (size_t i = 0; i < nw; ++i) {
        const Shape &w = I(1 + i).shape;
        if (w.size() != 2) return bad("W " + std::to_string(i) + " must have rank 2");
        const int64_t K = tw ? w[1] : w[0], N = tw ? w[0] : w[1];
        if (x.back() != K) return bad("W " + shape_str(w) + " does not match x " + shape_str(x));
        Shape o = x;
        o.back() = N;
        const TInfo &out = t_[outs[op == Op::linear_multi ? i : 0]];
        if (o != out.shape) return bad("output shape " + shape_str(out.shape) + " should be " + shape_str(o));
        if (!is_fl(I(0).dtype) || I(1 + i).dtype != I(0).dtype || out.dtype != I(0).dtype)
          return bad("x, the weights and the outputs must share one float dtype");
      }
      return {};
    }
    case Op::norm_products: {
      // Plan 2.12: the residual add and RMS norm before a few-row product, in its kernel.
      const Shape &x = I(0).shape;
      if (x.empty()) return bad("x must have rank >= 1");
      const DType e = I(0).dtype;
      if (!is_fl(e) || I(1).shape != x || I(1).dtype != e || O().shape != x || O().dtype != e)
        return bad("x, the residual and out0 (the sum) must share one shape and float dtype");
      if (I(2).shape != Shape{x.back()} || I(2).dtype != e) return bad("scale must be [K] of x's dtype");
      if (ints(0) != 0) return bad("ints[0] (trans_w) must be 0: the weights are [K, N]");
      const bool gated = ints(1) != 0;
      if (gated && ints(1) != static_cast<int>(Op::silu) && ints(1) != static_cast<int>(Op::gelu_tanh) &&
          ints(1) != static_cast<int>(Op::gelu_erf))
        return bad("ints[1] must be 0 or the opcode of silu, gelu_tanh or gelu_erf");
      const size_t nw = ins.size() - 3;
      if (gated ? (nw != 2 || outs.size() != 2) : outs.size() != nw + 1)
        return bad(gated ? "the gated form takes two weights and writes the sum and one product"
                         : "needs the sum and one output per weight");
      if (gated && I(3).shape != I(4).shape) return bad("the gate and up weights must have one shape");
      int64_t rows = 1;
      for (size_t d = 0; d + 1 < x.size(); ++d) rows *= x[d];
      if (rows > 4) return bad("norm_products takes at most 4 rows, x is " + shape_str(x));
      for (size_t i = 0; i < nw; ++i) {
        const Shape &w = I(3 + i).shape;
        if (w.size() != 2 || w[0] != x.back()) return bad("W " + shape_str(w) + " does not match x " + shape_str(x));
        Shape o = x;
        o.back() = w[1];
        const TInfo &out = t_[outs[gated ? 1 : 1 + i]];
        if (o != out.shape) return bad("output shape " + shape_str(out.shape) + " should be " + shape_str(o));
        if (I(3 + i).dtype != e || out.dtype != e) return bad("x, the weights and the outputs must share one dtype");
      }
      return {};
    }
    case Op::softmax:
    case Op::layer_norm: {
      const Shape &x = I(0).shape;
      const int64_t ax = ints(0);
      if (ax < -static_cast<int64_t>(x.size()) || ax >= static_cast<int64_t>(x.size())) return bad("axis " + std::to_string(ax) + " is out of range");
      if (x != O().shape) return bad("input and output shapes differ");
      if (op == Op::layer_norm) {
        const size_t a = ax < 0 ? ax + x.size() : ax;
        int64_t n = 1;
        for (size_t k = a; k < x.size(); ++k) n *= x[k];
        if (I(1).numel != n || (ins.size() > 2 && ins[2] >= 0 && I(2).numel != n)) return bad("scale and bias must cover the normalised dims");
      }
      return {};
    }
    case Op::rotary: {
      const Shape &x = I(0).shape;
      if (x.empty() || x.back() % 2 != 0) return bad("x " + shape_str(x) + " must have rank >= 1 and an even last dim");
      if (I(1).shape != I(2).shape || I(1).dtype != I(2).dtype)
        return bad("cos " + shape_str(I(1).shape) + " and sin " + shape_str(I(2).shape) + " differ in shape or dtype");
      // Plan 2.10: a second int 1 stores x sequence-major [B, S, H, D]; the tables broadcast to its head-major
      // view [B, H, S, D].
      const bool seq_major = nints > 1 && ints(1) != 0;
      if (nints > 1 && ints(1) != 1) return bad("ints[1] (seq_major) must be 1 when present");
      if (seq_major && x.size() != 4) return bad("seq_major needs a rank-4 [B, S, H, D] x, got " + shape_str(x));
      Shape view = x;
      if (seq_major) std::swap(view[1], view[2]);
      if (I(1).shape.empty() || I(1).shape.back() != x.back() || !broadcasts_to(I(1).shape, view))
        return bad("cos and sin " + shape_str(I(1).shape) + " must broadcast to x " + shape_str(view) + " with its last dim");
      if (O().shape != x || O().dtype != I(0).dtype) return bad("output must have x's shape and dtype");
      if (!is_fl(I(0).dtype) || !is_fl(I(1).dtype) || !is_fl(I(2).dtype)) return bad("x, cos and sin must be float");
      if (ints(0) != 0 && ints(0) != 1) return bad("ints[0] (inverse) must be 0 or 1");
      return {};
    }
    case Op::rms_norm: {
      if (I(0).shape.empty() || I(0).shape != O().shape) return bad("input and output shapes differ");
      if (ins.size() > 1 && ins[1] >= 0 && I(1).numel != I(0).shape.back()) return bad("scale must have the last dim's size");
      return {};
    }
    case Op::transpose: {
      const Shape &x = I(0).shape;
      if (nints != static_cast<int>(x.size())) return bad("perm must have one entry per dim");
      Shape o;
      std::vector<bool> seen(x.size(), false);
      for (int i = 0; i < nints; ++i) {
        int64_t p = ints(i);
        if (p < 0 || p >= nints || seen[p]) return bad("perm is not a permutation");
        seen[p] = true;
        o.push_back(x[p]);
      }
      if (o != O().shape || I(0).dtype != O().dtype) return bad("output shape " + shape_str(O().shape) + " should be " + shape_str(o));
      return {};
    }
    case Op::reshape:
    case Op::expand: {
      if (I(0).dtype != O().dtype) return bad("dtypes differ");
      if (op == Op::reshape && I(0).numel != O().numel) return bad("element counts differ");
      if (op == Op::expand && !broadcasts_to(I(0).shape, O().shape)) return bad("input does not broadcast to the output");
      return {};
    }
    case Op::concat: {
      const Shape &o = O().shape;
      int64_t ax = ints(0);
      if (ax < 0) ax += o.size();
      if (ax < 0 || ax >= static_cast<int64_t>(o.size())) return bad("axis is out of range");
      int64_t sum = 0;
      for (size_t i = 0; i < ins.size(); ++i) {
        if (I(i).shape.size() != o.size() || I(i).dtype != O().dtype) return bad("operand " + std::to_string(i) + " differs in rank or dtype");
        for (size_t k = 0; k < o.size(); ++k)
          if (static_cast<int64_t>(k) != ax && I(i).shape[k] != o[k]) return bad("operand " + std::to_string(i) + " differs off the axis");
        sum += I(i).shape[ax];
      }
      if (sum != o[ax]) return bad("operand sizes do not sum to the output's");
      return {};
    }
    case Op::local_slice: {
      const Shape &x = I(0).shape, &o = O().shape;
      const int64_t dim = ints(0);
      if (o.size() != x.size() || I(0).dtype != O().dtype) return bad("output rank or dtype differs");
      if (dim < 0 || dim >= static_cast<int64_t>(x.size())) return bad("dim is out of range");
      for (size_t k = 0; k < x.size(); ++k)
        if (static_cast<int64_t>(k) == dim ? (o[k] == 0 || x[k] % o[k] != 0) : x[k] != o[k])
          return bad(shape_str(x) + " -> " + shape_str(o) + " is not a part of dim " + std::to_string(dim));
      return {};
    }
    case Op::slice: {
      const Shape &x = I(0).shape, &o = O().shape;
      if (nints != 2 * static_cast<int>(x.size())) return bad("ints must be [starts..., steps...], one per dim");
      if (o.size() != x.size() || I(0).dtype != O().dtype) return bad("output rank or dtype differs");
      for (size_t k = 0; k < x.size(); ++k) {
        const int64_t s = ints(k), st = ints(k + x.size());
        if (o[k] == 0) continue;
        if (s < 0 || s >= x[k]) return bad("dim " + std::to_string(k) + " starts outside the input");
        if (o[k] == 1) continue;
        // |step| <= dim keeps (size - 1) * step within int64 (both are below 2^50).
        if (st == 0 || st > x[k] || st < -x[k]) return bad("dim " + std::to_string(k) + " has step " + std::to_string(st));
        const int64_t last = s + (o[k] - 1) * st;
        if (last < 0 || last >= x[k]) return bad("dim " + std::to_string(k) + " slices outside the input");
      }
      return {};
    }
    case Op::gather: {
      const Shape &d = I(0).shape;
      int64_t ax = ints(0);
      if (ax < 0) ax += d.size();
      if (ax < 0 || ax >= static_cast<int64_t>(d.size())) return bad("axis is out of range");
      if (I(1).dtype != DType::i64 && I(1).dtype != DType::i32) return bad("indices must be i64 or i32");
      Shape o(d.begin(), d.begin() + ax);
      o.insert(o.end(), I(1).shape.begin(), I(1).shape.end());
      o.insert(o.end(), d.begin() + ax + 1, d.end());
      if (o != O().shape || I(0).dtype != O().dtype) return bad("output shape " + shape_str(O().shape) + " should be " + shape_str(o));
      return {};
    }
    case Op::embedding: {
      const Shape &w = I(0).shape;
      if (w.size() != 2) return bad("table must be [V, D]");
      if (I(1).dtype != DType::i64 && I(1).dtype != DType::i32) return bad("ids must be i64 or i32");
      Shape o = I(1).shape;
      o.push_back(w[1]);
      if (o != O().shape || I(0).dtype != O().dtype) return bad("output shape " + shape_str(O().shape) + " should be " + shape_str(o));
      if (ints(0) < 0) return bad("vocab_stride is negative");
      return {};
    }
    case Op::fill: return {};
    case Op::attention: {
      // ints[1] (plan 2.7): which operands are stored sequence-major, [B, S, H, Dh]; the checks below are on
      // the logical head-major [B, H, S, Dh] dims.
      const int64_t layout = nints > 1 ? ints(1) : 0;
      if (layout < 0 || layout > 15) return bad("seq_major bits " + std::to_string(layout) + " outside 0..15");
      auto head_major = [&](const Shape &x, int bit) {
        Shape h = x;
        if ((layout & bit) && h.size() == 4) std::swap(h[1], h[2]);
        return h;
      };
      // ints[2..10] (plan 2.8): q, k and v packed (offset, row stride, heads; row stride 0: not packed), read
      // out of a sequence-major [B, S, W] tensor. The operand's logical [B, S, heads, Dh] (Dh from the output)
      // must fit each row: offset + heads * Dh <= W, with the row stride W.
      if (nints != 2 && nints != 11 && nints != 12 && nints > 1) return bad("attention takes 1, 2, 11 or 12 ints");
      // ints[11] (plan 2.11): the kernel the compiler chose, a code of zk/attention_kernels.h.
      if (nints == 12 && !zk::cuda::attention_kernel(static_cast<int>(ints(11))))
        return bad("attention kernel code " + std::to_string(ints(11)) + " is not one of zk/attention_kernels.h");
      if (O().shape.size() != 4) return bad("output must be rank 4");
      Shape logical[3];
      for (int i = 0; i < 3; ++i) {
        const Shape &x = I(i).shape;
        const int64_t off = nints >= 11 ? ints(2 + 3 * i) : 0, rs = nints >= 11 ? ints(3 + 3 * i) : 0,
                      heads = nints >= 11 ? ints(4 + 3 * i) : 0;
        if (rs == 0) {
          if (off != 0 || heads != 0) return bad("an unpacked operand has offset and heads 0");
          logical[i] = head_major(x, 1 << i);
          continue;
        }
        const int64_t dh = O().shape[3];
        if (!(layout & (1 << i))) return bad("a packed operand must be sequence-major");
        if (x.size() != 3) return bad("a packed operand must be rank 3 [B, S, W], not " + shape_str(x));
        if (rs != x[2])
          return bad("packed row stride " + std::to_string(rs) + " is not the tensor's last dim " +
                     std::to_string(x[2]));
        if (off < 0 || heads <= 0 || dh <= 0 || off + heads * dh > rs)
          return bad("packed operand at offset " + std::to_string(off) + " with " + std::to_string(heads) +
                     " heads of " + std::to_string(dh) + " does not fit rows of " + std::to_string(rs));
        logical[i] = Shape{x[0], heads, x[1], dh};
      }
      const Shape &q = logical[0], &k = logical[1];
      if (q.size() != 4 || k.size() != 4 || logical[2] != k) return bad("q, k, v must be rank 4 with v shaped like k");
      if (k[0] != q[0] || k[3] != q[3] || k[1] <= 0 || q[1] % k[1] != 0) return bad("k " + shape_str(k) + " does not fit q " + shape_str(q));
      if (head_major(O().shape, 8) != q) return bad("output shape must equal q's");
      if (ins.size() > 3 && ins[3] >= 0 && !broadcasts_to(I(3).shape, Shape{q[0], q[1], q[2], k[2]}))
        return bad("mask " + shape_str(I(3).shape) + " does not broadcast to [B, Hq, S, T]");
      if (outs.size() > 1 && (Ok(1).shape != Shape{q[0], q[1], q[2]} || Ok(1).dtype != DType::f32))
        return bad("lse output must be f32 [B, Hq, S] = " + shape_str(Shape{q[0], q[1], q[2]}));
      return {};
    }
    case Op::cached_attention: {
      const Shape &q = I(0).shape, &k = I(1).shape;
      if (q.size() != 4 || k.size() != 4 || I(2).shape != k) return bad("q and the caches must be rank 4, v shaped like k");
      if (k[0] != q[0] || k[3] != q[3] || k[1] <= 0 || q[1] % k[1] != 0 || q[2] > k[2])
        return bad("cache " + shape_str(k) + " does not fit q " + shape_str(q));
      if (O().shape != q) return bad("output shape must equal q's");
      if (I(3).shape != Shape{q[0]} || I(3).dtype != DType::i64) return bad("pos must be i64 [B]");
      return {};
    }
    case Op::argmax: {
      const Shape &x = I(0).shape;
      if (x.empty() || !is_fl(I(0).dtype)) return bad("input must be float of rank >= 1");
      if (O().shape != Shape(x.begin(), x.end() - 1) || O().dtype != DType::i64) return bad("output must be i64 of the input's shape without its last dim");
      return {};
    }
    case Op::take_rows: {
      const Shape &x = I(0).shape;
      if (x.size() < 2) return bad("input must be [B, S, ...]");
      Shape o = {x[0]};
      o.insert(o.end(), x.begin() + 2, x.end());
      if (O().shape != o || O().dtype != I(0).dtype) return bad("output must be " + shape_str(o) + " of the input's dtype");
      if (I(1).shape != Shape{x[0]} || I(1).dtype != DType::i64) return bad("index must be i64 [B]");
      return {};
    }
    case Op::attention_grad: {
      // ints[1] (plan 2.11): the backward kernel the compiler chose, a code of zk/attention_kernels.h.
      if (nints > 1 && !zk::cuda::attention_grad_kernel(static_cast<int>(ints(1))))
        return bad("attention_grad kernel code " + std::to_string(ints(1)) + " is not one of zk/attention_kernels.h");
      const Shape &q = I(0).shape, &k = I(1).shape;
      if (q.size() != 4 || k.size() != 4 || I(2).shape != k) return bad("q, k, v must be rank 4 with v shaped like k");
      if (k[0] != q[0] || k[3] != q[3] || k[1] <= 0 || q[1] % k[1] != 0) return bad("k " + shape_str(k) + " does not fit q " + shape_str(q));
      if (I(3).shape != q || I(4).shape != q) return bad("out and dout must have q's shape");
      if (I(5).shape != Shape{q[0], q[1], q[2]} || I(5).dtype != DType::f32) return bad("lse must be f32 [B, Hq, S]");
      if (ins.size() > 6 && ins[6] >= 0 && !broadcasts_to(I(6).shape, Shape{q[0], q[1], q[2], k[2]}))
        return bad("mask " + shape_str(I(6).shape) + " does not broadcast to [B, Hq, S, T]");
      if (Ok(0).shape != q || Ok(1).shape != k || Ok(2).shape != k) return bad("dq, dk, dv must have the shapes of q, k, v");
      return {};
    }
    case Op::gelu_tanh_grad:
    case Op::gelu_erf_grad:
    case Op::silu_grad:
    case Op::softmax_grad: {
      if (I(0).shape != I(1).shape || I(0).shape != O().shape) return bad("x (or y), dy and dx must have one shape");
      if (!is_fl(I(0).dtype) || !is_fl(I(1).dtype) || !is_fl(O().dtype)) return bad("operands must be float");
      if (op == Op::softmax_grad) {
        const int64_t r = static_cast<int64_t>(I(0).shape.size());
        if (ints(0) < -r || ints(0) >= r) return bad("axis " + std::to_string(ints(0)) + " is out of range");
      }
      return {};
    }
    case Op::layer_norm_grad:
    case Op::rms_norm_grad: {
      const Shape &x = I(0).shape;
      if (x.empty() || I(2).shape != x || Ok(0).shape != x) return bad("x, dy and dx must have one shape");
      int64_t n = x.back();
      if (op == Op::layer_norm_grad) {
        const int64_t ax = ints(0), r = static_cast<int64_t>(x.size());
        if (ax < -r || ax >= r) return bad("axis " + std::to_string(ax) + " is out of range");
        n = 1;
        for (size_t k = static_cast<size_t>(ax < 0 ? ax + r : ax); k < x.size(); ++k) n *= x[k];
      }
      if (I(1).numel != n) return bad("scale must cover the normalised dims (" + std::to_string(n) + " elements)");
      for (size_t k = 1; k < outs.size(); ++k)
        if (Ok(k).shape != I(1).shape) return bad("dscale and dbias must have scale's shape " + shape_str(I(1).shape));
      return {};
    }
    case Op::embedding_grad: {
      const Shape &ids = I(0).shape, &dy = I(1).shape, &t = O().shape;
      if (!is_int(I(0).dtype)) return bad("ids must be i64 or i32");
      if (t.size() != 2) return bad("dtable must be [V, D]");
      Shape want = ids;
      want.push_back(t[1]);
      if (dy != want) return bad("dy " + shape_str(dy) + " should be " + shape_str(want));
      if (ints(0) < 0) return bad("vocab_stride is negative");
      return {};
    }
    case Op::label_pick:
    case Op::label_pick_grad: {
      const TInfo &lab = op == Op::label_pick ? I(1) : I(0);
      const Shape &logits = op == Op::label_pick ? I(0).shape : O().shape;
      const Shape &vec = op == Op::label_pick ? O().shape : I(1).shape;
      if (!is_int(lab.dtype)) return bad("labels must be i64 or i32");
      if (logits.size() != 2 || lab.shape != Shape{logits[0]} || vec != Shape{logits[0]})
        return bad("logits must be [N, V_local] with labels and the per-row values [N]");
      if (ints(0) < 0) return bad("vocab_stride is negative");
      return {};
    }
    case Op::sample: {
      const Shape &l = I(0).shape;
      if (l.size() != 2 || l[1] < 1) return bad("logits must be [B, V] with V >= 1");
      if (!is_fl(I(0).dtype)) return bad("logits must be float");
      if (l[1] > (int64_t{1} << 23)) return bad("the vocabulary is larger than 2^23, the sampler's limit");
      if (O().shape != Shape{l[0]} || O().dtype != DType::i64) return bad("ids must be i64 [B]");
      if (nints == 1 && ints(0) != 0 && ints(0) != 1) return bad("batch_split must be 0 or 1");
      static const char *const names[] = {"temperature", "top_k", "top_p", "seed", "step"};
      for (int k = 1; k <= 5; ++k) {
        const bool want_int = k == 2 || k == 4 || k == 5;
        if (!I(k).shape.empty() || I(k).dtype != (want_int ? DType::i64 : DType::f32))
          return bad(std::string(names[k - 1]) + " must be an " + (want_int ? "i64" : "f32") + " scalar (rank 0)");
      }
      return {};
    }
    case Op::sum_squares:
      if (!O().shape.empty() || O().dtype != DType::f32) return bad("output must be an f32 scalar (rank 0)");
      if (!is_fl(I(0).dtype)) return bad("input must be float");
      return {};
    case Op::cumsum: {
      const int64_t r = static_cast<int64_t>(I(0).shape.size());
      if (I(0).shape != O().shape || I(0).dtype != O().dtype) return bad("input and output differ in shape or dtype");
      if (ints(0) < 0 || ints(0) >= r) return bad("axis " + std::to_string(ints(0)) + " is out of range");
      if ((ints(1) != 0 && ints(1) != 1) || (ints(2) != 0 && ints(2) != 1)) return bad("exclusive and reverse must be 0 or 1");
      return {};
    }
    case Op::range:
      for (size_t i = 0; i < 3; ++i)
        if (!scalar(I(i)) || I(i).dtype != O().dtype) return bad("start, limit and delta must be rank-0 scalars of the output's dtype");
      if (O().shape.size() != 1) return bad("output must be rank 1");
      return {};
    case Op::gather_nd: {
      const Shape &d = I(0).shape, &ix = I(1).shape;
      if (!is_int(I(1).dtype)) return bad("indices must be i64 or i32");
      const int64_t b = ints(0), r = static_cast<int64_t>(d.size()), q = static_cast<int64_t>(ix.size());
      if (q < 1 || b < 0 || b >= std::min(q, r)) return bad("batch_dims " + std::to_string(b) + " is out of range");
      const int64_t depth = ix.back();
      if (depth < 1 || depth > r - b) return bad("index depth " + std::to_string(depth) + " exceeds the data's rank");
      for (int64_t k = 0; k < b; ++k)
        if (d[k] != ix[k]) return bad("batch dims of data and indices differ");
      Shape o(ix.begin(), ix.end() - 1);
      o.insert(o.end(), d.begin() + b + depth, d.end());
      if (o != O().shape || I(0).dtype != O().dtype) return bad("output shape " + shape_str(O().shape) + " should be " + shape_str(o));
      return {};
    }
    case Op::gather_elements: {
      const Shape &d = I(0).shape, &ix = I(1).shape;
      if (!is_int(I(1).dtype)) return bad("indices must be i64 or i32");
      int64_t ax = ints(0);
      if (ax < 0) ax += static_cast<int64_t>(d.size());
      if (d.empty() || ax < 0 || ax >= static_cast<int64_t>(d.size())) return bad("axis is out of range");
      if (ix.size() != d.size()) return bad("indices must have the data's rank");
      for (size_t k = 0; k < d.size(); ++k)
        if (static_cast<int64_t>(k) != ax && ix[k] > d[k]) return bad("indices exceed the data off the axis");
      if (O().shape != ix || I(0).dtype != O().dtype) return bad("output must have the indices' shape and the data's dtype");
      return {};
    }
    case Op::tile: {
      const Shape &x = I(0).shape, &o = O().shape;
      if (nints != static_cast<int>(x.size()) || o.size() != x.size()) return bad("ints must hold one repeat per dim");
      for (size_t k = 0; k < x.size(); ++k) {
        const int64_t rep = ints(static_cast<int>(k));
        if (rep < 0 || rep > kHuge || (x[k] > 0 && rep > kHuge / x[k]) || o[k] != x[k] * rep)
          return bad("output shape " + shape_str(o) + " is not the input " + shape_str(x) + " tiled by the repeats");
      }
      if (I(0).dtype != O().dtype) return bad("dtypes differ");
      return {};
    }
    case Op::all_reduce:
      if (I(0).numel != O().numel || I(0).dtype != O().dtype) return bad("send and receive differ in size or dtype");
      if (!is_fl(I(0).dtype) && I(0).dtype != DType::i64 && I(0).dtype != DType::i32) return bad("all_reduce needs a numeric dtype");
      if (nints > 0 && (ints(0) < 0 || ints(0) > 2)) return bad("reduction " + std::to_string(ints(0)) + " is not 0 (sum), 1 (max) or 2 (min)");
      return {};
    case Op::all_gather:
    case Op::reduce_scatter: {
      const Shape &a = I(0).shape, &b = O().shape;
      const int64_t dim = ints(0);
      if (nints > 1 && (ints(1) < 0 || ints(1) > 2)) return bad("reduction " + std::to_string(ints(1)) + " is not 0 (sum), 1 (max) or 2 (min)");
      if (a.size() != b.size() || dim < 0 || dim >= static_cast<int64_t>(a.size()) || I(0).dtype != O().dtype) return bad("dim is out of range or ranks/dtypes differ");
      const Shape &small = op == Op::all_gather ? a : b, &big = op == Op::all_gather ? b : a;
      for (size_t k = 0; k < a.size(); ++k)
        if (big[k] != (static_cast<int64_t>(k) == dim ? small[k] * g : small[k]))
          return bad(shape_str(a) + " -> " + shape_str(b) + " is not a split of dim " + std::to_string(dim) + " over " + std::to_string(g) + " ranks");
      return {};
    }
    case Op::broadcast:
      if (I(0).numel != O().numel || I(0).dtype != O().dtype) return bad("send and receive differ");
      if (ints(0) < 0 || ints(0) >= g) return bad("root " + std::to_string(ints(0)) + " is not in the group of " + std::to_string(g));
      return {};
    case Op::barrier:
    case Op::release: return {};
    case Op::gather_param:
      if (I(0).dtype != O().dtype) return bad("dtypes differ");
      if (I(0).numel * dp_ < O().numel) return bad("dp shards of " + std::to_string(I(0).numel) + " elements cannot cover " + std::to_string(O().numel));
      return {};
    case Op::prefetch:
    case Op::evict:
      if (I(0).numel != O().numel || I(0).dtype != O().dtype) return bad("source and destination differ");
      return {};
    case Op::nvme_read:
    case Op::nvme_write: {
      // Whole tensors of equal reserved bytes: the transfer moves the aligned range, padding included.
      const TInfo &file = I(0), &host = op == Op::nvme_read ? O() : I(1);
      if (file.space != MemSpace::nvme) return bad("operand 0 must be an nvme tensor");
      if (host.space != MemSpace::host) return bad("the staging buffer must be a host tensor");
      if (file.numel != host.numel || file.dtype != host.dtype || file.bytes != host.bytes)
        return bad("the nvme tensor and its staging buffer differ in shape, dtype or bytes");
      const uint64_t a = nvme_alignment_;
      if (host.offset % a || host.bytes % a) return bad("the staging buffer is not aligned to " + std::to_string(a));
      return {};
    }
    default: return bad("no shape rule for this opcode");
  }
}

}  // namespace

uint64_t compute_collective_hash(const fb::Plan &p, const fb::Program &prog) {
  uint64_t h = kFnvOffsetBasis;
  if (!prog.instrs()) return h;
  for (const fb::Instr *in : *prog.instrs()) {
    const OpInfo *info = op_info(in->op());
    if (!info || !info->communicates()) continue;
    uint8_t dt = 0;
    uint64_t count = 0;
    if (info->op != Op::barrier && in->inputs() && in->inputs()->size() > 0 && p.tensors()) {
      const int t = in->inputs()->Get(0);
      if (t >= 0 && t < static_cast<int>(p.tensors()->size())) {
        const fb::Tensor *ten = p.tensors()->Get(t);
        dt = static_cast<uint8_t>(ten->dtype());
        count = 1;
        if (ten->shape())
          for (int64_t d : *ten->shape()) count *= static_cast<uint64_t>(d);
      }
    }
    h = collective_hash_step(h, in->op(), static_cast<uint8_t>(in->axis()), dt, count);
  }
  return h;
}

uint64_t compute_collective_hash(const fb::Plan &p) {
  // Every program's hash, folded in program order: ranks must agree on all of them.
  uint64_t h = kFnvOffsetBasis;
  if (p.programs())
    for (const fb::Program *prog : *p.programs()) {
      const uint64_t ph = compute_collective_hash(p, *prog);
      h = fnv1a64(&ph, sizeof(ph), h);
    }
  return h;
}

Status verify_plan(const uint8_t *file, size_t n, const Launch &launch, const fb::Plan **plan, uint64_t *chash) {
  const uint8_t *payload = nullptr;
  uint64_t len = 0;
  std::string e = check_plan_header(file, n, &payload, &len);
  if (!e.empty()) return error(Code::plan_invalid, e);
  if (len < 8 || !fb::PlanBufferHasIdentifier(payload))
    return error(Code::plan_invalid, "the payload is not a FlatBuffer with file identifier \"ZPLN\"");
  flatbuffers::Verifier::Options opts;
  opts.max_tables = 1u << 26;
  flatbuffers::Verifier v(payload, static_cast<size_t>(len), opts);
  if (!fb::VerifyPlanBuffer(v)) return error(Code::plan_invalid, "the FlatBuffers verifier rejects the payload");
  if (reinterpret_cast<uintptr_t>(payload) % 8 != 0)
    return error(Code::internal, "the plan payload is not 8-byte aligned in memory");
  const fb::Plan *p = fb::GetPlan(payload);
  if (!wide_vectors_aligned(*p)) return error(Code::plan_invalid, "a vector of 64-bit values is misaligned");
  Verifier ver(*p, launch);
  ZRT_RETURN_IF_ERROR(ver.run());
  *plan = p;
  *chash = compute_collective_hash(*p);
  return {};
}

Status PlanFile::from_bytes(std::vector<uint8_t> bytes, const std::string &label, const std::string &base_dir,
                            const Launch &launch, std::unique_ptr<PlanFile> *out) {
  std::unique_ptr<PlanFile> pf(new PlanFile());
  pf->bytes_ = std::move(bytes);
  pf->label_ = label;
  pf->base_dir_ = base_dir;
  pf->file_hash_ = fnv1a64(pf->bytes_.data(), pf->bytes_.size());
  Status s = verify_plan(pf->bytes_.data(), pf->bytes_.size(), launch, &pf->plan_, &pf->collective_hash_);
  if (!s.ok()) return s.with_context("plan '" + label + "'");
  *out = std::move(pf);
  return {};
}

Status PlanFile::load(const std::string &path, const Launch &launch, std::unique_ptr<PlanFile> *out) {
  // A folder or a device opens fine but has no meaningful size (tellg() of a folder is huge): only a
  // regular file can be a plan, and a FlatBuffer is at most 2 GiB.
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return error(Code::io_error, "plan '" + path + "' is not a regular file");
    if (static_cast<uint64_t>(st.st_size) > kPlanHeaderBytes + (uint64_t{1} << 31))
      return error(Code::plan_invalid, "plan '" + path + "' is " + std::to_string(st.st_size) +
                                           " bytes, more than a plan file can hold (2 GiB)");
  }
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return error(Code::not_found, "cannot open plan file '" + path + "': " + std::strerror(errno));
  const std::streamoff size = f.tellg();
  if (size < 0) return error(Code::io_error, "cannot read plan file '" + path + "'");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  f.seekg(0);
  if (size > 0 && !f.read(reinterpret_cast<char *>(bytes.data()), size))
    return error(Code::io_error, "cannot read plan file '" + path + "'");
  std::string dir = ".";
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos) dir = slash == 0 ? "/" : path.substr(0, slash);
  return from_bytes(std::move(bytes), path, dir, launch, out);
}

}  // namespace zrt
