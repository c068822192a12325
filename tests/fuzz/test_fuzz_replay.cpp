// Replays the committed fuzz corpora (tests/data/fuzz/<target>/, grown by scripts/fuzz.sh) through
// the fuzz targets (fuzz/*.cpp) in the normal build, without clang or libFuzzer: every file must
// be accepted or refused with a UserError, as under the fuzzer. A crash found by fuzzing is added
// to its corpus, so this test keeps it fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <vector>

#include "fuzz_targets.h"

namespace lmt::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class Corpus : public ::testing::TestWithParam<Target> {};

}  // namespace

// A target in gtest's messages: its name (found by ADL beside Target).
void PrintTo(const Target& target, std::ostream* os) {
  *os << target.name;
}

namespace {

TEST_P(Corpus, EveryFileIsAcceptedOrRefusedWithUserError) {
  const Target& target = GetParam();
  const fs::path dir = fs::path(LMT_TEST_DATA) / "fuzz" / target.name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir << ": no corpus for fuzz target " << target.name;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir << " is empty";
  for (const fs::path& file : files) {
    const std::vector<uint8_t> bytes = read_bytes(file);
    try {
      target.run(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      ADD_FAILURE() << file << ": " << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fuzz, Corpus, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace lmt::fuzz
