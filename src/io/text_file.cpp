#include "io/text_file.h"

#include <fstream>

#include "core/error.h"

namespace lmt {

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw UserError("cannot write '" + path + "'");
}

}  // namespace lmt
