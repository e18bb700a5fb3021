// The executor behind zrt::Session: start-up agreement across ranks, arena allocation, constant and weight
// loading, input binding, the instruction loop (compute steps on the backend, collectives on the
// communicator), output assembly and the measured memory high-water mark.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "plan.h"
#include "step_decoder.h"
#include "weights.h"
#include "zk/cpu_kernels.h"
#include "zrt/backend.h"
#include "zrt/communicator.h"
#include "zrt/zrt.h"

namespace zrt {

struct Session::Impl {
  Options opts;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PlanFile> pf;
  RankInfo ri;
  void *arena[kNumMemSpaces] = {};
  uint64_t arena_bytes[kNumMemSpaces] = {};
  void *staging = nullptr;
  size_t staging_bytes = 0;
  std::vector<TensorRef> tensors;
  std::vector<Step> steps;
  std::vector<uint8_t> step_is_comm;
  // Per step, the arena high-water mark its outputs reach, per space (precomputed at load).
  std::vector<std::array<uint64_t, kNumMemSpaces>> step_extent;
  std::vector<IOInfo> inputs, outputs;
  std::vector<int> input_tensor, output_tensor;
  MemoryReport report;

  ~Impl() {
    if (backend) {
      for (int s = 0; s < kNumMemSpaces; ++s)
        if (arena[s]) backend->deallocate(static_cast<MemSpace>(s), arena[s]);
      if (staging) backend->deallocate(MemSpace::device, staging);
    }
  }

  const fb::Plan &plan() const { return pf->plan(); }
  void note_write(const TensorRef &t, bool by_instr) {
    const uint64_t end = static_cast<uint8_t *>(t.data) - static_cast<uint8_t *>(arena[static_cast<int>(t.space)]) + t.bytes;
    uint64_t &m = report.measured_arena_bytes[static_cast<int>(t.space)];
    m = std::max(m, end);
    if (by_instr) {
      uint64_t &mi = report.measured_instr_bytes[static_cast<int>(t.space)];
      mi = std::max(mi, end);
    }
  }

  Status agree_status(const Status &local, uint64_t extra0, uint64_t extra1, const char *what0, const char *what1);
  Status setup();
  Status load_weights();
  Status decode_steps();
  Status run_collective(const Step &s);
  /// For an integer input that indexes a table (embedding, gather): the number of rows of the whole table,
  /// and whether negative ids count from the end (gather). -1 when no instruction reads the input as ids.
  int64_t id_bound(size_t input, bool *negative_ok) const;
  int find(const std::vector<IOInfo> &v, const std::string &name) const {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i].name == name) return static_cast<int>(i);
    return -1;
  }
};

namespace {
constexpr uint64_t kNoFailure = std::numeric_limits<uint64_t>::max();

bool overlaps(const void *a, size_t na, const void *b, size_t nb) {
  const auto *x = static_cast<const uint8_t *>(a), *y = static_cast<const uint8_t *>(b);
  return x < y + nb && y < x + na;
}
}  // namespace

// Every rank calls this at the same point. If any rank failed, the lowest failing rank's message is sent
// to all, so every rank returns the same error and none is left waiting in a later collective.
Status Session::Impl::agree_status(const Status &local, uint64_t extra0, uint64_t extra1, const char *what0,
                                   const char *what1) {
  const uint64_t in[3] = {local.ok() ? kNoFailure : static_cast<uint64_t>(comm->rank()), extra0, extra1};
  uint64_t mn[3], mx[3];
  ZRT_RETURN_IF_ERROR(comm->agree(in, mn, mx, 3));
  if (mn[0] != kNoFailure) {
    const int root = static_cast<int>(mn[0]);
    uint64_t hdr[2] = {static_cast<uint64_t>(local.code()), local.message().size()};
    ZRT_RETURN_IF_ERROR(comm->broadcast_host(hdr, sizeof(hdr), root));
    std::string msg(hdr[1], '\0');
    if (comm->rank() == root) msg = local.message();
    if (hdr[1]) ZRT_RETURN_IF_ERROR(comm->broadcast_host(&msg[0], msg.size(), root));
    return error(static_cast<Code>(hdr[0]), "rank " + std::to_string(root) + ": " + msg);
  }
  if (what0 && mn[1] != mx[1]) return error(Code::mismatch, what0);
  if (what1 && mn[2] != mx[2]) return error(Code::mismatch, what1);
  return {};
}

Status Session::Impl::setup() {
  const fb::Plan &p = plan();
  const fb::Fingerprint &fp = *p.fingerprint();
  ri.rank = comm->rank();
  ri.world = comm->world_size();
  ri.tp = fp.tp();
  ri.dp = fp.dp();
  ZRT_RETURN_IF_ERROR(comm->set_mesh(ri.tp, ri.dp));
  ZRT_RETURN_IF_ERROR(make_backend(opts.backend, &backend));
  const fb::RankMemory &rm = *p.memory()->Get(ri.rank);
  report.rank = ri.rank;
  report.planned_peak_bytes = rm.planned_peak_bytes();
  report.planned_host_bytes = rm.planned_host_bytes();
  // Exactly the planned arenas, one per memory space, zeroed so that padding (vocabulary rows, flat
  // shard tails) reads as zero.
  for (int s = 0; s < kNumMemSpaces; ++s) {
    arena_bytes[s] = rm.arena_bytes() && static_cast<int>(rm.arena_bytes()->size()) > s ? rm.arena_bytes()->Get(s) : 0;
    report.planned_arena_bytes[s] = arena_bytes[s];
    if (arena_bytes[s] == 0) continue;
    ZRT_RETURN_IF_ERROR(backend->allocate(static_cast<MemSpace>(s), arena_bytes[s], &arena[s]));
    ZRT_RETURN_IF_ERROR(backend->zero(static_cast<MemSpace>(s), arena[s], arena_bytes[s]));
  }
  const auto *ts = p.tensors();
  const size_t nt = ts ? ts->size() : 0;
  tensors.resize(nt);
  for (size_t i = 0; i < nt; ++i) {
    const fb::Tensor &t = *ts->Get(i);
    TensorRef &r = tensors[i];
    r.index = static_cast<int>(i);
    r.dtype = static_cast<DType>(t.dtype());
    r.space = static_cast<MemSpace>(t.space());
    r.rank = t.shape() ? static_cast<int>(t.shape()->size()) : 0;
    for (int k = 0; k < r.rank; ++k) r.shape[k] = t.shape()->Get(k);
    r.bytes = t.bytes();
    r.data = static_cast<uint8_t *>(arena[static_cast<int>(r.space)]) + t.offset();
  }
  // Constants carried in the plan.
  for (size_t i = 0; i < nt; ++i) {
    const fb::Tensor &t = *ts->Get(i);
    if (t.kind() != fb::TensorKind::constant) continue;
    const fb::Constant &c = *p.constants()->Get(t.constant());
    if (c.data()->size())
      ZRT_RETURN_IF_ERROR(backend->write(tensors[i].space, tensors[i].data, c.data()->data(), c.data()->size()));
    note_write(tensors[i], false);
  }
  for (int pass = 0; pass < 2; ++pass) {
    const auto *v = pass == 0 ? p.inputs() : p.outputs();
    if (!v) continue;
    for (const fb::IOBinding *b : *v) {
      IOInfo io;
      io.name = b->name()->str();
      io.dtype = static_cast<DType>(b->dtype());
      if (b->global_shape()) io.global_shape.assign(b->global_shape()->begin(), b->global_shape()->end());
      io.batch_split = b->batch_split();
      (pass == 0 ? inputs : outputs).push_back(io);
      (pass == 0 ? input_tensor : output_tensor).push_back(b->tensor());
    }
  }
  return {};
}

Status Session::Impl::load_weights() {
  const fb::Plan &p = plan();
  if (!p.bindings()) return {};
  MappedFiles files;
  std::vector<uint8_t> host;
  for (const fb::WeightBinding *b : *p.bindings()) {
    TensorRef &t = tensors[b->tensor()];
    const fb::WeightSource &src = *p.weights()->Get(b->source());
    host.assign(t.bytes, 0);
    Status s = assemble_weight(p, *b, ri.rank, pf->base_dir(), opts.init == InitMode::random, opts.seed, &files,
                               host.data(), t.dtype);
    if (!s.ok()) return s.with_context("loading weight '" + (src.name() ? src.name()->str() : std::string()) + "'");
    ZRT_RETURN_IF_ERROR(backend->write(t.space, t.data, host.data(), host.size()));
    note_write(t, false);
  }
  return {};
}

Status Session::Impl::decode_steps() {
  const fb::Plan &p = plan();
  const size_t n = p.instrs() ? p.instrs()->size() : 0;
  steps.resize(n);
  step_is_comm.resize(n);
  step_extent.assign(n, {});
  std::vector<Step> compute;
  for (size_t i = 0; i < n; ++i) {
    Step &s = steps[i];
    ZRT_RETURN_IF_ERROR(decode_step(*p.instrs()->Get(i), static_cast<int>(i), tensors, &s));
    step_is_comm[i] = s.info->on_communicator();
    // The communicators reduce by sum only so far; a plan asking for max or min must not run as a sum.
    const size_t red_at = s.op == Op::all_reduce ? 0 : 1;
    if ((s.op == Op::all_reduce || s.op == Op::reduce_scatter) && s.ints.size() > red_at && s.ints[red_at] != 0)
      return error(Code::mismatch, "instruction " + std::to_string(i) + " (" + op_name(s.op) +
                                          "): reductions other than sum are not supported by this runtime yet");
    for (const TensorRef &o : s.outputs) {
      const int sp = static_cast<int>(o.space);
      const uint64_t end = static_cast<uint8_t *>(o.data) - static_cast<uint8_t *>(arena[sp]) + o.bytes;
      step_extent[i][sp] = std::max(step_extent[i][sp], end);
    }
    // Staging for collectives that permute or must not overlap: sized once here, never on the hot path.
    const size_t es = s.inputs.empty() ? 0 : dtype_size(s.inputs[0].dtype);
    switch (s.op) {
      case Op::all_gather: staging_bytes = std::max(staging_bytes, static_cast<size_t>(s.outputs[0].numel()) * es); break;
      case Op::reduce_scatter: staging_bytes = std::max(staging_bytes, static_cast<size_t>(s.inputs[0].numel()) * es); break;
      case Op::gather_param:
        staging_bytes = std::max(staging_bytes, static_cast<size_t>(s.inputs[0].numel()) * es * ri.dp);
        break;
      default: break;
    }
    if (!step_is_comm[i]) compute.push_back(s);
  }
  // The plan's events are the only order between streams (the cuda backend adds none), so a wait on an
  // event that no earlier instruction records would order nothing: refuse it here, naming the instruction.
  const int num_events = p.num_events();
  std::vector<int> signalled_by(static_cast<size_t>(num_events), -1);
  for (size_t i = 0; i < n; ++i) {
    const Step &s = steps[i];
    for (int e : s.waits)
      if (signalled_by[static_cast<size_t>(e)] < 0)
        return error(Code::invalid_argument, "instruction " + std::to_string(i) + " ('" + s.name + "') waits on event " +
                                                 std::to_string(e) + ", which no earlier instruction signals");
    if (s.signal >= 0) {
      if (signalled_by[static_cast<size_t>(s.signal)] >= 0)
        return error(Code::invalid_argument, "instruction " + std::to_string(i) + " ('" + s.name + "') signals event " +
                                                 std::to_string(s.signal) + ", already signalled by instruction " +
                                                 std::to_string(signalled_by[static_cast<size_t>(s.signal)]));
      signalled_by[static_cast<size_t>(s.signal)] = static_cast<int>(i);
    }
  }
  ZRT_RETURN_IF_ERROR(backend->set_num_events(num_events));
  size_t scratch = 0;
  ZRT_RETURN_IF_ERROR(backend->prepare(ri, compute, &scratch));
  if (staging_bytes) ZRT_RETURN_IF_ERROR(backend->allocate(MemSpace::device, staging_bytes, &staging));
  report.runtime_scratch_bytes = scratch + staging_bytes;
  return {};
}

Status Session::Impl::run_collective(const Step &s) {
  const Op op = s.op;
  void *stream = backend->native_stream(s.stream);
  comm->set_step(static_cast<uint64_t>(s.index));  // named by the collective order check's header
  if (op == Op::barrier) return comm->barrier(s.axis);
  const TensorRef &in = s.inputs[0], &out = s.outputs[0];
  const size_t es = dtype_size(in.dtype);
  const size_t in_bytes = static_cast<size_t>(in.numel()) * es, out_bytes = static_cast<size_t>(out.numel()) * es;
  const int g = comm->group_size(s.axis);
  auto *st = static_cast<uint8_t *>(staging);
  switch (op) {
    case Op::all_reduce: {
      if (in.data != out.data && overlaps(in.data, in_bytes, out.data, out_bytes)) {
        ZRT_RETURN_IF_ERROR(backend->copy_blocks(out.data, 0, in.data, 0, in_bytes, 1));
        return comm->all_reduce(s.axis, out.data, out.data, static_cast<size_t>(in.numel()), in.dtype, stream);
      }
      return comm->all_reduce(s.axis, in.data, out.data, static_cast<size_t>(in.numel()), in.dtype, stream);
    }
    case Op::all_gather: {
      const int dim = static_cast<int>(s.ints[0]);
      int64_t outer = 1;
      for (int k = 0; k < dim; ++k) outer *= in.shape[k];
      if (outer == 1 && !overlaps(in.data, in_bytes, out.data, out_bytes))
        return comm->all_gather(s.axis, in.data, out.data, in_bytes, stream);
      // Gathered contiguously per rank, then interleaved: rank c's row o goes to out row o, part c.
      ZRT_RETURN_IF_ERROR(comm->all_gather(s.axis, in.data, st, in_bytes, stream));
      const size_t row = in_bytes / static_cast<size_t>(outer);
      for (int c = 0; c < g; ++c)
        ZRT_RETURN_IF_ERROR(backend->copy_blocks(static_cast<uint8_t *>(out.data) + c * row, g * row, st + c * in_bytes,
                                                 row, row, static_cast<size_t>(outer)));
      return {};
    }
    case Op::reduce_scatter: {
      const int dim = static_cast<int>(s.ints[0]);
      int64_t outer = 1;
      for (int k = 0; k < dim; ++k) outer *= out.shape[k];
      if (outer == 1 && !overlaps(in.data, in_bytes, out.data, out_bytes))
        return comm->reduce_scatter(s.axis, in.data, out.data, static_cast<size_t>(out.numel()), in.dtype, stream);
      // Packed so that part c of every row is contiguous, then reduced and scattered block-wise.
      const size_t row = out_bytes / static_cast<size_t>(outer);
      for (int c = 0; c < g; ++c)
        ZRT_RETURN_IF_ERROR(backend->copy_blocks(st + c * out_bytes, row, static_cast<uint8_t *>(in.data) + c * row,
                                                 g * row, row, static_cast<size_t>(outer)));
      return comm->reduce_scatter(s.axis, st, out.data, static_cast<size_t>(out.numel()), in.dtype, stream);
    }
    case Op::broadcast: {
      if (in.data != out.data) ZRT_RETURN_IF_ERROR(backend->copy_blocks(out.data, 0, in.data, 0, in_bytes, 1));
      return comm->broadcast(s.axis, out.data, out_bytes, static_cast<int>(s.ints[0]), stream);
    }
    case Op::gather_param: {
      // Every dp rank holds an equal flat shard; the gathered flat tensor is cut to the local shape.
      const size_t total = in_bytes * static_cast<size_t>(g);
      if (out.bytes >= total && !overlaps(in.data, in_bytes, out.data, total))
        return comm->all_gather(Axis::dp, in.data, out.data, in_bytes, stream);
      ZRT_RETURN_IF_ERROR(comm->all_gather(Axis::dp, in.data, st, in_bytes, stream));
      return backend->copy_blocks(out.data, 0, st, 0, out_bytes, 1);
    }
    default: return error(Code::internal, "not a collective");
  }
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

namespace {
Status open_common(std::vector<uint8_t> *bytes, const std::string *path, const std::string &base_dir,
                   const Options &options, std::unique_ptr<Session::Impl> *out) {
  std::unique_ptr<Session::Impl> im(new Session::Impl());
  im->opts = options;
  ZRT_RETURN_IF_ERROR(make_mpi_communicator(&im->comm));
  if (options.backend == BackendKind::cuda) {
#ifdef ZRT_HAVE_CUDA
    std::unique_ptr<Communicator> mpi = std::move(im->comm);
    ZRT_RETURN_IF_ERROR(make_nccl_communicator(std::move(mpi), &im->comm));
#else
    return error(Code::mismatch, "this zrt was built without the cuda backend (no CUDA/NCCL at build time)");
#endif
  }
  Launch launch;
  launch.world = im->comm->world_size();
  launch.rank = im->comm->rank();
  launch.backend = options.backend;
  Status s = path ? PlanFile::load(*path, launch, &im->pf)
                  : PlanFile::from_bytes(std::move(*bytes), "<memory>", base_dir, launch, &im->pf);
  // First agreement: everybody verified the plan, holds the same file, and computes the same collective
  // sequence. Nothing is allocated before this point.
  ZRT_RETURN_IF_ERROR(im->agree_status(s, s.ok() ? im->pf->file_hash() : 0, s.ok() ? im->pf->collective_hash() : 0,
                                       "ranks hold different plan files (their hashes differ)",
                                       "ranks compute different collective sequences"));
  s = im->setup();
  if (s.ok()) s = im->load_weights();
  if (s.ok()) s = im->decode_steps();
  // Second agreement: every rank allocated its arenas and loaded its weights.
  ZRT_RETURN_IF_ERROR(im->agree_status(s, 0, 0, nullptr, nullptr));
  *out = std::move(im);
  return {};
}
}  // namespace

Status Session::open(const std::string &plan_path, const Options &options, std::unique_ptr<Session> *out) {
  std::unique_ptr<Impl> im;
  ZRT_RETURN_IF_ERROR(open_common(nullptr, &plan_path, "", options, &im));
  out->reset(new Session(std::move(im)));
  return {};
}

Status Session::open_buffer(const void *data, size_t bytes, const std::string &base_dir, const Options &options,
                            std::unique_ptr<Session> *out) {
  std::vector<uint8_t> v(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + bytes);
  std::unique_ptr<Impl> im;
  ZRT_RETURN_IF_ERROR(open_common(&v, nullptr, base_dir, options, &im));
  out->reset(new Session(std::move(im)));
  return {};
}

const RankInfo &Session::rank_info() const { return impl_->ri; }
const std::vector<IOInfo> &Session::inputs() const { return impl_->inputs; }
const std::vector<IOInfo> &Session::outputs() const { return impl_->outputs; }
std::string Session::producer() const {
  const auto *p = impl_->plan().producer();
  return p ? p->str() : "";
}

Status Session::bind_input(const std::string &name, const void *data, size_t bytes) {
  Impl &m = *impl_;
  const int i = m.find(m.inputs, name);
  if (i < 0) return error(Code::invalid_argument, "the plan has no input named '" + name + "'");
  const IOInfo &io = m.inputs[i];
  if (bytes != io.global_bytes())
    return error(Code::invalid_argument, "input '" + name + "' needs " + std::to_string(io.global_bytes()) +
                                             " bytes (the global tensor), got " + std::to_string(bytes));
  // An id outside its table would read nothing: the embedding kernel zeroes rows that other tp ranks hold,
  // so an id that no rank holds becomes a silent zero row. Refuse it here, where the whole batch is seen.
  bool negative_ok = false;
  const int64_t bound = (io.dtype == DType::i64 || io.dtype == DType::i32) ? m.id_bound(i, &negative_ok) : -1;
  if (bound >= 0) {
    const size_t count = bytes / dtype_size(io.dtype);
    for (size_t e = 0; e < count; ++e) {
      const int64_t id = zk::load_i64(data, static_cast<zk::DType>(io.dtype), static_cast<int64_t>(e));
      if (id >= bound || id < (negative_ok ? -bound : 0))
        return error(Code::invalid_argument, "input '" + name + "' element " + std::to_string(e) + " is " +
                                                 std::to_string(id) + ", outside [" +
                                                 std::to_string(negative_ok ? -bound : 0) + ", " +
                                                 std::to_string(bound) + "): the rows of the table it indexes");
    }
  }
  const TensorRef &t = m.tensors[m.input_tensor[i]];
  size_t off = 0, n = bytes;
  if (io.batch_split && !io.global_shape.empty() && io.global_shape[0] > 0) {
    // dp group d takes rows [d * N / dp, (d + 1) * N / dp).
    const size_t row = bytes / static_cast<size_t>(io.global_shape[0]);
    const int64_t rows = io.global_shape[0] / m.ri.dp;
    off = static_cast<size_t>(m.ri.dp_index() * rows) * row;
    n = static_cast<size_t>(rows) * row;
  }
  ZRT_RETURN_IF_ERROR(m.backend->write(t.space, t.data, static_cast<const uint8_t *>(data) + off, n));
  m.note_write(t, false);
  return {};
}

int64_t Session::Impl::id_bound(size_t i, bool *negative_ok) const {
  const fb::Plan &p = plan();
  int64_t bound = -1;
  *negative_ok = false;
  if (p.instrs())
    for (const fb::Instr *in : *p.instrs()) {
      if (!in->inputs() || in->inputs()->size() < 2 || in->inputs()->Get(1) != input_tensor[i]) continue;
      const TensorRef &tab = tensors[in->inputs()->Get(0)];
      if (in->op() == static_cast<uint16_t>(Op::embedding) && tab.rank == 2) {
        const int64_t stride = in->ints() && in->ints()->size() ? in->ints()->Get(0) : 0;
        bound = stride > 0 ? std::min<int64_t>(stride * ri.tp, tab.shape[0] * ri.tp) : tab.shape[0];
      } else if (in->op() == static_cast<uint16_t>(Op::gather) && tab.rank > 0) {
        const int64_t ax = in->ints() && in->ints()->size() ? in->ints()->Get(0) : 0;
        bound = tab.shape[ax < 0 ? ax + tab.rank : ax];
        *negative_ok = true;
      }
    }
  return bound;
}

Status Session::bind_random_inputs(uint64_t seed) {
  Impl &m = *impl_;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const IOInfo &io = m.inputs[i];
    // Integer inputs are ids: bound them by the rows of the table they index so that every id is valid.
    bool negative_ok = false;
    int64_t bound = m.id_bound(i, &negative_ok);
    if (bound < 1) bound = 2;
    const size_t n = io.global_bytes() / dtype_size(io.dtype);
    std::vector<uint8_t> buf(io.global_bytes());
    const std::string key = "input:" + io.name;
    for (size_t e = 0; e < n; ++e) {
      const float u = random_weight_value(seed, key, e) * 10.0f;  // [-1, 1)
      if (io.dtype == DType::f32 || io.dtype == DType::bf16 || io.dtype == DType::f16)
        zk::store_f32(buf.data(), static_cast<zk::DType>(io.dtype), static_cast<int64_t>(e), u);
      else
        zk::store_i64(buf.data(), static_cast<zk::DType>(io.dtype), static_cast<int64_t>(e),
                      std::min<int64_t>(bound - 1, static_cast<int64_t>((u + 1.0f) * 0.5f * static_cast<float>(bound))));
    }
    ZRT_RETURN_IF_ERROR(bind_input(io.name, buf.data(), buf.size()));
  }
  return {};
}

Status Session::run() {
  Impl &m = *impl_;
  bool replayed = false;
  ZRT_RETURN_IF_ERROR(m.backend->begin_run(&replayed));
  for (size_t i = 0; i < m.steps.size(); ++i) {
    const Step &s = m.steps[i];
    Status st;
    if (!replayed) {
      st = m.backend->enter(s);
      if (st.ok()) st = m.step_is_comm[i] ? m.run_collective(s) : m.backend->execute(s);
      if (st.ok()) st = m.backend->leave(s);
    }
    if (!st.ok()) {
      return st.with_context("instruction " + std::to_string(i) + " (" + op_name(s.op) +
                             (s.name.empty() ? "" : " '" + s.name + "'") + ")");
    }
    for (int sp = 0; sp < kNumMemSpaces; ++sp) {
      uint64_t &a = m.report.measured_arena_bytes[sp], &b = m.report.measured_instr_bytes[sp];
      a = std::max(a, m.step_extent[i][sp]);
      b = std::max(b, m.step_extent[i][sp]);
    }
  }
  return m.backend->synchronize();
}

Status Session::read_local_output(const std::string &name, void *data, size_t bytes, std::vector<int64_t> *shape) {
  Impl &m = *impl_;
  const int i = m.find(m.outputs, name);
  if (i < 0) return error(Code::invalid_argument, "the plan has no output named '" + name + "'");
  const TensorRef &t = m.tensors[m.output_tensor[i]];
  const size_t n = static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
  if (bytes != n)
    return error(Code::invalid_argument, "output '" + name + "' holds " + std::to_string(n) + " bytes on this rank, got a buffer of " +
                                             std::to_string(bytes));
  if (shape) shape->assign(t.shape, t.shape + t.rank);
  return m.backend->read(t.space, data, t.data, n);
}

Status Session::read_output(const std::string &name, void *data, size_t bytes, int root) {
  Impl &m = *impl_;
  const int i = m.find(m.outputs, name);
  if (i < 0) return error(Code::invalid_argument, "the plan has no output named '" + name + "'");
  const IOInfo &io = m.outputs[i];
  if (m.ri.rank == root && bytes != io.global_bytes())
    return error(Code::invalid_argument, "output '" + name + "' needs a buffer of " + std::to_string(io.global_bytes()) +
                                             " bytes (the global tensor), got " + std::to_string(bytes));
  const TensorRef &t = m.tensors[m.output_tensor[i]];
  const size_t local = static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
  // Outputs are whole on every rank of a tp group: the tp-index-0 rank of each dp group contributes its
  // rows (in rank order, which is dp order); an output that is not batch-split comes from rank 0 alone.
  std::vector<size_t> counts(m.ri.world, 0);
  for (int r = 0; r < m.ri.world; ++r) counts[r] = (io.batch_split ? r % m.ri.tp == 0 : r == 0) ? local : 0;
  std::vector<uint8_t> host(counts[m.ri.rank]);
  if (!host.empty()) ZRT_RETURN_IF_ERROR(m.backend->read(t.space, host.data(), t.data, host.size()));
  return m.comm->gather_host(host.data(), data, counts.data(), root);
}

MemoryReport Session::memory_report() const {
  MemoryReport r = impl_->report;
  r.measured_process_peak_bytes = impl_->backend->process_peak_bytes();
  return r;
}

}  // namespace zrt
