// BpeTokenizer: loading tokenizer.json, added-token splitting, normalizing, pre-tokenizers (PCRE2
// with JIT, Metaspace), byte-level mapping, byte fallback and the BPE merge loop. The merge loop
// copies HF's Word::merge_all (a heap of candidate pairs ordered by rank then position) so that
// ties resolve exactly as HF resolves them.
#include "data/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/regular_file.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/hf_decoder.h"
#include "data/tokenizer/normalizer.h"
#include "data/tokenizer/regex_split.h"
#include "data/tokenizer/token_ids.h"
#include "data/tokenizer/unigram_model.h"
#include "data/tokenizer/word_cache.h"

namespace lmt {
namespace {

using nlohmann::json;

struct PreTokenizer {
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class Prepend { kAlways, kFirst, kNever };
  Kind kind = Kind::kSplit;
  std::shared_ptr<Regex> regex;  // null for ByteLevel with use_regex false
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool add_prefix_space = false;  // ByteLevel
  std::string replacement;        // Metaspace
  Prepend prepend = Prepend::kAlways;
  bool split = true;
};

struct AddedToken {
  std::string content;
  std::string pattern;  // what is matched: the content, normalized when `normalized`
  int32_t id = 0;
  bool normalized = false;
  bool special = false;
  bool lstrip = false, rstrip = false;  // the token takes the whitespace on its left / right
};

// Unicode White_Space, which HF's \s matches when it strips around lstrip / rstrip tokens.
bool is_unicode_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Lets the word cache be searched with a string_view, without building a std::string per word.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Merge {
  int32_t rank;
  int32_t new_id;
};

// Code point of the UTF-8 character at s[i] and its length; (0xFFFD, 1) for an invalid byte.
std::pair<uint32_t, size_t> decode_utf8(std::string_view s, size_t i) {
  const size_t n = utf8_char_len(s, i);
  const auto c = static_cast<unsigned char>(s[i]);
  if (n == 1) return {c < 0x80 ? c : 0xFFFD, 1};
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return {cp, n};
}

// Nesting deeper than serde_json's recursion limit, which HF's tokenizers reads tokenizer.json
// with, is refused while parsing: the readers of Sequence normalizers, pre-tokenizers and decoders
// recurse once per level, and would otherwise run out of stack on a file of a few MB.
constexpr int kMaxJsonDepth = 128;

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

struct BpeTokenizer::Impl {
  std::string path;
  std::string json_text;  // the file as loaded, written back by save()
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;  // + added tokens
  std::vector<std::string> id_to_token;  // "" where an id is unused
  std::vector<bool> id_used;
  std::vector<std::string> id_to_bytes;  // decoded bytes of each id (ByteLevel decoder)
  Normalizer normalizer;
  HfDecoder decoder;
  std::unordered_map<uint64_t, Merge> merges;
  std::vector<PreTokenizer> pre_tokenizers;
  bool byte_level = false;              // a ByteLevel pre-tokenizer is present (and last)
  std::array<int32_t, 256> byte_ids{};  // id of each byte's character, -1 when missing
  std::optional<UnigramModel> unigram;  // set for a Unigram model, whose ids it computes
  bool ignore_merges = false;
  bool byte_fallback = false;
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  // Words may be cut before every "▁" that follows another character without changing the ids:
  // true when no model token holds "▁" after a character other than "▁" (so no merge can cross
  // such a cut), the model is not byte-level and ignore_merges is off. SentencePiece vocabularies
  // are so; it turns Llama 2's one word per text into one cacheable word per "▁word".
  bool cut_at_metaspace = false;
  std::vector<AddedToken> added;  // longest first
  // Indices into `added` by first byte, for the two passes HF makes: [0] tokens matched on the raw
  // text (normalized false), [1] tokens matched on the normalized text (normalized true).
  std::array<std::array<std::vector<int32_t>, 256>, 2> added_by_first_byte;
  std::array<std::array<bool, 256>, 2> added_first_byte{};  // any token of the pass starts so
  std::array<bool, 2> pass_has_tokens{};

  uint64_t serial = new_word_cache_serial();  // names this tokenizer's per-thread word caches

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw UserError("tokenizer " + path + ": " + field + ": " + what);
  }

  void split_added(std::string_view text, int pass, bool at_start, std::vector<int32_t>& out) const;
  // `at_start`: the segment starts at offset 0 of the text given to encode (Metaspace "first").
  void encode_segment(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& syms) const;
  void merge_all(std::vector<int32_t>& syms) const;
};

namespace {

const json& field(const json& j, const char* key, const std::string& path,
                  const std::string& name) {
  auto it = j.find(key);
  if (it == j.end()) throw UserError("tokenizer " + path + ": " + name + ": missing");
  return *it;
}

bool flag(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

void load_pre_tokenizer(BpeTokenizer::Impl& t, const json& p, const std::string& name) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    const json& list = field(p, "pretokenizers", t.path, name + ".pretokenizers");
    for (size_t i = 0; i < list.size(); ++i)
      load_pre_tokenizer(t, list[i], name + ".pretokenizers[" + std::to_string(i) + "]");
    return;
  }
  if (t.byte_level) t.fail(name, "a pre-tokenizer after ByteLevel is not supported");
  PreTokenizer pt;
  if (type == "ByteLevel") {
    pt.kind = PreTokenizer::Kind::kByteLevel;
    pt.add_prefix_space = flag(p, "add_prefix_space");
    if (p.value("use_regex", true))
      pt.regex = std::make_shared<Regex>(kGpt2Pattern, "tokenizer " + t.path + ": " + name);
    t.byte_level = true;
  } else if (type == "Split") {
    const json& pattern = field(p, "pattern", t.path, name + ".pattern");
    if (pattern.contains("Regex")) {
      pt.regex = std::make_shared<Regex>(pattern["Regex"].get<std::string>(),
                                         "tokenizer " + t.path + ": " + name + ".pattern");
    } else if (pattern.contains("String")) {
      pt.regex = std::make_shared<Regex>(quote_literal(pattern["String"].get<std::string>()),
                                         "tokenizer " + t.path + ": " + name + ".pattern");
    } else {
      t.fail(name + ".pattern", "expected Regex or String");
    }
    const std::string behavior = p.value("behavior", "");
    if (!parse_split_behavior(behavior, pt.behavior))
      t.fail(name + ".behavior", "'" + behavior + "' is not a split behavior");
    if (flag(p, "invert")) t.fail(name + ".invert", "true is not supported");
  } else if (type == "Metaspace") {
    pt.kind = PreTokenizer::Kind::kMetaspace;
    pt.replacement = p.value("replacement", "\u2581");
    if (pt.replacement.empty()) t.fail(name + ".replacement", "empty");
    pt.split = p.value("split", true);
    // Files written before HF 0.19 say add_prefix_space instead of prepend_scheme.
    const std::string scheme =
        p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always")
      pt.prepend = PreTokenizer::Prepend::kAlways;
    else if (scheme == "first")
      pt.prepend = PreTokenizer::Prepend::kFirst;
    else if (scheme == "never")
      pt.prepend = PreTokenizer::Prepend::kNever;
    else
      t.fail(name + ".prepend_scheme", "'" + scheme + "' is not always, first or never");
  } else {
    t.fail(name + ".type",
           "'" + type + "' is not supported (supported: ByteLevel, Split, Metaspace, Sequence)");
  }
  t.pre_tokenizers.push_back(std::move(pt));
}

void load_model(BpeTokenizer::Impl& t, const json& m, TokenIds& ids) {
  if (!m.is_object()) t.fail("model", "expected a JSON object");
  if (m.value("type", "BPE") == "Unigram") {
    t.unigram = UnigramModel::from_json(m, "tokenizer " + t.path + ": model");
    const auto& pieces = t.unigram->pieces();
    for (size_t i = 0; i < pieces.size(); ++i)
      t.vocab[pieces[i].first] =
          ids.claim(static_cast<int64_t>(i), "model.vocab[" + std::to_string(i) + "]",
                    "model.vocab", pieces[i].first);
    return;
  }
  if (m.value("type", "BPE") != "BPE")
    t.fail("model.type",
           "'" + m.value("type", "") + "' is not supported (supported: BPE, Unigram)");
  if (!m.value("continuing_subword_prefix", json()).is_null())
    t.fail("model.continuing_subword_prefix", "not supported");
  if (!m.value("end_of_word_suffix", json()).is_null())
    t.fail("model.end_of_word_suffix", "not supported");
  const json dropout = m.value("dropout", json());
  if (!dropout.is_null() && dropout.get<double>() != 0.0) t.fail("model.dropout", "not supported");
  t.ignore_merges = flag(m, "ignore_merges");
  t.byte_fallback = flag(m, "byte_fallback");
  t.fuse_unk = flag(m, "fuse_unk");

  const json& vocab = field(m, "vocab", t.path, "model.vocab");
  if (!vocab.is_object()) t.fail("model.vocab", "expected an object of token: id");
  for (const auto& [tok, id] : vocab.items())
    t.vocab[tok] = ids.claim(id, "model.vocab[" + json(tok).dump() + "]", "model.vocab", tok);
  const json unk = m.value("unk_token", json());
  if (!unk.is_null()) {
    auto it = t.vocab.find(unk.get<std::string>());
    if (it == t.vocab.end()) t.fail("model.unk_token", "not in the vocab");
    t.unk_id = it->second;
  }
  const json& merges = field(m, "merges", t.path, "model.merges");
  t.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string a, b;
    if (merges[r].is_string()) {
      const std::string s = merges[r].get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        t.fail("model.merges[" + std::to_string(r) + "]", "expected 'a b', got '" + s + "'");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (merges[r].is_array() && merges[r].size() == 2) {
      a = merges[r][0].get<std::string>();
      b = merges[r][1].get<std::string>();
    } else {
      t.fail("model.merges[" + std::to_string(r) + "]", "expected a string or a pair");
    }
    auto ia = t.vocab.find(a), ib = t.vocab.find(b), iab = t.vocab.find(a + b);
    if (ia == t.vocab.end() || ib == t.vocab.end() || iab == t.vocab.end())
      t.fail("model.merges[" + std::to_string(r) + "]", "'" + a + " " + b + "' not in the vocab");
    t.merges.emplace(pair_key(ia->second, ib->second),
                     Merge{static_cast<int32_t>(r), iab->second});  // first (lowest) rank wins
  }
}

void load_added_tokens(BpeTokenizer::Impl& t, const json& list, TokenIds& ids) {
  if (list.is_null()) return;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = "added_tokens[" + std::to_string(i) + "]";
    const json& a = list[i];
    if (flag(a, "single_word")) t.fail(name + ".single_word", "true is not supported");
    AddedToken tok;
    tok.content = field(a, "content", t.path, name + ".content").get<std::string>();
    if (tok.content.empty()) t.fail(name + ".content", "empty");
    tok.id = ids.claim(field(a, "id", t.path, name + ".id"), name + ".id", name, tok.content);
    t.vocab[tok.content] = tok.id;
    tok.special = flag(a, "special");
    tok.lstrip = flag(a, "lstrip");
    tok.rstrip = flag(a, "rstrip");
    tok.normalized = a.value("normalized", !tok.special);
    // HF matches a normalized token by its normalized content (Llama 2's Prepend gives "▁<tok>").
    tok.pattern = tok.normalized ? t.normalizer.apply(tok.content) : tok.content;
    if (tok.pattern.empty()) t.fail(name + ".content", "empty after normalization");
    t.added.push_back(std::move(tok));
  }
  std::stable_sort(t.added.begin(), t.added.end(), [](const AddedToken& x, const AddedToken& y) {
    return x.pattern.size() > y.pattern.size();
  });
  for (size_t i = 0; i < t.added.size(); ++i) {
    const int pass = t.added[i].normalized ? 1 : 0;
    const auto first = static_cast<unsigned char>(t.added[i].pattern[0]);
    t.added_by_first_byte[pass][first].push_back(static_cast<int32_t>(i));
    t.added_first_byte[pass][first] = true;
    t.pass_has_tokens[pass] = true;
  }
}

// HF's ByteLevel decoder: a token whose characters all come from the byte table decodes to
// those bytes; any other token (an added token, say) renders as its own UTF-8.
std::string decode_token(const std::string& tok, bool byte_level) {
  if (!byte_level) return tok;  // LCOV_EXCL_LINE
  static const std::unordered_map<uint32_t, char> char_to_byte = [] {
    std::unordered_map<uint32_t, char> m;
    const auto table = gpt2_bytes_to_unicode();
    for (int b = 0; b < 256; ++b) m[table[b]] = static_cast<char>(b);
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < tok.size();) {
    const size_t n = utf8_char_len(tok, i);
    uint32_t cp = static_cast<unsigned char>(tok[i]);
    if (n > 1) {
      cp &= 0x7F >> n;
      for (size_t k = 1; k < n; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(tok[i + k]) & 0x3F);
    }
    auto it = char_to_byte.find(cp);
    if (it == char_to_byte.end()) return tok;
    out.push_back(it->second);
    i += n;
  }
  return out;
}

bool merges_never_cross_metaspace(const BpeTokenizer::Impl& t) {
  static const std::string kMeta = "\u2581";
  for (const auto& [tok, id] : t.vocab) {
    for (size_t at = tok.find(kMeta, 1); at != std::string::npos; at = tok.find(kMeta, at + 1))
      if (at < kMeta.size() || tok.compare(at - kMeta.size(), kMeta.size(), kMeta) != 0)
        return false;
  }
  return true;
}

// `ids` holds every id claimed; the vocab size it checks fits an int32, and every id is below it.
void build_tables(BpeTokenizer::Impl& t, const TokenIds& ids) {
  const int64_t size = ids.finish();
  // Unigram's Viterbi and unk fusion run over the whole word, so its words are never cut.
  t.cut_at_metaspace =
      !t.unigram && !t.byte_level && !t.ignore_merges && merges_never_cross_metaspace(t);
  t.id_to_token.assign(size, "");
  t.id_used.assign(size, false);
  // Every claimed id, not only those t.vocab still maps to: an added token with the content of
  // another token but its own id takes that content's entry in t.vocab, while the merges,
  // unk_token and added tokens before it still give the other id.
  ids.for_each_token([&](int32_t id, const std::string& content) {
    t.id_to_token[id] = content;
    t.id_used[id] = true;
  });
  if (t.unigram) {  // a piece listed twice keeps both ids, as HF's id_to_token does
    const auto& pieces = t.unigram->pieces();
    for (size_t i = 0; i < pieces.size(); ++i) {
      t.id_to_token[i] = pieces[i].first;
      t.id_used[i] = true;
    }
  }
  // The added token wins, as HF gives it back: a normalized one in its normalized form.
  for (const auto& a : t.added) t.id_to_token[a.id] = a.pattern;
  if (t.decoder.is_byte_level_only()) {
    t.id_to_bytes.resize(size);
    for (int64_t i = 0; i < size; ++i) t.id_to_bytes[i] = decode_token(t.id_to_token[i], true);
    for (const auto& a : t.added) t.id_to_bytes[a.id] = a.content;
  }
  const auto table = gpt2_bytes_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(table[b], s);
    auto it = t.vocab.find(s);
    t.byte_ids[b] = it == t.vocab.end() ? -1 : it->second;
  }
}

}  // namespace

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  auto t = std::make_unique<Impl>();
  t->path = path;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec)
    throw UserError("tokenizer " + path + ": cannot open the file");
  t->json_text = read_regular_file(path, "tokenizer", kMaxTokenizerBytes);
  json j;
  try {
    j = json::parse(t->json_text, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        t->fail("(nesting)", "deeper than " + std::to_string(kMaxJsonDepth) +
                                 " levels (Hugging Face's serde_json refuses it too)");
      return true;
    });
  } catch (const json::exception& e) {
    throw UserError("tokenizer " + path + ": not valid JSON: " + e.what());
  }
  try {
    if (!j.is_object()) t->fail("(top level)", "expected a JSON object");
    t->normalizer =
        Normalizer::from_json(j.value("normalizer", json()), "tokenizer " + path + ": normalizer");
    t->decoder =
        HfDecoder::from_json(j.value("decoder", json()), "tokenizer " + path + ": decoder");
    TokenIds ids("tokenizer " + path);
    load_model(*t, field(j, "model", path, "model"), ids);
    load_added_tokens(*t, j.value("added_tokens", json()), ids);
    load_pre_tokenizer(*t, j.value("pre_tokenizer", json()), "pre_tokenizer");
    build_tables(*t, ids);
  } catch (const json::exception& e) {
    throw UserError("tokenizer " + path + ": unexpected JSON content: " + e.what());
  }
  return BpeTokenizer(std::move(t));
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode_append(text, out);
  return out;
}

void BpeTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  impl_->split_added(text, 0, true, out);
}

// Splits on added tokens the way HF's aho-corasick (leftmost-longest) does: at the first position
// where a token starts, the longest one that matches. Pass 0 looks in the raw text for the tokens
// with normalized false; each gap between them is normalized, and pass 1 looks in it for the
// tokens with normalized true (by their normalized content); what remains is pre-tokenized.
void BpeTokenizer::Impl::split_added(std::string_view text, int pass, bool at_start,
                                     std::vector<int32_t>& out) const {
  auto gap = [&](std::string_view g, bool g_at_start) {
    if (g.empty()) return;
    if (pass == 1) return encode_segment(g, g_at_start, out);
    if (normalizer.identity()) return split_added(g, 1, g_at_start, out);
    const std::string normalized = normalizer.apply(g);
    split_added(normalized, 1, g_at_start, out);
  };
  if (!pass_has_tokens[pass]) return gap(text, at_start);
  const auto& by_byte = added_by_first_byte[pass];
  const auto& is_first = added_first_byte[pass];
  size_t seg_start = 0;
  for (size_t i = 0; i < text.size();) {
    if (!is_first[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const AddedToken* hit = nullptr;
    for (int32_t c : by_byte[static_cast<unsigned char>(text[i])]) {
      if (text.substr(i).starts_with(added[c].pattern)) {
        hit = &added[c];
        break;  // longest first
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    // HF's find_matches: lstrip takes the whitespace before the token back to the previous split,
    // rstrip the whitespace after it.
    size_t start = i, stop = i + hit->pattern.size();
    if (hit->lstrip) {
      while (start > seg_start) {
        size_t prev = start - 1;
        while (prev > seg_start && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        const auto [cp, n] = decode_utf8(text, prev);
        if (prev + n != start || !is_unicode_space(cp)) break;
        start = prev;
      }
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        const auto [cp, n] = decode_utf8(text, stop);
        if (!is_unicode_space(cp)) break;
        stop += n;
      }
    }
    gap(text.substr(seg_start, start - seg_start), at_start && seg_start == 0);
    out.push_back(hit->id);
    i = seg_start = stop;
  }
  gap(text.substr(seg_start), at_start && seg_start == 0);
}

void BpeTokenizer::Impl::encode_segment(std::string_view text, bool at_start,
                                        std::vector<int32_t>& out) const {
  if (text.empty()) return;
  struct Piece {
    std::string_view s;
    bool at_start;  // begins at offset 0 of the encoded text
  };
  std::vector<Piece> pieces{{text, at_start}}, next;
  std::vector<std::string_view> parts;
  std::deque<std::string> owned;  // pieces rewritten by add_prefix_space or Metaspace
  for (const PreTokenizer& pt : pre_tokenizers) {
    next.clear();
    for (Piece p : pieces) {
      if (pt.kind == PreTokenizer::Kind::kMetaspace) {
        // HF's Metaspace: spaces become the replacement, which is prepended (always, or only at
        // the very start of the text) unless already there; split cuts before every replacement.
        std::string& m = owned.emplace_back();
        for (char c : p.s) {
          if (c == ' ')
            m += pt.replacement;
          else
            m.push_back(c);
        }
        const bool prepend = pt.prepend == PreTokenizer::Prepend::kAlways ||
                             (pt.prepend == PreTokenizer::Prepend::kFirst && p.at_start);
        if (prepend && !m.starts_with(pt.replacement)) m.insert(0, pt.replacement);
        if (!pt.split) {
          next.push_back({m, p.at_start});
          continue;
        }
        std::string_view v = m;
        size_t start = 0;
        for (size_t hit = v.find(pt.replacement, 1); hit != std::string_view::npos;
             hit = v.find(pt.replacement, hit + pt.replacement.size())) {
          next.push_back({v.substr(start, hit - start), p.at_start && start == 0});
          start = hit;
        }
        next.push_back({v.substr(start), p.at_start && start == 0});
        continue;
      }
      if (pt.add_prefix_space && !p.s.starts_with(' ')) {
        std::string& prefixed = owned.emplace_back(1, ' ');
        prefixed.append(p.s);
        p.s = prefixed;
      }
      if (!pt.regex) {
        next.push_back(p);
        continue;
      }
      parts.clear();
      pt.regex->split(p.s, pt.behavior, parts);
      for (std::string_view q : parts) next.push_back({q, p.at_start && q.data() == p.s.data()});
    }
    pieces.swap(next);
  }
  static const std::string_view kMeta = "\u2581";
  for (const Piece& p : pieces) {
    if (!cut_at_metaspace) {
      encode_word(p.s, out);
      continue;
    }
    size_t start = 0;
    for (size_t at = p.s.find(kMeta, 1); at != std::string_view::npos;
         at = p.s.find(kMeta, at + kMeta.size())) {
      if (at >= kMeta.size() && p.s.substr(at - kMeta.size(), kMeta.size()) == kMeta)
        continue;  // inside a run of "▁"
      encode_word(p.s.substr(start, at - start), out);
      start = at;
    }
    encode_word(p.s.substr(start), out);
  }
}

void BpeTokenizer::Impl::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  WordCache* cache = word.size() <= WordCache::kMaxWordBytes ? &thread_word_cache(serial) : nullptr;
  const uint64_t h = cache ? std::hash<std::string_view>{}(word) : 0;
  if (cache && cache->find(word, h, out)) return;
  std::vector<int32_t> syms;
  std::string mapped;  // the word in GPT-2's byte characters, for a byte-level whole-word lookup
  if (byte_level && (unigram || ignore_merges)) {
    static const auto table = gpt2_bytes_to_unicode();
    for (char c : word) append_utf8(table[static_cast<unsigned char>(c)], mapped);
  }
  const std::string_view model_word = byte_level && (unigram || ignore_merges) ? mapped : word;
  auto whole = ignore_merges ? vocab.find(model_word) : vocab.end();
  if (unigram) {
    unigram->encode(model_word, syms);
  } else if (whole != vocab.end()) {
    syms.push_back(whole->second);
  } else {
    initial_symbols(word, syms);
    merge_all(syms);
  }
  out.insert(out.end(), syms.begin(), syms.end());
  if (cache) cache->insert(word, h, syms);
}

// HF's BPE::merge_word: one symbol per character (per byte for byte-level); a character missing
// from the vocab becomes its <0xNN> byte tokens when byte_fallback and all of them exist, else
// unk (consecutive unks fused into one when fuse_unk; a pending unk is written when the next
// known character comes, as HF does), else nothing.
void BpeTokenizer::Impl::initial_symbols(std::string_view word, std::vector<int32_t>& syms) const {
  static const auto table = gpt2_bytes_to_unicode();
  syms.reserve(word.size());
  bool pending_unk = false;
  std::string mapped;
  for (size_t i = 0; i < word.size();) {
    const size_t n = byte_level ? 1 : utf8_char_len(word, i);
    std::string_view ch = word.substr(i, n);
    i += n;
    int32_t id = -1;
    if (byte_level) {
      const auto b = static_cast<unsigned char>(ch[0]);
      id = byte_ids[b];
      if (id < 0) {
        mapped.clear();
        append_utf8(table[b], mapped);
        ch = mapped;
      }
    } else {
      auto it = vocab.find(ch);
      if (it != vocab.end()) id = it->second;
    }
    if (id >= 0) {
      if (pending_unk) syms.push_back(*unk_id);
      pending_unk = false;
      syms.push_back(id);
      continue;
    }
    if (byte_fallback) {
      const size_t before = syms.size();
      bool all = true;
      for (char c : ch) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "<0x%02X>", static_cast<unsigned char>(c));
        auto it = vocab.find(std::string_view(hex));
        if (it == vocab.end()) {
          all = false;
          break;
        }
        syms.push_back(it->second);
      }
      if (all) continue;
      syms.resize(before);
    }
    if (!unk_id) continue;
    if (pending_unk && !fuse_unk) syms.push_back(*unk_id);
    pending_unk = true;
  }
  if (pending_unk) syms.push_back(*unk_id);
}

void BpeTokenizer::Impl::merge_all(std::vector<int32_t>& syms) const {
  const int32_t n = static_cast<int32_t>(syms.size());
  if (n < 2) return;
  struct Sym {
    int32_t id, prev, next;
    bool alive;
  };
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Sym> s(n);
  for (int32_t i = 0; i < n; ++i) s[i] = {syms[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto push = [&](int32_t pos) {
    auto it = merges.find(pair_key(s[pos].id, s[s[pos].next].id));
    if (it != merges.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    Sym& left = s[top.pos];
    if (!left.alive || left.next < 0) continue;
    Sym& right = s[left.next];
    auto it = merges.find(pair_key(left.id, right.id));
    if (it == merges.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) s[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    if (left.next >= 0) push(top.pos);
  }
  syms.clear();
  for (int32_t i = 0; i >= 0; i = s[i].next) syms.push_back(s[i].id);
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  return decode(ids.data(), static_cast<int64_t>(ids.size()));
}

std::string BpeTokenizer::decode(const int32_t* ids, int64_t n) const {
  const bool byte_level = impl_->decoder.is_byte_level_only();
  std::string out;
  std::vector<std::string> tokens;
  if (byte_level)
    out.reserve(static_cast<size_t>(n) * 4);
  else
    tokens.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || !impl_->id_used[id])
      throw UserError("BpeTokenizer::decode: unknown id " + std::to_string(id) + " (tokenizer " +
                      impl_->path + ", vocab size " + std::to_string(vocab_size()) + ")");
    if (byte_level)
      out += impl_->id_to_bytes[id];
    else
      tokens.push_back(impl_->id_to_token[id]);
  }
  return byte_level ? out : impl_->decoder.decode(std::move(tokens));
}

bool BpeTokenizer::is_unigram() const {
  return impl_->unigram.has_value();
}

const std::string& BpeTokenizer::json_text() const {
  return impl_->json_text;
}

int32_t BpeTokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->id_to_token.size());
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !impl_->id_used[id])
    throw UserError("BpeTokenizer::id_to_token: unknown id " + std::to_string(id) + " (tokenizer " +
                    impl_->path + ")");
  return impl_->id_to_token[id];
}

bool BpeTokenizer::is_special(int32_t id) const {
  return std::any_of(impl_->added.begin(), impl_->added.end(),
                     [id](const AddedToken& a) { return a.special && a.id == id; });
}

bool BpeTokenizer::has_id(int64_t id) const {
  return id >= 0 && id < vocab_size() && impl_->id_used[static_cast<size_t>(id)];
}

const std::string& BpeTokenizer::path() const {
  return impl_->path;
}

void BpeTokenizer::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary);
  out << impl_->json_text;
  out.close();
  if (!out) throw UserError("BpeTokenizer::save: cannot write " + path);
}

}  // namespace lmt
