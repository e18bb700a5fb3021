#!/usr/bin/env python3
"""Exports a benchmark model as a graph-only ONNX file, like tests/models/bench/gpt2-350m/model.onnx.

    python tests/models/export_bench_graph.py gpt2-1.3b tests/models/bench/gpt2-1.3b/model.onnx

The model is the Hugging Face class built from the config below with random weights (torch.manual_seed(0)),
exported by the repository's own zplan.export_hf (torch.onnx.export, dynamo, dynamic batch and sequence axes,
weights as external data). The weights are then dropped: the .onnx keeps every initializer as an
external-data reference (location, offset, length) into a data file that is not kept, as the other bench
graphs do, so the file stays a few MB. zplan compiles it with --graph-only, and zrun draws weights at load time
(--init random). Small constants that the exporter wrote inline stay inline.

The export runs on the CPU in float32 (what the other bench graphs hold); gpt2-1.3b needs about 6 GB of
memory and as much temporary disk for the data file, which is deleted afterwards.
"""
import argparse
import os
import shutil
import sys
import tempfile

# The bench configs (../BASELINES.md's shapes; gpt2-1.3b is GPT-2 XL's width at 24 layers).
CONFIGS = {
    "gpt2-1.3b": ("GPT2Config", "GPT2LMHeadModel",
                  dict(n_embd=2048, n_layer=24, n_head=16, n_positions=1024, vocab_size=50257)),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=sorted(CONFIGS))
    ap.add_argument("out", help="the .onnx to write (graph only)")
    args = ap.parse_args()

    import onnx
    import torch
    import transformers

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "python"))
    from zplan.export import export_hf

    cfg_name, model_name, fields = CONFIGS[args.model]
    config = getattr(transformers, cfg_name)(**fields)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.model}: {params / 1e6:.1f}M parameters", flush=True)

    tmp = tempfile.mkdtemp(prefix="zplan-export-")
    try:
        full = os.path.join(tmp, "model.onnx")
        export_hf(model, full)
        del model
        # Load the graph only: external-data initializers keep their references, the data stays behind.
        m = onnx.load(full, load_external_data=False)
        external = sum(1 for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        onnx.save(m, args.out)
        print(f"{args.out}: {os.path.getsize(args.out)} bytes, {len(m.graph.initializer)} initializers "
              f"({external} external, data file not kept)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
