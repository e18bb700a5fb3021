#!/usr/bin/env python3
"""DeepSpeed's ZeRO-3 model-state estimate for an ONNX model, beside zplan's estimate of the same model.

DeepSpeed's estimate_zero3_model_states_mem_needs_all_live (deepspeed/runtime/zero/stage3.py) counts two numbers
of a model: its parameters, and the parameters of its largest module (the module holding the most parameters of
its own). From them, per GPU: the largest module gathered in 16 bits plus its 16-bit gradient (4 bytes a
parameter), plus the partitioned model states that stay on the GPU (18 bytes a parameter over all GPUs: a 16-bit
parameter, an fp32 gradient, fp32 master, momentum and variance; 2 of them when the optimizer is offloaded;
none when parameters are offloaded too); per node (CPU): what is offloaded (16 or 18 bytes a parameter over the
nodes), times a safety factor of 1.5. The evaluation below is written from that description.

An ONNX graph has no modules: the largest module is taken as the largest group of initializers that share their
name up to the last dot (a Hugging Face parameter name is MODULE.PARAM), which is how torch.onnx names them.

With --zplan FILE (`zplan estimate --json` output), prints zplan's rows of the same configurations (ZeRO-3,
tp 1, the offload placements DeepSpeed lists) beside DeepSpeed's figures.
"""
import argparse
import collections
import json
import sys

GIB = float(1 << 30)


def count_params(model_path):
    import onnx
    model = onnx.load(model_path, load_external_data=False)
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                   onnx.TensorProto.DOUBLE}
    modules = collections.Counter()
    total = 0
    for init in model.graph.initializer:
        if init.data_type not in float_types:
            continue
        n = 1
        for d in init.dims:
            n *= d
        # Constants folded into initializers (scalars, small tables) are not parameters of a module; they are
        # counted all the same, as torch counts buffers out but they are tiny here.
        total += n
        modules[init.name.rsplit(".", 1)[0]] += n
    name, largest = modules.most_common(1)[0]
    return total, largest, name


def deepspeed_zero3(total, largest, gpus_per_node, nodes, buffer_factor=1.5):
    """Rows of (offload_param, offload_optimizer, zero_init, cpu bytes per node, gpu bytes per GPU)."""
    gpus = gpus_per_node * nodes
    largest_bytes = 4 * largest
    rows = []
    for opt_cpu, param_cpu in ((True, True), (True, False), (False, False)):
        for zero_init in (True, False):
            if opt_cpu and param_cpu:
                gpu = largest_bytes
                per_param = 18
            elif opt_cpu:
                gpu = largest_bytes + int(2 * total / gpus)
                per_param = 16
            else:
                gpu = largest_bytes + int(18 * total / gpus)
                per_param = None
            if per_param is not None:
                # Without zero.Init every process first holds the whole fp32 model (4 bytes a parameter).
                factor = per_param / nodes if zero_init else max(4 * gpus_per_node, per_param / nodes)
                cpu = total * factor * buffer_factor
            else:
                cpu = (largest if zero_init else total) * 4 * gpus_per_node * buffer_factor
            rows.append(("cpu" if param_cpu else "none", "cpu" if opt_cpu else "none", int(zero_init), int(cpu),
                         int(gpu)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--zplan", help="zplan estimate --json output for the same model and world")
    args = ap.parse_args()
    total, largest, name = count_params(args.model)
    print(f"model: {total / 1e6:.1f}M parameters, largest module {name}: {largest / 1e6:.1f}M")
    print(f"DeepSpeed estimate_zero3_model_states_mem_needs_all_live, {args.nodes} node(s) x "
          f"{args.gpus_per_node} GPUs:")
    print("  offload_param offload_optimizer zero_init   per CPU (GiB)  per GPU (GiB)")
    for param, opt, zi, cpu, gpu in deepspeed_zero3(total, largest, args.gpus_per_node, args.nodes):
        print(f"  {param:>13} {opt:>17} {zi:>9} {cpu / GIB:15.2f} {gpu / GIB:14.2f}")
    if not args.zplan:
        return 0
    with open(args.zplan) as f:
        est = json.load(f)
    print(f"zplan estimate (world {est['world']}, batch {est['batch']}, seq {est['seq']}, {est['dtype']}, "
          f"target {est['target']}), ZeRO-3, tp 1:")
    print("  offload_param offload_optimizer recompute  GPU: params  optim  activ  buffers  peak  "
          "| host/node (GiB)")
    for r in est["rows"]:
        if r["zero"] != 3 or r["tp"] != 1:
            continue
        if r["status"] != "ok":
            print(f"  {r['offload_param']:>13} {r['offload_optimizer']:>17} {r['recompute']:>9}  {r['status']}: "
                  f"{r['reason'][:70]}")
            continue
        d, h = r["device"], r["host"]
        print(f"  {r['offload_param']:>13} {r['offload_optimizer']:>17} {r['recompute']:>9}  "
              f"{d['param_bytes'] / GIB:11.2f} {d['optimizer_bytes'] / GIB:6.2f} {d['activation_bytes'] / GIB:6.2f} "
              f"{d['buffer_bytes'] / GIB:8.2f} {d['planned_peak_bytes'] / GIB:5.2f}  | {h['node_bytes'] / GIB:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
