// `lmtrain info --pjrt`: the device memory of a training step as XLA plans it, compiled (not run)
// on the plugin, for a Hugging Face directory and info's own flags. It must be the step that
// `lmtrain train` would compile for the same model and settings: each shape below (two families,
// with and without checkpointing, f32 and bf16) is compiled again from a training config, and
// info's arguments and temporaries must be within 10% of that step's (the same program gives the
// same bytes; a setting info drops, such as checkpointing or bf16, moves them by far more). The
// same compiles check info's prediction without compiling (train/step_memory.h, on XLA:CPU):
// arguments and temporaries together within 10% of the compiled step's.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "pjrt_test_util.h"
#include "train/bench.h"
#include "train/run_config.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;
using test::PjrtTest;

std::string command_output(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p.get())) > 0;) out.append(buf, n);
  return out;
}

struct Shape {
  const char* family;
  bool checkpointing;
  const char* precision;
};

TEST_F(PjrtTest, InfoGivesTheCompiledMemoryOfTheTrainingStep) {
  const fs::path dir = fs::temp_directory_path() / ("lmt_info_pjrt_" + std::to_string(getpid()));
  for (const Shape& s :
       {Shape{"llama", false, "f32"}, Shape{"llama", true, "bf16"}, Shape{"gpt2", true, "f32"}}) {
    const std::string name =
        std::string(s.family) + (s.checkpointing ? " checkpointed " : " ") + s.precision;
    SCOPED_TRACE(name);
    const bool gpt2 = s.family == std::string("gpt2");
    nlohmann::json hf =
        gpt2 ? nlohmann::json{{"model_type", "gpt2"}, {"n_embd", 128},      {"n_layer", 2},
                              {"n_head", 4},          {"n_positions", 512}, {"vocab_size", 1024}}
             : nlohmann::json{{"model_type", "llama"},       {"hidden_size", 128},
                              {"intermediate_size", 384},    {"num_hidden_layers", 2},
                              {"num_attention_heads", 4},    {"num_key_value_heads", 2},
                              {"vocab_size", 1024},          {"max_position_embeddings", 512},
                              {"tie_word_embeddings", false}};
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << hf.dump();
    const std::string out =
        command_output(std::string(LMT_BINARY) + " info --json --pjrt --model " + dir.string() +
                       " --seq-len 256 --micro-batch 2 --precision " + s.precision +
                       (s.checkpointing ? " --activation-checkpointing" : "") + " 2>/dev/null");
    const nlohmann::json info = nlohmann::json::parse(out, nullptr, false);
    ASSERT_TRUE(info.is_object() && info.contains("pjrt_step")) << out;
    const double predicted = info["pjrt_predicted"]["total_bytes"].get<double>(),
                 compiled = info["pjrt_step"]["total_bytes"].get<double>();
    std::printf("%s: predicted %.0f, compiled %.0f (%+.1f%%)\n", name.c_str(), predicted, compiled,
                100 * (predicted - compiled) / compiled);
    EXPECT_NEAR(predicted, compiled, 0.1 * compiled) << "the analytic model of info";

    // The same model as `lmtrain train` reads it: the directory's config, the run's settings.
    std::ofstream(dir / "run.yaml") << "data:\n  sources: [{path: /usr/share/games/fortunes}]\n"
                                       "  tokenizer: bytes\n  seq_len: 256\n"
                                       "train:\n  init_from: "
                                    << dir.string() << "\n";
    const RunConfig cfg = load_run_config(
        (dir / "run.yaml").string(),
        {"train.backend=pjrt", "train.micro_batch_size=2",
         std::string("train.precision=") + s.precision,
         std::string("train.activation_checkpointing=") + (s.checkpointing ? "true" : "false")});
    const nlohmann::json m = run_bench(cfg, 0, /*compile_only=*/true)["pjrt"]["step_memory"];
    for (const char* key : {"argument_bytes", "temp_bytes"}) {
      const double got = info["pjrt_step"][key].get<double>(), want = m[key].get<double>();
      std::printf("%s: %s info %.0f, train's step %.0f\n", name.c_str(), key, got, want);
      EXPECT_NEAR(got, want, 0.1 * want) << key;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt
