#include "core/error.h"

namespace lmt {

std::string excerpt(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max > 3 ? max - 3 : 0;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "... (" + std::to_string(text.size()) + " bytes)";
}

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::string s = std::string("internal error: check failed: ") + expr + " at " + file + ":" +
                  std::to_string(line);
  if (!msg.empty()) s += ": " + msg;
  throw InternalError(s);
}

}  // namespace lmt
