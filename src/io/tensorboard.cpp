#include "io/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <filesystem>

#include "core/error.h"
#include "io/crc32.h"
#include "io/protobuf_wire.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

// Field numbers of the messages written here.
namespace event {
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
}
constexpr int kSummaryValue = 1;  // Summary.value (repeated)
namespace value {
constexpr int kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
}
constexpr int kMetadataPluginData = 1, kPluginName = 1;            // SummaryMetadata.PluginData
constexpr int kTensorDtype = 1, kTensorShape = 2, kStringVal = 8;  // TensorProto
constexpr int kDtString = 7;                                       // types.proto DataType
constexpr int kSessionLogStatus = 1, kSessionStart = 1;            // SessionLog

ProtoWriter event_head(double wall_time, int64_t step) {
  ProtoWriter e;
  e.f64(event::kWallTime, wall_time);
  if (step != 0) e.varint(event::kStep, static_cast<uint64_t>(step));  // proto3 omits zeros
  return e;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// The seconds field of an event file's name (events.out.tfevents.<seconds>.<host>.<pid>).
int64_t name_seconds(const std::string& name) {
  const std::string prefix = "events.out.tfevents.";
  if (name.rfind(prefix, 0) != 0) return -1;
  const size_t end = name.find('.', prefix.size());
  const std::string digits = name.substr(prefix.size(), end - prefix.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

}  // namespace

std::string tfrecord(std::string_view data) {
  std::string len;
  append_little_endian(len, data.size(), 8);
  std::string out = len;
  append_little_endian(out, masked_crc32c(len), 4);
  out.append(data);
  append_little_endian(out, masked_crc32c(data), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  ProtoWriter e;
  e.f64(event::kWallTime, wall_time).bytes(event::kFileVersion, "brain.Event:2");
  return e.str();
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<TbScalar>& values) {
  ProtoWriter summary;
  for (const TbScalar& s : values) {
    ProtoWriter v;
    v.bytes(value::kTag, s.tag).f32(value::kSimpleValue, static_cast<float>(s.value));
    summary.message(kSummaryValue, v);
  }
  return event_head(wall_time, step).message(event::kSummary, summary).str();
}

std::string text_event(double wall_time, int64_t step, const std::string& tag,
                       const std::string& text) {
  ProtoWriter plugin, metadata, tensor, v, summary;
  plugin.bytes(kPluginName, "text");
  metadata.message(kMetadataPluginData, plugin);
  tensor.varint(kTensorDtype, kDtString)
      .message(kTensorShape, ProtoWriter())  // a scalar: no dimensions
      .bytes(kStringVal, text);
  v.bytes(value::kTag, tag).message(value::kTensor, tensor).message(value::kMetadata, metadata);
  summary.message(kSummaryValue, v);
  return event_head(wall_time, step).message(event::kSummary, summary).str();
}

std::string session_start_event(double wall_time, int64_t step) {
  ProtoWriter log;
  log.varint(kSessionLogStatus, kSessionStart);
  return event_head(wall_time, step).message(event::kSessionLog, log).str();
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw UserError(fmt::format("cannot create the directory '{}'{}", dir,
                                ec ? ": " + ec.message() : std::string(" (a file is in the way)")));
  const double wall = now_seconds();
  int64_t seconds = static_cast<int64_t>(wall);
  for (const auto& e : fs::directory_iterator(dir, ec))  // a resume within the same second
    seconds = std::max(seconds, name_seconds(e.path().filename().string()) + 1);
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, 8, "host");
  path_ = (fs::path(dir) /
           fmt::format("events.out.tfevents.{}.{}.{}", seconds, host, static_cast<long>(getpid())))
              .string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw UserError(fmt::format("cannot create '{}'", path_));
  write(file_version_event(wall));
}

void TensorBoardWriter::write(const std::string& event) {
  out_ << tfrecord(event);
  out_.flush();
  if (!out_) throw UserError(fmt::format("cannot write '{}' (is the disk full?)", path_));
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<TbScalar>& values) {
  write(scalars_event(now_seconds(), step, values));
}

void TensorBoardWriter::text(int64_t step, const std::string& tag, const std::string& text) {
  write(text_event(now_seconds(), step, tag, text));
}

void TensorBoardWriter::session_start(int64_t step) {
  write(session_start_event(now_seconds(), step));
}

}  // namespace lmt
