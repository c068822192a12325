// The task layer of `lmtrain eval`: reads an lm-evaluation-harness task YAML that names local
// data and builds, per evaluated document, the strings the harness would send to the model (its
// requests' arguments), byte for byte: few-shot examples drawn by the harness's samplers from
// random.Random(fewshot_seed) (py_random.h) advanced document by document, templates rendered by
// its Jinja configuration (jinja.h), doc_to_* read as it reads them (a field name, a template, a
// literal; doc_to_choice rendered then ast.literal_eval'd; a target template of digits an index).
//
// Harness YAML keys read: task, task_alias, dataset_path (json only: JSON Lines or a JSON array
// file), dataset_kwargs.data_files (a file, a list, or split -> file(s); relative paths are
// relative to the current directory, as `datasets` resolves them), training_split,
// validation_split, test_split, fewshot_split, output_type, doc_to_text, doc_to_target,
// doc_to_choice, description, target_delimiter, fewshot_delimiter, gen_prefix, num_fewshot (a
// task's own 0 is not overridden, as in the harness), fewshot_config (sampler default or first_n,
// split, samples, doc_to_*, delimiters), generation_kwargs (until, max_gen_toks, do_sample false,
// temperature 0), metric_list, filter_list (take_first only), repeats (1), include (local files,
// merged as the harness merges them: included keys first, the file's own keys win). Ignored:
// tag, group, metadata, should_decontaminate, doc_to_decontamination_query. Anything else
// (`!function`, a hub dataset, process_docs, an unknown key) is a UserError naming file, line and
// key.
//
// Native form (no dataset_path; `type` or `data` present), mapped onto the same structure; data
// paths are relative to the YAML file:
//   task: my_qa                   # name (default: the file's stem)
//   type: multiple_choice         # output_type (default generate_until)
//   data: qa.jsonl                # the evaluated records (the test split)
//   fewshot_data: train.jsonl     # optional: few-shot examples (else drawn from `data`, the
//                                 # evaluated record excluded)
//   text: "Q: {{question}}\nA:"   # doc_to_text      target: answer   # doc_to_target
//   choices: "{{options}}"        # doc_to_choice    num_fewshot: 3
//   until: ["\n"]                 # generation stops  max_gen_toks: 64
//   description: "..."            # metrics: [acc, acc_norm]
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "eval/py_value.h"

namespace lmt::eval {

enum class OutputType { multiple_choice, loglikelihood, generate_until, loglikelihood_rolling };
const char* output_type_name(OutputType t);

struct MetricSpec {
  std::string name;         // acc, acc_norm, exact_match, perplexity, ...
  std::string aggregation;  // mean, perplexity, weighted_perplexity, bits_per_byte, ...
  bool higher_is_better = true;
  Json options = Json::object();  // exact_match: ignore_case, ignore_punctuation,
                                  // regexes_to_ignore, ignore_numbers
};

struct EvalDoc {
  int64_t doc_id = 0;   // index in the evaluated split
  Json doc;             // the record as the harness holds it (columns unified), for --log-samples
  std::string context;  // what the model is conditioned on (empty for rolling)
  // multiple_choice: one per choice (target_delimiter + choice); loglikelihood: the one target
  // (as doc_to_target gives it: the harness adds no delimiter); else empty.
  std::vector<std::string> continuations;
  std::vector<std::string> choices;  // multiple_choice (and generate_until with doc_to_choice)
  // multiple_choice: the right choice's index, or -100 (the harness's marker) when the target is
  // not among the choices; with several right answers, all of them in `golds` and gold = golds[0].
  int64_t gold = -1;
  std::vector<int64_t> golds;
  // generate_until: the reference answer (str() of doc_to_target, or the choice it indexes);
  // loglikelihood_rolling: the text scored; loglikelihood: the target.
  std::string target;
  std::vector<std::string> targets;  // generate_until with a list target: every accepted answer
  // doc_to_target(doc) as the harness logs it under "target" in --log-samples (an index, a
  // string or a list; its target_hash is the hash of py_str(from_json(logged_target))).
  Json logged_target;
};

struct EvalTask {
  std::string name, file;
  OutputType type = OutputType::generate_until;
  int64_t num_fewshot = 0;
  int64_t fewshot_seed = 1234;
  std::vector<std::string> until;  // generate_until
  int64_t max_gen_toks = 256;
  Json generation_kwargs;       // as the harness passes them in a request's arguments
  std::string filter = "none";  // the filter name results are keyed by ("acc,none")
  std::vector<MetricSpec> metrics;
  Json config;  // what the harness writes under "configs" for this task, as far as lmtrain knows it
  int64_t split_size = 0;  // documents in the evaluated split, before `limit`
  std::vector<EvalDoc> docs;
};

// Reads the task and builds its documents. `num_fewshot` overrides the file's (unless the file
// sets 0, as the harness does); `limit` keeps the first N documents.
EvalTask load_task(const std::filesystem::path& yaml, std::optional<int64_t> num_fewshot,
                   std::optional<int64_t> limit, int64_t fewshot_seed = 1234);

}  // namespace lmt::eval
