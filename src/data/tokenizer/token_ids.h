// TokenIds: the one check of a tokenizer.json's token ids (the BPE model's vocab, the Unigram
// model's pieces, added_tokens), which every loader runs before any table is sized from them.
// Ids are int32 in the token store and in the model, and so is vocab_size (largest id + 1), so an
// id must lie in [0, 2^31 - 1). Two different tokens may not share an id; a token may repeat its
// own id (an added token that is also in model.vocab, as HF's tokenizers accepts). Gaps between
// ids are accepted, as HF accepts them (decode refuses an unused id), but not a vocabulary that
// is mostly gap: its tables are sized by the largest id, so one stray id near 2^31 would ask for
// tens of GB.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>

namespace lmt {

class TokenIds {
 public:
  static constexpr int64_t kLimit = (int64_t{1} << 31) - 1;  // ids are below this
  static constexpr int64_t kGapSlack = int64_t{1} << 20;     // unused ids allowed in any case

  // `where` ("tokenizer PATH") starts every UserError, followed by the field.
  explicit TokenIds(std::string where) : where_(std::move(where)) {}

  // Checks the id `v` of `content` and returns it. `field` names the id in errors
  // (`model.vocab["abc"]`, `added_tokens[2].id`), `owner` names the token in another token's
  // error ("model.vocab", "added_tokens[2]").
  int32_t claim(const nlohmann::json& v, const std::string& field, const std::string& owner,
                const std::string& content);
  int32_t claim(int64_t id, const std::string& field, const std::string& owner,
                const std::string& content);

  // Refuses an empty model.vocab and a vocabulary mostly made of gaps; returns the vocab size
  // (largest id + 1), computed in 64 bits.
  int64_t finish() const;

  // Calls f(id, content) for every claimed id, with the content of the token that claimed it.
  template <class F>
  void for_each_token(F f) const {
    for (const auto& [id, o] : owners_) f(id, o.content);
  }

 private:
  struct Owner {
    std::string owner, content;
    bool in_model;
  };
  [[noreturn]] void fail(const std::string& field, const std::string& what) const;

  std::string where_;
  std::unordered_map<int32_t, Owner> owners_;
  int64_t size_ = 0;
  std::string largest_field_;  // the field of the largest id
};

}  // namespace lmt
