#include "eval/evaluate.h"

#include <fmt/core.h>
#include <openssl/evp.h>

#include <cmath>

#include "core/error.h"
#include "eval/py_value.h"

namespace lmt::eval {

namespace {

std::string sha256_hex(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

// str() of what doc_to_target gave (the target a record logs and hashes).
std::string target_text(const EvalDoc& d) { return py_str(from_json(d.logged_target)); }

// The task's version as the harness reports it: its metadata's, else "Yaml".
Json task_version(const EvalTask& t) {
  return t.config.contains("metadata") && t.config["metadata"].contains("version")
             ? t.config["metadata"]["version"]
             : Json("Yaml");
}

}  // namespace

TaskResult evaluate_task(HarnessLM& lm, const EvalTask& task, const Progress& progress) {
  TaskResult r;
  r.task = &task;
  r.answers.resize(task.docs.size());
  const int64_t truncated_before = lm.truncated();
  switch (task.type) {
    case OutputType::multiple_choice:
    case OutputType::loglikelihood: {
      std::vector<LoglikelihoodRequest> reqs;
      for (const EvalDoc& d : task.docs) {
        if (d.continuations.empty())
          throw UserError(task.file + ": document " + std::to_string(d.doc_id) +
                          " has no choices");
        for (const std::string& c : d.continuations) reqs.push_back({d.context, c});
      }
      const std::vector<LoglikelihoodResult> ll = lm.loglikelihood(reqs, progress);
      size_t k = 0;
      for (size_t i = 0; i < task.docs.size(); ++i)
        for (size_t c = 0; c < task.docs[i].continuations.size(); ++c)
          r.answers[i].loglikelihoods.push_back(ll[k++]);
      break;
    }
    case OutputType::loglikelihood_rolling: {
      std::vector<std::string> texts;
      for (const EvalDoc& d : task.docs) texts.push_back(d.target);
      const std::vector<double> ll = lm.loglikelihood_rolling(texts, progress);
      for (size_t i = 0; i < ll.size(); ++i) r.answers[i].rolling = ll[i];
      break;
    }
    case OutputType::generate_until: {
      std::vector<GenerationRequest> reqs;
      for (const EvalDoc& d : task.docs) reqs.push_back({d.context, task.until, task.max_gen_toks});
      const std::vector<std::string> out = lm.generate_until(reqs, progress);
      for (size_t i = 0; i < out.size(); ++i) r.answers[i].generated = out[i];
      break;
    }
  }
  r.truncated = lm.truncated() - truncated_before;
  std::map<std::string, std::vector<MetricItem>> items;
  for (size_t i = 0; i < task.docs.size(); ++i) {
    r.doc_metrics.push_back(doc_metrics(task, task.docs[i], r.answers[i]));
    for (const auto& [name, item] : r.doc_metrics.back()) items[name].push_back(item);
  }
  for (const auto& [name, v] : items) r.metrics[name] = aggregate(name, v);
  return r;
}

Json results_json(const std::vector<TaskResult>& results, const Json& config) {
  Json j;
  j["results"] = Json::object();
  j["group_subtasks"] = Json::object();
  j["configs"] = Json::object();
  j["versions"] = Json::object();
  j["n-shot"] = Json::object();
  j["higher_is_better"] = Json::object();
  j["n-samples"] = Json::object();
  for (const TaskResult& r : results) {
    const EvalTask& t = *r.task;
    Json res = {{"name", t.name}, {"alias", t.name},
                          {"sample_len", static_cast<int64_t>(t.docs.size())}};
    Json better = Json::object();
    const std::vector<MetricSpec> specs = t.metrics.empty() ? default_metrics(t.type) : t.metrics;
    for (const MetricSpec& m : specs) {
      const auto it = r.metrics.find(m.name);
      if (it == r.metrics.end()) continue;
      res[m.name + "," + t.filter] = it->second.value;
      res[m.name + "_stderr," + t.filter] =
          it->second.stderr_ ? Json(*it->second.stderr_) : Json("N/A");
      better[m.name] = m.higher_is_better;
    }
    j["results"][t.name] = res;
    j["group_subtasks"][t.name] = Json::array();
    j["configs"][t.name] = t.config;
    j["versions"][t.name] = task_version(t);
    j["n-shot"][t.name] = t.num_fewshot;
    j["higher_is_better"][t.name] = better;
    j["n-samples"][t.name] = {{"original", t.split_size},
                              {"effective", static_cast<int64_t>(t.docs.size())}};
  }
  j["config"] = config;
  return j;
}

std::vector<Json> sample_records(const TaskResult& result) {
  const EvalTask& t = *result.task;
  std::vector<Json> out;
  for (size_t i = 0; i < t.docs.size(); ++i) {
    const EvalDoc& d = t.docs[i];
    const DocAnswer& a = result.answers[i];
    Json args = Json::object(), resps = Json::array(),
                   filtered = Json::array();
    std::string prompt;
    switch (t.type) {
      case OutputType::multiple_choice:
      case OutputType::loglikelihood:
        for (size_t c = 0; c < d.continuations.size(); ++c) {
          args["gen_args_" + std::to_string(c)] = {{"arg_0", d.context},
                                                   {"arg_1", d.continuations[c]}};
          const LoglikelihoodResult& l = a.loglikelihoods[c];
          const Json one = {py_float_repr(l.logprob), l.greedy ? "True" : "False"};
          resps.push_back(Json::array({one}));
          filtered.push_back(one);
        }
        prompt = d.context;
        break;
      case OutputType::loglikelihood_rolling:
        args["gen_args_0"] = {{"arg_0", d.target}};
        resps.push_back(Json::array({py_float_repr(a.rolling)}));
        filtered.push_back(py_float_repr(a.rolling));
        prompt = d.target;
        break;
      case OutputType::generate_until:
        args["gen_args_0"] = {{"arg_0", d.context}, {"arg_1", t.generation_kwargs}};
        resps.push_back(Json::array({a.generated}));
        filtered.push_back(a.generated);
        prompt = d.context;
        break;
    }
    Json rec = {{"doc_id", d.doc_id},
                          {"doc", d.doc},
                          {"target", d.logged_target},
                          {"arguments", args},
                          {"resps", resps},
                          {"filtered_resps", filtered},
                          {"filter", t.filter}};
    Json names = Json::array();
    for (const auto& [name, item] : result.doc_metrics[i]) names.push_back(name);
    rec["metrics"] = names;
    rec["doc_hash"] =
        sha256_hex(d.doc.dump(2, ' ', false, Json::error_handler_t::replace));
    rec["prompt_hash"] = sha256_hex(prompt);
    rec["target_hash"] = sha256_hex(target_text(d));
    for (const auto& [name, item] : result.doc_metrics[i])
      rec[name] = item.weight == 0 ? Json(item.value)
                                   : Json::array({item.value, item.weight});
    out.push_back(std::move(rec));
  }
  return out;
}

std::string results_table(const std::vector<TaskResult>& results) {
  std::vector<std::vector<std::string>> rows = {
      {"Tasks", "Version", "Filter", "n-shot", "Metric", "", "Value", "", "Stderr"}};
  for (const TaskResult& r : results) {
    const EvalTask& t = *r.task;
    bool first = true;
    const std::vector<MetricSpec> specs = t.metrics.empty() ? default_metrics(t.type) : t.metrics;
    for (const MetricSpec& m : specs) {
      const auto it = r.metrics.find(m.name);
      if (it == r.metrics.end()) continue;
      const Json version = task_version(t);
      rows.push_back({first ? t.name : "", first ? (version.is_string() ? version.get<std::string>()
                                                                        : version.dump())
                                                 : "",
                      first ? t.filter : "", first ? std::to_string(t.num_fewshot) : "", m.name,
                      m.higher_is_better ? "↑" : "↓", fmt::format("{:.4f}", it->second.value),
                      "±",
                      it->second.stderr_ ? fmt::format("{:.4f}", *it->second.stderr_) : "N/A"});
      first = false;
    }
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], static_cast<size_t>(code_points(row[c])));
  std::string out;
  auto line = [&](const std::vector<std::string>& row) {
    out += "|";
    for (size_t c = 0; c < row.size(); ++c)
      out += row[c] + std::string(width[c] - static_cast<size_t>(code_points(row[c])), ' ') + "|";
    out += "\n";
  };
  line(rows[0]);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(std::max<size_t>(w, 1), '-'));
  line(rule);
  for (size_t k = 1; k < rows.size(); ++k) line(rows[k]);
  return out;
}

}  // namespace lmt::eval
