// BpeTokenizer: loading tokenizer.json, added-token splitting, pre-tokenizers (PCRE2 with JIT),
// byte-level mapping and the BPE merge loop. The merge loop copies HF's Word::merge_all (a heap of
// candidate pairs ordered by rank then position) so that ties resolve exactly as HF resolves them.
#include "data/tokenizer/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <deque>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"

namespace lmt {
namespace {

using nlohmann::json;

// Words the cache keeps before it is cleared (bounds memory on endless streams of new words).
constexpr size_t kMaxCacheWords = 1 << 18;

// Length in bytes of the UTF-8 character starting at s[i]; 1 for an invalid or truncated one.
size_t utf8_len(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

// A compiled PCRE2 pattern. Matching needs only per-call match data, so one Regex is shared by
// all threads.
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      throw UserError(where + ": regex does not compile at offset " + std::to_string(err_off) +
                      ": " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(code_); }

  // Appends to `out` the pieces of `s`: every match and every gap between matches (Isolated).
  void split(std::string_view s, std::vector<std::string_view>& out) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t pos = 0, gap_start = 0;
    while (pos <= s.size()) {
      int rc = pcre2_match(code_, subject, s.size(), pos, 0, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        throw UserError(std::string("BpeTokenizer::encode: regex match failed: ") +
                        reinterpret_cast<char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      size_t b = ov[0], e = ov[1];
      if (e == b) {  // empty match: no piece, step one character on
        if (b >= s.size()) break;
        pos = b + utf8_len(s, b);
        continue;
      }
      if (b > gap_start) out.push_back(s.substr(gap_start, b - gap_start));
      out.push_back(s.substr(b, e - b));
      gap_start = pos = e;
    }
    if (gap_start < s.size()) out.push_back(s.substr(gap_start));
  }

 private:
  pcre2_code* code_ = nullptr;
};

struct PreTokenizer {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::shared_ptr<Regex> regex;  // null for ByteLevel with use_regex false
  bool add_prefix_space = false;
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool normalized = false;
};

// Lets the word cache be searched with a string_view, without building a std::string per word.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Merge {
  int32_t rank;
  int32_t new_id;
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

struct BpeTokenizer::Impl {
  std::string path;
  std::string json_text;                           // the file as loaded, written back by save()
  std::unordered_map<std::string, int32_t> vocab;  // model vocab and added tokens
  std::vector<std::string> id_to_token;            // "" where an id is unused
  std::vector<bool> id_used;
  std::vector<std::string> id_to_bytes;  // decoded bytes of each id
  std::unordered_map<uint64_t, Merge> merges;
  std::vector<PreTokenizer> pre_tokenizers;
  bool byte_level = false;              // a ByteLevel pre-tokenizer is present (and last)
  std::array<int32_t, 256> byte_ids{};  // id of each byte's character, -1 when missing
  bool ignore_merges = false;
  bool byte_fallback = false;
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  std::vector<AddedToken> added;  // longest first
  // Indices into `added` by first byte, for the two passes HF makes: [0] tokens matched on the raw
  // text (normalized false), [1] tokens matched on the normalized text (normalized true).
  std::array<std::array<std::vector<int32_t>, 256>, 2> added_by_first_byte;
  std::array<std::array<bool, 256>, 2> added_first_byte{};  // any token of the pass starts so
  std::array<bool, 2> pass_has_tokens{};

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw UserError("tokenizer " + path + ": " + field + ": " + what);
  }

  void split_added(std::string_view text, int pass, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
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

// A regex matching `s` literally: every ASCII character that is not a letter or digit is escaped
// (safer than \Q...\E, which a literal containing "\E" would end).
std::string quote_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c)))
      out.push_back('\\');
    out.push_back(c);
  }
  return out;
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
    if (p.value("use_regex", true)) pt.regex = std::make_shared<Regex>(kGpt2Pattern, name);
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
    if (behavior != "Isolated")
      t.fail(name + ".behavior", "'" + behavior + "' is not supported (supported: Isolated)");
    if (flag(p, "invert")) t.fail(name + ".invert", "true is not supported");
  } else {
    t.fail(name + ".type",
           "'" + type + "' is not supported (supported: ByteLevel, Split, Sequence)");
  }
  t.pre_tokenizers.push_back(std::move(pt));
}

void load_model(BpeTokenizer::Impl& t, const json& m) {
  if (m.value("type", "BPE") != "BPE")
    t.fail("model.type", "'" + m.value("type", "") + "' is not supported (supported: BPE)");
  if (!m.value("continuing_subword_prefix", json()).is_null())
    t.fail("model.continuing_subword_prefix", "not supported");
  if (!m.value("end_of_word_suffix", json()).is_null())
    t.fail("model.end_of_word_suffix", "not supported");
  const json dropout = m.value("dropout", json());
  if (!dropout.is_null() && dropout.get<double>() != 0.0) t.fail("model.dropout", "not supported");
  t.ignore_merges = flag(m, "ignore_merges");
  t.byte_fallback = flag(m, "byte_fallback");
  t.fuse_unk = flag(m, "fuse_unk");

  for (const auto& [tok, id] : field(m, "vocab", t.path, "model.vocab").items()) {
    const int32_t i = id.get<int32_t>();
    if (i < 0) t.fail("model.vocab", "negative id for '" + tok + "'");
    t.vocab[tok] = i;
  }
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

void load_added_tokens(BpeTokenizer::Impl& t, const json& list) {
  if (list.is_null()) return;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = "added_tokens[" + std::to_string(i) + "]";
    const json& a = list[i];
    for (const char* k : {"lstrip", "rstrip", "single_word"})
      if (flag(a, k)) t.fail(name + "." + k, "true is not supported");
    AddedToken tok{field(a, "content", t.path, name + ".content").get<std::string>(),
                   field(a, "id", t.path, name + ".id").get<int32_t>()};
    if (tok.content.empty()) t.fail(name + ".content", "empty");
    if (tok.id < 0) t.fail(name + ".id", "negative");
    t.vocab[tok.content] = tok.id;
    tok.normalized = a.value("normalized", !flag(a, "special"));
    t.added.push_back(std::move(tok));
  }
  std::stable_sort(t.added.begin(), t.added.end(), [](const AddedToken& x, const AddedToken& y) {
    return x.content.size() > y.content.size();
  });
  for (size_t i = 0; i < t.added.size(); ++i) {
    const int pass = t.added[i].normalized ? 1 : 0;
    const auto first = static_cast<unsigned char>(t.added[i].content[0]);
    t.added_by_first_byte[pass][first].push_back(static_cast<int32_t>(i));
    t.added_first_byte[pass][first] = true;
    t.pass_has_tokens[pass] = true;
  }
}

// HF's ByteLevel decoder: a token whose characters all come from the byte table decodes to
// those bytes; any other token (an added token, say) renders as its own UTF-8.
std::string decode_token(const std::string& tok, bool byte_level) {
  if (!byte_level) return tok;
  static const std::unordered_map<uint32_t, char> char_to_byte = [] {
    std::unordered_map<uint32_t, char> m;
    const auto table = gpt2_bytes_to_unicode();
    for (int b = 0; b < 256; ++b) m[table[b]] = static_cast<char>(b);
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < tok.size();) {
    const size_t n = utf8_len(tok, i);
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

void build_tables(BpeTokenizer::Impl& t) {
  int32_t size = 0;
  for (const auto& [tok, id] : t.vocab) size = std::max(size, id + 1);
  t.id_to_token.assign(size, "");
  t.id_used.assign(size, false);
  for (const auto& [tok, id] : t.vocab) {
    t.id_to_token[id] = tok;
    t.id_used[id] = true;
  }
  for (const auto& a : t.added) t.id_to_token[a.id] = a.content;  // the added content wins
  t.id_to_bytes.resize(size);
  for (int32_t i = 0; i < size; ++i)
    t.id_to_bytes[i] = decode_token(t.id_to_token[i], t.byte_level);
  for (const auto& a : t.added) t.id_to_bytes[a.id] = a.content;
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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("tokenizer " + path + ": cannot open the file");
  std::stringstream text;
  text << in.rdbuf();
  t->json_text = text.str();
  json j;
  try {
    j = json::parse(t->json_text);
  } catch (const json::exception& e) {
    throw UserError("tokenizer " + path + ": not valid JSON: " + e.what());
  }
  try {
    if (!j.is_object()) t->fail("(top level)", "expected a JSON object");
    if (!j.value("normalizer", json()).is_null())
      t->fail("normalizer", "'" + j["normalizer"].value("type", std::string("?")) +
                                "' is not supported (only null)");
    load_model(*t, field(j, "model", path, "model"));
    load_added_tokens(*t, j.value("added_tokens", json()));
    load_pre_tokenizer(*t, j.value("pre_tokenizer", json()), "pre_tokenizer");
    const json decoder = j.value("decoder", json());
    if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel")
      t->fail("decoder.type",
              "'" + decoder.value("type", "") + "' is not supported (supported: ByteLevel)");
    build_tables(*t);
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
  impl_->split_added(text, 0, out);
}

// Splits on added tokens the way HF's aho-corasick (leftmost-longest) does: at the first position
// where a token starts, the longest one that matches. Pass 0 looks for the tokens matched on the
// raw text, and its gaps go to pass 1 for the ones matched after normalization, as in HF.
void BpeTokenizer::Impl::split_added(std::string_view text, int pass,
                                     std::vector<int32_t>& out) const {
  auto gap = [&](std::string_view g) {
    if (pass == 0)
      split_added(g, 1, out);
    else
      encode_segment(g, out);
  };
  if (!pass_has_tokens[pass]) return gap(text);
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
      if (text.substr(i).starts_with(added[c].content)) {
        hit = &added[c];
        break;  // longest first
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    gap(text.substr(seg_start, i - seg_start));
    out.push_back(hit->id);
    i += hit->content.size();
    seg_start = i;
  }
  gap(text.substr(seg_start));
}

void BpeTokenizer::Impl::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces{text}, next;
  std::deque<std::string> owned;  // pieces made by add_prefix_space
  for (const PreTokenizer& pt : pre_tokenizers) {
    next.clear();
    for (std::string_view p : pieces) {
      if (pt.add_prefix_space && !p.starts_with(' ')) {
        std::string& prefixed = owned.emplace_back(1, ' ');
        prefixed.append(p);
        p = prefixed;
      }
      if (pt.regex)
        pt.regex->split(p, next);
      else
        next.push_back(p);
    }
    pieces.swap(next);
  }
  for (std::string_view p : pieces) encode_word(p, out);
}

void BpeTokenizer::Impl::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(word);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> syms;
  std::optional<int32_t> whole;
  if (ignore_merges) {
    std::string mapped;
    if (byte_level) {
      static const auto table = gpt2_bytes_to_unicode();
      for (char c : word) append_utf8(table[static_cast<unsigned char>(c)], mapped);
    } else {
      mapped = word;
    }
    auto it = vocab.find(mapped);
    if (it != vocab.end()) whole = it->second;
  }
  if (whole) {
    syms.push_back(*whole);
  } else {
    initial_symbols(word, syms);
    merge_all(syms);
  }
  out.insert(out.end(), syms.begin(), syms.end());
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() >= kMaxCacheWords) cache.clear();
  cache.emplace(std::string(word), std::move(syms));
}

// One symbol per byte (byte-level) or per UTF-8 character; a character missing from the vocab
// falls back to <0xXX> byte tokens, then to unk, else it is an error in the tokenizer file.
void BpeTokenizer::Impl::initial_symbols(std::string_view word, std::vector<int32_t>& syms) const {
  syms.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const size_t n = byte_level ? 1 : utf8_len(word, i);
    int32_t id = -1;
    if (byte_level) {
      id = byte_ids[static_cast<unsigned char>(word[i])];
    } else {
      auto it = vocab.find(std::string(word.substr(i, n)));
      if (it != vocab.end()) id = it->second;
    }
    if (id >= 0) {
      syms.push_back(id);
    } else if (byte_fallback) {
      for (size_t k = 0; k < n; ++k) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "<0x%02X>", static_cast<unsigned char>(word[i + k]));
        auto it = vocab.find(hex);
        if (it == vocab.end()) fail("model.vocab", std::string("no byte-fallback token ") + hex);
        syms.push_back(it->second);
      }
    } else if (unk_id) {
      if (!(fuse_unk && !syms.empty() && syms.back() == *unk_id)) syms.push_back(*unk_id);
    } else {
      std::ostringstream os;
      os << "no token for byte 0x" << std::hex
         << static_cast<int>(static_cast<unsigned char>(word[i])) << " and no unk_token";
      fail("model.vocab", os.str());
    }
    i += n;
  }
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
  std::string out;
  out.reserve(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || !impl_->id_used[id])
      throw UserError("BpeTokenizer::decode: unknown id " + std::to_string(id) + " (tokenizer " +
                      impl_->path + ", vocab size " + std::to_string(vocab_size()) + ")");
    out += impl_->id_to_bytes[id];
  }
  return out;
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
