// TensorBoard event files, written without TensorFlow or protobuf: each record is TFRecord framing
// (little-endian uint64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the
// data) around an Event message encoded by hand (protobuf_wire.h). A file opens with the
// file_version event "brain.Event:2"; every call after that is one event, flushed at once, so a
// killed process loses at most the record in flight (readers stop at a truncated last record).
// Field numbers: tensorboard/compat/proto/{event,summary,tensor,tensor_shape,types}.proto.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "io/crc32.h"  // masked_crc32c, for tests of the framing

namespace lmt {

struct TbScalar {
  std::string tag;
  double value = 0;  // stored as float (Summary.Value.simple_value)
};

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new file events.out.tfevents.<unix seconds>.<host>.<pid> in it,
  // named to sort after the files already there (TensorBoard reads a directory's files in name
  // order, as one run). A directory or file that cannot be made is a UserError naming the path.
  explicit TensorBoardWriter(const std::string& dir);

  // One Event at `step` whose Summary holds every value.
  void scalars(int64_t step, const std::vector<TbScalar>& values);
  // One Event at `step` with a string tensor for TensorBoard's text plugin.
  void text(int64_t step, const std::string& tag, const std::string& text);
  // A SessionLog START at `step`, written first in each file: TensorBoard takes every START after
  // a run's first as a restart and drops what earlier files logged at steps >= step (the steps a
  // killed run did past the checkpoint that it was resumed from).
  void session_start(int64_t step);

  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);  // framed, written and flushed
  std::string path_;
  std::ofstream out_;
};

// The parts, for tests. `wall_time`: seconds since the Unix epoch.
std::string tfrecord(std::string_view data);    // one framed record
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const std::vector<TbScalar>& values);
std::string text_event(double wall_time, int64_t step, const std::string& tag,
                       const std::string& text);
std::string session_start_event(double wall_time, int64_t step);

}  // namespace lmt
