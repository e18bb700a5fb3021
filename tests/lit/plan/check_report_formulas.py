"""Checks a zplan --report-json against closed-form formulas (Megatron, ZeRO),
computed from the ONNX file and the command-line numbers only.

  - tensor parallelism: every transformer layer all-reduces its attention and
    MLP outputs over tp, b*s*h elements each (b = batch / dp), plus one
    all-reduce of the vocabulary-parallel embedding: (2L + 1) * b*s*h;
  - ZeRO-3: each non-persistent parameter is gathered once per forward and
    each rank sends (dp - 1)/dp of it;
  - resident weights per rank: tp-split parameters / (tp * dp), replicated
    ones (1-D, position embeddings) / dp, as they are sharded over dp too;
    GQA K/V projections split over min(tp, kv heads) only.
"""
import argparse
import json
import sys

import onnx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--dp", type=int, required=True)
    ap.add_argument("--zero", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--bytes", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=0,
                    help="K/V heads (GQA): K/V projections split over "
                         "min(tp, kv-heads) ranks, replicated beyond")
    ap.add_argument("--kv-dim", type=int, default=0,
                    help="output width of the K/V projections (kv heads x "
                         "head dim): [hidden, kv-dim] matrices are K/V")
    a = ap.parse_args()
    r = json.load(open(a.report))
    rank = r["ranks"][0]
    ok = True

    def check(name, got, want, rel=0.0, slack=0):
        nonlocal ok
        good = abs(got - want) <= max(rel * want, slack)
        print("%s: %s got %d want %d" % ("ok" if good else "MISMATCH", name,
                                         got, want))
        ok = ok and good

    b = a.batch // a.dp
    if a.tp > 1:
        want = (2 * a.layers + 1) * b * a.seq * a.hidden * a.bytes
        check("all_reduce payload over tp",
              rank["comm_payload"]["all_reduce"]["tp"], want)

    m = onnx.load(a.model, load_external_data=False)
    split, replicated, kv = 0, 0, 0
    for init in m.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        if n < 16:
            continue  # folded scalars and shape constants, not parameters
        if len(init.dims) == 1 or "wpe" in init.name or \
                "position" in init.name:
            replicated += n
        elif a.kv_heads and list(init.dims) == [a.hidden, a.kv_dim]:
            kv += n
        else:
            split += n
    # Megatron/vLLM GQA: with tp above the K/V head count every K/V head is
    # replicated on tp / kv-heads ranks.
    kv_split = min(a.tp, a.kv_heads) if a.kv_heads else 1
    local = split / a.tp + replicated + kv / kv_split
    shard = a.dp if a.zero == 3 else 1
    want = local * a.bytes / shard
    check("resident weight bytes", rank["resident_weight_bytes"], int(want),
          rel=0.01)
    if a.zero == 3 and a.dp > 1:
        g = rank["comm_payload"]["gather_param"]["dp"]
        sent = rank["comm"]["gather_param"]["dp"]
        calls = rank["comm_calls"]["gather_param"]["dp"]
        # The padding of each flat shard to a multiple of dp adds at most
        # dp - 1 elements per parameter.
        check("gather_param sent = (dp-1)/dp of gathered", sent,
              int(g * (a.dp - 1) / a.dp), slack=calls * a.dp * a.bytes)
        check("every parameter gathered once", g,
              int(local * a.bytes), rel=0.01)
    print("formulas: " + ("OK" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
