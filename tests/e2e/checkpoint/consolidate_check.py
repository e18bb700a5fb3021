"""Checks `zplan consolidate` against independent readers (onnxruntime, onnx, numpy).
  roundtrip CONSOLIDATED.onnx LOSSES.npy IDS.npy FILE.safetensors OUT_LOGITS.npy
    onnxruntime runs the consolidated model on the batch zrun's last step trained on; the next-token
    cross-entropy of its logits must equal zrun's last loss (computed on the weights the checkpoint holds)
    within 1e-5 relative. The logits go to OUT_LOGITS.npy for zrun's forward pass to compare against. Every
    tensor of the safetensors file must equal the ONNX initializer of the same name bit for bit.
  hfnames SOURCE.onnx PLAIN.safetensors HF.safetensors
    --hf-names against the export's own record: every name is a parameter of the exported module (the
    graph signature torch.onnx wrote, less the wrapper's "m." scope), every module parameter is there but
    at most one tied weight, and each tensor equals the same tensor of the plain file (by position),
    transposed where the initializer was the exporter's copy of a linear weight.
  memory SMALL_KB BIG_KB MODEL.onnx
    the peak RSS of consolidating the wide model, less that of consolidating a small one (the same binary),
    stays under the largest tensor plus 24 MiB (the reader's block cache and slack) and under half the
    model's parameter bytes."""
import json
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def roundtrip(onnx_path, losses, ids_path, st_path, logits_out):
    import onnxruntime as ort
    ids = np.load(ids_path)
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], {"input_ids": ids})[0]
    np.save(logits_out, logits)
    x = logits.astype(np.float64)[:, :-1, :]
    y = ids[:, 1:]
    m = x.max(-1)
    lse = np.log(np.exp(x - m[..., None]).sum(-1)) + m
    loss = float((lse - np.take_along_axis(x, y[..., None], -1)[..., 0]).mean())
    ref = float(np.load(losses)[-1])
    rel = abs(loss - ref) / abs(ref)
    print(f"onnxruntime on the consolidated model: loss {loss:.7f}; zrun's last step: {ref:.7f}; relative {rel:.3g}")
    if not rel <= 1e-5:
        sys.exit("FAIL: the consolidated model does not reproduce zrun's loss")

    model = onnx.load(onnx_path)  # with its external data
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    raw = open(st_path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    data = raw[8 + n:]
    kinds = {"F32": np.float32, "F16": np.float16}
    for name, h in header.items():
        b, e = h["data_offsets"]
        a = np.frombuffer(data[b:e], dtype=kinds[h["dtype"]]).reshape(h["shape"])
        if name not in inits:
            sys.exit(f"FAIL: safetensors tensor '{name}' is no initializer of the consolidated model")
        if not np.array_equal(a, inits[name]):
            sys.exit(f"FAIL: safetensors tensor '{name}' differs from the ONNX initializer")
    print(f"safetensors: {len(header)} tensors equal the ONNX initializers bit for bit (step {meta['zplan.step']})")


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__")
    kinds = {"F32": np.float32, "F16": np.float16}
    out = []
    for name, h in header.items():
        b, e = h["data_offsets"]
        out.append((name, np.frombuffer(raw[8 + n + b:8 + n + e], dtype=kinds[h["dtype"]]).reshape(h["shape"])))
    return out


def hfnames(source, plain_path, hf_path):
    model = onnx.load(source, load_external_data=False)
    sig = [p.value for p in model.graph.metadata_props if p.key.endswith("ExportedProgram.graph_signature")][0]
    params = set()
    for line in sig.splitlines():
        if ": PARAMETER target='" in line:
            t = line.split("target='")[1].split("'")[0]
            params.add(t[2:] if t.startswith("m.") else t)
    plain, hf = read_safetensors(plain_path), read_safetensors(hf_path)
    names = [n for n, _ in hf]
    unknown = [n for n in names if n not in params]
    missing = sorted(params - set(names))
    print(f"--hf-names: {len(names)} tensors; not module parameters: {unknown}; module parameters absent: {missing}")
    if unknown or len(missing) > 1 or len(names) != len(set(names)):
        sys.exit("FAIL: --hf-names does not name the module's parameters")
    transposed = 0
    for (pn, pa), (hn, ha) in zip(plain, hf):
        # A 2-D initializer that is not the parameter itself (val_N) is the exporter's copy of a linear weight
        # for MatMul, x @ W.T: the module holds its transpose.
        if pa.ndim == 2 and pn.split("#")[0] != "m." + hn:
            pa = pa.T
            transposed += 1
        if not np.array_equal(pa, ha):
            sys.exit(f"FAIL: '{hn}' differs from '{pn}'")
    print(f"--hf-names: values equal the initializer-named file, {transposed} stored transposed")


def memory(small_kb, big_kb, model_path):
    model = onnx.load(model_path, load_external_data=False)
    sizes = [int(np.prod(t.dims)) * 4 for t in model.graph.initializer]
    delta = (int(big_kb) - int(small_kb)) * 1024
    total, largest = sum(sizes), max(sizes)
    print(f"peak RSS: {int(big_kb) / 1024:.1f} MiB consolidating the wide model, {int(small_kb) / 1024:.1f} MiB a small "
          f"one; difference {delta / 2**20:.1f} MiB; model parameters {total / 2**20:.1f} MiB, largest tensor "
          f"{largest / 2**20:.1f} MiB")
    if not (delta < largest + 24 * 2**20 and delta < total / 2):
        sys.exit("FAIL: consolidation holds more than one tensor at a time")


if __name__ == "__main__":
    {"roundtrip": roundtrip, "hfnames": hfnames, "memory": memory}[sys.argv[1]](*sys.argv[2:])
