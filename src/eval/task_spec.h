// A task file read and checked (task_config.cpp), before any data is loaded: what load_task
// (task.cpp) needs to build the documents. Not part of the interface.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/jinja.h"
#include "eval/task.h"

namespace lmt::eval {

// A doc_to_* setting: unset (None), an int, a list, a dict, or a string that is a field name or
// a template (precompiled; which one it is depends on the data's columns, as in the harness).
struct DocFn {
  PyValue value;      // None when unset
  std::string where;  // "file:line (key)"
  std::shared_ptr<JinjaTemplate> tmpl;
  bool set() const { return !value.is_none(); }
};

struct FewshotSpec {
  std::string sampler = "default";
  std::optional<std::string> split;
  std::optional<PyList> samples;
  DocFn doc_to_text, doc_to_choice, doc_to_target, gen_prefix;
  std::string fewshot_delimiter, target_delimiter;
};

struct TaskSpec {
  std::string file, name;
  std::map<std::string, std::vector<std::string>> data_files;  // split -> files, in order
  std::string data_where;
  std::optional<std::string> training_split, validation_split, test_split, fewshot_split;
  OutputType type = OutputType::generate_until;
  DocFn doc_to_text, doc_to_target, doc_to_choice, description, gen_prefix;
  std::string target_delimiter = " ", fewshot_delimiter = "\n\n";
  FewshotSpec fewshot;
  std::optional<int64_t> num_fewshot;
  std::vector<MetricSpec> metrics;
  Json generation_kwargs;
  std::vector<std::string> until;
  int64_t max_gen_toks = 256;
  std::string filter = "none";
  Json config;  // the harness's TaskConfig.to_dict(), num_fewshot filled in by load_task
};

TaskSpec read_task_spec(const std::filesystem::path& yaml);

// The records of one split, columns unified as `datasets` (Arrow) unifies them: a field missing
// from a record is None, an int in a column of floats is a float, in file order; `labels` name
// each record for messages ("data.jsonl line 12").
struct SplitData {
  std::vector<PyValue> rows;  // dicts
  std::vector<std::string> labels;
  std::vector<std::string> columns;
};
SplitData load_split(const std::vector<std::string>& files, const std::string& where);

}  // namespace lmt::eval
