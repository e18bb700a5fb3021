// The tensor-map geometry of the wgmma attention kernel wg3 (kernels/cuda/tma_layout.h), checked on the CPU:
// for each operand layout the plans produce (head-major, sequence-major, packed q/k/v with GQA), every element
// of a box, in the order the copy engine fills shared memory (dim 0 fastest), must be the element that the
// operand's own layout formula puts at that row and column; the dims that bound the zero fill must be the
// operand's. The wg3 tests on the H200 failed once for want of this: the box's rows sat on dim 1, which for
// sequence-major operands is the head dim.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../../kernels/cuda/tma_layout.h"

namespace {

using zk::cuda::attn::tma_coord;
using zk::cuda::attn::tma_layout;
using zk::cuda::attn::TmaLayout;

struct Layout {
  std::string name;
  int64_t B, H, S, Dh;
  int64_t st_b, st_h, st_s;  // elements
  int64_t offset;            // of element (0, 0, 0, 0), elements (packed parts)
};

std::vector<Layout> layouts() {
  std::vector<Layout> v;
  for (int64_t Dh : {64, 128})
    for (int64_t H : {1, 2, 8}) {
      const int64_t B = 2, S = 300;
      v.push_back({"head-major", B, H, S, Dh, H * S * Dh, S * Dh, Dh, 0});
      v.push_back({"sequence-major", B, H, S, Dh, S * H * Dh, Dh, H * Dh, 0});
      // Packed: q, k and v of one [B, S, W] tensor, rows padded by 8 elements before each part; k of H heads
      // and v after it (the plan's folded q/k/v split, GQA when q has more heads).
      const int64_t W = 8 + 4 * H * Dh + 8 + H * Dh + 8 + H * Dh;
      v.push_back({"packed q", B, 4 * H, S, Dh, S * W, Dh, W, 8});
      v.push_back({"packed k", B, H, S, Dh, S * W, Dh, W, 8 + 4 * H * Dh + 8});
      v.push_back({"packed v", B, H, S, Dh, S * W, Dh, W, 8 + 5 * H * Dh + 16});
    }
  return v;
}

TEST(TmaLayout, BoxesHoldTheRowsOfOneHead) {
  const int eb = 2;  // bf16 / f16
  for (const Layout &L : layouts())
    for (int box_rows : {64, 128}) {
      SCOPED_TRACE(L.name + " H" + std::to_string(L.H) + " Dh" + std::to_string(L.Dh) + " box rows " +
                   std::to_string(box_rows));
      const TmaLayout t = tma_layout(static_cast<int>(L.Dh), L.S, L.H, L.B, L.st_s, L.st_h, L.st_b, eb, box_rows);
      // The encoder's form: dim 0 the contiguous head dim, strides in increasing order.
      EXPECT_EQ(t.dims[0], static_cast<uint64_t>(L.Dh));
      EXPECT_LE(t.strides[0], t.strides[1]);
      EXPECT_LE(t.strides[1], t.strides[2]);
      // Each index dim is bounded by the operand's own extent (what the copy engine zero-fills past).
      EXPECT_EQ(t.dims[t.order.pos], static_cast<uint64_t>(L.S));
      EXPECT_EQ(t.dims[t.order.head], static_cast<uint64_t>(L.H));
      EXPECT_EQ(t.dims[t.order.batch], static_cast<uint64_t>(L.B));
      EXPECT_EQ(t.strides[t.order.pos - 1], static_cast<uint64_t>(L.st_s * eb));
      EXPECT_EQ(t.strides[t.order.head - 1], static_cast<uint64_t>(L.st_h * eb));
      EXPECT_EQ(t.strides[t.order.batch - 1], static_cast<uint64_t>(L.st_b * eb));
      // Every element of the boxes the kernel issues (first row 0 and a later one, each 64-column half of the
      // head dim, the last head and batch), in fill order, against the layout formula.
      int64_t count = 0, wrong = 0;
      for (int row0 : {0, 128})
        for (int c0 = 0; c0 < L.Dh; c0 += 64) {
          const int h = static_cast<int>(L.H - 1), b = static_cast<int>(L.B - 1);
          const int64_t c[4] = {c0, tma_coord(t.order, 1, row0, h, b), tma_coord(t.order, 2, row0, h, b),
                                tma_coord(t.order, 3, row0, h, b)};
          int64_t k = 0;  // the element's place in shared memory: row k / 64, column k % 64
          for (uint32_t i3 = 0; i3 < t.box[3]; ++i3)
            for (uint32_t i2 = 0; i2 < t.box[2]; ++i2)
              for (uint32_t i1 = 0; i1 < t.box[1]; ++i1)
                for (uint32_t i0 = 0; i0 < t.box[0]; ++i0, ++k) {
                  const int64_t got = (c[0] + i0) * eb + (c[1] + i1) * static_cast<int64_t>(t.strides[0]) +
                                      (c[2] + i2) * static_cast<int64_t>(t.strides[1]) +
                                      (c[3] + i3) * static_cast<int64_t>(t.strides[2]);
                  const int64_t r = row0 + k / 64, col = c0 + k % 64;
                  const int64_t want = (b * L.st_b + h * L.st_h + r * L.st_s + col) * eb;
                  wrong += got != want;
                  ++count;
                }
          EXPECT_EQ(k, 64LL * box_rows);
        }
      EXPECT_EQ(wrong, 0) << "of " << count << " elements";
    }
}

}  // namespace
