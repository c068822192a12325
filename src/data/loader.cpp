// Deterministic, resumable, rank-sharded batches; see loader.h.
#include "data/loader.h"

#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace lmt {

void to_json(nlohmann::json& j, const LoaderState& s) {
  j = nlohmann::json{{"seed", s.seed}, {"epoch", s.epoch}, {"index", s.index}};
}

void from_json(const nlohmann::json& j, LoaderState& s) {
  try {
    s.seed = j.at("seed").get<uint64_t>();
    s.epoch = j.at("epoch").get<int64_t>();
    s.index = j.at("index").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw UserError(std::string("loader state: ") + e.what());
  }
}

std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  Rng rng(seed, kLoaderStream + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(p[i], p[static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1))]);
  return p;
}

Loader::Loader(const TokenDataset& data, int64_t seq_len, int64_t micro_batch, uint64_t seed,
               int rank, int world)
    : data_(data),
      seq_len_(seq_len),
      micro_batch_(micro_batch),
      num_samples_(data.num_samples(seq_len)),
      rank_(rank),
      world_(world),
      seed_(seed) {
  LMT_CHECK(micro_batch >= 1 && world >= 1 && rank >= 0 && rank < world);
  data.require_samples(seq_len);
}

void Loader::ensure_permutation() {
  if (perm_epoch_ == epoch_) return;
  perm_ = epoch_permutation(seed_, epoch_, num_samples_);
  perm_epoch_ = epoch_;
}

void Loader::advance(std::vector<int64_t>& mine) {
  const int64_t global = micro_batch_ * world_;
  for (int64_t k = 0; k < global; ++k) {
    ensure_permutation();
    if (k / micro_batch_ == rank_) mine.push_back(perm_[static_cast<size_t>(index_)]);
    if (++index_ == num_samples_) {
      ++epoch_;
      index_ = 0;
    }
  }
}

std::vector<int64_t> Loader::next_indices() {
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(micro_batch_));
  advance(mine);
  return mine;
}

void Loader::next(int32_t* ids, int32_t* labels) {
  std::vector<int64_t> mine = next_indices();
  for (size_t b = 0; b < mine.size(); ++b)
    data_.sample(mine[b], seq_len_, ids + b * seq_len_, labels + b * seq_len_);
}

void Loader::set_state(const LoaderState& s) {
  if (s.epoch < 0 || s.index < 0 || s.index >= num_samples_)
    throw UserError("loader state: epoch " + std::to_string(s.epoch) + ", index " +
                    std::to_string(s.index) + " is outside the " + std::to_string(num_samples_) +
                    " samples of the " + data_.name() + " split (did the data or seq_len change?)");
  seed_ = s.seed;
  epoch_ = s.epoch;
  index_ = s.index;
  perm_epoch_ = -1;
}

EvalLoader::EvalLoader(const TokenDataset& data, int64_t seq_len, int64_t micro_batch, int rank,
                       int world)
    : data_(data),
      seq_len_(seq_len),
      micro_batch_(micro_batch),
      num_samples_(data.num_samples(seq_len)),
      rank_(rank),
      world_(world) {
  LMT_CHECK(micro_batch >= 1 && world >= 1 && rank >= 0 && rank < world);
  data.require_samples(seq_len);
}

void EvalLoader::next(int32_t* ids, int32_t* labels) {
  const int64_t first = position_ + rank_ * micro_batch_;
  for (int64_t b = 0; b < micro_batch_; ++b)
    data_.sample((first + b) % num_samples_, seq_len_, ids + b * seq_len_, labels + b * seq_len_);
  position_ = (position_ + micro_batch_ * world_) % num_samples_;
}

int64_t EvalLoader::batches_per_pass() const {
  const int64_t global = micro_batch_ * world_;
  return (num_samples_ + global - 1) / global;
}

}  // namespace lmt
