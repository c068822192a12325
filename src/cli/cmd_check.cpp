// lmtrain check PATH...: verifies what lmtrain wrote against the checksums it recorded, without
// loading a model: a token store (every shard file against manifest.json), a checkpoint or an
// exported directory (every file against checksums.json), or a run directory (each of its
// checkpoints, and the store prepared into it). One line per item; exit 2 when any is damaged.
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "cli/commands.h"
#include "core/error.h"
#include "data/manifest.h"
#include "io/checkpoint_names.h"
#include "io/dir_checksums.h"

namespace lmt::cli {

namespace fs = std::filesystem;

namespace {

// ", not covered: a, b" for files a check did not read against a checksum ("" for none).
std::string not_covered(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string s = " (not covered by its checksums: ";
  for (size_t i = 0; i < names.size() && i < 10; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 10) s += fmt::format(" and {} more", names.size() - 10);
  return s + ")";
}

// Checks one item, printing its line; false when it is damaged. verify returns the files it did
// not cover.
template <class Fn>
bool check_item(const std::string& what, const fs::path& path, Fn&& verify) {
  try {
    const std::vector<std::string> uncovered = verify();
    fmt::print("ok       {} {}{}\n", what, path.string(), not_covered(uncovered));
    return true;
  } catch (const UserError& e) {
    fmt::print("DAMAGED  {} {}: {}\n", what, path.string(), e.what());
    return false;
  }
}

bool check_store(const fs::path& dir) {
  return check_item("token store", dir, [&] {
    Manifest m = read_manifest(dir.string());
    const bool recorded =
        std::any_of(m.sources.begin(), m.sources.end(),
                    [](const SourceManifest& s) { return !s.train.checksums.empty(); });
    if (!recorded)
      throw UserError(
          "its manifest.json records no checksums (prepared by an lmtrain from "
          "before them; prepare it again to have them)");
    verify_store_checksums(dir.string(), m);
    // The manifest checks itself (read_manifest); every other file is a shard's.
    std::set<std::string> covered = {"manifest.json"};
    for (const SourceManifest& s : m.sources)
      for (const ShardInfo* sh : {&s.train, &s.validation})
        if (!sh->prefix.empty())
          for (const std::string& ext : shard_extensions(*sh)) covered.insert(sh->prefix + ext);
    std::vector<std::string> uncovered;
    for (const auto& e : fs::directory_iterator(dir))
      if (!covered.count(e.path().filename().string()))
        uncovered.push_back(e.path().filename().string());
    std::sort(uncovered.begin(), uncovered.end());
    return uncovered;
  });
}

bool check_dir(const fs::path& dir) {
  const bool checkpoint = fs::exists(dir / "state.json");
  return check_item(checkpoint ? "checkpoint" : "model", dir, [&] {
    if (!checkpoint && !fs::exists(dir / kChecksumsFile))
      throw UserError("no checksums.json: not a directory lmtrain wrote, nothing to check against");
    verify_checksums(dir.string());
    return unlisted_files(dir.string());  // a checkpoint's are damage (verify_checksums)
  });
}

// The step directories of a run's checkpoints/, oldest first.
std::vector<fs::path> checkpoints_of(const fs::path& run) {
  std::vector<fs::path> out;
  for (const auto& [s, d] : checkpoint_dirs(run / "checkpoints")) out.insert(out.begin(), d);
  return out;
}

}  // namespace

Run add_check(CLI::App& app) {
  auto paths = std::make_shared<std::vector<std::string>>();
  app.add_option("paths", *paths,
                 "token stores, checkpoints, exported model directories or run directories")
      ->required();
  return [paths]() {
    bool ok = true;
    for (const std::string& p : *paths) {
      const fs::path path = p;
      if (!fs::is_directory(path)) throw UserError("check: '" + p + "' is not a directory");
      if (fs::exists(path / "manifest.json")) {
        ok &= check_store(path);
      } else if (fs::exists(path / "config.json")) {
        ok &= check_dir(path);
      } else if (fs::is_directory(path / "checkpoints") || fs::exists(path / "config.yaml")) {
        const std::vector<fs::path> cks = checkpoints_of(path);
        for (const fs::path& c : cks) ok &= check_dir(c);
        if (fs::exists(path / "data" / "manifest.json")) ok &= check_store(path / "data");
        if (cks.empty()) fmt::print("note: run {} has no checkpoints\n", p);
      } else {
        throw UserError("check: '" + p +
                        "' is neither a token store (manifest.json), a model directory "
                        "(config.json) nor a run directory (checkpoints/)");
      }
    }
    return ok ? 0 : kExitUserError;
  };
}

}  // namespace lmt::cli
