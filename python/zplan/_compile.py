"""zplan.compile(): the compile path of `zplan MODEL.onnx ...`, in process.

Keyword settings are the command line's flags with dashes as underscores (``offload_param="cpu"`` is
``--offload-param cpu``). The flags, their kinds and their checks are the driver's own table
(compiler/driver/Options.cpp), read through zplan._compiler.flags(): nothing about a flag is repeated here,
so a flag added to the table is a keyword here at once. A setting given here counts as given on the command
line: it wins over a DeepSpeed config's value, and the report says so.
"""

import difflib
import errno
import json
import os
import shutil
import tempfile
import warnings

from ._errors import CompileError, ZplanError

try:
    from . import _compiler
except ImportError as _e:  # A runtime-only install (no MLIR on this machine).
    _compiler = None
    _compiler_import_error = _e

# Keywords of compile() that are not rows of the flag table: the import options every zplan command shares
# (compiler/driver/Driver.cpp) and the output path.
_COMMON = ("out", "batch", "seq", "dims", "graph_only")


def compiler_available():
    """Whether this install has the compiler module (it needs MLIR 22's libraries at run time)."""
    return _compiler is not None


def _require_compiler():
    if _compiler is None:
        here = os.path.dirname(os.path.abspath(__file__))
        if any(name.startswith("_compiler") for name in os.listdir(here)):
            # The module is there but does not load: usually MLIR's libraries are missing on this machine.
            why = f"it does not load here: {_compiler_import_error}"
        else:
            why = "this install was built without it (ZPLAN_BUILD_COMPILER=OFF, or no MLIR where it was built)"
        raise ZplanError(
            f"zplan.compile needs the compiler module zplan._compiler; {why}. Compile the plan where zplan's "
            "compiler is installed and pass the plan file to zplan.Engine",
            "not_found",
        )


def compile_flags():
    """The compile path's settings: {keyword: (flag, kind, help)}, kind one of bool, int, float, str."""
    _require_compiler()
    return {flag[2:].replace("-", "_"): (flag, kind, text) for flag, kind, text in _compiler.flags()}


class Plan:
    """A compiled plan file: its ``path``, the compile ``report`` (the JSON report, a dict) and the ``log``.

    os.fspath(plan) is the path, so a Plan goes wherever a plan path does. A plan compiled without ``out``
    lives in a temporary folder that is removed with the Plan object.
    """

    def __init__(self, path, report, log, tmpdir=None):
        self.path = path
        self.report = report
        self.log = log
        self._tmpdir = tmpdir

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"zplan.Plan({self.path!r})"

    def __del__(self):
        if getattr(self, "_tmpdir", None):
            shutil.rmtree(self._tmpdir, ignore_errors=True)


def _unknown_keyword(name, table):
    known = sorted(list(table) + list(_COMMON))
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return TypeError(f"zplan.compile() got an unexpected keyword argument {name!r}{hint} "
                     f"(the settings are: {', '.join(known)})")


def _error_message(log):
    """The compiler's error lines (and their notes) from the captured log; the whole log if it has none."""
    lines = [line for line in log.splitlines() if line.strip()]
    picked = [line for line in lines if "error" in line or line.startswith("zplan: note:")]
    return "\n".join(picked or lines) or "zplan: the compile failed without a message"


def compile(model_path, *, out=None, batch=None, seq=None, dims=None, graph_only=False, **settings):
    """Compiles an ONNX model into a plan, in this process; returns a Plan.

    model_path  the .onnx file (external data beside it, as zplan reads it).
    out         the plan file to write; default: a temporary file owned by the returned Plan.
    batch, seq  the global batch and the sequence length to plan for (--batch, --seq).
    dims        {name: value} for other symbolic dims (--dim NAME=VALUE).
    graph_only  accept missing external-data files (--graph-only).
    settings    every flag of `zplan MODEL.onnx`: tp=, zero=, world=, train=, dtype=, micro_batches=,
                offload_param=, offload_optimizer=, lr=, clip_grad=, ds_config= (a path, or a dict that is
                written to a JSON file), ... (zplan.compile_flags() lists them).

    Raises CompileError with the compiler's message, TypeError for an unknown keyword or a value of the
    wrong type, FileNotFoundError for a missing model.
    """
    _require_compiler()
    model = os.fspath(model_path)
    if not os.path.isfile(model):
        raise FileNotFoundError(errno.ENOENT, "zplan.compile: no such model file", model)
    table = {name: flag for name, (flag, _, _) in compile_flags().items()}
    work = tempfile.mkdtemp(prefix="zplan-compile-")
    keep_work = False
    try:
        triples = []
        for name, value in settings.items():
            if name not in table:
                raise _unknown_keyword(name, table)
            if value is None:
                continue  # as if not given: the default, or the ds-config's value
            if name == "ds_config" and isinstance(value, dict):
                path = os.path.join(work, "ds_config.json")
                with open(path, "w") as f:
                    json.dump(value, f)
                value = path
            elif isinstance(value, os.PathLike):
                value = os.fspath(value)
            triples.append((table[name], name, value))
        report_json = settings.get("report_json")
        if report_json is None:
            report_json = os.path.join(work, "report.json")
            triples.append(("--report-json", "report_json", report_json))
        dim_map = {}
        for k, v in (dims or {}).items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"zplan.compile: dims must map names to non-negative ints, got {k!r}: {v!r}")
            dim_map[k] = v
        for name, v in (("batch", batch), ("seq", seq)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise TypeError(f"zplan.compile: {name} takes an int, got {type(v).__name__}")

        if out is None:
            stem = os.path.splitext(os.path.basename(model))[0]
            final = os.path.join(work, stem + ".zplan")
            keep_work = True
        else:
            final = os.path.abspath(os.fspath(out))
        # Each process writes its own file (named by rank and pid, unique across the job's hosts) and renames
        # it into place: under mpirun every rank may compile the same plan to the same path at once, and a
        # rename is atomic.
        from .engine import rank

        part = f"{final}.{rank()}.{os.getpid()}.part"
        rc, log = _compiler.compile(model, part, triples, -1 if batch is None else batch, -1 if seq is None else seq,
                                    dim_map, bool(graph_only))
        if rc != 0:
            for leftover in (part, part + ".tmp"):
                if os.path.exists(leftover):
                    os.remove(leftover)
            raise CompileError(_error_message(log), log)
        os.replace(part, final)
        for line in log.splitlines():
            if line.startswith("zplan: warning:"):
                warnings.warn(line[len("zplan: warning:"):].strip(), RuntimeWarning, stacklevel=2)
        report = None
        if os.path.exists(report_json):
            with open(report_json) as f:
                report = json.load(f)
        return Plan(final, report, log, work if keep_work else None)
    finally:
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
