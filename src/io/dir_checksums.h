// checksums.json: the size and checksum (core/checksum.h) of every file lmtrain wrote into a
// directory (a checkpoint, an exported model or adapter), written last, and verified whenever
// lmtrain reads the directory back (resume, export, generate, logits, init_from). A damaged file
// is then one message naming it instead of weights that load and train on (a flipped exponent bit
// is a finite value) or a parse error far from the cause.
//
// A directory with a state.json is a checkpoint lmtrain wrote: it must have checksums.json, and
// every file in it must be listed. Any other directory (an export, or a Hugging Face directory
// another tool wrote) is verified when it has checksums.json, against the files it lists; files
// added beside them (a README) are not lmtrain's to judge.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace lmt {

inline constexpr const char* kChecksumsFile = "checksums.json";

// Records a directory's files as they are written: each is hashed on a background thread, one
// file at a time, as soon as add() is called, while its pages are still in the
// page cache, so the cost hides behind writing the next file. write() waits for them and writes
// checksums.json, flushed to disk.
class ChecksumRecorder {
 public:
  explicit ChecksumRecorder(std::string dir);
  ~ChecksumRecorder();  // waits for hashes still running
  ChecksumRecorder(const ChecksumRecorder&) = delete;
  ChecksumRecorder& operator=(const ChecksumRecorder&) = delete;

  void add(const std::string& name);  // a complete file of the directory, by name
  void write();

 private:
  struct Entry {
    std::string name;
    std::shared_future<std::pair<uint64_t, std::string>> hash;  // size, checksum
  };
  std::string dir_;
  std::vector<Entry> entries_;
  // LMT_BENCH_SKIP_CHECKSUMS set: nothing is hashed or written (bench/checkpoint_bench.cpp's save
  // without checksums; such a checkpoint is refused when loaded).
  bool skip_ = false;
};

// A file of a directory that is not what its checksums.json recorded (or a checkpoint without
// checksums.json, or with a file it does not list).
class DamagedFileError : public UserError {
 public:
  using UserError::UserError;
};

// Checks a directory against its checksums.json while the caller reads it. The constructor checks
// at once what is cheap: that the listing is there (a checkpoint), lists every file (a checkpoint),
// and that each listed file exists with the recorded size, and it hashes the small files; the
// large ones are hashed on a background thread, which finish() waits for. Errors are
// DamagedFileErrors naming the directory and the file; inside a run's checkpoints/ they also name
// the newest older checkpoint that is intact (never loaded in its place).
class ChecksumCheck {
 public:
  explicit ChecksumCheck(std::string dir);
  ~ChecksumCheck();
  ChecksumCheck(const ChecksumCheck&) = delete;
  ChecksumCheck& operator=(const ChecksumCheck&) = delete;
  void finish();

 private:
  std::string dir_;
  std::future<std::string> pending_;  // the first problem found, "" when none
};

// Verifies `dir` completely before returning (what `lmtrain check` and the search for an intact
// checkpoint use). Throws DamagedFileError.
void verify_checksums(const std::string& dir);

// The files in `dir` that its checksums.json does not list (checksums.json itself aside), sorted:
// what a check of it does not cover. Empty where there is no readable listing.
std::vector<std::string> unlisted_files(const std::string& dir);

// The checks ChecksumCheck's constructor makes (the listing, the sizes, the small files), alone.
void verify_checksums_quick(const std::string& dir);

// Runs load() (which reads `dir`) while its checksums are verified. Damage found is reported in
// place of an error load() raised, which the damage may have caused.
template <class Load>
void load_verified(const std::string& dir, Load&& load) {
  ChecksumCheck check(dir);
  try {
    load();
  } catch (...) {
    check.finish();  // throws the damage, if any, instead
    throw;
  }
  check.finish();
}

}  // namespace lmt
