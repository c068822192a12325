// The BPE tokenizer's per-thread word cache (word -> ids), so encoding scales across threads with
// no lock. Each thread keeps up to kSlots caches, one per tokenizer it used last, named by a serial
// that is never reused (so a cache never outlives the tokenizer it belongs to). A cache is an
// open-addressing table over flat arrays: a lookup touches one 8-byte slot (a 32-bit hash tag and
// an entry index) and, on a tag match, the entry and its key bytes, where std::unordered_map's node
// walk missed the CPU cache on most words. Words up to kMaxWordBytes are cached until a cache holds
// kMaxWords; then it keeps what it has, as HF's cache does (clearing it instead thrashed on streams
// of unique words such as numbers). A full cache takes about 4 MB.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lmt {

class WordCache {
 public:
  static constexpr size_t kSlots = 4;
  static constexpr size_t kMaxWords = 1 << 17;
  static constexpr size_t kMaxWordBytes = 128;

  uint64_t serial = 0;  // the tokenizer it belongs to; 0: none

  void clear();
  // Appends the cached ids of `word` (hash `h`) to `out`; false when it is not cached.
  bool find(std::string_view word, uint64_t h, std::vector<int32_t>& out) const {
    if (slots_.empty()) return false;
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot s = slots_[i];
      if (s.index == 0) return false;
      if (s.tag != static_cast<uint32_t>(h >> 32)) continue;
      const Entry& e = entries_[s.index - 1];
      if (std::string_view(keys_).substr(e.key_off, e.key_len) != word) continue;
      out.insert(out.end(), ids_.begin() + e.ids_off, ids_.begin() + e.ids_off + e.ids_len);
      return true;
    }
  }
  // Caches `ids` for a word not cached yet, while there is room.
  void insert(std::string_view word, uint64_t h, const std::vector<int32_t>& ids);

 private:
  struct Slot {
    uint32_t tag = 0, index = 0;  // index: entry + 1; 0: empty
  };
  struct Entry {
    uint32_t key_off, key_len, ids_off, ids_len;
  };
  std::vector<Slot> slots_;  // a power of two, at most half full
  std::vector<Entry> entries_;
  std::string keys_;
  std::vector<int32_t> ids_;
};

// A serial for a new tokenizer (never 0, never reused).
uint64_t new_word_cache_serial();
// This thread's cache for the tokenizer `serial`, taking over the least recently claimed slot
// (emptied) when the thread has none for it yet.
WordCache& thread_word_cache(uint64_t serial);

}  // namespace lmt
