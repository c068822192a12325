// Shared by the eval tests: a scratch directory, files written into it, and a run of one of the
// tests/eval/*_reference.py scripts in the reference environment (LMT_PYTHON) on a JSON input.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "reference/reference_util.h"

namespace lmt::test {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    path_ = std::filesystem::temp_directory_path() /
            ("lmt_eval_" + name + "_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    const auto p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

// Runs tests/eval/<script> IN OUT with `input` as IN (JSON) and returns OUT's JSON, failing the
// test (and returning null) when the environment is missing or the script fails. HF datasets is
// kept offline and its cache inside `dir`.
template <class J>
inline nlohmann::json run_eval_reference(const std::string& script, const J& input,
                                         const std::filesystem::path& dir) {
  std::ofstream(dir / "ref_in.json") << input.dump();
  const std::string args =
      "'" + (dir / "ref_in.json").string() + "' '" + (dir / "ref_out.json").string() + "'";
  setenv("HF_DATASETS_OFFLINE", "1", 1);
  setenv("HF_HUB_OFFLINE", "1", 1);
  setenv("HF_DATASETS_CACHE", (dir / "hf_cache").c_str(), 1);
  run_reference_script("tests/eval/" + script, args);
  std::ifstream in(dir / "ref_out.json");
  if (!in) {
    ADD_FAILURE() << script << " wrote no output";
    return nullptr;
  }
  return nlohmann::json::parse(in);
}

}  // namespace lmt::test
