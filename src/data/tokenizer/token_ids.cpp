// See token_ids.h.
#include "data/tokenizer/token_ids.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lmt {

void TokenIds::fail(const std::string& field, const std::string& what) const {
  throw UserError(where_ + ": " + field + ": " + what);
}

int32_t TokenIds::claim(const nlohmann::json& v, const std::string& field, const std::string& owner,
                        const std::string& content) {
  // Read in 64 bits (unsigned ones apart), never as int32: get<int32_t> wraps 2^32 + 5 to 5.
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() >= static_cast<uint64_t>(kLimit))
      fail(field, "id " + v.dump() + " is not below 2^31 - 1");
    return claim(v.get<int64_t>(), field, owner, content);
  }
  if (v.is_number_integer()) return claim(v.get<int64_t>(), field, owner, content);
  fail(field, "id " + v.dump() + " is not an integer");
}

int32_t TokenIds::claim(int64_t id, const std::string& field, const std::string& owner,
                        const std::string& content) {
  if (id < 0) fail(field, "id " + std::to_string(id) + " is negative");
  if (id >= kLimit) fail(field, "id " + std::to_string(id) + " is not below 2^31 - 1");
  const auto id32 = static_cast<int32_t>(id);
  const bool in_model = owner == "model.vocab";
  auto [it, fresh] = owners_.try_emplace(id32, Owner{owner, content, in_model});
  if (!fresh && it->second.content != content)
    fail(field, "id " + std::to_string(id) + " is also the id of \"" + it->second.content +
                    "\" in " + it->second.owner);
  if (!fresh && in_model) it->second.in_model = true;
  if (id + 1 > size_) {
    size_ = id + 1;
    largest_field_ = field;
  }
  return id32;
}

int64_t TokenIds::finish() const {
  const bool model_empty =
      std::none_of(owners_.begin(), owners_.end(), [](const auto& o) { return o.second.in_model; });
  if (model_empty) fail("model.vocab", "empty");
  const auto used = static_cast<int64_t>(owners_.size());
  const int64_t unused = size_ - used;
  if (unused > std::max(used, kGapSlack))
    fail(largest_field_, "id " + std::to_string(size_ - 1) + " leaves " + std::to_string(unused) +
                             " ids below it unused; at most max(the " + std::to_string(used) +
                             " used ids, 2^20) may be, since the tables are sized by the largest "
                             "id");
  return size_;
}

}  // namespace lmt
