// Packing plans and sample materialisation; see packing.h. continue keeps only prefix sums of the
// document lengths and finds a sample's first document by binary search; bin runs first-fit
// decreasing once, with a max segment tree over the bins' free space so that "the leftmost bin
// with room" costs O(log n) and the whole plan O(n log n).
#include "data/packing.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"

namespace lmt {

PackingMode parse_packing_mode(const std::string& s, const std::string& key) {
  if (s == "continue") return PackingMode::kContinue;
  if (s == "bin") return PackingMode::kBin;
  throw UserError(key + ": '" + s + "' is not a packing mode (continue or bin)");
}

namespace {

// Free space of up to n bins. Bins not yet opened hold the full capacity, so the leftmost bin
// with room is either an open one or the next one to open.
class FirstFitTree {
 public:
  FirstFitTree(int64_t n, int64_t capacity) {
    while (leaves_ < std::max<int64_t>(n, 1)) leaves_ *= 2;
    free_.assign(static_cast<size_t>(2 * leaves_), capacity);
  }
  // Leftmost bin whose free space is at least `need` (need <= capacity).
  int64_t find(int64_t need) const {
    LMT_CHECK(free_[1] >= need);
    int64_t i = 1;
    while (i < leaves_) i = free_[2 * i] >= need ? 2 * i : 2 * i + 1;
    return i - leaves_;
  }
  void take(int64_t bin, int64_t amount) {
    int64_t i = bin + leaves_;
    free_[i] -= amount;
    for (i /= 2; i >= 1; i /= 2) free_[i] = std::max(free_[2 * i], free_[2 * i + 1]);
  }

 private:
  int64_t leaves_ = 1;
  std::vector<int64_t> free_;  // heap layout: node i has children 2i, 2i + 1; leaves at leaves_
};

}  // namespace

PackingPlan::PackingPlan(std::span<const int64_t> doc_lengths, int64_t doc_begin, int64_t doc_end,
                         int64_t seq_len, PackingMode mode)
    : seq_len_(seq_len), mode_(mode), doc_begin_(doc_begin) {
  LMT_CHECK(seq_len >= 1);
  LMT_CHECK(0 <= doc_begin && doc_begin <= doc_end &&
            doc_end <= static_cast<int64_t>(doc_lengths.size()));
  const int64_t n = doc_end - doc_begin;
  if (mode == PackingMode::kContinue) {
    offsets_.resize(static_cast<size_t>(n) + 1);
    offsets_[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
      LMT_CHECK(doc_lengths[doc_begin + i] >= 0);
      offsets_[i + 1] = offsets_[i] + doc_lengths[doc_begin + i];
    }
    // The tail after the last full window is never read: count it as dropped.
    const int64_t total = offsets_.back(), samples = num_samples();
    const int64_t covered = samples > 0 ? samples * seq_len + 1 : 0;
    dropped_tokens_ = total - covered;
    for (int64_t i = 0; i < n; ++i)
      if (offsets_[i] >= covered && offsets_[i + 1] > offsets_[i]) ++dropped_docs_;
    return;
  }
  const int64_t capacity = seq_len + 1;
  doc_lengths_.assign(doc_lengths.begin() + doc_begin, doc_lengths.begin() + doc_end);
  std::vector<int64_t> order;  // range-relative indices of the documents that fit
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = doc_lengths_[i];
    LMT_CHECK(len >= 0);
    if (len > capacity) {
      ++dropped_docs_;
      dropped_tokens_ += len;
    } else if (len > 0) {
      order.push_back(i);
    }
  }
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return doc_lengths_[a] != doc_lengths_[b] ? doc_lengths_[a] > doc_lengths_[b] : a < b;
  });
  FirstFitTree tree(static_cast<int64_t>(order.size()), capacity);
  std::vector<int64_t> bin_of(order.size());
  int64_t bins = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t len = doc_lengths_[order[k]];
    const int64_t b = tree.find(len);
    tree.take(b, len);
    bin_of[k] = b;
    bins = std::max(bins, b + 1);
  }
  // CSR, each bin's documents in the order they were placed (longest first).
  sample_begin_.assign(static_cast<size_t>(bins) + 1, 0);
  for (int64_t b : bin_of) ++sample_begin_[b + 1];
  std::partial_sum(sample_begin_.begin(), sample_begin_.end(), sample_begin_.begin());
  sample_docs_.resize(order.size());
  std::vector<int64_t> fill(sample_begin_.begin(), sample_begin_.end() - 1);
  for (size_t k = 0; k < order.size(); ++k) sample_docs_[fill[bin_of[k]]++] = order[k];
}

int64_t PackingPlan::num_samples() const {
  if (mode_ == PackingMode::kBin) return static_cast<int64_t>(sample_begin_.size()) - 1;
  const int64_t total = offsets_.back();
  return total >= 1 ? (total - 1) / seq_len_ : 0;
}

std::vector<SamplePiece> PackingPlan::pieces(int64_t sample) const {
  LMT_CHECK(sample >= 0 && sample < num_samples(),
            "sample " + std::to_string(sample) + " of " + std::to_string(num_samples()));
  std::vector<SamplePiece> out;
  if (mode_ == PackingMode::kBin) {
    for (int64_t k = sample_begin_[sample]; k < sample_begin_[sample + 1]; ++k) {
      const int64_t i = sample_docs_[k];
      out.push_back({doc_begin_ + i, 0, doc_lengths_[i]});
    }
    return out;
  }
  int64_t pos = sample * seq_len_;
  const int64_t end = pos + seq_len_ + 1;
  // The last document starting at or before pos; it holds pos, so it is not empty.
  int64_t i = std::upper_bound(offsets_.begin(), offsets_.end(), pos) - offsets_.begin() - 1;
  while (pos < end) {
    const int64_t doc_end = offsets_[i + 1];
    if (doc_end > pos) {
      const int64_t take = std::min(end, doc_end) - pos;
      out.push_back({doc_begin_ + i, pos - offsets_[i], take});
      pos += take;
    }
    ++i;
  }
  return out;
}

void fill_sample(const TokenStore& store, const std::vector<SamplePiece>& pieces, int64_t seq_len,
                 int32_t* ids, int32_t* labels, int32_t* positions,
                 std::vector<int32_t>* doc_starts) {
  const size_t window = static_cast<size_t>(seq_len) + 1;
  thread_local std::vector<int32_t> tok;  // the window's tokens and mask bytes; reused
  thread_local std::vector<uint8_t> mask;
  tok.assign(window, 0);
  mask.assign(window, 0);
  doc_starts->clear();
  int64_t j = 0;
  for (const SamplePiece& p : pieces) {
    if (p.length == 0) continue;
    LMT_CHECK(p.length > 0 && j + p.length <= seq_len + 1,
              "pieces longer than seq_len + 1 = " + std::to_string(seq_len + 1));
    store.read(p.doc, p.begin, p.length, tok.data() + j, mask.data() + j);
    LMT_CHECK(p.begin + p.length <= int64_t{INT32_MAX}, "position past 2^31");
    for (int64_t k = 0; k < p.length && j + k < seq_len; ++k)
      positions[j + k] = static_cast<int32_t>(p.begin + k);
    if (j < seq_len) doc_starts->push_back(static_cast<int32_t>(j));
    j += p.length;
  }
  if (j < seq_len) {  // padding: token 0, label kNoLabel, a segment of its own
    doc_starts->push_back(static_cast<int32_t>(j));
    for (int64_t k = j; k < seq_len; ++k) positions[k] = static_cast<int32_t>(k - j);
  }
  // tok and mask beyond j are already padding (0, 0).
  std::memcpy(ids, tok.data(), static_cast<size_t>(seq_len) * sizeof(int32_t));
  for (int64_t k = 0; k < seq_len; ++k) labels[k] = mask[k + 1] ? tok[k + 1] : kNoLabel;
}

}  // namespace lmt
