// The Unigram model of a Hugging Face tokenizer.json ("model": {"type": "Unigram", ...}), as
// tokenizers 0.23 runs it on one pre-tokenized word: Viterbi over the pieces' log-probability
// scores (tokenizers' encode_optimized), characters no piece covers scored min_score - 10 as
// unk, consecutive unks fused into one string, and a fused string that is not a piece written as
// its <0xNN> byte pieces when byte_fallback is on and all of them exist, else as unk_id. Ties keep
// the first candidate in HF's order, and scores are summed in HF's order, so the ids match
// exactly. The normalizer, pre-tokenizer and added tokens around it are BpeTokenizer's pipeline.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lmt {

class UnigramModel {
 public:
  // `m` is the "model" object; `where` ("tokenizer PATH: model") starts every UserError, followed
  // by the field (".vocab[3][1]: expected a finite number").
  static UnigramModel from_json(const nlohmann::json& m, const std::string& where);

  // Appends the ids of `word` (already normalized and pre-tokenized). Throws UserError when the
  // word has a character no piece covers and the model has no unk_id (HF fails there too).
  void encode(std::string_view word, std::vector<int32_t>& out) const;

  // (piece, score) by id.
  const std::vector<std::pair<std::string, double>>& pieces() const { return pieces_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  // A byte trie of the pieces: child of (node, byte) in a hash map; terminal_[node] is the id of
  // the piece ending there (the last id when a piece appears twice, as HF's token map keeps).
  int32_t child(int32_t node, unsigned char b) const;
  void insert(const std::string& piece, int32_t id);
  std::optional<int32_t> piece_id(std::string_view s) const;

  std::string where_;
  std::vector<std::pair<std::string, double>> pieces_;
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_{-1};  // node 0 is the root
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  double min_score_ = 0.0;
};

}  // namespace lmt
