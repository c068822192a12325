// HfDecoder: each step rewrites the token list (tokenizers/src/decoders/*.rs), then the tokens are
// concatenated.
#include "data/tokenizer/hf_decoder.h"

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"

namespace lmt {

namespace {

// The code points of UTF-8 text (assumed valid: tokens come from the JSON file).
std::vector<std::string_view> chars_of(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// "<0xAB>" -> 0xAB (HF accepts either case of hex digit); -1 for any other token.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Strip's start / stop: how many characters to take off, an integer >= 0 as HF's usize (which
// refuses -1, 1.5 or "1"); read as uint64, since get<int> of 1e10 is undefined behaviour.
int strip_count(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (!it->is_number_unsigned())
    throw UserError(where + "." + key + ": expected an integer >= 0, got " + it->dump());
  return static_cast<int>(std::min<uint64_t>(it->get<uint64_t>(), INT_MAX));
}

}  // namespace

HfDecoder HfDecoder::from_json(const nlohmann::json& j, const std::string& where) {
  HfDecoder d;
  if (!j.is_null()) {
    d.null_ = false;
    d.add(j, where);
  }
  return d;
}

void HfDecoder::add(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.value("type", "");
  Step st{};
  if (type == "Sequence") {
    const auto& list = j.value("decoders", nlohmann::json::array());
    for (size_t i = 0; i < list.size(); ++i)
      add(list[i], where + ".decoders[" + std::to_string(i) + "]");
    return;
  } else if (type == "ByteLevel") {
    st.kind = Step::Kind::kByteLevel;
  } else if (type == "Replace") {
    const auto& pattern = j.value("pattern", nlohmann::json::object());
    if (!pattern.contains("String"))
      throw UserError(where + ".pattern: only a String pattern is supported (not Regex)");
    st.kind = Step::Kind::kReplace;
    st.pattern = pattern["String"].get<std::string>();
    st.content = j.value("content", "");
    if (st.pattern.empty()) throw UserError(where + ".pattern: empty String");
  } else if (type == "ByteFallback") {
    st.kind = Step::Kind::kByteFallback;
  } else if (type == "Fuse") {
    st.kind = Step::Kind::kFuse;
  } else if (type == "Strip") {
    st.kind = Step::Kind::kStrip;
    st.content = j.value("content", " ");
    st.start = strip_count(j, "start", where);
    st.stop = strip_count(j, "stop", where);
  } else if (type == "Metaspace") {
    st.kind = Step::Kind::kMetaspace;
    st.content = j.value("replacement", "\u2581");
    if (st.content.empty()) throw UserError(where + ".replacement: empty");  // replace_all loops
    st.prepend = j.value("prepend_scheme", "always") != "never";
  } else {
    throw UserError(where + ".type: '" + type +
                    "' is not supported (supported: ByteLevel, Replace, ByteFallback, Fuse, "
                    "Strip, Metaspace, Sequence)");
  }
  steps_.push_back(std::move(st));
}

bool HfDecoder::is_byte_level_only() const {
  return steps_.size() == 1 && steps_[0].kind == Step::Kind::kByteLevel;
}

std::string HfDecoder::decode(std::vector<std::string> tokens) const {
  if (null_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Step::Kind::kByteLevel: {
        // A token whose characters all come from the byte table becomes those bytes; any other
        // (an added token) stays as it is. The result is one token, as in HF.
        static const std::unordered_map<std::string, char> char_to_byte = [] {
          std::unordered_map<std::string, char> m;
          const auto table = gpt2_bytes_to_unicode();
          for (int b = 0; b < 256; ++b) {
            std::string s;
            append_utf8(table[b], s);
            m[s] = static_cast<char>(b);
          }
          return m;
        }();
        std::string joined;
        for (const std::string& t : tokens) {
          std::string bytes;
          bool all = true;
          for (std::string_view c : chars_of(t)) {
            auto it = char_to_byte.find(std::string(c));
            if (it == char_to_byte.end()) {
              all = false;
              break;
            }
            bytes.push_back(it->second);
          }
          joined += all ? bytes : t;
        }
        tokens.assign(1, std::move(joined));
        break;
      }
      case Step::Kind::kReplace:
        for (std::string& t : tokens) replace_all(t, st.pattern, st.content);
        break;
      case Step::Kind::kByteFallback: {
        // Runs of <0xNN> tokens become their bytes when those are valid UTF-8, else one U+FFFD
        // per byte.
        std::vector<std::string> out;
        std::string run;
        size_t run_len = 0;
        auto flush = [&] {
          if (run_len == 0) return;
          if (valid_utf8(run))
            out.push_back(run);
          else
            for (size_t k = 0; k < run_len; ++k) out.push_back("\xEF\xBF\xBD");
          run.clear();
          run_len = 0;
        };
        for (std::string& t : tokens) {
          const int b = byte_token(t);
          if (b >= 0) {
            run.push_back(static_cast<char>(b));
            ++run_len;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens.swap(out);
        break;
      }
      case Step::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Step::Kind::kStrip:
        for (std::string& t : tokens) {
          auto cs = chars_of(t);
          size_t b = 0, e = cs.size();
          while (b < e && b < static_cast<size_t>(st.start) && cs[b] == st.content) ++b;
          for (int k = 0; k < st.stop && e > b && cs[e - 1] == st.content; ++k) --e;
          std::string s;
          for (size_t k = b; k < e; ++k) s += cs[k];
          t.swap(s);
        }
        break;
      case Step::Kind::kMetaspace:
        // The replacement becomes a space, except in the first token, where it is dropped when
        // encoding prepends one.
        for (size_t i = 0; i < tokens.size(); ++i)
          replace_all(tokens[i], st.content, i == 0 && st.prepend ? "" : " ");
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace lmt
