// Loader: deterministic shuffles, exact resume (across epoch boundaries), rank slices that add up
// to the single-rank batch; EvalLoader order and wrap-around; building from a DataConfig.
#include "data/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "train/run_config.h"

namespace lmt {
namespace {

// A stream whose token at position p is p, so a sample's first id is its index * seq_len.
TokenDataset counting_dataset(int64_t num_samples, int64_t seq_len) {
  std::vector<int32_t> t(static_cast<size_t>(num_samples * seq_len + 1));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i);
  return TokenDataset("train", std::move(t), 1);
}

TEST(Loader, SameSeedSameOrderAndEverySampleOncePerEpoch) {
  TokenDataset d = counting_dataset(37, 4);
  Loader a(d, 4, 1, 42), b(d, 4, 1, 42), c(d, 4, 1, 43);
  std::vector<int64_t> ea, eb, ec;
  for (int i = 0; i < 37; ++i) {
    ea.push_back(a.next_indices()[0]);
    eb.push_back(b.next_indices()[0]);
    ec.push_back(c.next_indices()[0]);
  }
  EXPECT_EQ(ea, eb);
  EXPECT_NE(ea, ec);
  EXPECT_EQ(std::set<int64_t>(ea.begin(), ea.end()).size(), 37u);
  EXPECT_EQ(*std::max_element(ea.begin(), ea.end()), 36);
  EXPECT_EQ(a.get_state(), (LoaderState{42, 1, 0}));
  // Epoch 1 is a different permutation of the same samples.
  std::vector<int64_t> e1;
  for (int i = 0; i < 37; ++i) e1.push_back(a.next_indices()[0]);
  EXPECT_NE(e1, ea);
  EXPECT_EQ(std::set<int64_t>(e1.begin(), e1.end()), std::set<int64_t>(ea.begin(), ea.end()));
  EXPECT_EQ(ea, epoch_permutation(42, 0, 37));
  EXPECT_EQ(e1, epoch_permutation(42, 1, 37));
}

TEST(Loader, BatchesCarrySampleContent) {
  const int64_t L = 6, B = 3;
  TokenDataset d = counting_dataset(20, L);
  Loader loader(d, L, B, 7);
  Loader shadow(d, L, B, 7);
  std::vector<int32_t> ids(B * L), labels(B * L);
  for (int step = 0; step < 10; ++step) {
    loader.next(ids.data(), labels.data());
    std::vector<int64_t> idx = shadow.next_indices();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < L; ++j) {
        EXPECT_EQ(ids[b * L + j], idx[b] * L + j);
        EXPECT_EQ(labels[b * L + j], idx[b] * L + j + 1);
      }
  }
}

TEST(Loader, BatchSpanningEpochBoundaryContinuesTheSequence) {
  TokenDataset d = counting_dataset(10, 2);
  Loader loader(d, 2, 4, 5);
  std::vector<int64_t> seq = epoch_permutation(5, 0, 10), e1 = epoch_permutation(5, 1, 10),
                       e2 = epoch_permutation(5, 2, 10);
  seq.insert(seq.end(), e1.begin(), e1.end());
  seq.insert(seq.end(), e2.begin(), e2.end());
  std::vector<int64_t> got;
  for (int i = 0; i < 7; ++i) {
    auto b = loader.next_indices();
    got.insert(got.end(), b.begin(), b.end());
  }
  seq.resize(28);
  EXPECT_EQ(got, seq);  // batch 2 = epoch 0 [8, 10) + epoch 1 [0, 2)
  EXPECT_EQ(loader.get_state(), (LoaderState{5, 2, 8}));
}

TEST(Loader, ResumeReproducesTheUninterruptedRun) {
  const int64_t L = 3, B = 4;
  TokenDataset d = counting_dataset(11, L);  // 11 samples: batches cross epochs at odd places
  for (int k : {0, 1, 2, 3, 5, 8}) {
    Loader full(d, L, B, 99);
    std::vector<std::vector<int32_t>> expected;
    std::vector<int32_t> ids(B * L), labels(B * L);
    for (int i = 0; i < 12; ++i) {
      full.next(ids.data(), labels.data());
      expected.push_back(ids);
      expected.back().insert(expected.back().end(), labels.begin(), labels.end());
    }
    Loader first(d, L, B, 99);
    for (int i = 0; i < k; ++i) first.next(ids.data(), labels.data());
    nlohmann::json saved = first.get_state();  // through JSON, as a checkpoint does
    Loader resumed(d, L, B, 0);                // the seed comes from the state
    resumed.set_state(saved.get<LoaderState>());
    for (int i = k; i < 12; ++i) {
      resumed.next(ids.data(), labels.data());
      std::vector<int32_t> got = ids;
      got.insert(got.end(), labels.begin(), labels.end());
      EXPECT_EQ(got, expected[i]) << "resumed after " << k << " batches, batch " << i;
    }
  }
}

TEST(Loader, RanksSplitTheSingleRankBatch) {
  TokenDataset d = counting_dataset(13, 2);
  for (int world : {2, 3}) {
    const int64_t m = 2;
    Loader single(d, 2, m * world, 11);
    std::vector<Loader> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(d, 2, m, 11, r, world);
    for (int step = 0; step < 9; ++step) {
      std::vector<int64_t> all = single.next_indices(), joined;
      for (auto& r : ranks) {
        auto mine = r.next_indices();
        ASSERT_EQ(mine.size(), static_cast<size_t>(m));
        joined.insert(joined.end(), mine.begin(), mine.end());
      }
      EXPECT_EQ(joined, all) << "world " << world << " step " << step;
    }
    for (auto& r : ranks) EXPECT_EQ(r.get_state(), single.get_state());
  }
}

TEST(Loader, StateErrorsAndJson) {
  TokenDataset d = counting_dataset(5, 2);
  Loader loader(d, 2, 1, 3);
  EXPECT_THROW(loader.set_state({3, 0, 5}), UserError);
  EXPECT_THROW(loader.set_state({3, -1, 0}), UserError);
  nlohmann::json j = LoaderState{1ull << 40, 7, 4};
  EXPECT_EQ(j.dump(), R"({"epoch":7,"index":4,"seed":1099511627776})");
  EXPECT_EQ(j.get<LoaderState>(), (LoaderState{1ull << 40, 7, 4}));
  EXPECT_THROW(nlohmann::json::parse(R"({"seed": 1})").get<LoaderState>(), UserError);
  TokenDataset tiny("validation", {1, 2, 3}, 1);
  EXPECT_THROW(Loader(tiny, 3, 1, 0), UserError);
}

TEST(EvalLoader, SequentialWrapsAroundAndResets) {
  const int64_t L = 2;
  TokenDataset d = counting_dataset(5, L);
  EvalLoader ev(d, L, 2);
  EXPECT_EQ(ev.batches_per_pass(), 3);
  std::vector<int32_t> ids(2 * L), labels(2 * L);
  std::vector<int64_t> order;
  for (int i = 0; i < 4; ++i) {
    ev.next(ids.data(), labels.data());
    order.push_back(ids[0] / L);
    order.push_back(ids[L] / L);
    EXPECT_EQ(labels[0], ids[0] + 1);
  }
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2}));
  ev.reset();
  ev.next(ids.data(), labels.data());
  EXPECT_EQ(ids[0], 0);
  // Two ranks read the two halves of each global batch.
  EvalLoader r0(d, L, 1, 0, 2), r1(d, L, 1, 1, 2);
  std::vector<int64_t> joined;
  for (int i = 0; i < 4; ++i) {
    r0.next(ids.data(), labels.data());
    joined.push_back(ids[0] / L);
    r1.next(ids.data(), labels.data());
    joined.push_back(ids[0] / L);
  }
  EXPECT_EQ(joined, order);
}

TEST(Datasets, BuildFromDataConfigFiles) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("lmt_loader_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "fortunes", std::ios::binary);
    for (int i = 0; i < 200; ++i) f << "fortune " << i << " says hello\n%\n";
  }
  DataConfig cfg;
  cfg.sources.push_back(SourceConfig{(dir / "fortunes").string()});
  cfg.seq_len = 16;
  cfg.val_fraction = 0.1;
  DatasetSplits s = build_datasets(cfg);
  EXPECT_EQ(s.sources.at(0).documents, 200);
  EXPECT_EQ(s.train.num_documents() + s.val.num_documents(), 200);
  EXPECT_EQ(s.train.num_tokens() + s.val.num_tokens(), s.sources[0].bytes + 200);
  EXPECT_GT(s.val.num_samples(16), 0);
  EXPECT_NE(s.summary(16).find("200 documents"), std::string::npos) << s.summary(16);
  Loader loader(s.train, 16, 4, 1234);
  EvalLoader eval(s.val, 16, 4);
  EXPECT_GT(s.val.unigram_entropy(), 1.0);
  cfg.seq_len = 100000;
  EXPECT_THROW(build_datasets(cfg), UserError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt
