#include "core/error.h"

namespace lmt {

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::string s = std::string("internal error: check failed: ") + expr + " at " + file + ":" +
                  std::to_string(line);
  if (!msg.empty()) s += ": " + msg;
  throw InternalError(s);
}

}  // namespace lmt
