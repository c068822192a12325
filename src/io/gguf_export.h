// Writing a model as one GGUF file (version 3), the format llama.cpp and the tools built on it
// load: the tensors under llama.cpp's names and layouts (llama-style RoPE's q/k rows interleaved,
// Gemma's norms as 1 + w, GPT-2's Conv1D weights transposed), the hyper-parameters and the
// tokenizer as metadata, weights as f32, f16, bf16 or Q8_0 (norms, biases and position tables
// stay f32, as llama.cpp's own converter keeps them). The file is written as OUT.tmp-PID and
// renamed into place. docs/hf_interop.md says what was checked against what.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/hf_export.h"
#include "model/model_config.h"

namespace lmt {

enum class GgufType { f32, f16, bf16, q8_0 };

struct GgufExportOptions {
  GgufType type = GgufType::bf16;
  std::string tokenizer;      // a byte-level BPE tokenizer.json or a SentencePiece .model
  std::string chat_template;  // Jinja for tokenizer.chat_template; "" = none
  std::string name;           // general.name
};

struct GgufExportResult {
  std::string path;
  int64_t tensors = 0;
  uint64_t bytes = 0;                 // the file's size
  std::vector<std::string> warnings;  // what llama.cpp will compute differently, if anything
};

// "f32", "f16", "bf16", "q8_0" (also "Q8_0"); UserError naming `what` otherwise.
GgufType parse_gguf_type(const std::string& s, const std::string& what);
const char* gguf_type_name(GgufType t);

// Writes `path` for a model of `cfg` whose parameters are `tensors` (Hugging Face names and
// shapes, as save_hf_model takes them). Refuses (UserError, naming the setting) a family llama.cpp
// does not have, a setting it would compute differently, a tokenizer it cannot take, and an
// existing `path` that is not a file.
GgufExportResult save_gguf(const std::string& path, const ModelConfig& cfg,
                           const std::vector<HfTensor>& tensors, const GgufExportOptions& opt);

}  // namespace lmt
