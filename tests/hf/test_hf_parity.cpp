// Parity with transformers: for each fixture family (made by transformers 5, see
// tests/data/hf/README.md) our forward gives the reference logits and loss, and our backward the
// reference gradient of every parameter, in f32 and in f64 (hf_parity.h holds the comparison and
// its bounds).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "hf_parity.h"  // check_hf_parity(), shared with tests/reference
#include "hf_test_util.h"

namespace lmt {
namespace {

struct Case {
  std::string family;
  std::string ref;  // "a" or "b"
  DType dt;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.family + "_" + info.param.ref + "_" + std::string(dtype_name(info.param.dt));
}

class HfParity : public testing::TestWithParam<Case> {};

TEST_P(HfParity, LogitsLossAndGradientsMatchTransformers) {
  const Case c = GetParam();
  test::check_hf_parity(test::hf_fixture(c.family), c.ref, c.dt);
}

// Every fixture directory under tests/data/hf (one with ref_a.json), so a fixture added by
// scripts/make_hf_fixtures.py is tested without a code change; the families known to be there
// must be found.
std::vector<Case> cases() {
  std::vector<std::string> families;
  for (const auto& e : std::filesystem::directory_iterator(std::string(LMT_TEST_DATA) + "/hf"))
    if (e.is_directory() && std::filesystem::exists(e.path() / "ref_a.json"))
      families.push_back(e.path().filename().string());
  std::sort(families.begin(), families.end());
  for (const char* f :
       {"llama", "llama_tied_llama3rope", "llama_yarn", "llama_dynamic", "mistral_swa", "qwen2",
        "qwen3", "gemma", "gemma2", "gemma3", "gemma3_yarn", "gpt2"})
    if (std::find(families.begin(), families.end(), f) == families.end())
      families.push_back(std::string(f));  // missing: its test fails opening ref_a.json
  std::vector<Case> out;
  for (const std::string& f : families)
    for (const char* r : {"a", "b"})
      for (DType dt : {DType::f32, DType::f64}) out.push_back(Case{f, r, dt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParity, testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace lmt
