// `lmtrain logits` on a fixture: the logits file and the printed loss are transformers' numbers;
// bad ids are a user error (exit code 2) naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "hf/hf_test_util.h"
#include "io/safetensors.h"

namespace lmt {
namespace {

TEST(LogitsCli, WritesTheReferenceLogitsAndLoss) {
  const std::string dir = test::hf_fixture("mistral_swa");
  std::ifstream in(dir + "/ref_b.json");
  const auto ref = nlohmann::json::parse(in);
  const std::string ids = (test::temp_dir() / "ids.json").string();
  std::ofstream(ids) << ref["input_ids"].dump();
  const std::string out = (test::temp_dir() / "logits.safetensors").string();
  Result r = run("logits --model " + dir + " --ids-file " + ids + " --out " + out + " --threads 1");
  ASSERT_EQ(r.code, 0) << r.out;
  const double loss = nlohmann::json::parse(r.out).at("loss").get<double>();
  EXPECT_NEAR(loss, ref["loss"].get<double>(), 1e-5 * ref["loss"].get<double>());
  const HostTensor got = SafetensorsFile::open(out).read("logits");
  const HostTensor want =
      SafetensorsFile::open(dir + "/ref_b_logits.safetensors").read_as("logits", DType::f32);
  ASSERT_EQ(got.dtype(), DType::f32);
  ASSERT_EQ(got.shape(), want.shape());
  float diff = 0, top = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    diff = std::max(diff, std::abs(got.ptr<float>()[i] - want.ptr<float>()[i]));
    top = std::max(top, std::abs(want.ptr<float>()[i]));
  }
  EXPECT_LT(diff / top, 1e-4);
}

TEST(LogitsCli, BadIdsAreUserErrors) {
  const std::string dir = test::hf_fixture("llama");
  const std::string out = (test::temp_dir() / "bad.safetensors").string();
  const std::string ids = (test::temp_dir() / "bad_ids.json").string();
  std::ofstream(ids) << "[1, 2, 256]";
  Result r = run("logits --model " + dir + " --ids-file " + ids + " --out " + out);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("bad_ids.json: element 2 (256)"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace lmt
