// zrt/plan_file.h - the 24-byte plan file header, CRC-32 and FNV-1a hashes.
//
// Header-only and free of FlatBuffers, MLIR and MPI, so that the compiler (which writes plans) and the
// runtime (which reads them) share one definition of the container around the FlatBuffer payload:
//
//   offset 0   char[8]  magic "ZPLANv1\n"
//   offset 8   u64      payload bytes, little endian
//   offset 16  u32      CRC-32 (IEEE, zlib's polynomial 0xEDB88320 reflected) of the payload
//   offset 20  u32      reserved, 0
//   offset 24  payload  FlatBuffer with file_identifier "ZPLN"
#ifndef ZRT_PLAN_FILE_H
#define ZRT_PLAN_FILE_H

#include <cstddef>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace zrt {

/// The plan format version this runtime writes and accepts. A runtime refuses any other major version and
/// any newer minor version (runtime/schema/plan.fbs states the compatibility rules).
constexpr uint16_t kPlanVersionMajor = 2;
constexpr uint16_t kPlanVersionMinor = 18;

constexpr char kPlanMagic[8] = {'Z', 'P', 'L', 'A', 'N', 'v', '1', '\n'};
constexpr size_t kPlanHeaderBytes = 24;

struct PlanHeader {
  char magic[8];
  uint64_t payload_bytes;
  uint32_t crc32;
  uint32_t reserved;
};
static_assert(sizeof(PlanHeader) == kPlanHeaderBytes, "the plan header is exactly 24 bytes");

/// CRC-32 (IEEE 802.3, as zlib's crc32()) of `n` bytes, continuing from `crc` (0 to start).
inline uint32_t crc32(const void *data, size_t n, uint32_t crc = 0) {
  // The table is built once; a function-local static keeps this header-only without an ODR problem.
  struct Table {
    uint32_t t[256];
    Table() {
      for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
      }
    }
  };
  static const Table table;
  const auto *p = static_cast<const uint8_t *>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table.t[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

/// FNV-1a 64 over `n` bytes, continuing from `h`.
inline uint64_t fnv1a64(const void *data, size_t n, uint64_t h = kFnvOffsetBasis) {
  const auto *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

/// Folds one communicating instruction into the collective-sequence hash (Plan.collective_hash): the
/// little-endian bytes of u16 op, u8 axis, u8 dtype of inputs[0], u64 element count of inputs[0]. Start
/// from kFnvOffsetBasis; barrier passes dtype 0 and count 0. The compiler and the runtime both call this.
inline uint64_t collective_hash_step(uint64_t h, uint16_t op, uint8_t axis, uint8_t dtype, uint64_t count) {
  uint8_t bytes[12];
  bytes[0] = static_cast<uint8_t>(op & 0xFF);
  bytes[1] = static_cast<uint8_t>(op >> 8);
  bytes[2] = axis;
  bytes[3] = dtype;
  for (int i = 0; i < 8; ++i) bytes[4 + i] = static_cast<uint8_t>(count >> (8 * i));
  return fnv1a64(bytes, sizeof(bytes), h);
}

/// Builds the 24-byte header for a payload.
inline PlanHeader make_plan_header(const void *payload, uint64_t n) {
  PlanHeader h{};
  std::memcpy(h.magic, kPlanMagic, sizeof(h.magic));
  h.payload_bytes = n;
  h.crc32 = crc32(payload, static_cast<size_t>(n));
  h.reserved = 0;
  return h;
}

/// Writes header + payload to `path`. Writes to `path.tmp` first and renames, so a failure never leaves a
/// partial plan behind. Returns an empty string on success, else a message naming the file.
inline std::string write_plan_file(const std::string &path, const void *payload, uint64_t n) {
  static_assert(sizeof(uint64_t) == 8, "");
  // The header is stored little endian; every supported host is little endian, so it is written as is.
  PlanHeader h = make_plan_header(payload, n);
  std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) return "cannot open '" + tmp + "' for writing: " + std::strerror(errno);
  bool ok = std::fwrite(&h, 1, sizeof(h), f) == sizeof(h) &&
            std::fwrite(payload, 1, static_cast<size_t>(n), f) == static_cast<size_t>(n);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return "cannot write plan file '" + path + "'";
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno);
  }
  return {};
}

/// Checks the container around a FlatBuffer payload held in memory: size, magic, payload length and CRC,
/// in that order. On success returns an empty string and sets *payload / *payload_bytes; else a message.
inline std::string check_plan_header(const void *file, size_t file_bytes, const uint8_t **payload,
                                     uint64_t *payload_bytes) {
  if (file_bytes < kPlanHeaderBytes)
    return "file is " + std::to_string(file_bytes) + " bytes, shorter than the 24-byte plan header";
  PlanHeader h;
  std::memcpy(&h, file, sizeof(h));
  if (std::memcmp(h.magic, kPlanMagic, sizeof(h.magic)) != 0) return "bad magic: not a zplan plan file";
  // The CRC covers the payload only: a flipped bit in the reserved field must be caught here.
  if (h.reserved != 0)
    return "reserved header field is " + std::to_string(h.reserved) + ", not 0: the file is corrupt";
  uint64_t have = file_bytes - kPlanHeaderBytes;
  if (h.payload_bytes != have)
    return "truncated or padded: header says " + std::to_string(h.payload_bytes) + " payload bytes, file holds " +
           std::to_string(have);
  const uint8_t *p = static_cast<const uint8_t *>(file) + kPlanHeaderBytes;
  uint32_t crc = crc32(p, static_cast<size_t>(have));
  if (crc != h.crc32) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "CRC-32 mismatch (header 0x%08x, payload 0x%08x): the file is corrupt",
                  h.crc32, crc);
    return buf;
  }
  *payload = p;
  *payload_bytes = have;
  return {};
}

}  // namespace zrt

#endif  // ZRT_PLAN_FILE_H
