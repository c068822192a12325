// Deterministic, resumable, rank-sharded, prefetched batches; see loader.h.
#include "data/loader.h"

#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "data/mixture.h"

namespace lmt {

void to_json(nlohmann::json& j, const LoaderState& s) {
  j = nlohmann::json{{"seed", s.seed}, {"epoch", s.epoch}, {"index", s.index}};
}

void from_json(const nlohmann::json& j, LoaderState& s) {
  // Integers only: get<int64_t> of a number out of range (1e30) is undefined behaviour.
  auto integer = [&](const char* key) -> const nlohmann::json& {
    const nlohmann::json& v = j.at(key);
    if (!v.is_number_integer())
      throw UserError(std::string("loader state: '") + key + "' must be an integer (got " +
                      excerpt(v.dump()) + ")");
    return v;
  };
  try {
    s.seed = integer("seed").get<uint64_t>();
    s.epoch = integer("epoch").get<int64_t>();
    s.index = integer("index").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw UserError(std::string("loader state: ") + e.what());
  }
}

void packed_layout(const std::vector<std::vector<int32_t>>& starts, int64_t seq_len,
                   int32_t* doc_start, int32_t* positions) {
  for (size_t r = 0; r < starts.size(); ++r) {
    int32_t* ds = doc_start + static_cast<int64_t>(r) * seq_len;
    int32_t* ps = positions + static_cast<int64_t>(r) * seq_len;
    int32_t cur = 0;
    size_t k = 0;
    for (int64_t j = 0; j < seq_len; ++j) {
      while (k < starts[r].size() && starts[r][k] <= j) cur = starts[r][k++];
      ds[j] = cur;
      ps[j] = static_cast<int32_t>(j - cur);
    }
  }
}

Loader::Loader(const SampleSet& data, int64_t micro_batch, uint64_t seed, int rank, int world,
               int prefetch)
    : data_(data), micro_batch_(micro_batch), rank_(rank), world_(world), prefetch_(prefetch) {
  LMT_CHECK(micro_batch >= 1 && world >= 1 && rank >= 0 && rank < world && prefetch >= 0);
  data.require_samples();
  for (int i = 0; i < data.num_sources(); ++i) {
    source_sizes_.push_back(data.source_samples(i));
    source_weights_.push_back(data.weight(i));
  }
  state_.seed = seed;
  start();
}

Loader::~Loader() {
  stop();
}

Batch Loader::assemble(Cursor& c) const {
  const int64_t T = data_.seq_len(), n = data_.num_samples(), global = micro_batch_ * world_;
  Batch b;
  b.ids.resize(static_cast<size_t>(micro_batch_ * T));
  b.labels.resize(b.ids.size());
  b.positions.resize(b.ids.size());
  b.doc_starts.resize(static_cast<size_t>(micro_batch_));
  for (int64_t k = 0; k < global; ++k) {
    if (c.order_epoch != c.pos.epoch) {
      c.order = epoch_order(c.pos.seed, c.pos.epoch, source_sizes_, source_weights_);
      c.order_epoch = c.pos.epoch;
    }
    if (k / micro_batch_ == rank_) {
      const int64_t row = k % micro_batch_, id = c.order[static_cast<size_t>(c.pos.index)];
      data_.fill(id, &b.ids[row * T], &b.labels[row * T], &b.positions[row * T],
                 &b.doc_starts[row]);
      b.samples.push_back(id);
    }
    if (++c.pos.index == n) {
      ++c.pos.epoch;
      c.pos.index = 0;
    }
  }
  b.after = c.pos;
  return b;
}

void Loader::produce() {
  try {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || static_cast<int>(queue_.size()) < prefetch_; });
        if (stopping_) return;
      }
      Batch b = assemble(cursor_);
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(b));
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

void Loader::start() {
  cursor_ = Cursor{state_, -1, {}};
  if (prefetch_ == 0) return;
  stopping_ = false;
  producer_ = std::thread([this] { produce(); });
}

void Loader::stop() {
  if (producer_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    producer_.join();
  }
  queue_.clear();
  error_ = nullptr;
}

const Batch& Loader::next() {
  if (prefetch_ == 0) {
    current_ = assemble(cursor_);
  } else {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (error_) std::rethrow_exception(error_);
    current_ = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
  }
  state_ = current_.after;
  return current_;
}

void Loader::next(int32_t* ids, int32_t* labels) {
  const Batch& b = next();
  std::memcpy(ids, b.ids.data(), b.ids.size() * sizeof(int32_t));
  std::memcpy(labels, b.labels.data(), b.labels.size() * sizeof(int32_t));
}

void Loader::set_state(const LoaderState& s) {
  if (s.epoch < 0 || s.index < 0 || s.index >= num_samples())
    throw UserError("loader state: epoch " + std::to_string(s.epoch) + ", index " +
                    std::to_string(s.index) + " is outside the " + std::to_string(num_samples()) +
                    " samples of the " + data_.name() + " split (did the data or seq_len change?)");
  stop();
  state_ = s;
  start();
}

EvalLoader::EvalLoader(const SampleSet& data, int64_t micro_batch, int rank, int world)
    : data_(data), micro_batch_(micro_batch), rank_(rank), world_(world), end_(data.num_samples()) {
  LMT_CHECK(micro_batch >= 1 && world >= 1 && rank >= 0 && rank < world);
  data.require_samples();
  shuffle_order();
}

EvalLoader::EvalLoader(const SampleSet& data, int64_t micro_batch, int source, int rank, int world)
    : data_(data),
      micro_batch_(micro_batch),
      rank_(rank),
      world_(world),
      begin_(data.source_offset(source)),
      end_(data.source_offset(source) + data.source_samples(source)) {
  LMT_CHECK(micro_batch >= 1 && world >= 1 && rank >= 0 && rank < world && source >= 0 &&
            source < data.num_sources());
  LMT_CHECK(end_ > begin_, "EvalLoader: source " + std::to_string(source) + " has no samples");
  shuffle_order();
}

void EvalLoader::shuffle_order() {
  order_.resize(static_cast<size_t>(end_ - begin_));
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int64_t>(i);
  Rng r(0x5eed0e7a1ULL, 0);  // Fisher-Yates with a constant seed: the same order every run
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[r.below(i)]);
}

void EvalLoader::next(int32_t* ids, int32_t* labels, int32_t* doc_start, int32_t* positions) {
  const int64_t T = data_.seq_len(), n = end_ - begin_;
  const int64_t first = position_ + rank_ * micro_batch_;
  std::vector<int32_t> in_doc(static_cast<size_t>(T));
  std::vector<std::vector<int32_t>> starts(static_cast<size_t>(micro_batch_));
  for (int64_t b = 0; b < micro_batch_; ++b)
    data_.fill(begin_ + order_[static_cast<size_t>((first + b) % n)], ids + b * T, labels + b * T,
               in_doc.data(), &starts[b]);
  if (doc_start && positions) packed_layout(starts, T, doc_start, positions);
  position_ = (position_ + micro_batch_ * world_) % n;
}

int64_t EvalLoader::batches_per_pass() const {
  const int64_t global = micro_batch_ * world_;
  return (num_samples() + global - 1) / global;
}

}  // namespace lmt
