// .npy reading and writing: round trips and strict rejection of malformed files.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "zrt/npy.h"

namespace {
void write_raw(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}
std::string npy_bytes(const std::string &header, size_t data_bytes) {
  std::string h = header;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string s = "\x93NUMPY";
  s += '\x01';
  s += '\x00';
  s += static_cast<char>(h.size() & 0xff);
  s += static_cast<char>(h.size() >> 8);
  return s + h + std::string(data_bytes, '\x01');
}
}  // namespace

TEST(Npy, RoundTrip) {
  const std::string p = ::testing::TempDir() + "/a.npy";
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(zrt::write_npy(p, zrt::DType::f32, {2, 3}, v.data()).ok());
  zrt::NpyArray a;
  ASSERT_TRUE(zrt::read_npy(p, &a).ok());
  EXPECT_EQ(a.dtype, zrt::DType::f32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(a.data.data(), v.data(), 24), 0);
  std::vector<int64_t> ids = {7};
  ASSERT_TRUE(zrt::write_npy(p, zrt::DType::i64, {1}, ids.data()).ok());
  ASSERT_TRUE(zrt::read_npy(p, &a).ok());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{1}));
  ASSERT_TRUE(zrt::write_npy(p, zrt::DType::f32, {}, v.data()).ok());
  ASSERT_TRUE(zrt::read_npy(p, &a).ok());
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(a.data.size(), 4u);
}

TEST(Npy, RejectsMalformed) {
  const std::string p = ::testing::TempDir() + "/b.npy";
  zrt::NpyArray a;
  write_raw(p, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20));
  zrt::Status s = zrt::read_npy(p, &a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("data holds 20 bytes, shape needs 24"), std::string::npos) << s.message();
  write_raw(p, npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24));
  EXPECT_NE(zrt::read_npy(p, &a).message().find("Fortran"), std::string::npos);
  write_raw(p, npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16));
  EXPECT_NE(zrt::read_npy(p, &a).message().find("unsupported dtype"), std::string::npos);
  write_raw(p, npy_bytes("{'descr': '<f4', 'shape': (2,), }", 8));
  EXPECT_FALSE(zrt::read_npy(p, &a).ok());
  write_raw(p, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", 8));
  EXPECT_FALSE(zrt::read_npy(p, &a).ok());
  write_raw(p, "NOTNUMPY..........");
  EXPECT_NE(zrt::read_npy(p, &a).message().find("magic"), std::string::npos);
  EXPECT_EQ(zrt::read_npy(::testing::TempDir() + "/nope.npy", &a).code(), zrt::Code::not_found);
}
