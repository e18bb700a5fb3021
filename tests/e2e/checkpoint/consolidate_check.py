"""Checks `zplan consolidate` against independent readers (onnxruntime, onnx, numpy).
  roundtrip CONSOLIDATED.onnx LOSSES.npy IDS.npy FILE.safetensors OUT_LOGITS.npy
    onnxruntime runs the consolidated model on the batch zrun's last step trained on; the next-token
    cross-entropy of its logits must equal zrun's last loss (computed on the weights the checkpoint holds)
    within 1e-5 relative. The logits go to OUT_LOGITS.npy for zrun's forward pass to compare against. Every
    tensor of the safetensors file must equal the ONNX initializer of the same name bit for bit.
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
    {"roundtrip": roundtrip, "memory": memory}[sys.argv[1]](*sys.argv[2:])
