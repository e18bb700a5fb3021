// zplan._compiler - the compile path of `zplan MODEL.onnx ...` (compiler/driver/Compile.h) as a Python
// extension.
//
// Settings arrive as (flag, value) pairs and are set through the driver's own option table
// (compiler/driver/Options.h: setInteger, setNumber, setText, setBool), recorded as given on the command
// line, so that --ds-config, the checks of validateConfig() and the report's "which source decided each
// setting" behave exactly as they do for the command line. The table is also what flags() lists: nothing
// about the flags is repeated here. compileCommand() writes its diagnostics to the process's stderr; they
// are captured around the call and handed back, so that Python can raise them as the exception's message.
// This module links the compiler (MLIR, protobuf, ONNX) and not the runtime: zplan._runtime is separate so
// that a runtime-only install works where MLIR is absent.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/driver/Compile.h"
#include "compiler/driver/InitAll.h"
#include "compiler/driver/Options.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/MLIRContext.h"

namespace nb = nanobind;
using zplan::driver::CompileConfig;
using zplan::driver::Origin;
using zplan::driver::Source;

namespace {

/// Redirects file descriptor 2 into a temporary file for its lifetime; text() returns what was written.
/// Both std::cerr and llvm::errs() write to the descriptor, so every message of the compile path lands here.
class StderrCapture {
 public:
  StderrCapture() {
    flush();
    file_ = std::tmpfile();
    if (!file_) return;
    saved_ = dup(2);
    if (saved_ < 0 || dup2(fileno(file_), 2) < 0) {
      if (saved_ >= 0) close(saved_);
      saved_ = -1;
    }
  }
  ~StderrCapture() { restore(); }

  /// Restores stderr and returns the captured text.
  std::string text() {
    restore();
    std::string out;
    if (!file_) return out;
    std::rewind(file_);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) out.append(buf, n);
    std::fclose(file_);
    file_ = nullptr;
    return out;
  }

 private:
  static void flush() {
    std::cerr.flush();
    std::cout.flush();
    llvm::errs().flush();
    std::fflush(stderr);
  }
  void restore() {
    if (saved_ < 0) return;
    flush();
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  std::FILE *file_ = nullptr;
  int saved_ = -1;
};

/// The value kind a flag of the table takes, found by asking the table's setters (they refuse a value of
/// the wrong type without touching anything).
enum class Kind { unknown, boolean, integer, number, text };

Kind kind_of(const std::string &flag) {
  CompileConfig scratch;
  const Origin o{Source::Flag, ""};
  if (zplan::driver::setBool(scratch, flag, false, o)) return Kind::boolean;
  if (zplan::driver::setInteger(scratch, flag, 0, o)) return Kind::integer;
  if (zplan::driver::setNumber(scratch, flag, 0.0, o)) return Kind::number;
  if (zplan::driver::setText(scratch, flag, "", o)) return Kind::text;
  return Kind::unknown;
}

const char *kind_name(Kind k) {
  switch (k) {
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::number:
      return "float";
    case Kind::text:
      return "str";
    case Kind::unknown:
      break;
  }
  return "unknown";
}

/// Every flag of the compile path's table: (flag, kind, help), in table order.
std::vector<std::tuple<std::string, std::string, std::string>> flags() {
  CLI::App app;
  CompileConfig config;
  zplan::driver::CompileFlagSet set;
  set.addTo(app, config, zplan::driver::kSwept | zplan::driver::kPlan | zplan::driver::kOutput);
  std::vector<std::tuple<std::string, std::string, std::string>> out;
  for (const CLI::Option *opt : app.get_options()) {
    if (opt->get_lnames().empty()) continue;
    std::string flag = "--" + opt->get_lnames().front();
    Kind k = kind_of(flag);
    if (k == Kind::unknown) continue;  // CLI11's own --help
    out.emplace_back(flag, kind_name(k), opt->get_description());
  }
  return out;
}

/// Sets one setting from a Python value; raises TypeError when the value does not fit the flag's kind.
void set_setting(CompileConfig &config, const std::string &flag, nb::handle value, const std::string &arg) {
  const Origin o{Source::Flag, ""};
  const Kind k = kind_of(flag);
  auto fail = [&](const char *want) {
    std::string got = nb::cast<std::string>(nb::str(value.type().attr("__name__")));
    throw nb::type_error((arg + " (" + flag + ") takes " + want + ", got " + got).c_str());
  };
  switch (k) {
    case Kind::unknown:
      throw nb::type_error(("unknown setting " + arg + " (" + flag + ")").c_str());
    case Kind::boolean:
      if (!nb::isinstance<nb::bool_>(value)) fail("a bool");
      zplan::driver::setBool(config, flag, nb::cast<bool>(value), o);
      return;
    case Kind::integer:
      if (nb::isinstance<nb::bool_>(value) || !nb::isinstance<nb::int_>(value)) fail("an int");
      zplan::driver::setInteger(config, flag, nb::cast<int64_t>(value), o);
      return;
    case Kind::number:
      if (nb::isinstance<nb::bool_>(value) || !(nb::isinstance<nb::int_>(value) || nb::isinstance<nb::float_>(value)))
        fail("a number");
      zplan::driver::setNumber(config, flag, nb::cast<double>(value), o);
      return;
    case Kind::text:
      // Byte counts ("80G") are text settings; a plain integer is accepted for them too.
      if (nb::isinstance<nb::bool_>(value)) fail("a str");
      if (nb::isinstance<nb::int_>(value))
        zplan::driver::setText(config, flag, std::to_string(nb::cast<int64_t>(value)), o);
      else if (nb::isinstance<nb::str>(value))
        zplan::driver::setText(config, flag, nb::cast<std::string>(value), o);
      else
        fail("a str");
      return;
  }
}

/// Compiles `model` into `output` with the settings given as (flag, python-name, value) triples. Returns the
/// compile command's exit status and everything it wrote to stderr.
std::tuple<int, std::string> compile(const std::string &model, const std::string &output,
                                     const std::vector<std::tuple<std::string, std::string, nb::object>> &settings,
                                     int64_t batch, int64_t seq, const std::map<std::string, int64_t> &dims,
                                     bool graph_only) {
  zplan::driver::CommonOptions options;
  options.model = model;
  options.output = output;
  options.import.batch = batch;
  options.import.seq = seq;
  options.import.dims = dims;
  options.import.allowMissingData = graph_only;
  CompileConfig config;
  for (const auto &[flag, arg, value] : settings) set_setting(config, flag, value, arg);
  // --batch lives in the common options; a given batch wins over a ds-config's, as on the command line.
  if (batch >= 0) config.origins["--batch"] = Origin{Source::Flag, ""};

  int rc = 1;
  std::string log;
  {
    nb::gil_scoped_release unlocked;
    StderrCapture capture;
    {
      mlir::DialectRegistry registry;
      zplan::registerAllDialects(registry);
      mlir::MLIRContext context(registry);
      context.loadAllAvailableDialects();
      rc = zplan::driver::compileCommand(context, options, config);
    }
    log = capture.text();
  }
  return {rc, log};
}

}  // namespace

NB_MODULE(_compiler, m) {
  m.doc() = "The zplan compiler's compile path (zplan MODEL.onnx ...); use zplan.compile.";
  m.def("flags", &flags, "The compile path's flags: (flag, kind, help), from the driver's option table.");
  m.def("compile", &compile, nb::arg("model"), nb::arg("output"), nb::arg("settings"), nb::arg("batch") = -1,
        nb::arg("seq") = -1, nb::arg("dims") = std::map<std::string, int64_t>{}, nb::arg("graph_only") = false,
        "Runs the compile command; returns (exit status, captured stderr).");
}
