#include "core/json_depth.h"

#include <algorithm>

#include "core/error.h"

namespace lmt {

int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{')
      deepest = std::max(deepest, ++depth);
    else if (c == ']' || c == '}')
      depth = std::max(0, depth - 1);
  }
  return deepest;
}

void check_json_depth(std::string_view text, const std::string& what) {
  if (json_depth(text) > kMaxJsonNesting)
    throw UserError(what + ": JSON nested deeper than " + std::to_string(kMaxJsonNesting) +
                    " levels");
}

nlohmann::json parse_json_bounded(const std::string& text, const std::string& what) {
  check_json_depth(text, what);
  return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace lmt
