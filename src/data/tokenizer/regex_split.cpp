// Regex split: PCRE2 matching and HF's folding of matches and gaps into pieces per behavior
// (tokenizers/src/tokenizer/normalizer.rs, NormalizedString::split).
#include "data/tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"

namespace lmt {

namespace {

struct Span {
  size_t b, e;
  bool match;
};

}  // namespace

bool parse_split_behavior(const std::string& name, SplitBehavior& out) {
  static const std::pair<const char*, SplitBehavior> kNames[] = {
      {"Isolated", SplitBehavior::kIsolated},
      {"Removed", SplitBehavior::kRemoved},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  for (const auto& [n, b] : kNames)
    if (name == n) {
      out = b;
      return true;
    }
  return false;
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  std::string where;  // names the pattern in match errors
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& where) : code_(new Code) {
  code_->where = where;
  int err = 0;
  PCRE2_SIZE err_off = 0;
  code_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
  if (!code_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw UserError(where + ": regex does not compile at offset " + std::to_string(err_off) + ": " +
                    reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
}

Regex::~Regex() = default;

void Regex::split(std::string_view s, SplitBehavior behavior,
                  std::vector<std::string_view>& out) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  // Matches and the gaps between them, in order (HF's find_matches); empty matches are skipped.
  std::vector<Span> spans;
  size_t pos = 0, gap_start = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(code_->code, subject, s.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      // PCRE2's match or depth limit on a long piece: the text is the problem, not the pattern,
      // so prepare reports it as a bad record (TokenizeError).
      throw TokenizeError(code_->where + ": regex match failed at byte " + std::to_string(pos) +
                          " of a " + std::to_string(s.size()) +
                          "-byte text: " + reinterpret_cast<char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: no piece, step one character on
      if (b >= s.size()) break;
      pos = b + utf8_char_len(s, b);
      continue;
    }
    if (b > gap_start) spans.push_back({gap_start, b, false});
    spans.push_back({b, e, true});
    gap_start = pos = e;
  }
  if (gap_start < s.size()) spans.push_back({gap_start, s.size(), false});

  // HF's folds: a delimiter joins the piece before (MergedWithPrevious) or after (MergedWithNext,
  // folded from the end) unless that piece is itself a delimiter; Contiguous joins runs of them.
  std::vector<Span> folded;
  const std::vector<Span>& pieces = behavior == SplitBehavior::kIsolated ? spans : folded;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      break;
    case SplitBehavior::kRemoved:
      for (const Span& sp : spans)
        if (!sp.match) folded.push_back(sp);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Span& sp : spans) {
        if (sp.match && !prev_match && !folded.empty())
          folded.back().e = sp.e;
        else
          folded.push_back(sp);
        prev_match = sp.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !prev_match && !folded.empty())
          folded.back().b = it->b;
        else
          folded.push_back(*it);
        prev_match = it->match;
      }
      std::reverse(folded.begin(), folded.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const Span& sp : spans) {
        if (sp.match && prev_match)
          folded.back().e = sp.e;
        else
          folded.push_back(sp);
        prev_match = sp.match;
      }
      break;
    }
  }
  for (const Span& p : pieces)
    if (p.e > p.b) out.push_back(s.substr(p.b, p.e - p.b));
}

std::string quote_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c)))
      out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace lmt
