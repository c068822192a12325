// The metrics of `lmtrain eval`, per document and aggregated, as lm-evaluation-harness computes
// them (ConfigurableTask.process_results, lm_eval/api/metrics.py):
//   multiple_choice  acc (argmax of the choices' loglikelihoods is the gold one), acc_norm (the
//                    argmax of loglikelihood / the choice's length in characters), acc_bytes (/
//                    its UTF-8 bytes), exact_match (the gold choice is the greedy continuation)
//   loglikelihood    perplexity (exp of minus the mean loglikelihood), acc (greedy)
//   generate_until   exact_match (hf evaluate's, with ignore_case, ignore_punctuation,
//                    ignore_numbers, regexes_to_ignore)
//   rolling          word_perplexity, byte_perplexity (exp(-sum ll / sum words or bytes)),
//                    bits_per_byte (-sum ll / sum bytes / ln 2); words as re.split(r"\s+")
// Means carry a standard error (sample standard deviation / sqrt(n)); perplexity's is the
// harness's bootstrap (100,000 resamples drawn as its random.Random draws them); the weighted
// ones have none ("N/A"), nor has any metric of one document.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eval/harness_lm.h"
#include "eval/task.h"

namespace lmt::eval {

// What the model answered for one document.
struct DocAnswer {
  std::vector<LoglikelihoodResult> loglikelihoods;  // multiple choice: one a choice; else one
  double rolling = 0;                               // loglikelihood_rolling
  std::string generated;                            // generate_until
};

// One document's value of a metric: a number (weight 0), or for the weighted ones a
// (loglikelihood, words or bytes) pair.
struct MetricItem {
  double value = 0, weight = 0;
};

// The metrics of one document, by name, for the task's metric list (the output type's defaults
// where the task names none). UserError for a metric the output type does not have.
std::map<std::string, MetricItem> doc_metrics(const EvalTask& task, const EvalDoc& doc,
                                              const DocAnswer& answer);

struct Aggregate {
  double value = 0;
  std::optional<double> stderr_;  // none: "N/A"
};

// A metric over the task's documents.
Aggregate aggregate(const std::string& metric, const std::vector<MetricItem>& items);

// The metrics an output type computes where a task names none, and whether higher is better.
std::vector<MetricSpec> default_metrics(OutputType type);
bool higher_is_better(const std::string& metric);

// The number of Unicode code points of UTF-8 text (Python's len of a str).
int64_t code_points(const std::string& utf8);

}  // namespace lmt::eval
