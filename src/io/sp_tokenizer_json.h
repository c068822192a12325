// A SentencePiece model (.model) as a Hugging Face tokenizer.json that gives sentencepiece's ids:
// its normalizer (the precompiled character map, the whitespace rules, the dummy prefix), its
// Unigram or BPE model (BPE merges derived from the pieces' scores, as sentencepiece merges the
// highest-scoring pair first), its special tokens and BOS post-processor, and a decoder. An
// export writes it beside tokenizer.model, since transformers 5 rebuilds a .model-only tokenizer
// without the normalizer.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lmt {

struct SpTokenizerJson {
  nlohmann::json json;  // null where the model has a setting tokenizer.json cannot express
  std::string why_not;  // then: which setting, for the user
};

// A SentencePiece model's pieces (type: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
// 6 byte, as sentencepiece_model.proto numbers them) and whitespace settings.
struct SpPiece {
  std::string text;
  float score = 0.0f;
  int type = 1;
};
struct SpModelPieces {
  std::vector<SpPiece> pieces;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  int unk_id = -1;
};
SpModelPieces sentencepiece_pieces(const std::string& model_path);

// Reads `model_path` (UserError when it is not a SentencePiece model).
SpTokenizerJson sentencepiece_tokenizer_json(const std::string& model_path);

}  // namespace lmt
