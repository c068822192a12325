// Reading a task file (task.h) into a TaskSpec: include: merged as lm_eval's load_yaml merges it,
// scalars typed as PyYAML types them (YAML 1.1: yes/no are booleans, 1e5 is a string), every key
// checked against what lmtrain reproduces, the TaskConfig defaults filled in as its
// __post_init__ fills them.
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/regular_file.h"
#include "eval/task_spec.h"
#include "io/yaml_load.h"

namespace lmt::eval {

namespace {

struct Entry {
  YAML::Node node;
  std::string file;
};
using Merged = std::vector<std::pair<std::string, Entry>>;

std::string where_of(const Entry& e, const std::string& key) {
  const YAML::Mark m = e.node.Mark();
  return e.file + (m.is_null() ? "" : ":" + std::to_string(m.line + 1)) + " (" + key + ")";
}

[[noreturn]] void bad(const Entry& e, const std::string& key, const std::string& msg) {
  throw UserError(where_of(e, key) + ": " + msg);
}

void check_tags(const YAML::Node& n, const std::string& file, const std::string& key) {
  const std::string& tag = n.Tag();
  if (tag == "!function")
    throw UserError(file + ":" + std::to_string(n.Mark().line + 1) + " (" + key +
                    "): a !function (Python code) cannot run in lmtrain; write it as a Jinja "
                    "template or prepare the data beforehand");
  if (!tag.empty() && tag != "?" && tag != "!" && tag.rfind("tag:yaml.org,2002:", 0) != 0)
    throw UserError(file + ":" + std::to_string(n.Mark().line + 1) + " (" + key + "): the tag " +
                    tag + " is not supported");
  if (n.IsSequence() || n.IsMap())
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (n.IsMap()) {
        check_tags(it->second, file, key);
      } else {
        check_tags(*it, file, key);
      }
    }
}

// A plain scalar typed by PyYAML's YAML 1.1 resolver.
PyValue plain_scalar(const std::string& s) {
  static const std::regex kBool(
      "yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF");
  static const std::regex kNull("~|null|Null|NULL|");
  static const std::regex kInt("[-+]?(0|[1-9][0-9_]*)");
  static const std::regex kOct("[-+]?0[0-7_]+");
  static const std::regex kHex("[-+]?0x[0-9a-fA-F_]+");
  static const std::regex kFloat(
      "[-+]?([0-9][0-9_]*)\\.[0-9_]*([eE][-+][0-9]+)?|\\.[0-9_]+([eE][-+][0-9]+)?");
  static const std::regex kInf("[-+]?\\.(inf|Inf|INF)");
  static const std::regex kNan("\\.(nan|NaN|NAN)");
  if (std::regex_match(s, kNull)) return PyValue();
  if (std::regex_match(s, kBool)) {
    const char c = s[0] | 0x20;
    return PyValue(c == 'y' || c == 't' || (c == 'o' && (s[1] | 0x20) == 'n'));
  }
  std::string clean;
  for (char c : s)
    if (c != '_') clean += c;
  try {
    if (std::regex_match(s, kInt)) return PyValue(int64_t(std::stoll(clean)));
    if (std::regex_match(s, kHex)) return PyValue(int64_t(std::stoll(clean, nullptr, 16)));
    if (std::regex_match(s, kOct)) return PyValue(int64_t(std::stoll(clean, nullptr, 8)));
  } catch (const std::out_of_range&) {
    return PyValue(s);
  }
  if (std::regex_match(s, kFloat)) return PyValue(std::stod(clean));
  if (std::regex_match(s, kInf)) return PyValue(s[0] == '-' ? -HUGE_VAL : HUGE_VAL);
  if (std::regex_match(s, kNan)) return PyValue(std::nan(""));
  return PyValue(s);
}

PyValue to_py(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return PyValue();
  if (n.IsScalar()) {
    if (n.Tag() == "?") return plain_scalar(n.Scalar());
    return PyValue(n.Scalar());  // quoted, or !!str
  }
  if (n.IsSequence()) {
    PyList l;
    for (const auto& e : n) l.push_back(to_py(e));
    return PyValue(std::move(l));
  }
  PyDict d;
  for (auto it = n.begin(); it != n.end(); ++it)
    d.emplace_back(it->first.as<std::string>(), to_py(it->second));
  return PyValue(std::move(d));
}

Merged load_merged(const std::filesystem::path& path, std::set<std::string>& seen) {
  const std::filesystem::path abs =
      std::filesystem::weakly_canonical(std::filesystem::absolute(path));
  if (!seen.insert(abs.string()).second) throw UserError(path.string() + ": include cycle");
  if (!std::filesystem::is_regular_file(abs))
    throw UserError(path.string() + ": no such task file");
  YAML::Node root;
  try {
    root =
        load_yaml(read_regular_file(abs.string(), "task file", kMaxYamlConfigBytes), path.string());
  } catch (const YAML::Exception& e) {
    throw UserError(path.string() + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) throw UserError(path.string() + ": a task file must be a YAML mapping");
  Merged own;
  std::optional<Entry> include;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    check_tags(it->second, path.string(), key);
    Entry e{it->second, path.string()};
    if (key == "include") {
      include = e;
    } else {
      own.emplace_back(key, e);
    }
  }
  Merged merged;
  auto put = [&](const std::string& k, const Entry& e) {
    for (auto& [mk, me] : merged)
      if (mk == k) {
        me = e;
        return;
      }
    merged.emplace_back(k, e);
  };
  if (include) {
    std::vector<std::string> incs;
    if (include->node.IsSequence()) {
      for (const auto& n : include->node) incs.push_back(n.as<std::string>());
    } else if (include->node.IsScalar()) {
      incs.push_back(include->node.as<std::string>());
    } else {
      bad(*include, "include", "must be a file name or a list of them");
    }
    for (const auto& inc : incs) {
      std::filesystem::path p = inc;
      if (!p.is_absolute()) p = abs.parent_path() / p;
      if (!std::filesystem::is_regular_file(p))
        bad(*include, "include", "no such file: " + p.string());
      for (const auto& [k, e] : load_merged(p, seen))
        if (k != "task_list") put(k, e);
    }
  }
  for (const auto& [k, e] : own) put(k, e);
  seen.erase(abs.string());
  return merged;
}

// Keys lmtrain reproduces, ignores, or refuses with a reason.
const std::set<std::string> kKnown = {"task",
                                      "task_alias",
                                      "tag",
                                      "group",
                                      "dataset_path",
                                      "dataset_name",
                                      "dataset_kwargs",
                                      "training_split",
                                      "validation_split",
                                      "test_split",
                                      "fewshot_split",
                                      "doc_to_text",
                                      "doc_to_target",
                                      "doc_to_choice",
                                      "description",
                                      "target_delimiter",
                                      "fewshot_delimiter",
                                      "fewshot_config",
                                      "num_fewshot",
                                      "metric_list",
                                      "output_type",
                                      "generation_kwargs",
                                      "repeats",
                                      "filter_list",
                                      "should_decontaminate",
                                      "doc_to_decontamination_query",
                                      "gen_prefix",
                                      "metadata",
                                      "unsafe_code"};
const std::map<std::string, std::string> kRefused = {
    {"process_docs", "process_docs runs Python; prepare the data beforehand"},
    {"process_results", "process_results runs Python"},
    {"custom_dataset", "custom_dataset runs Python"},
    {"use_prompt", "promptsource prompts are not supported"},
    {"doc_to_image", "multimodal tasks are not supported"},
    {"doc_to_audio", "multimodal tasks are not supported"},
    {"task_list", "task lists and groups are not supported; evaluate the tasks one by one"}};

struct MetricDefault {
  const char* aggregation;
  bool higher;
};
const std::map<std::string, MetricDefault> kMetrics = {
    {"acc", {"mean", true}},
    {"acc_norm", {"mean", true}},
    {"acc_bytes", {"mean", true}},
    {"acc_mutual_info", {"mean", true}},
    {"exact_match", {"mean", true}},
    {"perplexity", {"perplexity", false}},
    {"word_perplexity", {"weighted_perplexity", false}},
    {"byte_perplexity", {"weighted_perplexity", false}},
    {"bits_per_byte", {"bits_per_byte", false}},
    {"likelihood", {"mean", true}},
    {"brier_score", {"brier_score", false}},
    {"f1", {"f1", true}},
    {"mcc", {"matthews_corrcoef", true}}};
const std::set<std::string> kAggregations = {
    "mean",          "median", "perplexity",        "weighted_perplexity",
    "bits_per_byte", "f1",     "matthews_corrcoef", "brier_score",
    "nanmean"};

class SpecBuilder {
 public:
  SpecBuilder(const std::filesystem::path& yaml, Merged m) : yaml_(yaml), m_(std::move(m)) {}

  TaskSpec build() {
    spec_.file = yaml_.string();
    const bool native = !has("dataset_path") && (has("type") || has("data"));
    if (native) translate_native();
    for (const auto& [k, e] : m_) {
      if (kRefused.count(k)) bad(e, k, kRefused.at(k));
      if (!kKnown.count(k))
        bad(e, k,
            "unknown key '" + k +
                "' (lmtrain reads lm-evaluation-harness task keys; see eval/task.h)");
    }
    spec_.name = has("task") ? str_of("task") : yaml_.stem().string();
    read_data();
    spec_.training_split = opt_str("training_split");
    spec_.validation_split = opt_str("validation_split");
    spec_.test_split = opt_str("test_split");
    spec_.fewshot_split = opt_str("fewshot_split");
    read_output_type();
    spec_.doc_to_text = doc_fn("doc_to_text");
    spec_.doc_to_target = doc_fn("doc_to_target");
    spec_.doc_to_choice = doc_fn("doc_to_choice");
    spec_.description = doc_fn("description");
    spec_.gen_prefix = doc_fn("gen_prefix");
    if (has("target_delimiter")) spec_.target_delimiter = str_of("target_delimiter");
    if (has("fewshot_delimiter")) spec_.fewshot_delimiter = str_of("fewshot_delimiter");
    if (has("num_fewshot")) {
      const PyValue v = val("num_fewshot");
      if (!v.is_none()) {
        if (!v.is_int() || v.as_int() < 0)
          bad(get("num_fewshot"), "num_fewshot", "must be a whole number >= 0");
        spec_.num_fewshot = v.as_int();
      }
    }
    if (has("repeats") && !py_equal(val("repeats"), PyValue(1)))
      bad(get("repeats"), "repeats", "only repeats: 1 is supported");
    if (has("unsafe_code") && py_truth(val("unsafe_code")))
      bad(get("unsafe_code"), "unsafe_code", "tasks that run code are not supported");
    read_fewshot();
    read_generation();
    read_metrics();
    read_filters();
    make_config();
    return std::move(spec_);
  }

 private:
  bool has(const std::string& k) const {
    for (const auto& [mk, e] : m_)
      if (mk == k) return true;
    return false;
  }
  const Entry& get(const std::string& k) const {
    for (const auto& [mk, e] : m_)
      if (mk == k) return e;
    throw InternalError("missing key " + k);
  }
  PyValue val(const std::string& k) const { return has(k) ? to_py(get(k).node) : PyValue(); }
  std::string str_of(const std::string& k) const {
    const PyValue v = val(k);
    if (!v.is_str()) bad(get(k), k, std::string("must be a string, not ") + v.type_name());
    return v.str();
  }
  std::optional<std::string> opt_str(const std::string& k) const {
    if (!has(k) || val(k).is_none()) return std::nullopt;
    return str_of(k);
  }
  DocFn doc_fn_of(const PyValue& v, const std::string& where) const {
    DocFn f;
    f.value = v;
    f.where = where;
    if (v.is_str()) f.tmpl = std::make_shared<JinjaTemplate>(v.str(), where);
    return f;
  }
  DocFn doc_fn(const std::string& k) const {
    if (!has(k)) return DocFn{};
    const PyValue v = val(k);
    if (!(v.is_none() || v.is_str() || v.is_int() || v.is_list() || v.is_dict()))
      bad(get(k), k,
          std::string("must be a field name, a template, a number or a list, not ") +
              v.type_name());
    return doc_fn_of(v, where_of(get(k), k));
  }

  void translate_native() {
    static const std::map<std::string, std::string> kNative = {{"type", "output_type"},
                                                               {"text", "doc_to_text"},
                                                               {"target", "doc_to_target"},
                                                               {"choices", "doc_to_choice"}};
    const std::filesystem::path dir = std::filesystem::absolute(yaml_).parent_path();
    Merged out;
    PyDict files;
    Entry data_entry{};
    YAML::Node gen;
    for (const auto& [k, e] : m_) {
      if (kNative.count(k)) {
        out.emplace_back(kNative.at(k), e);
      } else if (k == "data" || k == "fewshot_data") {
        const PyValue v = to_py(e.node);
        if (!v.is_str()) bad(e, k, "must be a file name");
        std::filesystem::path p = v.str();
        if (!p.is_absolute()) p = dir / p;
        files.emplace_back(k == "data" ? "test" : "train", PyValue(p.string()));
        data_entry = e;
      } else if (k == "until" || k == "max_gen_toks") {
        gen[k] = e.node;
        native_gen_entry_ = e;
      } else if (k == "metrics") {
        YAML::Node list;
        if (!e.node.IsSequence()) bad(e, k, "must be a list of metric names");
        for (size_t i = 0; i < e.node.size(); ++i) {
          YAML::Node item;
          item["metric"] = e.node[i];
          list.push_back(item);
        }
        out.emplace_back("metric_list", Entry{list, e.file});
      } else if (k == "dataset_path" || k == "dataset_kwargs" || k == "output_type") {
        bad(e, k,
            "a native task file (one with `type` or `data`) names its data with `data` and "
            "`fewshot_data`");
      } else {
        out.emplace_back(k, e);
      }
    }
    if (files.empty()) throw UserError(yaml_.string() + ": a native task file needs `data`");
    native_files_ = PyValue(files);
    native_data_entry_ = data_entry;
    out.emplace_back("test_split", Entry{YAML::Node("test"), data_entry.file});
    for (const auto& [split, f] : files)
      if (split == "train")
        out.emplace_back("fewshot_split", Entry{YAML::Node("train"), data_entry.file});
    if (gen.size()) out.emplace_back("generation_kwargs", Entry{gen, native_gen_entry_.file});
    m_ = std::move(out);
    native_ = true;
  }

  void read_data() {
    PyValue files;
    Entry where;
    if (native_) {
      files = native_files_;
      where = native_data_entry_;
    } else {
      if (!has("dataset_path")) throw UserError(yaml_.string() + ": dataset_path is missing");
      const PyValue path = val("dataset_path");
      if (!path.is_str() || path.str() != "json")
        bad(get("dataset_path"), "dataset_path",
            "lmtrain reads local data only: dataset_path: json with dataset_kwargs.data_files "
            "(a Hugging Face hub dataset cannot be downloaded here)");
      if (has("dataset_name") && !val("dataset_name").is_none())
        bad(get("dataset_name"), "dataset_name", "not supported with dataset_path: json");
      if (!has("dataset_kwargs"))
        bad(get("dataset_path"), "dataset_path", "dataset_kwargs.data_files is missing");
      where = get("dataset_kwargs");
      const PyValue kw = val("dataset_kwargs");
      if (!kw.is_dict()) bad(where, "dataset_kwargs", "must be a mapping");
      for (const auto& [k, v] : kw.dict())
        if (k != "data_files") bad(where, "dataset_kwargs." + k, "not supported (only data_files)");
      const PyValue* df = dict_get(kw.dict(), "data_files");
      if (!df) bad(where, "dataset_kwargs", "data_files is missing");
      files = *df;
    }
    spec_.data_where = where_of(where, native_ ? "data" : "dataset_kwargs.data_files");
    // `datasets` names the split of a bare file or list "train".
    auto file_list = [&](const PyValue& v) {
      std::vector<std::string> out;
      if (v.is_str())
        out.push_back(v.str());
      else if (v.is_list())
        for (const auto& e : v.list()) {
          if (!e.is_str()) bad(where, "data_files", "file names must be strings");
          out.push_back(e.str());
        }
      else
        bad(where, "data_files", "must be a file, a list of files, or split: file(s)");
      for (const auto& f : out)
        if (f.find_first_of("*?[") != std::string::npos || f.find("://") != std::string::npos)
          bad(where, "data_files",
              "'" + f + "': only local file names are supported (no patterns or URLs)");
      return out;
    };
    if (files.is_dict()) {
      for (const auto& [split, v] : files.dict()) spec_.data_files[split] = file_list(v);
    } else {
      spec_.data_files["train"] = file_list(files);
    }
  }

  void read_output_type() {
    const std::string t = has("output_type") ? str_of("output_type") : "generate_until";
    if (t == "multiple_choice")
      spec_.type = OutputType::multiple_choice;
    else if (t == "loglikelihood")
      spec_.type = OutputType::loglikelihood;
    else if (t == "generate_until")
      spec_.type = OutputType::generate_until;
    else if (t == "loglikelihood_rolling")
      spec_.type = OutputType::loglikelihood_rolling;
    else
      bad(get("output_type"), "output_type",
          "'" + t +
              "' is not one of multiple_choice, loglikelihood, generate_until, "
              "loglikelihood_rolling");
  }

  void read_fewshot() {
    FewshotSpec& f = spec_.fewshot;
    f.split = spec_.fewshot_split;
    f.doc_to_text = spec_.doc_to_text;
    f.doc_to_choice = spec_.doc_to_choice;
    f.doc_to_target = spec_.doc_to_target;
    f.gen_prefix = spec_.gen_prefix;
    f.fewshot_delimiter = spec_.fewshot_delimiter;
    f.target_delimiter = spec_.target_delimiter;
    if (!has("fewshot_config") || val("fewshot_config").is_none()) return;
    const Entry& e = get("fewshot_config");
    if (!e.node.IsMap()) bad(e, "fewshot_config", "must be a mapping");
    for (auto it = e.node.begin(); it != e.node.end(); ++it) {
      const std::string k = it->first.as<std::string>();
      const PyValue v = to_py(it->second);
      const Entry sub{it->second, e.file};
      const std::string key = "fewshot_config." + k;
      if (k == "sampler") {
        if (!v.is_str() || (v.str() != "default" && v.str() != "first_n"))
          bad(sub, key, "lmtrain reproduces the samplers default and first_n only");
        f.sampler = v.str();
      } else if (k == "split") {
        if (!v.is_none() && !v.is_str()) bad(sub, key, "must be a split name");
        f.split = v.is_none() ? std::nullopt : std::optional<std::string>(v.str());
      } else if (k == "samples") {
        if (!v.is_list()) bad(sub, key, "must be a list of records");
        for (const auto& r : v.list())
          if (!r.is_dict()) bad(sub, key, "must be a list of records (mappings)");
        f.samples = v.list();
      } else if (k == "doc_to_text" || k == "doc_to_choice" || k == "doc_to_target" ||
                 k == "gen_prefix") {
        DocFn fn = v.is_none() ? DocFn{} : doc_fn_of(v, where_of(sub, key));
        (k == "doc_to_text"     ? f.doc_to_text
         : k == "doc_to_choice" ? f.doc_to_choice
         : k == "doc_to_target" ? f.doc_to_target
                                : f.gen_prefix) = fn;
      } else if (k == "fewshot_delimiter" || k == "target_delimiter") {
        if (!v.is_str()) bad(sub, key, "must be a string");
        (k == "fewshot_delimiter" ? f.fewshot_delimiter : f.target_delimiter) = v.str();
      } else {
        bad(sub, key,
            "not supported (sampler, split, samples, doc_to_text, doc_to_choice, doc_to_target, "
            "gen_prefix, fewshot_delimiter, target_delimiter)");
      }
    }
  }

  void read_generation() {
    // TaskConfig.__post_init__: generation_kwargs default only for generate_until; `until`
    // defaults to the few-shot delimiter; temperature becomes a float.
    if (!has("generation_kwargs") || val("generation_kwargs").is_none()) {
      if (spec_.type == OutputType::generate_until) {
        spec_.generation_kwargs = Json{{"temperature", 0.0},
                                       {"do_sample", false},
                                       {"max_gen_toks", 256},
                                       {"until", Json::array({spec_.fewshot_delimiter})}};
        spec_.until = {spec_.fewshot_delimiter};
      }
      return;
    }
    const Entry& e = get("generation_kwargs");
    const PyValue v = val("generation_kwargs");
    if (!v.is_dict()) bad(e, "generation_kwargs", "must be a mapping");
    Json g = Json::object();
    bool has_until = false;
    for (const auto& [k, x] : v.dict()) {
      const std::string key = "generation_kwargs." + k;
      if (k == "until") {
        has_until = true;
        if (x.is_str()) {
          spec_.until = {x.str()};
        } else if (x.is_list()) {
          for (const auto& s : x.list()) {
            if (!s.is_str()) bad(e, key, "must be a string or a list of strings");
            spec_.until.push_back(s.str());
          }
        } else {
          bad(e, key, "must be a string or a list of strings");
        }
        g[k] = to_json(x);
      } else if (k == "max_gen_toks") {
        if (!x.is_int() || x.as_int() < 1) bad(e, key, "must be a whole number >= 1");
        spec_.max_gen_toks = x.as_int();
        g[k] = to_json(x);
      } else if (k == "do_sample") {
        if (!x.is_bool() || py_truth(x))
          bad(e, key, "lmtrain generates greedily: do_sample must be false");
        g[k] = false;
      } else if (k == "temperature") {
        if (!x.is_number() || x.as_double() != 0.0)
          bad(e, key, "lmtrain generates greedily: temperature must be 0");
        g[k] = 0.0;
      } else {
        bad(e, key, "not supported (until, max_gen_toks, do_sample: false, temperature: 0)");
      }
    }
    if (!has_until) {
      g["until"] = Json::array({spec_.fewshot_delimiter});
      spec_.until = {spec_.fewshot_delimiter};
    }
    spec_.generation_kwargs = g;
  }

  void read_metrics() {
    static const std::map<OutputType, std::vector<std::string>> kDefaults = {
        {OutputType::loglikelihood, {"perplexity", "acc"}},
        {OutputType::loglikelihood_rolling,
         {"word_perplexity", "byte_perplexity", "bits_per_byte"}},
        {OutputType::multiple_choice, {"acc", "acc_norm"}},
        {OutputType::generate_until, {"exact_match"}}};
    if (!has("metric_list") || val("metric_list").is_none()) {
      for (const auto& n : kDefaults.at(spec_.type)) {
        const MetricDefault& d = kMetrics.at(n);
        spec_.metrics.push_back({n, d.aggregation, d.higher, Json::object()});
      }
      return;
    }
    const Entry& e = get("metric_list");
    const PyValue v = val("metric_list");
    if (!v.is_list()) bad(e, "metric_list", "must be a list");
    for (size_t i = 0; i < v.list().size(); ++i) {
      const PyValue& m = v.list()[i];
      const std::string key = "metric_list[" + std::to_string(i) + "]";
      const Entry item{e.node.IsSequence() ? e.node[i] : e.node, e.file};
      if (!m.is_dict() || !dict_get(m.dict(), "metric"))
        bad(item, key, "each entry needs 'metric'");
      const PyValue& name = *dict_get(m.dict(), "metric");
      if (!name.is_str() || !kMetrics.count(name.str()))
        bad(item, key,
            "unknown metric '" + py_str(name) +
                "' (lmtrain computes: acc, acc_norm, acc_bytes, acc_mutual_info, exact_match, "
                "perplexity, word_perplexity, byte_perplexity, bits_per_byte, likelihood, "
                "brier_score, f1, mcc)");
      MetricSpec spec{name.str(), kMetrics.at(name.str()).aggregation,
                      kMetrics.at(name.str()).higher, Json::object()};
      for (const auto& [k, x] : m.dict()) {
        if (k == "metric") continue;
        if (k == "aggregation") {
          if (!x.is_str() || !kAggregations.count(x.str()))
            bad(item, key + ".aggregation", "unknown aggregation '" + py_str(x) + "'");
          spec.aggregation = x.str();
        } else if (k == "higher_is_better") {
          if (!x.is_bool()) bad(item, key + ".higher_is_better", "must be true or false");
          spec.higher_is_better = py_truth(x);
        } else if (spec.name == "exact_match" &&
                   (k == "ignore_case" || k == "ignore_punctuation" || k == "ignore_numbers" ||
                    k == "regexes_to_ignore")) {
          spec.options[k] = to_json(x);
        } else {
          bad(item, key + "." + k, "option not supported for " + spec.name);
        }
      }
      spec_.metrics.push_back(spec);
    }
  }

  void read_filters() {
    if (!has("filter_list") || val("filter_list").is_none()) return;
    const Entry& e = get("filter_list");
    const PyValue v = val("filter_list");
    if (!v.is_list() || v.list().size() != 1)
      bad(e, "filter_list", "lmtrain supports one filter of take_first steps (repeats is 1)");
    const PyValue& f = v.list()[0];
    const PyValue* name = f.is_dict() ? dict_get(f.dict(), "name") : nullptr;
    const PyValue* steps = f.is_dict() ? dict_get(f.dict(), "filter") : nullptr;
    if (!name || !name->is_str() || !steps || !steps->is_list())
      bad(e, "filter_list", "each filter needs a name and a filter list");
    for (const auto& s : steps->list()) {
      const PyValue* fn = s.is_dict() ? dict_get(s.dict(), "function") : nullptr;
      if (!fn || !fn->is_str() || fn->str() != "take_first" || s.dict().size() != 1)
        bad(e, "filter_list",
            "filter step " + (fn ? py_str(*fn) : std::string("?")) +
                " is not supported (only take_first)");
    }
    spec_.filter = name->str();
  }

  // TaskConfig.to_dict(): dataclass order, None dropped at the top level.
  void make_config() {
    Json c = Json::object();
    c["task"] = spec_.name;
    auto put = [&](const char* k) {
      if (has(k) && !val(k).is_none()) c[k] = to_json(val(k));
    };
    for (const char* k : {"task", "task_alias", "tag", "dataset_path", "dataset_name",
                          "dataset_kwargs", "training_split", "validation_split", "test_split",
                          "fewshot_split", "doc_to_text", "doc_to_target"})
      put(k);
    if (native_) {
      c["dataset_path"] = "json";
      c["dataset_kwargs"] = Json{{"data_files", to_json(native_files_)}};
    }
    c["unsafe_code"] = false;
    put("doc_to_choice");
    c["description"] = spec_.description.value.is_str() ? spec_.description.value.str() : "";
    c["target_delimiter"] = spec_.target_delimiter;
    c["fewshot_delimiter"] = spec_.fewshot_delimiter;
    const FewshotSpec& f = spec_.fewshot;
    auto fn_json = [](const DocFn& d) { return d.set() ? to_json(d.value) : Json(nullptr); };
    c["fewshot_config"] =
        Json{{"sampler", f.sampler},
             {"split", f.split ? Json(*f.split) : Json(nullptr)},
             {"process_docs", nullptr},
             {"fewshot_indices", nullptr},
             {"samples", f.samples ? to_json(PyValue(*f.samples)) : Json(nullptr)},
             {"doc_to_text", fn_json(f.doc_to_text)},
             {"doc_to_choice", fn_json(f.doc_to_choice)},
             {"doc_to_target", fn_json(f.doc_to_target)},
             {"gen_prefix", fn_json(f.gen_prefix)},
             {"fewshot_delimiter", f.fewshot_delimiter},
             {"target_delimiter", f.target_delimiter}};
    c["num_fewshot"] = nullptr;  // filled by load_task
    put("metric_list");
    c["output_type"] = output_type_name(spec_.type);
    if (!spec_.generation_kwargs.is_null()) c["generation_kwargs"] = spec_.generation_kwargs;
    c["repeats"] = 1;
    put("filter_list");
    c["should_decontaminate"] =
        has("should_decontaminate") ? to_json(val("should_decontaminate")) : Json(false);
    put("doc_to_decontamination_query");
    put("gen_prefix");
    // TaskFactory._load_full_config: metadata becomes a dict ({"_metadata": value} otherwise)
    // naming the file it came from.
    const PyValue meta = val("metadata");
    Json m = meta.is_dict()   ? to_json(meta)
             : meta.is_none() ? Json::object()
                              : Json{{"_metadata", to_json(meta)}};
    m["config_source"] = std::filesystem::absolute(yaml_).lexically_normal().string();
    c["metadata"] = m;
    spec_.config = c;
  }

  std::filesystem::path yaml_;
  Merged m_;
  TaskSpec spec_;
  bool native_ = false;
  PyValue native_files_;
  Entry native_data_entry_, native_gen_entry_;
};

}  // namespace

TaskSpec read_task_spec(const std::filesystem::path& yaml) {
  std::set<std::string> seen;
  return SpecBuilder(yaml, load_merged(yaml, seen)).build();
}

}  // namespace lmt::eval
