// The token store (Megatron-LM indexed format); see token_store.h. The layout follows
// megatron/core/datasets/indexed_dataset.py of NVIDIA/Megatron-LM at commit 00caa53a
// (_IndexWriter.write, _IndexReader.__init__, IndexedDatasetBuilder, DType). The writer streams
// tokens through a buffer and keeps only one int32 length per document; the reader maps the
// three files and checks every field of the index once, so a read never leaves the mapped .bin.
// The index's arrays sit at unaligned offsets (34 + 4S ...), so they are read with memcpy.
#include "data/token_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/truncation_guard.h"

namespace lmt {

static_assert(std::endian::native == std::endian::little, "the store format is little-endian");

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, S, D
constexpr size_t kBufferBytes = size_t{1} << 20;

std::string errno_text() {
  return std::strerror(errno);
}

[[noreturn]] void store_error(const std::string& path, const std::string& what) {
  throw UserError("token store: '" + path + "': " + what);
}

// ---- writing ----

// An append-only file with its own buffer; errors name the file.
class OutFile {
 public:
  OutFile() = default;
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) store_error(path, "cannot create: " + errno_text());
    buf_.resize(kBufferBytes);
  }
  bool is_open() const { return fd_ >= 0; }
  // Room for n more bytes in the buffer (flushing first when needed); n <= kBufferBytes.
  char* reserve(size_t n) {
    if (used_ + n > buf_.size()) flush();
    return buf_.data() + used_;
  }
  void commit(size_t n) { used_ += n; }
  void append(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      size_t k = std::min(n, buf_.size() - used_);
      std::memcpy(buf_.data() + used_, c, k);
      used_ += k, c += k, n -= k;
      if (used_ == buf_.size()) flush();
    }
  }
  void flush() {
    size_t done = 0;
    while (done < used_) {
      ssize_t w = ::write(fd_, buf_.data() + done, used_ - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) store_error(path_, "cannot write: " + errno_text());
      done += static_cast<size_t>(w);
    }
    used_ = 0;
  }
  void sync_and_close() {
    flush();
    if (::fsync(fd_) != 0) store_error(path_, "cannot fsync: " + errno_text());
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) store_error(path_, "cannot close: " + errno_text());
  }
  void abandon() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<char> buf_;
  size_t used_ = 0;
};

void remove_if_there(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    store_error(path, "cannot remove the old file: " + errno_text());
}

template <class T>
void append_pod(OutFile& f, T v) {
  f.append(&v, sizeof v);
}

// ---- reading ----

// A read-only map of a whole file (MappedFile advises sequential access; a store is read at
// random).
struct Map {
  const uint8_t* data = nullptr;
  size_t size = 0;
  TruncationGuard guard;  // a truncation under the map: a UserError naming the file, not SIGBUS
  struct stat opened {};  // the file as mapped: changed() compares the path's file with it
  Map() = default;
  Map(const Map&) = delete;
  Map& operator=(const Map&) = delete;
  ~Map() {
    if (data) ::munmap(const_cast<uint8_t*>(data), size);
  }
  void open(const std::string& path) {
    // Non-blocking: a FIFO is refused below instead of blocking open().
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) store_error(path, "cannot open: " + errno_text());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      std::string why = S_ISREG(st.st_mode) ? errno_text() : "not a regular file";
      ::close(fd);
      store_error(path, "cannot open: " + why);
    }
    size = static_cast<size_t>(st.st_size);
    opened = st;
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        std::string why = errno_text();
        ::close(fd);
        store_error(path, "cannot map: " + why);
      }
      data = static_cast<const uint8_t*>(p);
      guard.watch(data, size, path);
    }
    ::close(fd);
  }
};

// Test hook: with LMT_TEST_TRUNCATE_DURING_READ=PATH, the first read from PATH truncates it to
// zero bytes between finding the range and copying it: a truncation in the middle of a read.
void truncate_for_test(const std::string& path) {
  static const char* const target = std::getenv("LMT_TEST_TRUNCATE_DURING_READ");
  static std::atomic<bool> done{false};
  if (target && path == target && !done.exchange(true)) {
    if (::truncate(path.c_str(), 0) != 0) store_error(path, "test hook: " + errno_text());
  }
}

// Whether the file at `path` is no longer the one mapped as it was (written to, replaced or
// truncated since).
bool changed(const Map& m, const std::string& path) {
  if (!m.opened.st_ino) return false;  // not opened (no mask)
  struct stat now {};
  if (::stat(path.c_str(), &now) != 0) return true;
  return now.st_ino != m.opened.st_ino || now.st_dev != m.opened.st_dev ||
         now.st_size != m.opened.st_size || now.st_mtim.tv_sec != m.opened.st_mtim.tv_sec ||
         now.st_mtim.tv_nsec != m.opened.st_mtim.tv_nsec;
}

template <class T>
T load(const uint8_t* base, int64_t i) {
  T v;
  std::memcpy(&v, base + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

bool known_dtype_code(uint8_t c) {
  return (c >= 1 && c <= 5) || c == 8;
}

}  // namespace

StoreDtype store_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? StoreDtype::kUInt16 : StoreDtype::kInt32;
}

int store_dtype_size(StoreDtype d) {
  switch (d) {
    case StoreDtype::kUInt8:
    case StoreDtype::kInt8:
      return 1;
    case StoreDtype::kInt16:
    case StoreDtype::kUInt16:
      return 2;
    case StoreDtype::kInt32:
      return 4;
    case StoreDtype::kInt64:
      return 8;
  }
  LMT_CHECK(false, "bad StoreDtype");
  return 0;
}

const char* store_dtype_name(StoreDtype d) {
  switch (d) {
    case StoreDtype::kUInt8:
      return "uint8";
    case StoreDtype::kInt8:
      return "int8";
    case StoreDtype::kInt16:
      return "int16";
    case StoreDtype::kInt32:
      return "int32";
    case StoreDtype::kInt64:
      return "int64";
    case StoreDtype::kUInt16:
      return "uint16";
  }
  return "?";
}

// ================================ TokenStoreWriter ================================

struct TokenStoreWriter::Impl {
  std::string prefix;
  StoreDtype dtype;
  bool with_mask;
  OutFile bin, mask;
  std::vector<int32_t> lengths;  // one sequence per document
  int64_t tokens = 0;
  bool finished = false;
};

TokenStoreWriter::TokenStoreWriter(std::string prefix, StoreDtype dtype, bool with_mask)
    : impl_(std::make_unique<Impl>()) {
  LMT_CHECK(dtype == StoreDtype::kUInt16 || dtype == StoreDtype::kInt32,
            std::string("TokenStoreWriter writes uint16 or int32, not ") + store_dtype_name(dtype));
  Impl& m = *impl_;
  m.prefix = std::move(prefix);
  m.dtype = dtype;
  m.with_mask = with_mask;
  // An old index or mask must not pass for part of the new store.
  remove_if_there(m.prefix + ".idx");
  remove_if_there(m.prefix + ".idx.tmp");
  remove_if_there(m.prefix + ".mask");
  m.bin.open(m.prefix + ".bin");
  try {
    if (with_mask) m.mask.open(m.prefix + ".mask");
  } catch (...) {
    m.bin.abandon();
    ::unlink((m.prefix + ".bin").c_str());
    throw;
  }
}

TokenStoreWriter::~TokenStoreWriter() {
  if (!impl_ || impl_->finished) return;
  impl_->bin.abandon();
  impl_->mask.abandon();
  for (const char* ext : {".bin", ".mask", ".idx.tmp"}) ::unlink((impl_->prefix + ext).c_str());
}

void TokenStoreWriter::add_document(std::span<const int32_t> tokens,
                                    std::span<const uint8_t> mask) {
  Impl& m = *impl_;
  LMT_CHECK(!m.finished, "add_document after finish");
  LMT_CHECK(!tokens.empty(), "empty document for token store " + m.prefix);
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    store_error(m.prefix + ".bin", "a document of " + std::to_string(tokens.size()) +
                                       " tokens is longer than a sequence may be (2^31 - 1)");
  if (m.with_mask) {  // checked before anything is written, so a refused document leaves no trace
    LMT_CHECK(mask.size() == tokens.size(), "mask of " + std::to_string(mask.size()) +
                                                " bytes for " + std::to_string(tokens.size()) +
                                                " tokens");
    for (uint8_t b : mask) LMT_CHECK(b <= 1, "mask byte " + std::to_string(b) + " is not 0/1");
  }
  int32_t lo = INT32_MAX, hi = 0;
  for (int32_t t : tokens) lo = std::min(lo, t), hi = std::max(hi, t);
  const int64_t limit = m.dtype == StoreDtype::kUInt16 ? 65536 : int64_t{INT32_MAX} + 1;
  LMT_CHECK(lo >= 0 && hi < limit, "token ids in [" + std::to_string(lo) + ", " +
                                       std::to_string(hi) + "] do not fit " +
                                       store_dtype_name(m.dtype));
  const size_t tsize = static_cast<size_t>(store_dtype_size(m.dtype));
  for (size_t i = 0; i < tokens.size();) {
    size_t k = std::min(tokens.size() - i, kBufferBytes / tsize);
    char* out = m.bin.reserve(k * tsize);
    for (size_t j = 0; j < k; ++j) {
      int32_t t = tokens[i + j];
      if (tsize == 2) {
        uint16_t v = static_cast<uint16_t>(t);
        std::memcpy(out + j * 2, &v, 2);
      } else {
        std::memcpy(out + j * 4, &t, 4);
      }
    }
    m.bin.commit(k * tsize);
    i += k;
  }
  if (m.with_mask) m.mask.append(mask.data(), mask.size());
  m.lengths.push_back(static_cast<int32_t>(tokens.size()));
  m.tokens += static_cast<int64_t>(tokens.size());
}

void TokenStoreWriter::finish() {
  Impl& m = *impl_;
  LMT_CHECK(!m.finished, "finish called twice");
  m.bin.sync_and_close();
  if (m.with_mask) m.mask.sync_and_close();
  const std::string tmp = m.prefix + ".idx.tmp", idx = m.prefix + ".idx";
  OutFile f;
  f.open(tmp);
  const uint64_t S = m.lengths.size();
  f.append(kMagic, sizeof kMagic);
  append_pod<uint64_t>(f, 1);
  append_pod<uint8_t>(f, static_cast<uint8_t>(m.dtype));
  append_pod<uint64_t>(f, S);
  append_pod<uint64_t>(f, S + 1);
  f.append(m.lengths.data(), S * sizeof(int32_t));
  int64_t ptr = 0;
  for (int32_t len : m.lengths) {
    append_pod<int64_t>(f, ptr);
    ptr += int64_t{len} * store_dtype_size(m.dtype);
  }
  for (uint64_t d = 0; d <= S; ++d) append_pod<int64_t>(f, static_cast<int64_t>(d));
  f.sync_and_close();
  if (std::rename(tmp.c_str(), idx.c_str()) != 0)
    store_error(idx, "cannot rename '" + tmp + "' to it: " + errno_text());
  m.finished = true;
  // Make the rename itself durable.
  std::string dir = std::filesystem::path(idx).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

int64_t TokenStoreWriter::num_documents() const {
  return static_cast<int64_t>(impl_->lengths.size());
}
int64_t TokenStoreWriter::num_tokens() const {
  return impl_->tokens;
}

// ================================ TokenStore ================================

struct TokenStore::Impl {
  std::string prefix, idx_path, bin_path, mask_path;
  Map idx, bin, mask;
  StoreDtype dtype = StoreDtype::kInt32;
  int64_t tsize = 4;
  int64_t S = 0, D = 0;                // sequences; entries of document_indices (documents + 1)
  const uint8_t* lengths = nullptr;    // i32[S], unaligned
  const uint8_t* pointers = nullptr;   // i64[S], unaligned
  const uint8_t* doc_index = nullptr;  // i64[D], unaligned
  bool one_sequence_per_document = true;
  bool has_mask = false;
  std::vector<int64_t> seq_start;  // only with several sequences per document: S + 1 prefix sums
  int64_t num_tokens = 0;
  mutable std::atomic<int64_t> max_id{INT64_MIN};  // INT64_MIN: not scanned yet

  int64_t seq_length(int64_t s) const { return load<int32_t>(lengths, s); }
  int64_t seq_pointer(int64_t s) const { return load<int64_t>(pointers, s); }
  int64_t doc_first(int64_t d) const { return load<int64_t>(doc_index, d); }

  void validate_header();
  void validate_arrays();
  void open_mask();
  // Converts n tokens at byte offset ptr of .bin to int32, refusing ids outside [0, 2^31).
  void convert(int64_t ptr, int64_t n, int32_t* out) const;
};

void TokenStore::Impl::validate_header() {
  const std::string& p = idx_path;
  if (idx.size < kHeaderBytes)
    store_error(p, std::to_string(idx.size) + " bytes, shorter than the " +
                       std::to_string(kHeaderBytes) + "-byte header of a Megatron index");
  if (std::memcmp(idx.data, kMagic, sizeof kMagic) != 0)
    store_error(p, "not a Megatron-LM index: the file does not start with \"MMIDIDX\\0\\0\"");
  uint64_t version = load<uint64_t>(idx.data + 9, 0);
  if (version != 1)
    store_error(p, "index version " + std::to_string(version) + "; lmtrain reads version 1");
  uint8_t code = idx.data[17];
  if (code == 6 || code == 7)
    store_error(p, std::string("dtype code ") + std::to_string(code) + " (" +
                       (code == 6 ? "float64" : "float32") + ") does not hold token ids");
  if (!known_dtype_code(code))
    store_error(p,
                "unknown dtype code " + std::to_string(code) +
                    " (Megatron's are 1-8: uint8 int8 int16 int32 int64 float64 float32 uint16)");
  dtype = static_cast<StoreDtype>(code);
  tsize = store_dtype_size(dtype);
  uint64_t s = load<uint64_t>(idx.data + 18, 0), d = load<uint64_t>(idx.data + 26, 0);
  const uint64_t rest = idx.size - kHeaderBytes;
  auto counts = [&] {
    return std::to_string(s) + " sequences and " + std::to_string(d) + " document indices";
  };
  if (d == 0) store_error(p, "document count 0: document_indices must hold at least the leading 0");
  if (s > rest / 12 || d > rest / 8 || 12 * s + 8 * d > rest)
    store_error(p, "the header's counts (" + counts() + ") need more than the file's " +
                       std::to_string(idx.size) + " bytes");
  const uint64_t need = kHeaderBytes + 12 * s + 8 * d;
  if (idx.size == need + s && s > 0)
    store_error(p,
                "holds sequence modes (a Megatron multimodal store), which lmtrain does not read");
  if (idx.size != need)
    store_error(p, "the header's counts (" + counts() + ") need " + std::to_string(need) +
                       " bytes, the file has " + std::to_string(idx.size));
  S = static_cast<int64_t>(s);
  D = static_cast<int64_t>(d);
  lengths = idx.data + kHeaderBytes;
  pointers = lengths + 4 * S;
  doc_index = pointers + 8 * S;
}

void TokenStore::Impl::validate_arrays() {
  const int64_t bin_bytes = static_cast<int64_t>(bin.size);
  if (bin_bytes % tsize != 0)
    store_error(bin_path, std::to_string(bin_bytes) + " bytes, not a whole number of " +
                              store_dtype_name(dtype) + " tokens (the index says " +
                              store_dtype_name(dtype) + ")");
  const std::string& p = idx_path;
  for (int64_t s = 0; s < S; ++s) {
    int64_t len = seq_length(s), ptr = seq_pointer(s);
    auto at = [&] { return "sequence " + std::to_string(s) + " of " + std::to_string(S); };
    if (len < 0) store_error(p, at() + " has a negative length " + std::to_string(len));
    if (ptr < 0 || ptr % tsize != 0)
      store_error(p, at() + " starts at byte " + std::to_string(ptr) +
                         ", which is not a non-negative multiple of the " + std::to_string(tsize) +
                         "-byte token size");
    if (ptr > bin_bytes || len * tsize > bin_bytes - ptr)
      store_error(p, at() + " (bytes " + std::to_string(ptr) + " + " + std::to_string(len) +
                         " tokens of " + std::to_string(tsize) + ") runs past the end of '" +
                         bin_path + "' (" + std::to_string(bin_bytes) + " bytes)");
    // Sequences lie in order without overlapping (Megatron-LM writes them back to back; a gap
    // between two is tolerated, its bytes belong to no sequence).
    const int64_t end_before = s == 0 ? 0 : seq_pointer(s - 1) + seq_length(s - 1) * tsize;
    if (ptr < end_before)
      store_error(p, at() + " starts at byte " + std::to_string(ptr) +
                         ", inside the sequences before it, which end at byte " +
                         std::to_string(end_before) + " (pointers and lengths disagree)");
    num_tokens += len;  // <= S * 2^31 < 2^63: S is bounded by the .idx size
  }
  if (doc_first(0) != 0)
    store_error(p, "document_indices[0] is " + std::to_string(doc_first(0)) + ", not 0");
  for (int64_t d = 1; d < D; ++d) {
    int64_t a = doc_first(d - 1), b = doc_first(d);
    if (b < a)
      store_error(p, "document_indices decrease at entry " + std::to_string(d) + " (" +
                         std::to_string(a) + " then " + std::to_string(b) + ")");
    if (b != d) one_sequence_per_document = false;
  }
  if (doc_first(D - 1) != S)
    store_error(p, "document_indices end at " + std::to_string(doc_first(D - 1)) +
                       ", not at the sequence count " + std::to_string(S));
  if (D - 1 != S) one_sequence_per_document = false;
  if (!one_sequence_per_document) {
    seq_start.resize(static_cast<size_t>(S) + 1);
    seq_start[0] = 0;
    for (int64_t s = 0; s < S; ++s) seq_start[s + 1] = seq_start[s] + seq_length(s);
  }
}

void TokenStore::Impl::open_mask() {
  struct stat st {};
  if (::stat(mask_path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    store_error(mask_path, "cannot open: " + errno_text());
  }
  mask.open(mask_path);
  has_mask = true;
  const uint64_t want = bin.size / static_cast<uint64_t>(tsize);
  if (mask.size != want)
    store_error(mask_path, std::to_string(mask.size) + " bytes, but '" + bin_path + "' holds " +
                               std::to_string(want) + " tokens (one mask byte per token)");
  for (uint64_t i = 0; i < mask.size; ++i)  // one pass at open; the reads then trust it
    if (mask.data[i] > 1)
      store_error(mask_path, "byte " + std::to_string(i) + " is " + std::to_string(mask.data[i]) +
                                 ", not 0 or 1");
}

void TokenStore::Impl::convert(int64_t ptr, int64_t n, int32_t* out) const {
  const uint8_t* src = bin.data + ptr;  // ptr is a multiple of tsize: aligned
  auto bad = [&](int64_t i, int64_t v) {
    store_error(bin_path, "token at byte " + std::to_string(ptr + i * tsize) + " is " +
                              std::to_string(v) + ", not a token id in [0, 2^31)");
  };
  switch (dtype) {
    case StoreDtype::kUInt16: {
      auto* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) out[i] = s[i];
      return;
    }
    case StoreDtype::kUInt8:
      for (int64_t i = 0; i < n; ++i) out[i] = src[i];
      return;
    case StoreDtype::kInt32: {
      if (n > 0) std::memcpy(out, src, static_cast<size_t>(n) * 4);
      int32_t lo = 0;
      for (int64_t i = 0; i < n; ++i) lo = std::min(lo, out[i]);
      if (lo < 0)
        for (int64_t i = 0; i < n; ++i)
          if (out[i] < 0) bad(i, out[i]);
      return;
    }
    case StoreDtype::kInt8:
    case StoreDtype::kInt16:
    case StoreDtype::kInt64:
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = dtype == StoreDtype::kInt8    ? reinterpret_cast<const int8_t*>(src)[i]
                    : dtype == StoreDtype::kInt16 ? reinterpret_cast<const int16_t*>(src)[i]
                                                  : reinterpret_cast<const int64_t*>(src)[i];
        if (v < 0 || v > INT32_MAX) bad(i, v);
        out[i] = static_cast<int32_t>(v);
      }
      return;
  }
}

TokenStore::TokenStore(const std::string& prefix) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.prefix = prefix;
  m.idx_path = prefix + ".idx";
  m.bin_path = prefix + ".bin";
  m.mask_path = prefix + ".mask";
  m.idx.open(m.idx_path);
  m.validate_header();
  m.bin.open(m.bin_path);
  m.validate_arrays();
  m.open_mask();
}

TokenStore::~TokenStore() = default;
TokenStore::TokenStore(TokenStore&&) noexcept = default;
TokenStore& TokenStore::operator=(TokenStore&&) noexcept = default;

const std::string& TokenStore::prefix() const {
  return impl_->prefix;
}
StoreDtype TokenStore::dtype() const {
  return impl_->dtype;
}
bool TokenStore::has_mask() const {
  return impl_->has_mask;
}
int64_t TokenStore::num_documents() const {
  return impl_->D - 1;
}
int64_t TokenStore::num_tokens() const {
  return impl_->num_tokens;
}

int64_t TokenStore::document_length(int64_t doc) const {
  const Impl& m = *impl_;
  LMT_CHECK(doc >= 0 && doc < m.D - 1, "document " + std::to_string(doc) + " of " +
                                           std::to_string(m.D - 1) + " in " + m.prefix);
  if (m.one_sequence_per_document) return m.seq_length(doc);
  return m.seq_start[m.doc_first(doc + 1)] - m.seq_start[m.doc_first(doc)];
}

void TokenStore::read(int64_t doc, int64_t begin, int64_t n, int32_t* out, uint8_t* mask) const {
  const Impl& m = *impl_;
  const int64_t len = document_length(doc);
  LMT_CHECK(begin >= 0 && n >= 0 && begin <= len && n <= len - begin,
            "tokens [" + std::to_string(begin) + ", +" + std::to_string(n) + ") of document " +
                std::to_string(doc) + " (" + std::to_string(len) + " tokens) in " + m.prefix);
  if (n == 0) return;
  int64_t s = doc, off = begin;
  if (!m.one_sequence_per_document) {
    // The last sequence of the document starting at or before `begin` (it is not empty).
    const int64_t s0 = m.doc_first(doc), s1 = m.doc_first(doc + 1);
    const int64_t target = m.seq_start[s0] + begin;
    s = std::upper_bound(m.seq_start.begin() + s0, m.seq_start.begin() + s1, target) -
        m.seq_start.begin() - 1;
    off = target - m.seq_start[s];
  }
  while (n > 0) {
    const int64_t k = std::min(n, m.seq_length(s) - off);
    const int64_t ptr = m.seq_pointer(s) + off * m.tsize;
    truncate_for_test(m.bin_path);
    m.convert(ptr, k, out);
    if (mask) {
      if (m.has_mask)
        std::memcpy(mask, m.mask.data + ptr / m.tsize, static_cast<size_t>(k));
      else
        std::memset(mask, 1, static_cast<size_t>(k));
      mask += k;
    }
    out += k, n -= k, off = 0, ++s;
  }
  // What was copied from a file truncated meanwhile holds zeros: never used.
  m.idx.guard.check();
  m.bin.guard.check();
  m.mask.guard.check();
}

void TokenStore::check_unchanged() const {
  const Impl& m = *impl_;
  for (const auto& [map, path] : {std::pair<const Map*, const std::string*>{&m.idx, &m.idx_path},
                                  {&m.bin, &m.bin_path},
                                  {&m.mask, &m.mask_path}})
    if (changed(*map, *path))
      store_error(*path,
                  "changed while this run was reading it (written to, replaced or truncated "
                  "since it was opened): what the run would read now is not what it trained on; "
                  "stopping (the run's checkpoints are intact; a resume verifies the store's "
                  "checksums)");
}

int32_t TokenStore::max_token_id() const {
  const Impl& m = *impl_;
  int64_t cached = m.max_id.load(std::memory_order_relaxed);
  if (cached != INT64_MIN) return static_cast<int32_t>(cached);
  int64_t best = -1;
  std::vector<int32_t> buf(1 << 16);
  for (int64_t s = 0; s < m.S; ++s) {
    const int64_t len = m.seq_length(s), ptr = m.seq_pointer(s);
    for (int64_t i = 0; i < len; i += static_cast<int64_t>(buf.size())) {
      const int64_t k = std::min<int64_t>(len - i, static_cast<int64_t>(buf.size()));
      m.convert(ptr + i * m.tsize, k, buf.data());
      best = std::max<int64_t>(best, *std::max_element(buf.begin(), buf.begin() + k));
    }
  }
  m.idx.guard.check();
  m.bin.guard.check();
  m.max_id.store(best, std::memory_order_relaxed);
  return static_cast<int32_t>(best);
}

}  // namespace lmt
