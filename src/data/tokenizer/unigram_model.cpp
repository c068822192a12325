// UnigramModel: loading and checking the model object, the piece trie, and the Viterbi search of
// tokenizers/src/models/unigram/model.rs (encode_optimized, then tokenize's byte fallback).
#include "data/tokenizer/unigram_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"

namespace lmt {

namespace {

// HF's K_UNK_PENALTY: an uncovered character scores this far below the lowest piece.
constexpr double kUnkPenalty = 10.0;

uint64_t edge_key(int32_t node, unsigned char b) {
  return (static_cast<uint64_t>(node) << 8) | b;
}

}  // namespace

UnigramModel UnigramModel::from_json(const nlohmann::json& m, const std::string& where) {
  UnigramModel u;
  u.where_ = where;
  auto fail = [&](const std::string& field, const std::string& what) {
    throw UserError(where + "." + field + ": " + what);
  };
  if (!m.is_object()) throw UserError(where + ": expected a JSON object");
  auto vocab = m.find("vocab");
  if (vocab == m.end()) fail("vocab", "missing");
  if (!vocab->is_array()) fail("vocab", "expected an array of [piece, score] pairs");
  if (vocab->empty()) fail("vocab", "empty");
  u.min_score_ = INFINITY;
  for (size_t i = 0; i < vocab->size(); ++i) {
    const nlohmann::json& e = (*vocab)[i];
    const std::string name = "vocab[" + std::to_string(i) + "]";
    if (!e.is_array() || e.size() != 2) fail(name, "expected a [piece, score] pair");
    if (!e[0].is_string()) fail(name + "[0]", "expected the piece as a string");
    if (!e[1].is_number()) fail(name + "[1]", "expected the score as a number, got " + e[1].dump());
    const double score = e[1].get<double>();
    if (!std::isfinite(score)) fail(name + "[1]", "the score is not finite");
    std::string piece = e[0].get<std::string>();
    if (piece.empty()) fail(name + "[0]", "empty piece");
    u.insert(piece, static_cast<int32_t>(i));
    u.pieces_.emplace_back(std::move(piece), score);
    u.min_score_ = std::min(u.min_score_, score);
  }
  auto unk = m.find("unk_id");
  if (unk != m.end() && !unk->is_null()) {
    if (!unk->is_number_integer()) fail("unk_id", "expected an integer, got " + unk->dump());
    const int64_t id = unk->get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(u.pieces_.size()))
      fail("unk_id", std::to_string(id) + " is not an id of the vocab (size " +
                         std::to_string(u.pieces_.size()) + ")");
    u.unk_id_ = static_cast<int32_t>(id);
  }
  auto fallback = m.find("byte_fallback");
  if (fallback != m.end() && !fallback->is_null()) {
    if (!fallback->is_boolean()) fail("byte_fallback", "expected true or false");
    u.byte_fallback_ = fallback->get<bool>();
  }
  return u;
}

int32_t UnigramModel::child(int32_t node, unsigned char b) const {
  auto it = edges_.find(edge_key(node, b));
  return it == edges_.end() ? -1 : it->second;
}

void UnigramModel::insert(const std::string& piece, int32_t id) {
  int32_t node = 0;
  for (char c : piece) {
    const auto b = static_cast<unsigned char>(c);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(terminal_.size());
      terminal_.push_back(-1);
      edges_.emplace(edge_key(node, b), next);
    }
    node = next;
  }
  terminal_[node] = id;
}

std::optional<int32_t> UnigramModel::piece_id(std::string_view s) const {
  int32_t node = 0;
  for (char c : s)
    if ((node = child(node, static_cast<unsigned char>(c))) < 0) return std::nullopt;
  if (terminal_[node] < 0) return std::nullopt;
  return terminal_[node];
}

void UnigramModel::encode(std::string_view s, std::vector<int32_t>& out) const {
  const size_t n = s.size();
  if (n == 0) return;
  // best[i]: the best path over s[0, i): its score, its last piece and where that piece starts.
  struct Node {
    int32_t id = 0;
    double score = 0.0;
    int64_t start = -1;  // -1: no path ends here yet
  };
  std::vector<Node> best(n + 1);
  const double unk_score = min_score_ - kUnkPenalty;
  for (size_t at = 0; at < n;) {
    const double here = best[at].score;
    const size_t char_len = utf8_char_len(s, at);
    bool single_char_piece = false;
    int32_t node = 0;
    for (size_t k = at; k < n; ++k) {  // every piece that starts at `at`, shortest first
      if ((node = child(node, static_cast<unsigned char>(s[k]))) < 0) break;
      const int32_t id = terminal_[node];
      if (id < 0) continue;
      const double cand = pieces_[id].second + here;
      Node& t = best[k + 1];
      if (t.start < 0 || cand > t.score) t = {id, cand, static_cast<int64_t>(at)};
      if (k + 1 - at == char_len) single_char_piece = true;
    }
    if (!single_char_piece) {
      if (!unk_id_)
        throw UserError(where_ + ".unk_id: the text has a character no piece covers ('" +
                        std::string(s.substr(at, char_len)) + "') and the model has no unk_id");
      const double cand = unk_score + here;
      Node& t = best[at + char_len];
      if (t.start < 0 || cand > t.score) t = {*unk_id_, cand, static_cast<int64_t>(at)};
    }
    at += char_len;
  }
  // Back from the end: unk pieces next to each other become one span (HF's fuse_unk).
  struct Item {
    int32_t id;         // -1 for a fused unk span
    size_t begin, end;  // the span
  };
  std::vector<Item> items;
  size_t run_begin = 0, run_end = 0;  // run_end > run_begin while a span is open
  for (size_t end = n; end > 0;) {
    const Node& nd = best[end];
    const auto start = static_cast<size_t>(nd.start);
    if (unk_id_ && nd.id == *unk_id_) {
      if (run_end == run_begin) run_end = end;
      run_begin = start;
    } else {
      if (run_end > run_begin) items.push_back({-1, run_begin, run_end});
      run_begin = run_end = 0;
      items.push_back({nd.id, start, end});
    }
    end = start;
  }
  if (run_end > run_begin) items.push_back({-1, run_begin, run_end});
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    if (it->id >= 0) {
      out.push_back(it->id);
      continue;
    }
    const std::string_view span = s.substr(it->begin, it->end - it->begin);
    if (auto id = piece_id(span)) {
      out.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      const size_t before = out.size();
      bool all = true;
      for (char c : span) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "<0x%02X>", static_cast<unsigned char>(c));
        auto id = piece_id(hex);
        if (!id) {
          all = false;
          break;
        }
        out.push_back(*id);
      }
      if (all) continue;
      out.resize(before);
    }
    out.push_back(*unk_id_);
  }
}

}  // namespace lmt
