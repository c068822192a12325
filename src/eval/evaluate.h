// One task scored by a model, and the results as lm-evaluation-harness writes them: the
// results JSON (`results` -> task -> "metric,filter", "metric_stderr,filter"; `n-shot`,
// `n-samples`, `higher_is_better`, `configs`, `versions`), its per-document records
// (--log_samples: one JSON line a document) and its console table. Shared by `lmtrain eval` and
// a run's evaluations (eval.tasks).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "eval/harness_lm.h"
#include "eval/metrics.h"
#include "eval/task.h"

namespace lmt::eval {

struct TaskResult {
  const EvalTask* task = nullptr;
  std::vector<DocAnswer> answers;                              // per document
  std::vector<std::map<std::string, MetricItem>> doc_metrics;  // per document
  std::map<std::string, Aggregate> metrics;                    // over the documents
  int64_t truncated = 0;  // requests whose tokens were cut from the left to fit the model
};

// Every request of the task in one pass of each kind (batched by HarnessLM), then the metrics.
TaskResult evaluate_task(HarnessLM& lm, const EvalTask& task, const Progress& progress = {});

// The harness's results JSON for these tasks; `config` goes under "config" (what ran: model,
// batch size, limit, seeds).
Json results_json(const std::vector<TaskResult>& results, const Json& config);

// The harness's per-document records of one task (--log_samples), one JSON object a document.
std::vector<Json> sample_records(const TaskResult& result);

// The console table: | Tasks | Version | Filter | n-shot | Metric | | Value | | Stderr |.
std::string results_table(const std::vector<TaskResult>& results);

}  // namespace lmt::eval
