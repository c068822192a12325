// Checksums of files lmtrain writes and reads back (checkpoints, exports, token store shards):
// XXH3-128 (libxxhash; its dispatching entry points use AVX2 / AVX-512 where the CPU has them),
// written "xxh3_128:<32 hex digits>". A checksum catches damage (a flipped bit, a truncated or
// rewritten file), not a deliberate forgery.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace lmt {

// Hashes bytes given in pieces.
class StreamHash {
 public:
  StreamHash();
  ~StreamHash();
  StreamHash(const StreamHash&) = delete;
  StreamHash& operator=(const StreamHash&) = delete;
  void update(const void* data, size_t n);
  std::string digest() const;  // "xxh3_128:<hex>" of everything given so far

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The checksum of a byte range in memory.
std::string checksum_bytes(const void* data, size_t n);

// The checksum of a whole file, read in blocks (bounded memory); its size in *bytes when not null.
// UserError naming `what` and the path when it cannot be read.
std::string checksum_file(const std::string& path, const std::string& what,
                          uint64_t* bytes = nullptr);

}  // namespace lmt
