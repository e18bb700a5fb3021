// A small builder of plan files for the runtime's tests: tensors placed one after another in their arena,
// weight bindings computed from a tp split dimension and a ZeRO flag, instructions, and the header and
// collective hash as the compiler would write them. Tests use it to make plans that exercise the runtime
// without the compiler.
#ifndef ZRT_TESTS_PLAN_BUILDER_H
#define ZRT_TESTS_PLAN_BUILDER_H

#include <cstring>
#include <string>
#include <vector>

#include "zrt/ops.h"
#include "zrt/plan_file.h"
#include "zrt/plan_generated.h"

namespace zrt_test {

namespace fb = zrt::fb;
using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
inline size_t esize(fb::DType d) {
  switch (d) {
    case fb::DType::f32: case fb::DType::i32: return 4;
    case fb::DType::bf16: case fb::DType::f16: return 2;
    case fb::DType::i64: return 8;
    default: return 1;
  }
}

struct PlanBuilder {
  struct T {
    std::string name;
    fb::DType dtype;
    Shape shape;
    fb::MemSpace space;
    uint64_t offset, bytes;
    fb::TensorKind kind;
    int constant = -1;
    int alias_of = -1;
  };
  struct W {
    std::string name, file;
    uint64_t offset = 0, length = 0;
    fb::DType dtype;
    Shape shape;
    std::vector<uint8_t> inline_data;
  };
  struct P { Shape src, dst, size; };
  struct RS { std::vector<P> pieces; uint64_t fb = 0, fe = 0; };
  struct B { int tensor, source; Shape local; std::vector<RS> ranks; };
  struct IO { std::string name; int tensor; Shape global; bool split; };
  struct I {
    zrt::Op op;
    std::vector<int32_t> in, out;
    std::vector<int64_t> ints;
    std::vector<double> floats;
    fb::Axis axis;
    std::string name;
    bool early = false;  // plan 2.18: Instr.early
  };
  struct C { fb::DType dtype; Shape shape; std::vector<uint8_t> data; };
  struct SC { std::string name; int tensor; double def; };
  /// A finished program; the one being built lives in inputs/outputs/instrs/scalars.
  struct Prog { std::string name; std::vector<IO> inputs, outputs; std::vector<I> instrs; std::vector<SC> scalars; };
  /// A state-table entry; ranks as for weight bindings.
  struct SE {
    std::string name;
    int tensor;
    fb::StateKind kind;
    std::string param;
    Shape full, local;
    std::vector<RS> ranks;
  };

  int tp = 1, dp = 1;
  fb::DType dtype = fb::DType::f32;
  fb::Backend backend = fb::Backend::cpu;
  uint16_t version_major = zrt::kPlanVersionMajor, version_minor = zrt::kPlanVersionMinor;
  int world_override = -1;           // fingerprint world other than tp * dp
  bool hash_override = false;        // record a wrong collective hash
  bool legacy_layout = false;        // write the 1.x layout (one stream in Plan.instrs, no programs)
  int64_t arena_shrink = 0;          // make the device arena smaller than its tensors need
  std::vector<T> tensors;
  std::vector<W> weights;
  std::vector<B> bindings;
  std::vector<IO> inputs, outputs;
  std::vector<I> instrs;
  std::vector<C> constants;
  std::vector<SC> scalars;
  std::string program_name = "main";
  std::vector<Prog> finished;
  std::vector<SE> state;
  uint64_t arena[2] = {0, 0};

  PlanBuilder(int tp_, int dp_, fb::DType dt = fb::DType::f32) : tp(tp_), dp(dp_), dtype(dt) {}
  int world() const { return tp * dp; }

  /// A tensor of `kind` at the end of its arena (64-byte aligned), `extra` bytes beyond its elements.
  int tensor(const std::string &name, fb::DType dt, const Shape &shape, fb::TensorKind kind = fb::TensorKind::activation,
             fb::MemSpace space = fb::MemSpace::device, uint64_t extra = 0) {
    T t{name, dt, shape, space, 0, 0, kind};
    t.bytes = static_cast<uint64_t>(numel(shape)) * esize(dt) + extra;
    uint64_t &a = arena[static_cast<int>(space)];
    t.offset = (a + 63) / 64 * 64;
    a = t.offset + t.bytes;
    tensors.push_back(t);
    return static_cast<int>(tensors.size()) - 1;
  }
  int act(const std::string &name, const Shape &shape) { return tensor(name, dtype, shape); }

  int constant(const std::string &name, fb::DType dt, const Shape &shape, const void *data) {
    C c{dt, shape, {}};
    c.data.resize(static_cast<size_t>(numel(shape)) * esize(dt));
    std::memcpy(c.data.data(), data, c.data.size());
    constants.push_back(c);
    int t = tensor(name, dt, shape, fb::TensorKind::constant);
    tensors[t].constant = static_cast<int>(constants.size()) - 1;
    return t;
  }

  /// A parameter of full shape `full` stored at `file`/`offset` (or inline when file is empty), split
  /// evenly over tp along `split_dim` (-1: whole on every rank) and, with `zero`, flat-partitioned over dp.
  /// Returns the tensor that holds this rank's part (a weight or a weight_shard).
  int param(const std::string &name, const Shape &full, int split_dim, bool zero, const std::string &file,
            uint64_t offset, fb::DType src_dtype = fb::DType::f32, const std::vector<uint8_t> &inline_data = {}) {
    W w{name, file, offset, static_cast<uint64_t>(numel(full)) * esize(src_dtype), src_dtype, full, inline_data};
    if (file.empty()) w.length = 0;
    weights.push_back(w);
    Shape local = full;
    if (split_dim >= 0) local[split_dim] /= tp;
    const int64_t ln = numel(local);
    const int64_t shard = (ln + dp - 1) / dp;
    int t = zero ? tensor(name + ".shard", dtype, {shard}, fb::TensorKind::weight_shard)
                 : tensor(name, dtype, local, fb::TensorKind::weight);
    B b{t, static_cast<int>(weights.size()) - 1, local, {}};
    for (int r = 0; r < world(); ++r) {
      RS rs;
      P p{Shape(full.size(), 0), Shape(full.size(), 0), local};
      if (split_dim >= 0) p.src[split_dim] = (r % tp) * local[split_dim];
      rs.pieces.push_back(p);
      if (zero) {
        rs.fb = static_cast<uint64_t>((r / tp) * shard);
        rs.fe = rs.fb + static_cast<uint64_t>(shard);
      } else {
        rs.fb = 0;
        rs.fe = static_cast<uint64_t>(ln);
      }
      b.ranks.push_back(rs);
    }
    bindings.push_back(b);
    // The parameter's state entry: the binding's slices, named after it.
    state.push_back({name, t, zero ? fb::StateKind::param_shard : fb::StateKind::param, name, full, local, b.ranks});
    return t;
  }

  int input(const std::string &name, fb::DType dt, const Shape &global, bool split) {
    Shape local = global;
    if (split) local[0] /= dp;
    int t = tensor(name, dt, local, fb::TensorKind::input);
    inputs.push_back({name, t, global, split});
    return t;
  }
  int output(const std::string &name, const Shape &global, bool split) {
    Shape local = global;
    if (split) local[0] /= dp;
    int t = tensor(name, dtype, local, fb::TensorKind::output);
    outputs.push_back({name, t, global, split});
    return t;
  }

  /// Ends the program being built and starts another named `name`.
  void new_program(const std::string &name) {
    finished.push_back({program_name, inputs, outputs, instrs, scalars});
    inputs.clear();
    outputs.clear();
    instrs.clear();
    scalars.clear();
    program_name = name;
  }
  /// A scalar run input (rank-0 input tensor) of the program being built.
  int scalar(const std::string &name, fb::DType dt, double def) {
    int t = tensor(name, dt, {}, fb::TensorKind::input);
    scalars.push_back({name, t, def});
    return t;
  }
  /// A persistent state tensor held whole on every rank (full shape == local shape), with its state entry.
  int state_tensor(const std::string &name, fb::StateKind kind, const std::string &param, fb::DType dt,
                   const Shape &shape) {
    fb::TensorKind k = kind == fb::StateKind::master ? fb::TensorKind::master
                       : kind == fb::StateKind::moment1 || kind == fb::StateKind::moment2 ? fb::TensorKind::moment
                       : kind == fb::StateKind::grad ? fb::TensorKind::grad
                       : kind == fb::StateKind::param ? fb::TensorKind::weight
                                                      : fb::TensorKind::state;
    int t = tensor(name, dt, shape, k);
    SE e{name, t, kind, param, shape, shape, {}};
    for (int r = 0; r < world(); ++r) {
      RS rs;
      rs.pieces.push_back({Shape(shape.size(), 0), Shape(shape.size(), 0), shape});
      rs.fe = static_cast<uint64_t>(numel(shape));
      e.ranks.push_back(rs);
    }
    state.push_back(e);
    return t;
  }

  void op(zrt::Op o, std::vector<int32_t> in, std::vector<int32_t> out, std::vector<int64_t> ints = {},
          std::vector<double> floats = {}, fb::Axis axis = fb::Axis::none, const std::string &name = "") {
    instrs.push_back({o, std::move(in), std::move(out), std::move(ints), std::move(floats), axis,
                      name.empty() ? std::string(zrt::op_name(o)) + std::to_string(instrs.size()) : name});
  }

  /// The FlatBuffer payload.
  std::vector<uint8_t> payload() const {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<fb::Tensor>> ts;
    for (const T &t : tensors)
      ts.push_back(fb::CreateTensorDirect(b, t.name.c_str(), t.dtype, &t.shape, t.space, t.offset, t.bytes, t.kind,
                                          t.constant, t.alias_of));
    std::vector<flatbuffers::Offset<fb::Constant>> cs;
    for (const C &c : constants) cs.push_back(fb::CreateConstantDirect(b, c.dtype, &c.shape, &c.data));
    std::vector<flatbuffers::Offset<fb::WeightSource>> ws;
    for (const W &w : weights)
      ws.push_back(fb::CreateWeightSourceDirect(b, w.name.c_str(), w.file.c_str(), w.offset, w.length, w.dtype, &w.shape,
                                                w.inline_data.empty() ? nullptr : &w.inline_data));
    std::vector<flatbuffers::Offset<fb::WeightBinding>> bs;
    for (const B &bd : bindings) {
      std::vector<flatbuffers::Offset<fb::RankSlice>> rs;
      for (const RS &r : bd.ranks) {
        std::vector<flatbuffers::Offset<fb::Piece>> ps;
        for (const P &p : r.pieces) ps.push_back(fb::CreatePieceDirect(b, &p.src, &p.dst, &p.size));
        rs.push_back(fb::CreateRankSliceDirect(b, &ps, r.fb, r.fe));
      }
      bs.push_back(fb::CreateWeightBindingDirect(b, bd.tensor, bd.source, &bd.local, &rs));
    }
    auto io = [&](const std::vector<IO> &v) {
      std::vector<flatbuffers::Offset<fb::IOBinding>> r;
      for (const IO &x : v)
        r.push_back(fb::CreateIOBindingDirect(b, x.name.c_str(), x.tensor, tensors[x.tensor].dtype, &x.global, x.split));
      return r;
    };
    auto instr_list = [&](const std::vector<I> &v, uint64_t *hash) {
      std::vector<flatbuffers::Offset<fb::Instr>> is;
      uint64_t h = zrt::kFnvOffsetBasis;
      for (const I &i : v) {
        is.push_back(fb::CreateInstrDirect(b, static_cast<uint16_t>(i.op), &i.in, &i.out, &i.ints, &i.floats, i.axis,
                                           fb::Stream::compute, nullptr, -1, i.name.c_str(), i.early));
        const zrt::OpInfo *info = zrt::op_info(static_cast<uint16_t>(i.op));
        const bool coll = info && info->communicates();
        if (coll) {
          uint8_t dt = 0;
          uint64_t n = 0;
          if (i.op != zrt::Op::barrier && !i.in.empty()) {
            dt = static_cast<uint8_t>(tensors[i.in[0]].dtype);
            n = static_cast<uint64_t>(numel(tensors[i.in[0]].shape));
          }
          h = zrt::collective_hash_step(h, static_cast<uint16_t>(i.op), static_cast<uint8_t>(i.axis), dt, n);
        }
      }
        if (hash_override) h ^= 1;
      *hash = h;
      return is;
    };
    std::vector<Prog> progs = finished;
    progs.push_back({program_name, inputs, outputs, instrs, scalars});
    std::vector<flatbuffers::Offset<fb::Program>> pv;
    for (const Prog &pr : progs) {
      auto pin = io(pr.inputs), pout = io(pr.outputs);
      uint64_t ph = 0;
      auto pis = instr_list(pr.instrs, &ph);
      std::vector<flatbuffers::Offset<fb::ScalarInput>> sc;
      for (const SC &x : pr.scalars)
        sc.push_back(fb::CreateScalarInputDirect(b, x.name.c_str(), x.tensor, tensors[x.tensor].dtype, x.def));
      pv.push_back(fb::CreateProgramDirect(b, pr.name.c_str(), &pin, &pout, &sc, &pis, 0, ph));
    }
    std::vector<flatbuffers::Offset<fb::StateEntry>> sv;
    for (const SE &e : state) {
      std::vector<flatbuffers::Offset<fb::RankSlice>> rs;
      for (const RS &r : e.ranks) {
        std::vector<flatbuffers::Offset<fb::Piece>> ps;
        for (const P &p : r.pieces) ps.push_back(fb::CreatePieceDirect(b, &p.src, &p.dst, &p.size));
        rs.push_back(fb::CreateRankSliceDirect(b, &ps, r.fb, r.fe));
      }
      sv.push_back(fb::CreateStateEntryDirect(b, e.name.c_str(), e.tensor, e.kind, e.param.c_str(), &e.full, &e.local, &rs));
    }
    // The 1.x layout: the one program's stream at the top level.
    std::vector<flatbuffers::Offset<fb::IOBinding>> ins, outs;
    std::vector<flatbuffers::Offset<fb::Instr>> is;
    uint64_t h = 0;
    if (legacy_layout) {
      ins = io(inputs);
      outs = io(outputs);
      is = instr_list(instrs, &h);
    }
    std::vector<flatbuffers::Offset<fb::RankMemory>> mem;
    for (int r = 0; r < world(); ++r) {
      std::vector<uint64_t> a = {arena[0] - static_cast<uint64_t>(arena_shrink), arena[1]};
      mem.push_back(fb::CreateRankMemoryDirect(b, r, &a, 0, 0, 0, 0, 0, a[0], a[1]));
    }
    const int w = world_override > 0 ? world_override : world();
    auto fp = fb::CreateFingerprint(b, w, tp, dp, backend, dtype);
    auto plan = fb::CreatePlanDirect(b, version_major, version_minor, fp, "zrt tests", &ts, &cs, &ws, &bs, &ins, &outs,
                                     &is, 0, &mem, h, 0, legacy_layout ? nullptr : &pv,
                                     legacy_layout ? nullptr : &sv);
    fb::FinishPlanBuffer(b, plan);
    return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  }

  /// The whole file image: 24-byte header + payload.
  std::vector<uint8_t> file() const {
    std::vector<uint8_t> p = payload();
    zrt::PlanHeader h = zrt::make_plan_header(p.data(), p.size());
    std::vector<uint8_t> f(sizeof(h) + p.size());
    std::memcpy(f.data(), &h, sizeof(h));
    std::memcpy(f.data() + sizeof(h), p.data(), p.size());
    return f;
  }

  std::string write(const std::string &path) const {
    std::vector<uint8_t> p = payload();
    return zrt::write_plan_file(path, p.data(), p.size());
  }
};

}  // namespace zrt_test

#endif  // ZRT_TESTS_PLAN_BUILDER_H
