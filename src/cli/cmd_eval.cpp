// `lmtrain eval`: a model (a Hugging Face directory, a checkpoint or a run's newest, with an
// optional PEFT adapter) scored on lm-evaluation-harness tasks (src/eval/), with the harness's
// numbers and its results layout, so that the tools that read the harness's output read ours.
#include <fmt/core.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "data/tokenizer/tokenizer.h"
#include "eval/evaluate.h"
#include "eval/heldout.h"
#include "io/hf_model.h"
#include "io/text_file.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt::cli {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const std::string piece = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!piece.empty()) out.push_back(piece);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// --set section.key=value: what eval reads of a run config's keys.
struct EvalSettings {
  std::string backend = "cpu", pjrt_plugin;
};

EvalSettings read_sets(const std::vector<std::string>& sets) {
  EvalSettings s;
  for (const std::string& kv : sets) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos)
      throw UserError("--set " + kv + ": expected section.key=value");
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "train.backend") {
      if (value != "cpu" && value != "pjrt" && value != "auto")
        throw UserError("--set train.backend=" + value + ": eval runs on cpu, pjrt or auto");
      s.backend = value;
    } else if (key == "train.pjrt_plugin") {
      s.pjrt_plugin = value;
    } else {
      throw UserError("--set " + key +
                      ": eval takes train.backend and train.pjrt_plugin (the model's own "
                      "settings come from its directory)");
    }
  }
  return s;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H-%M-%S", std::gmtime(&t));
  return buf;
}

}  // namespace

Run add_eval(CLI::App& app) {
  struct Opts {
    std::string model, adapter, tasks, data, out;
    std::vector<std::string> sets;
    int64_t num_fewshot = -1, limit = -1, batch = 8, threads = 0;
    bool log_samples = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--model,--checkpoint", o->model,
                 "a Hugging Face model directory, a checkpoint (checkpoints/step_NNNNNNN) or a run "
                 "directory (its newest checkpoint)")
      ->required();
  app.add_option("--adapter", o->adapter, "a PEFT LoRA adapter directory to put on the model");
  app.add_option("--tasks", o->tasks,
                 "task files, comma-separated: lm-evaluation-harness task YAML naming local data, "
                 "or lmtrain's short form");
  app.add_option("--data", o->data,
                 "held-out text: a token store's validation split, or a config whose data: "
                 "sources give it (the documents prepare holds out by data.val_fraction; every "
                 "document where it is 0): loss, perplexity and bits per byte per source");
  app.add_option("--num-fewshot", o->num_fewshot,
                 "few-shot examples a document (default: each task's num_fewshot, else 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--limit", o->limit, "score only the first N documents of each task")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--batch", o->batch, "sequences scored together")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--out", o->out, "write the results JSON here (lm-evaluation-harness's layout)");
  app.add_flag("--log-samples", o->log_samples,
               "also write each task's per-document records beside --out "
               "(samples_TASK.jsonl, as the harness's --log_samples)");
  app.add_option("--set", o->sets, "section.key=value: train.backend (cpu, pjrt)");
  app.add_option("--threads", o->threads, "CPU threads; 0 = all cores")->capture_default_str();
  return [o]() {
    if (o->log_samples && o->out.empty())
      throw UserError("--log-samples writes beside --out: give --out RESULTS.json");
    const EvalSettings settings = read_sets(o->sets);
    // Every task file read before the model is loaded: a bad file costs nothing.
    std::vector<eval::EvalTask> tasks;
    for (const std::string& file : split_list(o->tasks))
      tasks.push_back(eval::load_task(
          file, o->num_fewshot >= 0 ? std::optional<int64_t>(o->num_fewshot) : std::nullopt,
          o->limit > 0 ? std::optional<int64_t>(o->limit) : std::nullopt));
    if (tasks.empty() && o->data.empty())
      throw UserError("eval: give --tasks FILE.yaml[,...] and/or --data CONFIG.yaml");
    // --data: a token store (a directory with manifest.json) or a config naming sources.
    const bool data_store = !o->data.empty() && fs::is_directory(o->data) &&
                            fs::exists(fs::path(o->data) / "manifest.json");
    std::optional<RunConfig> data_cfg;
    if (!o->data.empty() && !data_store) data_cfg = load_run_config(o->data, {});

    CheckpointHold hold;
    const fs::path dir = resolve_model_dir(o->model, "--model", hold);
    const ModelConfig mc = read_hf_model_config(dir.string());
    ModelWeights::check_fits(mc, DType::f32, physical_memory_bytes());
    std::unique_ptr<Tokenizer> tok = load_tokenizer(tokenizer_spec(dir));
    if (tok->vocab_size() > mc.vocab_size)
      throw UserError(fmt::format("{}: the tokenizer has {} ids, the model only {}",
                                  dir.string(), tok->vocab_size(), mc.vocab_size));
    set_threads(o->threads);
    BackendOptions bo;
    bo.pjrt_plugin = settings.pjrt_plugin;
    auto be = make_backend(settings.backend, bo);
    std::unique_ptr<Transformer> model = load_model_for_inference(dir.string(), o->adapter, be.get());
    eval::HarnessLM lm(*model, *tok, o->batch);

    std::vector<eval::TaskResult> results;
    for (const eval::EvalTask& t : tasks) {
      auto last = std::chrono::steady_clock::now();
      const auto progress = [&](int64_t done, int64_t total) {
        const auto now = std::chrono::steady_clock::now();
        if (done < total && now - last < std::chrono::seconds(5)) return;
        last = now;
        fmt::print(stderr, "eval: {}: {}/{} requests\n", t.name, done, total);
      };
      results.push_back(eval::evaluate_task(lm, t, progress));
      if (results.back().truncated > 0)
        fmt::print(stderr,
                   "eval: {}: {} requests longer than the model's {} positions were cut from the "
                   "left\n",
                   t.name, results.back().truncated, lm.max_length());
    }

    const nlohmann::json config = {
        {"model", "lmtrain"},
        {"model_args", {{"pretrained", dir.string()}, {"adapter", o->adapter}}},
        {"batch_size", o->batch},
        {"device", settings.backend},
        {"limit", o->limit > 0 ? nlohmann::json(o->limit) : nlohmann::json(nullptr)},
        {"bootstrap_iters", 100000},
        {"fewshot_seed", 1234},
        {"max_length", lm.max_length()}};
    nlohmann::json j = eval::results_json(results, config);
    if (data_cfg || data_store) {
      std::vector<TextSourceSpec> specs;
      if (data_cfg)
        for (const auto& src : data_cfg->data.sources) specs.push_back(to_text_source_spec(src));
      auto last = std::chrono::steady_clock::now();
      const auto progress = [&](int64_t done, int64_t source) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last < std::chrono::seconds(5)) return;
        last = now;
        fmt::print(stderr, "eval: held-out text: source {}: {} documents scored\n", source,
                   done);
      };
      const std::optional<int64_t> limit =
          o->limit > 0 ? std::optional<int64_t>(o->limit) : std::nullopt;
      const std::vector<eval::HeldoutScore> held =
          data_store ? eval::score_store_heldout(lm, *tok, tokenizer_spec(dir), o->data, limit,
                                                 progress)
                     : eval::score_heldout(lm, *tok, specs, data_cfg->data.val_fraction, limit,
                                           progress);
      nlohmann::json h = nlohmann::json::object();
      std::string table = "|Held-out source|Documents|Tokens|Loss|Perplexity|Bits per byte|\n"
                          "|---|---:|---:|---:|---:|---:|\n";
      for (const eval::HeldoutScore& s : held) {
        h[s.source] = {{"documents", s.documents}, {"tokens", s.tokens}, {"bytes", s.bytes},
                       {"loss", s.loss()}, {"perplexity", s.perplexity()},
                       {"bits_per_byte", s.bits_per_byte()}};
        table += fmt::format("|{}|{}|{}|{:.4f}|{:.4f}|{:.4f}|\n", s.source, s.documents,
                             s.tokens, s.loss(), s.perplexity(), s.bits_per_byte());
        if (s.documents == 0)
          fmt::print(stderr,
                     "eval: {}: no held-out documents (the store's validation split, or "
                     "data.val_fraction, holds none of its documents out)\n",
                     s.source);
      }
      j["heldout"] = h;
      fmt::print("{}", table);
    }
    j["lmtrain_version"] = LMTRAIN_VERSION;
    // Requests cut from the left to fit the model's positions, per task (the harness only warns).
    for (const eval::TaskResult& r : results)
      j["lmtrain"]["truncated_requests"][r.task->name] = r.truncated;
    j["date"] = utc_now();
    if (!results.empty()) fmt::print("{}", eval::results_table(results));
    if (!o->out.empty()) {
      if (!fs::path(o->out).parent_path().empty())
        fs::create_directories(fs::path(o->out).parent_path());
      write_text_file(o->out, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
      if (o->log_samples)
        for (const eval::TaskResult& r : results) {
          std::string lines;
          for (const nlohmann::json& rec : eval::sample_records(r))
            lines += rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
          const fs::path p = fs::path(o->out).parent_path() / ("samples_" + r.task->name + ".jsonl");
          write_text_file(p.string(), lines);
        }
    }
    return 0;
  };
}

}  // namespace lmt::cli
