// The geometry of the tensor maps through which the wgmma attention kernel wg3 (attention_sm90a.cu) copies
// q, k and v into shared memory: plain C++, shared by the kernel's host side, its device side (the
// coordinates of each copy) and a CPU test (tests/cuda/tma_layout_test.cpp) that checks the geometry against
// the operands' layout formula without a GPU.
//
// An operand is `batch` x `heads` x `rows` rows of Dh elements, element (b, h, s, c) at b st_b + h st_h +
// s st_s + c (elements; the head dim contiguous): head-major, sequence-major and packed layouts differ only in
// the three strides. The encoder describes a tensor by dims of increasing stride, so dims 1-3 are the position,
// head and batch dims sorted by stride, and `order` says which went where. A box is 64 head-dim columns by
// box_rows positions of one head of one batch: its row count goes to the dim the positions took.
#ifndef ZK_CUDA_TMA_LAYOUT_H
#define ZK_CUDA_TMA_LAYOUT_H

#include <cstdint>
#include <utility>

#ifdef __CUDACC__
#define ZK_TMA_HD __host__ __device__
#else
#define ZK_TMA_HD
#endif

namespace zk {
namespace cuda {
namespace attn {

/// Which of a tensor map's dims 1-3 holds the position, head and batch indices (dim 0 is the head dim).
struct TmaOrder {
  int pos, head, batch;
};

/// What the encoder takes for one operand: dims and box in elements, strides in bytes (dims 1-3).
struct TmaLayout {
  uint64_t dims[4];
  uint64_t strides[3];
  uint32_t box[4];
  TmaOrder order;
};

inline TmaLayout tma_layout(int Dh, int64_t rows, int64_t heads, int64_t batch, int64_t st_s, int64_t st_h,
                            int64_t st_b, int elem_bytes, int box_rows) {
  struct Dim {
    uint64_t size, stride;
    int what;  // 0 position, 1 head, 2 batch
  } dm[3] = {{static_cast<uint64_t>(rows), static_cast<uint64_t>(st_s) * elem_bytes, 0},
             {static_cast<uint64_t>(heads), static_cast<uint64_t>(st_h) * elem_bytes, 1},
             {static_cast<uint64_t>(batch), static_cast<uint64_t>(st_b) * elem_bytes, 2}};
  for (int i = 1; i < 3; ++i)  // a stable sort: equal strides (dims of one element) keep their order
    for (int j = i; j > 0 && dm[j].stride < dm[j - 1].stride; --j) std::swap(dm[j], dm[j - 1]);
  TmaLayout l{};
  l.dims[0] = static_cast<uint64_t>(Dh);
  l.box[0] = 64;
  for (int i = 0; i < 3; ++i) {
    l.dims[i + 1] = dm[i].size;
    l.strides[i] = dm[i].stride;
    l.box[i + 1] = 1;
    (dm[i].what == 0 ? l.order.pos : dm[i].what == 1 ? l.order.head : l.order.batch) = i + 1;
  }
  l.box[l.order.pos] = static_cast<uint32_t>(box_rows);
  return l;
}

/// The coordinate along tensor-map dim `dim` (1-3) of the box whose first row is position `row` of head
/// `head` of batch `batch`.
ZK_TMA_HD inline int tma_coord(const TmaOrder &o, int dim, int row, int head, int batch) {
  return o.pos == dim ? row : o.head == dim ? head : batch;
}

}  // namespace attn
}  // namespace cuda
}  // namespace zk

#undef ZK_TMA_HD

#endif  // ZK_CUDA_TMA_LAYOUT_H
