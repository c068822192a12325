// load_task (task.h): the harness's ConfigurableTask at string level. doc_to_text / doc_to_target
// / doc_to_choice read as ConfigurableTask reads them, few-shot examples drawn as ContextSampler
// and FirstNSampler draw them, contexts joined as fewshot_context and build_qa_turn join them
// (without a chat template), requests' arguments as construct_requests makes them.
#include "eval/task.h"

#include <set>

#include "core/error.h"
#include "eval/py_random.h"
#include "eval/task_spec.h"

namespace lmt::eval {

const char* output_type_name(OutputType t) {
  switch (t) {
    case OutputType::multiple_choice:
      return "multiple_choice";
    case OutputType::loglikelihood:
      return "loglikelihood";
    case OutputType::generate_until:
      return "generate_until";
    case OutputType::loglikelihood_rolling:
      return "loglikelihood_rolling";
  }
  return "?";
}

namespace {

bool ends_in_space(const std::string& s) {
  const std::u32string u = utf8_to_u32(s);
  return !u.empty() && py_isspace(u.back());
}
bool starts_with_space(const std::string& s) {
  const std::u32string u = utf8_to_u32(s);
  return !u.empty() && py_isspace(u.front());
}

// lm_eval.api.utils.maybe_delimit and requires_delimiter.
std::string maybe_delimit(const std::string& prefix, const std::string& suffix,
                          const std::string& delim) {
  if (prefix.empty()) return suffix;
  if (suffix.empty()) return prefix;
  return ends_in_space(prefix) || starts_with_space(suffix) ? prefix + suffix
                                                            : prefix + delim + suffix;
}
bool requires_delimiter(const std::string& prefix, const std::string& suffix) {
  if (prefix.empty()) return false;
  return !(ends_in_space(prefix) || starts_with_space(suffix));
}

// A record: its values and how messages name it.
struct Rec {
  const PyValue* doc;
  std::string label;
};

class TaskBuilder {
 public:
  explicit TaskBuilder(TaskSpec spec) : s_(std::move(spec)) {}

  EvalTask build(std::optional<int64_t> num_fewshot, std::optional<int64_t> limit, int64_t seed) {
    EvalTask t;
    t.name = s_.name;
    t.file = s_.file;
    t.type = s_.type;
    t.fewshot_seed = seed;
    t.until = s_.until;
    t.max_gen_toks = s_.max_gen_toks;
    t.generation_kwargs = s_.generation_kwargs;
    t.filter = s_.filter;
    t.metrics = s_.metrics;
    // evaluator.py: a task's own num_fewshot: 0 is never overridden; none given means 0.
    int64_t shots = s_.num_fewshot.value_or(0);
    if (num_fewshot && !(s_.num_fewshot && *s_.num_fewshot == 0)) shots = *num_fewshot;
    if (shots < 0) throw UserError(s_.file + ": num_fewshot must be >= 0");
    t.num_fewshot = shots;
    t.config = s_.config;
    t.config["num_fewshot"] = shots;
    if (limit && *limit <= 0) throw UserError(s_.file + ": limit must be at least 1");
    if (s_.type == OutputType::multiple_choice && !s_.doc_to_choice.set())
      throw UserError(s_.file + ": output_type multiple_choice needs doc_to_choice");

    const std::string eval_split = eval_split_name();
    const SplitData& docs = split(eval_split);
    for (const auto& c : docs.columns) features_.insert(c);
    if (docs.rows.empty())
      throw UserError(s_.data_where + ": split '" + eval_split + "' has no records");
    t.split_size = int64_t(docs.rows.size());
    probe_first(Rec{&docs.rows[0], docs.labels[0]});
    if (shots > 0) load_fewshot_pool();

    PyRandom rnd(seed);
    const bool exclude = s_.fewshot.split == s_.test_split;
    const size_t n = limit ? std::min<size_t>(size_t(*limit), docs.rows.size()) : docs.rows.size();
    for (size_t i = 0; i < n; ++i) {
      const Rec r{&docs.rows[i], docs.labels[i]};
      EvalDoc d;
      d.doc_id = int64_t(i);
      d.doc = to_json(*r.doc);
      const std::string context = fewshot_context(r, shots, exclude, rnd);
      fill_request(r, context, d);
      t.docs.push_back(std::move(d));
    }
    return t;
  }

 private:
  [[noreturn]] void fail(const Rec& r, const DocFn& fn, const std::string& msg) const {
    throw UserError(r.label + ": " + fn.where + ": " + msg);
  }

  std::string eval_split_name() const {
    if (s_.test_split) return *s_.test_split;
    if (s_.validation_split) return *s_.validation_split;
    throw UserError(s_.file +
                    ": the task needs test_split or validation_split (the split evaluated)");
  }

  const SplitData& split(const std::string& name) {
    auto it = loaded_.find(name);
    if (it != loaded_.end()) return it->second;
    auto f = s_.data_files.find(name);
    if (f == s_.data_files.end()) {
      std::string have;
      for (const auto& [k, v] : s_.data_files) have += (have.empty() ? "" : ", ") + k;
      throw UserError(s_.data_where + ": the task uses split '" + name +
                      "', but data_files has only: " + have);
    }
    return loaded_.emplace(name, load_split(f->second, s_.data_where)).first->second;
  }

  // ConfigurableTask.fewshot_docs and Task.fewshot_docs: the few-shot split, else the samples,
  // else training, validation, test in that order.
  void load_fewshot_pool() {
    std::optional<std::string> name = s_.fewshot.split;
    if (!name && s_.fewshot.samples) {
      for (size_t i = 0; i < s_.fewshot.samples->size(); ++i) {
        pool_.push_back((*s_.fewshot.samples)[i]);
        pool_labels_.push_back(s_.file + " fewshot_config.samples[" + std::to_string(i) + "]");
      }
    } else {
      if (!name)
        name = s_.training_split     ? s_.training_split
               : s_.validation_split ? s_.validation_split
                                     : s_.test_split;
      if (!name)
        throw UserError(s_.file +
                        ": num_fewshot > 0 but the task has no split to draw examples from");
      const SplitData& d = split(*name);
      pool_ = d.rows;
      pool_labels_ = d.labels;
    }
    if (pool_.empty())
      throw UserError(s_.file + ": num_fewshot > 0 but there are no few-shot records");
  }

  PyValue field(const Rec& r, const DocFn& fn, const std::string& name) const {
    const PyValue* v = dict_get(r.doc->dict(), name);
    if (!v) fail(r, fn, "the record has no field '" + name + "'");
    return *v;
  }
  std::string render(const Rec& r, const DocFn& fn) const {
    return fn.tmpl->render(r.doc->dict(), r.label);
  }
  PyValue literal(const Rec& r, const DocFn& fn, const std::string& text, const char* what) const {
    try {
      return py_literal_eval(text);
    } catch (const std::invalid_argument& e) {
      fail(r, fn,
           std::string(what) + " rendered " + excerpt(py_repr_string(text)) +
               ", which Python's ast.literal_eval cannot read (" + e.what() + ")");
    }
  }

  PyValue doc_to_text(const Rec& r, const DocFn& fn) const {
    if (fn.value.is_int()) return fn.value;
    if (!fn.value.is_str())
      throw UserError(s_.file + ": doc_to_text must be a field name or a template");
    if (features_.count(fn.value.str())) return field(r, fn, fn.value.str());
    const std::string t = render(r, fn);
    if (py_isdigit_str(t) && s_.doc_to_choice.set()) return literal(r, fn, t, "doc_to_text");
    return PyValue(t);
  }
  PyValue doc_to_target(const Rec& r, const DocFn& fn) const {
    if (fn.value.is_int() || fn.value.is_list()) return fn.value;
    if (!fn.value.is_str())
      throw UserError(s_.file +
                      ": doc_to_target must be a field name, a template, a number or a list");
    if (features_.count(fn.value.str())) return field(r, fn, fn.value.str());
    const std::string t = render(r, fn);
    if (py_isdigit_str(t) && s_.doc_to_choice.set()) return literal(r, fn, t, "doc_to_target");
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']') {
      try {
        return py_literal_eval(t);
      } catch (const std::invalid_argument&) {
        return PyValue(t);
      }
    }
    return PyValue(t);
  }
  PyList doc_to_choice(const Rec& r, const DocFn& fn) const {
    PyValue v;
    if (fn.value.is_str()) {
      v = features_.count(fn.value.str()) ? field(r, fn, fn.value.str())
                                          : literal(r, fn, render(r, fn), "doc_to_choice");
    } else if (fn.value.is_list()) {
      v = fn.value;
    } else if (fn.value.is_dict()) {
      PyList vals;
      for (const auto& [k, x] : fn.value.dict()) vals.push_back(x);
      v = PyValue(vals);
    } else {
      throw UserError(s_.file +
                      ": doc_to_choice must be a field name, a template, a list or a mapping");
    }
    if (!v.is_list())
      fail(r, fn, std::string("doc_to_choice must give a list, not ") + v.type_name());
    if (v.list().empty()) fail(r, fn, "doc_to_choice gives no choices");
    return v.list();
  }
  std::string resolve_field(const Rec& r, const DocFn& fn) const {
    if (!fn.value.is_str() || fn.value.str().empty()) return "";
    if (const PyValue* v = dict_get(r.doc->dict(), fn.value.str())) {
      if (!v->is_str())
        fail(r, fn, std::string("the field gives a ") + v->type_name() + ", not a string");
      return v->str();
    }
    return render(r, fn);
  }
  std::string doc_to_prefix(const Rec& r) const {
    const DocFn& fn = s_.gen_prefix;
    if (!fn.value.is_str()) return "";
    if (features_.count(fn.value.str())) {
      const PyValue v = field(r, fn, fn.value.str());
      if (!v.is_str())
        fail(r, fn, std::string("gen_prefix's field gives a ") + v.type_name() + ", not a string");
      return v.str();
    }
    return render(r, fn);
  }

  // ConfigurableTask.__init__'s check of the first document: a number from doc_to_text means
  // several inputs (winogrande), a list from doc_to_target several targets, and every choice
  // must be a non-empty string (the harness indexes choice[0]).
  void probe_first(const Rec& r) {
    const PyValue text = doc_to_text(r, s_.doc_to_text);
    if (text.is_int() || text.is_bool())
      fail(r, s_.doc_to_text,
           "doc_to_text gives a number: tasks with one context per choice (winogrande's form) are "
           "not supported");
    const PyValue target = doc_to_target(r, s_.doc_to_target);
    multiple_target_ = target.is_list();
    if (!s_.doc_to_choice.set()) return;
    const PyList choices = doc_to_choice(r, s_.doc_to_choice);
    for (size_t i = 0; i < choices.size(); ++i)
      if (!choices[i].is_str() || choices[i].str().empty())
        fail(r, s_.doc_to_choice,
             "choice " + std::to_string(i) + " is " + py_repr(choices[i]) +
                 ": choices must be non-empty strings");
  }

  // build_qa_turn, as plain text: the question, the delimiter, the answer and the few-shot
  // delimiter (or the generation prefix).
  std::string qa_turn(const Rec& r, const PyValue& q, const std::optional<PyList>& c,
                      const std::optional<PyValue>& a, const std::string& gen_prefix,
                      const std::string& tgt_delim, const std::string& few_delim) const {
    if (!q.is_str())
      fail(r, s_.doc_to_text,
           std::string("doc_to_text gives a ") + q.type_name() + ", not a string");
    const bool has_answer = a && !a->is_none() && !(a->is_str() && a->str().empty());
    std::string out = q.str();
    if (has_answer && gen_prefix.empty())
      out += tgt_delim;
    else if (!gen_prefix.empty() && requires_delimiter(q.str(), gen_prefix))
      out += tgt_delim;
    if (has_answer) {
      PyValue ans = *a;
      if (c && !c->empty() && (a->is_int() || a->is_bool())) {
        const int64_t n = int64_t(c->size());
        int64_t i = a->as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n)
          fail(r, s_.doc_to_target,
               "the target index " + py_str(*a) + " is out of range for " + std::to_string(n) +
                   " choices");
        ans = (*c)[size_t(i)];
      } else if (a->is_list()) {
        if (a->list().empty()) fail(r, s_.doc_to_target, "doc_to_target gives an empty list");
        ans = a->list()[0];
      }
      if (!ans.is_str())
        fail(r, s_.doc_to_target, "the few-shot answer is " + py_repr(ans) + ", not a string");
      out += maybe_delimit(gen_prefix, ans.str(), " ") + few_delim;
    } else if (!gen_prefix.empty()) {
      out += gen_prefix;
    }
    return out;
  }

  std::vector<size_t> sample(const Rec& r, int64_t n, bool exclude, PyRandom& rnd) const {
    const int64_t size = int64_t(pool_.size());
    auto same = [&](size_t i) { return py_equal(pool_[i], *r.doc); };
    std::vector<size_t> res;
    if (s_.fewshot.sampler == "first_n") {
      for (size_t i = 0; i < pool_.size() && int64_t(res.size()) < n; ++i)
        if (!exclude || !same(i)) res.push_back(i);
      if (int64_t(res.size()) < n)
        throw UserError(s_.file + ": num_fewshot " + std::to_string(n) + " exceeds the " +
                        std::to_string(res.size()) + " few-shot records available");
      return res;
    }
    // ContextSampler.sample: `if not eval_doc` also treats an empty record as none.
    const bool drop_eval = exclude && !r.doc->dict().empty();
    const int64_t k = drop_eval ? n + 1 : n;
    if (k > size)
      throw UserError(r.label + ": num_fewshot " + std::to_string(n) + " needs " +
                      std::to_string(k) + " few-shot records" +
                      (drop_eval ? " (the evaluated record is set aside)" : "") +
                      ", but there are " + std::to_string(size));
    for (int64_t j : rnd.sample(size, k))
      if (!drop_eval || !same(size_t(j))) res.push_back(size_t(j));
    if (int64_t(res.size()) > n) res.resize(size_t(n));
    if (int64_t(res.size()) < n) {
      // Copies of the evaluated record were drawn: resample from the pool without any of them.
      std::vector<size_t> pool;
      for (size_t i = 0; i < pool_.size(); ++i)
        if (!same(i)) pool.push_back(i);
      if (int64_t(pool.size()) < n)
        throw UserError(r.label + ": num_fewshot " + std::to_string(n) +
                        " needs more few-shot records than differ from this one");
      res.clear();
      for (int64_t j : rnd.sample(int64_t(pool.size()), n)) res.push_back(pool[size_t(j)]);
    }
    return res;
  }

  std::string fewshot_context(const Rec& r, int64_t shots, bool exclude, PyRandom& rnd) const {
    std::string ctx = resolve_field(r, s_.description);
    const FewshotSpec& f = s_.fewshot;
    if (shots > 0) {
      for (size_t i : sample(r, shots, exclude, rnd)) {
        const Rec fr{&pool_[i], pool_labels_[i]};
        const PyValue q = doc_to_text(fr, f.doc_to_text);
        std::optional<PyList> c;
        if (f.doc_to_choice.set()) c = doc_to_choice(fr, f.doc_to_choice);
        const PyValue a = doc_to_target(fr, f.doc_to_target);
        ctx += qa_turn(fr, q, c, a, resolve_field(fr, f.gen_prefix), f.target_delimiter,
                       f.fewshot_delimiter);
      }
    }
    const PyValue q = doc_to_text(r, s_.doc_to_text);
    std::optional<PyList> c;
    if (s_.doc_to_choice.set()) c = doc_to_choice(r, s_.doc_to_choice);
    (void)doc_to_target(r, s_.doc_to_target);  // the harness computes it here too (and may fail)
    return ctx + qa_turn(r, q, c, std::nullopt, doc_to_prefix(r), s_.target_delimiter, "");
  }

  // construct_requests, and what process_results compares with.
  void fill_request(const Rec& r, const std::string& context, EvalDoc& d) const {
    const PyValue target = doc_to_target(r, s_.doc_to_target);
    d.logged_target = to_json(target);
    switch (s_.type) {
      case OutputType::loglikelihood:
      case OutputType::loglikelihood_rolling:
        if (!target.is_str())
          fail(r, s_.doc_to_target,
               std::string("the target must be a string, not ") + target.type_name());
        d.target = target.str();
        if (s_.type == OutputType::loglikelihood) {
          d.context = context;
          d.continuations = {target.str()};
        }
        return;
      case OutputType::multiple_choice: {
        d.context = context;
        const PyList choices = doc_to_choice(r, s_.doc_to_choice);
        for (const auto& c : choices) {
          d.choices.push_back(py_str(c));
          d.continuations.push_back(s_.target_delimiter + py_str(c));
        }
        const int64_t n = int64_t(choices.size());
        auto index_gold = [&](const PyValue& g) -> int64_t {
          if (g.is_int() || g.is_bool()) return g.as_int() < n ? g.as_int() : -100;
          if (g.is_str()) {
            for (int64_t i = 0; i < n; ++i)
              if (py_equal(choices[size_t(i)], g)) return i;
            return -100;
          }
          fail(r, s_.doc_to_target,
               "the target " + py_repr(g) + " is neither a choice index nor a choice");
        };
        if (target.is_list()) {
          for (const auto& g : target.list()) {
            if (!g.is_int()) fail(r, s_.doc_to_target, "a list target must hold choice indices");
            d.golds.push_back(index_gold(g));
          }
          d.gold = d.golds.empty() ? -100 : d.golds[0];
        } else {
          d.gold = index_gold(target);
        }
        return;
      }
      case OutputType::generate_until:
        d.context = context;
        if (s_.doc_to_choice.set()) {
          const PyList choices = doc_to_choice(r, s_.doc_to_choice);
          for (const auto& c : choices) d.choices.push_back(py_str(c));
          if (!target.is_int() && !target.is_bool())
            fail(r, s_.doc_to_target, "with doc_to_choice the target must be a choice index");
          int64_t i = target.as_int();
          if (i < 0) i += int64_t(choices.size());
          if (i < 0 || i >= int64_t(choices.size()))
            fail(r, s_.doc_to_target, "the target index is out of range");
          d.target = py_str(choices[size_t(i)]);
        } else if (multiple_target_) {
          if (target.is_list()) {
            for (const auto& g : target.list()) d.targets.push_back(py_str(g));
          } else {
            for (const auto& ch : utf8_to_u32(py_str(target)))
              d.targets.push_back(u32_to_utf8(std::u32string(1, ch)));
          }
          if (!d.targets.empty()) d.target = d.targets[0];
        } else {
          d.target = py_str(target);
        }
        return;
    }
  }

  TaskSpec s_;
  std::map<std::string, SplitData> loaded_;
  std::set<std::string> features_;
  std::vector<PyValue> pool_;
  std::vector<std::string> pool_labels_;
  bool multiple_target_ = false;
};

}  // namespace

EvalTask load_task(const std::filesystem::path& yaml, std::optional<int64_t> num_fewshot,
                   std::optional<int64_t> limit, int64_t fewshot_seed) {
  return TaskBuilder(read_task_spec(yaml)).build(num_fewshot, limit, fewshot_seed);
}

}  // namespace lmt::eval
