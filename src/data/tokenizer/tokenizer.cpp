#include "data/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/regular_file.h"
#include "data/byte_tokenizer.h"
#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/sp_tokenizer.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

// Whether a tokenizer.json's normalizer has a Precompiled step (a SentencePiece character map,
// as in the tokenizer.json an export writes beside its tokenizer.model), which lmtrain does not
// read. A file that does not parse answers false: its loading names the problem.
bool has_precompiled_normalizer(const fs::path& json) {
  // Only the top-level "normalizer" is kept: the vocabulary and merges (most of the file) are
  // parsed but not built.
  const nlohmann::json j = nlohmann::json::parse(
      read_regular_file(json.string(), "tokenizer", kMaxTokenizerBytes),
      [](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        return depth != 1 || event != nlohmann::json::parse_event_t::key || parsed == "normalizer";
      },
      false);
  if (j.is_discarded() || !j.is_object()) return false;
  const nlohmann::json& n = j.value("normalizer", nlohmann::json());
  if (!n.is_object()) return false;
  if (n.value("type", "") == "Precompiled") return true;
  const nlohmann::json& steps = n.value("normalizers", nlohmann::json());
  if (!steps.is_array()) return false;
  return std::any_of(steps.begin(), steps.end(), [](const nlohmann::json& s) {
    return s.is_object() && s.value("type", "") == "Precompiled";
  });
}

}  // namespace

std::string tokenizer_file(const std::string& spec) {
  if (spec == "bytes") return "";
  if (!fs::is_directory(spec)) return spec;
  fs::path json = fs::path(spec) / "tokenizer.json", model = fs::path(spec) / "tokenizer.model";
  if (!fs::exists(json)) return (fs::exists(model) ? model : json).string();
  return (fs::exists(model) && has_precompiled_normalizer(json) ? model : json).string();
}

std::vector<int32_t> Tokenizer::encode_with_special(std::string_view text) const {
  std::vector<int32_t> ids = special_prefix();
  std::vector<int32_t> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  std::vector<int32_t> suffix = special_suffix();
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  return ids;
}

std::string Tokenizer::decode_skipping_special(const std::vector<int32_t>& ids) const {
  std::vector<int32_t> kept;
  kept.reserve(ids.size());
  for (int32_t id : ids)
    if (!is_special(id)) kept.push_back(id);
  return decode(kept);
}

namespace {

class BytesTokenizer final : public Tokenizer {
 public:
  std::string kind() const override { return "bytes"; }
  std::vector<int32_t> encode(std::string_view t) const override { return bt_.encode(t); }
  std::string decode(const std::vector<int32_t>& ids) const override { return bt_.decode(ids); }
  int32_t vocab_size() const override { return bt_.vocab_size(); }
  std::vector<int32_t> special_suffix() const override { return {bt_.eot_id()}; }
  int32_t bos_id() const override { return bt_.bos_id(); }
  int32_t eos_id() const override { return bt_.eos_id(); }
  bool is_special(int32_t id) const override { return id == bt_.eot_id(); }

 private:
  ByteTokenizer bt_;
};

class HfBpeTokenizer final : public Tokenizer {
 public:
  explicit HfBpeTokenizer(const std::string& path) : bpe_(BpeTokenizer::load(path)) {
    const auto j = nlohmann::json::parse(bpe_.json_text(), nullptr, false);
    if (j.is_discarded()) return;  // load() above has already rejected a malformed file
    try {
      read_template(path, j);
    } catch (const nlohmann::json::exception& e) {  // a field of another type than HF writes
      throw UserError("tokenizer " + path +
                      ": post_processor: unexpected JSON content: " + e.what());
    }
    bos_ = !prefix_.empty()
               ? prefix_.front()
               : named_special(j, {"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"});
    eos_ = !suffix_.empty()
               ? suffix_.front()
               : named_special(j, {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"});
  }
  std::string kind() const override { return bpe_.is_unigram() ? "unigram" : "bpe"; }
  std::vector<int32_t> encode(std::string_view t) const override { return bpe_.encode(t); }
  std::string decode(const std::vector<int32_t>& ids) const override { return bpe_.decode(ids); }
  int32_t vocab_size() const override { return bpe_.vocab_size(); }
  std::vector<int32_t> special_prefix() const override { return prefix_; }
  std::vector<int32_t> special_suffix() const override { return suffix_; }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  bool is_special(int32_t id) const override { return bpe_.is_special(id); }

 private:
  // The id of the first of `names` that is an added token marked special; -1 when none is. The
  // fields are read as BpeTokenizer::load reads them (a "special" that is not true is false), and
  // load has checked the contents and ids.
  static int32_t named_special(const nlohmann::json& j, std::initializer_list<const char*> names) {
    const auto& added = j.value("added_tokens", nlohmann::json::array());
    for (const char* name : names)
      for (const auto& a : added)
        if (a.is_object() && a.value("special", nlohmann::json()) == true &&
            a.value("content", nlohmann::json()) == name)
          return a["id"].get<int32_t>();
    return -1;
  }

  // TemplateProcessing: "single" lists SpecialToken and Sequence items; the special tokens before
  // the sequence form the prefix, those after it the suffix.
  void read_template(const std::string& path, const nlohmann::json& j) {
    if (!j.contains("post_processor") || !j["post_processor"].is_object()) return;
    const auto& pp = j["post_processor"];
    if (pp.value("type", "") != "TemplateProcessing") return;
    bool after = false;
    for (const auto& item : pp.value("single", nlohmann::json::array())) {
      if (item.contains("Sequence")) {
        after = true;
        continue;
      }
      if (!item.contains("SpecialToken")) continue;
      const std::string id = item["SpecialToken"].value("id", "");
      const auto& specials = pp.value("special_tokens", nlohmann::json::object());
      if (!specials.contains(id))
        throw UserError(path + ": post_processor: special token '" + id + "' is not defined");
      for (const auto& v : specials[id].value("ids", nlohmann::json::array())) {
        // Read in 64 bits and checked against the vocab: get<int32_t> would wrap 2^32 + 5 to 5.
        const int64_t i = v.is_number_integer() ? v.get<int64_t>() : -1;
        if (!bpe_.has_id(i))
          throw UserError(path + ": post_processor.special_tokens[\"" + id +
                          "\"].ids: " + v.dump() + " is not an id of the vocab");
        (after ? suffix_ : prefix_).push_back(static_cast<int32_t>(i));
      }
    }
  }

  BpeTokenizer bpe_;
  std::vector<int32_t> prefix_, suffix_;
  int32_t bos_ = -1, eos_ = -1;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : sp_(SpTokenizer::load(path)) {}
  std::string kind() const override { return "sentencepiece"; }
  std::vector<int32_t> encode(std::string_view t) const override { return sp_.encode(t); }
  std::string decode(const std::vector<int32_t>& ids) const override { return sp_.decode(ids); }
  int32_t vocab_size() const override { return sp_.vocab_size(); }
  std::vector<int32_t> special_prefix() const override {
    if (sp_.bos_id() >= 0) return {sp_.bos_id()};
    return {};
  }
  int32_t bos_id() const override { return sp_.bos_id(); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  bool is_special(int32_t id) const override {
    return id == sp_.bos_id() || id == sp_.eos_id() || id == sp_.pad_id();
  }

 private:
  SpTokenizer sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_unique<BytesTokenizer>();
  const fs::path p = tokenizer_file(spec);
  if (fs::is_directory(spec) && !fs::exists(p))
    throw UserError("tokenizer: directory '" + spec +
                    "' holds neither tokenizer.json nor tokenizer.model");
  if (!fs::exists(p)) throw UserError("tokenizer: '" + spec + "' does not exist");
  if (p.extension() == ".json") return std::make_unique<HfBpeTokenizer>(p.string());
  if (p.extension() == ".model") return std::make_unique<SentencePieceTokenizer>(p.string());
  throw UserError("tokenizer: '" + spec +
                  "' is not 'bytes', a tokenizer.json or a SentencePiece .model file");
}

}  // namespace lmt
