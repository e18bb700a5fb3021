"""zplan.Engine: one rank's runtime session over a plan (zrt::Session, runtime/include/zrt/zrt.h).

Every rank of the job makes the same calls in the same order, as with the C++ API: the constructor, step(),
forward(), save_checkpoint() and load_checkpoint() are collective. Arguments are checked here, before any
collective starts, so that a bad batch fails on every rank alike with a message naming the argument; what
the runtime refuses comes back as ZplanError with the runtime's message.

A job of several ranks is started with mpirun (the ranks talk over MPI) or with torchrun (RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT: the runtime's TCP communicator connects the ranks itself); NCCL carries the data
of cuda plans under either. The runtime picks the communicator from the environment (docs/python.md,
"Launchers"). LOCAL_RANK (or Open MPI's local rank) picks the GPU of a cuda plan.
"""

import atexit
import os
import sys
import weakref

import numpy as np

from ._errors import ZplanError

# The runtime module is loaded at the first Engine, not at `import zplan`: it brings libzrt and, in a build
# with the cuda backend, the system's CUDA libraries and NCCL. A process that imports torch after those are
# loaded gets them instead of the newer ones torch ships (libtorch_cuda then misses NCCL symbols), so
# `import zplan` must load nothing that torch also loads.
_runtime = None
_runtime_import_error = None


def _load_runtime():
    global _runtime, _runtime_import_error
    if _runtime is None and _runtime_import_error is None:
        try:
            from . import _runtime as module
            _runtime = module
        except ImportError as e:
            _runtime_import_error = e
    return _runtime

# Runtime dtype names (zrt::dtype_name) and the NumPy types their values travel as.
_NUMPY = {"f32": np.float32, "f16": np.float16, "i64": np.int64, "i32": np.int32, "bool8": np.bool_}

_live = weakref.WeakSet()
_hook_installed = False


def runtime_available():
    """Whether this install has the runtime module (loads it)."""
    return _load_runtime() is not None


def _shutdown():
    # Sessions first (their communicators), then MPI, once, as zrt::shutdown() asks.
    for engine in list(_live):
        engine.close()
    if _runtime is not None:
        _runtime.shutdown()


atexit.register(_shutdown)


def _install_abort_hook():
    """An uncaught exception on one rank of several stops the whole job (MPI_Abort under mpirun; under
    torchrun the rank exits, which closes its connections and ends the others' waits) instead of leaving
    the other ranks waiting in a collective forever."""
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.flush()
        sys.stdout.flush()
        _runtime.abort_job(1)

    sys.excepthook = hook


def _launcher_value(names, default):
    for n in names:
        v = os.environ.get(n)
        if v is not None and v.isdigit():
            return int(v)
    return default


def rank():
    """This process's rank as the launcher tells it (mpirun's, or torchrun's RANK); 0 without a launcher.
    Readable before any Engine exists, e.g. to give zplan.compile its world."""
    return _launcher_value(("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK"), 0)


def world_size():
    """The number of ranks the launcher started (mpirun -np N, or torchrun's WORLD_SIZE); 1 without one."""
    return _launcher_value(("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"), 1)


def _as_array(value, what):
    """A NumPy view of `value`: a NumPy array, anything with __dlpack__ (torch CPU tensors, JAX arrays...),
    or a nested sequence."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (TypeError, RuntimeError, BufferError) as e:
            raise TypeError(f"{what}: cannot read it through DLPack on the CPU ({e})") from None
    try:
        return np.asarray(value)
    except Exception as e:
        raise TypeError(f"{what}: not an array ({e})") from None


def _shape(s):
    return "[" + ", ".join(str(d) for d in s) + "]"


def _bf16_to_f32(raw):
    return (raw.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(a):
    # Round to nearest even, as the runtime's conversions do.
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def initialize(model_path, *, config=None, seq=None, batch=None, **settings):
    """deepspeed.initialize's counterpart: compiles ``model_path`` for training over the ranks this launch
    started (``world`` defaults to zplan.world_size()) with the DeepSpeed ``config`` (a dict or a path), and
    returns the Engine. Other keywords are zplan.compile's (tp=, zero=, micro_batches=, out=, ...)."""
    from ._compile import compile as _compile_plan

    settings.setdefault("train", True)
    settings.setdefault("world", world_size())
    return Engine(_compile_plan(model_path, ds_config=config, seq=seq, batch=batch, **settings))


class Engine:
    """A plan loaded on this rank: ``step(batch) -> loss``, ``forward(inputs)``, checkpoints.

    plan     a path, or a zplan.Plan.
    init     "file": weights from the plan's sources; "random": deterministic random weights (graph-only
             models).
    seed     the seed of init="random".
    backend  "cpu" (the reference backend) or "cuda"; default: the target a zplan.Plan was compiled for
             (compile's target=), "cpu" for a plan given by its path.
    lr       a learning rate that overrides the plan's schedule (training plans).

    A training plan's init program runs here once; load_checkpoint() then replaces what it wrote.
    """

    def __init__(self, plan, *, init="file", seed=0, backend=None, lr=None):
        if _load_runtime() is None:
            raise ZplanError(f"zplan.Engine needs the runtime module zplan._runtime ({_runtime_import_error})",
                             "not_found")
        if init not in ("file", "random"):
            raise ValueError(f"zplan.Engine: init must be 'file' or 'random', got {init!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"zplan.Engine: seed must be a non-negative int, got {seed!r}")
        path = os.fspath(plan)
        if not os.path.isfile(path):
            raise FileNotFoundError(2, "zplan.Engine: no such plan file", path)
        report = getattr(plan, "report", None) or {}
        settings = {x.get("flag"): x.get("value") for x in report.get("settings", [])}
        if backend is None:
            backend = settings.get("--target") or "cpu"
        self._plan = plan  # keeps a temporary Plan's folder alive as long as the engine
        self._s = _runtime.Session(path, init == "random", seed, backend)
        _live.add(self)
        info = self._s.rank_info()
        self.rank, self.world, self.tp, self.dp = info["rank"], info["world"], info["tp"], info["dp"]
        self._programs = {p["name"]: p for p in self._s.programs()}
        self.global_step = 0
        self.samples = 0
        self.grad_norm = float("nan")
        self._lr = None
        # The micro-batch count a Plan's report records; a bare path leaves it to the batch's size.
        self._micro = int(settings["--micro-batches"]) if settings.get("--micro-batches") else None
        if self.world > 1:
            _install_abort_hook()
        if "init" in self._programs:
            self._s.run("init")
        if lr is not None:
            self.lr = lr

    # --- what the plan holds

    @property
    def programs(self):
        """The plan's programs: {name: {"inputs": [...], "outputs": [...], "scalars": [...]}}."""
        return self._programs

    @property
    def id_range(self):
        """(lo, hi): the token ids the training input takes (the embedding's rows), or None."""
        prog = self._programs.get("train_step") or self._programs.get("micro_step") or self._programs.get("main")
        if prog is None or not prog["inputs"]:
            return None
        return self._s.input_id_range(prog["inputs"][0]["name"])

    @property
    def batch_shape(self):
        """(rows, seq): the global batch step() takes (all micro-batches of one optimizer step)."""
        prog = self._train_program()
        rows, seq = prog["inputs"][0]["shape"][:2]
        return (rows * (self._micro or 1) if prog["name"] == "micro_step" else rows, seq)

    @property
    def is_training(self):
        return "train_step" in self._programs or "micro_step" in self._programs

    @property
    def producer(self):
        """The zplan command line that made the plan."""
        return self._s.producer()

    def memory_report(self):
        """This rank's planned and measured bytes (zrt::MemoryReport)."""
        return self._s.memory_report()

    def state(self):
        """The plan's persistent tensors as this rank holds them (name, kind, shapes, flat range)."""
        return self._s.state()

    def read_state(self, name):
        """This rank's slice of a persistent tensor (flat; bf16 widened to float32)."""
        info = next((x for x in self._s.state() if x["name"] == name), None)
        if info is None:
            raise KeyError(f"the plan has no state tensor named {name!r}")
        a = self._s.read_state(name)
        return _bf16_to_f32(a) if info["dtype"] == "bf16" else a

    @property
    def lr(self):
        """The learning rate set over the plan's schedule, or None (the schedule's own)."""
        return self._lr

    @lr.setter
    def lr(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"zplan.Engine: lr must be a number >= 0, got {value!r}")
        self._s.set_scalar("lr", float(value))
        self._lr = float(value)

    # --- training

    def _train_program(self):
        prog = self._programs.get("train_step") or self._programs.get("micro_step")
        if prog is None:
            raise ZplanError("this plan has no training program (train_step or micro_step): compile it with "
                             f"zplan.compile(..., train=True); it has {', '.join(self._programs)}",
                             "invalid_argument")
        if len(prog["inputs"]) != 1:
            names = ", ".join(repr(i["name"]) for i in prog["inputs"])
            raise ZplanError(f"{prog['name']} takes {len(prog['inputs'])} inputs ({names}); Engine.step feeds "
                             "exactly one token input", "invalid_argument")
        return prog

    def _check_ids(self, name, ids):
        bounds = self._s.input_id_range(name)
        if bounds is None or ids.size == 0:
            return
        lo, hi = bounds
        bad = np.argwhere((ids < lo) | (ids >= hi))
        if len(bad):
            where = tuple(int(i) for i in bad[0])
            raise ValueError(f"{name}{list(where)} is token id {int(ids[where])}, outside the vocabulary "
                             f"[{lo}, {hi})")

    def step(self, batch):
        """One optimizer step on the global batch: an integer array [batch, seq] of token ids (every rank
        passes the same global batch and keeps its data-parallel rows). A plan compiled with micro_batches=M
        takes M micro-batches' rows and accumulates over them. Returns the loss; ``grad_norm`` holds the
        global gradient norm before clipping. Collective."""
        prog = self._train_program()
        spec = prog["inputs"][0]
        a = _as_array(batch, "batch")
        if a.dtype.kind not in "iu":
            raise TypeError(f"batch: token ids must be integers, got {a.dtype}")
        rows, seq = spec["shape"][0], spec["shape"][1] if len(spec["shape"]) > 1 else None
        if a.ndim != 2 or a.shape[1] != seq:
            raise ValueError(f"batch: the plan trains on [batch, {seq}] token ids ({spec['name']!r}), got "
                             f"{_shape(a.shape)}")
        if prog["name"] == "train_step":
            want = rows
        else:
            want = rows * self._micro if self._micro else None
        if (want is not None and a.shape[0] != want) or a.shape[0] == 0 or a.shape[0] % rows:
            expect = want if want is not None else f"a multiple of {rows}"
            raise ValueError(f"batch: {a.shape[0]} rows; the plan's global batch is {expect} "
                             f"(zplan.compile's batch=)")
        self._check_ids(spec["name"], a)
        a = np.ascontiguousarray(a, dtype=_NUMPY[spec["dtype"]])
        loss, self.grad_norm = self._s.train_step(spec["name"], a, self.global_step + 1)
        self.global_step += 1
        self.samples += a.shape[0]
        return loss

    # --- forward

    def forward(self, inputs=None, *, root=0, **named):
        """Runs the forward plan once. ``inputs``: an array (a plan with one input) or {name: array}, each
        the global batch; names may also come as keywords. Returns {output name: array} on rank ``root``
        and None on the others (the outputs are gathered there). bf16 outputs are widened to float32.
        Collective."""
        prog = self._programs.get("main")
        if prog is None:
            raise ZplanError("this plan has no forward program (main): it has "
                             f"{', '.join(self._programs)}; compile the model without train= or generate= "
                             "for forward()", "invalid_argument")
        specs = {i["name"]: i for i in prog["inputs"]}
        if inputs is None:
            given = dict(named)
        elif isinstance(inputs, dict):
            given = {**inputs, **named}
        else:
            if len(specs) != 1 or named:
                raise TypeError(f"forward: the plan takes {len(specs)} inputs ({', '.join(specs)}): pass a dict")
            given = {next(iter(specs)): inputs}
        for name in given:
            if name not in specs:
                raise KeyError(f"the plan has no input named {name!r} (its inputs: {', '.join(specs)})")
        for name in specs:
            if name not in given:
                raise KeyError(f"input {name!r} is not given (the plan's inputs: {', '.join(specs)})")
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < self.world:
            raise ValueError(f"forward: root must be a rank in [0, {self.world}), got {root!r}")
        bound = []
        for name, value in given.items():
            spec = specs[name]
            a = _as_array(value, name)
            if tuple(a.shape) != tuple(spec["shape"]):
                raise ValueError(f"input {name!r} has shape {_shape(a.shape)}; the plan expects "
                                 f"{_shape(spec['shape'])} (the global batch)")
            want = spec["dtype"]
            if want in ("i64", "i32"):
                if a.dtype.kind not in "iu":
                    raise TypeError(f"input {name!r}: the plan takes integers ({want}), got {a.dtype}")
                self._check_ids(name, a)
                a = np.ascontiguousarray(a, dtype=_NUMPY[want])
            elif want == "bool8":
                a = np.ascontiguousarray(a, dtype=np.bool_)
            else:
                if a.dtype.kind not in "fiu":
                    raise TypeError(f"input {name!r}: the plan takes {want} numbers, got {a.dtype}")
                a = _f32_to_bf16(a) if want == "bf16" else np.ascontiguousarray(a, dtype=_NUMPY[want])
            bound.append((name, a))
        for name, a in bound:
            self._s.bind_input(name, a)
        self._s.run("main")
        out = {}
        for spec in prog["outputs"]:
            a = self._s.read_output(spec["name"], root)
            if a is not None and spec["dtype"] == "bf16":
                a = _bf16_to_f32(a)
            out[spec["name"]] = a
        return out if self.rank == root else None

    __call__ = forward

    # --- generation

    def generate(self, prompt, max_new_tokens, *, prompt_lengths=None, temperature=0.0, top_k=0, top_p=1.0,
                 seed=0, stop=()):
        """Generation with a plan compiled with generate=True, max_seq=L (docs/generation.md), as
        `zrun --generate` does it: one prefill, then one decode step per new token over the planned KV cache.

        prompt          integer ids [B, P], B at most the planned batch; sequence b's prompt is its first
                        prompt_lengths[b] ids (default: all P).
        max_new_tokens  tokens to generate per sequence; prompt + new - 1 must fit the cache.
        temperature, top_k, top_p, seed   the plan's sampler (temperature 0: greedy, the default).
        stop            token ids that end a sequence (it is padded with its stop token afterwards).

        Returns int64 [B, P + n] on every rank: each prompt, then its new tokens (a shorter prompt's row ends
        with its last token repeated), n the number of tokens generated. Collective."""
        try:
            planned_b, cache = self._s.generation_shape()
        except ZplanError as e:
            raise ZplanError(f"{e}: compile it with zplan.compile(..., generate=True, max_seq=L)", e.code) from None
        ids = _as_array(prompt, "prompt")
        if ids.dtype.kind not in "iu":
            raise TypeError(f"prompt: token ids must be integers, got {ids.dtype}")
        if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
            raise ValueError(f"prompt must be a non-empty [B, P] array of ids, got {_shape(ids.shape)}")
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        b, p = ids.shape
        if b > planned_b:
            raise ValueError(f"prompt holds {b} prompts; the plan was made for at most {planned_b} (batch=)")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if prompt_lengths is None:
            lengths = np.full(b, p, dtype=np.int64)
        else:
            lengths = np.ascontiguousarray(_as_array(prompt_lengths, "prompt_lengths"), dtype=np.int64)
            if lengths.shape != (b,):
                raise ValueError(f"prompt_lengths must be [{b}], got {_shape(lengths.shape)}")
            bad = np.flatnonzero((lengths < 1) | (lengths > p))
            if len(bad):
                raise ValueError(f"prompt_lengths[{bad[0]}] is {lengths[bad[0]]}, outside [1, {p}]")
        longest = int(lengths.max())
        if longest > cache:
            raise ValueError(f"a prompt of {longest} tokens is longer than the planned cache of {cache} positions "
                             "(max_seq=)")
        n = max_new_tokens
        if n > 0 and longest + n - 1 > cache:
            raise ValueError(f"max_new_tokens {n} after a prompt of {longest} tokens needs {longest + n - 1} cache "
                             f"positions; the plan has {cache} (max_seq=): at most {cache - longest + 1}")
        bounds = self._s.input_id_range("input_ids")
        if bounds is not None:
            lo, hi = bounds
            for row in range(b):
                seq = ids[row, :lengths[row]]
                bad = np.flatnonzero((seq < lo) | (seq >= hi))
                if len(bad):
                    raise ValueError(f"prompt[{row}, {bad[0]}] is token id {seq[bad[0]]}, outside the vocabulary "
                                     f"[{lo}, {hi})")
            for t in stop:
                if not lo <= t < hi:
                    raise ValueError(f"stop token {t} is outside the vocabulary [{lo}, {hi})")
        samples = any(x["name"] == "temperature" for prog in self._programs.values() for x in prog["scalars"])
        if samples:
            if not (temperature >= 0 and np.isfinite(temperature)) or top_k < 0 or not 0 <= top_p <= 1:
                raise ValueError("temperature must be finite and >= 0, top_k >= 0, top_p in [0, 1]")
            for name, value in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p), ("seed", seed)):
                self._s.set_scalar(name, float(value))
        elif temperature != 0 or top_k != 0 or top_p != 1:
            raise ValueError("this plan decodes greedily only (no sampler): leave temperature, top_k and top_p")
        stop = set(int(t) for t in stop)
        seqs = [list(ids[row, :lengths[row]]) for row in range(b)]
        done = [False] * b

        def take(row, tok):
            if done[row]:
                seqs[row].append(seqs[row][-1])
                return
            seqs[row].append(int(tok))
            done[row] = int(tok) in stop

        steps = 0
        if n > 0:
            nxt = self._s.prefill(ids, b, p, lengths)
            for row in range(b):
                take(row, nxt[row])
            pos = lengths.copy()
            for _ in range(1, n):
                if all(done):
                    break
                tok = np.array([s[-1] for s in seqs], dtype=np.int64)
                nxt = self._s.decode_step(tok, pos, b)
                for row in range(b):
                    take(row, nxt[row])
                pos += 1
                steps += 1
        width = p + (steps + 1 if n > 0 else 0)
        out = np.empty((b, width), dtype=np.int64)
        for row in range(b):
            s_row = seqs[row]
            out[row] = [s_row[t] if t < len(s_row) else s_row[-1] for t in range(width)]
        return out

    # --- checkpoints

    def save_checkpoint(self, save_dir):
        """Writes a sharded checkpoint under the folder ``save_dir`` (docs/checkpoint-format.md): every rank
        its slices, rank 0 the manifest with the step, the data position and the learning rate; ``latest``
        switches to it last, so a crash mid-save leaves the previous one loadable. Collective."""
        self._s.save_checkpoint(os.fspath(save_dir), self.global_step, self.samples,
                                -1.0 if self._lr is None else self._lr)

    def load_checkpoint(self, load_dir):
        """Fills the plan's state from a checkpoint (a save folder holding ``latest``, or one checkpoint),
        whatever tp, dp, ZeRO stage or offload saved it, and continues from its step and data position.
        Returns what was loaded (step, samples, tp, dp, zero_stage, same_plan, ...). Collective."""
        info = self._s.load_checkpoint(os.fspath(load_dir))
        self.global_step = info["step"]
        self.samples = info["samples"]
        # A learning rate set over the schedule when it was saved stays, unless this engine set its own.
        if self._lr is None and info["lr"] >= 0:
            self.lr = info["lr"]
        return info

    # --- lifetime

    def close(self):
        """Frees the session (its arenas and communicators). Collective with the other ranks' close()."""
        if not self._s.closed:
            self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"zplan.Engine({os.fspath(self._plan)!r}, rank {self.rank}/{self.world}, tp {self.tp}, dp {self.dp})"
