// The loader over a store: deterministic shuffles, every sample once per epoch, exact resume
// (also across epoch boundaries), rank slices that add up to the single-rank batch, prefetching
// that changes nothing, weighted mixing, and EvalLoader's fixed order.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/error.h"
#include "data/loader.h"
#include "prepare_util.h"

namespace lmt {
namespace {

using test::TempDir;

struct Store {
  TempDir dir{"loader"};
  Manifest m;
  std::unique_ptr<SampleSet> train, val;
  Store(std::vector<std::pair<int, double>> sources, int64_t seq_len) {
    PrepareOptions opt;
    for (size_t s = 0; s < sources.size(); ++s)
      opt.sources.push_back(test::line_source(
          test::write_lines(dir.path / ("s" + std::to_string(s) + ".txt"),
                            test::numbered_docs(sources[s].first, static_cast<int>(s))),
          sources[s].second));
    opt.seq_len = seq_len;
    opt.val_fraction = 0.1;
    opt.out_dir = (dir.path / "store").string();
    opt.progress = false;
    m = prepare_store(opt);
    train = std::make_unique<SampleSet>(opt.out_dir, m, false, seq_len);
    val = std::make_unique<SampleSet>(opt.out_dir, m, true, seq_len);
  }
};

TEST(Loader, SameSeedSameOrderAndEverySampleOncePerEpoch) {
  Store st({{60, 1.0}}, 16);
  const int64_t n = st.train->num_samples();
  ASSERT_GT(n, 20);
  Loader a(*st.train, 1, 42), b(*st.train, 1, 42, 0, 1, 0), c(*st.train, 1, 43);
  std::vector<int64_t> ea, eb, ec;
  for (int64_t i = 0; i < n; ++i) {
    ea.push_back(a.next().samples[0]);
    eb.push_back(b.next().samples[0]);
    ec.push_back(c.next().samples[0]);
  }
  EXPECT_EQ(ea, eb) << "prefetching must not change the order";
  EXPECT_NE(ea, ec) << "another seed, another order";
  EXPECT_EQ(std::set<int64_t>(ea.begin(), ea.end()).size(), static_cast<size_t>(n));
  std::vector<int64_t> second;
  for (int64_t i = 0; i < n; ++i) second.push_back(a.next().samples[0]);
  EXPECT_NE(second, ea) << "each epoch has its own shuffle";
  EXPECT_EQ(a.get_state().epoch, 2);
  EXPECT_EQ(a.get_state().index, 0);
}

TEST(Loader, BatchesCarryTheSampleContent) {
  Store st({{40, 1.0}}, 8);
  Loader loader(*st.train, 3, 7);
  const int64_t T = 8;
  for (int k = 0; k < 10; ++k) {
    const Batch& b = loader.next();
    ASSERT_EQ(b.samples.size(), 3u);
    for (int r = 0; r < 3; ++r) {
      std::vector<int32_t> ids(T), labels(T), pos(T);
      std::vector<int32_t> starts;
      st.train->fill(b.samples[r], ids.data(), labels.data(), pos.data(), &starts);
      EXPECT_EQ(std::vector<int32_t>(b.ids.begin() + r * T, b.ids.begin() + (r + 1) * T), ids);
      EXPECT_EQ(std::vector<int32_t>(b.labels.begin() + r * T, b.labels.begin() + (r + 1) * T),
                labels);
      EXPECT_EQ(b.doc_starts[r], starts);
      for (int j = 0; j + 1 < T; ++j) EXPECT_EQ(labels[j], ids[j + 1]);  // continue packing
    }
  }
}

TEST(Loader, ResumeReproducesTheUninterruptedRunAcrossEpochs) {
  Store st({{30, 1.0}, {20, 0.5}}, 8);
  const int64_t n = st.train->num_samples();
  for (int64_t stop : {int64_t{1}, n / 3, n / 3 + 1, 2 * n / 3}) {  // batches of 3 cross epochs
    Loader full(*st.train, 3, 99);
    std::vector<int64_t> want;
    for (int64_t k = 0; k < stop + n; ++k)
      for (int64_t id : full.next().samples) want.push_back(id);
    Loader first(*st.train, 3, 99);
    std::vector<int64_t> got;
    for (int64_t k = 0; k < stop; ++k)
      for (int64_t id : first.next().samples) got.push_back(id);
    nlohmann::json saved = first.get_state();  // through JSON, as a checkpoint does
    Loader resumed(*st.train, 3, 0);           // the seed comes from the state
    resumed.set_state(saved.get<LoaderState>());
    for (int64_t k = 0; k < n; ++k)
      for (int64_t id : resumed.next().samples) got.push_back(id);
    EXPECT_EQ(got, want) << "stopped after " << stop << " batches";
  }
}

TEST(Loader, TwoRanksReadTheSingleRankGlobalBatch) {
  Store st({{50, 1.0}, {25, 2.0}}, 8);
  Loader one(*st.train, 4, 3);
  Loader r0(*st.train, 2, 3, 0, 2), r1(*st.train, 2, 3, 1, 2);
  for (int k = 0; k < 3 * st.train->num_samples() / 4 + 5; ++k) {
    std::vector<int64_t> whole = one.next().samples;
    std::vector<int64_t> parts = r0.next().samples;
    for (int64_t id : r1.next().samples) parts.push_back(id);
    ASSERT_EQ(parts, whole) << "global batch " << k;
    ASSERT_EQ(r0.get_state(), one.get_state());
  }
}

TEST(Loader, SourcesAreDrawnByWeight) {
  Store st({{80, 1.0}, {20, 3.0}}, 8);
  const int64_t n = st.train->num_samples(), off1 = st.train->source_offset(1);
  Loader loader(*st.train, 1, 5);
  int64_t from1 = 0;
  for (int64_t k = 0; k < n; ++k) from1 += loader.next().samples[0] >= off1;
  // Weights 1 : 3 -> three quarters of the epoch from source 1 (largest remainder rounding).
  EXPECT_NEAR(static_cast<double>(from1), 0.75 * static_cast<double>(n), 1.0);
}

TEST(Loader, StateOutsideTheDataIsAUserError) {
  Store st({{30, 1.0}}, 8);
  Loader loader(*st.train, 2, 1);
  LoaderState s{1, 0, st.train->num_samples()};
  EXPECT_THROW(loader.set_state(s), UserError);
  Store tiny({{1, 1.0}}, 4096);
  EXPECT_THROW(Loader(*tiny.train, 1, 1), UserError);
}

TEST(PackedLayout, DocStartsAndPositionsPerToken) {
  std::vector<std::vector<int32_t>> starts{{0, 3, 4}, {0}};
  std::vector<int32_t> ds(12), pos(12);
  packed_layout(starts, 6, ds.data(), pos.data());
  EXPECT_EQ(ds, (std::vector<int32_t>{0, 0, 0, 3, 4, 4, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 0, 0, 1, 0, 1, 2, 3, 4, 5}));
}

TEST(EvalLoader, FixedOrderWrapsAndResets) {
  Store st({{200, 1.0}}, 8);
  const int64_t n = st.val->num_samples();
  ASSERT_GT(n, 2);
  EvalLoader ev(*st.val, 2);
  std::vector<int32_t> ids(16), labels(16), first(16);
  ev.next(first.data(), labels.data());
  for (int64_t k = 1; k < ev.batches_per_pass(); ++k) ev.next(ids.data(), labels.data());
  ev.reset();
  ev.next(ids.data(), labels.data());
  EXPECT_EQ(ids, first);
}

// Per-source validation: a loader over one source reads that source's samples, every one once a
// pass, and wraps within them.
TEST(EvalLoader, OneSourceReadsOnlyItsSamples) {
  Store st({{120, 1.0}, {200, 1.0}}, 8);
  ASSERT_EQ(st.val->num_sources(), 2);
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE(s);
    const int64_t n = st.val->source_samples(s);
    ASSERT_GT(n, 2);
    EvalLoader ev(*st.val, 1, s, 0, 1);
    EXPECT_EQ(ev.num_samples(), n);
    EXPECT_EQ(ev.batches_per_pass(), n);
    std::vector<int32_t> ids(8), labels(8), in_doc(8);
    std::set<std::vector<int32_t>> seen;
    for (int64_t k = 0; k < n; ++k) {
      ev.next(ids.data(), labels.data());
      seen.insert(ids);
    }
    std::set<std::vector<int32_t>> want;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int32_t> w(8), l(8);
      std::vector<int32_t> starts;
      st.val->fill(st.val->source_offset(s) + i, w.data(), l.data(), in_doc.data(), &starts);
      want.insert(w);
    }
    EXPECT_EQ(seen, want);
    std::vector<int32_t> again(8);
    ev.next(again.data(), labels.data());  // wrapped to the source's first sample
    ev.reset();
    ev.next(ids.data(), labels.data());
    EXPECT_EQ(again, ids);
  }
}

}  // namespace
}  // namespace lmt

namespace lmt {
namespace {

// A store that is not what its manifest says is refused when it is opened, naming the file: a
// token dtype other than the manifest's, a .mask the manifest promises but that is missing (its
// prompts would count in the loss), an id at or above the model's vocabulary.
TEST(SampleSetChecks, StoreThatDisagreesWithItsManifestOrTheModelIsRefused) {
  Store st({{30, 1.0}}, 16);
  const std::string dir = (st.dir.path / "store").string();
  auto expect_error = [&](const Manifest& m, int64_t vocab, const std::string& what) {
    try {
      SampleSet s(dir, m, false, 16, vocab);
      ADD_FAILURE() << "expected a UserError containing: " << what;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Manifest m = st.m;
  ASSERT_EQ(m.dtype, "uint16");
  m.dtype = "int32";
  expect_error(m, 0, "train-00000.idx: holds uint16 tokens, the manifest says int32");
  m = st.m;
  m.sources[0].train.has_mask = true;
  expect_error(m, 0, "train-00000.mask: missing, but the manifest says the shard has a loss mask");
  // The byte tokenizer's ids: bytes, and 256 for the end of each document.
  expect_error(st.m, 256, "train-00000.bin: holds token id 256, not below model.vocab_size 256");
  EXPECT_NO_THROW(SampleSet(dir, st.m, false, 16, 257));
}

}  // namespace
}  // namespace lmt
