#include "io/checkpoint_names.h"

#include <algorithm>
#include <functional>
#include <regex>
#include <string>

namespace lmt {

int64_t checkpoint_step(const std::filesystem::path& dir) {
  static const std::regex re("step_([0-9]{7,18})");
  std::smatch m;
  const std::string name = dir.filename().string();
  return std::regex_match(name, m, re) ? std::stoll(m[1].str()) : -1;
}

std::vector<std::pair<int64_t, std::filesystem::path>> checkpoint_dirs(
    const std::filesystem::path& root) {
  std::vector<std::pair<int64_t, std::filesystem::path>> dirs;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    std::error_code type_ec;
    const int64_t s = e.is_directory(type_ec) ? checkpoint_step(e.path()) : -1;
    if (s >= 0) dirs.emplace_back(s, e.path());
  }
  std::sort(dirs.begin(), dirs.end(), std::greater<>());
  return dirs;
}

}  // namespace lmt
