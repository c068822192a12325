// safetensors reader and writer. The reader validates the header completely before any accessor
// runs (bounds, sizes, overlaps) and keeps only checked byte ranges, so accessors need no checks of
// their own. It accepts gaps between tensors (some writers leave them) but never overlaps. The
// writer never leaves gaps, because the reference reader rejects them.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/regular_file.h"

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace lmt {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

struct FileDType {
  const char* name;
  uint64_t size;
  std::optional<DType> dtype;
};

constexpr FileDType kFileDTypes[] = {
    {"F64", 8, DType::f64},    {"F32", 4, DType::f32},       {"F16", 2, DType::f16},
    {"BF16", 2, DType::bf16},  {"I64", 8, std::nullopt},     {"I32", 4, DType::i32},
    {"I16", 2, std::nullopt},  {"I8", 1, std::nullopt},      {"U64", 8, std::nullopt},
    {"U32", 4, std::nullopt},  {"U16", 2, DType::u16},       {"U8", 1, DType::u8},
    {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const FileDType* find_file_dtype(const std::string& name) {
  for (const FileDType& d : kFileDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

// A JSON number that is a non-negative integer, as uint64; nullopt for anything else.
std::optional<uint64_t> as_u64(const nlohmann::json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0)
    return static_cast<uint64_t>(j.get<int64_t>());
  return std::nullopt;
}

std::string shape_str(const std::vector<int64_t>& dims) {
  return Shape(dims).str();
}

}  // namespace

struct SafetensorsFile::Storage {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  void* map = nullptr;  // set when the file is memory-mapped
  size_t map_len = 0;
  std::vector<uint8_t> bytes;  // set when parsed from memory
  ~Storage() {
    if (map) munmap(map, map_len);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const std::string what = "safetensors file '" + path + "'";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) throw UserError(what + " not found");
  uint64_t size = 0;
  const int fd = open_regular_file(path, "safetensors file", kNoSizeLimit, &size);  // a FIFO: named
  auto storage = std::make_shared<Storage>();
  storage->size = size;
  if (size > 0) {
    void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw UserError(what + ": cannot map: " + std::strerror(err));
    }
    storage->map = p;
    storage->map_len = static_cast<size_t>(size);
    storage->data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  SafetensorsFile f;
  f.path_ = path;
  f.storage_ = std::move(storage);
  f.parse();
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<uint8_t> bytes, const std::string& name) {
  auto storage = std::make_shared<Storage>();
  storage->bytes = std::move(bytes);
  storage->data = storage->bytes.data();
  storage->size = storage->bytes.size();
  SafetensorsFile f;
  f.path_ = name;
  f.storage_ = std::move(storage);
  f.parse();
  return f;
}

void SafetensorsFile::parse() {
  const std::string file = "safetensors file '" + path_ + "'";
  auto fail = [&](const std::string& msg) { return UserError(file + ": " + msg); };
  const uint8_t* data = storage_->data;
  const uint64_t size = storage_->size;

  if (size < 8)
    throw fail("too short (" + std::to_string(size) + " bytes) to hold the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " is absurdly large (limit " +
               std::to_string(kMaxHeaderBytes) + ")");
  if (n > size - 8)
    throw fail("header length " + std::to_string(n) + " runs past the end of the file (" +
               std::to_string(size) + " bytes)");
  buffer_ = data + 8 + n;
  buffer_size_ = size - 8 - n;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data + 8, data + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    std::string msg = e.what();
    if (size_t p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    throw fail("header is not valid JSON: " + msg);
  }
  if (!header.is_object()) throw fail("header is not a JSON object");

  for (auto& item : header.items()) {
    // Named, not a structured binding: clang before 16 does not let a lambda capture those.
    const std::string& name = item.key();
    auto& entry = item.value();
    if (name == "__metadata__") {
      if (entry.is_null()) continue;
      if (!entry.is_object()) throw fail("__metadata__ is not an object of strings");
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw fail("__metadata__ '" + k + "' is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& msg) { return fail("tensor '" + name + "': " + msg); };
    if (!entry.is_object()) throw bad("entry is not an object");
    auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) throw bad("dtype missing or not a string");
    const FileDType* fdt = find_file_dtype(dt->get<std::string>());
    if (!fdt) throw bad("unknown dtype '" + dt->get<std::string>() + "'");

    auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) throw bad("shape missing or not a list");
    std::vector<int64_t> dims;
    uint64_t numel = 1, nonzero_product = 1;
    for (const auto& d : *sh) {
      if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0)
        throw bad("shape has a negative dimension (" + d.dump() + ")");
      std::optional<uint64_t> v = as_u64(d);
      if (!v) throw bad("shape is not a list of integers (" + sh->dump() + ")");
      // Shape::numel() multiplies in int64: the product of the non-zero dims must fit.
      if (*v > static_cast<uint64_t>(INT64_MAX) ||
          (*v != 0 && __builtin_mul_overflow(nonzero_product, *v, &nonzero_product)) ||
          nonzero_product > static_cast<uint64_t>(INT64_MAX))
        throw bad("shape " + sh->dump() + " is too large");
      numel *= *v;
      dims.push_back(static_cast<int64_t>(*v));
    }

    auto off = entry.find("data_offsets");
    if (off == entry.end() || !off->is_array() || off->size() != 2 || !as_u64((*off)[0]) ||
        !as_u64((*off)[1]))
      throw bad("data_offsets must be two non-negative integers [begin, end]");
    const uint64_t begin = *as_u64((*off)[0]), end = *as_u64((*off)[1]);
    if (begin > end)
      throw bad("data_offsets begin " + std::to_string(begin) + " > end " + std::to_string(end));
    if (end > buffer_size_)
      throw bad("data_offsets end " + std::to_string(end) + " runs past the data buffer (" +
                std::to_string(buffer_size_) + " bytes)");
    uint64_t need = 0;
    const bool huge = __builtin_mul_overflow(numel, fdt->size, &need);
    if (huge || need != end - begin)
      throw bad("holds " + std::to_string(end - begin) + " bytes but shape " + shape_str(dims) +
                " of " + fdt->name + " needs " + (huge ? "over 2^64" : std::to_string(need)));

    SafetensorsMeta m;
    m.file_dtype = fdt->name;
    m.dtype = fdt->dtype;
    m.shape = Shape(std::move(dims));
    m.begin = begin;
    m.end = end;
    tensors_.emplace(name, std::move(m));
  }

  // Overlaps: walk the ranges in order of begin, keeping the furthest end seen so far.
  std::vector<std::pair<const std::string*, const SafetensorsMeta*>> order;
  for (const auto& [name, m] : tensors_) order.emplace_back(&name, &m);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  uint64_t max_end = 0;
  const std::string* max_name = nullptr;
  for (const auto& [name, m] : order) {
    if (max_name && m->begin < max_end)
      throw fail("tensors '" + *max_name + "' and '" + *name + "' overlap in the data buffer");
    if (m->end >= max_end) {
      max_end = m->end;
      max_name = name;
    }
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : tensors_) out.push_back(name);
  std::stable_sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    return tensors_.at(a).begin < tensors_.at(b).begin;
  });
  return out;
}

const SafetensorsMeta& SafetensorsFile::meta(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw UserError("safetensors file '" + path_ + "': no tensor named '" + name + "'");
  return it->second;
}

HostTensor SafetensorsFile::read(const std::string& name) const {
  const SafetensorsMeta& m = meta(name);
  if (!m.dtype)
    throw UserError("safetensors file '" + path_ + "': tensor '" + name + "' has dtype " +
                    m.file_dtype + ", which lmtrain cannot hold");
  HostTensor t(*m.dtype, m.shape);
  LMT_CHECK(t.nbytes() == m.nbytes());
  if (m.nbytes()) std::memcpy(t.data(), buffer_ + m.begin, m.nbytes());
  return t;
}

HostTensor SafetensorsFile::read_as(const std::string& name, DType target) const {
  HostTensor t = read(name);
  if (t.dtype() == target) return t;
  if (!is_floating(t.dtype()) || !is_floating(target))
    throw UserError("safetensors file '" + path_ + "': tensor '" + name + "' has dtype " +
                    meta(name).file_dtype + ", which does not convert to " +
                    std::string(dtype_name(target)));
  return t.to(target);
}

const void* SafetensorsFile::raw(const std::string& name) const {
  return buffer_ + meta(name).begin;
}

// ---- writer ----

std::string safetensors_dtype_name(DType t) {
  for (const FileDType& d : kFileDTypes)
    if (d.dtype == t) return d.name;
  LMT_CHECK(false, "no safetensors name for dtype " + std::string(dtype_name(t)));
  return "";
}

void SafetensorsWriter::check_new_name(const std::string& name) const {
  if (name == "__metadata__") throw UserError("safetensors: '__metadata__' is not a tensor name");
  for (const Entry& e : entries_)
    if (e.name == name) throw UserError("safetensors: tensor '" + name + "' added twice");
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const Shape& shape,
                            const void* data) {
  check_new_name(name);
  for (int64_t d : shape.dims()) LMT_CHECK(d >= 0, "tensor '" + name + "' shape " + shape.str());
  LMT_CHECK(data || shape.numel() == 0, "tensor '" + name + "' has no data");
  entries_.push_back(Entry{name, dtype, shape, data, nullptr});
}

void SafetensorsWriter::add_copy(const std::string& name, DType dtype, const Shape& shape,
                                 const void* data) {
  add(name, dtype, shape, data);
  const auto* p = static_cast<const uint8_t*>(data);
  const size_t n = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  auto owned = std::make_shared<std::vector<uint8_t>>(p, p + n);
  entries_.back().data = owned->data();
  entries_.back().owned = std::move(owned);
}

void SafetensorsWriter::add_copy(const std::string& name, const HostTensor& t) {
  add_copy(name, t.dtype(), t.shape(), t.data());
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::vector<const SafetensorsWriter::Entry*> SafetensorsWriter::layout() const {
  std::vector<const Entry*> order;
  for (const Entry& e : entries_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return dtype_size(a->dtype) > dtype_size(b->dtype);
  });
  return order;
}

std::string SafetensorsWriter::header(const std::vector<const Entry*>& order) const {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry* e : order) {
    const uint64_t n = static_cast<uint64_t>(e->shape.numel()) * dtype_size(e->dtype);
    h[e->name] = {{"dtype", safetensors_dtype_name(e->dtype)},
                  {"shape", e->shape.dims()},
                  {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string s;
  try {
    s = h.dump();
  } catch (const nlohmann::json::exception& e) {
    throw UserError(std::string("safetensors: a tensor name or metadata string is not UTF-8: ") +
                    e.what());
  }
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

std::vector<uint8_t> SafetensorsWriter::to_bytes() const {
  const auto order = layout();
  const std::string h = header(order);
  uint64_t total = 8 + h.size();
  for (const Entry* e : order) total += e->shape.numel() * dtype_size(e->dtype);
  std::vector<uint8_t> out(total);
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, h.data(), h.size());
  uint64_t pos = 8 + h.size();
  for (const Entry* e : order) {
    const uint64_t bytes = e->shape.numel() * dtype_size(e->dtype);
    if (bytes) std::memcpy(out.data() + pos, e->data, bytes);
    pos += bytes;
  }
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what) {
    return UserError("safetensors file '" + path + "': cannot " + what + ": " +
                     std::strerror(errno));
  };
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw fail("create '" + tmp + "'");
  const auto order = layout();
  const std::string h = header(order);
  const uint64_t n = h.size();
  bool ok = std::fwrite(&n, 8, 1, f) == 1 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (const Entry* e : order) {
    const size_t bytes = static_cast<size_t>(e->shape.numel()) * dtype_size(e->dtype);
    if (ok && bytes) ok = std::fwrite(e->data, 1, bytes, f) == bytes;
  }
  ok = (std::fflush(f) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    UserError err = fail("write '" + tmp + "'");
    std::remove(tmp.c_str());
    throw err;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw fail("rename '" + tmp + "' into place");
}

}  // namespace lmt
