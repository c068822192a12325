// Shared helpers of the Parquet tests: fixture listing, expected values from the JSON written
// beside each fixture, temporary files.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lmt::test {

inline std::string parquet_dir() {
  return std::string(LMT_TEST_DATA) + "/parquet";
}

// Every fixture (.parquet) but the one written with a codec we do not support.
inline std::vector<std::string> parquet_fixtures(bool include_unsupported = false) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(parquet_dir()))
    if (e.path().extension() == ".parquet" &&
        (include_unsupported || e.path().filename().string().find("gzip") == std::string::npos))
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

inline std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

// The expected values of `column` of fixture X.parquet, from X.json.
inline std::vector<std::optional<std::string>> expected_column(const std::string& parquet,
                                                               const std::string& column) {
  std::string json_path = parquet.substr(0, parquet.size() - 8) + ".json";
  nlohmann::json j = nlohmann::json::parse(read_file_bytes(json_path));
  std::vector<std::optional<std::string>> out;
  for (const auto& v : j.at("columns").at(column)) {
    if (v.is_null()) {
      out.emplace_back(std::nullopt);
    } else if (v.is_string()) {
      out.emplace_back(v.get<std::string>());
    } else if (v.contains("hex")) {
      out.emplace_back(unhex(v.at("hex").get<std::string>()));
    } else {
      std::string s, unit = v.at("repeat").get<std::string>();
      for (int k = 0, n = v.at("times").get<int>(); k < n; ++k) s += unit;
      out.emplace_back(std::move(s));
    }
  }
  return out;
}

// A directory removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    // Memory-backed where there is one: the mutation test writes thousands of files.
    std::error_code ec;
    std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec)
                                     ? std::filesystem::path("/dev/shm")
                                     : std::filesystem::temp_directory_path();
    std::string tmpl = (base / "lmt_parquet_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace lmt::test
