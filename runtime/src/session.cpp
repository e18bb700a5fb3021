// The executor behind zrt::Session: start-up agreement across ranks, arena allocation, constant and weight
// loading, input binding, the instruction loop (compute steps on the backend, collectives on the
// communicator), output assembly and the measured memory high-water mark.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "checkpoint/session_checkpoint.h"
#include "nvme/nvme_store.h"
#include "plan.h"
#include "step_decoder.h"
#include "weights.h"
#include "zk/cpu_kernels.h"
#include "zrt/collective_staging.h"
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
  /// One named program of the plan, decoded.
  struct Program {
    std::vector<Step> steps;
    std::vector<uint8_t> step_is_comm;
    std::vector<uint8_t> step_is_io;  // nvme_read / nvme_write: run by the executor through the NVMe store
    // Per step, the arena high-water mark its outputs reach, per space (precomputed at load).
    std::vector<std::array<uint64_t, kNumMemSpaces>> step_extent;
    std::vector<int> input_tensor, output_tensor, scalar_tensor;
  };
  std::vector<Program> programs;
  std::vector<ProgramInfo> program_info;  // indexed like programs
  int default_program = 0;                // "main" when the plan has it, else the first
  int last_run = -1;
  std::vector<std::pair<std::string, double>> scalar_values;  // set by the caller, by name
  int64_t generated = 0;  // tokens generated since the last prefill (the sampler's step)
  std::vector<StateInfo> state;
  std::vector<int> state_tensor;
  MemoryReport report;
  // NVMe offload (plan 2.3): the rank's file, and the transfers of the current run not yet waited for.
  std::unique_ptr<NvmeStore> nvme;
  struct PendingIo {
    int signal = -1;
    NvmeStore::Ticket ticket = 0;
    bool write = false;
    uint64_t file_begin = 0, file_end = 0;
    const uint8_t *host_begin = nullptr, *host_end = nullptr;
  };
  std::vector<PendingIo> pending_io;

  ~Impl() {
    if (backend) {
      for (int s = 0; s < kNumMemSpaces; ++s)
        if (arena[s]) backend->deallocate(static_cast<MemSpace>(s), arena[s]);
      if (staging) backend->deallocate(MemSpace::device, staging);
    }
  }

  const fb::Plan &plan() const { return pf->plan(); }
  void note_write(const TensorRef &t, bool by_instr) {
    if (t.space == MemSpace::nvme) return;
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
  Status open_nvme(uint64_t file_bytes);
  Status run_io(const Step &s);
  Status wait_io_for(const Step &s);
  Status drain_io(size_t count);
  Status finish_io();
  Status nvme_transfer(const TensorRef &t, void *data, size_t bytes, bool write);
  /// For an integer input that indexes a table (embedding, gather): the number of rows of the whole table,
  /// and whether negative ids count from the end (gather). -1 when no instruction reads the input as ids.
  int64_t id_bound(int program, size_t input, bool *negative_ok) const;
  Status bind_one(int program, int input, const void *data, size_t bytes);
  Status write_scalars(int program);
  int find(const std::vector<IOInfo> &v, const std::string &name) const {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i].name == name) return static_cast<int>(i);
    return -1;
  }
  int find_program(const std::string &name) const {
    for (size_t i = 0; i < program_info.size(); ++i)
      if (program_info[i].name == name) return static_cast<int>(i);
    return -1;
  }
  /// The program an output name refers to: the last one run that has it, else the first that has it.
  int program_with_output(const std::string &name, int *index) const {
    if (last_run >= 0 && (*index = find(program_info[last_run].outputs, name)) >= 0) return last_run;
    for (size_t p = 0; p < program_info.size(); ++p)
      if ((*index = find(program_info[p].outputs, name)) >= 0) return static_cast<int>(p);
    return -1;
  }
  std::string program_names() const {
    std::string r;
    for (const ProgramInfo &pi : program_info) r += (r.empty() ? "'" : ", '") + pi.name + "'";
    return r;
  }
};

namespace {
constexpr uint64_t kNoFailure = std::numeric_limits<uint64_t>::max();

bool overlaps(const void *a, size_t na, const void *b, size_t nb) {
  const auto *x = static_cast<const uint8_t *>(a), *y = static_cast<const uint8_t *>(b);
  return x < y + nb && y < x + na;
}

// The staging a gather or scatter step needs on this rank (zrt/collective_staging.h holds the rule, which
// the compiler applies too); 0 when it runs directly.
uint64_t staging_need(const Step &s, int64_t dp) {
  const TensorRef &in = s.inputs[0], &out = s.outputs[0];
  const uint64_t es = dtype_size(in.dtype);
  CollectiveExtent e;
  e.in_begin = reinterpret_cast<uintptr_t>(in.data);
  e.in_bytes = static_cast<uint64_t>(in.numel()) * es;
  e.out_begin = reinterpret_cast<uintptr_t>(out.data);
  e.out_bytes = static_cast<uint64_t>(out.numel()) * es;
  e.out_reserved = out.bytes;
  int64_t outer = 1;
  StagedCollective kind = StagedCollective::gather_param;
  if (s.op == Op::all_gather || s.op == Op::reduce_scatter) {
    kind = s.op == Op::all_gather ? StagedCollective::all_gather : StagedCollective::reduce_scatter;
    // The dimensions before the gathered one: of the operand for a gather, of the result for a scatter.
    const TensorRef &shaped = s.op == Op::all_gather ? in : out;
    for (int k = 0; k < static_cast<int>(s.ints[0]) && k < shaped.rank; ++k) outer *= shaped.shape[k];
  }
  return collective_staging_bytes(kind, e, outer, dp);
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
  const fb::RankMemory &rm = *p.memory()->Get(ri.rank);
  // The NVMe file: created before the backend starts and before any arena is taken, so that a bad path
  // (missing, not a folder, not writable, too small) fails before memory is allocated or anything runs.
  const uint64_t nvme_bytes = rm.arena_bytes() && rm.arena_bytes()->size() > 2 ? rm.arena_bytes()->Get(2) : 0;
  if (nvme_bytes) ZRT_RETURN_IF_ERROR(open_nvme(nvme_bytes));
  ZRT_RETURN_IF_ERROR(make_backend(opts.backend, &backend));
  // A plan with NVMe transfers is not captured as a CUDA graph (the store's threads run beside it).
  if (nvme) backend->disallow_capture();
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
    if (r.space == MemSpace::nvme) {
      r.file_offset = t.offset();
      r.data = nullptr;
    } else {
      r.data = static_cast<uint8_t *>(arena[static_cast<int>(r.space)]) + t.offset();
    }
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
  const size_t np = p.programs()->size();
  programs.resize(np);
  program_info.resize(np);
  for (size_t pi = 0; pi < np; ++pi) {
    const fb::Program &prog = *p.programs()->Get(pi);
    ProgramInfo &info = program_info[pi];
    Program &run = programs[pi];
    info.name = prog.name()->str();
    if (info.name == "main") default_program = static_cast<int>(pi);
    for (int pass = 0; pass < 2; ++pass) {
      const auto *v = pass == 0 ? prog.inputs() : prog.outputs();
      if (!v) continue;
      for (const fb::IOBinding *b : *v) {
        IOInfo io;
        io.name = b->name()->str();
        io.dtype = static_cast<DType>(b->dtype());
        if (b->global_shape()) io.global_shape.assign(b->global_shape()->begin(), b->global_shape()->end());
        io.batch_split = b->batch_split();
        (pass == 0 ? info.inputs : info.outputs).push_back(io);
        (pass == 0 ? run.input_tensor : run.output_tensor).push_back(b->tensor());
      }
    }
    if (prog.scalars())
      for (const fb::ScalarInput *x : *prog.scalars()) {
        info.scalars.push_back({x->name()->str(), static_cast<DType>(x->dtype()), x->default_value()});
        run.scalar_tensor.push_back(x->tensor());
      }
  }
  if (p.state())
    for (const fb::StateEntry *e : *p.state()) {
      StateInfo si;
      si.name = e->name()->str();
      si.kind = fb::EnumNameStateKind(e->kind());
      si.param = e->param() ? e->param()->str() : "";
      si.dtype = tensors[e->tensor()].dtype;
      if (e->full_shape()) si.full_shape.assign(e->full_shape()->begin(), e->full_shape()->end());
      if (e->local_shape()) si.local_shape.assign(e->local_shape()->begin(), e->local_shape()->end());
      const fb::RankSlice &rs = *e->ranks()->Get(ri.rank);
      si.flat_begin = rs.flat_begin();
      si.flat_end = rs.flat_end();
      state.push_back(si);
      state_tensor.push_back(e->tensor());
    }
  return {};
}

Status Session::Impl::load_weights() {
  const fb::Plan &p = plan();
  if (!p.bindings()) return {};
  MappedFiles files;
  std::vector<uint8_t> host;
  const auto &bs = *p.bindings();
  for (size_t bi = 0; bi < bs.size(); ++bi) {
    const fb::WeightBinding *b = bs.Get(bi);
    TensorRef &t = tensors[b->tensor()];
    const fb::WeightSource &src = *p.weights()->Get(b->source());
    // Consecutive bindings of one tensor (the parts of a merged weight, docs/plan-format.md 2.6) assemble into
    // one host buffer, written once after the last of them.
    if (bi == 0 || bs.Get(bi - 1)->tensor() != b->tensor()) host.assign(t.bytes, 0);
    Status s = assemble_weight(p, *b, ri.rank, pf->base_dir(), opts.init == InitMode::random, opts.seed, &files,
                               host.data(), t.dtype);
    if (!s.ok()) return s.with_context("loading weight '" + (src.name() ? src.name()->str() : std::string()) + "'");
    if (bi + 1 < bs.size() && bs.Get(bi + 1)->tensor() == b->tensor()) continue;
    if (t.space == MemSpace::nvme) {
      ZRT_RETURN_IF_ERROR(nvme_transfer(t, host.data(), host.size(), true)
                              .with_context("writing weight '" + (src.name() ? src.name()->str() : std::string()) +
                                            "' to NVMe"));
      continue;
    }
    ZRT_RETURN_IF_ERROR(backend->write(t.space, t.data, host.data(), host.size()));
    note_write(t, false);
  }
  return {};
}

Status Session::Impl::open_nvme(uint64_t file_bytes) {
  const fb::Plan &p = plan();
  const fb::NvmeStore *cfg = p.nvme();
  const std::string dir = !opts.nvme_path.empty() ? opts.nvme_path : cfg && cfg->path() ? cfg->path()->str() : "";
  const uint32_t alignment = cfg && cfg->alignment() ? cfg->alignment() : 4096;
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(pf->file_hash()));
  const std::string name = std::string("zplan-") + hash + "-rank" + std::to_string(ri.rank) + ".nvme";
  std::string note;
  ZRT_RETURN_IF_ERROR(NvmeStore::open(dir, name, file_bytes, alignment, opts.nvme_threads, &nvme, &note));
  if (!note.empty() && ri.rank == 0) std::fprintf(stderr, "zrt: note: %s\n", note.c_str());
  report.nvme_file = nvme->path();
  report.nvme_file_bytes = file_bytes;
  report.nvme_direct = nvme->direct();
  return {};
}

// A whole tensor of the nvme space to or from `data` (`bytes` of it; the rest of the tensor's aligned range
// is zero on a write), through an aligned bounce buffer: load time and state access between runs.
Status Session::Impl::nvme_transfer(const TensorRef &t, void *data, size_t bytes, bool write) {
  if (!nvme) return error(Code::internal, "tensor " + std::to_string(t.index) + " is on NVMe but the plan has no file");
  AlignedBuffer buf(t.bytes, nvme->alignment());
  if (!buf.ok()) return error(Code::internal, "out of host memory for an NVMe bounce buffer");
  if (write) {
    std::memcpy(buf.data(), data, std::min<size_t>(bytes, t.bytes));
    return nvme->write(t.file_offset, buf.data(), t.bytes);
  }
  ZRT_RETURN_IF_ERROR(nvme->read(t.file_offset, buf.data(), t.bytes));
  std::memcpy(data, buf.data(), std::min<size_t>(bytes, t.bytes));
  return {};
}

namespace {
bool ranges_meet(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) { return a0 < b1 && b0 < a1; }
}  // namespace

// Before a step runs: the NVMe transfers it waits on (the plan's io events) complete first. A transfer whose
// buffer the step touches without such an event is waited for too and counted, so that a plan that misses
// an event is slow and visible, never wrong.
Status Session::Impl::wait_io_for(const Step &s) {
  if (pending_io.empty()) return {};
  // A pending read fills its buffer: nothing may touch it. A pending write reads its buffer: only a step that
  // writes the buffer conflicts with it.
  auto touches = [&](const PendingIo &p) {
    for (const auto *v : {&s.inputs, &s.outputs}) {
      if (p.write && v == &s.inputs) continue;
      for (const TensorRef &t : *v) {
        if (!t.data) continue;
        const auto *b = static_cast<const uint8_t *>(t.data);
        if (b < p.host_end && p.host_begin < b + t.bytes) return true;
      }
    }
    return false;
  };
  // Waiting on an io event means, as for any stream, that everything issued on the io stream before it is
  // done as well (the memory plan relies on it: a wait on a later transfer orders after the earlier ones),
  // although the pool may finish transfers out of order.
  // Transfers leave pending_io only as a prefix (drain_io), so a waited event that is no longer pending was
  // completed together with everything before it.
  size_t upto = 0;
  for (size_t k = 0; k < pending_io.size(); ++k)
    if (pending_io[k].signal >= 0 &&
        std::find(s.waits.begin(), s.waits.end(), pending_io[k].signal) != s.waits.end())
      upto = k + 1;
  ZRT_RETURN_IF_ERROR(drain_io(upto));
  for (size_t k = 0; k < pending_io.size(); ++k) {
    const PendingIo &p = pending_io[k];
    if (!touches(p)) continue;
    ++report.nvme_unplanned_waits;
    if (std::getenv("ZRT_NVME_DEBUG"))
      std::fprintf(stderr, "zrt: instruction %d (%s) waits for an NVMe %s that no plan event orders it after\n",
                   s.index, op_name(s.op), p.write ? "write" : "read");
    ZRT_RETURN_IF_ERROR(drain_io(k + 1));
    k = static_cast<size_t>(-1);  // the loop's ++k starts over at 0
  }
  return {};
}

// Completes the first `count` pending transfers, in issue order.
Status Session::Impl::drain_io(size_t count) {
  for (size_t k = 0; k < count; ++k) ZRT_RETURN_IF_ERROR(nvme->wait(pending_io[k].ticket));
  pending_io.erase(pending_io.begin(), pending_io.begin() + static_cast<std::ptrdiff_t>(count));
  return {};
}

// One nvme_read / nvme_write: queued on the store, to complete while the executor issues what follows.
// The io stream is in order: a transfer that overlaps an earlier one's file range or host buffer (where
// either writes) waits for it first.
Status Session::Impl::run_io(const Step &s) {
  for (int e : s.waits) ZRT_RETURN_IF_ERROR(backend->host_wait(e));
  const bool write = s.op == Op::nvme_write;
  const TensorRef &file = s.inputs[0];
  const TensorRef &host = write ? s.inputs[1] : s.outputs[0];
  PendingIo io;
  io.signal = s.signal;
  io.write = write;
  io.file_begin = file.file_offset;
  io.file_end = file.file_offset + file.bytes;
  io.host_begin = static_cast<const uint8_t *>(host.data);
  io.host_end = io.host_begin + host.bytes;
  size_t upto = 0;
  for (size_t k = 0; k < pending_io.size(); ++k) {
    const PendingIo &p = pending_io[k];
    const bool conflict = (p.write || write) && (ranges_meet(p.file_begin, p.file_end, io.file_begin, io.file_end) ||
                                                 (io.host_begin < p.host_end && p.host_begin < io.host_end));
    if (conflict) upto = k + 1;
  }
  ZRT_RETURN_IF_ERROR(drain_io(upto));
  if (write) ZRT_RETURN_IF_ERROR(nvme->submit_write(io.file_begin, host.data, file.bytes, &io.ticket));
  else ZRT_RETURN_IF_ERROR(nvme->submit_read(io.file_begin, host.data, file.bytes, &io.ticket));
  pending_io.push_back(io);
  return {};
}

Status Session::Impl::finish_io() {
  pending_io.clear();
  if (!nvme) return {};
  Status st = nvme->wait_all();
  report.nvme_bytes_read = nvme->bytes_read();
  report.nvme_bytes_written = nvme->bytes_written();
  return st;
}

Status Session::Impl::decode_steps() {
  const fb::Plan &p = plan();
  std::vector<Step> compute;
  int max_events = 0;
  for (size_t pi = 0; pi < programs.size(); ++pi) {
    const fb::Program &prog = *p.programs()->Get(pi);
    Program &run = programs[pi];
    const size_t n = prog.instrs() ? prog.instrs()->size() : 0;
    max_events = std::max(max_events, prog.num_events());
    run.steps.resize(n);
    run.step_is_comm.resize(n);
    run.step_is_io.resize(n);
    run.step_extent.assign(n, {});
    for (size_t i = 0; i < n; ++i) {
      Step &s = run.steps[i];
      ZRT_RETURN_IF_ERROR(zrt::decode_step(*prog.instrs()->Get(i), static_cast<int>(i), tensors, &s));
      run.step_is_comm[i] = s.info->on_communicator();
      run.step_is_io[i] = s.op == Op::nvme_read || s.op == Op::nvme_write;
      if (run.step_is_io[i] && !nvme)
        return error(Code::plan_invalid, "instruction " + std::to_string(i) + " moves NVMe data but the plan has no NVMe file");
      for (const TensorRef &o : s.outputs) {
        if (o.space == MemSpace::nvme) continue;
        const int sp = static_cast<int>(o.space);
        const uint64_t end = static_cast<uint8_t *>(o.data) - static_cast<uint8_t *>(arena[sp]) + o.bytes;
        run.step_extent[i][sp] = std::max(run.step_extent[i][sp], end);
      }
      // Staging for collectives that permute or must not overlap: sized once here, never on the hot path,
      // and only where run_collective() takes the staged path (the compiler plans the same need with the
      // workspace: compiler/plan/EmitPlan.cpp, noteStaging).
      if (s.op == Op::all_gather || s.op == Op::reduce_scatter || s.op == Op::gather_param)
        staging_bytes = std::max<size_t>(staging_bytes, staging_need(s, ri.dp));
      if (!run.step_is_comm[i] && !run.step_is_io[i]) compute.push_back(s);
    }
  }
  size_t scratch = 0;
  ZRT_RETURN_IF_ERROR(backend->set_num_events(max_events));
  // A backend that cannot run the plan (an attention kernel the device cannot run, say) names the plan.
  if (Status ps = backend->prepare(ri, compute, &scratch); !ps.ok())
    return ps.with_context("plan '" + pf->label() + "'");
  // On cuda the plan's workspace covers the backend's scratch (the GEMM workspace) and the collective
  // staging, sized by the compiler with the rules above; the runtime takes exactly that, or more only when a
  // plan (one not made by zplan) under-counts, which the memory report then shows as runtime scratch.
  if (opts.backend == BackendKind::cuda) {
    const uint64_t planned_ws = plan().memory()->Get(ri.rank)->workspace_bytes();
    if (planned_ws > scratch) staging_bytes = std::max<size_t>(staging_bytes, planned_ws - scratch);
  }
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
  // The optional reduction int: all_reduce [reduction], reduce_scatter [dim, reduction]; absent = sum.
  const size_t red_at = op == Op::all_reduce ? 0 : 1;
  const Reduction red = s.ints.size() > red_at ? static_cast<Reduction>(s.ints[red_at]) : Reduction::sum;
  switch (op) {
    case Op::all_reduce: {
      if (in.data != out.data && overlaps(in.data, in_bytes, out.data, out_bytes)) {
        ZRT_RETURN_IF_ERROR(backend->copy_blocks(out.data, 0, in.data, 0, in_bytes, 1));
        return comm->all_reduce(s.axis, out.data, out.data, static_cast<size_t>(in.numel()), in.dtype, stream, red);
      }
      return comm->all_reduce(s.axis, in.data, out.data, static_cast<size_t>(in.numel()), in.dtype, stream, red);
    }
    case Op::all_gather: {
      if (staging_need(s, g) == 0) return comm->all_gather(s.axis, in.data, out.data, in_bytes, stream);
      const int dim = static_cast<int>(s.ints[0]);
      int64_t outer = 1;
      for (int k = 0; k < dim; ++k) outer *= in.shape[k];
      // Gathered contiguously per rank, then interleaved: rank c's row o goes to out row o, part c.
      ZRT_RETURN_IF_ERROR(comm->all_gather(s.axis, in.data, st, in_bytes, stream));
      const size_t row = in_bytes / static_cast<size_t>(outer);
      for (int c = 0; c < g; ++c)
        ZRT_RETURN_IF_ERROR(backend->copy_blocks(static_cast<uint8_t *>(out.data) + c * row, g * row, st + c * in_bytes,
                                                 row, row, static_cast<size_t>(outer)));
      return {};
    }
    case Op::reduce_scatter: {
      if (staging_need(s, g) == 0)
        return comm->reduce_scatter(s.axis, in.data, out.data, static_cast<size_t>(out.numel()), in.dtype, stream, red);
      const int dim = static_cast<int>(s.ints[0]);
      int64_t outer = 1;
      for (int k = 0; k < dim; ++k) outer *= out.shape[k];
      // Packed so that part c of every row is contiguous, then reduced and scattered block-wise.
      const size_t row = out_bytes / static_cast<size_t>(outer);
      for (int c = 0; c < g; ++c)
        ZRT_RETURN_IF_ERROR(backend->copy_blocks(st + c * out_bytes, row, static_cast<uint8_t *>(in.data) + c * row,
                                                 g * row, row, static_cast<size_t>(outer)));
      return comm->reduce_scatter(s.axis, st, out.data, static_cast<size_t>(out.numel()), in.dtype, stream, red);
    }
    case Op::broadcast: {
      if (in.data != out.data) ZRT_RETURN_IF_ERROR(backend->copy_blocks(out.data, 0, in.data, 0, in_bytes, 1));
      return comm->broadcast(s.axis, out.data, out_bytes, static_cast<int>(s.ints[0]), stream);
    }
    case Op::gather_param: {
      // Every dp rank holds an equal flat shard; the gathered flat tensor is cut to the local shape.
      if (staging_need(s, g) == 0) return comm->all_gather(Axis::dp, in.data, out.data, in_bytes, stream);
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
  // MPI under mpirun, TCP under torchrun (communicator.h); NCCL's control plane is whichever that is.
  ZRT_RETURN_IF_ERROR(make_communicator_from_env(&im->comm));
  if (options.backend == BackendKind::cuda) {
#ifdef ZRT_HAVE_CUDA
    std::unique_ptr<Communicator> control = std::move(im->comm);
    ZRT_RETURN_IF_ERROR(make_nccl_communicator(std::move(control), &im->comm));
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
const std::vector<IOInfo> &Session::inputs() const { return impl_->program_info[impl_->default_program].inputs; }
const std::vector<IOInfo> &Session::outputs() const { return impl_->program_info[impl_->default_program].outputs; }
const std::vector<ProgramInfo> &Session::programs() const { return impl_->program_info; }
const std::vector<StateInfo> &Session::state() const { return impl_->state; }
std::string Session::producer() const {
  const auto *p = impl_->plan().producer();
  return p ? p->str() : "";
}

Status Session::Impl::bind_one(int pi, int i, const void *data, size_t bytes) {
  const IOInfo &io = program_info[pi].inputs[i];
  const std::string &name = io.name;
  if (bytes != io.global_bytes())
    return error(Code::invalid_argument, "input '" + name + "' needs " + std::to_string(io.global_bytes()) +
                                             " bytes (the global tensor), got " + std::to_string(bytes));
  // An id outside its table would read nothing: the embedding kernel zeroes rows that other tp ranks hold,
  // so an id that no rank holds becomes a silent zero row. Refuse it here, where the whole batch is seen.
  bool negative_ok = false;
  const int64_t bound = (io.dtype == DType::i64 || io.dtype == DType::i32) ? id_bound(pi, i, &negative_ok) : -1;
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
  const TensorRef &t = tensors[programs[pi].input_tensor[i]];
  size_t off = 0, n = bytes;
  if (io.batch_split && !io.global_shape.empty() && io.global_shape[0] > 0) {
    // dp group d takes rows [d * N / dp, (d + 1) * N / dp).
    const size_t row = bytes / static_cast<size_t>(io.global_shape[0]);
    const int64_t rows = io.global_shape[0] / ri.dp;
    off = static_cast<size_t>(ri.dp_index() * rows) * row;
    n = static_cast<size_t>(rows) * row;
  }
  ZRT_RETURN_IF_ERROR(backend->write(t.space, t.data, static_cast<const uint8_t *>(data) + off, n));
  note_write(t, false);
  return {};
}

Status Session::bind_input(const std::string &name, const void *data, size_t bytes) {
  Impl &m = *impl_;
  // Every program with an input of this name takes it: inputs keep their bytes until bound again.
  bool found = false;
  for (size_t pi = 0; pi < m.programs.size(); ++pi) {
    const int i = m.find(m.program_info[pi].inputs, name);
    if (i < 0) continue;
    found = true;
    Status st = m.bind_one(static_cast<int>(pi), i, data, bytes);
    if (!st.ok()) return m.programs.size() > 1 ? st.with_context("program '" + m.program_info[pi].name + "'") : st;
  }
  if (!found) return error(Code::invalid_argument, "the plan has no input named '" + name + "'");
  return {};
}

int64_t Session::Impl::id_bound(int pi, size_t i, bool *negative_ok) const {
  const fb::Program &prog = *plan().programs()->Get(pi);
  int64_t bound = -1;
  *negative_ok = false;
  if (prog.instrs())
    for (const fb::Instr *in : *prog.instrs()) {
      if (!in->inputs() || in->inputs()->size() < 2 || in->inputs()->Get(1) != programs[pi].input_tensor[i]) continue;
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
  for (size_t pi = 0; pi < m.programs.size(); ++pi)
    for (size_t i = 0; i < m.program_info[pi].inputs.size(); ++i) {
      const IOInfo io = m.program_info[pi].inputs[i];
      // Integer inputs are ids: bound them by the rows of the table they index so that every id is valid.
      bool negative_ok = false;
      int64_t bound = m.id_bound(static_cast<int>(pi), i, &negative_ok);
      if (bound < 1) bound = 2;
      const size_t n = io.global_bytes() / dtype_size(io.dtype);
      std::vector<uint8_t> buf(io.global_bytes());
      const uint64_t key = random_weight_key(seed, "input:" + io.name);
      for (size_t e = 0; e < n; ++e) {
        const float u = random_weight_at(key, e) * 10.0f;  // [-1, 1)
        if (io.dtype == DType::f32 || io.dtype == DType::bf16 || io.dtype == DType::f16)
          zk::store_f32(buf.data(), static_cast<zk::DType>(io.dtype), static_cast<int64_t>(e), u);
        else
          zk::store_i64(buf.data(), static_cast<zk::DType>(io.dtype), static_cast<int64_t>(e),
                        std::min<int64_t>(bound - 1, static_cast<int64_t>((u + 1.0f) * 0.5f * static_cast<float>(bound))));
      }
      ZRT_RETURN_IF_ERROR(m.bind_one(static_cast<int>(pi), static_cast<int>(i), buf.data(), buf.size()));
    }
  return {};
}

Status Session::set_scalar(const std::string &name, double value) {
  Impl &m = *impl_;
  bool found = false;
  for (const ProgramInfo &pi : m.program_info)
    for (const ScalarInfo &x : pi.scalars) found = found || x.name == name;
  if (!found) return error(Code::invalid_argument, "the plan has no scalar input named '" + name + "'");
  if (!std::isfinite(value)) return error(Code::invalid_argument, "scalar '" + name + "' must be finite");
  for (auto &kv : m.scalar_values)
    if (kv.first == name) {
      kv.second = value;
      return {};
    }
  m.scalar_values.emplace_back(name, value);
  return {};
}

Status Session::Impl::write_scalars(int pi) {
  const ProgramInfo &info = program_info[pi];
  for (size_t k = 0; k < info.scalars.size(); ++k) {
    const ScalarInfo &x = info.scalars[k];
    double v = x.default_value;
    for (const auto &kv : scalar_values)
      if (kv.first == x.name) v = kv.second;
    const TensorRef &t = tensors[programs[pi].scalar_tensor[k]];
    uint8_t buf[8] = {};
    if (x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16)
      zk::store_f32(buf, static_cast<zk::DType>(x.dtype), 0, static_cast<float>(v));
    else
      zk::store_i64(buf, static_cast<zk::DType>(x.dtype), 0, static_cast<int64_t>(v));
    ZRT_RETURN_IF_ERROR(backend->write(t.space, t.data, buf, dtype_size(x.dtype)));
  }
  return {};
}

Status Session::run() { return run(impl_->program_info[impl_->default_program].name); }

Status Session::run(const std::string &program) {
  Impl &m = *impl_;
  const int pi = m.find_program(program);
  if (pi < 0)
    return error(Code::invalid_argument, "the plan has no program named '" + program + "' (it has " +
                                             m.program_names() + ")");
  const Impl::Program &run = m.programs[pi];
  ZRT_RETURN_IF_ERROR(m.write_scalars(pi));
  m.last_run = pi;
  bool replayed = false;
  ZRT_RETURN_IF_ERROR(m.backend->begin_run(pi, &replayed));
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const Step &s = run.steps[i];
    Status st;
    if (!replayed && run.step_is_io[i]) {
      st = m.run_io(s);
    } else if (!replayed) {
      st = m.wait_io_for(s);
      if (st.ok()) st = m.backend->enter(s);
      if (st.ok()) st = run.step_is_comm[i] ? m.run_collective(s) : m.backend->execute(s);
      if (st.ok()) st = m.backend->leave(s);
    }
    if (!st.ok()) {
      const Status drained = m.finish_io();
      (void)drained;  // the step's error is the one to report
    }
    if (!st.ok()) {
      st = st.with_context("instruction " + std::to_string(i) + " (" + op_name(s.op) +
                           (s.name.empty() ? "" : " '" + s.name + "'") + ")");
      return m.programs.size() > 1 ? st.with_context("program '" + program + "'") : st;
    }
    for (int sp = 0; sp < kNumMemSpaces; ++sp) {
      uint64_t &a = m.report.measured_arena_bytes[sp], &b = m.report.measured_instr_bytes[sp];
      a = std::max(a, run.step_extent[i][sp]);
      b = std::max(b, run.step_extent[i][sp]);
    }
  }
  ZRT_RETURN_IF_ERROR(m.finish_io());
  return m.backend->synchronize();
}

Status Session::read_local_output(const std::string &name, void *data, size_t bytes, std::vector<int64_t> *shape) {
  Impl &m = *impl_;
  int i = -1;
  const int pi = m.program_with_output(name, &i);
  if (pi < 0) return error(Code::invalid_argument, "the plan has no output named '" + name + "'");
  const TensorRef &t = m.tensors[m.programs[pi].output_tensor[i]];
  const size_t n = static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
  if (bytes != n)
    return error(Code::invalid_argument, "output '" + name + "' holds " + std::to_string(n) + " bytes on this rank, got a buffer of " +
                                             std::to_string(bytes));
  if (shape) shape->assign(t.shape, t.shape + t.rank);
  return m.backend->read(t.space, data, t.data, n);
}

Status Session::read_output(const std::string &name, void *data, size_t bytes, int root) {
  Impl &m = *impl_;
  int i = -1;
  const int pi = m.program_with_output(name, &i);
  if (pi < 0) return error(Code::invalid_argument, "the plan has no output named '" + name + "'");
  const IOInfo &io = m.program_info[pi].outputs[i];
  if (m.ri.rank == root && bytes != io.global_bytes())
    return error(Code::invalid_argument, "output '" + name + "' needs a buffer of " + std::to_string(io.global_bytes()) +
                                             " bytes (the global tensor), got " + std::to_string(bytes));
  const TensorRef &t = m.tensors[m.programs[pi].output_tensor[i]];
  const size_t local = static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
  // Outputs are whole on every rank of a tp group: the tp-index-0 rank of each dp group contributes its
  // rows (in rank order, which is dp order); an output that is not batch-split comes from rank 0 alone.
  std::vector<size_t> counts(m.ri.world, 0);
  for (int r = 0; r < m.ri.world; ++r) counts[r] = (io.batch_split ? r % m.ri.tp == 0 : r == 0) ? local : 0;
  std::vector<uint8_t> host(counts[m.ri.rank]);
  if (!host.empty()) ZRT_RETURN_IF_ERROR(m.backend->read(t.space, host.data(), t.data, host.size()));
  return m.comm->gather_host(host.data(), data, counts.data(), root);
}

namespace {
/// The index of state `name` in `v`, once `bytes` (the caller's buffer) is found to be its size on this rank.
Status find_state(const std::vector<StateInfo> &v, const std::string &name, size_t bytes, size_t *index) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].name != name) continue;
    if (bytes != v[i].local_bytes())
      return error(Code::invalid_argument, "state '" + name + "' holds " + std::to_string(v[i].local_bytes()) +
                                               " bytes on this rank, got a buffer of " + std::to_string(bytes));
    *index = i;
    return {};
  }
  return error(Code::invalid_argument, "the plan has no state named '" + name + "'");
}
}  // namespace

Status Session::read_state(const std::string &name, void *data, size_t bytes) {
  Impl &m = *impl_;
  size_t i = 0;
  ZRT_RETURN_IF_ERROR(find_state(m.state, name, bytes, &i));
  const TensorRef &t = m.tensors[m.state_tensor[i]];
  ZRT_RETURN_IF_ERROR(m.backend->synchronize());
  if (t.space == MemSpace::nvme) return m.nvme_transfer(t, data, bytes, false);
  return m.backend->read(t.space, data, t.data, bytes);
}

Status Session::write_state(const std::string &name, const void *data, size_t bytes) {
  Impl &m = *impl_;
  size_t i = 0;
  ZRT_RETURN_IF_ERROR(find_state(m.state, name, bytes, &i));
  const TensorRef &t = m.tensors[m.state_tensor[i]];
  ZRT_RETURN_IF_ERROR(m.backend->synchronize());
  if (t.space == MemSpace::nvme) {
    ZRT_RETURN_IF_ERROR(m.nvme_transfer(t, const_cast<void *>(data), bytes, true));
    m.report.nvme_bytes_written = m.nvme->bytes_written();
    return {};
  }
  ZRT_RETURN_IF_ERROR(m.backend->write(t.space, t.data, data, bytes));
  m.note_write(t, false);
  return {};
}

bool Session::input_id_range(const std::string &name, int64_t *lo, int64_t *hi) const {
  const Impl &m = *impl_;
  for (size_t pi = 0; pi < m.programs.size(); ++pi) {
    const int i = m.find(m.program_info[pi].inputs, name);
    if (i < 0) continue;
    bool negative_ok = false;
    const int64_t bound = m.id_bound(static_cast<int>(pi), static_cast<size_t>(i), &negative_ok);
    if (bound < 0) continue;
    *lo = negative_ok ? -bound : 0;
    *hi = bound;
    return true;
  }
  return false;
}

Status Session::train_step(const std::string &input, const void *data, size_t bytes, int64_t step, StepResult *out) {
  Impl &m = *impl_;
  const int train = m.find_program("train_step"), micro = m.find_program("micro_step"),
            opt = m.find_program("optimizer_step");
  if (train < 0 && (micro < 0 || opt < 0))
    return error(Code::invalid_argument, "the plan has no training program (train_step, or micro_step and "
                                         "optimizer_step): compile it with zplan --train; it has " +
                                             m.program_names());
  // Every scalar named step takes the step number, in whichever program has it.
  bool has_step = false;
  for (const ProgramInfo &pi : m.program_info)
    for (const ScalarInfo &x : pi.scalars) has_step = has_step || x.name == "step";
  if (has_step) ZRT_RETURN_IF_ERROR(set_scalar("step", static_cast<double>(step)));
  int last = train;
  if (train >= 0) {
    ZRT_RETURN_IF_ERROR(bind_input(input, data, bytes));
    ZRT_RETURN_IF_ERROR(run("train_step"));
  } else {
    // Micro-batches: consecutive row blocks of the global batch, each bound to micro_step's input.
    const int i = m.find(m.program_info[micro].inputs, input);
    if (i < 0) return error(Code::invalid_argument, "micro_step has no input named '" + input + "'");
    const size_t mb = m.program_info[micro].inputs[i].global_bytes();
    if (mb == 0 || bytes % mb != 0)
      return error(Code::invalid_argument, "the batch of " + std::to_string(bytes) + " bytes is not a whole number of "
                                           "micro-batches of " + std::to_string(mb) + " bytes");
    for (size_t off = 0; off < bytes; off += mb) {
      ZRT_RETURN_IF_ERROR(m.bind_one(micro, i, static_cast<const uint8_t *>(data) + off, mb));
      ZRT_RETURN_IF_ERROR(run("micro_step"));
    }
    ZRT_RETURN_IF_ERROR(run("optimizer_step"));
    last = opt;
  }
  auto scalar_out = [&](const char *name, double *v) -> Status {
    *v = std::nan("");
    for (int pi : {last, micro}) {
      if (pi < 0) continue;
      const int k = m.find(m.program_info[pi].outputs, name);
      if (k < 0) continue;
      const TensorRef &t = m.tensors[m.programs[pi].output_tensor[k]];
      if (t.numel() != 1) return error(Code::invalid_argument, std::string("output '") + name + "' is not a scalar");
      uint8_t buf[8] = {};
      ZRT_RETURN_IF_ERROR(m.backend->read(t.space, buf, t.data, dtype_size(t.dtype)));
      *v = t.dtype == DType::i64 || t.dtype == DType::i32 ? static_cast<double>(zk::load_i64(buf, static_cast<zk::DType>(t.dtype), 0))
                                                          : static_cast<double>(zk::load_f32(buf, static_cast<zk::DType>(t.dtype), 0));
      return {};
    }
    return {};
  };
  ZRT_RETURN_IF_ERROR(scalar_out("loss", &out->loss));
  ZRT_RETURN_IF_ERROR(scalar_out("grad_norm", &out->grad_norm));
  return {};
}

namespace {
ckpt::SessionAccess checkpoint_access(Session *s, Session::Impl &m) {
  ckpt::SessionAccess a;
  a.plan = &m.plan();
  a.ri = m.ri;
  a.comm = m.comm.get();
  a.plan_hash = m.pf->file_hash();
  a.base_dir = m.pf->base_dir();
  a.session = s;
  a.agree = [&m](const Status &st) { return m.agree_status(st, 0, 0, nullptr, nullptr); };
  return a;
}
}  // namespace

Status Session::save_checkpoint(const std::string &dir, const TrainingState &state) {
  ZRT_RETURN_IF_ERROR(impl_->backend->synchronize());
  return ckpt::save(checkpoint_access(this, *impl_), dir, state);
}

Status Session::load_checkpoint(const std::string &path, TrainingState *state, CheckpointInfo *info) {
  ZRT_RETURN_IF_ERROR(impl_->backend->synchronize());
  return ckpt::load(checkpoint_access(this, *impl_), path, state, info);
}

Status Session::generation_shape(int64_t *batch, int64_t *max_seq) const {
  const Impl &m = *impl_;
  const int pre = m.find_program("prefill"), dec = m.find_program("decode");
  if (pre < 0 || dec < 0)
    return error(Code::invalid_argument, "the plan has no generation programs (prefill and decode): compile it with "
                                         "zplan --generate --max-seq L; it has " + m.program_names());
  const int i = m.find(m.program_info[pre].inputs, "input_ids");
  if (i < 0 || m.program_info[pre].inputs[i].global_shape.size() != 2)
    return error(Code::invalid_argument, "prefill has no input 'input_ids' [B, L]");
  *batch = m.program_info[pre].inputs[i].global_shape[0];
  *max_seq = m.program_info[pre].inputs[i].global_shape[1];
  return {};
}

namespace {
// Checks token ids against the embedding table before any program runs.
Status check_ids(const Session &s, const char *input, const int64_t *ids, size_t n, const char *what) {
  int64_t lo = 0, hi = 0;
  if (!s.input_id_range(input, &lo, &hi)) return {};
  for (size_t e = 0; e < n; ++e)
    if (ids[e] < lo || ids[e] >= hi)
      return error(Code::invalid_argument, std::string(what) + " element " + std::to_string(e) + " is " +
                                               std::to_string(ids[e]) + ", outside the vocabulary [" +
                                               std::to_string(lo) + ", " + std::to_string(hi) + ")");
  return {};
}
}  // namespace

// Sets the scalar run input "step" when the plan has one (a plan whose programs sample).
static Status set_step_if_any(Session &s, int64_t step) {
  for (const ProgramInfo &p : s.programs())
    for (const ScalarInfo &x : p.scalars)
      if (x.name == "step") return s.set_scalar("step", static_cast<double>(step));
  return {};
}

// Every rank needs the next tokens (they are the next decode step's input): rank 0 assembles the global
// output, then broadcasts it.
static Status read_next_tokens(Session &s, Communicator &comm, int64_t planned, int64_t batch, int64_t *next) {
  std::vector<int64_t> all(static_cast<size_t>(planned));
  ZRT_RETURN_IF_ERROR(s.read_output("next_token", comm.rank() == 0 ? all.data() : nullptr, all.size() * 8, 0));
  ZRT_RETURN_IF_ERROR(comm.broadcast_host(all.data(), all.size() * 8, 0));
  std::copy(all.begin(), all.begin() + batch, next);
  return {};
}

Status Session::prefill(const int64_t *prompt, int64_t batch, int64_t prompt_len, const int64_t *lengths,
                        int64_t *next) {
  int64_t B = 0, L = 0;
  ZRT_RETURN_IF_ERROR(generation_shape(&B, &L));
  if (batch < 1 || batch > B)
    return error(Code::invalid_argument, "a batch of " + std::to_string(batch) + " prompts; the plan was made for 1 to " +
                                             std::to_string(B) + " (zplan --batch)");
  if (prompt_len < 1 || prompt_len > L)
    return error(Code::invalid_argument, "a prompt of " + std::to_string(prompt_len) +
                                             " tokens does not fit the planned cache of " + std::to_string(L) +
                                             " positions (zplan --max-seq)");
  for (int64_t b = 0; b < batch; ++b)
    if (lengths[b] < 1 || lengths[b] > prompt_len)
      return error(Code::invalid_argument, "prompt " + std::to_string(b) + " has length " + std::to_string(lengths[b]) +
                                               ", outside [1, " + std::to_string(prompt_len) + "]");
  // The compiler planned @prefill over L positions and shorter @prefill_<n> (docs/generation.md): the
  // shortest that holds the prompt runs, so that a short prompt is not computed at L positions.
  Impl &m = *impl_;
  int pi = m.find_program("prefill");
  int64_t width = L;
  for (size_t p = 0; p < m.program_info.size(); ++p) {
    const std::string &name = m.program_info[p].name;
    if (name.rfind("prefill_", 0) != 0) continue;
    const int i = m.find(m.program_info[p].inputs, "input_ids");
    if (i < 0 || m.program_info[p].inputs[i].global_shape.size() != 2) continue;
    const int64_t n = m.program_info[p].inputs[i].global_shape[1];
    if (n >= prompt_len && n < width) {
      width = n;
      pi = static_cast<int>(p);
    }
  }
  std::vector<int64_t> ids(static_cast<size_t>(B * width), 0), lens(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t src = b < batch ? b : 0;
    lens[b] = lengths[src];
    for (int64_t t = 0; t < lens[b]; ++t) ids[b * width + t] = prompt[src * prompt_len + t];
  }
  ZRT_RETURN_IF_ERROR(check_ids(*this, "input_ids", ids.data(), ids.size(), "prompt"));
  for (const char *name : {"input_ids", "prompt_lengths"}) {
    const int i = m.find(m.program_info[pi].inputs, name);
    if (i < 0)
      return error(Code::invalid_argument, "program '" + m.program_info[pi].name + "' has no input '" + name + "'");
    const std::vector<int64_t> &v = name[0] == 'i' ? ids : lens;
    ZRT_RETURN_IF_ERROR(m.bind_one(pi, i, v.data(), v.size() * 8));
  }
  // The sampler's counter (docs/sampling.md): token k of a generation draws at step k.
  impl_->generated = 0;
  ZRT_RETURN_IF_ERROR(set_step_if_any(*this, 0));
  ZRT_RETURN_IF_ERROR(run(m.program_info[pi].name));
  return read_next_tokens(*this, *impl_->comm, B, batch, next);
}

Status Session::decode_step(const int64_t *tokens, const int64_t *positions, int64_t batch, int64_t *next) {
  int64_t B = 0, L = 0;
  ZRT_RETURN_IF_ERROR(generation_shape(&B, &L));
  if (batch < 1 || batch > B)
    return error(Code::invalid_argument, "a batch of " + std::to_string(batch) + " sequences; the plan was made for 1 to " +
                                             std::to_string(B) + " (zplan --batch)");
  for (int64_t b = 0; b < batch; ++b)
    if (positions[b] < 0 || positions[b] >= L)
      return error(Code::invalid_argument, "sequence " + std::to_string(b) + " is at position " +
                                               std::to_string(positions[b]) + ", outside the planned cache [0, " +
                                               std::to_string(L) + ") (zplan --max-seq)");
  std::vector<int64_t> tok(static_cast<size_t>(B)), pos(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    tok[b] = tokens[b < batch ? b : 0];
    pos[b] = positions[b < batch ? b : 0];
  }
  ZRT_RETURN_IF_ERROR(check_ids(*this, "token", tok.data(), tok.size(), "token"));
  ZRT_RETURN_IF_ERROR(bind_input("token", tok.data(), tok.size() * 8));
  ZRT_RETURN_IF_ERROR(bind_input("positions", pos.data(), pos.size() * 8));
  ZRT_RETURN_IF_ERROR(set_step_if_any(*this, ++impl_->generated));
  ZRT_RETURN_IF_ERROR(run("decode"));
  return read_next_tokens(*this, *impl_->comm, B, batch, next);
}

MemoryReport Session::memory_report() const {
  MemoryReport r = impl_->report;
  r.measured_process_peak_bytes = impl_->backend->process_peak_bytes();
  if (impl_->nvme) {
    r.nvme_bytes_read = impl_->nvme->bytes_read();
    r.nvme_bytes_written = impl_->nvme->bytes_written();
  }
  return r;
}

}  // namespace zrt
