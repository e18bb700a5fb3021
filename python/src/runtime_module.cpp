// zplan._runtime - the runtime's C++ Session API (runtime/include/zrt/zrt.h) as a Python extension.
//
// The binding is thin on purpose: it moves bytes between NumPy (or any DLPack producer) and the session and
// turns every failed Status into zplan.ZplanError with the runtime's own message. What an input must look
// like (dtype, shape, ids inside the vocabulary) is checked one level up, in zplan/engine.py, where the
// message can name the Python argument. This module links libzrt only: no MLIR, so that a runtime-only
// install works on machines without the compiler's libraries (docs/python.md).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "zrt/zrt.h"

namespace nb = nanobind;

namespace {

// zplan._errors.ZplanError, looked up once when the module loads; kept for the life of the process.
PyObject *g_error = nullptr;

const char *code_name(zrt::Code c) {
  switch (c) {
    case zrt::Code::ok:
      return "ok";
    case zrt::Code::invalid_argument:
      return "invalid_argument";
    case zrt::Code::not_found:
      return "not_found";
    case zrt::Code::io_error:
      return "io_error";
    case zrt::Code::plan_invalid:
      return "plan_invalid";
    case zrt::Code::mismatch:
      return "mismatch";
    case zrt::Code::comm_error:
      return "comm_error";
    case zrt::Code::backend_error:
      return "backend_error";
    case zrt::Code::internal:
      return "internal";
  }
  return "internal";
}

/// Raises zplan.ZplanError(message, code) for a failed Status.
void check(const zrt::Status &st) {
  if (st.ok()) return;
  nb::object cls = nb::borrow(g_error);
  nb::object exc = cls(st.message(), code_name(st.code()));
  PyErr_SetObject(g_error, exc.ptr());
  throw nb::python_error();
}

nb::dict io_dict(const zrt::IOInfo &io) {
  nb::dict d;
  d["name"] = io.name;
  d["dtype"] = std::string(zrt::dtype_name(io.dtype));
  d["shape"] = nb::tuple(nb::cast(io.global_shape));
  d["batch_split"] = io.batch_split;
  return d;
}

nb::list io_list(const std::vector<zrt::IOInfo> &ios) {
  nb::list l;
  for (const zrt::IOInfo &io : ios) l.append(io_dict(io));
  return l;
}

/// The NumPy dtype a runtime dtype travels as; bf16 has none and travels as its raw uint16 bits (the Python
/// layer widens it to float32).
nb::dlpack::dtype numpy_dtype(zrt::DType t) {
  switch (t) {
    case zrt::DType::f32:
      return nb::dtype<float>();
    case zrt::DType::f16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case zrt::DType::bf16:
      return nb::dtype<uint16_t>();
    case zrt::DType::i64:
      return nb::dtype<int64_t>();
    case zrt::DType::i32:
      return nb::dtype<int32_t>();
    case zrt::DType::bool8:
      return nb::dtype<bool>();
  }
  return nb::dtype<uint8_t>();
}

/// A fresh NumPy array of `shape` that owns `bytes` (moved in).
nb::object numpy_array(std::vector<uint8_t> bytes, const std::vector<int64_t> &shape, zrt::DType dtype) {
  auto *owned = new std::vector<uint8_t>(std::move(bytes));
  nb::capsule owner(owned, [](void *p) noexcept { delete static_cast<std::vector<uint8_t> *>(p); });
  std::vector<size_t> dims(shape.begin(), shape.end());
  nb::ndarray<nb::numpy> a(owned->data(), dims.size(), dims.data(), owner, nullptr, numpy_dtype(dtype));
  return nb::cast(a);
}

using Bytes = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

/// The generation calls read int64 arrays of a known length through raw pointers: check both first.
void check_i64(const Bytes &a, int64_t count, const char *what) {
  if (a.dtype() != nb::dtype<int64_t>() || static_cast<int64_t>(a.size()) != count)
    throw nb::value_error((std::string(what) + ": expected " + std::to_string(count) + " int64 values").c_str());
}

class PySession {
 public:
  PySession(const std::string &path, bool init_random, uint64_t seed, const std::string &backend) {
    zrt::Options o;
    o.init = init_random ? zrt::InitMode::random : zrt::InitMode::file;
    o.seed = seed;
    if (backend == "cuda")
      o.backend = zrt::BackendKind::cuda;
    else if (backend != "cpu")
      throw nb::value_error(("backend must be 'cpu' or 'cuda', got '" + backend + "'").c_str());
    zrt::Status st;
    {
      // open() is collective: other ranks may take a while to arrive.
      nb::gil_scoped_release unlocked;
      st = zrt::Session::open(path, o, &s_);
    }
    check(st);
  }

  zrt::Session &s() {
    if (!s_) throw nb::value_error("this engine is closed");
    return *s_;
  }

  void close() { s_.reset(); }
  bool closed() const { return !s_; }

  nb::dict rank_info() {
    const zrt::RankInfo &r = s().rank_info();
    nb::dict d;
    d["rank"] = r.rank;
    d["world"] = r.world;
    d["tp"] = r.tp;
    d["dp"] = r.dp;
    return d;
  }

  nb::list programs() {
    nb::list l;
    for (const zrt::ProgramInfo &p : s().programs()) {
      nb::dict d;
      d["name"] = p.name;
      d["inputs"] = io_list(p.inputs);
      d["outputs"] = io_list(p.outputs);
      nb::list scalars;
      for (const zrt::ScalarInfo &x : p.scalars) {
        nb::dict sd;
        sd["name"] = x.name;
        sd["dtype"] = std::string(zrt::dtype_name(x.dtype));
        sd["default"] = x.default_value;
        scalars.append(sd);
      }
      d["scalars"] = scalars;
      l.append(d);
    }
    return l;
  }

  nb::list state() {
    nb::list l;
    for (const zrt::StateInfo &x : s().state()) {
      nb::dict d;
      d["name"] = x.name;
      d["kind"] = x.kind;
      d["param"] = x.param;
      d["dtype"] = std::string(zrt::dtype_name(x.dtype));
      d["full_shape"] = nb::tuple(nb::cast(x.full_shape));
      d["local_shape"] = nb::tuple(nb::cast(x.local_shape));
      d["flat_begin"] = x.flat_begin;
      d["flat_end"] = x.flat_end;
      l.append(d);
    }
    return l;
  }

  /// This rank's part of a persistent tensor, flat, in the tensor's dtype.
  nb::object read_state(const std::string &name) {
    for (const zrt::StateInfo &x : s().state()) {
      if (x.name != name) continue;
      std::vector<uint8_t> buf(x.local_bytes());
      check(s().read_state(name, buf.data(), buf.size()));
      return numpy_array(std::move(buf), {static_cast<int64_t>(x.flat_end - x.flat_begin)}, x.dtype);
    }
    throw nb::key_error(("the plan has no state tensor named '" + name + "'").c_str());
  }

  void bind_input(const std::string &name, Bytes a) { check(s().bind_input(name, a.data(), a.nbytes())); }

  void set_scalar(const std::string &name, double v) { check(s().set_scalar(name, v)); }

  void run(const std::optional<std::string> &program) {
    zrt::Status st;
    {
      nb::gil_scoped_release unlocked;
      st = program ? s().run(*program) : s().run();
    }
    check(st);
  }

  /// The global output gathered on `root`: an array there, None on the other ranks. Collective.
  nb::object read_output(const std::string &name, int root) {
    zrt::Session &ss = s();
    // The output of the last program run that has it: search every program, the default first.
    const zrt::IOInfo *info = nullptr;
    for (const zrt::IOInfo &io : ss.outputs())
      if (io.name == name) info = &io;
    for (const zrt::ProgramInfo &p : ss.programs())
      for (const zrt::IOInfo &io : p.outputs)
        if (!info && io.name == name) info = &io;
    if (!info) throw nb::key_error(("the plan has no output named '" + name + "'").c_str());
    const bool mine = ss.rank_info().rank == root;
    std::vector<uint8_t> buf(mine ? info->global_bytes() : 0);
    zrt::Status st;
    {
      nb::gil_scoped_release unlocked;
      st = ss.read_output(name, mine ? buf.data() : nullptr, buf.size(), root);
    }
    check(st);
    if (!mine) return nb::none();
    return numpy_array(std::move(buf), info->global_shape, info->dtype);
  }

  std::tuple<double, double> train_step(const std::string &input, Bytes a, int64_t step) {
    zrt::StepResult r;
    zrt::Status st;
    {
      nb::gil_scoped_release unlocked;
      st = s().train_step(input, a.data(), a.nbytes(), step, &r);
    }
    check(st);
    return {r.loss, r.grad_norm};
  }

  void save_checkpoint(const std::string &dir, int64_t step, int64_t samples, double lr) {
    zrt::TrainingState ts;
    ts.step = step;
    ts.samples = samples;
    ts.lr = lr;
    zrt::Status st;
    {
      nb::gil_scoped_release unlocked;
      st = s().save_checkpoint(dir, ts);
    }
    check(st);
  }

  nb::dict load_checkpoint(const std::string &path) {
    zrt::TrainingState ts;
    zrt::CheckpointInfo info;
    zrt::Status st;
    {
      nb::gil_scoped_release unlocked;
      st = s().load_checkpoint(path, &ts, &info);
    }
    check(st);
    nb::dict d;
    d["step"] = ts.step;
    d["samples"] = ts.samples;
    d["lr"] = ts.lr;
    d["dir"] = info.dir;
    d["producer"] = info.producer;
    d["world"] = info.world;
    d["tp"] = info.tp;
    d["dp"] = info.dp;
    d["zero_stage"] = info.zero_stage;
    d["same_plan"] = info.same_plan;
    d["tensors_loaded"] = info.tensors_loaded;
    d["bytes_read"] = info.bytes_read;
    return d;
  }

  /// Generation (docs/generation.md): the planned batch and cache length.
  std::tuple<int64_t, int64_t> generation_shape() {
    int64_t batch = 0, max_seq = 0;
    check(s().generation_shape(&batch, &max_seq));
    return {batch, max_seq};
  }

  /// @prefill on `batch` prompts (int64 [batch, prompt_len], lengths int64 [batch]); the next token of each
  /// sequence, int64 [batch], on every rank. Collective.
  nb::object prefill(Bytes prompt, int64_t batch, int64_t prompt_len, Bytes lengths) {
    check_i64(prompt, batch * prompt_len, "prompt");
    check_i64(lengths, batch, "lengths");
    std::vector<uint8_t> next(static_cast<size_t>(batch) * 8);
    zrt::Status st;
    {
      nb::gil_scoped_release unlocked;
      st = s().prefill(static_cast<const int64_t *>(prompt.data()), batch, prompt_len,
                       static_cast<const int64_t *>(lengths.data()), reinterpret_cast<int64_t *>(next.data()));
    }
    check(st);
    return numpy_array(std::move(next), {batch}, zrt::DType::i64);
  }

  /// @decode once: tokens and positions int64 [batch]; the next tokens, int64 [batch]. Collective.
  nb::object decode_step(Bytes tokens, Bytes positions, int64_t batch) {
    check_i64(tokens, batch, "tokens");
    check_i64(positions, batch, "positions");
    std::vector<uint8_t> next(static_cast<size_t>(batch) * 8);
    zrt::Status st;
    {
      nb::gil_scoped_release unlocked;
      st = s().decode_step(static_cast<const int64_t *>(tokens.data()), static_cast<const int64_t *>(positions.data()),
                           batch, reinterpret_cast<int64_t *>(next.data()));
    }
    check(st);
    return numpy_array(std::move(next), {batch}, zrt::DType::i64);
  }

  std::optional<std::tuple<int64_t, int64_t>> input_id_range(const std::string &name) {
    int64_t lo = 0, hi = 0;
    if (!s().input_id_range(name, &lo, &hi)) return std::nullopt;
    return std::make_tuple(lo, hi);
  }

  nb::dict memory_report() {
    const zrt::MemoryReport m = s().memory_report();
    nb::dict d;
    d["planned_arena_bytes"] = nb::make_tuple(m.planned_arena_bytes[0], m.planned_arena_bytes[1]);
    d["measured_arena_bytes"] = nb::make_tuple(m.measured_arena_bytes[0], m.measured_arena_bytes[1]);
    d["runtime_scratch_bytes"] = m.runtime_scratch_bytes;
    d["planned_peak_bytes"] = m.planned_peak_bytes;
    d["planned_host_bytes"] = m.planned_host_bytes;
    d["measured_process_peak_bytes"] = m.measured_process_peak_bytes;
    return d;
  }

 private:
  std::unique_ptr<zrt::Session> s_;
};

}  // namespace

NB_MODULE(_runtime, m) {
  m.doc() = "The zplan runtime's Session API (zrt::Session); use zplan.Engine.";
  nb::object error_class = nb::module_::import_("zplan._errors").attr("ZplanError");
  g_error = error_class.release().ptr();

  nb::class_<PySession>(m, "Session")
      .def(nb::init<const std::string &, bool, uint64_t, const std::string &>(), nb::arg("path"),
           nb::arg("init_random") = false, nb::arg("seed") = 0, nb::arg("backend") = "cpu")
      .def("close", &PySession::close)
      .def_prop_ro("closed", &PySession::closed)
      .def("rank_info", &PySession::rank_info)
      .def("programs", &PySession::programs)
      .def("state", &PySession::state)
      .def("read_state", &PySession::read_state)
      .def("producer", [](PySession &p) { return p.s().producer(); })
      .def("bind_input", &PySession::bind_input)
      .def("set_scalar", &PySession::set_scalar)
      .def("run", &PySession::run, nb::arg("program") = nb::none())
      .def("read_output", &PySession::read_output, nb::arg("name"), nb::arg("root") = 0)
      .def("train_step", &PySession::train_step)
      .def("save_checkpoint", &PySession::save_checkpoint)
      .def("load_checkpoint", &PySession::load_checkpoint)
      .def("generation_shape", &PySession::generation_shape)
      .def("prefill", &PySession::prefill)
      .def("decode_step", &PySession::decode_step)
      .def("input_id_range", &PySession::input_id_range)
      .def("memory_report", &PySession::memory_report);

  m.def("shutdown", &zrt::shutdown, "Ends MPI if the runtime started it; call once, after every session is closed.");
  m.def(
      "abort_job", [](int code) { zrt::abort_job(code); },
      "Stops every rank of the job at once (MPI_Abort), so that peers waiting in a collective do not hang.");
}
