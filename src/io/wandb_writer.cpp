#include "io/wandb_writer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/crc32.h"
#include "io/protobuf_wire.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

// Field numbers: wandb/proto/wandb_internal.proto (Record and the messages it holds) and
// google/protobuf/timestamp.proto.
namespace record {
constexpr int kNum = 1, kHistory = 2, kSummary = 3, kRun = 17, kExit = 18, kHeader = 21;
}
constexpr int kHeaderVersionInfo = 1, kVersionProducer = 1;  // HeaderRecord, VersionInfo
namespace run {
constexpr int kRunId = 1, kEntity = 2, kProject = 3, kConfig = 4, kGroup = 6, kDisplayName = 8,
              kNotes = 9, kTags = 10, kHost = 13, kStartTime = 17, kResumed = 18;
}
constexpr int kTimestampSeconds = 1, kTimestampNanos = 2;
constexpr int kItems = 1;  // ConfigRecord.update, HistoryRecord.item, SummaryRecord.update
constexpr int kHistoryStep = 2, kHistoryStepNum = 1;
constexpr int kItemKey = 1, kItemValueJson = 16;  // ConfigItem, HistoryItem, SummaryItem
constexpr int kExitCode = 1, kExitRuntime = 2;    // RunExitRecord

ProtoWriter items_message(const std::vector<WandbItem>& items) {
  ProtoWriter m;
  for (const WandbItem& it : items) {
    ProtoWriter item;
    item.bytes(kItemKey, it.key).bytes(kItemValueJson, it.value_json);
    m.message(kItems, item);
  }
  return m;
}

ProtoWriter record_head(int64_t num) {
  ProtoWriter r;
  r.varint(record::kNum, static_cast<uint64_t>(num));
  return r;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// "offline-run-20260101_120000-abcd1234" -> "abcd1234"; "" for other names.
std::string offline_run_id(const std::string& name) {
  const std::string prefix = "offline-run-";
  if (name.rfind(prefix, 0) != 0 || name.size() <= prefix.size() + 16) return "";
  if (name[prefix.size() + 8] != '_' || name[prefix.size() + 15] != '-') return "";
  return name.substr(prefix.size() + 16);
}

std::string local_time_name(int64_t seconds) {
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d_%H%M%S", &tm);
  return buf;
}

void make_directory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw UserError(fmt::format("cannot create the directory '{}'{}", dir.string(),
                                ec ? ": " + ec.message() : std::string(" (a file is in the way)")));
}

// <parent>/latest-run -> `name`, replaced whole (a link made beside it and renamed over it).
void link_latest(const fs::path& parent, const std::string& name) {
  const fs::path link = parent / "latest-run";
  const fs::path tmp = parent / fmt::format("latest-run.tmp-{}", static_cast<long>(getpid()));
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_directory_symlink(name, tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  if (ec) {
    fs::remove(tmp);
    throw UserError(fmt::format("cannot make the link '{}': {}", link.string(), ec.message()));
  }
}

}  // namespace

std::string WandbLogFramer::frame(std::string_view record) {
  std::string out;
  bool first = true;
  do {
    uint64_t room = kBlockSize - offset_ % kBlockSize;
    if (room < kChunkHeaderSize) {  // the block's tail: zeros, the chunk starts the next block
      out.append(room, '\0');
      offset_ += room;
      room = kBlockSize;
    }
    const size_t n = std::min<uint64_t>(record.size(), room - kChunkHeaderSize);
    const bool last = n == record.size();
    const auto type = static_cast<char>(first ? (last ? kFull : kFirst) : (last ? kLast : kMiddle));
    const std::string_view data = record.substr(0, n);
    append_little_endian(out, crc32_ieee(data, crc32_ieee(std::string_view(&type, 1))), 4);
    append_little_endian(out, n, 2);
    out.push_back(type);
    out.append(data);
    offset_ += kChunkHeaderSize + n;
    record.remove_prefix(n);
    first = false;
    if (last) break;
  } while (true);
  return out;
}

std::string wandb_file_header() {
  std::string h = ":W&B";
  append_little_endian(h, 0xBEE1, 2);
  h.push_back('\0');  // version
  return h;
}

std::string wandb_json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return nlohmann::json(v).dump();
}

std::string wandb_header_record(int64_t num) {
  ProtoWriter version, header;
  version.bytes(kVersionProducer, "lmtrain " LMTRAIN_VERSION);
  header.message(kHeaderVersionInfo, version);
  return record_head(num).message(record::kHeader, header).str();
}

std::string wandb_run_record(int64_t num, const WandbRunInfo& r) {
  std::vector<WandbItem> config;
  for (const auto& [key, value] : r.config.items())
    config.push_back({key, value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
  ProtoWriter start, m;
  const double seconds = std::floor(r.start_time);
  start.varint(kTimestampSeconds, static_cast<uint64_t>(seconds))
      .varint(kTimestampNanos, static_cast<uint64_t>((r.start_time - seconds) * 1e9));
  m.bytes(run::kRunId, r.id);  // fields in number order, as protobuf's own encoders write them
  if (!r.entity.empty()) m.bytes(run::kEntity, r.entity);
  m.bytes(run::kProject, r.project);
  m.message(run::kConfig, items_message(config));
  if (!r.group.empty()) m.bytes(run::kGroup, r.group);
  if (!r.name.empty()) m.bytes(run::kDisplayName, r.name);
  if (!r.notes.empty()) m.bytes(run::kNotes, r.notes);
  for (const std::string& t : r.tags) m.bytes(run::kTags, t);
  if (!r.host.empty()) m.bytes(run::kHost, r.host);
  m.message(run::kStartTime, start);
  if (r.resumed) m.varint(run::kResumed, 1);
  return record_head(num).message(record::kRun, m).str();
}

std::string wandb_history_record(int64_t num, int64_t step, const std::vector<WandbItem>& items) {
  ProtoWriter history = items_message(items), step_message;
  step_message.varint(kHistoryStepNum, static_cast<uint64_t>(step));
  history.message(kHistoryStep, step_message);
  return record_head(num).message(record::kHistory, history).str();
}

std::string wandb_summary_record(int64_t num, const std::vector<WandbItem>& items) {
  return record_head(num).message(record::kSummary, items_message(items)).str();
}

std::string wandb_exit_record(int64_t num, int exit_code, int32_t runtime_s) {
  ProtoWriter exit;
  // int32 fields: a negative value is its 64-bit two's complement on the wire.
  if (exit_code != 0)
    exit.varint(kExitCode, static_cast<uint64_t>(static_cast<int64_t>(exit_code)));
  if (runtime_s != 0) exit.varint(kExitRuntime, static_cast<uint64_t>(runtime_s));
  return record_head(num).message(record::kExit, exit).str();
}

std::string new_wandb_run_id() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::uniform_int_distribution<int> pick(0, 35);
  std::string id;
  for (int i = 0; i < 8; ++i) id.push_back(kChars[pick(rd)]);
  return id;
}

std::string wandb_id_problem(const std::string& id) {
  if (id.empty()) return "empty";
  if (id.find_first_of("/\\#?%:") != std::string::npos) return "holds one of / \\ # ? % :";
  return "";
}

std::string newest_wandb_run_id(const std::string& parent) {
  std::string newest, id;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    const std::string this_id = offline_run_id(name);
    if (!this_id.empty() && e.is_directory() && name > newest) newest = name, id = this_id;
  }
  if (const std::string why = wandb_id_problem(id); !newest.empty() && !why.empty())
    throw UserError("logging.wandb: a resumed run continues the newest W&B run in " + parent +
                    ", but '" + excerpt(newest) + "' names the run id '" + excerpt(id) +
                    "', which W&B refuses (" + why + "); set logging.wandb.id");
  return id;
}

WandbOfflineRun::WandbOfflineRun(const std::string& parent, const WandbRunInfo& run)
    : start_time_(run.start_time) {
  make_directory(parent);
  // A second run of the same id within the same second (a quick resume) takes the next second.
  std::string name;
  for (auto s = static_cast<int64_t>(run.start_time);; ++s) {
    name = fmt::format("offline-run-{}-{}", local_time_name(s), run.id);
    if (!fs::exists(fs::path(parent) / name)) break;
  }
  dir_ = (fs::path(parent) / name).string();
  make_directory(fs::path(dir_) / "files");
  make_directory(fs::path(dir_) / "logs");
  path_ = (fs::path(dir_) / fmt::format("run-{}.wandb", run.id)).string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw UserError(fmt::format("cannot create '{}'", path_));
  out_ << wandb_file_header();
  write(wandb_header_record(++num_));
  write(wandb_run_record(++num_, run));
  link_latest(parent, name);
}

WandbOfflineRun::~WandbOfflineRun() {
  try {
    finish(1);
  } catch (const std::exception&) {  // a destructor must not throw; the log then has no exit
  }
}

void WandbOfflineRun::write(const std::string& record) {
  out_ << framer_.frame(record);
  out_.flush();
  if (!out_) throw UserError(fmt::format("cannot write '{}' (is the disk full?)", path_));
}

void WandbOfflineRun::log(int64_t step, const std::vector<WandbItem>& items) {
  if (finished_) return;
  if (step != row_step_) {
    write_row();
    row_step_ = step;
  }
  for (const WandbItem& it : items) {
    auto same =
        std::find_if(row_.begin(), row_.end(), [&](const WandbItem& r) { return r.key == it.key; });
    if (same != row_.end())
      same->value_json = it.value_json;
    else
      row_.push_back(it);
  }
}

void WandbOfflineRun::write_row() {
  if (row_step_ < 0) return;
  const double now = now_seconds();
  std::vector<WandbItem> items = row_;
  items.push_back({"_step", std::to_string(row_step_)});
  items.push_back({"_runtime", wandb_json_number(now - start_time_)});
  items.push_back({"_timestamp", wandb_json_number(now)});
  write(wandb_history_record(++num_, row_step_, items));
  write(wandb_summary_record(++num_, items));
  row_.clear();
  row_step_ = -1;
}

void WandbOfflineRun::finish(int exit_code) {
  if (finished_) return;
  finished_ = true;
  write_row();
  const double runtime = std::max(0.0, now_seconds() - start_time_);
  write(wandb_exit_record(++num_, exit_code,
                          static_cast<int32_t>(std::min<double>(runtime, INT32_MAX))));
}

}  // namespace lmt
