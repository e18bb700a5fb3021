// Hand-built plans with the training opcodes and the run-time ops of decoder exports, shared by the CPU
// backend's test (tests/runtime/test_train_plan.cpp: exactly the direct kernel calls) and the CUDA
// backend's (tests/cuda/train_backend_test.cpp: the CPU backend's outputs within tolerance).
#ifndef ZRT_TESTS_TRAIN_PLAN_CASES_H
#define ZRT_TESTS_TRAIN_PLAN_CASES_H

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plan_builder.h"
#include "test_plans.h"
#include "zk/cpu_kernels.h"
#include "zrt/zrt.h"

namespace zrt_test {
namespace train_cases {

using zrt::Op;

inline const fb::DType F = fb::DType::f32, I64 = fb::DType::i64;

inline zk::Dims dims(const Shape &s) {
  zk::Dims d;
  zk::Dims::from(s.data(), static_cast<int>(s.size()), &d);
  return d;
}

/// A plan under construction plus the host data of its inputs, run through a Session.
struct Case {
  PlanBuilder p{1, 1};
  std::map<std::string, std::vector<uint8_t>> data;  // input name -> bytes
  std::map<int, std::string> out_names;               // tensor -> output name

  int in(const std::string &name, fb::DType dt, const Shape &s, uint64_t seed) {
    const int t = p.input(name, dt, s, false);
    const int64_t n = numel(s);
    std::vector<uint8_t> b(static_cast<size_t>(n) * esize(dt));
    std::vector<float> v = lcg(static_cast<size_t>(n), seed);
    for (int64_t i = 0; i < n; ++i) {
      if (dt == F) std::memcpy(b.data() + i * 4, &v[i], 4);
      else zk::store_i64(b.data(), static_cast<zk::DType>(dt), i, static_cast<int64_t>((v[i] + 1) * 4));  // 0 .. 7
    }
    data[name] = b;
    return t;
  }
  int scalar(const std::string &name, fb::DType dt, double v) {
    const int t = p.input(name, dt, {}, false);
    std::vector<uint8_t> b(esize(dt));
    zk::store_f32(b.data(), static_cast<zk::DType>(dt), 0, static_cast<float>(v));
    if (dt == I64) zk::store_i64(b.data(), zk::DType::i64, 0, static_cast<int64_t>(v));
    data[name] = b;
    return t;
  }
  int out(const std::string &name, fb::DType dt, const Shape &s) {
    PlanBuilder::IO o{name, 0, s, false};
    o.tensor = p.tensor(name, dt, s, fb::TensorKind::output);
    p.outputs.push_back(o);
    out_names[o.tensor] = name;
    return o.tensor;
  }
  int act(const std::string &name, fb::DType dt, const Shape &s) { return p.tensor(name, dt, s); }

  /// Runs the plan on `backend` (the fingerprint follows); `got` maps each output name to its bytes.
  void run(std::map<std::string, std::vector<uint8_t>> *got, zrt::BackendKind backend = zrt::BackendKind::cpu) {
    p.backend = backend == zrt::BackendKind::cuda ? fb::Backend::cuda : fb::Backend::cpu;
    std::vector<uint8_t> f = p.file();
    std::unique_ptr<zrt::Session> s;
    zrt::Options o;
    o.backend = backend;
    zrt::Status st = zrt::Session::open_buffer(f.data(), f.size(), ".", o, &s);
    ASSERT_TRUE(st.ok()) << st.message();
    for (auto &kv : data) ASSERT_TRUE(s->bind_input(kv.first, kv.second.data(), kv.second.size()).ok()) << kv.first;
    st = s->run();
    ASSERT_TRUE(st.ok()) << st.message();
    for (const PlanBuilder::IO &o : p.outputs) {
      const PlanBuilder::T &t = p.tensors[o.tensor];
      std::vector<uint8_t> b(static_cast<size_t>(numel(t.shape)) * esize(t.dtype));
      ASSERT_TRUE(s->read_output(o.name, b.data(), b.size()).ok()) << o.name;
      (*got)[o.name] = b;
    }
  }
  zk::In kin(const std::string &name, fb::DType dt, const Shape &s) {
    return zk::In{data[name].data(), static_cast<zk::DType>(dt), dims(s)};
  }
};

/// gelu_tanh_grad, softmax + softmax_grad, layer_norm_grad, rms_norm_grad and sum_squares on x [4, 6].
inline Case backward_ops() {
  Case c;
  const Shape xs{4, 6};
  const int x = c.in("x", F, xs, 1), dy = c.in("dy", F, xs, 2), sc = c.in("scale", F, {6}, 3);
  const int g = c.out("gelu_grad", F, xs), sm = c.act("sm", F, xs), smg = c.out("softmax_grad", F, xs);
  const int dx = c.out("ln_dx", F, xs), ds = c.out("ln_dscale", F, {6}), db = c.out("ln_dbias", F, {6});
  const int rdx = c.out("rms_dx", F, xs), rds = c.out("rms_dscale", F, {6}), ss = c.out("sum_squares", F, {});
  c.p.op(Op::gelu_tanh_grad, {x, dy}, {g});
  c.p.op(Op::softmax, {x}, {sm}, {1});
  c.p.op(Op::softmax_grad, {sm, dy}, {smg}, {1});
  c.p.op(Op::layer_norm_grad, {x, sc, dy}, {dx, ds, db}, {1}, {1e-5});
  c.p.op(Op::rms_norm_grad, {x, sc, dy}, {rdx, rds}, {}, {1e-6});
  c.p.op(Op::sum_squares, {dx}, {ss});
  return c;
}

/// attention with lse, then attention_grad.
inline Case attention_ops() {
  // GQA (4 query heads on 2 kv heads), causal with S < T.
  Case c;
  const Shape qs{1, 4, 3, 4}, ks{1, 2, 5, 4}, ls{1, 4, 3};
  const int q = c.in("q", F, qs, 4), k = c.in("k", F, ks, 5), v = c.in("v", F, ks, 6), dout = c.in("dout", F, qs, 7);
  const int out = c.out("out", F, qs), lse = c.out("lse", F, ls);
  const int dq = c.out("dq", F, qs), dk = c.out("dk", F, ks), dv = c.out("dv", F, ks);
  c.p.op(Op::attention, {q, k, v, -1}, {out, lse}, {1}, {0.5});
  c.p.op(Op::attention_grad, {q, k, v, out, dout, lse, -1}, {dq, dk, dv}, {1}, {0.5});
  return c;
}

/// embedding_grad, label_pick and label_pick_grad (tp 1; label 3 is the ignore_index).
inline Case embedding_ops() {
  Case c;
  const int ids = c.in("ids", I64, {2, 3}, 8), dy = c.in("dy", F, {2, 3, 5}, 9);
  const int logits = c.in("logits", F, {6, 8}, 10), labels = c.in("labels", I64, {6}, 11), gy = c.in("gy", F, {6}, 12);
  const int dt = c.out("dtable", F, {8, 5}), pick = c.out("pick", F, {6}), dl = c.out("dlogits", F, {6, 8});
  c.p.op(Op::embedding_grad, {ids, dy}, {dt}, {0});
  c.p.op(Op::label_pick, {logits, labels}, {pick}, {0, 3});  // label 3 is the ignore_index
  c.p.op(Op::label_pick_grad, {labels, gy}, {dl}, {0, 3});
  return c;
}

/// Gradient accumulation and one AdamW step, in place on activations.
inline Case adamw_ops() {
  // Gradient accumulation twice into a zeroed buffer, then one AdamW step on a parameter copied from an
  // input; m, v start at zero. Bound inputs cannot be written, so the state lives in activations.
  Case c;
  const Shape s{40};
  const int p0 = c.in("p0", F, s, 13), g = c.in("g", F, s, 14);
  const int lr = c.scalar("lr", F, 1e-2), step = c.scalar("step", I64, 1), gs = c.scalar("grad_scale", F, 0.5);
  const int p = c.act("p", F, s), m = c.act("m", F, s), v = c.act("v", F, s), acc = c.act("acc", F, s);
  const int po = c.out("p_out", F, s), mo = c.out("m_out", F, s), vo = c.out("v_out", F, s);
  c.p.op(Op::copy, {p0}, {p});
  c.p.op(Op::fill, {}, {m}, {}, {0.0});
  c.p.op(Op::fill, {}, {v}, {}, {0.0});
  c.p.op(Op::fill, {}, {acc}, {}, {0.0});
  c.p.op(Op::accumulate, {acc, g}, {acc});
  c.p.op(Op::accumulate, {acc, g}, {acc});
  c.p.op(Op::adamw, {p, acc, m, v, lr, step, gs}, {p, m, v}, {}, {0.9, 0.999, 1e-8, 0.01});
  c.p.op(Op::copy, {p}, {po});
  c.p.op(Op::copy, {m}, {mo});
  c.p.op(Op::copy, {v}, {vo});
  return c;
}

/// range, cumsum, mod, floor, tile, gather_elements, reduce_min and reduce_prod.
inline Case runtime_ops() {
  Case c;
  const int start = c.scalar("start", I64, 2), limit = c.scalar("limit", I64, 14), delta = c.scalar("delta", I64, 3);
  const int x = c.in("x", F, {3, 4}, 15), ix = c.in("ix", I64, {3, 4}, 16), idx = c.in("idx", I64, {2, 4}, 17);
  const int r = c.out("range", I64, {4}), cs = c.out("cumsum", F, {3, 4}), md = c.out("mod", I64, {3, 4});
  const int fl = c.out("floor", F, {3, 4}), tl = c.out("tile", F, {6, 8}), ge = c.out("gather_elements", F, {2, 4});
  const int mn = c.out("reduce_min", F, {3}), pr = c.out("reduce_prod", F, {1, 4});
  c.p.op(Op::range, {start, limit, delta}, {r});
  c.p.op(Op::cumsum, {x}, {cs}, {1, 1, 1});  // exclusive, reverse
  c.p.op(Op::mod, {ix, delta}, {md}, {0});
  c.p.op(Op::floor, {x}, {fl});
  c.p.op(Op::tile, {x}, {tl}, {2, 2});
  c.p.op(Op::gather_elements, {x, idx}, {ge}, {0});
  c.p.op(Op::reduce_min, {x}, {mn}, {0, 1});
  c.p.op(Op::reduce_prod, {x}, {pr}, {1, 0});
  // gather_elements indices along axis 0 must stay below 3.
  for (int i = 0; i < 8; ++i) zk::store_i64(c.data["idx"].data(), zk::DType::i64, i, i % 3);
  return c;
}

}  // namespace train_cases
}  // namespace zrt_test

#endif  // ZRT_TESTS_TRAIN_PLAN_CASES_H
