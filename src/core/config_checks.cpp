#include "core/config_checks.h"

namespace lmt {

bool one_of(const std::string& value, Choices choices) {
  for (const char* c : choices)
    if (value == c) return true;
  return false;
}

std::string choices_text(Choices choices) {
  std::string list;
  for (const char* c : choices) list += (list.empty() ? "" : ", ") + std::string(c);
  return list;
}

void require_one_of(const std::string& key, const std::string& value, Choices choices) {
  if (one_of(value, choices)) return;
  throw UserError(fmt::format("{} must be one of {} (got '{}')", key, choices_text(choices),
                              excerpt(value)));
}

}  // namespace lmt
