#include "io/token_ids.h"

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"

namespace lmt {

std::vector<int32_t> parse_token_ids(const std::string& json_text, int64_t vocab,
                                     const std::string& what) {
  const nlohmann::json j = parse_json_bounded(json_text, what);
  if (j.is_discarded()) throw UserError(what + ": not valid JSON");
  if (!j.is_array() || j.empty())
    throw UserError(what + ": expected one non-empty JSON array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0 || j[i].get<int64_t>() >= vocab)
      throw UserError(
          fmt::format("{}: element {} ({}) is not a token id below the vocabulary size {}", what, i,
                      excerpt(j[i].dump()), vocab));
    ids.push_back(static_cast<int32_t>(j[i].get<int64_t>()));
  }
  return ids;
}

}  // namespace lmt
