// PLACEHOLDER (branch eval): the task layer's interface as agreed with branch eval-tasks, which
// replaces this file with the real one (and load_task) at the merge.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lmt::eval {

enum class OutputType { multiple_choice, loglikelihood, generate_until, loglikelihood_rolling };

struct MetricSpec {
  std::string name;
  bool higher_is_better = true;
  nlohmann::json options = nlohmann::json::object();
};

struct EvalDoc {
  int64_t doc_id = 0;
  nlohmann::json doc;
  std::string context;
  std::vector<std::string> continuations;
  std::vector<std::string> choices;
  int64_t gold = -1;
  std::string target;
};

struct EvalTask {
  std::string name, file;
  OutputType type = OutputType::multiple_choice;
  int64_t num_fewshot = 0;
  std::vector<std::string> until;
  int64_t max_gen_toks = 256;
  std::vector<MetricSpec> metrics;
  nlohmann::json config;
  std::vector<EvalDoc> docs;
};

EvalTask load_task(const std::filesystem::path& yaml, std::optional<int64_t> num_fewshot,
                   std::optional<int64_t> limit);

}  // namespace lmt::eval
