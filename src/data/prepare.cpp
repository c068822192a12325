#include "data/prepare.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/output_lock.h"
#include "core/remove_on_error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/packing.h"
#include "data/schema.h"
#include "data/token_store.h"
#include "data/tokenizer/regex_split.h"

namespace lmt {

namespace fs = std::filesystem;

double document_split_value(std::string_view doc) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (char c : doc) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;  // splitmix64 finaliser: spreads FNV's weak high bits
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

namespace {

// The text's bytes where each token ends, when the tokens' single decodes put back together give
// the text exactly (bytes, byte-level BPE); false otherwise (Metaspace, SentencePiece).
bool token_ends(const Tokenizer& tok, std::string_view text, const std::vector<int32_t>& ids,
                std::vector<size_t>& ends) {
  ends.clear();
  size_t at = 0;
  for (int32_t id : ids) {
    const std::string piece = tok.decode({id});
    if (text.substr(at, piece.size()) != piece) return false;
    at += piece.size();
    ends.push_back(at);
  }
  return at == text.size();
}

// Tokens of a document of several segments: the text is encoded whole, as a chat template's
// output is by Hugging Face (encoding each segment on its own would cut pre-tokens and merges at
// every change of loss flag: chatml's "\n" after the header and "\n\n" opening the content become
// other tokens). A token counts in the loss when its last byte lies in a loss segment; where the
// tokens do not map back to bytes, a token belongs to the segment of the boundary after which it
// ends, found by encoding the text up to each boundary and matching the ids.
void encode_segments(const Tokenizer& tok, const std::vector<Segment>& segments,
                     std::vector<int32_t>& ids, std::vector<uint8_t>& mask) {
  std::string text;
  std::vector<size_t> bounds;  // end of each segment in `text`
  for (const Segment& s : segments) {
    text += s.text;
    bounds.push_back(text.size());
  }
  const std::vector<int32_t> whole = tok.encode(text);
  std::vector<size_t> ends;
  std::vector<uint8_t> m(whole.size(), 0);
  if (token_ends(tok, text, whole, ends)) {
    size_t seg = 0;
    for (size_t k = 0; k < whole.size(); ++k) {
      while (bounds[seg] < ends[k]) ++seg;
      m[k] = segments[seg].loss ? 1 : 0;
    }
  } else {
    size_t first = 0;  // first token of the current segment
    for (size_t seg = 0; seg < segments.size(); ++seg) {
      size_t last = whole.size();
      if (seg + 1 < segments.size()) {
        const std::vector<int32_t> prefix =
            tok.encode(std::string_view(text).substr(0, bounds[seg]));
        last = 0;
        while (last < prefix.size() && last < whole.size() && prefix[last] == whole[last]) ++last;
        last = std::max(last, first);
      }
      std::fill(m.begin() + first, m.begin() + last, segments[seg].loss ? 1 : 0);
      first = last;
    }
  }
  ids.insert(ids.end(), whole.begin(), whole.end());
  mask.insert(mask.end(), m.begin(), m.end());
}

}  // namespace

void tokenize_document(const Tokenizer& tok, const Document& doc, bool text_schema,
                       std::vector<int32_t>& ids, std::vector<uint8_t>& mask) {
  ids.clear();
  mask.clear();
  auto append = [&](const std::vector<int32_t>& t, uint8_t m) {
    ids.insert(ids.end(), t.begin(), t.end());
    mask.insert(mask.end(), t.size(), m);
  };
  if (!doc.has_special) append(tok.special_prefix(), 0);
  if (doc.segments.size() == 1)
    append(tok.encode(doc.segments[0].text), doc.segments[0].loss ? 1 : 0);
  else if (doc.segments.size() > 1)
    encode_segments(tok, doc.segments, ids, mask);
  if (!doc.has_special && !doc.ends_turn) {
    // The end-of-sequence token is learned where the document ends in text that is learned: all
    // text, and a chat or instruction whose template ends on the answer (plain), so that a model
    // fine-tuned on it learns to stop. A template's own end-of-turn marker (chatml's <|im_end|>)
    // is what its model stops on: nothing follows it, as in apply_chat_template.
    std::vector<int32_t> suffix = tok.special_suffix();
    if (suffix.empty() && tok.eos_id() >= 0) suffix.push_back(tok.eos_id());
    const bool ends_learned = !doc.segments.empty() && doc.segments.back().loss;
    append(suffix, text_schema || ends_learned ? 1 : 0);
  }
}

namespace {

// A batch of documents on its way from the reader thread to the tokenizers.
struct Batch {
  std::vector<Document> docs;
  int64_t bytes = 0;
  bool last = false;  // no more batches for this source
};

// Reads one source on its own thread into a queue at most two batches deep.
class SourceReader {
 public:
  SourceReader(const TextSourceSpec& spec, int index, int64_t batch_bytes)
      : thread_([this, spec, index, batch_bytes] { run(spec, index, batch_bytes); }) {}
  ~SourceReader() {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // The next batch; rethrows the reader's error.
  Batch pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (error_) std::rethrow_exception(error_);
    Batch b = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return b;
  }
  TextSourceStats stats() const { return stats_; }  // valid after the last batch

 private:
  struct Cancelled {};

  void push(Batch&& b) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < 2 || cancelled_; });
    if (cancelled_) throw Cancelled{};
    queue_.push_back(std::move(b));
    cv_.notify_all();
  }

  void run(const TextSourceSpec& spec, int index, int64_t batch_bytes) {
    try {
      Batch b;
      stats_ = for_each_source_document(spec, index, [&](Document&& d) {
        for (const Segment& s : d.segments) b.bytes += static_cast<int64_t>(s.text.size());
        b.docs.push_back(std::move(d));
        if (b.bytes >= batch_bytes) {
          push(std::move(b));
          b = Batch{};
        }
      });
      b.last = true;
      push(std::move(b));
    } catch (const Cancelled&) {
    } catch (...) {
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool cancelled_ = false;
  TextSourceStats stats_;
  std::thread thread_;  // last: starts after the members above exist
};

int64_t total_input_bytes(const PrepareOptions& opt) {
  int64_t total = 0;
  for (size_t i = 0; i < opt.sources.size(); ++i) {
    const std::string key = "data.sources[" + std::to_string(i) + "]";
    for (const auto& f : list_source_files(opt.sources[i].path, key, opt.sources[i].exclude)) {
      std::error_code ec;
      total += static_cast<int64_t>(fs::file_size(f, ec));
    }
  }
  return total;
}

std::string eta_text(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, t / 60 % 60)
                   : fmt::format("{}m{:02}s", t / 60, t % 60);
}

std::string packing_for(const PrepareOptions& opt, const TextSourceSpec& s) {
  if (opt.packing == "auto") return s.schema == "text" ? "continue" : "bin";
  parse_packing_mode(opt.packing, "data.packing");  // throws for anything else
  return opt.packing;
}

}  // namespace

Manifest prepare_store(const PrepareOptions& opt) {
  if (opt.sources.empty()) throw UserError("data.sources: at least one source is needed");
  if (opt.seq_len < 1) throw UserError("data.seq_len: must be at least 1");
  if (!(opt.val_fraction >= 0 && opt.val_fraction < 1))
    throw UserError("data.val_fraction: " + std::to_string(opt.val_fraction) + " is not in [0, 1)");
  if (opt.out_dir.empty()) throw UserError("prepare: no output directory (data.store)");
  for (size_t i = 0; i < opt.sources.size(); ++i)
    if (!(opt.sources[i].weight > 0))
      throw UserError("data.sources[" + std::to_string(i) + "].weight: must be > 0");

  Timer clock;
  const int threads = std::max(1, thread_count());  // train.threads, via set_threads
  std::unique_ptr<Tokenizer> tok = load_tokenizer(opt.tokenizer);
  Manifest m;
  m.tokenizer = opt.tokenizer;
  m.tokenizer_kind = tok->kind();
  m.tokenizer_hash = tokenizer_fingerprint(opt.tokenizer);
  m.vocab_size = tok->vocab_size();
  m.seq_len = opt.seq_len;
  m.val_fraction = opt.val_fraction;
  const StoreDtype dtype = store_dtype_for_vocab(m.vocab_size);
  m.dtype = dtype == StoreDtype::kUInt16 ? "uint16" : "int32";

  // "DIR/" is DIR: its temporary sibling must not land inside it.
  fs::path final_dir = opt.out_dir;
  while (!final_dir.has_filename() && final_dir.has_relative_path())
    final_dir = final_dir.parent_path();
  const fs::path tmp_dir = final_dir.string() + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  const OutputLock lock = lock_output_path(opt.out_dir, "data.store");
  // A store a killed prepare was replacing is put back first, so a rerun that then fails has
  // lost nothing.
  remove_dead_writers_leftovers(final_dir,
                                [](const fs::path& d) { return has_manifest(d.string()); });
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) throw UserError("data.store: cannot create '" + tmp_dir.string() + "': " + ec.message());
  RemoveOnError cleanup(tmp_dir);

  const int64_t total_bytes = total_input_bytes(opt);
  int64_t done_bytes = 0, done_docs = 0, done_tokens = 0;
  Timer since_progress;
  auto progress = [&](size_t src, bool force) {
    if (!opt.progress || (!force && since_progress.seconds() < 1.0)) return;
    since_progress = Timer();
    const double s = clock.seconds(), rate = done_bytes / std::max(s, 1e-9);
    std::fprintf(stderr,
                 "prepare: source %zu/%zu: %lld documents, %lld tokens, %.1f MB/s, %.0f%%, "
                 "ETA %s\n",
                 src + 1, opt.sources.size(), static_cast<long long>(done_docs),
                 static_cast<long long>(done_tokens), rate / 1e6,
                 total_bytes ? 100.0 * static_cast<double>(done_bytes) / total_bytes : 100.0,
                 eta_text((total_bytes - done_bytes) / rate).c_str());
  };

  for (size_t i = 0; i < opt.sources.size(); ++i) {
    const TextSourceSpec& spec = opt.sources[i];
    const bool text_schema = spec.schema == "text";
    SourceManifest sm;
    sm.path = spec.path;
    sm.format = spec.format;
    sm.schema = spec.schema;
    sm.weight = spec.weight;
    sm.packing = packing_for(opt, spec);
    const std::string num = fmt::format("{:05}", i);
    sm.train.prefix = "train-" + num;
    sm.validation.prefix = "validation-" + num;
    sm.train.has_mask = sm.validation.has_mask = !text_schema;
    TokenStoreWriter train_w((tmp_dir / sm.train.prefix).string(), dtype, !text_schema);
    TokenStoreWriter val_w((tmp_dir / sm.validation.prefix).string(), dtype, !text_schema);
    int64_t empty_after_tokenizing = 0, tokenizer_limit = 0;

    SourceReader reader(spec, static_cast<int>(i), opt.batch_bytes);
    for (;;) {
      Batch b = reader.pop();
      const int64_t n = static_cast<int64_t>(b.docs.size());
      std::vector<std::vector<int32_t>> ids(b.docs.size());
      std::vector<std::vector<uint8_t>> masks(b.docs.size());
      std::vector<double> split(b.docs.size());
      std::vector<uint8_t> unencodable(b.docs.size(), 0);  // skipped: a TokenizeError
      std::exception_ptr error;
      std::mutex error_mu;
      std::atomic<int64_t> next{0};
      auto work = [&] {
        for (int64_t d; (d = next.fetch_add(8)) < n;) {
          for (int64_t e = d; e < std::min(d + 8, n); ++e) {
            try {
              const Document& doc = b.docs[static_cast<size_t>(e)];
              tokenize_document(*tok, doc, text_schema, ids[e], masks[e]);
              std::string all;
              for (const Segment& s : doc.segments) all += s.text;
              split[e] = document_split_value(all);
            } catch (const TokenizeError& te) {  // a bad record of the source, as a parse error
              unencodable[e] = spec.on_error == "skip";
              const std::string& at = b.docs[e].origin;
              std::lock_guard lock(error_mu);
              if (!error && !unencodable[e])
                error = std::make_exception_ptr(UserError(fmt::format(
                    "{}: {} (set on_error: skip on the source to skip and count such records)",
                    at.empty() ? fmt::format("data.sources[{}] ({}), document {}", i, spec.path,
                                             done_docs + e + 1)
                               : at,
                    te.what())));
            } catch (...) {
              std::lock_guard lock(error_mu);
              if (!error) error = std::current_exception();
            }
          }
        }
      };
      {
        // Plain threads rather than OpenMP: OpenMP's workers would spin through the sequential
        // write below and take the core the reader thread needs.
        std::vector<std::jthread> pool;
        for (int t = 1; t < threads && t * 8 < n; ++t) pool.emplace_back(work);
        work();
      }
      if (error) std::rethrow_exception(error);
      for (int64_t d = 0; d < n; ++d) {
        if (unencodable[d]) {
          ++tokenizer_limit;
          continue;
        }
        if (ids[d].empty()) {
          ++empty_after_tokenizing;
          continue;
        }
        const bool val = split[d] < opt.val_fraction;
        ShardInfo& info = val ? sm.validation : sm.train;
        (val ? val_w : train_w).add_document(ids[d], masks[d]);
        ++info.documents;
        info.tokens += static_cast<int64_t>(ids[d].size());
        for (uint8_t x : masks[d]) info.loss_tokens += x;
        done_tokens += static_cast<int64_t>(ids[d].size());
      }
      done_docs += n;
      done_bytes += b.bytes;
      progress(i, false);
      if (b.last) break;
    }
    TextSourceStats st = reader.stats();
    train_w.finish();
    val_w.finish();
    sm.files = st.files;
    sm.documents = st.documents;
    sm.bytes = st.bytes;
    sm.skipped = st.skipped.total + empty_after_tokenizing + tokenizer_limit;
    sm.skipped_by_reason = st.skipped.by_reason;
    if (empty_after_tokenizing) sm.skipped_by_reason["no tokens"] += empty_after_tokenizing;
    if (tokenizer_limit) sm.skipped_by_reason["tokenizer limit"] += tokenizer_limit;
    m.sources.push_back(std::move(sm));
  }
  record_store_checksums(tmp_dir.string(), m);
  m.prepare_seconds = clock.seconds();
  write_manifest(tmp_dir.string(), m);

  // Swap the finished store into place.
  const fs::path old_dir = final_dir.string() + ".old-" + std::to_string(::getpid());
  if (fs::exists(final_dir)) {
    if (!has_manifest(final_dir.string()) && !fs::is_empty(final_dir, ec))
      throw UserError("data.store: '" + final_dir.string() +
                      "' exists and is not a token store; not replacing it");
    fs::rename(final_dir, old_dir, ec);
    if (ec)
      throw UserError("data.store: cannot replace '" + final_dir.string() + "': " + ec.message());
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec)
    throw UserError("data.store: cannot create '" + final_dir.string() + "': " + ec.message());
  cleanup.disarm();
  fs::remove_all(old_dir, ec);
  progress(opt.sources.size() - 1, true);
  return m;
}

std::string manifest_summary(const Manifest& m) {
  std::string out;
  for (size_t i = 0; i < m.sources.size(); ++i) {
    const SourceManifest& s = m.sources[i];
    out += fmt::format(
        "data.sources[{}] {} ({}, {}, weight {}, packing {}): {} files, {} documents; train {} "
        "documents / {} tokens, validation {} / {}",
        i, s.path, s.format, s.schema, s.weight, s.packing, s.files, s.documents, s.train.documents,
        s.train.tokens, s.validation.documents, s.validation.tokens);
    if (s.schema != "text")
      out += fmt::format("; loss on {} of {} train tokens", s.train.loss_tokens, s.train.tokens);
    if (s.skipped) out += "; " + skipped_summary(s.skipped, s.skipped_by_reason);
    out += "\n";
  }
  out += fmt::format("tokenizer {} ({}, vocab {}), {} tokens, prepared in {:.1f}s", m.tokenizer,
                     m.tokenizer_kind, m.vocab_size, m.tokens(false) + m.tokens(true),
                     m.prepare_seconds);
  return out;
}

}  // namespace lmt
