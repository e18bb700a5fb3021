"""zplan from Python: compile an ONNX model into a sharding plan, and run, train and checkpoint it.

    import zplan
    engine = zplan.initialize("model.onnx", config=ds_config, seq=128)   # under mpirun or torchrun: one per rank
    # or: plan = zplan.compile("model.onnx", train=True, zero=1, world=2, batch=8, seq=128); zplan.Engine(plan)
    for batch in batches:
        loss = engine.step(batch)          # a global [batch, seq] array of token ids
    engine.save_checkpoint("ckpt")

zplan.compile needs the compiler module (zplan._compiler, built where MLIR is installed); Engine needs only
the runtime module (zplan._runtime). docs/python.md describes both.
"""

from ._errors import CompileError, ZplanError
from .engine import Engine, initialize, rank, runtime_available, world_size
from ._compile import Plan, compile, compiler_available, compile_flags
from .export import export_hf

__version__ = "0.1.0"

__all__ = [
    "CompileError",
    "Engine",
    "Plan",
    "ZplanError",
    "compile",
    "compile_flags",
    "compiler_available",
    "export_hf",
    "initialize",
    "rank",
    "runtime_available",
    "world_size",
]
