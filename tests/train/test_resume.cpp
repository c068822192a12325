// Exact resume: 2N steps in one run and N steps + stop + resume + N steps give bit-identical
// losses and final weights on the CPU, across an epoch boundary, with gradient accumulation and
// evaluation in between. Half-written checkpoints are passed over.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/model_config.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

std::string fmt_step(int64_t s) {
  char b[32];
  std::snprintf(b, sizeof b, "step_%07lld", static_cast<long long>(s));
  return b;
}

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmtrain_resume_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // About 40 short documents of pseudo-random words.
    const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "far"};
    Rng r(1);
    std::ofstream f(dir_ / "docs.txt");
    for (int d = 0; d < 40; ++d) {
      if (d) f << "%\n";
      for (int w = 0; w < 8; ++w) f << words[r.below(10)] << (w == 7 ? "\n" : " ");
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunConfig config(const std::string& out, int64_t max_steps) {
    RunConfig c;
    c.model.vocab_size = 257;
    c.model.hidden_size = 16;
    c.model.intermediate_size = 24;
    c.model.num_hidden_layers = 2;
    c.model.num_attention_heads = 2;
    c.model.max_position_embeddings = 32;
    SourceConfig s;
    s.path = (dir_ / "docs.txt").string();
    c.data.sources = {s};
    c.data.seq_len = 16;
    c.data.val_fraction = 0.1;
    c.train.micro_batch_size = 3;
    c.train.grad_accum_steps = 2;
    c.train.max_steps = max_steps;
    c.train.warmup_steps = 2;
    c.train.lr = 1e-2;
    c.train.min_lr = 1e-3;
    c.train.eval_every = 3;
    c.train.eval_steps = 2;
    c.train.save_every = 4;
    c.train.keep_last = 0;
    c.train.log_every = 1;
    c.train.out_dir = (dir_ / out).string();
    c.logging.console = false;
    c.validate();
    return c;
  }

  // The metrics.jsonl lines, as text (bit-exact doubles).
  std::vector<std::string> metric_lines(const std::string& out) {
    std::ifstream f(dir_ / out / "metrics.jsonl");
    std::vector<std::string> lines;
    std::string l;
    while (std::getline(f, l)) {
      lines.push_back(test::without_run_dependent_metrics(nlohmann::json::parse(l)).dump());
    }
    return lines;
  }

  std::string file_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

  fs::path dir_;
};

// Every optimizer (its state is in optimizer.safetensors under its own names).
TEST_F(Resume, InterruptedRunIsBitIdentical) {
  const int64_t N = 8;
  for (const std::string opt : {"adamw", "lion", "sgd", "muon"}) {
    SCOPED_TRACE(opt);
    auto cfg = [&](const std::string& out) {
      RunConfig c = config(opt + "_" + out, 2 * N);
      c.optimizer.name = opt;
      if (opt == "lion") c.train.lr = 1e-3, c.train.min_lr = 1e-4;
      if (opt == "muon") c.optimizer.momentum = 0.95, c.optimizer.nesterov = true;
      c.train.weight_decay = 0.1;
      return c;
    };
    TrainResult whole = train(cfg("a"), false);
    TrainResult first = train(cfg("b"), false, /*stop_after=*/N);
    EXPECT_EQ(first.steps, N);
    EXPECT_TRUE(first.interrupted);
    TrainResult second = train(cfg("b"), true);
    EXPECT_EQ(second.steps, 2 * N);
    EXPECT_EQ(whole.last_loss, second.last_loss);
    EXPECT_EQ(whole.last_val_loss, second.last_val_loss);
    auto la = metric_lines(opt + "_a"), lb = metric_lines(opt + "_b");
    ASSERT_EQ(la.size(), lb.size());
    for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i], lb[i]) << "line " << i;
    const std::string ck = fmt_step(2 * N);
    const fs::path a = dir_ / (opt + "_a") / "checkpoints" / ck,
                   b = dir_ / (opt + "_b") / "checkpoints" / ck;
    EXPECT_EQ(file_bytes(a / "model.safetensors"), file_bytes(b / "model.safetensors"));
    EXPECT_EQ(file_bytes(a / "optimizer.safetensors"), file_bytes(b / "optimizer.safetensors"));
    const std::string names = file_bytes(a / "optimizer.safetensors");
    auto has = [&](const std::string& n) { return names.find('"' + n + '"') != std::string::npos; };
    EXPECT_EQ(has("exp_avg.model.norm.weight"), opt != "sgd");
    EXPECT_EQ(has("exp_avg_sq.model.norm.weight"), opt == "adamw" || opt == "muon");
    EXPECT_EQ(has("momentum_buffer.model.norm.weight"), opt == "sgd");
    EXPECT_EQ(has("momentum_buffer.model.layers.0.mlp.down_proj.weight"),
              opt == "sgd" || opt == "muon");
    auto state = nlohmann::json::parse(file_bytes(a / "state.json"));
    EXPECT_EQ(state["optimizer"], opt);
    // The run crossed at least one epoch boundary of the training split.
    EXPECT_GE(state["loader"]["epoch"].get<int64_t>(), 1);
    if (opt == "lion") {  // another optimizer cannot resume it
      RunConfig other = cfg("b");
      other.optimizer.name = "sgd";
      other.train.max_steps = 3 * N;
      try {
        train(other, true);
        ADD_FAILURE() << "resumed a lion checkpoint with sgd";
      } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("holds the state of optimizer lion"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

// train.activation_bits: 1 trains the same run as 0 (gpt2 with ReLU and ReLU^2, with and without
// activation checkpointing): the same metrics and the same final weights, bit for bit.
TEST_F(Resume, ActivationBitsTrainTheSameRun) {
  for (const std::string act : {"relu", "relu2"}) {
    for (const bool checkpointing : {false, true}) {
      SCOPED_TRACE(act + (checkpointing ? " checkpointing" : ""));
      auto cfg = [&](int bits) {
        const std::string out =
            act + std::to_string(checkpointing) + "_bits" + std::to_string(bits);
        RunConfig c = config(out, 6);
        const ModelConfig m = c.model;
        c.model = family_defaults("gpt2");
        c.model.vocab_size = m.vocab_size;
        c.model.hidden_size = m.hidden_size;
        c.model.intermediate_size = m.intermediate_size;
        c.model.num_hidden_layers = m.num_hidden_layers;
        c.model.num_attention_heads = m.num_attention_heads;
        c.model.max_position_embeddings = m.max_position_embeddings;
        c.model.hidden_act = act;
        c.train.activation_checkpointing = checkpointing;
        c.train.activation_bits = bits;
        c.validate();
        return std::pair{c, out};
      };
      const auto [kept, kept_out] = cfg(0);
      const auto [bits, bits_out] = cfg(1);
      const TrainResult a = train(kept, false), b = train(bits, false);
      EXPECT_EQ(a.last_loss, b.last_loss);
      EXPECT_EQ(a.last_val_loss, b.last_val_loss);
      EXPECT_GE(metric_lines(kept_out).size(), 6u);
      EXPECT_EQ(metric_lines(kept_out), metric_lines(bits_out));
      const std::string ck = fmt_step(6);
      EXPECT_EQ(file_bytes(dir_ / kept_out / "checkpoints" / ck / "model.safetensors"),
                file_bytes(dir_ / bits_out / "checkpoints" / ck / "model.safetensors"));
    }
  }
}

// LoRA: the checkpoint is a PEFT adapter directory (adapters, adapter_config.json, their AdamW
// moments; no base weights), resume is bit-exact as for full training, and a checkpoint is only
// resumed by a run with the same base and the same kind of training.
TEST_F(Resume, LoraRunResumesBitIdenticallyFromAdapters) {
  const int64_t N = 6;
  auto lora = [&](const std::string& out) {
    RunConfig c = config(out, 2 * N);
    c.lora.rank = 2;
    c.lora.alpha = 4;
    c.lora.target_modules = {"q_proj", "v_proj", "down_proj"};
    c.lora.dropout = 0.1;               // masks drawn again on resume, as they were
    c.lora.modules_to_save = {"norm"};  // trained norms and their moments resume too
    c.train.lr = 3e-2;
    c.validate();
    return c;
  };
  TrainResult whole = train(lora("a"), false);
  train(lora("b"), false, /*stop_after=*/N);
  TrainResult second = train(lora("b"), true);
  EXPECT_EQ(whole.last_loss, second.last_loss);
  auto la = metric_lines("a"), lb = metric_lines("b");
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i], lb[i]) << "line " << i;
  std::vector<double> losses;
  for (const std::string& l : la)
    if (auto j = nlohmann::json::parse(l); j.contains("loss")) losses.push_back(j["loss"]);
  ASSERT_EQ(losses.size(), static_cast<size_t>(2 * N));
  EXPECT_LT(losses.back(), losses.front());  // the adapters learn
  const fs::path ck = dir_ / "a" / "checkpoints" / fmt_step(2 * N);
  for (const char* f : {"adapter_model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(file_bytes(ck / f), file_bytes(dir_ / "b" / "checkpoints" / fmt_step(2 * N) / f))
        << f;
  EXPECT_FALSE(fs::exists(ck / "model.safetensors"));
  const auto cfg = nlohmann::json::parse(file_bytes(ck / "adapter_config.json"));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["r"], 2);
  EXPECT_EQ(cfg["lora_alpha"], 4.0);
  EXPECT_EQ(cfg["lora_dropout"], 0.1);
  EXPECT_EQ(cfg["modules_to_save"], nlohmann::json({"norm"}));
  EXPECT_EQ(cfg["target_modules"],
            nlohmann::json({"self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"}));
  // The hash names the base the run started from: the initialisation from train.seed.
  CpuBackend be;
  Transformer base(&be, lora("a").model);
  base.init_weights(static_cast<uint64_t>(lora("a").train.seed));
  const auto state = nlohmann::json::parse(file_bytes(ck / "state.json"));
  EXPECT_EQ(state["lora"]["base_hash"], base_weights_hash(base));

  // Resumed by another kind of run, on another base, or with other targets: one message each.
  auto expect_error = [&](RunConfig c, const std::string& part) {
    try {
      train(c, true);
      ADD_FAILURE() << "no error; expected " << part;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  RunConfig full = lora("a");
  full.lora.rank = 0;
  expect_error(full, "holds LoRA adapters, and this run has no lora section (lora.rank is 0)");
  RunConfig other_base = lora("a");
  other_base.train.seed = 99;
  expect_error(other_base,
               "holds adapters for another base model (base initialised from "
               "train.seed with weights fnv1a64:");
  RunConfig other_targets = lora("a");
  other_targets.lora.target_modules = {"o_proj"};
  expect_error(other_targets,
               "adapter_model.safetensors: tensor "
               "'base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight' "
               "is missing");
  RunConfig other_saved = lora("a");
  other_saved.lora.modules_to_save = {"input_layernorm"};
  expect_error(other_saved,
               "adapter_model.safetensors: tensor "
               "'base_model.model.model.layers.0.post_attention_layernorm.weight' "
               "is not one this model's adapters have");
  RunConfig plain = config("c", 4);
  train(plain, false);
  RunConfig adapters = lora("c");
  expect_error(adapters, "holds a whole model, and this run trains LoRA adapters (lora.rank > 0)");
}

// Checkpoints appear whole (renamed into place), so a damaged one is never passed over quietly:
// the newest with a truncated state.json or a missing file is a UserError naming it, the cause and
// the older checkpoints; --resume NAME picks one of those; a truncated weights file names its
// checkpoint too; a temporary directory of a writer that died is cleared by the next save.
TEST_F(Resume, DamagedCheckpointsAreNamedAndAnOlderOneCanBeChosen) {
  train(config("c", 4), false);
  const fs::path root = dir_ / "c" / "checkpoints";
  ASSERT_TRUE(fs::exists(root / fmt_step(4)));
  // A checkpoint that lost its files but the weights, and a temporary directory.
  fs::create_directories(root / fmt_step(8));
  fs::copy_file(root / fmt_step(4) / "model.safetensors", root / fmt_step(8) / "model.safetensors");
  fs::create_directories(root / ".tmp-step_0000012-99");
  fs::copy(root / fmt_step(4), root / ".tmp-step_0000012-99", fs::copy_options::recursive);
  // The newest, whose state.json is truncated.
  fs::copy(root / fmt_step(4), root / fmt_step(10), fs::copy_options::recursive);
  std::ofstream(root / fmt_step(10) / "state.json", std::ios::trunc) << "{\"step\": 1";
  auto expect_error = [&](const std::string& from, std::initializer_list<std::string> parts) {
    try {
      train(config("c", 6), true, 0, from);
      ADD_FAILURE() << "expected a UserError";
    } catch (const UserError& e) {
      for (const std::string& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
            << e.what() << "\nmissing: " << p;
    }
  };
  // Its checksum names the damage, and the newest checkpoint that is intact (step_8 has no
  // checksums.json: it is not).
  expect_error(
      "", {"checkpoint '" + (root / fmt_step(10)).string() + "' is damaged",
           "state.json is 10 bytes, checksums.json recorded",
           "the newest intact checkpoint of this run is step_0000004", "--resume step_0000004"});
  // Without the checksum (a state.json damaged before it was recorded), the JSON is checked.
  test::reseal_checksums(root / fmt_step(10));
  expect_error("",
               {"checkpoint '" + (root / fmt_step(10)).string() + "' cannot be resumed",
                "state.json is not valid JSON", "pass --resume NAME (step_0000008, step_0000004)"});
  expect_error(fmt_step(8),
               {fmt_step(8) + "' cannot be resumed", "optimizer.safetensors is missing"});
  expect_error("step_0000099", {"--resume step_0000099: no checkpoint of that name",
                                "step_0000010, step_0000008, step_0000004"});
  // A truncated weights file: the checkpoint is named, not just the file.
  fs::copy(root / fmt_step(4), root / fmt_step(6), fs::copy_options::recursive);
  fs::resize_file(root / fmt_step(6) / "model.safetensors", 100);
  {
    std::ifstream in(root / fmt_step(6) / "state.json");
    nlohmann::json st = nlohmann::json::parse(in);
    st["step"] = 6;
    std::ofstream(root / fmt_step(6) / "state.json", std::ios::trunc) << st.dump();
  }
  expect_error(fmt_step(6), {"checkpoint '" + (root / fmt_step(6)).string() + "' is damaged",
                             "model.safetensors is 100 bytes",
                             "the newest intact checkpoint of this run is step_0000004"});
  test::reseal_checksums(root / fmt_step(6));  // the weights' own check names the checkpoint too
  expect_error(fmt_step(6),
               {"--resume: checkpoint '" + (root / fmt_step(6)).string() + "' cannot be resumed",
                "--resume step_N"});
  TrainResult r = train(config("c", 6), true, 0, fmt_step(4));
  EXPECT_EQ(r.steps, 6);
  // The next save clears the leftovers of a writer that died mid-checkpoint.
  EXPECT_FALSE(fs::exists(root / ".tmp-step_0000012-99"));
}

TEST_F(Resume, ResumeWithoutCheckpointIsAUserError) {
  try {
    train(config("d", 2), true);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
  }
}

// A hand-edited or damaged state.json or metrics.jsonl is one UserError naming the file and the
// field, not a failed check in the optimizer (optimizer_step < 0), a quiet fall back to an older
// checkpoint (step not the directory's) or a JSON type error (metrics.jsonl).
TEST_F(Resume, BadCountsInStateJsonAreUserErrors) {
  train(config("g", 4), false);
  const fs::path state = dir_ / "g" / "checkpoints" / fmt_step(4) / "state.json";
  const nlohmann::json good = nlohmann::json::parse(file_bytes(state));
  struct Case {
    const char* field;
    nlohmann::json value;
  };
  for (const Case& c :
       {Case{"step", -4}, Case{"step", "4"}, Case{"optimizer_step", -3},
        Case{"optimizer_step", "4"}, Case{"tokens", -1}, Case{"optimizer_step", 2.5}}) {
    SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
    nlohmann::json bad = good;
    bad[c.field] = c.value;
    std::ofstream(state, std::ios::trunc) << bad.dump();
    test::reseal_checksums(state.parent_path());  // the reading of state.json is what is tested
    try {
      train(config("g", 6), true);
      FAIL() << "no error";
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(state.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("field '") + c.field + "'"), std::string::npos) << msg;
    }
  }
}

TEST_F(Resume, NonIntegerStepInMetricsIsAUserError) {
  train(config("h", 4), false);
  const fs::path metrics = dir_ / "h" / "metrics.jsonl";
  std::ofstream(metrics, std::ios::app) << "{\"step\": \"5\", \"loss\": 1.0}\n";
  try {
    train(config("h", 6), true);
    FAIL() << "no error";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(metrics.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("field 'step'"), std::string::npos) << msg;
  }
}

TEST_F(Resume, KeepLastDeletesOldCheckpoints) {
  RunConfig c = config("e", 12);
  c.train.save_every = 2;
  c.train.keep_last = 2;
  train(c, false);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ / "e" / "checkpoints"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{fmt_step(10), fmt_step(12)}));

  // A run killed after renaming its last checkpoint into place but before pruning: the resume
  // that finds nothing to do prunes as the save would have.
  fs::copy(dir_ / "e" / "checkpoints" / fmt_step(10), dir_ / "e" / "checkpoints" / fmt_step(8),
           fs::copy_options::recursive);
  EXPECT_EQ(train(c, true).steps, 12);
  names.clear();
  for (const auto& e : fs::directory_iterator(dir_ / "e" / "checkpoints"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{fmt_step(10), fmt_step(12)}));
}

}  // namespace
}  // namespace lmt
