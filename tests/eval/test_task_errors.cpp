// load_task's refusals, one UserError each naming the file, line and key (or the record), and
// the native task form against the harness form it stands for.
#include <gtest/gtest.h>

#include "eval/task.h"
#include "eval_test_util.h"
#include "test_util.h"

namespace lmt::eval {
namespace {

class TaskErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ =
        dir_.write(
                "test.jsonl",
                "{\"q\": \"one?\", \"choices\": [\"a\", \"b\"], \"label\": 1, \"empty\": []}\n"
                "{\"q\": \"two?\", \"choices\": [\"c\", \"d\"], \"label\": 0, \"empty\": []}\n"
                "{\"q\": \"three?\", \"choices\": [\"e\", \"f\"], \"label\": 0, \"empty\": []}\n")
            .string();
    head_ = "task: t\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: " + data_ +
            "\ntest_split: test\n";
  }
  std::string error_of(const std::string& yaml) {
    const auto p = dir_.write("t.yaml", yaml);
    return test::user_error_of([&] { load_task(p, std::nullopt, std::nullopt); });
  }
  void expect_error(const std::string& yaml, const std::vector<std::string>& parts) {
    const std::string msg = error_of(yaml);
    for (const auto& part : parts)
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }

  test::ScratchDir dir_{"task_errors"};
  std::string data_, head_;
  const std::string mc_ =
      "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_choice: choices\ndoc_to_target: "
      "label\n";
};

TEST_F(TaskErrors, AFileThatDoesNotParseNamesItsLine) {
  expect_error(head_ + "doc_to_text: [unclosed\n", {"t.yaml:8"});
}

TEST_F(TaskErrors, PythonFunctionsAreRefusedWithTheirLine) {
  expect_error(head_ + mc_ + "process_results: !function utils.process\n",
               {"t.yaml:11", "process_results", "!function"});
  expect_error(head_ + "process_docs: !function utils.p\n" + mc_, {"t.yaml:7", "process_docs"});
}

TEST_F(TaskErrors, UnknownAndUnsupportedKeys) {
  expect_error(head_ + mc_ + "doc_to_txt: q\n", {"t.yaml:11", "unknown key 'doc_to_txt'"});
  expect_error(head_ + mc_ + "process_docs: utils.p\n", {"t.yaml:11", "process_docs"});
  expect_error("task: t\ndataset_path: allenai/ai2_arc\ntest_split: test\n" + mc_,
               {"t.yaml:2 (dataset_path)", "local data"});
  expect_error(head_ + mc_ + "fewshot_config:\n  sampler: balanced\n",
               {"fewshot_config.sampler", "first_n"});
  expect_error(head_ + mc_ + "repeats: 4\n", {"repeats"});
  expect_error(head_ +
                   "generation_kwargs:\n  until: [\"\\n\"]\n  do_sample: true\ndoc_to_text: "
                   "q\ndoc_to_target: q\n",
               {"generation_kwargs.do_sample", "greedily"});
  expect_error(head_ + mc_ +
                   "filter_list:\n  - name: get-answer\n    filter:\n      - function: regex\n     "
                   "   regex_pattern: \"x\"\n",
               {"filter_list", "regex"});
}

TEST_F(TaskErrors, AnUnknownMetric) {
  expect_error(head_ + mc_ + "metric_list:\n  - metric: accuracy\n",
               {"t.yaml:12", "unknown metric 'accuracy'"});
  expect_error(head_ + mc_ + "metric_list:\n  - metric: acc\n    ignore_case: true\n",
               {"metric_list[0].ignore_case"});
}

TEST_F(TaskErrors, AFieldATemplateNamesThatARecordLacks) {
  expect_error(head_ + "doc_to_text: \"Q: {{question}}\"\ndoc_to_target: q\n",
               {"test.jsonl:1", "t.yaml:7 (doc_to_text)", "'question'"});
}

TEST_F(TaskErrors, NoChoices) {
  expect_error(head_ +
                   "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_choice: "
                   "empty\ndoc_to_target: label\n",
               {"test.jsonl:1", "doc_to_choice", "no choices"});
  expect_error(head_ + "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: label\n",
               {"needs doc_to_choice"});
}

TEST_F(TaskErrors, TooFewFewShotRecords) {
  expect_error(head_ + mc_ + "fewshot_split: test\nnum_fewshot: 3\n",
               {"num_fewshot 3", "needs 4", "set aside", "3"});
}

TEST_F(TaskErrors, ASyntaxErrorInATemplateNamesTheKey) {
  expect_error(head_ + "doc_to_text: \"Q: {{ q }\"\ndoc_to_target: q\n",
               {"t.yaml:7 (doc_to_text)", "column"});
}

TEST_F(TaskErrors, AMissingSplit) {
  expect_error("task: t\ndataset_path: json\ndataset_kwargs:\n  data_files: " + data_ +
                   "\ntest_split: test\n" + mc_,
               {"split 'test'", "train"});
}

TEST(TaskNative, TheNativeFormBuildsWhatTheHarnessFormBuilds) {
  test::ScratchDir dir("task_native");
  std::string test, train;
  for (int i = 0; i < 9; ++i) {
    const std::string r = "{\"question\": \"q" + std::to_string(i) +
                          "?\", \"options\": [\"x\", \"y" + std::to_string(i) +
                          "\"], \"answer\": " + std::to_string(i % 2) + "}\n";
    (i < 6 ? test : train) += r;
  }
  dir.write("data/test.jsonl", test);
  dir.write("data/train.jsonl", train);
  const auto native = dir.write(
      "native.yaml",
      "task: qa\ntype: multiple_choice\ndata: data/test.jsonl\nfewshot_data: data/train.jsonl\n"
      "text: \"Q: {{question}}\\nA:\"\nchoices: \"{{options}}\"\ntarget: answer\nnum_fewshot: 2\n"
      "metrics: [acc, acc_norm]\n");
  const auto harness = dir.write(
      "harness.yaml",
      "task: qa\noutput_type: multiple_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
      "    test: " +
          (dir.path() / "data/test.jsonl").string() +
          "\n    train: " + (dir.path() / "data/train.jsonl").string() +
          "\ntest_split: test\nfewshot_split: train\ndoc_to_text: \"Q: {{question}}\\nA:\"\n"
          "doc_to_choice: \"{{options}}\"\ndoc_to_target: answer\nnum_fewshot: 2\n");
  const EvalTask a = load_task(native, std::nullopt, std::nullopt);
  const EvalTask b = load_task(harness, std::nullopt, std::nullopt);
  ASSERT_EQ(a.docs.size(), 6u);
  ASSERT_EQ(a.docs.size(), b.docs.size());
  for (size_t i = 0; i < a.docs.size(); ++i) {
    EXPECT_EQ(a.docs[i].context, b.docs[i].context);
    EXPECT_EQ(a.docs[i].continuations, b.docs[i].continuations);
    EXPECT_EQ(a.docs[i].gold, b.docs[i].gold);
  }
  EXPECT_EQ(a.docs[0].continuations, (std::vector<std::string>{" x", " y0"}));
  EXPECT_EQ(a.docs[1].gold, 1);
  ASSERT_EQ(a.metrics.size(), 2u);
  EXPECT_EQ(a.metrics[1].name, "acc_norm");
}

}  // namespace
}  // namespace lmt::eval
