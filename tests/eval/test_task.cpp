// load_task against lm-evaluation-harness itself: for the four output types, 0, 1 and 3 shots,
// few-shot examples from a separate split, from the evaluated split (the record set aside) and
// from training_split by the harness's fallback, the harness's ConfigurableTask (loaded by its
// TaskManager from the same YAML files, offline) builds its requests (tests/eval/
// task_reference.py) and every context, continuation and generation argument must equal ours byte
// for byte, record by record.
#include <gtest/gtest.h>

#include "eval/task.h"
#include "eval_test_util.h"
#include "test_util.h"

namespace lmt::eval {
namespace {

// Random records with the fields the task files below use. Records 3, 5 and 7 repeat record 1,
// so that setting the evaluated record aside can remove several copies and the sampler has to
// draw again from the records that differ.
std::string records(std::mt19937& gen, int n, bool with_duplicate) {
  static const char* words[] = {"alpha", "beta", "gamma", "delta", "it's",   "\"quoted\"",
                                "x\ty",  "é",    "日本",  "7",     "  pad  "};
  auto phrase = [&](int k) {
    std::string s;
    for (int i = 0; i < k; ++i) s += std::string(i ? " " : "") + words[gen() % std::size(words)];
    return s;
  };
  std::vector<Json> rows;
  for (int i = 0; i < n; ++i) {
    Json choices = Json::array();
    for (int c = 0; c < 4; ++c) choices.push_back(phrase(1 + int(gen() % 3)));
    Json r = {{"question", phrase(2 + int(gen() % 5)) + "?"},
              {"choices", choices},
              {"label", int(gen() % 4)},
              {"answer", phrase(1 + int(gen() % 2))},
              {"text", phrase(3 + int(gen() % 8))},
              {"score", gen() % 2 ? Json(int(gen() % 10)) : Json(double(gen() % 100) / 8.0)}};
    if (gen() % 3 == 0) r["note"] = phrase(1);
    rows.push_back(r);
  }
  if (with_duplicate && n > 7) rows[3] = rows[5] = rows[7] = rows[1];
  std::string out;
  for (const auto& r : rows) out += r.dump() + "\n";
  return out;
}

struct Case {
  std::string name;
  std::optional<int64_t> num_fewshot;  // the override; the file may set its own
  std::optional<int64_t> limit;
};

class TaskReference : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 gen(test::fresh_seed("TaskReference"));
    test_ = dir_.write("data/test.jsonl", records(gen, 14, true)).string();
    train_ = dir_.write("data/train.jsonl", records(gen, 9, false)).string();
    dir_.write("tasks/_common.yaml",
               "dataset_path: json\n"
               "dataset_kwargs:\n  data_files:\n    test: " +
                   test_ + "\n    train: " + train_ +
                   "\n"
                   "test_split: test\n"
                   "metadata:\n  version: 1.0\n");
  }

  // A task file: `splits` is "sep" (few-shot split train), "same" (few-shot split test) or
  // "fallback" (training_split: train, no fewshot_split).
  void task(const std::string& name, const std::string& body, const std::string& splits) {
    std::string s = "include: _common.yaml\ntask: " + name + "\n";
    if (splits == "sep") s += "fewshot_split: train\n";
    if (splits == "same") s += "fewshot_split: test\n";
    if (splits == "fallback") s += "training_split: train\n";
    dir_.write("tasks/" + name + ".yaml", s + body);
    cases_.push_back({name, std::nullopt, std::nullopt});
  }

  void compare_all() {
    nlohmann::json spec = {{"dir", (dir_.path() / "tasks").string()},
                           {"tasks", nlohmann::json::array()}};
    for (const auto& c : cases_)
      spec["tasks"].push_back(
          {{"name", c.name},
           {"num_fewshot", c.num_fewshot ? nlohmann::json(*c.num_fewshot) : nlohmann::json()},
           {"limit", c.limit ? nlohmann::json(*c.limit) : nlohmann::json()}});
    const nlohmann::json ref = test::run_eval_reference("task_reference.py", spec, dir_.path());
    ASSERT_TRUE(ref.is_object());
    for (const auto& c : cases_) {
      SCOPED_TRACE(c.name);
      ASSERT_TRUE(ref.contains(c.name));
      const nlohmann::json& r = ref[c.name];
      ASSERT_FALSE(r.contains("error")) << r["error"];
      const EvalTask t =
          load_task(dir_.path() / "tasks" / (c.name + ".yaml"), c.num_fewshot, c.limit);
      ASSERT_EQ(t.docs.size(), r["docs"].size());
      EXPECT_EQ(t.num_fewshot, r["config"]["num_fewshot"].get<int64_t>());
      EXPECT_EQ(nlohmann::json::parse(t.config.dump()), r["config"]);
      for (size_t i = 0; i < t.docs.size(); ++i) {
        const EvalDoc& d = t.docs[i];
        const nlohmann::json& args = r["docs"][i]["args"];
        SCOPED_TRACE("doc " + std::to_string(i));
        EXPECT_EQ(d.doc_id, r["docs"][i]["doc_id"].get<int64_t>());
        EXPECT_EQ(nlohmann::json::parse(d.logged_target.dump()), r["docs"][i]["target"]);
        switch (t.type) {
          case OutputType::multiple_choice:
            ASSERT_EQ(d.continuations.size(), args.size());
            for (size_t k = 0; k < args.size(); ++k) {
              EXPECT_EQ(d.context, args[k][0].get<std::string>());
              EXPECT_EQ(d.continuations[k], args[k][1].get<std::string>());
            }
            break;
          case OutputType::loglikelihood:
            ASSERT_EQ(args.size(), 1u);
            EXPECT_EQ(d.context, args[0][0].get<std::string>());
            ASSERT_EQ(d.continuations.size(), 1u);
            EXPECT_EQ(d.continuations[0], args[0][1].get<std::string>());
            break;
          case OutputType::generate_until:
            ASSERT_EQ(args.size(), 1u);
            EXPECT_EQ(d.context, args[0][0].get<std::string>());
            EXPECT_EQ(nlohmann::json::parse(t.generation_kwargs.dump()), args[0][1]);
            EXPECT_EQ(nlohmann::json(t.until), args[0][1]["until"]);
            break;
          case OutputType::loglikelihood_rolling:
            ASSERT_EQ(args.size(), 1u);
            EXPECT_EQ(d.context, "");
            EXPECT_EQ(d.target, args[0][0].get<std::string>());
            break;
        }
      }
    }
  }

  test::ScratchDir dir_{"task"};
  std::string test_, train_;
  std::vector<Case> cases_;
};

TEST_F(TaskReference, AllOutputTypesAndFewShotSetupsMatchTheHarness) {
  const std::string mc =
      "output_type: multiple_choice\n"
      "doc_to_text: \"Question: {{question}}\\nAnswer:\"\n"
      "doc_to_choice: \"{{choices}}\"\n"
      "doc_to_target: \"{{label}}\"\n"
      "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n";
  const std::string mc_fields =
      "output_type: multiple_choice\n"
      "description: \"The following are questions.\\n\\n\"\n"
      "doc_to_text: question\n"
      "doc_to_choice: choices\n"
      "doc_to_target: label\n"
      "target_delimiter: \"\"\n"
      "fewshot_delimiter: \"\\n###\\n\"\n";
  const std::string ll =
      "output_type: loglikelihood\n"
      "doc_to_text: \"{{text.split(' ')[:-1] | join(' ')}}\"\n"
      "doc_to_target: \"{{' ' + text.split(' ')[-1]}}\"\n";
  const std::string gen =
      "output_type: generate_until\n"
      "description: \"Answer briefly.\\n\\n\"\n"
      "doc_to_text: \"Q: {{question | trim}}\\nA:\"\n"
      "doc_to_target: \"{{answer}} ({{score}})\"\n"
      "generation_kwargs:\n  until: [\"\\n\", \"Q:\"]\n  max_gen_toks: 32\n  do_sample: false\n  "
      "temperature: 0\n"
      "metric_list:\n  - metric: exact_match\n    ignore_case: true\n    ignore_punctuation: "
      "true\n";
  const std::string gen_default =
      "doc_to_text: \"{% for c in choices %}{{ loop.index }}. {{ c }}\\n{% endfor "
      "%}{{question}}\"\n"
      "doc_to_target: answer\n"
      "gen_prefix: \"Answer:\"\n";
  const std::string roll =
      "output_type: loglikelihood_rolling\n"
      "doc_to_text: \"\"\n"
      "doc_to_target: \"{{text}}\"\n";
  for (const char* splits : {"sep", "same", "fallback"}) {
    for (int shots : {0, 1, 3}) {
      const std::string sfx = std::string("_") + splits + "_" + std::to_string(shots);
      const std::string n = "num_fewshot: " + std::to_string(shots) + "\n";
      task("mc" + sfx, mc + n, splits);
      task("mcf" + sfx, mc_fields, splits);
      cases_.back().num_fewshot = shots;  // given as the override, not in the file
      task("ll" + sfx, ll + n, splits);
      task("gen" + sfx, gen + n, splits);
      task("gend" + sfx, gen_default + n, splits);
      cases_.back().limit = 5;
      task("roll" + sfx, roll + n, splits);
    }
  }
  // first_n, a few-shot-only doc_to_text and target delimiter, a file's own 0 shots kept.
  task("mc_firstn",
       mc + "num_fewshot: 3\nfewshot_config:\n  sampler: first_n\n  doc_to_text: \"Q: "
            "{{question}}\\nA:\"\n  target_delimiter: \"  \"\n",
       "same");
  task("mc_list",
       "output_type: multiple_choice\ndoc_to_text: \"{{question}}\"\ndoc_to_choice: [\"no\", "
       "'yes', maybe, \"n/a\"]\n"
       "doc_to_target: \"{{label}}\"\ndescription: \"{{note | default('none')}}: \"\nnum_fewshot: "
       "2\n"
       "target_delimiter: \"\\n\"\n",
       "sep");
  task("mc_samples",
       mc + "num_fewshot: 2\nfewshot_config:\n  samples:\n"
            "    - {question: \"Sky?\", choices: [blue, red, green, black], label: 0}\n"
            "    - {question: \"Grass?\", choices: [blue, red, green, black], label: 2}\n"
            "    - {question: \"Night?\", choices: [blue, red, green, black], label: 3}\n",
       "none");
  task("ll_limit", ll + "num_fewshot: 1\n", "same");
  cases_.back().limit = 3;
  task("mc_zero", mc + "num_fewshot: 0\n", "sep");
  cases_.back().num_fewshot = 2;
  // data_files relative to the current directory (where `datasets` resolves them), as a list and
  // as a bare file (the split `datasets` then calls train).
  const std::string rel_test = std::filesystem::relative(test_).string();
  const std::string rel_train = std::filesystem::relative(train_).string();
  dir_.write("tasks/rel_list.yaml",
             "task: rel_list\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: [" +
                 rel_test + "]\n    train: " + rel_train + "\ntest_split: test\nnum_fewshot: 2\n" +
                 mc);
  cases_.push_back({"rel_list", std::nullopt, std::nullopt});
  dir_.write("tasks/rel_bare.yaml",
             "task: rel_bare\ndataset_path: json\ndataset_kwargs:\n  data_files: " + rel_test +
                 "\ntest_split: train\nfewshot_split: train\nnum_fewshot: 1\n" + ll);
  cases_.push_back({"rel_bare", std::nullopt, 4});
  ASSERT_NO_FATAL_FAILURE(compare_all());
}

}  // namespace
}  // namespace lmt::eval
