#include "data/tokenizer/bpe_trainer.h"

#include <simdjson.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"

namespace lmt {

namespace {

// Counts the pre-tokenized words of a text.
// `text` must be valid UTF-8 (PCRE2 runs without its own check).
void count_words(std::string_view text, pcre2_code* re, pcre2_match_data* md,
                 std::unordered_map<std::string, int64_t>& counts) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset < text.size()) {
    int rc = pcre2_match(re, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // cannot happen with this pattern; guard against a loop
      ++offset;
      continue;
    }
    ++counts[std::string(text.substr(ov[0], ov[1] - ov[0]))];
    offset = ov[1];
  }
}

}  // namespace

int64_t train_bpe_tokenizer(const std::vector<std::string>& inputs, const BpeTrainOptions& opt,
                            const std::string& out) {
  if (inputs.empty()) throw UserError("--input: no input files given");
  return train_bpe_tokenizer(
      [&](const TextSink& sink) {
        for (const std::string& path : inputs) {
          std::ifstream f(path, std::ios::binary);
          if (!f) throw UserError("--input: cannot read '" + path + "'");
          std::stringstream ss;
          ss << f.rdbuf();
          const std::string text = ss.str();
          if (!simdjson::validate_utf8(text.data(), text.size()))
            throw UserError("--input: '" + path + "' is not valid UTF-8 text");
          sink(text);
        }
      },
      opt, out);
}

int64_t train_bpe_tokenizer(const std::function<void(const TextSink&)>& for_each_text,
                            const BpeTrainOptions& opt, const std::string& out,
                            int64_t* skipped_invalid) {
  const int64_t specials = static_cast<int64_t>(opt.special_tokens.size());
  if (opt.vocab_size < 256 + specials)
    throw UserError("--vocab-size must be at least " + std::to_string(256 + specials) +
                    " (256 bytes + special tokens), got " + std::to_string(opt.vocab_size));

  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  LMT_CHECK(re != nullptr, "the GPT-2 pattern must compile");
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  std::unordered_map<std::string, int64_t> word_counts;
  int64_t invalid = 0;
  try {
    for_each_text([&](std::string_view text) {
      if (!simdjson::validate_utf8(text.data(), text.size())) {
        ++invalid;
        return;
      }
      count_words(text, re, md, word_counts);
    });
  } catch (...) {
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    throw;
  }
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  if (skipped_invalid) *skipped_invalid = invalid;

  // Symbols: ids 0..255 are the bytes (in byte order); merges append.
  std::vector<std::string> symbol(256);
  const auto table = gpt2_bytes_to_unicode();
  for (int b = 0; b < 256; ++b) append_utf8(table[b], symbol[b]);
  struct Word {
    std::vector<int32_t> syms;
    int64_t count;
  };
  std::vector<Word> words;
  words.reserve(word_counts.size());
  for (auto& [w, c] : word_counts) {
    Word wd{{}, c};
    for (unsigned char ch : w) wd.syms.push_back(ch);
    words.push_back(std::move(wd));
  }
  // Process words in a fixed order so that the result does not depend on hash-map order.
  std::sort(words.begin(), words.end(),
            [&](const Word& a, const Word& b) { return a.syms < b.syms; });

  std::vector<std::pair<int32_t, int32_t>> merges;
  const int64_t target_merges = opt.vocab_size - 256 - specials;
  std::unordered_map<uint64_t, int64_t> pairs;
  while (static_cast<int64_t>(merges.size()) < target_merges) {
    pairs.clear();
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.syms.size(); ++i)
        pairs[(static_cast<uint64_t>(w.syms[i]) << 32) | static_cast<uint32_t>(w.syms[i + 1])] +=
            w.count;
    // The most frequent pair; ties go to the lexicographically smallest pair of strings.
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [key, c] : pairs) {
      if (c < best_count || c < opt.min_frequency) continue;
      if (c == best_count) {
        const auto a = std::make_pair(symbol[key >> 32], symbol[key & 0xffffffffu]);
        const auto b = std::make_pair(symbol[best >> 32], symbol[best & 0xffffffffu]);
        if (!(a < b)) continue;
      }
      best = key;
      best_count = c;
    }
    if (best_count == 0) break;  // nothing left worth merging
    const int32_t left = static_cast<int32_t>(best >> 32),
                  right = static_cast<int32_t>(best & 0xffffffffu);
    const int32_t id = static_cast<int32_t>(symbol.size());
    symbol.push_back(symbol[left] + symbol[right]);
    merges.emplace_back(left, right);
    for (Word& w : words) {
      std::vector<int32_t>& s = w.syms;
      size_t o = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          s[o++] = id;
          ++i;
        } else {
          s[o++] = s[i];
        }
      }
      s.resize(o);
    }
  }

  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t i = 0; i < symbol.size(); ++i) vocab[symbol[i]] = static_cast<int64_t>(i);
  nlohmann::ordered_json merge_list = nlohmann::ordered_json::array();
  for (auto [a, b] : merges) merge_list.push_back({symbol[a], symbol[b]});
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (size_t i = 0; i < opt.special_tokens.size(); ++i)
    added.push_back({{"id", static_cast<int64_t>(symbol.size() + i)},
                     {"content", opt.special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  const nlohmann::ordered_json byte_level = {{"type", "ByteLevel"},
                                             {"add_prefix_space", false},
                                             {"trim_offsets", true},
                                             {"use_regex", true}};
  nlohmann::ordered_json j = {{"version", "1.0"},
                              {"truncation", nullptr},
                              {"padding", nullptr},
                              {"added_tokens", added},
                              {"normalizer", nullptr},
                              {"pre_tokenizer", byte_level},
                              {"post_processor", nullptr},
                              {"decoder", byte_level},
                              {"model",
                               {{"type", "BPE"},
                                {"dropout", nullptr},
                                {"unk_token", nullptr},
                                {"continuing_subword_prefix", nullptr},
                                {"end_of_word_suffix", nullptr},
                                {"fuse_unk", false},
                                {"byte_fallback", false},
                                {"ignore_merges", false},
                                {"vocab", vocab},
                                {"merges", merge_list}}}};
  const std::string tmp = out + ".tmp";
  {
    std::error_code ec;
    if (const auto parent = std::filesystem::path(out).parent_path(); !parent.empty())
      std::filesystem::create_directories(parent, ec);
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(2) << '\n';
    if (!f) throw UserError("--out: cannot write '" + out + "'");
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0)
    throw UserError("--out: cannot write '" + out + "'");
  return static_cast<int64_t>(merges.size());
}

}  // namespace lmt
