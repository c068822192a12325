// `lmtrain prepare`: sources -> token store. Everything that needs no accelerator happens here,
// ahead of training: reading every source (data/schema.h), rendering templates, tokenizing on all
// cores, splitting documents into train and validation by a hash of their content, and writing
// one train and one validation shard per source (data/token_store.h) plus manifest.json.
//
// It streams: a reader thread fills batches of a few MiB of documents into a queue two deep,
// the main thread and its workers tokenize each batch on all cores, then append it to the shards in
// source order. Memory stays at a few batches whatever the input size, and the output is the same
// for any thread count. The store is built in DIR.tmp-PID and renamed to DIR when complete.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/document.h"
#include "data/manifest.h"
#include "data/text_source.h"
#include "data/tokenizer/tokenizer.h"

namespace lmt {

struct PrepareOptions {
  std::vector<TextSourceSpec> sources;
  std::string tokenizer = "bytes";
  int64_t seq_len = 256;
  double val_fraction = 0.05;
  std::string packing = "auto";  // auto (text: continue, instruction/chat: bin) | continue | bin
  std::string out_dir;
  bool progress = true;                // progress lines on stderr, at most one per second
  int64_t batch_bytes = int64_t{1} << 20;  // text per tokenization batch
};

// Any DataConfig-like struct (sources, tokenizer, seq_len, val_fraction, packing).
template <class D>
PrepareOptions prepare_options(const D& data, std::string out_dir) {
  PrepareOptions o;
  for (const auto& s : data.sources) o.sources.push_back(to_text_source_spec(s));
  o.tokenizer = data.tokenizer;
  o.seq_len = data.seq_len;
  o.val_fraction = data.val_fraction;
  o.packing = data.packing;
  o.out_dir = std::move(out_dir);
  return o;
}

// Builds the store; returns its manifest. Throws UserError for bad options (naming the key),
// any source problem (FILE:LINE), or an output directory that cannot be written.
Manifest prepare_store(const PrepareOptions& opt);

// The number in [0, 1) that decides a document's split: a 64-bit FNV-1a hash of its bytes, mixed
// by the splitmix64 finaliser. Documents below val_fraction go to validation; the split is stable
// across runs, machines and source order, and repeated documents never straddle it.
double document_split_value(std::string_view doc);

// Tokens of one document, with a mask byte per token (1 = a loss target). A document of several
// segments is encoded whole (as Hugging Face encodes a rendered chat), each token in the loss when
// its last byte is. Adds the tokenizer's special prefix (mask 0) and suffix, or its EOS when it
// defines no suffix, unless the document carries its own special tokens (has_special); no suffix
// after a template's end-of-turn marker (ends_turn). The suffix is a target (mask 1) for
// pretraining text (`text_schema`: the model learns to end a document) and where the document
// ends on learned text (a plain-template answer: the model learns to stop), else not.
void tokenize_document(const Tokenizer& tok, const Document& doc, bool text_schema,
                       std::vector<int32_t>& ids, std::vector<uint8_t>& mask);

// A few lines for a log: per source, documents and tokens of each split, skipped records.
std::string manifest_summary(const Manifest& m);

}  // namespace lmt
