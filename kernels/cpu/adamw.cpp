// AdamW exactly as torch.optim.AdamW's single-tensor path computes it: the per-step scalars in double
// (Python floats), applied to fp32 tensors as fp32, in PyTorch's operation order:
//   param.mul_(1 - lr * wd); m.lerp_(g, 1 - beta1); v.mul_(beta2).addcmul_(g, g, 1 - beta2);
//   param.addcdiv_(m, v.sqrt() / sqrt(1 - beta2^t) + eps, -lr / (1 - beta1^t)).
// One difference remains: PyTorch's vectorised lerp uses a fused multiply-add where the hardware has one,
// so m can differ from it in the last bit; the update here is the same on every machine.
// This file is compiled with -ffp-contract=off so that no multiply-add is fused (which would change the
// rounding), and with -fno-math-errno so that the square root vectorises. The reference kernel and the
// threaded pool both run adamw_f32, so they agree bit for bit.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common.h"

namespace zk {
namespace cpu {
namespace {

/// One element of the update; every variant below calls this, so there is one operation order.
inline void adamw_elem(float &p, float grad, float &m, float &v, const AdamWStep &s) {
  const float g = grad * s.grad_scale;
  float pp = p * s.decay;
  const float mm = m + s.one_m_b1 * (g - m);
  const float vv = v * s.beta2 + s.one_m_b2 * g * g;
  const float denom = std::sqrt(vv) / s.bc2_sqrt + s.eps;
  pp = pp + (-s.step_size) * mm / denom;  // addcdiv computes self + (value * t1) / t2
  p = pp;
  m = mm;
  v = vv;
}

}  // namespace

AdamWStep AdamWStep::from(const AdamWParams &p, double lr, int64_t step, double grad_scale) {
  AdamWStep s;
  const double t = static_cast<double>(step);
  s.decay = static_cast<float>(1.0 - lr * p.weight_decay);
  s.one_m_b1 = static_cast<float>(1.0 - p.beta1);
  s.beta2 = static_cast<float>(p.beta2);
  s.one_m_b2 = static_cast<float>(1.0 - p.beta2);
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(p.beta1, t)));
  s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(p.beta2, t)));
  s.eps = static_cast<float>(p.eps);
  s.grad_scale = static_cast<float>(grad_scale);
  return s;
}

void adamw_f32(float *__restrict param, const float *__restrict grad, float *__restrict m, float *__restrict v, int64_t n,
               const AdamWStep &st) {
  // A copy of the scalars in locals lets the compiler keep them in registers and vectorise the loop.
  const AdamWStep s = st;
  for (int64_t i = 0; i < n; ++i) adamw_elem(param[i], grad[i], m[i], v[i], s);
}

Result adamw(const Out &param, const In &grad, const Out &m, const Out &v, const In &lr, const In &step,
             const In &grad_scale, const AdamWParams &p) {
  if (grad.shape != param.shape || m.shape != param.shape || v.shape != param.shape)
    return Result::fail("adamw: param, grad, m and v shapes differ");
  if (!is_float(param.dtype) || !is_float(grad.dtype) || !is_float(m.dtype) || !is_float(v.dtype))
    return Result::fail("adamw: param, grad, m and v must be float");
  if (lr.shape.numel() != 1 || step.shape.numel() != 1 || grad_scale.shape.numel() != 1)
    return Result::fail("adamw: lr, step and grad_scale must be scalars");
  if (!is_float(lr.dtype) || is_float(step.dtype) || !is_float(grad_scale.dtype))
    return Result::fail("adamw: lr and grad_scale must be float, step an integer");
  const int64_t t = load_i64(step.data, step.dtype, 0);
  // Step 0 is a skipped step (fp16 dynamic loss scaling saw an overflow): nothing is written, as when
  // DeepSpeed does not call optimizer.step().
  if (t < 1) return {};
  const AdamWStep s = AdamWStep::from(p, load_f32(lr.data, lr.dtype, 0), t, load_f32(grad_scale.data, grad_scale.dtype, 0));
  const int64_t n = param.shape.numel();
  if (param.dtype == DType::f32 && grad.dtype == DType::f32 && m.dtype == DType::f32 && v.dtype == DType::f32) {
    adamw_f32(static_cast<float *>(param.data), static_cast<const float *>(grad.data), static_cast<float *>(m.data),
              static_cast<float *>(v.data), n, s);
    return {};
  }
  for (int64_t i = 0; i < n; ++i) {
    float pp = load_f32(param.data, param.dtype, i), mm = load_f32(m.data, m.dtype, i), vv = load_f32(v.data, v.dtype, i);
    adamw_elem(pp, load_f32(grad.data, grad.dtype, i), mm, vv, s);
    store_f32(param.data, param.dtype, i, pp);
    store_f32(m.data, m.dtype, i, mm);
    store_f32(v.data, v.dtype, i, vv);
  }
  return {};
}

}  // namespace cpu

/// The pool: workers sleep on a condition variable until the generation counter moves, run their slice
/// of the current job, and count down `pending`; the caller runs the first slice itself.
struct AdamWPool::Impl {
  std::mutex mu;
  std::condition_variable wake, done;
  std::vector<std::thread> workers;
  uint64_t generation = 0;
  int pending = 0;
  bool stop = false;
  // The current job.
  float *param = nullptr, *m = nullptr, *v = nullptr;
  const float *grad = nullptr;
  int64_t n = 0;
  cpu::AdamWStep s{};

  /// Slice `k` of `parts`, boundaries rounded to 16 floats (one cache line) so that no two threads write
  /// the same line.
  void run_slice(int k, int parts) const {
    const int64_t per = ((n + parts - 1) / parts + 15) / 16 * 16;
    const int64_t lo = std::min(n, per * k), hi = std::min(n, lo + per);
    if (hi > lo) cpu::adamw_f32(param + lo, grad + lo, m + lo, v + lo, hi - lo, s);
  }
};

AdamWPool::AdamWPool(int threads) : impl_(new Impl) {
  nthreads_ = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Impl *im = impl_;
  const int parts = nthreads_;
  for (int k = 1; k < parts; ++k)
    im->workers.emplace_back([im, k, parts] {
      uint64_t seen = 0;
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(im->mu);
          im->wake.wait(lock, [&] { return im->stop || im->generation != seen; });
          if (im->stop) return;
          seen = im->generation;
        }
        im->run_slice(k, parts);
        std::lock_guard<std::mutex> lock(im->mu);
        if (--im->pending == 0) im->done.notify_one();
      }
    });
}

AdamWPool::~AdamWPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  for (std::thread &t : impl_->workers) t.join();
  delete impl_;
}

void AdamWPool::step(float *param, const float *grad, float *m, float *v, int64_t n, const cpu::AdamWStep &s) {
  // Below a few pages of parameters, waking the workers costs more than the update.
  if (nthreads_ == 1 || n < 16384) {
    cpu::adamw_f32(param, grad, m, v, n, s);
    return;
  }
  Impl *im = impl_;
  {
    std::lock_guard<std::mutex> lock(im->mu);
    im->param = param;
    im->grad = grad;
    im->m = m;
    im->v = v;
    im->n = n;
    im->s = s;
    im->pending = nthreads_ - 1;
    ++im->generation;
  }
  im->wake.notify_all();
  im->run_slice(0, nthreads_);
  std::unique_lock<std::mutex> lock(im->mu);
  im->done.wait(lock, [&] { return im->pending == 0; });
}

}  // namespace zk
