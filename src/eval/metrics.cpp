#include "eval/metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>

#include "core/error.h"
#include "eval/py_random.h"
#include "eval/py_value.h"

namespace lmt::eval {

namespace {

// The first index of the largest value (numpy's argmax).
size_t argmax(const std::vector<double>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// len(re.split(r"\s+", text)): one more than the runs of whitespace (str.isspace()'s, which is
// what re's \s matches in a str), empty pieces at the ends counted.
int64_t count_words(const std::string& s) {
  int64_t pieces = 1;
  bool in_space = false;
  for (char32_t c : utf8_to_u32(s)) {
    const bool space = py_isspace(c);
    pieces += space && !in_space;
    in_space = space;
  }
  return pieces;
}

// hf evaluate's exact_match on one prediction, with the task's options.
double exact_match(std::string prediction, std::string reference, const Json& opt) {
  if (opt.contains("regexes_to_ignore") && !opt["regexes_to_ignore"].is_null())
    for (const auto& r : opt["regexes_to_ignore"]) {
      const std::regex re(r.get<std::string>());
      prediction = std::regex_replace(prediction, re, "");
      reference = std::regex_replace(reference, re, "");
    }
  auto strip = [](std::string s, auto&& drop) {
    s.erase(std::remove_if(s.begin(), s.end(), drop), s.end());
    return s;
  };
  if (opt.value("ignore_case", false))  // numpy's char.lower: str.lower
    prediction = py_lower(prediction), reference = py_lower(reference);
  if (opt.value("ignore_punctuation", false)) {
    auto punct = [](char c) { return std::ispunct(static_cast<unsigned char>(c)) != 0; };
    prediction = strip(prediction, punct), reference = strip(reference, punct);
  }
  if (opt.value("ignore_numbers", false)) {
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    prediction = strip(prediction, digit), reference = strip(reference, digit);
  }
  return prediction == reference ? 1.0 : 0.0;
}

double mean(const std::vector<MetricItem>& items) {
  double s = 0;
  for (const MetricItem& i : items) s += i.value;
  return s / static_cast<double>(items.size());
}

double weighted_mean(const std::vector<MetricItem>& items) {
  double a = 0, b = 0;
  for (const MetricItem& i : items) a += i.value, b += i.weight;
  return a / b;
}

// The harness's bootstrap of perplexity's standard error (lm_eval.api.metrics.bootstrap_stderr
// with its 100,000 resamples): 100 chunks of 1,000, chunk i drawing with random.Random(i)'s
// choices(xs, k=len(xs)), each resample's exp(-mean); the sample standard deviation of them all.
// Sums run in Python's order, so the figure is the harness's to the last bits.
double bootstrap_perplexity_stderr(const std::vector<MetricItem>& items) {
  const auto n = static_cast<int64_t>(items.size());
  std::vector<double> res;
  res.reserve(100000);
  for (int64_t chunk = 0; chunk < 100; ++chunk) {
    PyRandom rnd(chunk);
    for (int draw = 0; draw < 1000; ++draw) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k)
        sum += items[static_cast<size_t>(
                         std::floor(rnd.random() * static_cast<double>(n)))].value;
      res.push_back(std::exp(-(sum / static_cast<double>(n))));
    }
  }
  double mu = 0;
  for (double x : res) mu += x;
  mu /= static_cast<double>(res.size());
  double ss = 0;
  for (double x : res) ss += (x - mu) * (x - mu);
  return std::sqrt(ss / static_cast<double>(res.size() - 1));
}

}  // namespace

int64_t code_points(const std::string& utf8) {
  return static_cast<int64_t>(utf8_to_u32(utf8).size());
}

std::vector<MetricSpec> default_metrics(OutputType type) {
  std::vector<MetricSpec> m;
  auto add = [&](const char* name) {
    MetricSpec spec;
    spec.name = name;
    spec.aggregation = std::string(name) == "perplexity"      ? "perplexity"
                       : std::string(name) == "bits_per_byte" ? "bits_per_byte"
                       : std::string(name).find("perplexity") != std::string::npos
                           ? "weighted_perplexity"
                           : "mean";
    spec.higher_is_better = higher_is_better(name);
    m.push_back(spec);
  };
  switch (type) {
    case OutputType::loglikelihood:
      add("perplexity"), add("acc");
      break;
    case OutputType::loglikelihood_rolling:
      add("word_perplexity"), add("byte_perplexity"), add("bits_per_byte");
      break;
    case OutputType::multiple_choice:
      add("acc"), add("acc_norm");
      break;
    case OutputType::generate_until:
      add("exact_match");
      break;
  }
  return m;
}

bool higher_is_better(const std::string& metric) {
  return !(metric == "perplexity" || metric == "word_perplexity" ||
           metric == "byte_perplexity" || metric == "bits_per_byte");
}

std::map<std::string, MetricItem> doc_metrics(const EvalTask& task, const EvalDoc& doc,
                                              const DocAnswer& answer) {
  const std::vector<MetricSpec> specs =
      task.metrics.empty() ? default_metrics(task.type) : task.metrics;
  std::map<std::string, MetricItem> out;
  auto unknown = [&](const std::string& name) {
    throw UserError(task.file + ": metric '" + name + "' is not one lmtrain computes for " +
                    output_type_name(task.type) + " tasks");
  };
  for (const MetricSpec& m : specs) {
    const std::string& name = m.name;
    switch (task.type) {
      case OutputType::loglikelihood: {
        const LoglikelihoodResult& r = answer.loglikelihoods.at(0);
        if (name == "perplexity")
          out[name] = {r.logprob, 0};
        else if (name == "acc")
          out[name] = {r.greedy ? 1.0 : 0.0, 0};
        else
          unknown(name);
        break;
      }
      case OutputType::loglikelihood_rolling: {
        const auto bytes = static_cast<double>(doc.target.size());
        if (name == "word_perplexity")
          out[name] = {answer.rolling, static_cast<double>(count_words(doc.target))};
        else if (name == "byte_perplexity" || name == "bits_per_byte")
          out[name] = {answer.rolling, bytes};
        else
          unknown(name);
        break;
      }
      case OutputType::multiple_choice: {
        std::vector<double> ll, by_chars, by_bytes;
        for (size_t i = 0; i < answer.loglikelihoods.size(); ++i) {
          const double l = answer.loglikelihoods[i].logprob;
          ll.push_back(l);
          by_chars.push_back(l / static_cast<double>(code_points(doc.choices.at(i))));
          by_bytes.push_back(l / static_cast<double>(doc.choices.at(i).size()));
        }
        // The right choices (several where the target is a list); a gold index past the choices
        // (-100, the harness's marker) counts as wrong.
        std::vector<int64_t> golds = doc.golds.empty() ? std::vector<int64_t>{doc.gold} : doc.golds;
        auto right = [&](size_t pick) {
          for (int64_t g : golds)
            if (g >= 0 && static_cast<size_t>(g) == pick) return 1.0;
          return 0.0;
        };
        if (name == "acc")
          out[name] = {right(argmax(ll)), 0};
        else if (name == "acc_norm")
          out[name] = {right(argmax(by_chars)), 0};
        else if (name == "acc_bytes")
          out[name] = {right(argmax(by_bytes)), 0};
        else if (name == "exact_match") {
          double any = 0;
          for (int64_t g : golds)
            if (g >= 0 && g < static_cast<int64_t>(ll.size()) &&
                answer.loglikelihoods[static_cast<size_t>(g)].greedy)
              any = 1;
          out[name] = {any, 0};
        } else {
          unknown(name);
        }
        break;
      }
      case OutputType::generate_until:
        if (name == "exact_match") {
          // Several accepted answers (a list target): right when any matches.
          double v = 0;
          if (doc.targets.empty())
            v = exact_match(answer.generated, doc.target, m.options);
          else
            for (const std::string& t : doc.targets)
              v = std::max(v, exact_match(answer.generated, t, m.options));
          out[name] = {v, 0};
        } else
          unknown(name);
        break;
    }
  }
  return out;
}

Aggregate aggregate(const std::string& metric, const std::vector<MetricItem>& items) {
  Aggregate a;
  if (items.empty()) return a;
  if (metric == "word_perplexity" || metric == "byte_perplexity") {
    a.value = std::exp(-weighted_mean(items));
    return a;
  }
  if (metric == "bits_per_byte") {
    a.value = -weighted_mean(items) / std::log(2.0);
    return a;
  }
  const double m = mean(items);
  if (metric == "perplexity") {
    a.value = std::exp(-m);
    if (items.size() > 1) a.stderr_ = bootstrap_perplexity_stderr(items);
    return a;
  }
  a.value = m;
  if (items.size() > 1) {
    double ss = 0;
    for (const MetricItem& i : items) ss += (i.value - m) * (i.value - m);
    const auto n = static_cast<double>(items.size());
    a.stderr_ = std::sqrt(ss / (n - 1)) / std::sqrt(n);
  }
  return a;
}

}  // namespace lmt::eval
