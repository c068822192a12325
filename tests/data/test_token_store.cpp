// Token store: writer/reader round trips (uint16, int32, with and without mask), a Megatron index
// built byte by byte from the spec (several sequences per document, every integer dtype), one
// UserError naming the file for each kind of corruption, and the writer's file discipline (no
// index before finish(), nothing left when abandoned).
#include <gtest/gtest.h>

#include <climits>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "data/token_store.h"
#include "store_test_util.h"

namespace lmt {
namespace {

using namespace store_test;
namespace fs = std::filesystem;

struct StoreDocs {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<uint8_t>> mask;
};

StoreDocs random_docs(std::mt19937_64& rng, int n, int32_t vocab, int max_len) {
  StoreDocs d;
  for (int i = 0; i < n; ++i) {
    int len = 1 + static_cast<int>(rng() % static_cast<uint64_t>(max_len));
    if (i % 7 == 0) len = 1;  // odd sizes, single-token documents
    std::vector<int32_t> t(static_cast<size_t>(len));
    std::vector<uint8_t> m(t.size());
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    if (i == 0) t[0] = vocab - 1;  // the largest id is there
    for (auto& x : m) x = static_cast<uint8_t>(rng() & 1);
    d.tokens.push_back(std::move(t));
    d.mask.push_back(std::move(m));
  }
  return d;
}

void write_store(const std::string& prefix, const StoreDocs& d, StoreDtype dtype, bool with_mask) {
  TokenStoreWriter w(prefix, dtype, with_mask);
  for (size_t i = 0; i < d.tokens.size(); ++i) w.add_document(d.tokens[i], d.mask[i]);
  EXPECT_EQ(w.num_documents(), static_cast<int64_t>(d.tokens.size()));
  w.finish();
}

// Expects a UserError whose message names `file` and contains `what`.
void expect_store_error(const std::string& prefix, const std::string& file,
                        const std::string& what) {
  try {
    TokenStore s(prefix);
    ADD_FAILURE() << "opened a store that should be refused (" << what << ")";
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'" + file + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "want '" << what << "' in: " << msg;
  }
}

TEST(TokenStore, RoundTripBothDtypesWithAndWithoutMask) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  for (StoreDtype dtype : {StoreDtype::kUInt16, StoreDtype::kInt32}) {
    for (bool with_mask : {false, true}) {
      const int32_t vocab = dtype == StoreDtype::kUInt16 ? 65536 : INT32_MAX;
      StoreDocs d = random_docs(rng, 200 + static_cast<int>(rng() % 50), vocab, 700);
      const std::string prefix =
          dir / ("rt_" + std::to_string(static_cast<int>(dtype)) + (with_mask ? "_m" : ""));
      write_store(prefix, d, dtype, with_mask);
      EXPECT_EQ(fs::exists(prefix + ".mask"), with_mask);
      EXPECT_FALSE(fs::exists(prefix + ".idx.tmp"));
      TokenStore s(prefix);
      EXPECT_EQ(s.dtype(), dtype);
      EXPECT_EQ(s.has_mask(), with_mask);
      EXPECT_EQ(s.prefix(), prefix);
      ASSERT_EQ(s.num_documents(), static_cast<int64_t>(d.tokens.size()));
      int64_t total = 0;
      for (size_t i = 0; i < d.tokens.size(); ++i) {
        const auto& t = d.tokens[i];
        const int64_t len = static_cast<int64_t>(t.size());
        total += len;
        ASSERT_EQ(s.document_length(static_cast<int64_t>(i)), len);
        std::vector<int32_t> out(t.size(), -7);
        std::vector<uint8_t> m(t.size(), 9);
        s.read(static_cast<int64_t>(i), 0, len, out.data(), m.data());
        ASSERT_EQ(out, t) << "document " << i;
        if (with_mask)
          ASSERT_EQ(m, d.mask[i]);
        else
          ASSERT_EQ(m, std::vector<uint8_t>(t.size(), 1));
        // A random sub-range.
        int64_t b = static_cast<int64_t>(rng() % static_cast<uint64_t>(len));
        int64_t n = static_cast<int64_t>(rng() % static_cast<uint64_t>(len - b + 1));
        std::vector<int32_t> part(static_cast<size_t>(n) + 1, -7);
        s.read(static_cast<int64_t>(i), b, n, part.data());
        for (int64_t k = 0; k < n; ++k) ASSERT_EQ(part[k], t[b + k]);
        ASSERT_EQ(part[n], -7);  // nothing written past n
      }
      EXPECT_EQ(s.num_tokens(), total);
      EXPECT_EQ(s.max_token_id(), vocab - 1);
      EXPECT_EQ(s.max_token_id(), vocab - 1);  // cached
      EXPECT_THROW(s.read(0, 0, s.document_length(0) + 1, nullptr), InternalError);
      EXPECT_THROW(s.document_length(s.num_documents()), InternalError);
    }
  }
}

// The writer's .idx is byte for byte what the Megatron layout gives for its lengths.
TEST(TokenStore, WriterIndexMatchesTheSpecBytes) {
  std::mt19937_64 rng(fresh_seed());
  TempDir dir;
  StoreDocs d = random_docs(rng, 37, 1000, 50);
  write_store(dir / "w", d, StoreDtype::kUInt16, false);
  IdxSpec spec;
  spec.dtype_code = 8;
  for (auto& t : d.tokens) spec.lengths.push_back(static_cast<int32_t>(t.size()));
  spec.pointers = contiguous_pointers(spec.lengths, 2);
  for (size_t i = 0; i <= d.tokens.size(); ++i) spec.doc_index.push_back(static_cast<int64_t>(i));
  EXPECT_EQ(read_file(dir / "w.idx"), idx_bytes(spec));
  std::vector<uint8_t> bin;
  for (auto& t : d.tokens)
    for (int32_t x : t) put_le(bin, static_cast<uint32_t>(x), 2);
  EXPECT_EQ(read_file(dir / "w.bin"), bin);
}

TEST(TokenStore, EmptyStore) {
  TempDir dir;
  { TokenStoreWriter(dir / "e", StoreDtype::kInt32, true).finish(); }
  TokenStore s(dir / "e");
  EXPECT_EQ(s.num_documents(), 0);
  EXPECT_EQ(s.num_tokens(), 0);
  EXPECT_TRUE(s.has_mask());
  EXPECT_EQ(s.max_token_id(), -1);
}

// A Megatron store made by hand: sentence-split documents (several sequences each), an empty
// sequence, a document with no sequence, and a .bin with bytes between the sequences.
TEST(TokenStore, HandBuiltMegatronStoreWithSeveralSequencesPerDocument) {
  TempDir dir;
  const std::string prefix = dir / "mg";
  // Documents: 0 = seqs {0,1,2} (lengths 3, 0, 4); 1 = {} ; 2 = {3} (2); 3 = {4, 5} (1, 5).
  IdxSpec spec;
  spec.dtype_code = 8;  // uint16
  spec.lengths = {3, 0, 4, 2, 1, 5};
  spec.pointers = {0, 6, 6, 16, 20, 22};  // a 2-byte gap after sequence 2
  spec.doc_index = {0, 3, 3, 4, 6};
  std::vector<uint16_t> bin_tokens = {10, 11, 12, 20, 21, 22, 23, 999,
                                      30, 31, 40, 50, 51, 52, 53, 54};
  std::vector<uint8_t> bin;
  for (uint16_t t : bin_tokens) put_le(bin, t, 2);
  write_file(prefix + ".idx", idx_bytes(spec));
  write_file(prefix + ".bin", bin);
  std::vector<std::vector<int32_t>> want = {
      {10, 11, 12, 20, 21, 22, 23}, {}, {30, 31}, {40, 50, 51, 52, 53, 54}};
  for (bool with_mask : {false, true}) {
    std::vector<uint8_t> mask_bytes(bin_tokens.size());
    for (size_t i = 0; i < mask_bytes.size(); ++i) mask_bytes[i] = (i * 7 + 3) % 5 < 2;
    if (with_mask) write_file(prefix + ".mask", mask_bytes);
    TokenStore s(prefix);
    EXPECT_EQ(s.has_mask(), with_mask);
    EXPECT_EQ(s.dtype(), StoreDtype::kUInt16);
    ASSERT_EQ(s.num_documents(), 4);
    EXPECT_EQ(s.num_tokens(), 15);
    EXPECT_EQ(s.max_token_id(), 54);  // 999 sits in the gap, outside every sequence
    // Where each document token sits in .bin (for the mask).
    std::vector<std::vector<int>> at = {
        {0, 1, 2, 3, 4, 5, 6}, {}, {8, 9}, {10, 11, 12, 13, 14, 15}};
    for (int64_t doc = 0; doc < 4; ++doc) {
      const auto& w = want[doc];
      const int64_t len = static_cast<int64_t>(w.size());
      ASSERT_EQ(s.document_length(doc), len);
      for (int64_t b = 0; b <= len; ++b)
        for (int64_t n = 0; b + n <= len; ++n) {
          std::vector<int32_t> out(static_cast<size_t>(n) + 1, -1);
          std::vector<uint8_t> m(static_cast<size_t>(n) + 1, 9);
          s.read(doc, b, n, out.data(), m.data());
          for (int64_t k = 0; k < n; ++k) {
            ASSERT_EQ(out[k], w[b + k]) << doc << " " << b << " " << n;
            ASSERT_EQ(m[k], with_mask ? mask_bytes[at[doc][b + k]] : 1);
          }
          ASSERT_EQ(out[n], -1);
          ASSERT_EQ(m[n], 9);
        }
    }
  }
}

// Every integer dtype Megatron defines reads back as int32; ids outside [0, 2^31) are refused.
TEST(TokenStore, OtherIntegerDtypes) {
  TempDir dir;
  struct Case {
    uint8_t code;
    int size;
    std::vector<int64_t> values;
    bool bad;
  };
  std::vector<Case> cases = {
      {1, 1, {0, 7, 255}, false},
      {2, 1, {0, 5, 127}, false},
      {2, 1, {3, -1}, true},
      {3, 2, {0, 300, 32767}, false},
      {3, 2, {-300}, true},
      {5, 8, {0, 1, INT32_MAX}, false},
      {5, 8, {int64_t{INT32_MAX} + 1}, true},
      {5, 8, {-5}, true},
      {4, 4, {0, INT32_MAX}, false},
      {4, 4, {1, -2}, true},
  };
  int k = 0;
  for (const Case& c : cases) {
    const std::string prefix = dir / ("dt" + std::to_string(k++));
    IdxSpec spec;
    spec.dtype_code = c.code;
    spec.lengths = {static_cast<int32_t>(c.values.size())};
    spec.pointers = {0};
    spec.doc_index = {0, 1};
    std::vector<uint8_t> bin;
    for (int64_t v : c.values) put_le(bin, static_cast<uint64_t>(v), c.size);
    write_file(prefix + ".idx", idx_bytes(spec));
    write_file(prefix + ".bin", bin);
    TokenStore s(prefix);
    EXPECT_EQ(static_cast<int>(s.dtype()), c.code);
    EXPECT_EQ(store_dtype_size(s.dtype()), c.size);
    std::vector<int32_t> out(c.values.size());
    const int64_t n = static_cast<int64_t>(out.size());
    if (c.bad) {
      try {
        s.read(0, 0, n, out.data());
        ADD_FAILURE() << "read an id outside [0, 2^31) of code " << int(c.code);
      } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find(prefix + ".bin"), std::string::npos) << e.what();
      }
      EXPECT_THROW(s.max_token_id(), UserError);
    } else {
      s.read(0, 0, n, out.data());
      for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], c.values[i]);
      EXPECT_EQ(s.max_token_id(), *std::max_element(c.values.begin(), c.values.end()));
    }
  }
}

// One good store, then each field broken in turn: every failure is a UserError naming the file
// and what is wrong.
TEST(TokenStore, EveryCorruptionIsAUserErrorNamingTheFile) {
  TempDir dir;
  const std::string prefix = dir / "c", idx = prefix + ".idx", bin = prefix + ".bin",
                    mask = prefix + ".mask";
  IdxSpec good;
  good.dtype_code = 8;
  good.lengths = {3, 2, 4};
  good.pointers = contiguous_pointers(good.lengths, 2);
  good.doc_index = {0, 2, 3};
  std::vector<uint8_t> good_bin(18, 1);
  auto reset = [&] {
    write_file(idx, idx_bytes(good));
    write_file(bin, good_bin);
    fs::remove(mask);
  };
  reset();
  {
    TokenStore ok(prefix);
    EXPECT_EQ(ok.num_documents(), 2);
  }

  struct Case {
    std::string name, file, what;
    std::function<void()> corrupt;
  };
  auto with_spec = [&](std::function<void(IdxSpec&)> f) {
    return [&, f] {
      IdxSpec s = good;
      f(s);
      write_file(idx, idx_bytes(s));
    };
  };
  auto with_idx = [&](std::function<void(std::vector<uint8_t>&)> f) {
    return [&, f] {
      auto b = idx_bytes(good);
      f(b);
      write_file(idx, b);
    };
  };
  std::vector<Case> cases = {
      {"missing idx", idx, "cannot open", [&] { fs::remove(idx); }},
      {"missing bin", bin, "cannot open", [&] { fs::remove(bin); }},
      {"short header", idx, "shorter than the 34-byte header",
       with_idx([](auto& b) { b.resize(20); })},
      {"empty idx", idx, "shorter than", with_idx([](auto& b) { b.clear(); })},
      {"magic", idx, "MMIDIDX", with_idx([](auto& b) { b[3] = 'X'; })},
      {"magic padding", idx, "MMIDIDX", with_idx([](auto& b) { b[8] = 1; })},
      {"version", idx, "version 2", with_spec([](IdxSpec& s) { s.version = 2; })},
      {"float dtype", idx, "dtype code 7 (float32)",
       with_spec([](IdxSpec& s) { s.dtype_code = 7; })},
      {"float64 dtype", idx, "dtype code 6", with_spec([](IdxSpec& s) { s.dtype_code = 6; })},
      {"unknown dtype", idx, "unknown dtype code 9",
       with_spec([](IdxSpec& s) { s.dtype_code = 9; })},
      {"zero dtype", idx, "unknown dtype code 0", with_spec([](IdxSpec& s) { s.dtype_code = 0; })},
      {"huge sequence count", idx, "need more than",
       with_idx([](auto& b) { b[25] = 0x10; })},  // S's top byte
      {"huge document count", idx, "need more than", with_idx([](auto& b) { b[33] = 0x7f; })},
      {"document count 0", idx, "document count 0", with_idx([](auto& b) { b[26] = 0; })},
      {"sequence count off by one", idx, "need", with_idx([](auto& b) { b[18] = 2; })},
      {"trailing byte", idx, "the file has", with_idx([](auto& b) { b.push_back(0); })},
      {"truncated", idx, "need more than the file's 93 bytes",
       with_idx([](auto& b) { b.pop_back(); })},
      {"multimodal", idx, "multimodal", with_idx([](auto& b) { b.insert(b.end(), 3, 0); })},
      {"negative length", idx, "negative length -1",
       with_spec([](IdxSpec& s) { s.lengths[1] = -1; })},
      {"odd pointer", idx, "not a non-negative multiple",
       with_spec([](IdxSpec& s) { s.pointers[1] = 7; })},
      {"negative pointer", idx, "not a non-negative multiple",
       with_spec([](IdxSpec& s) { s.pointers[0] = -2; })},
      {"pointer past bin", idx, "runs past the end",
       with_spec([](IdxSpec& s) { s.pointers[2] = 20; })},
      {"length past bin", idx, "runs past the end",
       with_spec([](IdxSpec& s) { s.lengths[2] = 5; })},
      {"huge pointer", idx, "runs past the end",
       with_spec([](IdxSpec& s) { s.pointers[2] = INT64_MAX - 1; })},
      {"huge length", idx, "runs past the end",
       with_spec([](IdxSpec& s) { s.lengths[0] = INT32_MAX; })},
      {"doc index start", idx, "document_indices[0] is 1",
       with_spec([](IdxSpec& s) { s.doc_index[0] = 1; })},
      {"doc index decreasing", idx, "decrease at entry 2", with_spec([](IdxSpec& s) {
         s.doc_index = {0, 2, 1};
       })},
      {"doc index end", idx, "not at the sequence count 3", with_spec([](IdxSpec& s) {
         s.doc_index = {0, 2, 2};
       })},
      {"doc index past end", idx, "not at the sequence count", with_spec([](IdxSpec& s) {
         s.doc_index = {0, 2, 4};
       })},
      {"bin not whole tokens", bin, "not a whole number of uint16 tokens",
       [&] { write_file(bin, std::vector<uint8_t>(19, 1)); }},
      {"bin too short", idx, "runs past the end",
       [&] { write_file(bin, std::vector<uint8_t>(16, 1)); }},
      {"mask too short", mask, "holds 9 tokens",
       [&] { write_file(mask, std::vector<uint8_t>(8, 1)); }},
      {"mask too long", mask, "10 bytes", [&] { write_file(mask, std::vector<uint8_t>(10, 1)); }},
      {"mask is a directory", mask, "not a regular file", [&] { fs::create_directory(mask); }},
      {"overlapping sequences", idx, "starts at byte 4, inside the sequences before it",
       with_spec([](IdxSpec& s) { s.pointers[1] = 4; })},
      {"sequences out of order", idx, "inside the sequences before it, which end at byte 10",
       with_spec([](IdxSpec& s) { s.pointers[2] = 0; })},
      {"mask byte not 0/1", mask, "byte 4 is 2, not 0 or 1",
       [&] {
         std::vector<uint8_t> m(9, 1);
         m[4] = 2;
         write_file(mask, m);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    reset();
    c.corrupt();
    expect_store_error(prefix, c.file, c.what);
  }
}

TEST(TokenStoreWriter, NoIndexBeforeFinishAndNothingLeftWhenAbandoned) {
  TempDir dir;
  const std::string p = dir / "w";
  std::vector<int32_t> t = {1, 2, 3};
  std::vector<uint8_t> m = {0, 1, 1};
  // A complete old store at the prefix: its index and mask must not survive a new writer.
  {
    TokenStoreWriter w(p, StoreDtype::kUInt16, true);
    w.add_document(t, m);
    w.finish();
  }
  ASSERT_TRUE(fs::exists(p + ".idx"));
  {
    TokenStoreWriter w(p, StoreDtype::kInt32, false);
    EXPECT_FALSE(fs::exists(p + ".idx"));
    EXPECT_FALSE(fs::exists(p + ".mask"));
    w.add_document(t);
    EXPECT_TRUE(fs::exists(p + ".bin"));
    EXPECT_FALSE(fs::exists(p + ".idx"));
    EXPECT_EQ(w.num_tokens(), 3);
  }  // destroyed without finish()
  for (const char* ext : {".bin", ".idx", ".idx.tmp", ".mask"})
    EXPECT_FALSE(fs::exists(p + ext)) << ext;
  EXPECT_TRUE(fs::is_empty(dir.path()));
  {
    TokenStoreWriter w(p, StoreDtype::kUInt16, true);
    w.add_document(t, m);
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(TokenStoreWriter, RefusesBadInput) {
  TempDir dir;
  try {
    TokenStoreWriter w(dir / "no/such/dir/x", StoreDtype::kUInt16, false);
    ADD_FAILURE() << "created a store in a missing directory";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "no/such/dir/x.bin"), std::string::npos);
  }
  TokenStoreWriter w(dir / "x", StoreDtype::kUInt16, true);
  std::vector<int32_t> big = {1, 65536}, neg = {-1}, ok = {1, 2};
  std::vector<uint8_t> m2 = {1, 1}, bad_mask = {1, 2}, m1 = {1};
  EXPECT_THROW(w.add_document(big, m2), InternalError);
  EXPECT_THROW(w.add_document(neg, m1), InternalError);
  EXPECT_THROW(w.add_document({}, {}), InternalError);
  EXPECT_THROW(w.add_document(ok, m1), InternalError);  // mask length
  EXPECT_THROW(w.add_document(ok, bad_mask), InternalError);
  // A refused document leaves no trace: the store holds exactly the documents accepted.
  std::vector<int32_t> long_bad(3 << 20, 7);  // several buffer flushes before the bad id
  long_bad.back() = 70000;
  std::vector<uint8_t> long_mask(long_bad.size(), 1);
  EXPECT_THROW(w.add_document(long_bad, long_mask), InternalError);
  w.add_document(ok, m2);
  w.finish();
  TokenStore s(dir / "x");
  ASSERT_EQ(s.num_documents(), 1);
  EXPECT_EQ(fs::file_size(dir / "x.bin"), 4u);
  EXPECT_EQ(store_dtype_for_vocab(65536), StoreDtype::kUInt16);
  EXPECT_EQ(store_dtype_for_vocab(65537), StoreDtype::kInt32);
}

}  // namespace
}  // namespace lmt
