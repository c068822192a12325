// W&B's offline run directory, written without W&B's SDK or protobuf: what `wandb sync` uploads
// later from a connected machine. <parent>/offline-run-<YYYYMMDD_HHMMSS>-<id>/ holds
// run-<id>.wandb (the transaction log), empty files/ and logs/ folders as W&B's own offline runs
// have, and <parent>/latest-run links to it.
//
// The transaction log is W&B's LevelDB-style record log: a 7-byte file header (":W&B", magic
// 0xBEE1 little-endian, version 0), then 32 KiB blocks of chunks, each a 7-byte header (CRC-32
// (IEEE) of the chunk's type byte and data, little-endian; data length, 2 bytes; type FULL 1,
// FIRST 2, MIDDLE 3, LAST 4) and its data. A record too long for the rest of its block goes on as
// FIRST, MIDDLE..., LAST chunks; a block's tail too short for a chunk header (under 7 bytes) is
// zeros. Each record is a `Record` message (W&B's wandb_internal.proto, field numbers in
// wandb_writer.cpp) encoded by hand (protobuf_wire.h): a header, the run (its id, project, names,
// tags and config), then a history row per step (each followed by a summary update of its keys,
// so the summary holds every key's last value) and, when the run ends, the exit record with the
// exit code. Every record is flushed at once; a killed process leaves a log without an exit
// record, which `wandb sync` marks failed.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace lmt {

// Splits records into the log's chunks, as W&B's writer does (a FIRST chunk may be empty when
// exactly a header's room is left in a block).
class WandbLogFramer {
 public:
  static constexpr uint64_t kBlockSize = 32 * 1024;
  static constexpr uint64_t kChunkHeaderSize = 7;
  static constexpr uint64_t kFileHeaderSize = 7;
  enum ChunkType : uint8_t { kFull = 1, kFirst = 2, kMiddle = 3, kLast = 4 };

  // `offset`: the file's size so far (a new file: its header's).
  explicit WandbLogFramer(uint64_t offset = kFileHeaderSize) : offset_(offset) {}
  // The bytes to append for one record: padding, then its chunks.
  std::string frame(std::string_view record);
  uint64_t offset() const { return offset_; }

 private:
  uint64_t offset_;
};

std::string wandb_file_header();  // the log's first 7 bytes

// One key of a history row, summary or config: `value_json` is the value as JSON text.
struct WandbItem {
  std::string key;
  std::string value_json;
};
// A number as W&B writes it: JSON, with NaN, Infinity and -Infinity for non-finite values.
std::string wandb_json_number(double v);

struct WandbRunInfo {
  std::string id;  // 8 characters of [a-z0-9] when lmtrain makes it
  std::string project, entity, name, group, notes;
  std::vector<std::string> tags;
  nlohmann::json config = nlohmann::json::object();  // a map: one config item per key
  std::string host;
  double start_time = 0;  // seconds since the Unix epoch
  bool resumed = false;
};

// The records, for tests (`num`: the record's number in the log, from 1).
std::string wandb_header_record(int64_t num);
std::string wandb_run_record(int64_t num, const WandbRunInfo& run);
std::string wandb_history_record(int64_t num, int64_t step, const std::vector<WandbItem>& items);
std::string wandb_summary_record(int64_t num, const std::vector<WandbItem>& items);
std::string wandb_exit_record(int64_t num, int exit_code, int32_t runtime_s);

// A fresh run id: 8 random characters of [a-z0-9], as W&B makes them.
std::string new_wandb_run_id();
// The id of the newest offline-run-<time>-<id> directory in `parent`; "" when there is none. A
// name whose id W&B refuses (wandb_id_problem) is a UserError naming the directory.
std::string newest_wandb_run_id(const std::string& parent);
// Why W&B refuses `id` as a run id (empty, or holding one of / \ # ? % :), "" when it does not.
std::string wandb_id_problem(const std::string& id);

class WandbOfflineRun {
 public:
  // Makes the run directory in `parent` (created if needed), links latest-run to it, and writes
  // the log's header and run records. A directory or file that cannot be made is a UserError
  // naming the path.
  WandbOfflineRun(const std::string& parent, const WandbRunInfo& run);
  // Ends the run as failed (exit code 1) if finish() was not called.
  ~WandbOfflineRun();
  WandbOfflineRun(const WandbOfflineRun&) = delete;
  WandbOfflineRun& operator=(const WandbOfflineRun&) = delete;

  // Adds `items` to the row at `step`. W&B keeps one row a step: items logged at the same step
  // are merged, and a row is written when a later step arrives (or at finish); an earlier step
  // is written as a row of its own.
  void log(int64_t step, const std::vector<WandbItem>& items);
  // Writes the pending row and the exit record; later calls do nothing.
  void finish(int exit_code);

  const std::string& dir() const { return dir_; }
  const std::string& path() const { return path_; }  // the .wandb file

 private:
  void write_row();
  void write(const std::string& record);  // framed, written and flushed
  std::string dir_, path_;
  std::ofstream out_;
  WandbLogFramer framer_;
  int64_t num_ = 0;  // the last record's number
  double start_time_ = 0;
  bool finished_ = false;
  int64_t row_step_ = -1;  // -1: no pending row
  std::vector<WandbItem> row_;
};

}  // namespace lmt
