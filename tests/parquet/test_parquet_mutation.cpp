// Randomized mutation test: thousands of damaged copies of the fixtures (flipped bytes, damage
// aimed at the footer, truncations, cut-out ranges, garbage lengths) must each end in success or
// one UserError — never a crash, another exception or (under the debug preset's ASan + UBSan) an
// out-of-bounds read. LMT_PARQUET_MUTATIONS sets the count (default 3000), LMT_PARQUET_SEED
// replays a run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/error.h"
#include "data/parquet_source.h"
#include "parquet/parquet_test_util.h"

namespace lmt {
namespace {

std::string mutate(std::string d, std::mt19937_64& rng, int* kind_out) {
  auto uniform = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  uint32_t footer_len = 0;
  if (d.size() >= 8) std::memcpy(&footer_len, &d[d.size() - 8], 4);
  const size_t footer_start = footer_len + 8 <= d.size() ? d.size() - 8 - footer_len : d.size() / 2;
  const int kind = static_cast<int>(rng() % 6);
  *kind_out = kind;
  switch (kind) {
    case 0:  // flip a few bytes anywhere
      for (size_t n = 1 + uniform(8); n > 0; --n)
        d[uniform(d.size())] ^= static_cast<char>(1 + uniform(255));
      break;
    case 1:  // flip a few bytes of the footer (it steers every read)
      for (size_t n = 1 + uniform(4); n > 0; --n)
        d[footer_start + uniform(d.size() - footer_start)] ^= static_cast<char>(1 + uniform(255));
      break;
    case 2:  // truncate, keeping the tail magic and footer length half of the time
      if (rng() & 1) {
        d.resize(uniform(d.size()));
      } else {
        std::string tail = d.substr(d.size() - 8);
        d.resize(uniform(d.size() - 8));
        d += tail;
      }
      break;
    case 3: {  // cut out a range (shifts every offset after it)
      size_t at = uniform(d.size()), n = 1 + uniform(64);
      d.erase(at, n);
      break;
    }
    case 4: {  // a garbage 4-byte length or varint at a random place
      size_t at = uniform(d.size());
      uint8_t buf[5];
      uint32_t v = static_cast<uint32_t>(rng());
      if (rng() & 1) {
        std::memcpy(buf, &v, 4);
        for (int i = 0; i < 4 && at + i < d.size(); ++i) d[at + i] = static_cast<char>(buf[i]);
      } else {
        for (int i = 0; i < 5 && at + i < d.size(); ++i)
          d[at + i] = static_cast<char>((v >> (7 * i)) & 0x7f) | (i < 4 ? '\x80' : 0);
      }
      break;
    }
    default:  // a garbage varint inside the footer
      for (size_t n = 1 + uniform(2), at = footer_start + uniform(d.size() - footer_start); n > 0;
           --n, ++at)
        if (at < d.size()) d[at] = static_cast<char>(0x80 | uniform(256));
      break;
  }
  return d;
}

TEST(ParquetMutation, NeverCrashesOnlyUserErrors) {
  const char* count_env = std::getenv("LMT_PARQUET_MUTATIONS");
  const char* seed_env = std::getenv("LMT_PARQUET_SEED");
  const long count = count_env ? std::atol(count_env) : 3000;
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : std::random_device{}();
  std::mt19937_64 rng(seed);
  std::vector<std::string> fixtures;
  for (const std::string& f : test::parquet_fixtures(true))
    fixtures.push_back(test::read_file_bytes(f));
  ASSERT_FALSE(fixtures.empty());
  test::TempDir dir;
  const std::string path = dir.file("mutated.parquet");
  long errors = 0, successes = 0;
  double slowest_ms = 0;
  int slowest_kind = -1;
  uint64_t checksum = 0;
  for (long i = 0; i < count; ++i) {
    int kind = -1;
    const auto t0 = std::chrono::steady_clock::now();
    std::string data = mutate(fixtures[rng() % fixtures.size()], rng, &kind);
    test::write_file_bytes(path, data);
    try {
      parquet_columns(path);
      // Every byte of every value is read, so a view past its buffer is caught by ASan.
      parquet_rows(path, {"text", "title", "blob"},
                   [&](int64_t, std::span<const std::optional<std::string_view>> v) {
                     for (const auto& s : v)
                       if (s)
                         for (char c : *s) checksum = checksum * 31 + static_cast<uint8_t>(c);
                   });
      SkippedRecords skipped;
      parquet_documents(path, "text", &skipped, [&](std::string_view d) { checksum += d.size(); });
      ++successes;
    } catch (const UserError& e) {
      ++errors;
      ASSERT_NE(std::string(e.what()).find(path), std::string::npos)
          << "the message must name the file: " << e.what();
    } catch (const std::exception& e) {
      FAIL() << "input " << i << " (mutation " << kind << ", LMT_PARQUET_SEED=" << seed
             << "): not a UserError: " << e.what();
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ms > slowest_ms) slowest_ms = ms, slowest_kind = kind;
  }
  std::printf("slowest input: %.1f ms (mutation %d)\n", slowest_ms, slowest_kind);
  std::printf(
      "parquet mutation test: %ld inputs survived (%ld UserErrors, %ld read fine), "
      "seed %llu, checksum %llu\n",
      count, errors, successes, static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(checksum));
  EXPECT_GT(errors, 0);
  EXPECT_GT(successes, 0);  // some mutations hit bytes that do not matter (statistics, padding)
}

}  // namespace
}  // namespace lmt
