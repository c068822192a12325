// `lmtrain init`: a freshly initialised model of a family as a Hugging Face directory, to train
// from or to test tools with. The shape starts from family_defaults(F); `--set model.key=value`
// goes through the YAML override machinery of `lmtrain train --set`, so the keys, values and
// messages are the training config's. With --tokenizer, the vocabulary size and BOS/EOS ids
// default to the tokenizer's.
#include <fmt/core.h>

#include <utility>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "data/tokenizer/tokenizer.h"
#include "io/config_yaml.h"
#include "io/hf_export.h"
#include "train/trainer.h"

namespace lmt::cli {

namespace {

// The one section `init --set` accepts.
struct InitConfig {
  ModelConfig model;
  template <class V>
  void visit(V& v) {
    v("model", model, "the model's shape");
  }
};

ModelConfig init_model_config(const std::string& family, const std::vector<std::string>& sets,
                              const Tokenizer* tok) {
  InitConfig ic{family_defaults(family)};
  YAML::Node root(YAML::NodeType::Map);
  const ConfigSource src{"init", apply_overrides(root, sets)};
  if (tok) {  // the tokenizer's sizes, unless --set says otherwise
    ic.model.vocab_size = tok->vocab_size();
    if (tok->bos_id() >= 0) ic.model.bos_token_id = tok->bos_id();
    if (tok->eos_id() >= 0) ic.model.eos_token_id = tok->eos_id();
  }
  read_config(root, ic, src);
  std::vector<std::string> given;  // the model keys --set gives
  if (const YAML::Node& model = std::as_const(root)["model"]; model && model.IsMap())
    for (const auto& kv : model) given.push_back(kv.first.as<std::string>());
  derive_unset_keys(ic.model, given);
  if (ic.model.family != family)
    throw UserError("init: --set model.family='" + ic.model.family + "' contradicts --family " +
                    family);
  ic.model.validate();
  if (tok && tok->vocab_size() > ic.model.vocab_size)
    throw UserError(
        fmt::format("init: model.vocab_size ({}) is smaller than the tokenizer's {} "
                    "tokens",
                    ic.model.vocab_size, tok->vocab_size()));
  return ic.model;
}

}  // namespace

Run add_init(CLI::App& app) {
  struct Opts {
    std::string family, out, dtype = "f32", tokenizer, max_shard = "5GB";
    std::vector<std::string> sets;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--family", o->family, "model family: " + choices_text(kFamilies))->required();
  app.add_option("--set", o->sets,
                 "override a model key: model.key=value (repeatable; see `lmtrain train "
                 "--help-config`)");
  app.add_option("--out", o->out, "the Hugging Face model directory to write")->required();
  app.add_option("--seed", o->seed, "initialisation seed")->capture_default_str();
  app.add_option("--dtype", o->dtype, "weights as f32, bf16 or f16")->capture_default_str();
  app.add_option("--tokenizer", o->tokenizer,
                 "a tokenizer.json or SentencePiece .model to include; sets vocab_size and the "
                 "BOS/EOS ids unless --set gives them");
  app.add_option("--max-shard-size", o->max_shard,
                 "split the weights into shards of at most this size (500MB, 5GB, bytes)")
      ->capture_default_str();
  return [o]() {
    HfExportOptions opt;
    opt.dtype = parse_export_dtype(o->dtype, "--dtype");
    opt.max_shard_bytes = parse_byte_size(o->max_shard, "--max-shard-size");
    opt.tokenizer = o->tokenizer;
    std::unique_ptr<Tokenizer> tok;
    if (!o->tokenizer.empty()) {
      if (o->tokenizer == "bytes")
        throw UserError(
            "--tokenizer: 'bytes' has no Hugging Face files; give a tokenizer.json "
            "or a .model");
      tok = load_tokenizer(o->tokenizer);
      opt.tokenizer = tokenizer_file(o->tokenizer);  // a directory names its tokenizer file
    }
    const ModelConfig cfg = init_model_config(o->family, o->sets, tok.get());
    ModelWeights::check_fits(cfg, DType::f32, physical_memory_bytes());
    auto be = make_backend("cpu");
    Transformer model(be.get(), cfg);
    model.init_weights(o->seed);
    const HfExportResult r = save_hf_model(o->out, model, opt);
    fmt::print(
        "initialised a {} model in {}: {} layers, hidden {}, {} parameters ({} of {} "
        "weights in {} file{})\n",
        cfg.family, r.dir, cfg.num_hidden_layers, cfg.hidden_size, format_count(model.num_params()),
        format_bytes(r.tensor_bytes), dtype_name(opt.dtype), r.shards, r.shards == 1 ? "" : "s");
    return 0;
  };
}

}  // namespace lmt::cli
