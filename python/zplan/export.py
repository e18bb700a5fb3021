"""zplan.export_hf(): a Hugging Face model to the ONNX file zplan compiles.

It exports the way the test models were made (tests/models/README.md, export_families.py): the model in
eval mode wrapped so that its one input is ``input_ids`` and its one output the tensor zplan plans
(``logits`` for a *ForCausalLM, ``last_hidden_state`` for an encoder), KV cache off, eager attention, by
torch.onnx.export(dynamo=True) with dynamic batch and sequence axes and the weights as external data beside
the file. It needs torch (and transformers for the model); neither is a dependency of the package.
"""

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
    except ImportError as e:
        raise ImportError("zplan.export_hf needs PyTorch (pip install torch transformers)") from e
    # torch.export specialises an axis whose example size is 0 or 1 to a constant, so the example input
    # needs at least 2 along each dynamic axis.
    for name, v in (("batch", batch), ("seq", seq)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 2:
            raise ValueError(f"zplan.export_hf: {name} must be an int >= 2 (the axes stay dynamic), got {v!r}")
    import inspect

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
    vocab = vocab or 2
    # The KV cache is off where the model has one: its outputs are not part of the plan.
    takes_cache = "use_cache" in inspect.signature(model.forward).parameters

    class _Wrapped(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            kwargs = {"input_ids": input_ids}
            if takes_cache:
                kwargs["use_cache"] = False
            out = self.m(**kwargs)
            if isinstance(out, torch.Tensor):
                return out
            if output is not None:
                return getattr(out, output) if hasattr(out, output) else out[output]
            for name in ("logits", "last_hidden_state"):
                value = getattr(out, name, None)
                if value is not None:
                    return value
            return out[0]

    model = model.eval()
    torch.manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), dtype=torch.int64)
    out_name = output or ("logits" if hasattr(model, "lm_head") or "ForCausalLM" in type(model).__name__
                          else "last_hidden_state")
    dims = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=int(max_seq))}}
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    torch.onnx.export(_Wrapped(model), (ids,), path, dynamo=True, external_data=True, input_names=["input_ids"],
                      output_names=[out_name], dynamic_shapes=dims)
    return path
