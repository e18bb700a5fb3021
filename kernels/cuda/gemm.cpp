// Matrix products through cuBLASLt: ONNX MatMul with batch broadcast, and linear (x W + bias) with the
// bias / GELU epilogues that fuse the plan's bias + activation patterns into the product, and the residual
// add of linear_residual (cuBLASLt's C operand, beta = 1).
//
// Row-major to column-major: cuBLASLt is column-major, and a row-major C[M, N] is a column-major C^T[N, M].
// So C = op(A) op(B) is issued as C^T = op(B)^T op(A)^T: the library's first operand is our B, its second
// our A, m = N, n = M. Accumulation is fp32 for every dtype (CUBLAS_COMPUTE_32F, which also keeps fp32
// products off TF32 so that they match the reference to fp32 rounding).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>

#include "launch.h"
#include "zk/cuda_kernels.h"

namespace zk {
namespace cuda {

struct Blas::Impl {
  cublasLtHandle_t lt = nullptr;
  std::mutex mu;
  std::unordered_map<std::string, cublasLtMatmulAlgo_t> algos;
};


GpuStatus Blas::create(std::unique_ptr<Blas> *out) {
  std::unique_ptr<Blas> b(new Blas());
  b->impl_ = new Impl();
  ZK_CUBLAS_TRY(cublasLtCreate(&b->impl_->lt));
  *out = std::move(b);
  return {};
}

Blas::~Blas() {
  if (impl_ && impl_->lt) cublasLtDestroy(impl_->lt);
  delete impl_;
}

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

/// The alignment cuBLASLt may assume for a pointer: its lowest set bit, at most 256 bytes.
uint32_t alignment_of(const void *p) {
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  if (v == 0) return 256;
  uint32_t a = 1;
  while (a < 256 && (v & a) == 0) a <<= 1;
  return a;
}

/// RAII owners of the cuBLASLt descriptors of one call.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

/// One column-major product D[m, n] = alpha * opA(A)[m, k] opB(B)[k, n] (+ epilogue), `batch` times with
/// element strides between matrices (0 broadcasts an operand).
struct LtGemm {
  DType dtype;
  bool ta, tb;
  int64_t m, n, k;
  const void *A;
  int64_t lda, sa;
  const void *B;
  int64_t ldb, sb;
  void *C;
  int64_t ldc, sc;
  int64_t batch;
  float alpha;
  Epilogue epi;
  const void *bias;
  /// The residual added in the epilogue (C with beta = 1, D's layout), or null (beta = 0).
  const void *residual = nullptr;
  /// The plan's algorithm (plan 2.15), or null: the heuristic's first answer.
  const GemmAlgo *algo = nullptr;
};

/// An algorithm's configuration as the tuning table records it (zk/gemm_algos.h): each attribute read into a
/// 32-bit value, 0 where cuBLASLt does not give it that way (kernel_bench --gemm reads them the same way).
GemmAlgo config_of(const cublasLtMatmulAlgo_t &algo) {
  const cublasLtMatmulAlgoConfigAttributes_t attrs[GemmAlgo::kInts] = {
      CUBLASLT_ALGO_CONFIG_ID,          CUBLASLT_ALGO_CONFIG_TILE_ID,       CUBLASLT_ALGO_CONFIG_STAGES_ID,
      CUBLASLT_ALGO_CONFIG_SPLITK_NUM,  CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
      CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
  int32_t v[GemmAlgo::kInts] = {};
  for (int i = 0; i < GemmAlgo::kInts; ++i) {
    uint32_t u = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attrs[i], &u, sizeof(u), &written) == CUBLAS_STATUS_SUCCESS)
      v[i] = static_cast<int32_t>(u);
  }
  return {v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
}

bool same_config(const GemmAlgo &a, const GemmAlgo &b) {
  return a.id == b.id && a.tile == b.tile && a.stages == b.stages && a.splitk == b.splitk && a.swizzle == b.swizzle &&
         a.custom == b.custom && a.cluster == b.cluster;
}

/// cuBLASLt's heuristic answers for the product of `d` (at most kAnswers, each within the preference's
/// workspace and alignments), and of them the one to run: the first, or the one whose configuration is the
/// plan's `want`. The plan's algorithm is taken from cuBLASLt's own answers rather than assembled from its
/// configuration, since an answer carries more state than the configuration attributes expose (an algorithm
/// built with cublasLtMatmulAlgoInit from the table's attributes failed cublasLtMatmulAlgoCheck on the H200);
/// an answer list without it refuses the product, naming it.
GpuStatus pick_algo(cublasLtHandle_t lt, const LtDescs &d, const GemmAlgo *want, const char *key,
                    cublasLtMatmulAlgo_t *algo) {
  constexpr int kAnswers = 32;
  cublasLtMatmulHeuristicResult_t res[kAnswers] = {};
  int found = 0;
  ZK_CUBLAS_TRY(cublasLtMatmulAlgoGetHeuristic(lt, d.op, d.a, d.b, d.c, d.c, d.pref, want ? kAnswers : 1, res, &found));
  if (found == 0)
    return GpuStatus::fail(GpuLib::cublas, CUBLAS_STATUS_NOT_SUPPORTED,
                           std::string("cuBLASLt has no algorithm for the product ") + key);
  if (!want) {
    *algo = res[0].algo;
    return {};
  }
  for (int i = 0; i < found; ++i) {
    if (res[i].state == CUBLAS_STATUS_SUCCESS && same_config(config_of(res[i].algo), *want)) {
      *algo = res[i].algo;
      return {};
    }
  }
  char what[160];
  std::snprintf(what, sizeof what, "algorithm %d (tile %d, stages %d, split-k %d, swizzle %d, custom %d, cluster %d)",
                want->id, want->tile, want->stages, want->splitk, want->swizzle, want->custom, want->cluster);
  return GpuStatus::fail(GpuLib::cublas, CUBLAS_STATUS_NOT_SUPPORTED,
                         std::string("the plan's cuBLASLt ") + what + " for the product " + key +
                             " is not among this cuBLASLt's " + std::to_string(found) +
                             " answers for it here: recompile the plan for this GPU and library (zplan --gemm-algos off leaves "
                             "every product to cuBLASLt's first answer)");
}

GpuStatus set_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                     int64_t stride) {
  ZK_CUBLAS_TRY(cublasLtMatrixLayoutCreate(l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    int32_t bc = static_cast<int32_t>(batch);
    ZK_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
    ZK_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return {};
}

GpuStatus run_lt(Blas::Impl *impl, const LtGemm &g, void *ws, size_t ws_bytes, cudaStream_t s) {
  const cudaDataType_t t = cuda_type(g.dtype);
  LtDescs d;
  ZK_CUBLAS_TRY(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZK_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  ZK_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  switch (g.epi) {
    case Epilogue::none: break;
    case Epilogue::bias: epi = CUBLASLT_EPILOGUE_BIAS; break;
    case Epilogue::gelu: epi = CUBLASLT_EPILOGUE_GELU; break;
    case Epilogue::gelu_bias: epi = CUBLASLT_EPILOGUE_GELU_BIAS; break;
  }
  if (epi != CUBLASLT_EPILOGUE_DEFAULT)
    ZK_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (g.bias) ZK_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  ZK_GPU_TRY(set_layout(&d.a, t, g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda, g.batch, g.sa));
  ZK_GPU_TRY(set_layout(&d.b, t, g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb, g.batch, g.sb));
  ZK_GPU_TRY(set_layout(&d.c, t, g.m, g.n, g.ldc, g.batch, g.sc));

  // Alignment per matrix: of its pointer and of its row (leading dimension) and batch strides, since
  // every row start of an unaligned ld is misaligned too. Only a matrix that needs it gets a slow kernel.
  const size_t es = dtype_size(g.dtype);
  auto mat_align = [&](const void *p, int64_t ld, int64_t stride) {
    uint32_t a = std::min(alignment_of(p), alignment_of(reinterpret_cast<const void *>(static_cast<uintptr_t>(ld) * es)));
    if (g.batch > 1 && stride) a = std::min(a, alignment_of(reinterpret_cast<const void *>(static_cast<uintptr_t>(stride) * es)));
    return a;
  };
  const uint32_t al_a = mat_align(g.A, g.lda, g.sa), al_b = mat_align(g.B, g.ldb, g.sb);
  uint32_t al_c = mat_align(g.C, g.ldc, g.sc);
  if (g.bias) al_c = std::min(al_c, alignment_of(g.bias));
  // The residual is the library's C, in D's layout: its own alignment (D's where there is none).
  const uint32_t al_r = g.residual ? mat_align(g.residual, g.ldc, g.sc) : al_c;
  const uint32_t align = (al_a << 16) | (al_b << 8) | al_c;  // for the cache key
  char key[256];
  std::snprintf(key, sizeof key, "%d|%d%d|%lld,%lld,%lld|%lld,%lld,%lld|%lld|%d%d%d|%d|%u|%zu|r%u|a%d,%d,%d,%d,%d,%d,%d",
                static_cast<int>(g.dtype), g.ta,
                g.tb, static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
                static_cast<long long>(g.lda), static_cast<long long>(g.ldb), static_cast<long long>(g.ldc),
                static_cast<long long>(g.batch), g.sa != 0, g.sb != 0, g.sc != 0, static_cast<int>(g.epi), align, ws_bytes,
                g.residual ? al_r : 0u, g.algo ? g.algo->id : -1, g.algo ? g.algo->tile : 0, g.algo ? g.algo->stages : 0,
                g.algo ? g.algo->splitk : 0, g.algo ? g.algo->swizzle : 0, g.algo ? g.algo->custom : 0,
                g.algo ? g.algo->cluster : 0);
  cublasLtMatmulAlgo_t algo;
  bool have = false;
  {
    std::lock_guard<std::mutex> lock(impl->mu);
    auto it = impl->algos.find(key);
    if (it != impl->algos.end()) {
      algo = it->second;
      have = true;
    }
  }
  if (!have) {
    ZK_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&d.pref));
    uint64_t wsb = ws ? ws_bytes : 0;
    ZK_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
    // The arena places buffers at the plan's offsets; tell the heuristic what alignment those really have.
    ZK_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    ZK_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    ZK_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_r, sizeof(al_r)));
    ZK_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
    ZK_GPU_TRY(pick_algo(impl->lt, d, g.algo, key, &algo));
    std::lock_guard<std::mutex> lock(impl->mu);
    impl->algos.emplace(key, algo);
  }
  // D = alpha op(A) op(B) + beta C (+ epilogue): C is D itself with beta 0, the residual with beta 1.
  const float alpha = g.alpha, beta = g.residual ? 1.0f : 0.0f;
  const void *c = g.residual ? g.residual : g.C;
  ZK_CUBLAS_TRY(cublasLtMatmul(impl->lt, d.op, &alpha, g.A, d.a, g.B, d.b, &beta, c, d.c, g.C, d.c, &algo, ws,
                               ws ? ws_bytes : 0, s));
  return {};
}

/// The matrix view of a matmul operand after numpy's rank-1 promotion (as the reference kernel does it).
struct MatShape {
  Dims batch;
  int64_t rows = 0, cols = 0;
  bool vec = false;
};

MatShape mat_of(const Dims &s, bool is_b) {
  MatShape m;
  if (s.rank == 1) {
    m.vec = true;
    m.rows = is_b ? s.d[0] : 1;
    m.cols = is_b ? 1 : s.d[0];
    return m;
  }
  m.batch.rank = s.rank - 2;
  for (int i = 0; i < s.rank - 2; ++i) m.batch.d[i] = s.d[i];
  m.rows = s.d[s.rank - 2];
  m.cols = s.d[s.rank - 1];
  return m;
}

void broadcast_strides(const Dims &in, const Dims &out, int64_t *st) {
  int64_t acc = 1;
  for (int i = out.rank - 1, j = in.rank - 1; i >= 0; --i, --j) {
    if (j >= 0) {
      st[i] = in.d[j] == 1 ? 0 : acc;
      acc *= in.d[j];
    } else {
      st[i] = 0;
    }
  }
}

/// A product of M <= kSkinnyMaxRows rows of x against one weight matrix by the few-row kernel the plan named
/// (plan 2.9 / 2.14: --zplan-decode-products decides by rows, weight bytes and shape): the cluster kernels
/// where they hold the shape (*done stays false otherwise and cuBLASLt runs the product), the streaming
/// kernel (an error where it does not hold it: the plan verifier refuses such plans). FewRows::library:
/// *done false. No timing and no override at run time: two runs of one plan run the same kernels and round
/// alike.
GpuStatus few_rows(const In& x, const In& w, const In& bias, const Out& out, bool tw,
                   int64_t M, int64_t K, int64_t N, float alpha, Epilogue epi, FewRows kernel, bool early_weights,
                   cudaStream_t s, bool* done) {
  *done = false;
  if (kernel == FewRows::library) return {};
  if (kernel != FewRows::cluster && kernel != FewRows::stream)
    return kernel_failure(
        ("linear / matmul: unknown few-row kernel code " + std::to_string(static_cast<int>(kernel))).c_str());
  if (kernel == FewRows::cluster && (M > kSkinnyMaxRows || !skinny_linear_fits(x.dtype, M, K, N, tw))) return {};
  *done = true;
  return skinny_linear(x, w, bias, out, tw, alpha, epi, early_weights, s, kernel);
}

}  // namespace

GpuStatus matmul(Blas &blas, const In &a, const In &b, const Out &out, bool ta, bool tb, void *ws, size_t ws_bytes,
                 cudaStream_t s, FewRows few, bool early_weights) {
  if (a.shape.rank < 1 || b.shape.rank < 1) return kernel_failure("matmul: operands must have rank >= 1");
  MatShape ma = mat_of(a.shape, false), mb = mat_of(b.shape, true);
  const bool tae = ta && !ma.vec, tbe = tb && !mb.vec;
  const int64_t M = tae ? ma.cols : ma.rows, ka = tae ? ma.rows : ma.cols;
  const int64_t kb = tbe ? mb.cols : mb.rows, N = tbe ? mb.rows : mb.cols;
  if (ka != kb) return kernel_failure("matmul: contraction dims differ");
  const int64_t K = ka;
  Dims batch;
  if (!broadcast_shapes(ma.batch, mb.batch, &batch)) return kernel_failure("matmul: batch dims do not broadcast");
  Dims expect = batch;
  if (expect.rank + 2 > kMaxRank) return kernel_failure("matmul: rank too large");
  if (!ma.vec) expect.d[expect.rank++] = M;
  if (!mb.vec) expect.d[expect.rank++] = N;
  if (expect != out.shape) return kernel_failure("matmul: output shape is not the product's shape");
  if (!is_float(a.dtype) || b.dtype != a.dtype || out.dtype != a.dtype)
    return kernel_failure("matmul: a, b and out must share one float dtype");
  if (out.shape.numel() == 0) return {};
  if (K == 0) {
    // An empty contraction is a zero product; all-zero bits are 0.0 in every float dtype.
    ZK_CUDA_TRY(cudaMemsetAsync(out.data, 0, static_cast<size_t>(out.shape.numel()) * dtype_size(out.dtype), s));
    return {};
  }
  const int64_t a_mat = ma.rows * ma.cols, b_mat = mb.rows * mb.cols, c_mat = M * N;
  const int64_t nb = batch.numel(), na = ma.batch.numel(), nbb = mb.batch.numel();
  LtGemm g{a.dtype, tbe, tae, N, M, K, b.data, mb.cols, 0, a.data, ma.cols, 0, out.data, N, c_mat, 1, 1.0f, Epilogue::none,
           nullptr};
  if (nbb == 1 && !tae && !ma.vec) {
    // B is one matrix for the whole batch: fold A's batch into its rows, one large product.
    g.n = M * na;
    bool done = false;
    const int64_t rows = M * na;
    if (!mb.vec) {
      // As a linear: x [rows, K], W = B ([K, N], or [N, K] transposed), no epilogue.
      const In x{a.data, a.dtype, Dims{rows, K}}, w{b.data, b.dtype, tbe ? Dims{N, K} : Dims{K, N}};
      const Out o{out.data, out.dtype, Dims{rows, N}};
      ZK_GPU_TRY(few_rows(x, w, In{}, o, tbe, rows, K, N, 1.0f, Epilogue::none, few, early_weights, s,
                          &done));
    }
    if (done) return {};
    return run_lt(blas.impl(), g, ws, ws_bytes, s);
  }
  if ((na == nb || na == 1) && (nbb == nb || nbb == 1)) {
    g.batch = nb;
    g.sa = nbb == 1 ? 0 : b_mat;
    g.sb = na == 1 ? 0 : a_mat;
    return run_lt(blas.impl(), g, ws, ws_bytes, s);
  }
  // A general broadcast (e.g. [2, 1] against [1, 3] batches): one product per output matrix.
  int64_t sta[kMaxRank], stb[kMaxRank];
  broadcast_strides(ma.batch, batch, sta);
  broadcast_strides(mb.batch, batch, stb);
  const size_t es = dtype_size(a.dtype);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0;
    for (int d = batch.rank - 1; d >= 0; --d) {
      const int64_t c = rem % batch.d[d];
      rem /= batch.d[d];
      oa += c * sta[d];
      ob += c * stb[d];
    }
    LtGemm one = g;
    one.A = static_cast<const uint8_t *>(b.data) + static_cast<size_t>(ob * b_mat) * es;
    one.B = static_cast<const uint8_t *>(a.data) + static_cast<size_t>(oa * a_mat) * es;
    one.C = static_cast<uint8_t *>(out.data) + static_cast<size_t>(bi * c_mat) * es;
    ZK_GPU_TRY(run_lt(blas.impl(), one, ws, ws_bytes, s));
  }
  return {};
}

namespace {

/// linear's contract, plus the residual (out's shape and dtype, or none) that linear_residual adds in the
/// product's epilogue.
GpuStatus linear_impl(Blas &blas, const In &x, const In &w, const In &bias, const In &residual, const Out &out,
                      bool tw, float alpha, Epilogue epi, void *ws, size_t ws_bytes, cudaStream_t s, FewRows few,
                      const GemmAlgo *algo, bool early_weights) {
  if (x.shape.rank < 1 || w.shape.rank != 2) return kernel_failure("linear: x must have rank >= 1 and W rank 2");
  const int64_t K = x.shape.d[x.shape.rank - 1];
  const int64_t N = tw ? w.shape.d[0] : w.shape.d[1];
  if ((tw ? w.shape.d[1] : w.shape.d[0]) != K) return kernel_failure("linear: W does not match x's last dim");
  if (out.shape.rank != x.shape.rank) return kernel_failure("linear: output rank differs from x's");
  for (int i = 0; i + 1 < x.shape.rank; ++i)
    if (out.shape.d[i] != x.shape.d[i]) return kernel_failure("linear: output leading dims differ from x's");
  if (out.shape.d[out.shape.rank - 1] != N) return kernel_failure("linear: output last dim is not W's N");
  if (!is_float(x.dtype) || w.dtype != x.dtype || out.dtype != x.dtype)
    return kernel_failure("linear: x, W and out must share one float dtype");
  const bool wants_bias = epi == Epilogue::bias || epi == Epilogue::gelu_bias;
  if (wants_bias != (bias.data != nullptr)) return kernel_failure("linear: the epilogue and the bias operand disagree");
  if (bias.data && (bias.shape.numel() != N || bias.dtype != x.dtype))
    return kernel_failure("linear: bias must be [N] of x's dtype");
  if (residual.data && (residual.shape != out.shape || residual.dtype != out.dtype))
    return kernel_failure("linear_residual: the residual must have the output's shape and dtype");
  if (residual.data && (epi == Epilogue::gelu || epi == Epilogue::gelu_bias))
    return kernel_failure("linear_residual: the residual is added after the product and bias only");
  const int64_t M = out.shape.numel() / (N == 0 ? 1 : N);
  if (M == 0 || N == 0) return {};
  if (K == 0) {
    // An empty contraction: the product is zero and only the epilogue remains.
    const size_t bytes = static_cast<size_t>(M * N) * dtype_size(out.dtype);
    if (residual.data) {
      ZK_CUDA_TRY(cudaMemcpyAsync(out.data, residual.data, bytes, cudaMemcpyDeviceToDevice, s));
      if (bias.data) return bias_act(Unary::copy, In{out.data, out.dtype, out.shape}, bias, out, s);
      return {};
    }
    ZK_CUDA_TRY(cudaMemsetAsync(out.data, 0, bytes, s));
    if (epi == Epilogue::none) return {};
    const Unary act = epi == Epilogue::bias ? Unary::copy : Unary::gelu_tanh;
    if (bias.data) return bias_act(act, In{out.data, out.dtype, out.shape}, bias, out, s);
    return unary(act, In{out.data, out.dtype, out.shape}, out, s);
  }
  const size_t es = dtype_size(x.dtype);
  // An output row of N elements that is not a whole number of 16 bytes (a vocabulary of 50257) leaves
  // every row start misaligned, and cuBLASLt then only has slow kernels (8.8 ms instead of about 1 ms for
  // the gpt2 LM head). Such a product is computed in row blocks as out_block^T = W x_block^T into the
  // (aligned) workspace, each block then transposed into place; the product itself runs without workspace.
  if ((static_cast<size_t>(N) * es) % 16 != 0 && epi == Epilogue::none && !bias.data && !residual.data && tw && ws &&
      M >= 256 && !algo) {
    int64_t mc = static_cast<int64_t>(ws_bytes / (static_cast<size_t>(N) * es)) / 64 * 64;
    if (mc >= 64) {
      for (int64_t m0 = 0; m0 < M; m0 += mc) {
        const int64_t rows = std::min(mc, M - m0);
        // Column-major D [rows, N] (ld rows) = op_T(x block stored [K, rows]) op_N(W stored [K, N]):
        // D is out_block^T row-major [N, rows].
        LtGemm t{x.dtype, true, false, rows, N, K, static_cast<const uint8_t *>(x.data) + static_cast<size_t>(m0 * K) * es,
                 K, 0, w.data, K, 0, ws, rows, 0, 1, alpha, Epilogue::none, nullptr};
        ZK_GPU_TRY(run_lt(blas.impl(), t, nullptr, 0, s));
        ZK_CUDA_TRY(launch::transpose2d(ws, static_cast<uint8_t *>(out.data) + static_cast<size_t>(m0 * N) * es, N, rows, es, s));
      }
      return {};
    }
  }
  LtGemm g{x.dtype, tw, false, N, M, K, w.data, tw ? K : N, 0, x.data, K, 0, out.data, N, 0, 1, alpha, epi, bias.data,
           residual.data, algo};
  if (!residual.data && !algo) {
    // The few-row kernel has no residual epilogue; linear_residual's products run on cuBLASLt at any size.
    bool done = false;
    ZK_GPU_TRY(few_rows(x, w, bias, out, tw, M, K, N, alpha, epi, few, early_weights, s, &done));
    if (done) return {};
  }
  return run_lt(blas.impl(), g, ws, ws_bytes, s);
}

}  // namespace

GpuStatus linear(Blas &blas, const In &x, const In &w, const In &bias, const Out &out, bool tw, float alpha,
                 Epilogue epi, void *ws, size_t ws_bytes, cudaStream_t s, FewRows few, const GemmAlgo *algo,
                 bool early_weights) {
  return linear_impl(blas, x, w, bias, In{}, out, tw, alpha, epi, ws, ws_bytes, s, few, algo, early_weights);
}

GpuStatus linear_residual(Blas &blas, const In &x, const In &w, const In &bias, const In &residual, const Out &out,
                          bool tw, float alpha, void *ws, size_t ws_bytes, cudaStream_t s, const GemmAlgo *algo) {
  if (!residual.data) return kernel_failure("linear_residual: no residual");
  return linear_impl(blas, x, w, bias, residual, out, tw, alpha, bias.data ? Epilogue::bias : Epilogue::none, ws,
                     ws_bytes, s, FewRows::library, algo, false);
}

// linear_multi, norm_products and linear_gated run only the few-row kernels: the Blas handle is not used.
GpuStatus linear_multi(Blas &, const In &x, const In *w, const Out *out, int n, bool tw, float alpha,
                       cudaStream_t s, FewRows kernel, bool early_weights) {
  return skinny_linear_multi(x, w, out, n, tw, alpha, early_weights, s, kernel);
}

GpuStatus norm_products(Blas &, const In &x, const In &residual, const In &scale, const In *w, const Out &sum,
                        const Out *out, int n, Unary act, bool gated, float alpha, float eps, cudaStream_t s,
                        bool early_weights) {
  return skinny_norm_products(x, residual, scale, w, sum, out, n, act, gated, alpha, eps, early_weights, s);
}

GpuStatus linear_gated(Blas &, Unary act, const In &x, const In &wg, const In &wu, const Out &out, bool tw,
                       float alpha, cudaStream_t s, FewRows kernel, bool early_weights) {
  return skinny_linear_gated(act, x, wg, wu, out, tw, alpha, early_weights, s, kernel);
}

}  // namespace cuda
}  // namespace zk
