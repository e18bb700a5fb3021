// The CPU backend: ordinary memory for both arenas, the reference kernels for every compute opcode.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernel_args.h"
#include "zk/cpu_kernels.h"
#include "zrt/backend.h"

namespace zrt {
namespace {

// The dispatch below maps unary and binary opcodes onto the kernels' enums by value; these pin the
// correspondence between the op registry (zrt/ops.def) and the kernels.
static_assert(static_cast<int>(zk::cpu::Unary::silu) == static_cast<int>(Op::silu), "unary opcodes");
static_assert(static_cast<int>(zk::cpu::Unary::gelu_tanh) == static_cast<int>(Op::gelu_tanh), "unary opcodes");
static_assert(static_cast<int>(zk::cpu::Binary::greater_equal) + 32 == static_cast<int>(Op::greater_equal),
              "binary opcodes");
static_assert(static_cast<int>(zk::cpu::Binary::and_) + 32 == static_cast<int>(Op::and_), "binary opcodes");
static_assert(static_cast<int>(zk::DType::bool8) == static_cast<int>(DType::bool8), "dtypes");

class CpuBackend final : public Backend {
 public:
  const char *name() const override { return "cpu"; }
  BackendKind kind() const override { return BackendKind::cpu; }

  Status allocate(MemSpace space, size_t bytes, void **out) override {
    // 64-byte alignment suits every dtype and the vector units; a zero-byte arena still gets a pointer. The
    // host arena is page-aligned: NVMe staging buffers in it are read and written with direct I/O (plan 2.3).
    void *p = nullptr;
    if (posix_memalign(&p, space == MemSpace::host ? 4096 : 64, bytes ? bytes : 64) != 0 || !p)
      return error(Code::backend_error, "cpu: cannot allocate " + std::to_string(bytes) + " bytes");
    *out = p;
    return {};
  }
  void deallocate(MemSpace, void *p) override { std::free(p); }
  Status write(MemSpace, void *dst, const void *src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
    return {};
  }
  Status read(MemSpace, void *dst, const void *src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
    return {};
  }
  Status zero(MemSpace, void *dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
    return {};
  }
  Status copy_blocks(void *dst, size_t dst_stride, const void *src, size_t src_stride, size_t block,
                     size_t count) override {
    auto *d = static_cast<uint8_t *>(dst);
    const auto *s = static_cast<const uint8_t *>(src);
    for (size_t i = 0; i < count; ++i) std::memmove(d + i * dst_stride, s + i * src_stride, block);
    return {};
  }

  Status prepare(const RankInfo &rank, const std::vector<Step> &steps, size_t *scratch_bytes) override {
    rank_ = rank;
    size_t need = 0;
    for (const Step &s : steps) {
      size_t n = 0;
      switch (s.op) {
        case Op::matmul:
          n = zk::cpu::matmul_scratch(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0,
                                      s.ints[1] != 0);
          break;
        case Op::linear:
        case Op::linear_residual:
          n = zk::cpu::linear_scratch(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0);
          break;
        case Op::linear_multi:
          for (size_t i = 1; i < s.inputs.size(); ++i)
            n = std::max(n, zk::cpu::linear_scratch(in_of(s.inputs[0]), in_of(s.inputs[i]), out_of(s.outputs[i - 1]),
                                                    s.ints[0] != 0));
          break;
        case Op::linear_gated:
          n = zk::cpu::linear_gated_scratch(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                                            s.ints[0] != 0);
          break;
        case Op::norm_products: {
          zk::In w[4];
          zk::Out o[4];
          const int nw = std::min<int>(4, static_cast<int>(s.inputs.size()) - 3);
          for (int i = 0; i < nw; ++i) w[i] = in_of(s.inputs[3 + i]);
          for (size_t i = 1; i < s.outputs.size() && i <= 4; ++i) o[i - 1] = out_of(s.outputs[i]);
          n = zk::cpu::norm_products_scratch(in_of(s.inputs[0]), w, o, nw, false, zk::cpu::Unary::silu,
                                             s.ints[1] != 0);
          break;
        }
        case Op::attention: n = zk::cpu::attention_scratch(in_of(s.inputs[0]), in_of(s.inputs[1])); break;
        case Op::attention_grad: n = zk::cpu::attention_grad_scratch(in_of(s.inputs[0]), in_of(s.inputs[1])); break;
        case Op::layer_norm_grad:
          n = zk::cpu::layer_norm_grad_scratch(in_of(s.inputs[0]), static_cast<int>(s.ints[0]));
          break;
        case Op::rms_norm_grad: n = zk::cpu::rms_norm_grad_scratch(in_of(s.inputs[0])); break;
        case Op::embedding_grad: n = zk::cpu::embedding_grad_scratch(out_of(s.outputs[0])); break;
        case Op::sample: n = zk::cpu::sample_scratch(in_of(s.inputs[0])); break;
        case Op::cached_attention: n = zk::cpu::cached_attention_scratch(in_of(s.inputs[1])); break;
        case Op::rope_kv_write: n = zk::cpu::rope_kv_write_scratch(in_of(s.inputs[1])); break;
        case Op::rope_attention:
          n = zk::cpu::rope_attention_scratch(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[5]));
          break;
        case Op::decode_layer: n = zk::cpu::decode_layer_scratch(decode_layer_in(s), in_of(s.inputs[1])); break;
        default: break;
      }
      need = std::max(need, n);
    }
    scratch_.assign(need, 0.0f);
    *scratch_bytes = need * sizeof(float);
    return {};
  }

  Status execute(const Step &s) override {
    zk::Result r = dispatch(s);
    if (!r.ok()) return error(Code::backend_error, r.error);
    return {};
  }
  Status synchronize() override { return {}; }

 private:
  zk::Result dispatch(const Step &s) {
    using namespace zk::cpu;
    const Op op = s.op;
    const int v = static_cast<int>(s.op);
    float *scratch = scratch_.empty() ? nullptr : scratch_.data();
    if (s.category == OpCategory::unary) {
      if (op == Op::cast) return cast(in_of(s.inputs[0]), out_of(s.outputs[0]));
      if (op == Op::not_) return unary(Unary::not_, in_of(s.inputs[0]), out_of(s.outputs[0]));
      if (v <= static_cast<int>(Op::silu)) return unary(static_cast<Unary>(v), in_of(s.inputs[0]), out_of(s.outputs[0]));
    }
    if (s.category == OpCategory::binary && v <= static_cast<int>(Op::greater_equal))
      return binary(static_cast<Binary>(v - static_cast<int>(Op::add)), in_of(s.inputs[0]), in_of(s.inputs[1]),
                    out_of(s.outputs[0]));
    switch (op) {
      case Op::where: return where(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]));
      case Op::matmul:
        return matmul(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0, s.ints[1] != 0, scratch);
      case Op::linear:
        return linear(in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 2), out_of(s.outputs[0]), s.ints[0] != 0,
                      static_cast<float>(s.floats[0]), scratch);
      case Op::linear_residual:
        // Plan 2.13: the product and the residual add after it, the sum rounded once (as the GPU's epilogue).
        return linear_residual(in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 3), in_of(s.inputs[2]),
                               out_of(s.outputs[0]), s.ints[0] != 0, static_cast<float>(s.floats[0]), scratch);
      case Op::linear_multi: {
        // The plan's fused few-row products (plan 2.9): each weight's product, as linear computes it.
        zk::In w[4];
        zk::Out o[4];
        const int n = static_cast<int>(s.outputs.size());
        if (n < 1 || n > 4 || s.inputs.size() != static_cast<size_t>(n) + 1)
          return zk::Result::fail("linear_multi: needs one output per weight, two to four");
        for (int i = 0; i < n; ++i) {
          w[i] = in_of(s.inputs[1 + i]);
          o[i] = out_of(s.outputs[i]);
        }
        return linear_multi(in_of(s.inputs[0]), w, o, n, s.ints[0] != 0, static_cast<float>(s.floats[0]), scratch);
      }
      case Op::norm_products: {
        // Plan 2.12: the residual add and RMS norm folded into the few-row products, as the unfused steps.
        zk::In w[4];
        zk::Out o[4];
        const bool gated = s.ints[1] != 0;
        const int n = static_cast<int>(s.inputs.size()) - 3;
        if (n < 1 || n > 4 || s.outputs.size() != (gated ? 2u : static_cast<size_t>(n) + 1))
          return zk::Result::fail("norm_products: needs the sum and the products' outputs");
        for (int i = 0; i < n; ++i) w[i] = in_of(s.inputs[3 + i]);
        for (size_t i = 1; i < s.outputs.size(); ++i) o[i - 1] = out_of(s.outputs[i]);
        return norm_products(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), w, out_of(s.outputs[0]), o,
                             n, s.ints[0] != 0, static_cast<Unary>(gated ? s.ints[1] : 0), gated,
                             static_cast<float>(s.floats[0]), static_cast<float>(s.floats[1]), scratch);
      }
      case Op::linear_gated:
        return linear_gated(static_cast<Unary>(s.ints[1]), in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]),
                            out_of(s.outputs[0]), s.ints[0] != 0, static_cast<float>(s.floats[0]), scratch);
      case Op::softmax: return softmax(in_of(s.inputs[0]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]));
      case Op::layer_norm:
        return layer_norm(in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 2), out_of(s.outputs[0]),
                          static_cast<int>(s.ints[0]), static_cast<float>(s.floats[0]));
      case Op::rms_norm:
        return rms_norm(in_of(s.inputs[0]), opt_in(s, 1), out_of(s.outputs[0]), static_cast<float>(s.floats[0]));
      case Op::rotary:
        return rotary(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]), s.ints[0] != 0,
                      s.ints.size() > 1 && s.ints[1] != 0);
      case Op::reduce_sum:
      case Op::reduce_mean:
      case Op::reduce_max: {
        const Reduce r = op == Op::reduce_sum ? Reduce::sum : op == Op::reduce_mean ? Reduce::mean : Reduce::max;
        return reduce(r, in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data() + 1,
                      static_cast<int>(s.ints.size()) - 1, s.ints[0] != 0);
      }
      case Op::transpose: return transpose(in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data());
      case Op::reshape:
      case Op::prefetch:
      case Op::evict: {
        // A reshape planned as an alias shares its input's storage: nothing to move.
        const TensorRef &a = s.inputs[0], &b = s.outputs[0];
        if (a.data != b.data) std::memmove(b.data, a.data, static_cast<size_t>(a.numel()) * dtype_size(a.dtype));
        return {};
      }
      case Op::concat: {
        zk::In xs[64];
        if (s.inputs.size() > 64) return zk::Result::fail("concat: more than 64 operands");
        for (size_t i = 0; i < s.inputs.size(); ++i) xs[i] = in_of(s.inputs[i]);
        return concat(xs, static_cast<int>(s.inputs.size()), out_of(s.outputs[0]), static_cast<int>(s.ints[0]));
      }
      case Op::local_slice: {
        const std::vector<int64_t> se = local_slice_bounds(s, rank_.tp_index());
        return slice(in_of(s.inputs[0]), out_of(s.outputs[0]), se.data(), se.data() + s.inputs[0].rank);
      }
      case Op::slice: {
        const int r = s.inputs[0].rank;
        return slice(in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data(), s.ints.data() + r);
      }
      case Op::gather:
        return gather(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]));
      case Op::expand: return expand(in_of(s.inputs[0]), out_of(s.outputs[0]));
      case Op::embedding:
        return embedding(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                         static_cast<int64_t>(rank_.tp_index()) * s.ints[0]);
      case Op::fill: return fill(s.floats[0], out_of(s.outputs[0]));
      case Op::attention: {
        // Plan 2.8: ints[2..10] are q, k and v's packing (offset, row stride, heads), zk::cpu::AttnPacked.
        AttnPacked packed[3];
        const bool has_packed = s.ints.size() >= 11;
        for (int i = 0; has_packed && i < 3; ++i) packed[i] = {s.ints[2 + 3 * i], s.ints[3 + 3 * i], s.ints[4 + 3 * i]};
        return attention(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), opt_in(s, 3), out_of(s.outputs[0]),
                         opt_out(s, 1), s.ints[0] != 0, static_cast<float>(s.floats[0]),
                         s.ints.size() > 1 ? static_cast<int>(s.ints[1]) : 0, has_packed ? packed : nullptr, scratch);
      }
      // Run-time ops of decoder exports.
      case Op::floor: return zk::cpu::floor(in_of(s.inputs[0]), out_of(s.outputs[0]));
      case Op::is_nan: return zk::cpu::is_nan(in_of(s.inputs[0]), out_of(s.outputs[0]));
      case Op::mod: return mod(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0);
      case Op::reduce_min:
      case Op::reduce_prod:
        return reduce(op == Op::reduce_min ? Reduce::min : Reduce::prod, in_of(s.inputs[0]), out_of(s.outputs[0]),
                      s.ints.data() + 1, static_cast<int>(s.ints.size()) - 1, s.ints[0] != 0);
      case Op::cumsum:
        return cumsum(in_of(s.inputs[0]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]), s.ints[1] != 0, s.ints[2] != 0);
      case Op::range: return range(in_of(s.inputs[0]), in_of(s.inputs[2]), out_of(s.outputs[0]));
      case Op::gather_nd:
        return gather_nd(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]));
      case Op::gather_elements:
        return gather_elements(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]));
      case Op::tile: return tile(in_of(s.inputs[0]), out_of(s.outputs[0]));
      // Training (docs/training-contract.md).
      case Op::gelu_tanh_grad:
      case Op::gelu_erf_grad:
      case Op::silu_grad: {
        const Unary act = op == Op::gelu_tanh_grad ? Unary::gelu_tanh : op == Op::gelu_erf_grad ? Unary::gelu_erf : Unary::silu;
        return act_grad(act, in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]));
      }
      case Op::softmax_grad:
        return softmax_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]));
      case Op::layer_norm_grad:
        return layer_norm_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]),
                               out_of(s.outputs[1]), out_of(s.outputs[2]), static_cast<int>(s.ints[0]),
                               static_cast<float>(s.floats[0]), scratch);
      case Op::rms_norm_grad:
        return rms_norm_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]),
                             out_of(s.outputs[1]), static_cast<float>(s.floats[0]), scratch);
      case Op::attention_grad:
        return attention_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), in_of(s.inputs[3]),
                              in_of(s.inputs[4]), in_of(s.inputs[5]), opt_in(s, 6), out_of(s.outputs[0]),
                              out_of(s.outputs[1]), out_of(s.outputs[2]), s.ints[0] != 0,
                              static_cast<float>(s.floats[0]), scratch);
      case Op::embedding_grad:
        return embedding_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                              static_cast<int64_t>(rank_.tp_index()) * s.ints[0], scratch);
      case Op::label_pick:
        return label_pick(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                          static_cast<int64_t>(rank_.tp_index()) * s.ints[0], s.ints[1]);
      case Op::label_pick_grad:
        return label_pick_grad(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                               static_cast<int64_t>(rank_.tp_index()) * s.ints[0], s.ints[1]);
      case Op::sum_squares: return sum_squares(in_of(s.inputs[0]), out_of(s.outputs[0]));
      case Op::sample: {
        SampleParams sp;
        const zk::Result r = sample_params(in_of(s.inputs[1]), in_of(s.inputs[2]), in_of(s.inputs[3]),
                                           in_of(s.inputs[4]), in_of(s.inputs[5]), &sp);
        if (!r.ok()) return r;
        // Rows of a batch split over dp are numbered globally, so dp ranks draw independent numbers.
        if (!s.ints.empty() && s.ints[0] != 0) sp.row_offset = static_cast<int64_t>(rank_.dp_index()) * s.inputs[0].shape[0];
        return sample(in_of(s.inputs[0]), sp, out_of(s.outputs[0]), scratch);
      }
      case Op::adamw: {
        const AdamWParams hp{s.floats[0], s.floats[1], s.floats[2], s.floats[3]};
        if (pooled_adamw(s, hp)) return {};
        return adamw(out_of(s.outputs[0]), in_of(s.inputs[1]), out_of(s.outputs[1]), out_of(s.outputs[2]),
                     in_of(s.inputs[4]), in_of(s.inputs[5]), in_of(s.inputs[6]), hp);
      }
      case Op::accumulate: return accumulate(out_of(s.outputs[0]), in_of(s.inputs[1]));
      case Op::kv_write: return kv_write(out_of(s.outputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]));
      case Op::rope_kv_write:
        return rope_kv_write(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), in_of(s.inputs[3]),
                             in_of(s.inputs[4]), in_of(s.inputs[7]), out_of(s.outputs[0]), out_of(s.outputs[1]),
                             out_of(s.outputs[2]), scratch);
      case Op::cached_attention:
        return cached_attention(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), in_of(s.inputs[3]),
                                out_of(s.outputs[0]), static_cast<float>(s.floats[0]), scratch);
      case Op::rope_attention:
        return rope_attention(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), in_of(s.inputs[3]),
                              in_of(s.inputs[4]), in_of(s.inputs[7]), out_of(s.outputs[0]), out_of(s.outputs[1]),
                              out_of(s.outputs[2]), static_cast<float>(s.floats[0]), scratch);
      case Op::decode_layer:
        // Plan 2.17: a decoder layer at decode, as the steps it replaces (the sync state is the GPU kernel's).
        return decode_layer(decode_layer_in(s), out_of(s.outputs[2]), out_of(s.outputs[3]), out_of(s.outputs[0]),
                            out_of(s.outputs[1]), static_cast<Unary>(s.ints[0]), static_cast<float>(s.floats[0]),
                            static_cast<float>(s.floats[1]), scratch);
      case Op::argmax: return argmax(in_of(s.inputs[0]), out_of(s.outputs[0]));
      case Op::take_rows: return take_rows(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]));
      case Op::release: return {};
      // The executor names the instruction and its op around this message.
      default: return zk::Result::fail("cpu backend: no kernel for this opcode");
    }
  }

  /// AdamW on fp32 tensors large enough to share out (the optimizer-offload path keeps exactly these in host
  /// memory): the threaded pool, which runs the reference's element loop over slices, so the result is the
  /// reference kernel's bit for bit. Returns false for what the reference kernel does instead.
  bool pooled_adamw(const Step &s, const zk::cpu::AdamWParams &hp) {
    const TensorRef &p = s.outputs[0], &g = s.inputs[1], &m = s.outputs[1], &v = s.outputs[2];
    const int64_t n = p.numel();
    if (p.dtype != DType::f32 || g.dtype != DType::f32 || m.dtype != DType::f32 || v.dtype != DType::f32 ||
        n < kPoolMinElements)
      return false;
    // Equal shapes, as the reference kernel requires (it names the mismatch).
    for (const TensorRef *x : {&g, &m, &v})
      if (x->rank != p.rank || !std::equal(p.shape, p.shape + p.rank, x->shape)) return false;
    const TensorRef &lr = s.inputs[4], &step = s.inputs[5], &gs = s.inputs[6];
    if (lr.dtype != DType::f32 || gs.dtype != DType::f32 || (step.dtype != DType::i64 && step.dtype != DType::i32))
      return false;
    const int64_t t = zk::load_i64(step.data, static_cast<zk::DType>(step.dtype), 0);
    if (t < 1) return true;  // a skipped step (fp16 loss scaling): nothing is written, as in the reference
    if (!pool_) {
      int threads = 0;
      if (const char *e = std::getenv("ZRT_ADAMW_THREADS")) threads = std::atoi(e);
      pool_ = std::make_unique<zk::AdamWPool>(threads);
    }
    const zk::cpu::AdamWStep st =
        zk::cpu::AdamWStep::from(hp, *static_cast<const float *>(lr.data), t, *static_cast<const float *>(gs.data));
    pool_->step(static_cast<float *>(p.data), static_cast<const float *>(g.data), static_cast<float *>(m.data),
                static_cast<float *>(v.data), n, st);
    return true;
  }
  /// Below this the update is cheaper than waking threads (AdamWPool runs it inline there too).
  static constexpr int64_t kPoolMinElements = 16384;

  RankInfo rank_;
  std::vector<float> scratch_;
  std::unique_ptr<zk::AdamWPool> pool_;  // made at the first update large enough to share out
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::unique_ptr<Backend>(new CpuBackend()); }

}  // namespace zrt
