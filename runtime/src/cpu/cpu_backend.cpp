// The CPU backend: ordinary memory for both arenas, the reference kernels for every compute opcode.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "zk/cpu_kernels.h"
#include "zrt/backend.h"
#include "zrt/plan_generated.h"

namespace zrt {
namespace {

// The dispatch below maps opcodes onto the kernels' enums by value; these pin the correspondence.
static_assert(static_cast<int>(zk::cpu::Unary::silu) == static_cast<int>(fb::Op::silu), "unary opcodes");
static_assert(static_cast<int>(zk::cpu::Unary::gelu_tanh) == static_cast<int>(fb::Op::gelu_tanh), "unary opcodes");
static_assert(static_cast<int>(zk::cpu::Binary::greater_equal) + 32 == static_cast<int>(fb::Op::greater_equal),
              "binary opcodes");
static_assert(static_cast<int>(zk::cpu::Binary::and_) + 32 == static_cast<int>(fb::Op::and_), "binary opcodes");
static_assert(static_cast<int>(zk::DType::bool8) == static_cast<int>(fb::DType::bool8), "dtypes");
static_assert(static_cast<int>(DType::bool8) == static_cast<int>(fb::DType::bool8), "dtypes");

zk::In in_of(const TensorRef &t) {
  zk::In r;
  r.data = t.data;
  r.dtype = static_cast<zk::DType>(t.dtype);
  r.shape.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) r.shape.d[i] = t.shape[i];
  return r;
}

zk::Out out_of(const TensorRef &t) {
  zk::Out r;
  r.data = t.data;
  r.dtype = static_cast<zk::DType>(t.dtype);
  r.shape.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) r.shape.d[i] = t.shape[i];
  return r;
}

/// An absent optional operand.
zk::In opt_in(const Step &s, size_t i) { return i < s.inputs.size() ? in_of(s.inputs[i]) : zk::In{}; }

class CpuBackend final : public Backend {
 public:
  const char *name() const override { return "cpu"; }
  BackendKind kind() const override { return BackendKind::cpu; }

  Status allocate(MemSpace, size_t bytes, void **out) override {
    // 64-byte alignment suits every dtype and the vector units; a zero-byte arena still gets a pointer.
    void *p = nullptr;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0 || !p)
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
      switch (static_cast<fb::Op>(s.op)) {
        case fb::Op::matmul:
          n = zk::cpu::matmul_scratch(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0,
                                      s.ints[1] != 0);
          break;
        case fb::Op::linear:
          n = zk::cpu::linear_scratch(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0);
          break;
        case fb::Op::attention: n = zk::cpu::attention_scratch(in_of(s.inputs[0]), in_of(s.inputs[1])); break;
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
    const auto op = static_cast<fb::Op>(s.op);
    const int v = static_cast<int>(s.op);
    float *scratch = scratch_.empty() ? nullptr : scratch_.data();
    if (v <= 15) return unary(static_cast<Unary>(v), in_of(s.inputs[0]), out_of(s.outputs[0]));
    if (op == fb::Op::cast) return cast(in_of(s.inputs[0]), out_of(s.outputs[0]));
    if (op == fb::Op::not_) return unary(Unary::not_, in_of(s.inputs[0]), out_of(s.outputs[0]));
    if (v >= 32 && v <= 45)
      return binary(static_cast<Binary>(v - 32), in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]));
    switch (op) {
      case fb::Op::where: return where(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), out_of(s.outputs[0]));
      case fb::Op::matmul:
        return matmul(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), s.ints[0] != 0, s.ints[1] != 0, scratch);
      case fb::Op::linear:
        return linear(in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 2), out_of(s.outputs[0]), s.ints[0] != 0,
                      static_cast<float>(s.floats[0]), scratch);
      case fb::Op::softmax: return softmax(in_of(s.inputs[0]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]));
      case fb::Op::layer_norm:
        return layer_norm(in_of(s.inputs[0]), in_of(s.inputs[1]), opt_in(s, 2), out_of(s.outputs[0]),
                          static_cast<int>(s.ints[0]), static_cast<float>(s.floats[0]));
      case fb::Op::rms_norm:
        return rms_norm(in_of(s.inputs[0]), opt_in(s, 1), out_of(s.outputs[0]), static_cast<float>(s.floats[0]));
      case fb::Op::reduce_sum:
      case fb::Op::reduce_mean:
      case fb::Op::reduce_max: {
        const Reduce r = op == fb::Op::reduce_sum ? Reduce::sum : op == fb::Op::reduce_mean ? Reduce::mean : Reduce::max;
        return reduce(r, in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data() + 1,
                      static_cast<int>(s.ints.size()) - 1, s.ints[0] != 0);
      }
      case fb::Op::transpose: return transpose(in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data());
      case fb::Op::reshape:
      case fb::Op::prefetch:
      case fb::Op::evict: {
        // A reshape planned as an alias shares its input's storage: nothing to move.
        const TensorRef &a = s.inputs[0], &b = s.outputs[0];
        if (a.data != b.data) std::memmove(b.data, a.data, static_cast<size_t>(a.numel()) * dtype_size(a.dtype));
        return {};
      }
      case fb::Op::concat: {
        zk::In xs[64];
        if (s.inputs.size() > 64) return zk::Result::fail("concat: more than 64 operands");
        for (size_t i = 0; i < s.inputs.size(); ++i) xs[i] = in_of(s.inputs[i]);
        return concat(xs, static_cast<int>(s.inputs.size()), out_of(s.outputs[0]), static_cast<int>(s.ints[0]));
      }
      case fb::Op::slice: {
        const int r = s.inputs[0].rank;
        return slice(in_of(s.inputs[0]), out_of(s.outputs[0]), s.ints.data(), s.ints.data() + r);
      }
      case fb::Op::gather:
        return gather(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]), static_cast<int>(s.ints[0]));
      case fb::Op::expand: return expand(in_of(s.inputs[0]), out_of(s.outputs[0]));
      case fb::Op::embedding:
        return embedding(in_of(s.inputs[0]), in_of(s.inputs[1]), out_of(s.outputs[0]),
                         static_cast<int64_t>(rank_.tp_index()) * s.ints[0]);
      case fb::Op::fill: return fill(s.floats[0], out_of(s.outputs[0]));
      case fb::Op::attention:
        return attention(in_of(s.inputs[0]), in_of(s.inputs[1]), in_of(s.inputs[2]), opt_in(s, 3), out_of(s.outputs[0]),
                         s.ints[0] != 0, static_cast<float>(s.floats[0]), scratch);
      case fb::Op::release: return {};
      default: return zk::Result::fail("cpu backend: opcode is not a compute op");
    }
  }

  RankInfo rank_;
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::unique_ptr<Backend>(new CpuBackend()); }

}  // namespace zrt
