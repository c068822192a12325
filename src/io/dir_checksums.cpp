#include "io/dir_checksums.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/checksum.h"
#include "core/json_depth.h"
#include "core/regular_file.h"
#include "io/checkpoint_names.h"
#include "io/text_file.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "lmtrain checksums";
constexpr int kVersion = 1;
// Files up to this size are hashed at once by ChecksumCheck's constructor (configs, state.json,
// tokenizers); larger ones while the caller reads them.
constexpr uint64_t kHashAtOnceBytes = uint64_t{8} << 20;

struct Listed {
  std::string name, checksum;
  uint64_t bytes = 0;
};

// What checksums.json lists, or the problem with it ("" in *problem when none).
std::vector<Listed> read_listing(const fs::path& dir, std::string* problem) {
  const fs::path path = dir / kChecksumsFile;
  std::vector<Listed> out;
  auto j = parse_json_bounded(read_regular_file(path.string(), "checksums", kMaxConfigBytes),
                              path.string());
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kFormat ||
      !j.contains("files") || !j["files"].is_object()) {
    *problem = std::string(kChecksumsFile) + " is not a listing lmtrain wrote (damaged?)";
    return out;
  }
  if (j.value("version", 0) != kVersion) {
    *problem = fmt::format("{} has version {}; this lmtrain reads version {}", kChecksumsFile,
                           j.value("version", 0), kVersion);
    return out;
  }
  for (const auto& [name, e] : j["files"].items()) {
    const bool ok = e.is_object() && e.contains("bytes") && e["bytes"].is_number_unsigned() &&
                    e.contains("checksum") && e["checksum"].is_string() &&
                    fs::path(name).filename() == name && name != "." && name != "..";
    if (!ok) {
      *problem = std::string(kChecksumsFile) + ": the entry of '" + excerpt(name) +
                 "' is not a file name with bytes and checksum (damaged?)";
      return {};
    }
    out.push_back({name, e["checksum"].get<std::string>(), e["bytes"].get<uint64_t>()});
  }
  return out;
}

std::string mismatch(const Listed& f, const std::string& now) {
  return fmt::format(
      "{} does not match its checksum: {} recorded {} when lmtrain wrote it, the file has {} now "
      "(damaged or changed since)",
      f.name, kChecksumsFile, f.checksum, now);
}

std::string hash_problem(const fs::path& dir, const Listed& f) {
  uint64_t bytes = 0;
  std::string now;
  try {
    now = checksum_file((dir / f.name).string(), "checksums", &bytes);
  } catch (const UserError& e) {
    return e.what();
  }
  if (bytes != f.bytes)
    return fmt::format("{} is {} bytes, {} recorded {} (changed while being read?)", f.name, bytes,
                       kChecksumsFile, f.bytes);
  return now == f.checksum ? "" : mismatch(f, now);
}

// The files in `dir` that `listed` does not name (checksums.json itself aside), sorted.
std::vector<std::string> not_listed(const fs::path& dir, const std::vector<Listed>& listed) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != kChecksumsFile &&
        std::none_of(listed.begin(), listed.end(), [&](const Listed& f) { return f.name == name; }))
      out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The checks ChecksumCheck makes at once; the large files left to hash go to *later.
std::string quick_problem(const fs::path& dir, std::vector<Listed>* later) {
  const bool checkpoint = fs::exists(dir / "state.json");
  if (!fs::exists(dir / kChecksumsFile))
    return checkpoint ? std::string(kChecksumsFile) +
                            " is missing (lmtrain writes it last into every checkpoint; one "
                            "without it was not completely written, or was written by an lmtrain "
                            "from before checksums)"
                      : "";
  std::string problem;
  const std::vector<Listed> listed = read_listing(dir, &problem);
  if (!problem.empty()) return problem;
  if (checkpoint)
    if (const std::vector<std::string> extra = not_listed(dir, listed); !extra.empty())
      return "'" + extra.front() + "' is not listed in " + kChecksumsFile +
             " (lmtrain did not write it there)";
  for (const Listed& f : listed) {
    std::error_code ec;
    const fs::path p = dir / f.name;
    if (!fs::exists(fs::symlink_status(p, ec)))
      return f.name + " is missing (" + kChecksumsFile + " lists it)";
    // A FIFO or a device in its place is named as such (and never read).
    const uint64_t size = check_regular_file(p.string(), "checksums", kNoSizeLimit);
    if (size != f.bytes)
      return fmt::format("{} is {} bytes, {} recorded {} (truncated or changed since)", f.name,
                         size, kChecksumsFile, f.bytes);
  }
  for (const Listed& f : listed) {
    if (f.bytes > kHashAtOnceBytes) {
      later->push_back(f);
      continue;
    }
    if (std::string p = hash_problem(dir, f); !p.empty()) return p;
  }
  return "";
}

}  // namespace

std::vector<std::string> unlisted_files(const std::string& dir) {
  std::string problem;
  const std::vector<Listed> listed = read_listing(dir, &problem);
  return problem.empty() ? not_listed(dir, listed) : std::vector<std::string>();
}

namespace {

std::string full_problem(const fs::path& dir) {
  std::vector<Listed> later;
  std::string p = quick_problem(dir, &later);
  for (size_t i = 0; i < later.size() && p.empty(); ++i) p = hash_problem(dir, later[i]);
  return p;
}

[[noreturn]] void damaged(const fs::path& dir, const std::string& problem) {
  const int64_t step = checkpoint_step(dir);
  const bool in_run = step >= 0 && dir.parent_path().filename() == "checkpoints";
  std::string msg =
      fmt::format("{}'{}' is damaged: {}", in_run ? "checkpoint " : "", dir.string(), problem);
  if (in_run) {
    std::string intact;
    for (const auto& [s, d] : checkpoint_dirs(dir.parent_path()))  // newest first
      // an older checkpoint (it has state.json), complete and intact
      if (s < step && fs::exists(d / "state.json") && full_problem(d).empty()) {
        intact = d.filename().string();
        break;
      }
    msg += intact.empty()
               ? "; no older checkpoint of this run is intact"
               : fmt::format(
                     "; the newest intact checkpoint of this run is {} (to resume from it: "
                     "--resume {}; nothing is loaded in its place without being asked)",
                     intact, intact);
  }
  if (!in_run && !fs::exists(dir / "state.json"))  // an export another tool may have changed
    msg += fmt::format(" (if another tool changed it on purpose, delete {})",
                       (dir / kChecksumsFile).string());
  throw DamagedFileError(msg);
}

}  // namespace

ChecksumRecorder::ChecksumRecorder(std::string dir)
    : dir_(std::move(dir)), skip_(std::getenv("LMT_BENCH_SKIP_CHECKSUMS") != nullptr) {}

ChecksumRecorder::~ChecksumRecorder() {
  for (Entry& e : entries_)
    if (e.hash.valid()) e.hash.wait();
}

void ChecksumRecorder::add(const std::string& name) {
  if (skip_) return;
  const std::string path = (fs::path(dir_) / name).string();
  // After the file before it: one file's hash at a time, however many files a directory has.
  std::shared_future<std::pair<uint64_t, std::string>> before;
  if (!entries_.empty()) before = entries_.back().hash;
  entries_.push_back({name, std::async(std::launch::async, [path, before] {
                              if (before.valid()) before.wait();
                              uint64_t bytes = 0;
                              std::string sum = checksum_file(path, "checksums", &bytes);
                              return std::make_pair(bytes, std::move(sum));
                            }).share()});
}

void ChecksumRecorder::write() {
  if (skip_) return;
  nlohmann::json files = nlohmann::json::object();
  for (Entry& e : entries_) {
    const auto [bytes, sum] = e.hash.get();
    files[e.name] = {{"bytes", bytes}, {"checksum", sum}};
  }
  entries_.clear();
  const nlohmann::json j = {{"format", kFormat}, {"version", kVersion}, {"files", files}};
  write_text_file((fs::path(dir_) / kChecksumsFile).string(), j.dump(2) + "\n");
}

ChecksumCheck::ChecksumCheck(std::string dir) : dir_(std::move(dir)) {
  std::vector<Listed> later;
  if (const std::string p = quick_problem(dir_, &later); !p.empty()) damaged(dir_, p);
  if (later.empty()) return;
  pending_ = std::async(std::launch::async, [dir = fs::path(dir_), later] {
    for (const Listed& f : later)
      if (std::string p = hash_problem(dir, f); !p.empty()) return p;
    return std::string();
  });
}

ChecksumCheck::~ChecksumCheck() {
  if (pending_.valid()) pending_.wait();
}

void ChecksumCheck::finish() {
  if (!pending_.valid()) return;
  if (const std::string p = pending_.get(); !p.empty()) damaged(dir_, p);
}

void verify_checksums_quick(const std::string& dir) {
  std::vector<Listed> later;
  if (const std::string p = quick_problem(dir, &later); !p.empty()) damaged(dir, p);
}

void verify_checksums(const std::string& dir) {
  if (const std::string p = full_problem(dir); !p.empty()) damaged(dir, p);
}

}  // namespace lmt
