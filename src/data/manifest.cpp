#include "data/manifest.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/checksum.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/mapped_file.h"
#include "core/path_json.h"
#include "core/regular_file.h"
#include "data/token_store.h"
#include "data/tokenizer/tokenizer.h"

namespace lmt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json shard_json(const ShardInfo& s) {
  return {{"prefix", s.prefix},           {"documents", s.documents}, {"tokens", s.tokens},
          {"loss_tokens", s.loss_tokens}, {"has_mask", s.has_mask},   {"checksums", s.checksums}};
}

// A count: a non-negative integer (get<int64_t> of 1e30 is undefined behaviour; a negative count
// would make the totals wrong, and overflow them). Throws json's out_of_range, as at() does, which
// read_manifest reports naming the file.
int64_t count(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 53))
    throw json::out_of_range::create(
        406, std::string("field '") + key + "' must be an integer in [0, 2^53], got " + v.dump(),
        &v);
  return v.get<int64_t>();
}

ShardInfo shard_from(const json& j) {
  ShardInfo s;
  s.prefix = j.at("prefix").get<std::string>();
  s.documents = count(j, "documents");
  s.tokens = count(j, "tokens");
  s.loss_tokens = count(j, "loss_tokens");
  s.has_mask = j.at("has_mask").get<bool>();
  if (j.contains("checksums"))  // absent in stores from before checksums
    s.checksums = j.at("checksums").get<std::map<std::string, std::string>>();
  return s;
}

}  // namespace

int64_t Manifest::tokens(bool validation) const {
  int64_t n = 0;
  for (const auto& s : sources) n += validation ? s.validation.tokens : s.train.tokens;
  return n;
}

int64_t Manifest::documents(bool validation) const {
  int64_t n = 0;
  for (const auto& s : sources) n += validation ? s.validation.documents : s.train.documents;
  return n;
}

std::vector<std::string> shard_extensions(const ShardInfo& s) {
  if (s.has_mask) return {".bin", ".idx", ".mask"};
  return {".bin", ".idx"};
}

namespace {

// Every shard of the store (a Megatron store has no validation shard: its prefix is empty).
template <class Fn>
void for_each_shard(Manifest& m, Fn&& fn) {
  for (SourceManifest& s : m.sources)
    for (ShardInfo* sh : {&s.train, &s.validation})
      if (!sh->prefix.empty()) fn(*sh);
}

std::string shard_file(const std::string& dir, const ShardInfo& s, const std::string& ext) {
  return (fs::path(dir) / (s.prefix + ext)).string();  // an absolute prefix (Megatron) stays
}

}  // namespace

void record_store_checksums(const std::string& dir, Manifest& m) {
  for_each_shard(m, [&](ShardInfo& sh) {
    sh.checksums.clear();
    for (const std::string& ext : shard_extensions(sh))
      sh.checksums[ext] = checksum_file(shard_file(dir, sh, ext), "token store");
  });
}

void verify_store_checksums(const std::string& dir, Manifest& m) {
  for_each_shard(m, [&](ShardInfo& sh) {
    const bool recorded = !sh.checksums.empty();
    for (const std::string& ext : shard_extensions(sh)) {
      const std::string path = shard_file(dir, sh, ext);
      const std::string now = checksum_file(path, "token store");
      if (!recorded) {
        sh.checksums[ext] = now;
      } else if (!sh.checksums.count(ext) || sh.checksums.at(ext) != now) {
        throw UserError(
            "token store '" + dir + "': '" + path +
            "' is not the file prepare wrote: manifest.json recorded its checksum as " +
            (sh.checksums.count(ext) ? sh.checksums.at(ext) : std::string("nothing")) + ", it is " +
            now + " now (changed or damaged since; prepare the store again, or restore the file)");
      }
    }
  });
}

std::string store_fingerprint(const Manifest& m) {
  StreamHash h;
  for (const SourceManifest& s : m.sources)
    for (const ShardInfo* sh : {&s.train, &s.validation})
      for (const auto& [ext, sum] : sh->checksums) {
        h.update(ext.data(), ext.size());
        h.update(sum.data(), sum.size());
      }
  return h.digest();
}

std::string tokenizer_fingerprint(const std::string& spec) {
  if (spec == "bytes") return "bytes";
  MappedFile f(tokenizer_file(spec), "data.tokenizer");
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : f.text()) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

// The manifest's own checksum: of its JSON without the "checksum" key, as nlohmann writes it
// (keys sorted, numbers in their shortest exact form: the same after a read), nor the time the
// prepare took (so that two prepares of the same data write the same manifest but for it).
std::string manifest_checksum(json j) {
  j.erase("checksum");
  j.erase("prepare_seconds");
  const std::string text = j.dump();
  StreamHash h;
  h.update(text.data(), text.size());
  return h.digest();
}

}  // namespace

void write_manifest(const std::string& dir, const Manifest& m) {
  json sources = json::array();
  for (const auto& s : m.sources) {
    sources.push_back({{"path", path_to_json(s.path)},
                       {"format", s.format},
                       {"schema", s.schema},
                       {"weight", s.weight},
                       {"packing", s.packing},
                       {"files", s.files},
                       {"documents", s.documents},
                       {"bytes", s.bytes},
                       {"skipped", s.skipped},
                       {"skipped_by_reason", s.skipped_by_reason},
                       {"train", shard_json(s.train)},
                       {"validation", shard_json(s.validation)}});
  }
  json j = {{"format", "lmtrain-token-store"},
            {"version", Manifest::kVersion},
            {"tokenizer",
             {{"spec", path_to_json(m.tokenizer)},
              {"kind", m.tokenizer_kind},
              {"hash", m.tokenizer_hash},
              {"vocab_size", m.vocab_size}}},
            {"seq_len", m.seq_len},
            {"val_fraction", m.val_fraction},
            {"dtype", m.dtype},
            {"sources", sources},
            {"totals",
             {{"train_documents", m.documents(false)},
              {"train_tokens", m.tokens(false)},
              {"validation_documents", m.documents(true)},
              {"validation_tokens", m.tokens(true)}}},
            {"prepare_seconds", m.prepare_seconds}};
  j["checksum"] = manifest_checksum(j);
  const fs::path path = fs::path(dir) / "manifest.json", tmp = fs::path(dir) / "manifest.json.tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    if (!f) throw UserError("prepare: cannot write '" + tmp.string() + "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw UserError("prepare: cannot rename to '" + path.string() + "': " + ec.message());
}

bool is_megatron_prefix(const std::string& prefix) {
  return fs::is_regular_file(prefix + ".idx") && fs::is_regular_file(prefix + ".bin");
}

Manifest megatron_manifest(const std::string& prefix, int64_t seq_len) {
  TokenStore store(prefix);
  Manifest m;
  m.tokenizer = "megatron:" + prefix;
  m.tokenizer_kind = "unknown";
  m.tokenizer_hash = "unknown";
  m.vocab_size = static_cast<int64_t>(store.max_token_id()) + 1;
  m.seq_len = seq_len;
  m.dtype = store_dtype_name(store.dtype());
  SourceManifest s;
  s.path = prefix;
  s.format = "megatron";
  s.schema = "text";
  s.packing = "continue";
  s.files = 1;
  s.documents = store.num_documents();
  s.train.prefix = fs::absolute(prefix).string();
  s.train.documents = store.num_documents();
  s.train.tokens = store.num_tokens();
  s.train.loss_tokens = store.num_tokens();
  s.train.has_mask = store.has_mask();
  m.sources.push_back(s);
  return m;
}

bool has_manifest(const std::string& dir) {
  return fs::exists(fs::path(dir) / "manifest.json");
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  if (!fs::exists(path))
    throw UserError(path + ": no such file (is '" + dir +
                    "' a token store? make one with `lmtrain prepare`)");
  json j = parse_json_bounded(read_regular_file(path, "token store", kMaxConfigBytes), path);
  if (j.is_discarded() || !j.is_object()) throw UserError(path + ": not a JSON object");
  // Its counts and shapes are what the shards are read by: an edit would have train read past
  // a shard or by another seq_len. (A manifest from before the checksum has none to check.)
  if (j.contains("checksum") &&
      (!j["checksum"].is_string() || j["checksum"].get<std::string>() != manifest_checksum(j)))
    throw UserError(path +
                    ": changed since prepare wrote it (its checksum does not match its contents); "
                    "prepare the store again");
  try {
    if (j.at("format").get<std::string>() != "lmtrain-token-store")
      throw UserError(path + ": not an lmtrain token store manifest");
    if (!j.at("version").is_number_integer() ||
        j.at("version").get<int64_t>() != Manifest::kVersion)
      throw UserError(path + ": version " + j.at("version").dump() + ", this lmtrain reads " +
                      std::to_string(Manifest::kVersion));
    Manifest m;
    const json& t = j.at("tokenizer");
    m.tokenizer = path_from_json(t.at("spec"), path + ": tokenizer.spec");
    m.tokenizer_kind = t.at("kind").get<std::string>();
    m.tokenizer_hash = t.at("hash").get<std::string>();
    m.vocab_size = count(t, "vocab_size");
    m.seq_len = count(j, "seq_len");
    m.val_fraction = j.at("val_fraction").get<double>();
    m.dtype = j.at("dtype").get<std::string>();
    m.prepare_seconds = j.value("prepare_seconds", 0.0);
    for (const json& s : j.at("sources")) {
      SourceManifest sm;
      sm.path = path_from_json(s.at("path"), path + ": sources[].path");
      sm.format = s.at("format").get<std::string>();
      sm.schema = s.at("schema").get<std::string>();
      sm.weight = s.at("weight").get<double>();
      sm.packing = s.at("packing").get<std::string>();
      sm.files = count(s, "files");
      sm.documents = count(s, "documents");
      sm.bytes = count(s, "bytes");
      sm.skipped = count(s, "skipped");
      const json& reasons = s.at("skipped_by_reason");
      for (const auto& reason : reasons.items())
        sm.skipped_by_reason[reason.key()] = count(reasons, reason.key().c_str());
      sm.train = shard_from(s.at("train"));
      sm.validation = shard_from(s.at("validation"));
      m.sources.push_back(std::move(sm));
    }
    return m;
  } catch (const json::exception& e) {
    throw UserError(path + ": " + e.what());
  }
}

}  // namespace lmt
