// lmtrain tokenize: ids of one string (--text, printed as a JSON array) or of every line of a
// JSONL file ({"text": ...} in, {"ids": [...]} out, in order, encoded on all cores).
#include <fmt/core.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "data/schema.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/tokenizer/tokenizer.h"
#include "train/run_config.h"

namespace lmt::cli {

Run add_tokenize(CLI::App& app) {
  struct Opts {
    std::string tokenizer, text, input, output, field = "text";
    bool add_special = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--tokenizer", o->tokenizer,
                 "bytes, a tokenizer.json, a SentencePiece .model, or a model directory")
      ->required();
  auto* text = app.add_option("--text", o->text, "a string to encode; prints one JSON array");
  auto* input = app.add_option("--input", o->input, "JSONL file of {\"text\": ...} lines");
  auto* output = app.add_option("--output", o->output, "JSONL file of {\"ids\": [...]} lines");
  app.add_option("--field", o->field, "the input field that holds the text")->capture_default_str();
  app.add_flag("--add-special", o->add_special,
               "add the special tokens the tokenizer defines (BOS / EOS)");
  text->excludes(input);
  input->needs(output);
  output->needs(input);
  return [o]() {
    auto tok = load_tokenizer(o->tokenizer);
    auto encode = [&](std::string_view t) {
      return o->add_special ? tok->encode_with_special(t) : tok->encode(t);
    };
    if (o->input.empty()) {
      fmt::print("{}\n", nlohmann::json(encode(o->text)).dump());
      return 0;
    }
    std::ifstream in(o->input);
    if (!in) throw UserError("--input: cannot open '" + o->input + "'");
    std::vector<std::string> texts;
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      auto j = parse_json_bounded(line, o->input + ":" + std::to_string(n));
      if (j.is_discarded() || !j.is_object())
        throw UserError(o->input + ":" + std::to_string(n) + ": not a JSON object");
      if (!j.contains(o->field) || !j[o->field].is_string())
        throw UserError(o->input + ":" + std::to_string(n) + ": no string field '" + o->field +
                        "'");
      texts.push_back(j[o->field].get<std::string>());
    }
    std::vector<std::string> lines(texts.size());
#pragma omp parallel for schedule(dynamic, 64)
    for (size_t i = 0; i < texts.size(); ++i)
      lines[i] = nlohmann::json{{"ids", encode(texts[i])}}.dump();
    std::ofstream out(o->output, std::ios::trunc);
    for (const auto& l : lines) out << l << '\n';
    out.close();
    if (!out) throw UserError("--output: cannot write '" + o->output + "'");
    return 0;
  };
}

}  // namespace lmt::cli

namespace lmt::cli {

Run add_tokenizer(CLI::App& app) {
  struct Opts {
    std::vector<std::string> inputs;
    std::string config;
    std::vector<std::string> sets;
    std::string out;
    BpeTrainOptions train;
  };
  auto o = std::make_shared<Opts>();
  app.require_subcommand(1);
  CLI::App* train = app.add_subcommand("train", "train a byte-level BPE tokenizer");
  auto* input = train->add_option("--input", o->inputs, "text files to learn from");
  auto* config = train->add_option("--config", o->config,
                                   "learn from every document of this config's data sources");
  input->excludes(config);
  train->add_option("--set", o->sets, "with --config: override a key (section.key=value)");
  train->add_option("--vocab-size", o->train.vocab_size, "tokens: 256 bytes + merges + specials")
      ->capture_default_str();
  train->add_option("--special", o->train.special_tokens, "special tokens (repeatable)")
      ->capture_default_str();
  train->add_option("--min-frequency", o->train.min_frequency, "never merge rarer pairs")
      ->capture_default_str();
  train->add_option("--out", o->out, "the tokenizer.json to write")->required();
  return [o]() {
    if (o->inputs.empty() && o->config.empty())
      throw UserError("tokenizer train: give --input FILES or --config FILE");
    int64_t merges = 0;
    if (!o->config.empty()) {
      const RunConfig cfg = load_run_config(o->config, o->sets);
      if (cfg.data.sources.empty())
        throw UserError(o->config + ": data.sources is empty: nothing to learn from");
      int64_t docs = 0;
      SkippedRecords skipped;  // bad records of sources with on_error: skip
      merges = train_bpe_tokenizer(
          [&](const TextSink& sink) {
            for (size_t i = 0; i < cfg.data.sources.size(); ++i) {
              const TextSourceStats st = for_each_source_document(
                  to_text_source_spec(cfg.data.sources[i]), static_cast<int>(i), [&](Document&& d) {
                    ++docs;
                    for (const Segment& s : d.segments) sink(s.text);
                  });
              for (const auto& [reason, n] : st.skipped.by_reason) {
                skipped.total += n;
                skipped.by_reason[reason] += n;
              }
            }
          },
          o->train, o->out);
      fmt::print("learned from {} documents of {} source(s){}\n", docs, cfg.data.sources.size(),
                 skipped.total ? "; " + skipped_summary(skipped.total, skipped.by_reason) : "");
    } else {
      merges = train_bpe_tokenizer(o->inputs, o->train, o->out);
    }
    fmt::print("{}: {} merges, vocabulary {}\n", o->out, merges,
               256 + merges + static_cast<int64_t>(o->train.special_tokens.size()));
    return 0;
  };
}

}  // namespace lmt::cli
