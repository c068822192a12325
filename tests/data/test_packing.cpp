// Packing plans and fill_sample. continue: windows of seq_len + 1 over the range's stream, every
// token after the first a label exactly once, the tail that fills no window dropped and counted.
// bin: every document that fits in exactly one sample, unsplit, in the order a naive first-fit
// decreasing gives. fill_sample: ids, mask-aware labels, positions and document starts against
// values computed here from the documents themselves.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "data/packing.h"
#include "store_test_util.h"

namespace lmt {
namespace {

using namespace store_test;

std::vector<int64_t> random_lengths(std::mt19937_64& rng, int n, int64_t max_len, bool zeros) {
  std::vector<int64_t> l(static_cast<size_t>(n));
  for (auto& x : l) {
    x = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_len));
    if (zeros && rng() % 9 == 0) x = 0;
  }
  return l;
}

TEST(Packing, ParseMode) {
  EXPECT_EQ(parse_packing_mode("continue", "data.packing"), PackingMode::kContinue);
  EXPECT_EQ(parse_packing_mode("bin", "data.packing"), PackingMode::kBin);
  try {
    parse_packing_mode("pack", "data.packing");
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("data.packing"), std::string::npos);
  }
}

TEST(Packing, ContinueCoversEveryLabelOnce) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = static_cast<int>(rng() % 40);
    std::vector<int64_t> lengths =
        random_lengths(rng, n, 1 + static_cast<int64_t>(rng() % 60), true);
    const int64_t b = n ? static_cast<int64_t>(rng() % (n + 1)) : 0;
    const int64_t e = b + static_cast<int64_t>(rng() % (n - b + 1));
    const int64_t L = 1 + static_cast<int64_t>(rng() % 33);
    PackingPlan plan(lengths, b, e, L, PackingMode::kContinue);
    // The range's stream: (doc, offset) of each token.
    std::vector<std::pair<int64_t, int64_t>> stream;
    for (int64_t d = b; d < e; ++d)
      for (int64_t k = 0; k < lengths[d]; ++k) stream.push_back({d, k});
    const int64_t total = static_cast<int64_t>(stream.size());
    const int64_t ns = total >= 1 ? (total - 1) / L : 0;
    ASSERT_EQ(plan.num_samples(), ns);
    EXPECT_EQ(plan.dropped_tokens(), ns ? total - (ns * L + 1) : total);
    EXPECT_LT(plan.dropped_tokens(), ns ? L : total + 1);
    int64_t tail_docs = 0;  // documents wholly after the last window
    for (int64_t d = b, at = 0; d < e; at += lengths[d], ++d)
      tail_docs += lengths[d] > 0 && at >= (ns ? ns * L + 1 : 0);
    EXPECT_EQ(plan.dropped_documents(), tail_docs);
    std::vector<int> label_count(static_cast<size_t>(total), 0);
    for (int64_t i = 0; i < ns; ++i) {
      std::vector<SamplePiece> ps = plan.pieces(i);
      int64_t j = 0;
      for (const SamplePiece& p : ps) {
        ASSERT_GT(p.length, 0);
        for (int64_t k = 0; k < p.length; ++k, ++j) {
          ASSERT_EQ(stream[i * L + j], std::make_pair(p.doc, p.begin + k));
          if (j >= 1) ++label_count[i * L + j];
        }
      }
      ASSERT_EQ(j, L + 1);  // every sample is full
    }
    for (int64_t t = 0; t < total; ++t)
      ASSERT_EQ(label_count[t], t >= 1 && t <= ns * L ? 1 : 0) << "token " << t;
    EXPECT_THROW(plan.pieces(ns), InternalError);
  }
  // The edges of the sample count.
  std::vector<int64_t> one = {5};
  EXPECT_EQ(PackingPlan(one, 0, 1, 5, PackingMode::kContinue).num_samples(), 0);
  EXPECT_EQ(PackingPlan(one, 0, 1, 4, PackingMode::kContinue).num_samples(), 1);
  EXPECT_EQ(PackingPlan(one, 0, 0, 4, PackingMode::kContinue).num_samples(), 0);
}

// First-fit decreasing the slow, obvious way.
std::vector<std::vector<int64_t>> naive_ffd(const std::vector<int64_t>& lengths, int64_t b,
                                            int64_t e, int64_t cap) {
  std::vector<int64_t> order;
  for (int64_t d = b; d < e; ++d)
    if (lengths[d] > 0 && lengths[d] <= cap) order.push_back(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return lengths[x] > lengths[y]; });
  std::vector<std::vector<int64_t>> bins;
  std::vector<int64_t> used;
  for (int64_t d : order) {
    size_t k = 0;
    while (k < bins.size() && used[k] + lengths[d] > cap) ++k;
    if (k == bins.size()) bins.emplace_back(), used.push_back(0);
    bins[k].push_back(d);
    used[k] += lengths[d];
  }
  return bins;
}

TEST(Packing, BinIsFirstFitDecreasingOfWholeDocuments) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = static_cast<int>(rng() % 120);
    const int64_t L = 1 + static_cast<int64_t>(rng() % 40);
    // Few distinct lengths, so ties are common; some exactly L + 1, some longer.
    std::vector<int64_t> lengths = random_lengths(rng, n, L + 6, true);
    if (trial % 2)
      for (auto& x : lengths) x = std::min<int64_t>(x, 1 + x % 4);
    const int64_t b = n ? static_cast<int64_t>(rng() % (n + 1)) : 0;
    const int64_t e = b + static_cast<int64_t>(rng() % (n - b + 1));
    PackingPlan plan(lengths, b, e, L, PackingMode::kBin);
    PackingPlan again(lengths, b, e, L, PackingMode::kBin);
    auto want = naive_ffd(lengths, b, e, L + 1);
    ASSERT_EQ(plan.num_samples(), static_cast<int64_t>(want.size()));
    int64_t dropped = 0, dropped_tokens = 0;
    for (int64_t d = b; d < e; ++d)
      if (lengths[d] > L + 1) ++dropped, dropped_tokens += lengths[d];
    EXPECT_EQ(plan.dropped_documents(), dropped);
    EXPECT_EQ(plan.dropped_tokens(), dropped_tokens);
    std::vector<int> seen(lengths.size(), 0);
    for (int64_t i = 0; i < plan.num_samples(); ++i) {
      std::vector<SamplePiece> ps = plan.pieces(i), ps2 = again.pieces(i);
      ASSERT_EQ(ps.size(), want[i].size());
      ASSERT_EQ(ps2.size(), ps.size());
      int64_t sum = 0;
      for (size_t k = 0; k < ps.size(); ++k) {
        EXPECT_EQ(ps[k].doc, want[i][k]) << "sample " << i << " piece " << k;
        EXPECT_EQ(ps2[k].doc, ps[k].doc);
        EXPECT_EQ(ps[k].begin, 0);
        EXPECT_EQ(ps[k].length, lengths[ps[k].doc]);
        ++seen[ps[k].doc];
        sum += ps[k].length;
      }
      EXPECT_LE(sum, L + 1);
    }
    for (int64_t d = 0; d < n; ++d)
      EXPECT_EQ(seen[d], d >= b && d < e && lengths[d] > 0 && lengths[d] <= L + 1 ? 1 : 0);
  }
}

TEST(Packing, BinHandExample) {
  // seq_len 9 (capacity 10): lengths 6 4 4 3 11 2 -> FFD: [6 4] [4 3 2]; 11 dropped.
  std::vector<int64_t> l = {6, 4, 4, 3, 11, 2};
  PackingPlan p(l, 0, 6, 9, PackingMode::kBin);
  ASSERT_EQ(p.num_samples(), 2);
  auto docs = [&](int64_t s) {
    std::vector<int64_t> d;
    for (auto& x : p.pieces(s)) d.push_back(x.doc);
    return d;
  };
  EXPECT_EQ(docs(0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(docs(1), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(p.dropped_documents(), 1);
  EXPECT_EQ(p.dropped_tokens(), 11);
}

// A store whose token k of document d is d * 10000 + k, with a random mask.
struct TestStore {
  TempDir dir;
  std::vector<std::vector<int32_t>> docs;
  std::vector<std::vector<uint8_t>> masks;
  std::vector<int64_t> lengths;
  std::unique_ptr<TokenStore> store;
  TestStore(std::mt19937_64& rng, int n, int64_t max_len, int64_t min_len = 1) {
    TokenStoreWriter w(dir / "s", StoreDtype::kInt32, true);
    for (int d = 0; d < n; ++d) {
      int64_t len =
          min_len + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_len - min_len + 1));
      std::vector<int32_t> t(static_cast<size_t>(len));
      std::vector<uint8_t> m(t.size());
      for (int64_t k = 0; k < len; ++k) t[k] = static_cast<int32_t>(d * 10000 + k);
      for (auto& x : m) x = rng() % 3 != 0;
      w.add_document(t, m);
      docs.push_back(t), masks.push_back(m), lengths.push_back(len);
    }
    w.finish();
    store = std::make_unique<TokenStore>(dir / "s");
  }
};

// What fill_sample must give for these pieces, from the documents themselves.
void check_sample(const TestStore& ts, const std::vector<SamplePiece>& ps, int64_t L) {
  std::vector<int32_t> tok, pos;
  std::vector<uint8_t> msk;
  std::vector<int32_t> starts;
  for (const SamplePiece& p : ps) {
    if (static_cast<int64_t>(tok.size()) < L) starts.push_back(static_cast<int32_t>(tok.size()));
    for (int64_t k = 0; k < p.length; ++k) {
      tok.push_back(ts.docs[p.doc][p.begin + k]);
      msk.push_back(ts.masks[p.doc][p.begin + k]);
      pos.push_back(static_cast<int32_t>(p.begin + k));
    }
  }
  if (static_cast<int64_t>(tok.size()) < L) starts.push_back(static_cast<int32_t>(tok.size()));
  for (int32_t k = 0; static_cast<int64_t>(tok.size()) < L + 1; ++k)
    tok.push_back(0), msk.push_back(0), pos.push_back(k);
  std::vector<int32_t> ids(L), labels(L), positions(L), doc_starts = {99, 98};
  fill_sample(*ts.store, ps, L, ids.data(), labels.data(), positions.data(), &doc_starts);
  for (int64_t j = 0; j < L; ++j) {
    ASSERT_EQ(ids[j], tok[j]) << j;
    ASSERT_EQ(labels[j], msk[j + 1] ? tok[j + 1] : kNoLabel) << j;
    ASSERT_EQ(positions[j], pos[j]) << j;
  }
  ASSERT_EQ(doc_starts, starts);
  ASSERT_EQ(doc_starts.front(), 0);
}

TEST(Packing, FillSampleContinueAndBin) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TestStore ts(rng, 60, 50);
  for (int64_t L : {1, 2, 7, 16, 51, 64}) {
    for (PackingMode mode : {PackingMode::kContinue, PackingMode::kBin}) {
      PackingPlan plan(ts.lengths, 3, 57, L, mode);
      for (int64_t i = 0; i < plan.num_samples(); ++i) check_sample(ts, plan.pieces(i), L);
    }
  }
}

TEST(Packing, FillSampleHandExamples) {
  std::mt19937_64 rng(fresh_seed());
  TestStore ts(rng, 3, 20, 12);
  const int32_t L = 8;
  std::vector<int32_t> ids(L), labels(L), positions(L), starts;
  // Two whole documents of 3 and 4 tokens, then padding.
  std::vector<SamplePiece> ps = {{0, 0, 3}, {1, 0, 4}};
  fill_sample(*ts.store, ps, L, ids.data(), labels.data(), positions.data(), &starts);
  EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0}));
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 3, 7}));
  EXPECT_EQ(ids[7], 0);
  EXPECT_EQ(labels[6], kNoLabel);  // the next token is padding
  EXPECT_EQ(labels[7], kNoLabel);
  // A document that began in an earlier sample: positions continue, no start but 0.
  ps = {{1, 2, 9}};
  fill_sample(*ts.store, ps, L, ids.data(), labels.data(), positions.data(), &starts);
  EXPECT_EQ(positions, (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(starts, (std::vector<int32_t>{0}));
  // Pieces that fill the window exactly; the last one begins at index seq_len (the slot that is
  // only a label), so it is no start, and there is no padding.
  ps = {{1, 0, 5}, {2, 0, 3}, {0, 0, 1}};
  fill_sample(*ts.store, ps, L, ids.data(), labels.data(), positions.data(), &starts);
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 5}));
  EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2}));
  EXPECT_THROW(fill_sample(*ts.store, {{0, 0, 3}, {1, 0, 7}}, L, ids.data(), labels.data(),
                           positions.data(), &starts),
               InternalError);
}

}  // namespace
}  // namespace lmt
