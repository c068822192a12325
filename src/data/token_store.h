// The token store on disk: documents of token ids in the Megatron-LM indexed format, so data that
// Megatron-LM or NeMo prepared can be used as it is, and what lmtrain writes can be read by them.
//
//   PREFIX.bin   the tokens of all documents, back to back, as uint16 (vocab <= 65536) or int32
//   PREFIX.idx   "MMIDIDX\0\0", u64 version 1, u8 dtype code (4 = int32, 8 = uint16),
//                u64 sequence count S, u64 document count D (= documents + 1),
//                i32 sequence_lengths[S], i64 sequence_pointers[S] (byte offset in .bin),
//                i64 document_indices[D] (first sequence of each document, then S)
//                (Megatron's multimodal stores add i8 sequence_modes[S]; lmtrain refuses them)
//   PREFIX.mask  (lmtrain's addition, optional) one uint8 per token of .bin, in the same order
//                (the mask of the token at byte offset p of .bin is byte p / token size):
//                1 when the token is a target of the loss, 0 when not (prompt, padding)
//
// lmtrain writes one sequence per document, so document i is sequence i. Files are read through
// mmap; a reader validates the whole index against the .bin size before handing out a token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lmt {

// Megatron's DType codes. lmtrain writes kUInt16 or kInt32; it also reads stores of the other
// integer codes (ids converted to int32; a read throws UserError on an id outside [0, 2^31)).
// The float codes (6, 7) are refused when a store is opened.
enum class StoreDtype : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt16 = 8,
};
int store_dtype_size(StoreDtype d);          // bytes per token
const char* store_dtype_name(StoreDtype d);  // "uint16", ...

// uint16 when every id of a vocabulary of this size fits, else int32.
StoreDtype store_dtype_for_vocab(int64_t vocab_size);

// Appends documents; finish() writes PREFIX.idx last (to PREFIX.idx.tmp, then renamed) so a store
// without its index is never mistaken for a complete one. Memory is O(documents), not O(tokens):
// tokens go straight to PREFIX.bin through a buffered writer.
class TokenStoreWriter {
 public:
  // Throws UserError naming the path when a file cannot be created. with_mask decides whether
  // PREFIX.mask is written (add_document's mask must then be given for every document).
  TokenStoreWriter(std::string prefix, StoreDtype dtype, bool with_mask);
  ~TokenStoreWriter();  // removes the partial files when finish() was not called
  TokenStoreWriter(const TokenStoreWriter&) = delete;
  TokenStoreWriter& operator=(const TokenStoreWriter&) = delete;

  // tokens: ids in [0, 65536) for uint16; mask: same length, 0/1 (ignored without with_mask).
  // Empty documents are not allowed (InternalError).
  void add_document(std::span<const int32_t> tokens, std::span<const uint8_t> mask = {});
  void finish();  // flushes, fsyncs, writes the index
  int64_t num_documents() const;
  int64_t num_tokens() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Read-only view of one PREFIX pair (and PREFIX.mask when present), mmapped.
class TokenStore {
 public:
  // Throws UserError naming the file for: a missing file, a bad magic/version/dtype code, counts
  // that do not match the .idx size, a negative sequence length, a pointer that is not a multiple
  // of the token size or runs past the .bin, document indices that do not start at 0, decrease or
  // do not end at the sequence count, a .mask whose size differs from the .bin's token count.
  // Megatron stores with several sequences per document are read as documents (the concatenation of
  // their sequences).
  explicit TokenStore(const std::string& prefix);
  ~TokenStore();
  TokenStore(TokenStore&&) noexcept;
  TokenStore& operator=(TokenStore&&) noexcept;

  const std::string& prefix() const;
  StoreDtype dtype() const;
  bool has_mask() const;
  int64_t num_documents() const;
  int64_t num_tokens() const;
  int64_t document_length(int64_t doc) const;  // tokens
  // Copies tokens [begin, begin + n) of document `doc` into out (as int32) and, when mask is not
  // null, their mask bytes into mask (all 1 when the store has no mask). Thread-safe. Throws
  // UserError naming the .bin for an id outside [0, 2^31) (possible only with signed or int64
  // dtypes); a range outside the document is an InternalError.
  void read(int64_t doc, int64_t begin, int64_t n, int32_t* out, uint8_t* mask = nullptr) const;
  // UserError naming the file when one of the store's files is no longer the one opened (its
  // size, modification time or identity changed): two stats and a comparison, cheap enough for
  // every step.
  void check_unchanged() const;
  // Largest token id in the store (scans once, then cached; thread-safe); -1 when empty.
  int32_t max_token_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmt
