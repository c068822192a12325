// Reading and writing safetensors files (the Hugging Face weight format): an 8-byte little-endian
// header length N, N bytes of JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {}},
// then the data buffer. Reading maps the file and validates the whole header up front, so that a
// corrupt or hostile file is one UserError naming the file (and tensor) and later accessors never
// read out of bounds. Writing produces files the reference implementation accepts: header padded
// with spaces to a multiple of 8, tensors contiguous (no gaps), each tensor naturally aligned.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace lmt {

// One tensor's entry in a safetensors header.
struct SafetensorsMeta {
  std::string file_dtype;      // as written in the file: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;  // lmtrain's dtype; empty for file dtypes lmtrain has no type for
  Shape shape;
  uint64_t begin = 0;  // byte range [begin, end) in the data buffer
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the header; throws UserError on any problem.
  static SafetensorsFile open(const std::string& path);
  // Parses a file image held in memory; `name` stands for the file in messages.
  static SafetensorsFile from_bytes(std::vector<uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  // Tensor names in the order of their data in the file.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  size_t size() const { return tensors_.size(); }
  // Throws UserError naming the file and tensor when `name` is absent.
  const SafetensorsMeta& meta(const std::string& name) const;

  // A copy in the file's dtype. Throws UserError when lmtrain has no dtype for it (e.g. I64).
  HostTensor read(const std::string& name) const;
  // A copy converted to `target`; floating dtypes (f32, f64, bf16, f16) convert to each other,
  // other dtypes only to themselves.
  HostTensor read_as(const std::string& name, DType target) const;
  // The tensor's bytes inside the mapping, valid while any copy of this object lives. Aligned to
  // the element size when the writer aligned it (lmtrain's and the reference writer do).
  const void* raw(const std::string& name) const;

  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Storage;
  SafetensorsFile() = default;
  void parse();

  std::string path_;
  std::shared_ptr<const Storage> storage_;  // the whole file image (mmap or memory)
  const uint8_t* buffer_ = nullptr;         // start of the data buffer
  uint64_t buffer_size_ = 0;
  std::map<std::string, SafetensorsMeta> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Collects tensors and writes them as one file. Data layout: tensors sorted by element size
// (largest first, so every tensor stays aligned without gaps), in the order added within a size;
// the header lists them in the same order, "__metadata__" first.
class SafetensorsWriter {
 public:
  // References `data` (numel * dtype_size bytes): it must stay valid until write() returns.
  void add(const std::string& name, DType dtype, const Shape& shape, const void* data);
  // Copies the data now.
  void add_copy(const std::string& name, DType dtype, const Shape& shape, const void* data);
  void add_copy(const std::string& name, const HostTensor& t);
  void set_metadata(const std::string& key, const std::string& value);

  // Writes to `path` + ".tmp" and renames it into place; throws UserError on I/O failure.
  void write(const std::string& path) const;
  // The complete file image (for tests and small files).
  std::vector<uint8_t> to_bytes() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    const void* data;
    std::shared_ptr<std::vector<uint8_t>> owned;  // set by add_copy
  };
  std::vector<const Entry*> layout() const;
  std::string header(const std::vector<const Entry*>& order) const;
  void check_new_name(const std::string& name) const;

  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The safetensors dtype name of an lmtrain dtype ("F32", "BF16", ...).
std::string safetensors_dtype_name(DType t);

}  // namespace lmt
