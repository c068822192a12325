// SentencePiece tokenizer: a thin wrapper over sentencepiece::SentencePieceProcessor that turns
// its Status returns into UserError (naming the model file) and range-checks ids itself, since
// libsentencepiece 0.1.97 indexes its piece table unchecked in IdToPiece.
#include "data/tokenizer/sp_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <type_traits>

#include "core/error.h"
#include "core/regular_file.h"

namespace lmt {

// sentencepiece speaks std::vector<int>; on every platform we build for that is int32_t, so ids
// pass through without a copy.
static_assert(std::is_same_v<int, int32_t>);

struct SpTokenizer::Impl {
  std::string path;
  sentencepiece::SentencePieceProcessor sp;
};

SpTokenizer::SpTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpTokenizer::SpTokenizer(SpTokenizer&&) noexcept = default;
SpTokenizer& SpTokenizer::operator=(SpTokenizer&&) noexcept = default;
SpTokenizer::~SpTokenizer() = default;

SpTokenizer SpTokenizer::load(const std::string& model_path) {
  auto impl = std::make_unique<Impl>();
  impl->path = model_path;
  std::error_code ec;
  if (std::filesystem::exists(model_path, ec))  // else sentencepiece's own "not found" below
    check_regular_file(model_path, "tokenizer", kMaxTokenizerBytes);
  sentencepiece::util::Status status;
  try {
    status = impl->sp.Load(model_path);
  } catch (const std::exception& e) {
    // libsentencepiece's trie (darts_clone) throws on a piece table it cannot index (an empty
    // piece) instead of returning a status.
    throw UserError("SpTokenizer::load: '" + model_path +
                    "' is not a valid SentencePiece model: " + e.what());
  }
  if (status.code() == sentencepiece::util::StatusCode::kNotFound)
    throw UserError("SpTokenizer::load: cannot open SentencePiece model '" + model_path +
                    "': " + status.ToString());
  if (!status.ok())
    throw UserError("SpTokenizer::load: '" + model_path +
                    "' is not a valid SentencePiece model: " + status.ToString());
  if (impl->sp.GetPieceSize() <= 0)
    throw UserError("SpTokenizer::load: SentencePiece model '" + model_path +
                    "' has an empty vocabulary");
  return SpTokenizer(std::move(impl));
}

std::vector<int32_t> SpTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  // A model that loads can still fail to encode (a damaged piece table leaves normalised text no
  // piece covers): the model file is the user's to fix.
  if (!status.ok())
    throw UserError("SpTokenizer::encode: SentencePiece model '" + impl_->path +
                    "' cannot encode the text: " + status.ToString());
  return ids;
}

void SpTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  if (out.empty()) {
    out = encode(text);
    return;
  }
  const std::vector<int32_t> ids = encode(text);
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SpTokenizer::decode(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids) check_id(id, "decode");
  std::string text;
  const auto status = impl_->sp.Decode(ids, &text);
  if (!status.ok())
    throw UserError("SpTokenizer::decode: SentencePiece model '" + impl_->path +
                    "' cannot decode the ids: " + status.ToString());
  return text;
}

int32_t SpTokenizer::vocab_size() const {
  return impl_->sp.GetPieceSize();
}
int32_t SpTokenizer::bos_id() const {
  return impl_->sp.bos_id();
}
int32_t SpTokenizer::eos_id() const {
  return impl_->sp.eos_id();
}
int32_t SpTokenizer::pad_id() const {
  return impl_->sp.pad_id();
}
int32_t SpTokenizer::unk_id() const {
  return impl_->sp.unk_id();
}

std::string SpTokenizer::id_to_piece(int32_t id) const {
  check_id(id, "id_to_piece");
  return impl_->sp.IdToPiece(id);
}

int32_t SpTokenizer::piece_to_id(std::string_view piece) const {
  return impl_->sp.PieceToId(piece);
}

const std::string& SpTokenizer::model_path() const {
  return impl_->path;
}

void SpTokenizer::check_id(int32_t id, const char* op) const {
  if (id < 0 || id >= vocab_size())
    throw UserError(std::string("SpTokenizer::") + op + ": id " + std::to_string(id) +
                    " is out of range for '" + impl_->path + "' (vocab size " +
                    std::to_string(vocab_size()) + ")");
}

}  // namespace lmt
