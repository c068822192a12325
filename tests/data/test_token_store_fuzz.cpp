// Randomized mutations of valid .idx files (and now and then of the .bin and .mask sizes): every
// input is either refused with a UserError or opens into a store whose every document reads back
// inside the mapped files. Run under the debug preset (ASan/UBSan) to catch out-of-bounds reads.
// LMT_STORE_FUZZ_ITERS overrides the number of inputs (default 3000).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "core/error.h"
#include "data/token_store.h"
#include "store_test_util.h"

namespace lmt {
namespace {

using namespace store_test;

struct Base {
  IdxSpec spec;
  std::vector<uint8_t> bin, mask;  // mask empty: no .mask
  int tsize;
};

std::vector<Base> bases() {
  std::vector<Base> out;
  {  // sentence-split uint16 store with a mask, an empty sequence and an empty document
    Base b;
    b.tsize = 2;
    b.spec.dtype_code = 8;
    b.spec.lengths = {3, 0, 4, 2, 1, 5, 6};
    b.spec.pointers = contiguous_pointers(b.spec.lengths, 2);
    b.spec.doc_index = {0, 3, 3, 4, 6, 7};
    for (int i = 0; i < 21; ++i) put_le(b.bin, static_cast<uint64_t>(i * 3000), 2);
    b.mask.assign(21, 1);
    b.mask[4] = 0;
    out.push_back(b);
  }
  {  // one sequence per document, int32, as TokenStoreWriter writes
    Base b;
    b.tsize = 4;
    b.spec.dtype_code = 4;
    b.spec.lengths = {5, 1, 7, 2};
    b.spec.pointers = contiguous_pointers(b.spec.lengths, 4);
    b.spec.doc_index = {0, 1, 2, 3, 4};
    for (int i = 0; i < 15; ++i) put_le(b.bin, static_cast<uint64_t>(i * 100000), 4);
    out.push_back(b);
  }
  {  // int64 tokens, two documents of two sequences
    Base b;
    b.tsize = 8;
    b.spec.dtype_code = 5;
    b.spec.lengths = {2, 3, 1, 2};
    b.spec.pointers = contiguous_pointers(b.spec.lengths, 8);
    b.spec.doc_index = {0, 2, 4};
    for (int i = 0; i < 8; ++i) put_le(b.bin, static_cast<uint64_t>(i * 7), 8);
    out.push_back(b);
  }
  return out;
}

int64_t interesting(std::mt19937_64& rng, int64_t current, int64_t bin_size) {
  auto wrap = [](uint64_t v) { return static_cast<int64_t>(v); };  // two's complement, no UB
  const uint64_t c = static_cast<uint64_t>(current);
  const int64_t v[] = {0,
                       1,
                       -1,
                       2,
                       INT32_MAX,
                       INT32_MIN,
                       INT64_MAX,
                       INT64_MIN,
                       wrap(c + 1),
                       wrap(c - 1),
                       wrap(c + 2),
                       wrap(c * 2),
                       bin_size,
                       bin_size - 1,
                       bin_size / 2,
                       int64_t{1} << 32};
  return v[rng() % (sizeof v / sizeof v[0])];
}

// A still-valid index of another shape: lengths shortened, documents regrouped, a pointer moved
// to another token of .bin. Keeps some inputs opening, so reads get exercised too.
IdxSpec reshape(std::mt19937_64& rng, const Base& base) {
  IdxSpec s = base.spec;
  const int64_t S = static_cast<int64_t>(s.lengths.size());
  const int64_t bin_tokens = static_cast<int64_t>(base.bin.size()) / base.tsize;
  for (int64_t i = 0; i < S; ++i) {
    if (rng() % 3 == 0) s.lengths[i] = static_cast<int32_t>(rng() % (s.lengths[i] + 1));
    if (rng() % 4 == 0) {
      int64_t t =
          static_cast<int64_t>(rng() % static_cast<uint64_t>(bin_tokens - s.lengths[i] + 1));
      s.pointers[i] = t * base.tsize;
    }
  }
  int64_t D = 1 + static_cast<int64_t>(rng() % (S + 3));
  s.doc_index.assign(1, 0);
  for (int64_t d = 1; d + 1 < D; ++d) s.doc_index.push_back(static_cast<int64_t>(rng() % (S + 1)));
  std::sort(s.doc_index.begin(), s.doc_index.end());
  s.doc_index.push_back(S);
  if (D == 1) s.doc_index = {0};
  if (D == 1 && S > 0) s.doc_index = {0, S};
  return s;
}

void mutate(std::mt19937_64& rng, std::vector<uint8_t>& b, const Base& base) {
  const int64_t S = static_cast<int64_t>(base.spec.lengths.size());
  const int64_t D = static_cast<int64_t>(base.spec.doc_index.size());
  switch (rng() % 7) {
    case 0:
      if (!b.empty()) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:
      if (!b.empty()) b[rng() % b.size()] = static_cast<uint8_t>(rng());
      break;
    case 2:
    case 3: {  // a whole field of the layout set to an interesting value
      int64_t at, width;
      switch (rng() % 6) {
        case 0:
          at = 9, width = 8;
          break;  // version
        case 1:
          at = 18 + 8 * static_cast<int64_t>(rng() % 2), width = 8;
          break;  // S or D
        case 2:
          at = 17, width = 1;
          break;  // dtype
        case 3:
          at = 34 + 4 * static_cast<int64_t>(rng() % S), width = 4;
          break;  // a length
        case 4:
          at = 34 + 4 * S + 8 * static_cast<int64_t>(rng() % S), width = 8;
          break;
        default:
          at = 34 + 12 * S + 8 * static_cast<int64_t>(rng() % D), width = 8;
          break;
      }
      if (at + width > static_cast<int64_t>(b.size())) break;
      int64_t cur = 0;
      std::memcpy(&cur, b.data() + at, static_cast<size_t>(width));
      if (width == 4) cur = static_cast<int32_t>(cur);
      if (width == 1) cur = static_cast<uint8_t>(cur);
      int64_t v = interesting(rng, cur, static_cast<int64_t>(base.bin.size()));
      for (int64_t i = 0; i < width; ++i)
        b[at + i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
      break;
    }
    case 4:
      b.resize(rng() % (b.size() + 1));
      break;
    case 5:
      for (int n = 1 + static_cast<int>(rng() % 16); n > 0; --n)
        b.push_back(static_cast<uint8_t>(rng()));
      break;
    default:
      if (rng() % 2 && !b.empty())
        b.erase(b.begin() + static_cast<int64_t>(rng() % b.size()));
      else
        b.insert(b.begin() + static_cast<int64_t>(rng() % (b.size() + 1)),
                 static_cast<uint8_t>(rng()));
      break;
  }
}

TEST(TokenStoreFuzz, MutatedIndexIsRefusedOrReadsInBounds) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int64_t iterations = 3000;
  if (const char* e = std::getenv("LMT_STORE_FUZZ_ITERS")) iterations = std::atoll(e);
  // Thousands of tiny files: in memory when the machine has a tmpfs, so the test stays fast.
  TempDir dir(std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "");
  const std::string prefix = dir / "f";
  const std::vector<Base> all = bases();
  int64_t opened = 0, refused = 0, refused_on_read = 0, tokens_read = 0;
  for (int64_t it = 0; it < iterations; ++it) {
    const Base& base = all[rng() % all.size()];
    std::vector<uint8_t> idx, bin = base.bin, mask = base.mask;
    if (rng() % 3 == 0) {
      idx = idx_bytes(reshape(rng, base));
      if (rng() % 4 == 0) mutate(rng, idx, base);
    } else {
      idx = idx_bytes(base.spec);
      for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n) mutate(rng, idx, base);
    }
    if (rng() % 8 == 0) bin.resize(rng() % (bin.size() + 1));
    if (rng() % 8 == 0) mask.resize(rng() % (mask.size() + 3));
    write_file(prefix + ".idx", idx);
    write_file(prefix + ".bin", bin);
    if (mask.empty() && base.mask.empty())
      std::remove((prefix + ".mask").c_str());
    else
      write_file(prefix + ".mask", mask);
    try {
      TokenStore s(prefix);
      ++opened;
      int64_t sum = 0;
      for (int64_t d = 0; d < s.num_documents(); ++d) {
        const int64_t len = s.document_length(d);
        ASSERT_GE(len, 0);
        sum += len;
        std::vector<int32_t> out(static_cast<size_t>(len));
        std::vector<uint8_t> m(static_cast<size_t>(len));
        s.read(d, 0, len, out.data(), m.data());
        for (int64_t k = 0; k < len; ++k) ASSERT_GE(out[k], 0);
        if (len > 1) s.read(d, len / 2, len - len / 2, out.data(), m.data());
        tokens_read += len;
      }
      ASSERT_EQ(sum, s.num_tokens());
      s.max_token_id();
    } catch (const UserError& e) {
      std::string msg = e.what();
      ASSERT_NE(msg.find(prefix), std::string::npos) << msg;
      (msg.find("not a token id") != std::string::npos ? refused_on_read : refused)++;
    }
  }
  std::cout << "[ fuzz     ] " << iterations << " mutated stores: " << opened
            << " opened and read (" << tokens_read << " tokens), " << refused
            << " refused when opened, " << refused_on_read << " refused a token id on read\n";
  EXPECT_GT(refused, iterations / 4);
  if (iterations >= 1000) EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace lmt
