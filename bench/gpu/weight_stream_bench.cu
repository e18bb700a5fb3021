// How fast one GPU reads a decode product's weight at one row, by the shape of what each block reads
// (session 12): a [K, N] bf16 weight read in column strips of W bytes (a block a strip x a K-slab, the
// few-row kernels' pattern, rows N x 2 bytes apart) against the same bytes read as contiguous ranges (a
// weight stored panel by panel: each block's slab one range). Every byte is read once, into a sum that is
// written (so nothing is optimised away); the L2 is cleared before each run (a 256 MiB memset); the median of
// 15 runs, event-timed. Against the device's copy rate (cudaMemcpy, 1 GiB, read + write).
//   zplan_cuda_weight_stream_bench                 the table
//   zplan_cuda_weight_stream_bench SHAPE WB BLOCKS  one launch of one case, for a profiler (SHAPE: 0 q/k/v, 1
//   o,
//                                                  2 gate/up, 3 down, 4 LM head; WB: strip bytes, 0 for
//                                                  contiguous ranges; BLOCKS: a SM)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

constexpr int kThreads = 256;
constexpr int kUnroll = 8;

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ float fold(const uint4& v) {
  return __uint_as_float(v.x) + __uint_as_float(v.y) + __uint_as_float(v.z) + __uint_as_float(v.w);
}

/// Strips of `wb` bytes (wb / 16 threads across), K split into `splits` slabs; item = blockIdx.x.
__global__ void strips_kernel(const unsigned char* w, int64_t pitch, int K, int wb, int splits, int items,
                              float* out) {
  const int across = wb / 16, down = kThreads / across;
  const int c = threadIdx.x % across, r = threadIdx.x / across;
  float acc = 0.0f;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int strip = item / splits, split = item % splits;
    const int kc = (K + splits - 1) / splits, k0 = split * kc, k1 = min(K, k0 + kc);
    const unsigned char* base = w + static_cast<int64_t>(strip) * wb + c * 16;
    int k = k0 + r;
    for (; k + (kUnroll - 1) * down < k1; k += kUnroll * down) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        v[u] = ld_stream(reinterpret_cast<const uint4*>(base + (k + u * down) * pitch));
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc += fold(v[u]);
    }
    for (; k < k1; k += down) acc += fold(ld_stream(reinterpret_cast<const uint4*>(base + k * pitch)));
  }
  if (acc == 1.2345f) out[threadIdx.x] = acc;
}

/// The same bytes as `items` contiguous ranges of `bytes` each.
__global__ void empty_kernel(float* out) {
  if (threadIdx.x == 1000) out[0] = 1.0f;
}

__global__ void ranges_kernel(const unsigned char* w, int64_t bytes, int items, float* out) {
  float acc = 0.0f;
  const int64_t pieces = bytes / 16;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const uint4* base = reinterpret_cast<const uint4*>(w + item * bytes);
    int64_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < pieces; i += kUnroll * kThreads) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = ld_stream(base + i + u * kThreads);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc += fold(v[u]);
    }
    for (; i < pieces; i += kThreads) acc += fold(ld_stream(base + i));
  }
  if (acc == 1.2345f) out[threadIdx.x] = acc;
}

template <class F>
float median_us(F&& launch, void* flush, size_t flush_bytes) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < 16; ++i) {
    CHECK(cudaMemsetAsync(flush, i, flush_bytes));
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i > 0) t.push_back(ms * 1000.0f);
  }
  std::sort(t.begin(), t.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return t[t.size() / 2];
}

/// The K split of `strips` strips of wb bytes that gives at least `grid` items, each slab at least four rows
/// a thread.
int splits_for(int K, int strips, int wb, int grid) {
  int splits = std::max(1, (grid + strips - 1) / strips);
  while (splits > 1 && (K + splits - 1) / splits < 4 * (kThreads / (wb / 16))) --splits;
  return splits;
}

int main(int argc, char** argv) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t flush_bytes = 256u << 20, copy_bytes = 1u << 30;
  void *flush, *c0, *c1;
  float* out;
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&c0, copy_bytes));
  CHECK(cudaMalloc(&c1, copy_bytes));
  CHECK(cudaMalloc(&out, 4096));
  struct Shape {
    const char* name;
    int K, N;
  } shapes[] = {{"q/k/v 2048x3072", 2048, 3072},
                {"o 2048x2048", 2048, 2048},
                {"gate/up 2048x11264", 2048, 11264},
                {"down 5632x2048", 5632, 2048},
                {"lm head 2048x32000", 2048, 32000}};
  unsigned char* w = static_cast<unsigned char*>(c0);
  if (argc == 4) {
    const Shape& s = shapes[std::max(0, std::min(4, std::atoi(argv[1])))];
    const int wb = std::atoi(argv[2]), grid = std::max(1, std::atoi(argv[3])) * sms;
    const int64_t pitch = static_cast<int64_t>(s.N) * 2, total = pitch * s.K;
    CHECK(cudaMemset(flush, 1, flush_bytes));
    if (wb > 0) {
      const int strips = static_cast<int>(pitch / wb), splits = splits_for(s.K, strips, wb, grid);
      strips_kernel<<<std::min(strips * splits, grid), kThreads>>>(w, pitch, s.K, wb, splits, strips * splits,
                                                                   out);
    } else {
      ranges_kernel<<<grid, kThreads>>>(w, total / grid / 16 * 16, grid, out);
    }
    CHECK(cudaDeviceSynchronize());
    std::printf("%s: one launch (strips of %d B, %d blocks)\n", s.name, wb, grid);
    return 0;
  }
  const float copy_us = median_us(
      [&] { CHECK(cudaMemcpyAsync(c1, c0, copy_bytes, cudaMemcpyDeviceToDevice)); }, flush, flush_bytes);
  const double copy_gbs = 2.0 * copy_bytes / (copy_us * 1e3);
  std::printf("copy rate: %.0f GB/s (read + write, 1 GiB)\n", copy_gbs);
  CHECK(cudaFree(c1));
  const float empty_us = median_us([&] { empty_kernel<<<2 * sms, kThreads>>>(out); }, flush, flush_bytes);
  std::printf("an empty kernel of %d blocks: %.2f us (in every figure below)\n", 2 * sms, empty_us);
  for (const Shape& s : shapes) {
    const int64_t pitch = static_cast<int64_t>(s.N) * 2, total = pitch * s.K;
    std::printf("%s (%.1f MB):\n", s.name, total / 1e6);
    for (int grid_per_sm : {2, 4}) {
      const int grid = grid_per_sm * sms;
      for (int wb : {64, 128, 256, 512, 1024, 2048, 4096}) {
        const int strips = static_cast<int>(pitch / wb);
        if (strips < 1 || pitch % wb != 0) continue;
        const int splits = splits_for(s.K, strips, wb, grid);
        const int items = strips * splits;
        const float us = median_us(
            [&] {
              strips_kernel<<<std::min(items, grid), kThreads>>>(w, pitch, s.K, wb, splits, items, out);
            },
            flush, flush_bytes);
        std::printf(
            "  %d blocks/SM  strips of %4d B x %2d splits (%5d items): %8.2f us %6.0f GB/s (%.2f of copy)\n",
            grid_per_sm, wb, splits, items, us, total / (us * 1e3), total / (us * 1e3) / copy_gbs);
      }
      for (int per : {1, 2, 4}) {
        const int items = grid * per;
        const int64_t bytes = total / items / 16 * 16;
        const float us =
            median_us([&] { ranges_kernel<<<grid, kThreads>>>(w, bytes, items, out); }, flush, flush_bytes);
        std::printf(
            "  %d blocks/SM  contiguous ranges of %7lld B (%5d items):     %8.2f us %6.0f GB/s (%.2f of "
            "copy)\n",
            grid_per_sm, static_cast<long long>(bytes), items, us, bytes * items / (us * 1e3),
            bytes * items / (us * 1e3) / copy_gbs);
      }
    }
  }
  CHECK(cudaGetLastError());
  return 0;
}
