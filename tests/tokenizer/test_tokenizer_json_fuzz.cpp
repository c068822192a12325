// Randomised robustness test of the tokenizer.json reader (load_tokenizer on a .json file). Small
// tokenizers of every kind lmtrain reads (byte-level BPE, Metaspace BPE with byte fallback, regex
// Split pre-tokenizers, Unigram, one trained by lmtrain) are mutated JSON-aware (model type, ids,
// merges in both forms, added tokens, normalizer / pre-tokenizer / decoder / post-processor,
// scores, flags, deep nesting, any node retyped) and byte-wise (bit flips, truncation, random
// bytes, invalid UTF-8 and bad escapes inside strings). Every input must either be refused with a
// UserError naming the file, or load into a tokenizer that encodes random texts (many scripts,
// invalid UTF-8, empty) into ids below vocab_size() and decodes those ids again; nothing else.
// Encode may refuse a text with a UserError (a Unigram model without unk_id, a regex past PCRE2's
// match limit). Run under the debug preset (ASan/UBSan) to catch what does not crash.
// LMT_TOKENIZER_FUZZ_INPUTS overrides the number of inputs (default 2000), LMT_FUZZ_SEED replays
// a seed, LMT_FUZZ_VERBOSE lists the refusals by kind; a failing input is kept in the test's temp
// directory, and LMT_TOKENIZER_FUZZ_REPLAY=FILE loads and exercises that one file alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/tokenizer/tokenizer.h"
#include "io/fuzz_mutations.h"

namespace lmt {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A fixture cut down to the tokens with id < `keep` and the merges among them (at most
// `max_merges`), so that every input stays small and quick to load.
json shrink(const std::string& name, int64_t keep, size_t max_merges) {
  json j = json::parse(slurp(std::string(LMT_TEST_DATA) + "/tokenizers/" + name));
  json& m = j["model"];
  json vocab = json::object(), merges = json::array();
  for (const auto& [tok, id] : m["vocab"].items())
    if (id.get<int64_t>() < keep) vocab[tok] = id;
  for (const json& e : m["merges"]) {
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      a = s.substr(0, s.find(' '));
      b = s.substr(s.find(' ') + 1);
    } else {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    }
    if (vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) merges.push_back(e);
    if (merges.size() >= max_merges) break;
  }
  m["vocab"] = vocab;
  m["merges"] = merges;
  return j;
}

json merges_as_strings(json j) {
  for (json& e : j["model"]["merges"]) e = e[0].get<std::string>() + " " + e[1].get<std::string>();
  return j;
}

json unigram(bool byte_level) {
  json vocab = json::array();
  json pieces = byte_level ? json::array({"Ġ", "Ġhe", "llo", "h", "e", "l", "o", "Ġhello"})
                           : json::array({"<unk>", "</s>", "▁", "▁he", "llo", "h", "e", "l", "o",
                                          "▁hello", "中", "文"});
  double score = -1;
  for (const json& p : pieces) vocab.push_back({p, score -= 0.5});
  if (!byte_level)
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      vocab.push_back({hex, -30.0});
    }
  json model = {{"type", "Unigram"}, {"vocab", vocab}, {"byte_fallback", !byte_level}};
  model["unk_id"] = byte_level ? json() : json(0);  // byte-level: an uncovered text is refused
  json metaspace = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  json byte_pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  return {{"version", "1.0"},
          {"added_tokens",
           byte_level ? json::array()
                      : json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                     {{"id", 1}, {"content", "</s>"}, {"special", true}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level ? byte_pre : metaspace},
          {"post_processor", nullptr},
          {"decoder", byte_level ? json{{"type", "ByteLevel"}}
                                 : json{{"type", "Sequence"},
                                        {"decoders", {{{"type", "ByteFallback"}}, metaspace}}}},
          {"model", model}};
}

json trained(const std::string& dir) {
  const std::string out = dir + "/trained.json";
  BpeTrainOptions opt;
  opt.vocab_size = 300;
  opt.special_tokens = {"<|endoftext|>", "<pad>"};
  train_bpe_tokenizer(
      [](const TextSink& sink) {
        for (int i = 0; i < 20; ++i) {
          sink("the quick brown fox jumps over the lazy dog, again and again " + std::to_string(i));
          sink("naïve café 🙂 中文字符 Ελληνικά the end");
        }
      },
      opt, out);
  return json::parse(slurp(out));
}

std::vector<json> seeds(const std::string& dir) {
  return {shrink("bytelevel_bpe.json", 300, 80),
          shrink("llama2_style_bpe.json", 300, 80),
          merges_as_strings(shrink("llama3_style_bpe.json", 300, 80)),
          shrink("metaspace_bpe.json", 300, 60),
          shrink("split_behaviors_bpe.json", 300, 60),
          trained(dir),
          unigram(false),
          unigram(true)};
}

// A value placed in the JSON as "@@RAW@@text@@" is written out as `text`, unquoted: numbers
// nlohmann would not write (1e999, 2^64) and bad literals (NaN).
json raw(const std::string& text) {
  return "@@RAW@@" + text + "@@";
}

std::string unraw(std::string s) {
  for (size_t at; (at = s.find("\"@@RAW@@")) != std::string::npos;) {
    const size_t end = s.find("@@\"", at + 8);
    s = s.substr(0, at) + s.substr(at + 8, end - at - 8) + s.substr(end + 3);
  }
  return s;
}

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> list) {
  return *(list.begin() + rng() % list.size());
}

json any_value(std::mt19937_64& rng) {
  return pick<json>(rng, {nullptr, true, false, 0, -1, INT32_MAX, (int64_t{1} << 32) + 5, 1.5, "",
                          "x", "▁", json::array(), json::object(), json::array({1, 2}),
                          json{{"type", "x"}}, raw("1e999"), raw("18446744073709551616")});
}

json interesting_id(std::mt19937_64& rng, int64_t size) {
  switch (rng() % 16) {
    case 0:
      return -1;
    case 1:
      return -static_cast<int64_t>(rng() % 1000) - 2;
    case 2:
      return INT32_MAX;
    case 3:
      return INT32_MAX - 1;
    case 4:
      return int64_t{1} << 31;
    case 5:
      return (int64_t{1} << 32) + 5;
    case 6:
      return UINT64_MAX;
    case 7:
      return INT64_MIN;
    case 8:
      return "5";
    case 9:
      return pick<json>(rng, {1.5, 3.0, nullptr, true, raw("1e999"), raw("-0"), raw("2.0e1")});
    case 10:
      return size;
    case 11:
      return size + static_cast<int64_t>(rng() % 5000);
    case 12:  // the largest id the gap rule allows, or one past it
      return (int64_t{1} << 20) + static_cast<int64_t>(rng() % 3) - 1 + (rng() % 2 ? size : 0);
    default:
      return static_cast<int64_t>(rng() % static_cast<uint64_t>(std::max<int64_t>(size, 1)));
  }
}

json score(std::mt19937_64& rng) {
  return pick<json>(rng, {raw("1e999"), raw("-1e999"), raw("NaN"), raw("-0.0"), 1e308, -1e308, 0,
                          "x", nullptr, true, -1.5, raw("1e-400")});
}

std::vector<std::string> fragments() {
  return {"Hello world!",
          "naïve résumé",
          "中文字符，日本語のテキスト、한국어",
          "Ελληνικά русский العربية हिन्दी",
          "🙂👍🏽 👨‍👩‍👧‍👦",
          "  two  spaces\t\ttab\r\n",
          "1234567 3.14 1,000",
          "DON'T it's we've",
          "aaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
          "\xFF\xFE",
          "\xC3\x28",
          "\xED\xA0\x80",
          "\xE2\x82",
          "\xF0\x9F\x99",
          std::string("a\0b", 3),
          "▁▁ ▁",
          "<0x41>",
          "<s>",
          "</s>",
          "<unk>",
          "<|endoftext|>",
          "<|begin_of_text|>",
          " "};
}

json normalizer(std::mt19937_64& rng, int depth = 0) {
  switch (rng() % 12) {
    case 0:
      return nullptr;
    case 1:
      return pick<json>(rng, {"NFC", json{{"type", "NFC"}}, json{{"type", "Lowercase"}},
                              json{{"type", 7}}, json::object(), json::array()});
    case 2:
      return {{"type", "Prepend"}, {"prepend", pick<json>(rng, {"▁", "", "ab", 5, nullptr})}};
    case 3:
      return {{"type", "Prepend"}};
    case 4:
    case 5:
      return {{"type", "Replace"},
              {"pattern",
               pick<json>(rng, {json{{"String", " "}}, json{{"String", ""}}, json{{"String", 5}},
                                json{{"Regex", " "}}, "x", json{{"String", "a"}}})},
              {"content", pick<json>(rng, {"▁", "", "aa", nullptr, 3})}};
    default: {
      json list = json::array();
      for (int i = 0, n = depth < 3 ? static_cast<int>(rng() % 4) : 0; i < n; ++i)
        list.push_back(normalizer(rng, depth + 1));
      return {{"type", "Sequence"}, {"normalizers", rng() % 8 ? list : any_value(rng)}};
    }
  }
}

json pre_tokenizer(std::mt19937_64& rng, int depth = 0) {
  switch (rng() % 10) {
    case 0:
      return nullptr;
    case 1:
      return pick<json>(rng, {"ByteLevel", json{{"type", "Whitespace"}}, json{{"type", 3}},
                              json::object(), json::array()});
    case 2:
      return {{"type", "ByteLevel"},
              {"add_prefix_space", pick<json>(rng, {true, false, "x"})},
              {"use_regex", pick<json>(rng, {true, false, "x", nullptr})}};
    case 3:
    case 4:
      return {{"type", "Split"},
              {"pattern",
               rng() % 4 ? json{{"Regex", pick<json>(rng, {"\\s+", "[0-9]", "(", "", "(a+)+$",
                                                           "\\p{L}+", "(?i:'s|'t)", "\\X", "x*",
                                                           "a{0,1000}", "[", "\\", "(?<=\\s)", 5})}}
                         : pick<json>(rng, {json{{"String", "-"}}, json{{"String", ""}},
                                            json{{"String", "▁"}}, json{{"String", 5}}, "x",
                                            json::object()})},
              {"behavior", pick<json>(rng, {"Isolated", "Removed", "MergedWithPrevious",
                                            "MergedWithNext", "Contiguous", "Bogus", 5})},
              {"invert", pick<json>(rng, {false, true, "x"})}};
    case 5:
    case 6:
      return {{"type", "Metaspace"},
              {"replacement", pick<json>(rng, {"▁", "", " ", "ab", "▁▁", 5})},
              {"prepend_scheme", pick<json>(rng, {"always", "first", "never", "sometimes", 5})},
              {"add_prefix_space", pick<json>(rng, {true, false, "x"})},
              {"split", pick<json>(rng, {true, false, "x"})}};
    default: {
      json list = json::array();
      for (int i = 0, n = depth < 3 ? static_cast<int>(rng() % 4) : 0; i < n; ++i)
        list.push_back(pre_tokenizer(rng, depth + 1));
      return {{"type", "Sequence"}, {"pretokenizers", rng() % 8 ? list : any_value(rng)}};
    }
  }
}

json decoder(std::mt19937_64& rng, int depth = 0) {
  auto count = [&] {
    return pick<json>(
        rng, {0, 1, 2, -1, INT64_MAX, int64_t{1} << 40, "x", 1.5, 1e10, raw("1e999"), nullptr});
  };
  switch (rng() % 11) {
    case 0:
      return nullptr;
    case 1:
      return pick<json>(
          rng, {"ByteLevel", json{{"type", "WordPiece"}}, json{{"type", 1}}, json::object()});
    case 2:
      return pick<json>(rng, {json{{"type", "ByteLevel"}}, json{{"type", "ByteFallback"}},
                              json{{"type", "Fuse"}}});
    case 3:
      return {{"type", "Replace"},
              {"pattern", pick<json>(rng, {json{{"String", "▁"}}, json{{"String", ""}},
                                           json{{"Regex", " "}}, json{{"String", 1}}, "x"})},
              {"content", pick<json>(rng, {" ", "", "▁▁", nullptr})}};
    case 4:
    case 5:
      return {{"type", "Strip"},
              {"content", pick<json>(rng, {" ", "", "ab", "▁", 5})},
              {"start", count()},
              {"stop", count()}};
    case 6:
      return {{"type", "Metaspace"},
              {"replacement", pick<json>(rng, {"▁", "", " ", 5})},
              {"prepend_scheme", pick<json>(rng, {"always", "first", "never", 5})}};
    default: {
      json list = json::array();
      for (int i = 0, n = depth < 3 ? static_cast<int>(rng() % 5) : 0; i < n; ++i)
        list.push_back(decoder(rng, depth + 1));
      return {{"type", "Sequence"}, {"decoders", rng() % 8 ? list : any_value(rng)}};
    }
  }
}

json post_processor(std::mt19937_64& rng, int64_t size) {
  if (rng() % 5 == 0)
    return pick<json>(rng, {nullptr, "x", json{{"type", 5}}, json{{"type", "BertProcessing"}}});
  json id = pick<json>(rng, {"<s>", "</s>", "x", 5, nullptr});
  json item = rng() % 6 ? json{{"SpecialToken", {{"id", id}, {"type_id", 0}}}} : any_value(rng);
  json single = json::array({item, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
  if (rng() % 2) single.push_back(item);
  json ids = rng() % 4 ? json::array({interesting_id(rng, size)}) : any_value(rng);
  json specials = json::object();
  if (rng() % 6)
    specials[id.is_string() ? id.get<std::string>() : "y"] = {{"id", id}, {"ids", ids}};
  return {{"type", "TemplateProcessing"},
          {"single", rng() % 10 ? single : any_value(rng)},
          {"special_tokens", rng() % 10 ? specials : any_value(rng)}};
}

// Every node of `j` (depth first), so that one of them can be replaced.
void nodes(json& j, std::vector<json*>& out, int depth = 0) {
  out.push_back(&j);
  if (depth > 8 || !j.is_structured()) return;
  for (json& c : j) nodes(c, out, depth + 1);
}

// `depth` Sequence levels of a normalizer, pre-tokenizer or decoder, as text: deeper than
// nlohmann::json::dump could write without running out of stack.
std::string deep_sequence(const std::string& key, const std::string& core, int depth) {
  std::string out;
  for (int i = 0; i < depth; ++i) out += "{\"type\":\"Sequence\",\"" + key + "\":[";
  out += core;
  for (int i = 0; i < depth; ++i) out += "]}";
  return out;
}

// One JSON-aware edit; returns the new file text.
std::string mutate_json(json j, std::mt19937_64& rng, const std::vector<std::string>& texts) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return j.dump();
  json& m = j["model"];
  const bool bpe_vocab = m.contains("vocab") && m["vocab"].is_object();
  const int64_t size = m.contains("vocab") && m["vocab"].is_structured()
                           ? static_cast<int64_t>(m["vocab"].size())
                           : 10;
  auto some_text = [&] { return texts[rng() % texts.size()]; };
  json& added = j["added_tokens"];
  std::string deep;  // replaces "@@DEEP@@"
  switch (rng() % 17) {
    case 0:
      m["type"] = pick<json>(rng, {"BPE", "Unigram", "WordPiece", "WordLevel", "", 5, nullptr});
      break;
    case 1:  // an id or score
      if (bpe_vocab && !m["vocab"].empty()) {
        auto it = m["vocab"].begin();
        std::advance(it, static_cast<long>(rng() % m["vocab"].size()));
        *it = interesting_id(rng, size);
      } else if (m.contains("vocab") && m["vocab"].is_array() && !m["vocab"].empty()) {
        json& e = m["vocab"][rng() % m["vocab"].size()];
        if (rng() % 3)
          e = json::array({e.is_array() && !e.empty() ? e[0] : json("x"), score(rng)});
        else
          e = pick<json>(rng, {json::array({"x"}), json::array({5, 1}), json::array({"", -1}),
                               json::array({"a", -1, 2}), "x", m["vocab"][0]});
      }
      break;
    case 2:  // the vocab's shape: an entry removed, added or renamed, or another container
      if (rng() % 5 == 0) {
        m["vocab"] = pick<json>(rng, {json::array(), json::object(), "x", nullptr, 5});
      } else if (bpe_vocab && !m["vocab"].empty()) {
        auto it = m["vocab"].begin();
        std::advance(it, static_cast<long>(rng() % m["vocab"].size()));
        const std::string key = it.key();
        const json id = it.value();
        m["vocab"].erase(key);
        if (rng() % 2) m["vocab"][rng() % 2 ? key + "x" : some_text()] = id;
        if (rng() % 2) m["vocab"][some_text()] = interesting_id(rng, size);
      } else if (m.contains("vocab") && m["vocab"].is_array()) {
        m["vocab"].push_back({some_text(), -2.5});
      }
      break;
    case 3: {  // one merge malformed or naming tokens that are not in the vocab
      if (!m.contains("merges") || !m["merges"].is_array()) break;
      json e = pick<json>(rng, {"ab", "a  b", "a b c", " b", "a ", "", "zz qq", json::array()});
      if (rng() % 2)
        e = pick<json>(
            rng, {json::array({"a"}), json::array({"a", "b", "c"}), json::array({1, 2}),
                  json::array({"zz", "qq"}), json::object(), nullptr, 5, json::array({"", ""})});
      if (m["merges"].empty() || rng() % 3 == 0)
        m["merges"].push_back(e);
      else
        m["merges"][rng() % m["merges"].size()] = e;
      break;
    }
    case 4: {  // the merges as a whole: the other form, reordered, repeated, cut or retyped
      if (!m.contains("merges") || !m["merges"].is_array()) {
        m["merges"] = json::array();
        break;
      }
      json& merges = m["merges"];
      switch (rng() % 5) {
        case 0:
          for (json& e : merges)
            if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string())
              e = e[0].get<std::string>() + " " + e[1].get<std::string>();
          break;
        case 1:
          for (json& e : merges)
            if (e.is_string()) {
              const std::string s = e.get<std::string>();
              const size_t sp = s.find(' ');
              if (sp != std::string::npos) e = json::array({s.substr(0, sp), s.substr(sp + 1)});
            }
          break;
        case 2:
          std::shuffle(merges.begin(), merges.end(), rng);
          break;
        case 3:
          if (!merges.empty()) merges.push_back(merges[rng() % merges.size()]);
          if (!merges.empty())
            merges.erase(merges.begin() + static_cast<long>(rng() % merges.size()));
          break;
        default:
          merges = pick<json>(rng, {json::object(), "x", nullptr, json::array({json::array()})});
          if (rng() % 2) m.erase("merges");
          break;
      }
      break;
    }
    case 5: {  // a field of an added token
      if (!added.is_array() || added.empty()) {
        added = json::array({{{"id", interesting_id(rng, size)}, {"content", some_text()}}});
        break;
      }
      json& a = added[rng() % added.size()];
      if (!a.is_object()) a = json::object();
      // Another token's content (a duplicate); added[0] may be retyped by an earlier mutation.
      const json first_content = added[0].is_object() ? added[0].value("content", json()) : json();
      switch (rng() % 6) {
        case 0:
          a["id"] = interesting_id(rng, size);
          break;
        case 1:
          a["content"] = pick<json>(rng, {json(""), json(some_text()), json(5), json(nullptr),
                                          json(std::string(300, 'x')), first_content});
          break;
        case 2:
          a[pick<std::string>(rng, {"special", "normalized", "lstrip", "rstrip", "single_word"})] =
              pick<json>(rng, {true, false, "true", 1, nullptr});
          break;
        case 3:
          a.erase(pick<std::string>(rng, {"id", "content", "special", "normalized"}));
          break;
        default: {  // the content of a vocab token, with its id or another
          if (!bpe_vocab || m["vocab"].empty()) break;
          auto it = m["vocab"].begin();
          std::advance(it, static_cast<long>(rng() % m["vocab"].size()));
          a["content"] = it.key();
          a["id"] = rng() % 2 ? it.value() : interesting_id(rng, size);
          break;
        }
      }
      break;
    }
    case 6:  // the added tokens as a whole
      if (rng() % 3 == 0) {
        added = pick<json>(rng, {json::object(), "x", 5, json::array({5}), json::array({"x"})});
      } else if (added.is_array()) {
        json a = {{"id", interesting_id(rng, size)},
                  {"content", some_text()},
                  {"special", rng() % 2 == 0},
                  {"normalized", pick<json>(rng, {true, false, nullptr})},
                  {"lstrip", rng() % 2 == 0},
                  {"rstrip", rng() % 2 == 0}};
        if (!added.empty() && rng() % 3 == 0) a = added[rng() % added.size()];  // a duplicate
        added.push_back(a);
      }
      break;
    case 7:
      j["normalizer"] = normalizer(rng);
      break;
    case 8:
      j["pre_tokenizer"] = pre_tokenizer(rng);
      break;
    case 9:
      j["decoder"] = decoder(rng);
      break;
    case 10:
      j["post_processor"] = post_processor(rng, size);
      break;
    case 11: {  // the model's flags and unk
      const std::string key = pick<std::string>(
          rng, {"byte_fallback", "fuse_unk", "ignore_merges", "unk_token", "unk_id", "dropout",
                "continuing_subword_prefix", "end_of_word_suffix"});
      if (key == "unk_token")
        m[key] = pick<json>(rng, {json("<unk>"), json(some_text()), json("missing"), json(5),
                                  json(nullptr), json("")});
      else if (key == "unk_id")
        m[key] = interesting_id(rng, size);
      else if (key == "dropout")
        m[key] = pick<json>(rng, {nullptr, 0, 0.0, 0.1, "x", raw("NaN")});
      else if (key == "continuing_subword_prefix" || key == "end_of_word_suffix")
        m[key] = pick<json>(rng, {"##", "</w>", nullptr, ""});
      else
        m[key] = pick<json>(rng, {true, false, "x", nullptr, 1});
      break;
    }
    case 12: {  // deep nesting
      const int depth = rng() % 16 ? pick<int>(rng, {2, 30, 70, 200}) : 200000;
      switch (rng() % 4) {
        case 0:
          deep = deep_sequence("normalizers", "{\"type\":\"Prepend\",\"prepend\":\"x\"}", depth);
          j["normalizer"] = "@@DEEP@@";
          break;
        case 1:
          deep = deep_sequence("pretokenizers", "{\"type\":\"ByteLevel\"}", depth);
          j["pre_tokenizer"] = "@@DEEP@@";
          break;
        case 2:
          deep = deep_sequence("decoders", "{\"type\":\"Fuse\"}", depth);
          j["decoder"] = "@@DEEP@@";
          break;
        default: {
          deep = std::string(static_cast<size_t>(depth), '[') + "1" +
                 std::string(static_cast<size_t>(depth), ']');
          std::vector<json*> all;
          nodes(j, all);
          *all[rng() % all.size()] = "@@DEEP@@";
          break;
        }
      }
      break;
    }
    case 13:  // a top-level key dropped or retyped
      if (rng() % 2)
        j.erase(pick<std::string>(rng, {"model", "added_tokens", "normalizer", "pre_tokenizer",
                                        "decoder", "post_processor"}));
      else
        j[pick<std::string>(rng, {"model", "added_tokens", "normalizer", "pre_tokenizer", "decoder",
                                  "post_processor"})] = any_value(rng);
      break;
    case 14:
      return pick<std::string>(rng, {"[]", "5", "null", "\"x\"", "{}", ""});
    default: {  // any node at all replaced by a value of some other type
      std::vector<json*> all;
      nodes(j, all);
      *all[rng() % all.size()] = any_value(rng);
      break;
    }
  }
  std::string text = unraw(j.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!deep.empty()) {
    const size_t at = text.find("\"@@DEEP@@\"");
    if (at != std::string::npos) text = text.substr(0, at) + deep + text.substr(at + 10);
  }
  return text;
}

std::string mutate_bytes(std::string b, std::mt19937_64& rng) {
  auto pos = [&](size_t size) { return size ? rng() % size : 0; };
  const unsigned kind = static_cast<unsigned>(rng() % 7);
  if (test::mutate_raw_bytes(b, kind, rng)) return b;  // kinds 0-2
  switch (kind) {
    case 3: {  // a byte replaced by a JSON-significant character
      static const char kChars[] = "{}[]\",:0123456789-.eE \\tfn";
      if (!b.empty()) b[pos(b.size())] = kChars[rng() % (sizeof kChars - 1)];
      break;
    }
    case 4:  // invalid UTF-8, or a bad escape, just inside a string
    case 5: {
      const size_t quote = b.find('"', pos(b.size()));
      if (quote == std::string::npos) break;
      b.insert(quote + 1,
               pick<std::string>(rng, {"\xFF", "\xC3\x28", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                                       "\xC0\xAF", "\xE2\x82", "\\ud800", "\\udc00x", "\\u0000",
                                       "\\uZZZZ", "\\x41", "\\", "\x01"}));
      break;
    }
    default: {  // a span deleted or repeated
      const size_t at = pos(b.size()), n = std::min<size_t>(1 + rng() % 64, b.size() - at);
      if (rng() % 2)
        b.erase(at, n);
      else
        b.insert(at, b.substr(at, n));
      break;
    }
  }
  return b;
}

// The refusal with the file's name, digits and quoted parts dropped, cut short.
std::string reason(const std::string& msg, const std::string& path) {
  const size_t at = msg.find(path);
  const std::string tail = at == std::string::npos ? msg : msg.substr(at + path.size());
  std::string r;
  char quote = 0;
  for (char c : tail) {
    if (!quote && (c == '\'' || c == '"')) {
      quote = c;
      r += c;
    } else if (quote && c == quote) {
      quote = 0;
      r += c;
    } else if (!quote && !std::isdigit(static_cast<unsigned char>(c))) {
      r += c;
    }
    if (r.size() >= 60) break;
  }
  return r;
}

struct Counts {
  int64_t texts = 0, texts_refused = 0, ids = 0;
};

// A loaded tokenizer must work: every id below vocab_size, every encoded text decodable.
void exercise(const Tokenizer& tok, std::mt19937_64& rng, const std::vector<std::string>& pool,
              Counts& c) {
  const int32_t n = tok.vocab_size();
  ASSERT_GT(n, 0);
  ASSERT_TRUE(tok.kind() == "bpe" || tok.kind() == "unigram") << tok.kind();
  for (int32_t id : tok.special_prefix()) ASSERT_TRUE(id >= 0 && id < n) << id;
  for (int32_t id : tok.special_suffix()) ASSERT_TRUE(id >= 0 && id < n) << id;
  for (int32_t id : {tok.bos_id(), tok.eos_id()}) ASSERT_TRUE(id >= -1 && id < n) << id;
  for (int t = 0; t < 4; ++t) {
    std::string text;
    for (int k = t == 0 ? 0 : 1 + static_cast<int>(rng() % 4); k > 0; --k) {
      if (rng() % 5 == 0)
        for (int r = 1 + static_cast<int>(rng() % 6); r > 0; --r)
          text.push_back(static_cast<char>(rng()));
      else
        text += pool[rng() % pool.size()];
    }
    ++c.texts;
    std::vector<int32_t> ids;
    try {
      ids = t == 1 ? tok.encode_with_special(text) : tok.encode(text);
    } catch (const UserError&) {
      ++c.texts_refused;
      continue;
    }
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < n) << "id " << id << " of " << n;
    if (text.empty() && t != 1) ASSERT_TRUE(ids.empty());
    try {
      tok.decode(ids);
    } catch (const UserError& e) {
      FAIL() << "decode refused the ids encode gave: " << e.what();
    }
    c.ids += static_cast<int64_t>(ids.size());
  }
  try {  // any id below vocab_size: decoded, or refused as a gap
    tok.decode({static_cast<int32_t>(rng() % static_cast<uint64_t>(n)), n - 1, 0});
  } catch (const UserError&) {
  }
}

TEST(TokenizerJsonFuzz, EveryInputLoadsAndWorksOrThrowsUserError) {
  const char* seed_env = std::getenv("LMT_FUZZ_SEED");
  const uint64_t seed = seed_env
                            ? std::strtoull(seed_env, nullptr, 10)
                            : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  SCOPED_TRACE("LMT_FUZZ_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const char* inputs_env = std::getenv("LMT_TOKENIZER_FUZZ_INPUTS");
  const int64_t inputs = inputs_env ? std::atoll(inputs_env) : 2000;
  // Thousands of small files: in memory when the machine has a tmpfs, so the test stays fast.
  const fs::path dir =
      fs::path(fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path()) /
      ("lmt_tokenizer_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct RemoveAtExit {
    fs::path dir;
    ~RemoveAtExit() { fs::remove_all(dir); }
  } remove_at_exit{dir};
  const std::string path = (dir / "tokenizer.json").string();

  std::vector<std::string> seed_texts;
  std::vector<std::string> pool = fragments();
  for (const json& s : seeds(dir.string())) {
    seed_texts.push_back(s.dump());
    spit(path, seed_texts.back());
    ASSERT_NO_THROW(load_tokenizer(path)) << "a seed must load: " << seed_texts.size() - 1;
    for (const auto& [tok, id] : s["model"]["vocab"].items())
      if (rng() % 20 == 0)
        pool.push_back(s["model"]["vocab"].is_array() ? id[0].get<std::string>() : tok);
  }

  if (const char* replay = std::getenv("LMT_TOKENIZER_FUZZ_REPLAY")) {  // one kept input
    Counts c;
    try {
      exercise(*load_tokenizer(replay), rng, pool, c);
      std::printf("replay: loaded, %lld texts refused by encode\n",
                  static_cast<long long>(c.texts_refused));
    } catch (const UserError& e) {
      std::printf("replay: refused: %s\n", e.what());
    }
    return;
  }
  int64_t loaded = 0, refused = 0;
  Counts counts;
  std::map<std::string, int64_t> reasons;
  for (int64_t i = 0; i < inputs; ++i) {
    std::string input = seed_texts[rng() % seed_texts.size()];
    for (int k = 1 + static_cast<int>(rng() % 3); k > 0 && input.size() < 100000; --k) {
      // (A deeply nested input is not edited further: dump() would recurse once per level.)
      json j = json::parse(input, nullptr, false);
      if (j.is_discarded()) break;  // a byte edit has broken the JSON: enough
      input =
          rng() % 5 ? mutate_json(std::move(j), rng, pool) : mutate_bytes(std::move(input), rng);
    }
    spit(path, input);
    try {
      std::unique_ptr<Tokenizer> tok = load_tokenizer(path);
      ++loaded;
      exercise(*tok, rng, pool, counts);
    } catch (const UserError& e) {
      const std::string msg = e.what();
      if (msg.find(path) == std::string::npos) ADD_FAILURE() << "the file is not named: " << msg;
      ++refused;
      ++reasons[reason(msg, path)];
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a UserError: " << e.what();
    }
    if (HasFailure()) {
      const std::string kept = testing::TempDir() + "tokenizer_fuzz_failure.json";
      spit(kept, input);
      FAIL() << "input " << i << " kept in " << kept;
    }
  }
  std::printf(
      "tokenizer.json fuzz: %lld inputs tried, %lld loaded and worked, %lld refused for %zu kinds "
      "of reason; %lld texts encoded and decoded (%lld ids), %lld refused by encode\n",
      static_cast<long long>(inputs), static_cast<long long>(loaded),
      static_cast<long long>(refused), reasons.size(),
      static_cast<long long>(counts.texts - counts.texts_refused),
      static_cast<long long>(counts.ids), static_cast<long long>(counts.texts_refused));
  if (std::getenv("LMT_FUZZ_VERBOSE"))
    for (const auto& [r, n] : reasons)
      std::printf("  %6lld  %s\n", static_cast<long long>(n), r.c_str());
  EXPECT_EQ(inputs, loaded + refused);
  EXPECT_GT(loaded, inputs / 20);  // the mutations must not all be fatal,
  EXPECT_GT(refused, inputs / 4);  // nor all harmless
}

}  // namespace
}  // namespace lmt
