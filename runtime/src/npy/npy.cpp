// NumPy .npy reading and writing with strict header parsing.
#include "zrt/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace zrt {
namespace {

Status bad(const std::string &path, const std::string &m) {
  return error(Code::io_error, "'" + path + "' is not a valid .npy file: " + m);
}

void skip_ws(const std::string &s, size_t &i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
}

bool parse_quoted(const std::string &s, size_t &i, std::string *out) {
  skip_ws(s, i);
  if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) return false;
  const char q = s[i++];
  const size_t end = s.find(q, i);
  if (end == std::string::npos) return false;
  *out = s.substr(i, end - i);
  i = end + 1;
  return true;
}

bool expect(const std::string &s, size_t &i, char c) {
  skip_ws(s, i);
  if (i < s.size() && s[i] == c) {
    ++i;
    return true;
  }
  return false;
}

}  // namespace

Status read_npy(const std::string &path, NpyArray *out, bool bf16_as_u2) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return error(Code::not_found, "cannot open '" + path + "': " + std::strerror(errno));
  const int64_t file_size = static_cast<int64_t>(f.tellg());
  f.seekg(0);
  char pre[10];
  if (file_size < 10 || !f.read(pre, 10)) return bad(path, "shorter than the 10-byte preamble");
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0) return bad(path, "missing the \\x93NUMPY magic");
  const int major = static_cast<uint8_t>(pre[6]);
  uint64_t hlen = 0;
  int64_t pre_len = 10;
  if (major == 1) {
    hlen = static_cast<uint8_t>(pre[8]) | (static_cast<uint64_t>(static_cast<uint8_t>(pre[9])) << 8);
  } else if (major == 2 || major == 3) {
    char ext[2];
    if (!f.read(ext, 2)) return bad(path, "truncated header length");
    hlen = static_cast<uint8_t>(pre[8]) | (static_cast<uint64_t>(static_cast<uint8_t>(pre[9])) << 8) |
           (static_cast<uint64_t>(static_cast<uint8_t>(ext[0])) << 16) |
           (static_cast<uint64_t>(static_cast<uint8_t>(ext[1])) << 24);
    pre_len = 12;
  } else {
    return bad(path, "unsupported format version " + std::to_string(major));
  }
  if (static_cast<int64_t>(hlen) > file_size - pre_len || hlen > (1u << 20)) return bad(path, "header length exceeds the file");
  std::string h(hlen, '\0');
  if (!f.read(&h[0], static_cast<std::streamsize>(hlen))) return bad(path, "truncated header");
  // The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
  size_t i = 0;
  if (!expect(h, i, '{')) return bad(path, "header is not a dict");
  std::string descr;
  bool have_descr = false, have_fortran = false, have_shape = false, fortran = false;
  std::vector<int64_t> shape;
  while (true) {
    skip_ws(h, i);
    if (expect(h, i, '}')) break;
    std::string key;
    if (!parse_quoted(h, i, &key) || !expect(h, i, ':')) return bad(path, "malformed header dict");
    if (key == "descr") {
      if (have_descr || !parse_quoted(h, i, &descr)) return bad(path, "malformed 'descr'");
      have_descr = true;
    } else if (key == "fortran_order") {
      skip_ws(h, i);
      if (h.compare(i, 4, "True") == 0) { fortran = true; i += 4; }
      else if (h.compare(i, 5, "False") == 0) { fortran = false; i += 5; }
      else return bad(path, "malformed 'fortran_order'");
      if (have_fortran) return bad(path, "repeated 'fortran_order'");
      have_fortran = true;
    } else if (key == "shape") {
      if (have_shape || !expect(h, i, '(')) return bad(path, "malformed 'shape'");
      while (true) {
        skip_ws(h, i);
        if (expect(h, i, ')')) break;
        size_t j = i;
        while (j < h.size() && h[j] >= '0' && h[j] <= '9') ++j;
        if (j == i || j - i > 15) return bad(path, "malformed 'shape'");
        shape.push_back(std::stoll(h.substr(i, j - i)));
        i = j;
        skip_ws(h, i);
        if (i < h.size() && h[i] == ',') ++i;
        else if (!(i < h.size() && h[i] == ')')) return bad(path, "malformed 'shape'");
      }
      have_shape = true;
    } else {
      return bad(path, "unexpected header key '" + key + "'");
    }
    skip_ws(h, i);
    if (i < h.size() && h[i] == ',') ++i;
  }
  if (!have_descr || !have_fortran || !have_shape) return bad(path, "header lacks descr, fortran_order or shape");
  if (fortran) return bad(path, "Fortran order is not supported (save it C-contiguous)");
  if (shape.size() > 8) return bad(path, "rank > 8");
  DType dt;
  if (descr == "<f4") dt = DType::f32;
  else if (descr == "<f2") dt = DType::f16;
  else if (descr == "<i8") dt = DType::i64;
  else if (descr == "<i4") dt = DType::i32;
  else if (descr == "|b1" || descr == "|u1") dt = DType::bool8;
  else if (descr == "<u2" && bf16_as_u2) dt = DType::bf16;
  else return bad(path, "unsupported dtype '" + descr + "' (f4, f2, i8, i4, b1)");
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (uint64_t{1} << 48) / static_cast<uint64_t>(d))) return bad(path, "shape too large");
    n *= static_cast<uint64_t>(d);
  }
  const uint64_t need = n * dtype_size(dt);
  const uint64_t have = static_cast<uint64_t>(file_size - pre_len - static_cast<int64_t>(hlen));
  if (have != need)
    return bad(path, "data holds " + std::to_string(have) + " bytes, shape needs " + std::to_string(need));
  out->dtype = dt;
  out->shape = shape;
  out->data.resize(need);
  if (need && !f.read(reinterpret_cast<char *>(out->data.data()), static_cast<std::streamsize>(need)))
    return error(Code::io_error, "cannot read the data of '" + path + "'");
  return {};
}

Status write_npy(const std::string &path, DType dtype, const std::vector<int64_t> &shape, const void *data) {
  const char *descr = nullptr;
  switch (dtype) {
    case DType::f32: descr = "<f4"; break;
    case DType::f16: descr = "<f2"; break;
    case DType::bf16: descr = "<u2"; break;
    case DType::i64: descr = "<i8"; break;
    case DType::i32: descr = "<i4"; break;
    case DType::bool8: descr = "|b1"; break;
  }
  std::string sh = "(";
  for (size_t i = 0; i < shape.size(); ++i) sh += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  for (size_t i = 0; i + 1 < shape.size(); ++i) {}
  sh += ")";
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + sh + ", }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes, newline last (the format's rule).
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  const std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) return error(Code::io_error, "cannot open '" + tmp + "' for writing: " + std::strerror(errno));
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(h.size() & 0xFF),
                                 static_cast<unsigned char>(h.size() >> 8)};
  bool ok = std::fwrite(pre, 1, 10, f) == 10 && std::fwrite(h.data(), 1, h.size(), f) == h.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes);
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return error(Code::io_error, "cannot write '" + path + "'");
  }
  return {};
}

}  // namespace zrt
