#include "core/path_json.h"

#include <fmt/core.h>

#include "core/error.h"

namespace lmt {

bool is_valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

nlohmann::json path_to_json(const std::string& path) {
  if (is_valid_utf8(path)) return path;
  std::string hex;
  for (unsigned char c : path) hex += fmt::format("{:02x}", c);
  return {{"path_bytes", hex}};
}

std::string path_from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.size() == 1 && j.contains("path_bytes") && j["path_bytes"].is_string()) {
    const std::string hex = j["path_bytes"].get<std::string>();
    auto digit = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    };
    std::string out;
    bool ok = hex.size() % 2 == 0;
    for (size_t i = 0; ok && i < hex.size(); i += 2) {
      const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
      ok = hi >= 0 && lo >= 0;
      out += static_cast<char>(hi * 16 + lo);
    }
    if (ok) return out;
  }
  throw UserError(where + ": not a path (a string, or {\"path_bytes\": hex})");
}

}  // namespace lmt
