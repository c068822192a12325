// Randomised robustness test of the safetensors reader: valid files mutated many ways (bit flips,
// truncation, random bytes, header-length edits, JSON-aware edits of dtype/shape/offsets). Every
// input must either parse, with every tensor then readable, or throw UserError; nothing else. Run
// under -fsanitize=address,undefined to catch out-of-bounds reads that happen not to crash.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/fuzz_mutations.h"

namespace lmt {
namespace {

std::vector<std::vector<uint8_t>> seed_files() {
  std::vector<std::vector<uint8_t>> out;
  std::vector<uint8_t> junk(256);
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(i * 37 + 11);
  {
    SafetensorsWriter w;
    w.add("model.embed_tokens.weight", DType::f32, {4, 3}, junk.data());
    w.add("model.norm.weight", DType::bf16, {3}, junk.data());
    w.add("scalar", DType::f64, Shape{}, junk.data());
    w.add("empty", DType::f16, {0, 2}, junk.data());
    w.add("bytes", DType::u8, {5}, junk.data());
    w.set_metadata("format", "pt");
    out.push_back(w.to_bytes());
  }
  {
    SafetensorsWriter w;
    w.add("a", DType::i32, {2, 2}, junk.data());
    w.add("b", DType::u16, {7}, junk.data());
    out.push_back(w.to_bytes());
  }
  {
    SafetensorsWriter w;
    out.push_back(w.to_bytes());  // no tensors at all
  }
  return out;
}

// Rewrites the header JSON: one random field of one random entry gets a random value.
std::vector<uint8_t> mutate_json(const std::vector<uint8_t>& file, std::mt19937_64& rng) {
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  nlohmann::json h =
      nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + static_cast<long>(n));
  if (!h.is_object()) return file;
  if (h.empty()) h["x"] = nlohmann::json::object();
  auto it = h.begin();
  std::advance(it, static_cast<long>(rng() % h.size()));
  if (!it->is_object()) *it = nlohmann::json::object();
  auto big = [&]() -> nlohmann::json {
    switch (rng() % 8) {
      case 0:
        return -static_cast<int64_t>(rng() % 100);
      case 1:
        return rng();  // huge unsigned
      case 2:
        return static_cast<double>(rng() % 100) + 0.5;
      case 3:
        return "12";
      case 4:
        return nullptr;
      default:
        return rng() % 64;
    }
  };
  static const char* kDtypes[] = {"F32", "F64", "BF16", "F16", "I64", "U8", "BOOL", "X", ""};
  switch (rng() % 8) {
    case 7: {  // slide the range, keeping its length: overlaps, gaps, out of bounds
      auto& off = (*it)["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
          !off[1].is_number_unsigned())
        return file;
      const int64_t delta = static_cast<int64_t>(rng() % 17) - 8;
      const int64_t b = off[0].get<int64_t>() + delta, e = off[1].get<int64_t>() + delta;
      off = nlohmann::json::array({b, e});
      break;
    }
    case 0:
      (*it)["dtype"] = kDtypes[rng() % 9];
      break;
    case 1:
      (*it)["shape"] = nlohmann::json::array({big(), big()});
      break;
    case 2:
      (*it)["shape"] = nlohmann::json::array();
      break;
    case 3:
      (*it)["data_offsets"] = nlohmann::json::array({big(), big()});
      break;
    case 4:
      if (!(*it)["data_offsets"].is_array()) return file;
      (*it)["data_offsets"][rng() % 2] = big();
      break;
    case 5:
      *it = big();
      break;
    default:
      h["__metadata__"] = nlohmann::json::object({{"k", big()}});
      break;
  }
  std::string text = h.dump();
  std::vector<uint8_t> out(8);
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), file.begin() + 8 + static_cast<long>(n), file.end());
  return out;
}

std::vector<uint8_t> mutate(const std::vector<uint8_t>& file, std::mt19937_64& rng) {
  std::vector<uint8_t> b = file;
  auto pos = [&](size_t size) { return size ? rng() % size : 0; };
  const unsigned kind = static_cast<unsigned>(rng() % 7);
  if (test::mutate_raw_bytes(b, kind, rng)) return b;  // kinds 0-2
  switch (kind) {
    case 3: {  // a new header length
      const uint64_t choices[] = {0, 1, b.size() - 8, b.size(), rng(), rng() % 512, ~0ull};
      const uint64_t n = choices[rng() % 7];
      if (b.size() >= 8) std::memcpy(b.data(), &n, 8);
      break;
    }
    case 4: {  // a header byte replaced by a JSON-significant character
      static const char kChars[] = "{}[]\",:0123456789-.e \\";
      uint64_t n;
      std::memcpy(&n, b.data(), 8);
      if (n) b[8 + pos(n)] = static_cast<uint8_t>(kChars[rng() % (sizeof kChars - 1)]);
      break;
    }
    case 5:  // random bytes appended or the data buffer dropped
      if (rng() % 2) {
        for (int i = 0, k = static_cast<int>(rng() % 32); i < k; ++i)
          b.push_back(static_cast<uint8_t>(rng()));
      } else {
        uint64_t n;
        std::memcpy(&n, b.data(), 8);
        b.resize(8 + n);
      }
      break;
    default:
      return mutate_json(file, rng);
  }
  return b;
}

TEST(SafetensorsFuzz, EveryInputParsesOrThrowsUserError) {
  const auto seeds = seed_files();
  // LMT_FUZZ_SEED / LMT_FUZZ_INPUTS widen a local run (e.g. a long one under the sanitizers).
  const char* seed_env = std::getenv("LMT_FUZZ_SEED");
  const char* inputs_env = std::getenv("LMT_FUZZ_INPUTS");
  std::mt19937_64 rng(seed_env ? std::strtoull(seed_env, nullptr, 10) : 20240611);
  const int inputs = inputs_env ? std::atoi(inputs_env) : 6000;
  int tried = 0, accepted = 0, rejected = 0;
  std::map<std::string, int> reasons;  // the message with digits and names dropped
  for (int i = 0; i < inputs; ++i) {
    std::vector<uint8_t> input = seeds[rng() % seeds.size()];
    for (int m = 0, k = 1 + static_cast<int>(rng() % 3); m < k; ++m) {
      if (input.size() < 8 || (m > 0 && rng() % 2)) break;
      uint64_t n;
      std::memcpy(&n, input.data(), 8);
      // JSON-aware edits need a parseable header; fall back to byte edits otherwise.
      bool json_ok =
          n <= input.size() - 8 &&
          nlohmann::json::accept(input.begin() + 8, input.begin() + 8 + static_cast<long>(n));
      std::vector<uint8_t> next = json_ok ? mutate(input, rng) : input;
      if (!json_ok) next[rng() % next.size()] ^= 0xff;
      input = std::move(next);
    }
    ++tried;
    try {
      SafetensorsFile f = SafetensorsFile::from_bytes(input, "fuzz.safetensors");
      for (const std::string& name : f.names()) {
        const SafetensorsMeta& m = f.meta(name);
        ASSERT_LE(m.begin, m.end);
        if (m.dtype) {
          HostTensor t = f.read(name);
          ASSERT_EQ(t.nbytes(), m.nbytes());
          if (*m.dtype == DType::bf16 || *m.dtype == DType::f16) f.read_as(name, DType::f32);
        }
        volatile uint8_t sink =
            m.nbytes() ? static_cast<const uint8_t*>(f.raw(name))[m.nbytes() - 1] : 0;
        (void)sink;
      }
      ++accepted;
    } catch (const UserError& e) {
      ASSERT_NE(std::string(e.what()).find("fuzz.safetensors"), std::string::npos) << e.what();
      ++rejected;
      std::string r;
      bool in_quote = false;
      for (char c :
           std::string(e.what()).substr(std::strlen("safetensors file 'fuzz.safetensors': "))) {
        if (c == '\'') in_quote = !in_quote;
        if (!in_quote && !std::isdigit(static_cast<unsigned char>(c))) r += c;
        if (r.size() >= 40) break;
      }
      ++reasons[r];
    }
  }
  std::printf(
      "safetensors fuzz: %d inputs tried, %d accepted, %d rejected for %zu kinds of reason\n",
      tried, accepted, rejected, reasons.size());
  if (std::getenv("LMT_FUZZ_VERBOSE"))
    for (const auto& [r, n] : reasons) std::printf("  %6d  %s\n", n, r.c_str());
  EXPECT_EQ(tried, accepted + rejected);
  EXPECT_GT(accepted, tried / 20);  // the mutations must not all be fatal,
  EXPECT_GT(rejected, tried / 2);   // nor all harmless
}

}  // namespace
}  // namespace lmt
