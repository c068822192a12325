// `lmtrain generate`: continues a prompt (text, or token ids) with a checkpoint or a Hugging Face
// directory. Besides text for people it can print the ids as JSON and run past end-of-sequence,
// which is what comparing with another implementation (transformers' greedy generate) needs.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "data/tokenizer/tokenizer.h"
#include "io/hf_model.h"
#include "io/token_ids.h"
#include "train/checkpoint.h"
#include "train/generation.h"
#include "train/trainer.h"

namespace lmt::cli {

Run add_generate(CLI::App& app) {
  struct Opts {
    std::string checkpoint, adapter, prompt, prompt_ids, backend = "cpu";
    int64_t max_new_tokens = 200, top_k = 0, threads = 0;
    double temperature = 0.8, top_p = 1.0;
    uint64_t seed = 0;
    bool ignore_eos = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--checkpoint,--model", o->checkpoint,
                 "a checkpoint directory (checkpoints/step_NNNNNNN), a run directory (its newest "
                 "checkpoint) or a Hugging Face model directory")
      ->required();
  auto* prompt = app.add_option("--prompt", o->prompt, "text to continue (BOS added before it)");
  auto* prompt_ids = app.add_option("--prompt-ids", o->prompt_ids,
                                    "the prompt as token ids, a JSON array such as '[1, 450, "
                                    "4996]', fed as they are (no BOS added)");
  prompt->excludes(prompt_ids);
  app.add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--temperature", o->temperature, "0 = greedy")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", o->top_k, "keep the k most likely tokens; 0 = all")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", o->top_p, "keep the smallest set with this probability mass")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  app.add_flag("--ignore-eos", o->ignore_eos,
               "do not stop at the end-of-sequence token: generate exactly --max-new-tokens "
               "(fewer only where the model runs out of positions)");
  app.add_flag("--json", o->json,
               "print one JSON object instead of the text: {\"prompt_ids\": [...], \"ids\": "
               "[the new ids], \"text\": the new ids decoded}");
  app.add_option("--adapter", o->adapter, "a PEFT LoRA adapter directory to put on the model");
  app.add_option("--backend", o->backend, "cpu, cuda or auto")->capture_default_str();
  app.add_option("--threads", o->threads, "CPU threads; 0 = all cores")->capture_default_str();
  return [o, prompt, prompt_ids]() {
    if (prompt->count() == 0 && prompt_ids->count() == 0)
      throw UserError("generate: give the prompt as --prompt TEXT or --prompt-ids '[ids...]'");
    CheckpointHold hold;
    const std::filesystem::path dir = resolve_model_dir(o->checkpoint, "--checkpoint", hold);
    const ModelConfig mc = read_hf_model_config(dir.string());  // a bad shape before all else
    ModelWeights::check_fits(mc, DType::f32, physical_memory_bytes());
    std::unique_ptr<Tokenizer> tok = load_tokenizer(tokenizer_spec(dir));
    set_threads(o->threads);
    if (tok->vocab_size() > mc.vocab_size)
      throw UserError(fmt::format("{}: the tokenizer has {} ids, the model only {}", dir.string(),
                                  tok->vocab_size(), mc.vocab_size));
    std::vector<int32_t> ids_in;
    if (prompt_ids->count() > 0) {
      ids_in = parse_token_ids(o->prompt_ids, mc.vocab_size, "--prompt-ids");
    } else {
      ids_in = tok->special_prefix();
      for (int32_t id : tok->encode(o->prompt)) ids_in.push_back(id);
    }
    auto be = make_backend(o->backend);
    if (!be->incremental_decoding())
      throw UserError("--backend " + o->backend +
                      ": generation decodes one token at a time, which this backend does not do "
                      "(one compiled program per length); use --backend cpu");
    // f32 checkpoints, bf16 / sharded HF directories, LoRA checkpoints and --adapter
    std::unique_ptr<Transformer> loaded = load_model_for_inference(dir.string(), o->adapter, be.get());
    Transformer& model = *loaded;

    GenerateOptions g;
    g.max_new_tokens = o->max_new_tokens;
    g.sampling = SamplingParams{o->temperature, o->top_k, o->top_p};
    g.seed = o->seed;
    g.stop_id = o->ignore_eos ? -1 : tok->eos_id();
    g.num_ids = tok->vocab_size();
    const std::vector<int32_t> ids = generate_ids(model, ids_in, g);
    if (o->json) {
      const nlohmann::json j = {{"prompt_ids", ids_in}, {"ids", ids}, {"text", tok->decode(ids)}};
      // A token may end inside a UTF-8 character: such bytes print as U+FFFD.
      fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else if (prompt_ids->count() > 0) {
      std::vector<int32_t> all = ids_in;
      all.insert(all.end(), ids.begin(), ids.end());
      fmt::print("{}\n", tok->decode(all));
    } else {
      fmt::print("{}{}\n", o->prompt, tok->decode(ids));
    }
    return 0;
  };
}

// The tokenizer of a checkpoint (its state.json says whether it was trained on bytes or on the
// tokenizer copied beside it) or of a Hugging Face directory (its tokenizer.json / .model).
std::string tokenizer_spec(const std::filesystem::path& dir) {
  std::ifstream f(dir / "state.json");
  if (!f) return dir.string();
  auto j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded()) throw UserError((dir / "state.json").string() + ": not valid JSON");
  return j.value("tokenizer", std::string("bytes")) == "bytes" ? "bytes" : dir.string();
}

}  // namespace lmt::cli
