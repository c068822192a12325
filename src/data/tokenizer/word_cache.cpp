// WordCache: insertion into the flat table, and the thread-local slots.
#include "data/tokenizer/word_cache.h"

#include <array>
#include <atomic>

namespace lmt {

void WordCache::clear() {
  slots_.assign(2 * kMaxWords, Slot{});
  entries_.clear();
  keys_.clear();
  ids_.clear();
}

void WordCache::insert(std::string_view word, uint64_t h, const std::vector<int32_t>& ids) {
  if (entries_.size() >= kMaxWords) return;
  if (slots_.empty()) clear();
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].index != 0) i = (i + 1) & mask;
  entries_.push_back({static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                      static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(ids.size())});
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  slots_[i] = {static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(entries_.size())};
}

uint64_t new_word_cache_serial() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

WordCache& thread_word_cache(uint64_t serial) {
  thread_local std::array<WordCache, WordCache::kSlots> slots;
  thread_local size_t next_slot = 0;
  for (WordCache& c : slots)
    if (c.serial == serial) return c;
  WordCache& c = slots[next_slot++ % WordCache::kSlots];
  c.serial = serial;
  c.clear();
  return c;
}

}  // namespace lmt
