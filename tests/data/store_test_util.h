// Helpers for the token store tests: a fresh temporary directory, a random seed that a failing
// test prints, and an .idx serialiser written from Megatron-LM's _IndexWriter layout byte by byte,
// independently of TokenStoreWriter.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace lmt::store_test {

class TempDir {
 public:
  explicit TempDir(const std::string& parent = "") {
    std::filesystem::path base =
        parent.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(parent);
    std::string tmpl = (base / "lmt_store_XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline uint64_t fresh_seed() {
  return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

// Little-endian bytes, pushed one by one.
inline void put_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

struct IdxSpec {
  uint8_t dtype_code = 4;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> doc_index;  // starts with 0, ends with lengths.size()
  uint64_t version = 1;
};

// The .idx bytes of megatron/core/datasets/indexed_dataset.py: _IndexWriter.__enter__ writes
// b"MMIDIDX\x00\x00", pack("<Q", 1), pack("<B", code); write() adds pack("<Q", S),
// pack("<Q", D), int32 lengths, int64 pointers, int64 document indices.
inline std::vector<uint8_t> idx_bytes(const IdxSpec& s) {
  std::vector<uint8_t> b;
  for (char c : std::string("MMIDIDX")) b.push_back(static_cast<uint8_t>(c));
  b.push_back(0);
  b.push_back(0);
  put_le(b, s.version, 8);
  put_le(b, s.dtype_code, 1);
  put_le(b, s.lengths.size(), 8);
  put_le(b, s.doc_index.size(), 8);
  for (int32_t l : s.lengths) put_le(b, static_cast<uint32_t>(l), 4);
  for (int64_t p : s.pointers) put_le(b, static_cast<uint64_t>(p), 8);
  for (int64_t d : s.doc_index) put_le(b, static_cast<uint64_t>(d), 8);
  return b;
}

// Contiguous pointers for the lengths, as _IndexWriter._sequence_pointers computes them.
inline std::vector<int64_t> contiguous_pointers(const std::vector<int32_t>& lengths, int size) {
  std::vector<int64_t> p;
  int64_t at = 0;
  for (int32_t l : lengths) {
    p.push_back(at);
    at += int64_t{l} * size;
  }
  return p;
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace lmt::store_test
