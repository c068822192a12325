#include "core/config_checks.h"

namespace lmt {

void require_one_of(const std::string& key, const std::string& value, Choices choices) {
  for (const char* c : choices)
    if (value == c) return;
  std::string list;
  for (const char* c : choices) list += (list.empty() ? "" : ", ") + std::string(c);
  throw UserError(fmt::format("{} must be one of {} (got '{}')", key, list, excerpt(value)));
}

}  // namespace lmt
