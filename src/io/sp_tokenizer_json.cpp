// SentencePiece model -> tokenizer.json. The model's settings are read from its protocol-buffer
// bytes (Debian ships libsentencepiece without its .pb.h): ModelProto { pieces = 1 { piece = 1,
// score = 2, type = 3 }, trainer_spec = 2 { model_type = 3,
// treat_whitespace_as_suffix = 24, byte_fallback = 35, unk_piece = 45 }, normalizer_spec = 3 {
// precompiled_charsmap = 2, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
// escape_whitespaces = 5 } }; defaults as sentencepiece_model.proto gives them.
//
// sentencepiece normalizes the whole text and then segments it without splitting it into words:
// the character map (NFKC and friends; it also turns tabs and newlines into spaces), then with
// remove_extra_whitespaces the leading and trailing spaces dropped and runs of spaces made one,
// then with add_dummy_prefix a space in front, then spaces become U+2581. The tokenizer.json
// below is those steps as normalizers (Precompiled, Replace, Prepend) and no pre-tokenizer, so that
// Hugging Face tokenizers segments the same string with the same pieces.
#include "io/sp_tokenizer_json.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <map>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "io/protobuf_wire.h"

namespace lmt {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, sentencepiece's space

enum PieceType {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};
enum ModelType { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

using Piece = SpPiece;

struct SpModel {
  std::vector<Piece> pieces;
  int model_type = kUnigram;
  bool treat_whitespace_as_suffix = false;
  bool byte_fallback = false;
  std::string unk_piece = "<unk>";
  std::string charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

SpModel parse_model(std::string_view bytes, const std::string& path) {
  SpModel m;
  ProtoReader top(bytes, "the SentencePiece model '" + path + "'");
  for (ProtoReader::Field f; top.next(f);) {
    if (f.wire_type != 2) continue;
    if (f.number == 1) {
      Piece p;
      ProtoReader r(f.bytes, "a piece of the SentencePiece model '" + path + "'");
      for (ProtoReader::Field g; r.next(g);) {
        if (g.number == 1 && g.wire_type == 2) p.text = std::string(g.bytes);
        if (g.number == 2 && g.wire_type == 5) p.score = g.as_f32();
        if (g.number == 3 && g.wire_type == 0) p.type = static_cast<int>(g.number_value);
      }
      m.pieces.push_back(std::move(p));
    } else if (f.number == 2) {
      ProtoReader r(f.bytes, "the trainer_spec of the SentencePiece model '" + path + "'");
      for (ProtoReader::Field g; r.next(g);) {
        if (g.number == 3 && g.wire_type == 0) m.model_type = static_cast<int>(g.number_value);
        if (g.number == 24 && g.wire_type == 0) m.treat_whitespace_as_suffix = g.as_bool();
        if (g.number == 35 && g.wire_type == 0) m.byte_fallback = g.as_bool();
        if (g.number == 45 && g.wire_type == 2) m.unk_piece = std::string(g.bytes);
      }
    } else if (f.number == 3) {
      ProtoReader r(f.bytes, "the normalizer_spec of the SentencePiece model '" + path + "'");
      for (ProtoReader::Field g; r.next(g);) {
        if (g.number == 2 && g.wire_type == 2) m.charsmap = std::string(g.bytes);
        if (g.number == 3 && g.wire_type == 0) m.add_dummy_prefix = g.as_bool();
        if (g.number == 4 && g.wire_type == 0) m.remove_extra_whitespaces = g.as_bool();
        if (g.number == 5 && g.wire_type == 0) m.escape_whitespaces = g.as_bool();
      }
    }
  }
  return m;
}

std::string base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<uint8_t>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

nlohmann::json replace(const std::string& regex, const std::string& content) {
  return {{"type", "Replace"}, {"pattern", {{"Regex", regex}}}, {"content", content}};
}

nlohmann::json normalizer(const SpModel& m) {
  nlohmann::json steps = nlohmann::json::array();
  if (!m.charsmap.empty())
    steps.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", base64(m.charsmap)}});
  if (m.remove_extra_whitespaces) {
    // Oniguruma: \A, \z are the string's ends. sentencepiece strips the end after escaping
    // spaces, so a U+2581 in the text goes there too.
    steps.push_back(replace("\\A +|[ " + std::string(kSpace) + "]+\\z", ""));
    steps.push_back(replace(" {2,}", " "));
  }
  if (m.add_dummy_prefix) steps.push_back({{"type", "Prepend"}, {"prepend", " "}});
  steps.push_back(
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", std::string(kSpace)}});
  return {{"type", "Sequence"}, {"normalizers", steps}};
}

// sentencepiece's BPE merges, at every step, the adjacent pair whose concatenation is the
// highest-scoring normal piece. As tokenizers' ranked merges: every split of every normal piece
// into two pieces of the vocabulary, ranked by the piece's score (then by the split's left
// length, as transformers' converter ranks them).
nlohmann::json bpe_merges(const SpModel& m) {
  std::map<std::string, size_t, std::less<>> id;
  for (size_t i = 0; i < m.pieces.size(); ++i)
    if (m.pieces[i].type == kNormal) id.emplace(m.pieces[i].text, i);
  struct Merge {
    float score;
    size_t piece, left_len;
    std::string_view left, right;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const Piece& p = m.pieces[i];
    if (p.type != kNormal) continue;
    const std::string_view s = p.text;
    for (size_t cut = 1; cut < s.size(); ++cut) {
      if ((static_cast<uint8_t>(s[cut]) & 0xc0) == 0x80) continue;  // inside a UTF-8 character
      const std::string_view l = s.substr(0, cut), r = s.substr(cut);
      if (id.find(l) != id.end() && id.find(r) != id.end())
        merges.push_back({p.score, i, cut, l, r});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.piece != b.piece) return a.piece < b.piece;
    return a.left_len > b.left_len;
  });
  nlohmann::json out = nlohmann::json::array();
  for (const Merge& mg : merges) out.push_back({std::string(mg.left), std::string(mg.right)});
  return out;
}

nlohmann::json model(const SpModel& m, int unk_id) {
  if (m.model_type == kUnigram) {
    nlohmann::json vocab = nlohmann::json::array();
    for (const Piece& p : m.pieces) vocab.push_back({p.text, p.score});
    return {{"type", "Unigram"},
            {"unk_id", unk_id >= 0 ? nlohmann::json(unk_id) : nlohmann::json()},
            {"vocab", vocab},
            {"byte_fallback", m.byte_fallback}};
  }
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < m.pieces.size(); ++i) vocab[m.pieces[i].text] = i;
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", unk_id >= 0 ? nlohmann::json(m.unk_piece) : nlohmann::json()},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", true},
          {"byte_fallback", m.byte_fallback},
          {"ignore_merges", false},
          {"vocab", vocab},
          {"merges", bpe_merges(m)}};
}

nlohmann::json decoder(const SpModel& m) {
  nlohmann::json steps = {
      {{"type", "Replace"}, {"pattern", {{"String", std::string(kSpace)}}}, {"content", " "}}};
  if (m.byte_fallback) steps.push_back({{"type", "ByteFallback"}});
  steps.push_back({{"type", "Fuse"}});
  // sentencepiece's decoding drops every leading space where it removes extra whitespace, else
  // the one its dummy prefix put there.
  const int strip = m.remove_extra_whitespaces ? 1 << 30 : m.add_dummy_prefix ? 1 : 0;
  if (strip > 0)
    steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", strip}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", steps}};
}

// BOS before the text, as lmtrain's SentencePiece tokenizer adds it (Tokenizer::special_prefix).
nlohmann::json post_processor(const SpModel& m, int bos_id) {
  if (bos_id < 0) return nullptr;
  const std::string& bos = m.pieces[static_cast<size_t>(bos_id)].text;
  auto special = [&](int type_id) {
    return nlohmann::json{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}};
  };
  auto seq = [](const char* id, int type_id) {
    return nlohmann::json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  return {{"type", "TemplateProcessing"},
          {"single", {special(0), seq("A", 0)}},
          {"pair", {special(0), seq("A", 0), special(1), seq("B", 1)}},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
}

// The model loaded by sentencepiece (which validates it) and parsed from its bytes.
SpModel load_model(const std::string& model_path, sentencepiece::SentencePieceProcessor& sp) {
  bool loaded = false;
  try {
    loaded = sp.Load(model_path).ok();
  } catch (const std::exception&) {  // darts_clone throws on a piece table it cannot index
  }
  if (!loaded) throw UserError("'" + model_path + "' is not a SentencePiece model that loads");
  const std::string bytes = sp.serialized_model_proto();
  SpModel m = parse_model(bytes, model_path);
  if (m.pieces.size() != static_cast<size_t>(sp.GetPieceSize()))
    throw UserError("the SentencePiece model '" + model_path + "' holds " +
                    std::to_string(m.pieces.size()) + " pieces where sentencepiece counts " +
                    std::to_string(sp.GetPieceSize()));
  return m;
}

}  // namespace

SpModelPieces sentencepiece_pieces(const std::string& model_path) {
  sentencepiece::SentencePieceProcessor sp;
  SpModel m = load_model(model_path, sp);
  return {std::move(m.pieces), m.add_dummy_prefix, m.remove_extra_whitespaces, sp.unk_id()};
}

SpTokenizerJson sentencepiece_tokenizer_json(const std::string& model_path) {
  sentencepiece::SentencePieceProcessor sp;
  const SpModel m = load_model(model_path, sp);
  SpTokenizerJson out;
  if (m.model_type != kUnigram && m.model_type != kBpe)
    out.why_not = "its model_type is " + std::string(m.model_type == kWord ? "WORD" : "CHAR") +
                  " (tokenizer.json has Unigram and BPE)";
  else if (m.treat_whitespace_as_suffix)
    out.why_not = "it treats whitespace as a suffix";
  else if (!m.escape_whitespaces)
    out.why_not = "it does not escape whitespace";
  if (!out.why_not.empty()) return out;

  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const int type = m.pieces[i].type;
    if (type != kUnknown && type != kControl && type != kUserDefined) continue;
    added.push_back({{"id", i},
                     {"content", m.pieces[i].text},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type != kUserDefined}});
  }
  out.json = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", normalizer(m)},
              {"pre_tokenizer", nullptr},
              {"post_processor", post_processor(m, sp.bos_id())},
              {"decoder", decoder(m)},
              {"model", model(m, sp.unk_id())}};
  return out;
}

}  // namespace lmt
