"""zplan.export_hf(): a Hugging Face model to the ONNX file zplan compiles.

It exports the way the test models were made (tests/models/README.md, export_families.py): the model in
eval mode wrapped so that its one input is ``input_ids`` and its one output the tensor zplan plans
(``logits`` for a *ForCausalLM, ``last_hidden_state`` for an encoder), KV cache off, eager attention, by
torch.onnx.export(dynamo=True) with dynamic batch and sequence axes and the weights as external data beside
the file. It needs torch (and transformers for the model); neither is a dependency of the package.
"""

import inspect
import os


def export_hf(model, path, *, batch=2, seq=16, max_seq=None, output=None):
    """Exports ``model`` (a transformers PreTrainedModel or any torch module taking input_ids) to ``path``.

    batch, seq  the example input's shape (the exported axes stay dynamic; zplan.compile binds them).
    max_seq     the largest sequence length the export must allow (default: the model's
                max_position_embeddings, else 4 x seq).
    output      the model output to export ("logits", "last_hidden_state", ...); default: logits when the
                model returns them, else last_hidden_state.
    Returns ``path``. Raises ImportError when torch is not installed.
    """
    try:
        import torch
    except ModuleNotFoundError as e:
        raise ImportError("zplan.export_hf needs PyTorch (pip install torch transformers)") from e
    except ImportError as e:
        # torch's CUDA build needs its own NCCL; a zplan.Engine made earlier in this process (a runtime built
        # with the cuda backend) has loaded the system's under the same name.
        if "nccl" in str(e).lower():
            raise ImportError(f"zplan.export_hf: torch cannot load after the zplan runtime ({e}): import torch "
                              "before making the first zplan.Engine") from e
        raise
    # torch.export specialises an axis whose example size is 0 or 1 to a constant, so the example input
    # needs at least 2 along each dynamic axis.
    for name, v in (("batch", batch), ("seq", seq)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 2:
            raise ValueError(f"zplan.export_hf: {name} must be an int >= 2 (the axes stay dynamic), got {v!r}")
    config = getattr(model, "config", None)
    vocab = None
    if config is not None:
        # The eager attention exports to the plain MatMul/Softmax graph that zplan recognises; the fused
        # scaled-dot-product kernels of other implementations do not export to it.
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")
        elif hasattr(config, "_attn_implementation"):
            config._attn_implementation = "eager"
        vocab = getattr(config, "vocab_size", None)
        if max_seq is None:
            max_seq = getattr(config, "max_position_embeddings", None)
    if max_seq is None:
        max_seq = 4 * seq
    max_seq = max(int(max_seq), seq)
    vocab = vocab or 2
    # The KV cache is off where the model has one: its outputs are not part of the plan.
    kwargs = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}
    model = model.eval()
    # The example ids come from a generator of their own: the caller's random state stays as it was.
    ids = torch.randint(0, vocab, (batch, seq), dtype=torch.int64, generator=torch.Generator().manual_seed(1))

    # Which output to export, decided once on the example: the one named, else logits, else
    # last_hidden_state, else the first.
    with torch.no_grad():
        sample = model(input_ids=ids, **kwargs)
    def field(out, name):
        # transformers' ModelOutput is a dict; other models may return a dict or an object with attributes.
        return out.get(name) if isinstance(out, dict) else getattr(out, name, None)

    if isinstance(sample, torch.Tensor):
        out_name = output or "output"
    elif output is not None:
        out_name = output
        if field(sample, output) is None:
            raise ValueError(f"zplan.export_hf: the model returns no output named {output!r}")
    else:
        out_name = next((n for n in ("logits", "last_hidden_state") if field(sample, n) is not None), None)

    class _Wrapped(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            out = self.m(input_ids=input_ids, **kwargs)
            if isinstance(out, torch.Tensor):
                return out
            return out[0] if out_name is None else field(out, out_name)

    dims = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=max_seq)}}
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # The wrapper is put in eval mode too: a new Module starts in training mode, and torch.onnx.export warns
    # about exporting one (the model inside is already in eval mode, so the graph is the same).
    torch.onnx.export(_Wrapped(model).eval(), (ids,), path, dynamo=True, external_data=True, input_names=["input_ids"],
                      output_names=[out_name or "output"], dynamic_shapes=dims)
    return path
