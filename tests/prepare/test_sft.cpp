// Instruction / chat data end to end: prepare renders chats through the template and stores a loss
// mask; the loader bin-packs whole chats into samples whose labels are exactly the assistant
// turns (content + end-of-turn marker), with positions restarting at every chat.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "data/sample_set.h"
#include "prepare_util.h"

namespace lmt {
namespace {

using test::TempDir;

TEST(Sft, LabelsAreExactlyTheAssistantTurnsAndChatsAreNeverSplit) {
  TempDir dir("sft");
  std::mt19937 gen(std::random_device{}());
  std::vector<std::string> lines, want_runs;
  int64_t want_loss_tokens = 0;
  for (int i = 0; i < 60; ++i) {
    const int turns = 1 + static_cast<int>(gen() % 3);
    std::string json = "{\"messages\": [";
    if (i % 3 == 0) json += "{\"role\": \"system\", \"content\": \"be brief\"}, ";
    for (int t = 0; t < turns; ++t) {
      std::string q = "question " + std::to_string(i) + "." + std::to_string(t);
      std::string a(static_cast<size_t>(1 + gen() % 20), static_cast<char>('a' + gen() % 26));
      json += (t ? ", " : "") + std::string("{\"role\": \"user\", \"content\": \"") + q +
              "\"}, {\"role\": \"assistant\", \"content\": \"" + a + "\"}";
      want_runs.push_back(a + "<|im_end|>");
      want_loss_tokens += static_cast<int64_t>(a.size() + 10);
    }
    lines.push_back(json + "]}");
  }
  // One chat too long for a sample: left out by the plan, and counted.
  lines.push_back("{\"messages\": [{\"role\": \"user\", \"content\": \"" + std::string(700, 'q') +
                  "\"}, {\"role\": \"assistant\", \"content\": \"x\"}]}");
  PrepareOptions opt;
  TextSourceSpec s;
  s.path = test::write_lines(dir.path / "chats.jsonl", lines);
  s.format = "jsonl";
  s.schema = "chat";
  s.chat_template = "chatml";
  opt.sources = {s};
  opt.seq_len = 512;
  opt.val_fraction = 0;
  opt.out_dir = (dir.path / "store").string();
  opt.progress = false;
  Manifest m = prepare_store(opt);
  ASSERT_EQ(m.sources[0].packing, "bin");
  EXPECT_EQ(m.sources[0].skipped, 0) << manifest_summary(m);
  EXPECT_TRUE(m.sources[0].train.has_mask);
  EXPECT_EQ(m.sources[0].train.documents, 61);
  EXPECT_EQ(m.sources[0].train.loss_tokens, want_loss_tokens + 11);  // + the long chat's "x"

  SampleSet set(opt.out_dir, m, false, opt.seq_len);
  EXPECT_EQ(set.dropped_documents(), 1);
  const int64_t T = opt.seq_len;
  std::vector<int32_t> ids(T), labels(T), pos(T);
  std::vector<int32_t> starts;
  std::vector<std::string> runs;
  int64_t labelled = 0, chats = 0;
  for (int64_t k = 0; k < set.num_samples(); ++k) {
    set.fill(k, ids.data(), labels.data(), pos.data(), &starts);
    std::string run;
    for (int64_t j = 0; j < T; ++j) {
      if (labels[j] >= 0) {
        ASSERT_LT(labels[j], 256) << "only text bytes are targets, never end-of-text or padding";
        run += static_cast<char>(labels[j]);
        ++labelled;
      } else if (!run.empty()) {
        runs.push_back(run);
        run.clear();
      }
    }
    if (!run.empty()) runs.push_back(run);
    for (size_t d = 0; d < starts.size(); ++d) {
      EXPECT_EQ(pos[starts[d]], 0) << "positions restart at every chat";
      const int64_t end = d + 1 < starts.size() ? starts[d + 1] : T;
      for (int64_t j = starts[d] + 1; j < end; ++j) ASSERT_EQ(pos[j], pos[j - 1] + 1);
      // A chat starts with "<|im_start|>" (unless it is padding, id 0).
      if (ids[starts[d]] != 0) {
        ++chats;
        EXPECT_EQ(std::string(ids.begin() + starts[d], ids.begin() + starts[d] + 12),
                  "<|im_start|>");
      }
    }
  }
  EXPECT_EQ(chats, 60) << "every chat that fits is in exactly one sample, from its start";
  EXPECT_EQ(labelled, want_loss_tokens);
  std::sort(runs.begin(), runs.end());
  std::sort(want_runs.begin(), want_runs.end());
  EXPECT_EQ(runs, want_runs);
}

}  // namespace
}  // namespace lmt
