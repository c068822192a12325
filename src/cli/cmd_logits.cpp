// `lmtrain logits`: one forward pass of a Hugging Face model directory (or a checkpoint, LoRA ones
// included, or a model plus a PEFT adapter) over a list of ids, for
// comparing with other implementations: writes the logits ([T, vocab], f32) as safetensors and
// prints the mean next-token cross-entropy (labels = the ids, shifted) as JSON on stdout.
#include <fmt/core.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "io/token_ids.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace lmt::cli {

namespace {

std::vector<int32_t> read_ids(const std::string& path, int64_t vocab) {
  std::ifstream in(path);
  if (!in) throw UserError("--ids-file: '" + path + "' not found");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_token_ids(text, vocab, path);
}

}  // namespace

Run add_logits(CLI::App& app) {
  struct Opts {
    std::string model, adapter, ids_file, out, backend = "cpu";
    int64_t threads = 0;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--model", o->model, "Hugging Face model directory (config.json, safetensors)")
      ->required();
  app.add_option("--adapter", o->adapter, "a PEFT LoRA adapter directory to put on the model");
  app.add_option("--ids-file", o->ids_file, "JSON file with one array of token ids")->required();
  app.add_option("--out", o->out, "safetensors file to write the logits to")->required();
  app.add_option("--backend", o->backend, "cpu, pjrt (the default PJRT plugin), cuda or auto")
      ->capture_default_str();
  app.add_option("--threads", o->threads, "CPU threads; 0 = all cores")->capture_default_str();
  return [o]() {
    set_threads(o->threads);
    auto be = make_backend(o->backend);
    std::unique_ptr<Transformer> model = load_model_for_inference(o->model, o->adapter, be.get());
    const int64_t V = model->config().vocab_size;
    const std::vector<int32_t> ids = read_ids(o->ids_file, V);
    const auto T = static_cast<int64_t>(ids.size());
    std::vector<int32_t> labels(ids.size(), Transformer::kIgnoreIndex);
    for (int64_t t = 0; t + 1 < T; ++t) labels[t] = ids[t + 1];
    const std::vector<double> logits = model->forward_logits(ids.data(), 1, T);
    const LossSum loss = batch_loss(*model, ids.data(), labels.data(), 1, T);
    std::vector<float> f(logits.begin(), logits.end());
    SafetensorsWriter w;
    w.add("logits", DType::f32, Shape{T, V}, f.data());
    w.write(o->out);
    const double mean = loss.tokens > 0 ? loss.sum / static_cast<double>(loss.tokens) : 0.0;
    fmt::print("{}\n", nlohmann::json{{"loss", mean}}.dump());
    return 0;
  };
}

}  // namespace lmt::cli
