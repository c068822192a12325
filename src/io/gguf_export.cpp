// GGUF v3 writer. Layout (llama.cpp ggml/src/gguf.cpp; all little-endian): "GGUF", u32 version
// 3, i64 tensor count, i64 key count; the keys (u64-length string, i32 value type, value; an
// array is i32 element type, u64 count, elements); the tensor infos (name, u32 dims, i64 dims
// fastest-moving first, i32 ggml type, u64 offset into the data); zero padding to 32 bytes; the
// tensors in info order, each padded to 32. Q8_0 blocks are 32 values: an f16 scale
// d = max|x| / 127 and int8 round(x / d), ties away from zero (ggml's quantize_row_q8_0_ref).
// Which tensors stay f32, the names, and the metadata keys follow llama.cpp's convert_hf_to_gguf.py
// and llama-model.cpp (docs/hf_interop.md).
#include "io/gguf_export.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "core/output_lock.h"
#include "data/tokenizer/tokenizer.h"
#include "io/sp_tokenizer_json.h"
#include "model/rope.h"
#include "model/transformer.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kAlign = 32;
enum ValueType : int32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };
enum GgmlType : int32_t { kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ8_0 = 8, kGgmlBf16 = 30 };
// llama_token_type (llama.h); SentencePiece's piece types use the same numbers.
enum TokenType : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

void put(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
template <class T>
void put(std::string& out, T v) {
  put(out, &v, sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put(out, static_cast<uint64_t>(s.size()));
  out += s;
}

// The key-value section.
class Metadata {
 public:
  void str(const std::string& k, const std::string& v) { key(k, kString), put_string(out_, v); }
  void u32(const std::string& k, int64_t v) {
    LMT_CHECK(v >= 0 && v <= UINT32_MAX, "gguf: " + k + " out of u32 range");
    key(k, kU32), put(out_, static_cast<uint32_t>(v));
  }
  void f32(const std::string& k, double v) { key(k, kF32), put(out_, static_cast<float>(v)); }
  void boolean(const std::string& k, bool v) { key(k, kBool), put(out_, static_cast<uint8_t>(v)); }
  void strings(const std::string& k, const std::vector<std::string>& v) {
    array(k, kString, v.size());
    for (const std::string& s : v) put_string(out_, s);
  }
  void i32s(const std::string& k, const std::vector<int32_t>& v) {
    array(k, kI32, v.size());
    put(out_, v.data(), v.size() * sizeof(int32_t));
  }
  void f32s(const std::string& k, const std::vector<float>& v) {
    array(k, kF32, v.size());
    put(out_, v.data(), v.size() * sizeof(float));
  }
  int64_t count() const { return count_; }
  const std::string& bytes() const { return out_; }

 private:
  void key(const std::string& k, ValueType t) {
    LMT_CHECK(keys_.insert(k).second, "gguf: key " + k + " written twice");
    put_string(out_, k);
    put(out_, static_cast<int32_t>(t));
    ++count_;
  }
  void array(const std::string& k, ValueType elem, size_t n) {
    key(k, kArray);
    put(out_, static_cast<int32_t>(elem));
    put(out_, static_cast<uint64_t>(n));
  }
  std::string out_;
  std::set<std::string> keys_;
  int64_t count_ = 0;
};

// One tensor of the file: its values (f32, numpy row order of `shape`) come from `fill`.
struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;  // numpy order (slowest first)
  GgmlType type = kGgmlF32;
  std::function<void(std::vector<float>&)> fill;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  uint64_t nbytes() const {
    const auto n = static_cast<uint64_t>(numel());
    switch (type) {
      case kGgmlF32:
        return 4 * n;
      case kGgmlQ8_0:
        return n / 32 * 34;
      default:
        return 2 * n;
    }
  }
};

uint64_t pad(uint64_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

// ggml's roundf: ties away from zero.
void quantize_q8_0(const float* x, int64_t n, std::string& out) {
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put(out, f32_to_f16(d));
    for (int j = 0; j < 32; ++j) put(out, static_cast<int8_t>(std::roundf(x[b + j] * id)));
  }
}

std::string encode(const OutTensor& t, const std::vector<float>& v) {
  std::string out;
  out.reserve(t.nbytes());
  switch (t.type) {
    case kGgmlF32:
      put(out, v.data(), v.size() * sizeof(float));
      break;
    case kGgmlF16:
      for (float x : v) put(out, f32_to_f16(x));
      break;
    case kGgmlBf16:
      for (float x : v) put(out, f32_to_bf16(x));
      break;
    case kGgmlQ8_0: {
      const int64_t row = t.shape.back();
      for (size_t r = 0; r < v.size(); r += static_cast<size_t>(row))
        quantize_q8_0(v.data() + r, row, out);
      break;
    }
  }
  return out;
}

std::string arch_of(const std::string& family) {
  if (family == "llama" || family == "mistral") return "llama";  // as llama.cpp's converter
  return family;
}

[[noreturn]] void refuse(const std::string& what) {
  throw UserError("export --format gguf: " + what);
}

// What llama.cpp fixes per family and this model would need otherwise.
void check_expressible(const ModelConfig& c, std::vector<std::string>& warnings) {
  const std::string& f = c.family;
  const ModelConfig d = family_defaults(f);
  if (c.hidden_act != d.hidden_act)
    refuse(fmt::format("llama.cpp's {} uses {}, this model {} (model.hidden_act)", f, d.hidden_act,
                       c.hidden_act));
  if (f == "gpt2") return;
  if (c.rope_type != "default" && c.rope_type != "linear" && c.rope_type != "llama3")
    refuse("RoPE scaling '" + c.rope_type + "' is not written (written: default, linear, llama3)");
  if (f == "gemma" || f == "gemma2") {
    if (!c.tie_word_embeddings)
      refuse("llama.cpp's " + f +
             " always uses the embedding as the output layer; this model "
             "has its own (tie_word_embeddings false)");
  }
  if (f == "gemma2" || f == "gemma3") {
    const bool big = (f == "gemma2" && c.num_hidden_layers == 46) ||
                     (f == "gemma3" && c.num_hidden_layers == 62);
    const double want = big ? static_cast<double>(c.hidden_size / c.num_attention_heads)
                            : static_cast<double>(c.head_size());
    if (c.query_pre_attn_scalar != want)
      refuse(
          fmt::format("llama.cpp's {} scales attention scores by {}^-1/2 at {} layers, this "
                      "model by query_pre_attn_scalar {}^-1/2",
                      f, want, c.num_hidden_layers, c.query_pre_attn_scalar));
    const int64_t pattern = f == "gemma2" ? 2 : 6;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      if (c.is_sliding_layer(l) != (c.sliding_window > 0 && l % pattern < pattern - 1))
        refuse(fmt::format(
            "llama.cpp's {} windows {} of every {} layers; this model's layer {} "
            "is {} (sliding_window_pattern {})",
            f, pattern - 1, pattern, l, c.is_sliding_layer(l) ? "windowed" : "not windowed",
            c.sliding_window_pattern));
    if (f == "gemma3" && c.sliding_window > 0 && c.rope_local_base_freq != 10000.0)
      refuse(
          fmt::format("llama.cpp's gemma3 uses RoPE base 10000 on windowed layers, this model "
                      "{} (rope_local_base_freq)",
                      c.rope_local_base_freq));
    if (f == "gemma3" && c.attn_logit_softcapping > 0)
      refuse("llama.cpp's gemma3 has no attention soft-capping (attn_logit_softcapping)");
  }
  if (f == "gemma" &&
      (c.sliding_window > 0 || c.attn_logit_softcapping > 0 || c.final_logit_softcapping > 0))
    refuse("llama.cpp's gemma has no sliding window or soft-capping");
  if (f == "qwen2" && c.num_attention_heads * c.head_size() != c.hidden_size)
    refuse(fmt::format("llama.cpp's qwen2 needs heads x head_dim = hidden_size ({} x {} != {})",
                       c.num_attention_heads, c.head_size(), c.hidden_size));
  if (f == "mistral" && c.sliding_window > 0 && c.sliding_window < c.max_position_embeddings)
    warnings.push_back(fmt::format(
        "llama.cpp runs mistral as llama: attention over all positions, not a window of {} "
        "(the same up to {} tokens)",
        c.sliding_window, c.sliding_window));
}

// llama.cpp's names: blk.N.<what> for a layer's tensors.
std::optional<std::string> gguf_name(const std::string& hf, const ModelConfig& c) {
  static const std::regex layer(
      R"((?:model\.layers|transformer\.h)\.([0-9]+)\.(.+)\.(weight|bias))");
  static const std::map<std::string, std::string> top = {{"model.embed_tokens", "token_embd"},
                                                         {"model.norm", "output_norm"},
                                                         {"lm_head", "output"},
                                                         {"transformer.wte", "token_embd"},
                                                         {"transformer.wpe", "position_embd"},
                                                         {"transformer.ln_f", "output_norm"}};
  const bool sandwich = c.family == "gemma2" || c.family == "gemma3";
  const std::map<std::string, std::string> in_layer = {
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
      {"input_layernorm", "attn_norm"},
      {"post_attention_layernorm", sandwich ? "post_attention_norm" : "ffn_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
      {"ln_1", "attn_norm"},
      {"attn.c_attn", "attn_qkv"},
      {"attn.c_proj", "attn_output"},
      {"ln_2", "ffn_norm"},
      {"mlp.c_fc", "ffn_up"},
      {"mlp.c_proj", "ffn_down"}};
  std::smatch m;
  if (std::regex_match(hf, m, layer)) {
    auto it = in_layer.find(m[2].str());
    if (it == in_layer.end()) return std::nullopt;
    return "blk." + m[1].str() + "." + it->second + "." + m[3].str();
  }
  const size_t dot = hf.rfind('.');
  auto it = top.find(hf.substr(0, dot));
  if (it == top.end()) return std::nullopt;
  return it->second + hf.substr(dot);
}

// llama.cpp's llama rotates adjacent pairs, Hugging Face's the two halves of each head: rows
// h*D + j*D/2 + i become h*D + 2i + j (convert_hf_to_gguf.py's permute).
void permute_rows(std::vector<float>& v, int64_t heads, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(v.size()) / cols, d = rows / heads;
  std::vector<float> out(v.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(&out[static_cast<size_t>((h * d + 2 * i + j) * cols)],
                    &v[static_cast<size_t>((h * d + j * (d / 2) + i) * cols)],
                    static_cast<size_t>(cols) * sizeof(float));
  v.swap(out);
}

// llama3 RoPE as llama.cpp takes it: a rope_freqs tensor of per-frequency divisors of plain
// RoPE's frequencies, here the ratio of lmtrain's own unscaled and scaled frequencies.
std::vector<float> llama3_rope_factors(const ModelConfig& c) {
  ModelConfig plain = c;
  plain.rope_type = "default";
  plain.rope_factor = 1.0;
  const RopeFrequencies base = rope_frequencies(plain, false, 1);
  const RopeFrequencies scaled = rope_frequencies(c, false, 1);
  std::vector<float> f;
  for (size_t i = 0; i < base.inv_freq.size(); ++i)
    f.push_back(static_cast<float>(base.inv_freq[i] / scaled.inv_freq[i]));
  return f;
}

std::vector<OutTensor> plan_tensors(const ModelConfig& c, const std::vector<HfTensor>& tensors,
                                    GgufType type) {
  const bool permute = arch_of(c.family) == "llama";
  const bool gemma = c.family.starts_with("gemma");
  const bool gpt2 = c.family == "gpt2";
  std::vector<OutTensor> out;
  for (const HfTensor& t : tensors) {
    if (gemma && t.name == "lm_head.weight") continue;  // tied: checked above
    const std::optional<std::string> name = gguf_name(t.name, c);
    LMT_CHECK(name.has_value(), "gguf: no llama.cpp name for " + t.name);
    OutTensor o;
    o.name = *name;
    o.shape.assign(t.shape.dims().begin(), t.shape.dims().end());
    const bool conv1d = gpt2 && t.shape.rank() == 2 && o.name.find("blk.") == 0;
    if (conv1d) std::swap(o.shape[0], o.shape[1]);
    const int64_t heads = o.name.find(".attn_q.") != std::string::npos   ? c.num_attention_heads
                          : o.name.find(".attn_k.") != std::string::npos ? c.kv_heads()
                                                                         : 0;
    const bool norm = o.name.ends_with("norm.weight");
    const bool plus_one = gemma && norm;
    const int64_t cols = o.shape.size() == 2 ? o.shape[1] : 1;
    o.fill = [=](std::vector<float>& v) {
      const size_t n = static_cast<size_t>(t.shape.numel());
      v.assign(t.data, t.data + n);
      if (conv1d) {  // [in, out] -> [out, in]
        std::vector<float> tr(n);
        const int64_t r = t.shape[0], k = t.shape[1];
        for (int64_t i = 0; i < r; ++i)
          for (int64_t j = 0; j < k; ++j)
            tr[static_cast<size_t>(j * r + i)] = v[static_cast<size_t>(i * k + j)];
        v.swap(tr);
      }
      if (permute && heads > 0) permute_rows(v, heads, cols);
      if (plus_one)
        for (float& x : v) x += 1.0f;
    };
    // As llama.cpp's converter: vectors, norms, biases and the position table in f32.
    const bool keep_f32 = o.shape.size() <= 1 || norm || !o.name.ends_with(".weight") ||
                          o.name.starts_with("position_embd");
    o.type = keep_f32                   ? kGgmlF32
             : type == GgufType::f32    ? kGgmlF32
             : type == GgufType::f16    ? kGgmlF16
             : type == GgufType::bf16   ? kGgmlBf16
             : o.shape.back() % 32 == 0 ? kGgmlQ8_0
                                        : kGgmlF16;  // Q8_0 needs rows of 32s (as the converter)
    out.push_back(std::move(o));
  }
  // GPT-2's output layer is the embedding; llama.cpp before mid-2025 wants it as its own tensor.
  if (gpt2 && c.tie_word_embeddings) {
    OutTensor o = *std::find_if(out.begin(), out.end(),
                                [](const OutTensor& t) { return t.name == "token_embd.weight"; });
    o.name = "output.weight";
    out.push_back(o);
  }
  if (c.rope_type == "llama3" && !gpt2) {
    OutTensor o;
    o.name = "rope_freqs.weight";
    const std::vector<float> f = llama3_rope_factors(c);
    o.shape = {static_cast<int64_t>(f.size())};
    o.fill = [f](std::vector<float>& v) { v = f; };
    out.push_back(std::move(o));
  }
  return out;
}

void model_metadata(Metadata& m, const ModelConfig& c, const std::string& name, GgufType type) {
  const std::string a = arch_of(c.family);
  m.str("general.architecture", a);
  m.str("general.name", name);
  static const std::map<GgufType, int> file_type = {
      {GgufType::f32, 0}, {GgufType::f16, 1}, {GgufType::q8_0, 7}, {GgufType::bf16, 32}};
  m.u32("general.file_type", file_type.at(type));
  m.u32("general.quantization_version", 2);
  m.u32(a + ".vocab_size", c.vocab_size);
  m.u32(a + ".context_length", c.max_position_embeddings);
  m.u32(a + ".embedding_length", c.hidden_size);
  m.u32(a + ".block_count", c.num_hidden_layers);
  m.u32(a + ".feed_forward_length", c.intermediate_size);
  m.u32(a + ".attention.head_count", c.num_attention_heads);
  m.u32(a + ".attention.head_count_kv", c.kv_heads());
  if (c.family == "gpt2") {
    m.f32(a + ".attention.layer_norm_epsilon", c.rms_norm_eps);
    return;
  }
  m.f32(a + ".attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  m.u32(a + ".attention.key_length", c.head_size());
  m.u32(a + ".attention.value_length", c.head_size());
  m.u32(a + ".rope.dimension_count", c.head_size());
  m.f32(a + ".rope.freq_base", c.rope_theta);
  if (c.rope_type == "linear") {
    m.str(a + ".rope.scaling.type", "linear");
    m.f32(a + ".rope.scaling.factor", c.rope_factor);
  }
  if (c.family == "gemma2" || c.family == "gemma3") {
    if (c.sliding_window > 0) m.u32(a + ".attention.sliding_window", c.sliding_window);
    if (c.family == "gemma2") m.f32(a + ".attn_logit_softcapping", c.attn_logit_softcapping);
    if (c.final_logit_softcapping > 0)
      m.f32(a + ".final_logit_softcapping", c.final_logit_softcapping);
  }
}

// Which of llama.cpp's byte-level pre-tokenizers a tokenizer.json's split is, by its regex.
std::string bpe_pre_name(const nlohmann::json& j, std::vector<std::string>& warnings,
                         const std::string& path) {
  static const std::map<std::string, std::string> known = {
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "llama-bpe"},
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "qwen2"}};
  const nlohmann::json& p = j.value("pre_tokenizer", nlohmann::json());
  if (p.is_object() && p.value("type", "") == "ByteLevel" && p.value("use_regex", true) &&
      !p.value("add_prefix_space", false))
    return "gpt-2";
  if (p.is_object() && p.value("type", "") == "Sequence") {
    const nlohmann::json& seq = p.value("pretokenizers", nlohmann::json());
    if (seq.is_array() && seq.size() == 2 && seq[0].value("type", "") == "Split" &&
        seq[1].value("type", "") == "ByteLevel" && !seq[1].value("use_regex", true)) {
      const auto it =
          known.find(seq[0].value("pattern", nlohmann::json::object()).value("Regex", ""));
      if (it != known.end()) return it->second;
    }
  }
  warnings.push_back("the tokenizer '" + path +
                     "' splits text in a way llama.cpp has no name for: written as its "
                     "'default' pre-tokenizer, which splits digits and punctuation otherwise");
  return "default";
}

void bpe_tokenizer_metadata(Metadata& m, const std::string& path, const ModelConfig& c,
                            std::vector<std::string>& warnings) {
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) refuse("the tokenizer '" + path + "' is not JSON");
  const nlohmann::json& model = j.value("model", nlohmann::json());
  const nlohmann::json& dec = j.value("decoder", nlohmann::json());
  if (!model.is_object() || model.value("type", "") != "BPE" || !dec.is_object() ||
      dec.value("type", "") != "ByteLevel")
    refuse("the tokenizer '" + path +
           "' is not a byte-level BPE (GGUF takes byte-level BPE tokenizer.json files, as "
           "GPT-2, Llama 3 and Qwen have, and SentencePiece .model files)");
  std::vector<std::string> tokens(static_cast<size_t>(c.vocab_size));
  std::vector<int32_t> types(tokens.size(), kUnused);
  auto set = [&](int64_t id, const std::string& s, int32_t type) {
    if (id < 0 || id >= c.vocab_size)
      refuse(
          fmt::format("the tokenizer '{}' has id {} past vocab_size {}", path, id, c.vocab_size));
    tokens[static_cast<size_t>(id)] = s;
    types[static_cast<size_t>(id)] = type;
  };
  const nlohmann::json vocab = model.value("vocab", nlohmann::json::object());
  for (const auto& [s, id] : vocab.items()) set(id.get<int64_t>(), s, kNormal);
  for (const auto& a : j.value("added_tokens", nlohmann::json::array()))
    set(a.value("id", int64_t{-1}), a.value("content", ""),
        a.value("special", false) ? kControl : kUserDefined);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == kUnused) tokens[i] = fmt::format("[PAD{}]", i);
  std::vector<std::string> merges;
  for (const auto& mg : model.value("merges", nlohmann::json::array()))
    merges.push_back(mg.is_string()
                         ? mg.get<std::string>()
                         : mg.at(0).get<std::string>() + " " + mg.at(1).get<std::string>());
  m.str("tokenizer.ggml.model", "gpt2");
  m.str("tokenizer.ggml.pre", bpe_pre_name(j, warnings, path));
  m.strings("tokenizer.ggml.tokens", tokens);
  m.i32s("tokenizer.ggml.token_type", types);
  m.strings("tokenizer.ggml.merges", merges);
}

void sp_tokenizer_metadata(Metadata& m, const std::string& path, const ModelConfig& c) {
  const SpModelPieces sp = sentencepiece_pieces(path);
  if (static_cast<int64_t>(sp.pieces.size()) > c.vocab_size)
    refuse(fmt::format("the tokenizer '{}' has {} pieces, more than vocab_size {}", path,
                       sp.pieces.size(), c.vocab_size));
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const SpPiece& p : sp.pieces) {
    tokens.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(p.type);
  }
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < c.vocab_size; ++i) {
    tokens.push_back(fmt::format("[PAD{}]", i));
    scores.push_back(-1000.0f);
    types.push_back(kUnused);
  }
  m.str("tokenizer.ggml.model", "llama");
  m.str("tokenizer.ggml.pre", "default");
  m.strings("tokenizer.ggml.tokens", tokens);
  m.f32s("tokenizer.ggml.scores", scores);
  m.i32s("tokenizer.ggml.token_type", types);
  m.boolean("tokenizer.ggml.add_space_prefix", sp.add_dummy_prefix);
  m.boolean("tokenizer.ggml.remove_extra_whitespaces", sp.remove_extra_whitespaces);
  if (sp.unk_id >= 0) m.u32("tokenizer.ggml.unknown_token_id", sp.unk_id);
}

void tokenizer_metadata(Metadata& m, const GgufExportOptions& opt, const ModelConfig& c,
                        std::vector<std::string>& warnings) {
  std::unique_ptr<Tokenizer> tok = load_tokenizer(opt.tokenizer);
  if (fs::path(opt.tokenizer).extension() == ".model")
    sp_tokenizer_metadata(m, opt.tokenizer, c);
  else
    bpe_tokenizer_metadata(m, opt.tokenizer, c, warnings);
  const int64_t eos = c.eos_token_id >= 0 ? c.eos_token_id : tok->eos_id();
  int64_t bos = c.bos_token_id >= 0 ? c.bos_token_id : tok->bos_id();
  // Without a BOS llama.cpp would take its default id (11 for byte-level BPE): GPT-2's own
  // convention, BOS = EOS, instead (add_bos_token says whether it is ever added).
  if (bos < 0) bos = eos;
  if (bos >= 0) m.u32("tokenizer.ggml.bos_token_id", bos);
  if (eos >= 0) m.u32("tokenizer.ggml.eos_token_id", eos);
  m.boolean("tokenizer.ggml.add_bos_token", !tok->special_prefix().empty());
  m.boolean("tokenizer.ggml.add_eos_token", !tok->special_suffix().empty());
  if (!opt.chat_template.empty()) m.str("tokenizer.chat_template", opt.chat_template);
}

}  // namespace

GgufType parse_gguf_type(const std::string& s, const std::string& what) {
  if (s == "f32" || s == "float32") return GgufType::f32;
  if (s == "f16" || s == "float16") return GgufType::f16;
  if (s == "bf16" || s == "bfloat16") return GgufType::bf16;
  if (s == "q8_0" || s == "Q8_0") return GgufType::q8_0;
  throw UserError(what + ": unknown GGUF type '" + s + "' (expected f32, f16, bf16 or q8_0)");
}

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::f32:
      return "f32";
    case GgufType::f16:
      return "f16";
    case GgufType::bf16:
      return "bf16";
    default:
      return "q8_0";
  }
}

GgufExportResult save_gguf(const std::string& path, const ModelConfig& cfg,
                           const std::vector<HfTensor>& tensors, const GgufExportOptions& opt) {
  static const std::set<std::string> families = {"llama", "mistral", "qwen2",  "qwen3",
                                                 "gemma", "gemma2",  "gemma3", "gpt2"};
  if (!families.count(cfg.family)) refuse("no llama.cpp architecture for " + cfg.family);
  check_export_tensors(cfg, tensors);
  GgufExportResult r;
  r.path = path;
  check_expressible(cfg, r.warnings);
  if (opt.tokenizer.empty())
    refuse("the checkpoint has no tokenizer, and llama.cpp needs one in the file");
  if (fs::exists(path) && !fs::is_regular_file(path))
    refuse("'" + path + "' exists and is not a file");
  const OutputLock lock = lock_output_path(path, "--out");
  remove_dead_writers_leftovers(path);

  Metadata meta;
  model_metadata(meta, cfg, opt.name.empty() ? cfg.family : opt.name, opt.type);
  tokenizer_metadata(meta, opt, cfg, r.warnings);
  const std::vector<OutTensor> out = plan_tensors(cfg, tensors, opt.type);

  std::string head;
  put(head, static_cast<uint32_t>(0x46554747));  // "GGUF"
  put(head, static_cast<uint32_t>(3));
  put(head, static_cast<int64_t>(out.size()));
  put(head, meta.count());
  head += meta.bytes();
  uint64_t offset = 0;
  for (const OutTensor& t : out) {
    put_string(head, t.name);
    put(head, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put(head, *it);
    put(head, static_cast<int32_t>(t.type));
    put(head, offset);
    offset += pad(t.nbytes());
  }
  head.resize(pad(head.size()), '\0');

  const fs::path target = fs::path(path);
  if (!target.parent_path().empty()) fs::create_directories(target.parent_path());
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw UserError("export: cannot write '" + tmp + "'");
    f.write(head.data(), static_cast<std::streamsize>(head.size()));
    std::vector<float> values;
    for (const OutTensor& t : out) {
      t.fill(values);
      std::string bytes = encode(t, values);
      LMT_CHECK(bytes.size() == t.nbytes(), "gguf: " + t.name + " encoded to the wrong size");
      bytes.resize(pad(bytes.size()), '\0');
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    f.flush();
    // errno is the failed write's (a full disk's ENOSPC, a file-size limit's EFBIG).
    if (!f) throw UserError("export: cannot write '" + tmp + "': " + std::strerror(errno));
    f.close();
    fs::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  r.tensors = static_cast<int64_t>(out.size());
  r.bytes = fs::file_size(path);
  return r;
}

}  // namespace lmt
