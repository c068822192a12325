// TensorBoard event files: CRC-32C against published check values, TFRecord framing, and Events
// against bytes that Python's protobuf made from TensorBoard's own event_pb2 (the generating
// lines are in each test), so the hand-written encoder is checked by an independent one. The
// reference tier (tests/reference/test_tensorboard.py) reads whole runs with TensorBoard itself.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/io_test_util.h"
#include "io/protobuf_wire.h"
#include "io/tensorboard.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

std::string from_hex(const std::string& hex) {
  std::string out;
  std::istringstream in(hex);
  for (std::string byte; in >> byte;)
    out.push_back(static_cast<char>(std::stoi(byte, nullptr, 16)));
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t le(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// The records of an event file, every CRC checked.
std::vector<std::string> read_records(const std::string& path) {
  const std::string f = read_file(path);
  std::vector<std::string> out;
  for (size_t at = 0; at < f.size();) {
    EXPECT_LE(at + 12, f.size());
    const uint64_t n = le(f, at, 8);
    EXPECT_EQ(le(f, at + 8, 4), masked_crc32c(f.substr(at, 8)));
    EXPECT_LE(at + 16 + n, f.size());
    out.push_back(f.substr(at + 12, n));
    EXPECT_EQ(le(f, at + 12 + n, 4), masked_crc32c(out.back()));
    at += 16 + n;
  }
  return out;
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  // RFC 3720 (iSCSI), B.4: 32 bytes of zeros, of ones, ascending and descending.
  std::string zeros(32, '\0'), ones(32, '\xff'), up(32, 0), down(32, 0);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
}

TEST(Crc32c, Masked) {
  // (0xE3069283 >> 15) | (0xE3069283 << 17) = 0x0001C60D | 0x25060000 = 0x2507C60D, and
  // 0x2507C60D + 0xA282EAD8 = 0xC78AB0E5 (TensorBoard's own masked_crc32c agrees).
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
  // The empty string: CRC 0, so the mask's constant alone.
  EXPECT_EQ(masked_crc32c(""), 0xA282EAD8u);
}

TEST(ProtoWriter, VarintsAndFields) {
  ProtoWriter p;
  p.varint(1, 0).varint(2, 1).varint(3, 127).varint(4, 128).varint(5, 300);
  EXPECT_EQ(p.str(), from_hex("08 00 10 01 18 7f 20 80 01 28 ac 02"));
  ProtoWriter q;
  q.varint(2, static_cast<uint64_t>(int64_t{-1}));  // int64 -1: ten bytes
  EXPECT_EQ(q.str(), from_hex("10 ff ff ff ff ff ff ff ff ff 01"));
  ProtoWriter r;
  r.f64(1, 1.5).f32(2, 2.5f).bytes(3, "ab").varint(16, 1);  // field 16: a two-byte key
  EXPECT_EQ(r.str(), from_hex("09 00 00 00 00 00 00 f8 3f 15 00 00 20 40 1a 02 61 62 80 01 01"));
}

// What ProtoWriter writes, ProtoReader reads back field by field; a message cut short anywhere
// is a UserError naming it, never a read past the end.
TEST(ProtoReader, ReadsWhatTheWriterWrote) {
  ProtoWriter inner;
  inner.bytes(1, "piece").f32(2, -2.5f).varint(3, 4);
  ProtoWriter p;
  p.message(1, inner).varint(45, 300).f64(2, 1.5).bytes(3, "");
  std::vector<ProtoReader::Field> fields;
  ProtoReader r(p.str(), "test message");
  for (ProtoReader::Field f; r.next(f);) fields.push_back(f);
  ASSERT_EQ(fields.size(), 4u);
  EXPECT_EQ(fields[0].number, 1);
  EXPECT_EQ(fields[0].wire_type, 2);
  ProtoReader in(fields[0].bytes, "inner");
  ProtoReader::Field g;
  ASSERT_TRUE(in.next(g));
  EXPECT_EQ(g.bytes, "piece");
  ASSERT_TRUE(in.next(g));
  EXPECT_EQ(g.as_f32(), -2.5f);
  ASSERT_TRUE(in.next(g));
  EXPECT_EQ(g.number_value, 4u);
  EXPECT_FALSE(in.next(g));
  EXPECT_EQ(fields[1].number, 45);
  EXPECT_EQ(fields[1].number_value, 300u);
  EXPECT_EQ(fields[2].wire_type, 1);
  EXPECT_EQ(fields[3].bytes, "");
  for (size_t cut = 1; cut < p.str().size(); ++cut) {
    const std::string part = p.str().substr(0, cut);
    try {
      ProtoReader t(part, "cut message");
      for (ProtoReader::Field f; t.next(f);) {
        if (f.number != 1 || f.wire_type != 2) continue;
        ProtoReader n(f.bytes, "cut message");
        for (ProtoReader::Field h; n.next(h);) {
        }
      }
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("cut message"), std::string::npos) << e.what();
    }
  }
  test::expect_user_error(
      [] {
        const std::string bytes =
            "\x0a\x05"
            "ab";  // field 1: 5 bytes promised, 2 given
        ProtoReader t(bytes, "short bytes");
        ProtoReader::Field f;
        t.next(f);
      },
      {"short bytes", "runs past the end"});
  test::expect_user_error(
      [] {
        const std::string group = "\x0b";  // field 1, wire type 3 (a group)
        ProtoReader t(group, "group");
        ProtoReader::Field f;
        t.next(f);
      },
      {"group", "wire type 3"});
}

// Python: Event(wall_time=1.5, file_version="brain.Event:2").SerializeToString()
TEST(TensorBoardEvent, FileVersion) {
  EXPECT_EQ(file_version_event(1.5),
            from_hex("09 00 00 00 00 00 00 f8 3f 1a 0d 62 72 61 69 6e 2e 45 76 65 6e 74 3a 32"));
}

// Python: e = Event(wall_time=1.5, step=300); two summary values (train/loss 2.5, lr 0.1);
// the record: tensorboard.summary.writer.record_writer.RecordWriter(f).write(e's bytes).
TEST(TensorBoardEvent, ScalarsAndTheirRecord) {
  const std::string event = scalars_event(1.5, 300, {{"train/loss", 2.5}, {"lr", 0.1}});
  const std::string want =
      "09 00 00 00 00 00 00 f8 3f 10 ac 02 2a 1e 0a 11 0a 0a 74 72 61 69 6e 2f 6c 6f 73 73 15 00 "
      "00 20 40 0a 09 0a 02 6c 72 15 cd cc cc 3d";
  EXPECT_EQ(event, from_hex(want));
  EXPECT_EQ(tfrecord(event),
            from_hex("2c 00 00 00 00 00 00 00 f4 ae cc 45 " + want + " 81 3b 54 dc"));
}

// Python: Event(wall_time=2.0, step=0), one value: tag "config", metadata.plugin_data.plugin_name
// "text", tensor (dtype 7 = DT_STRING, an empty tensor_shape, string_val [b"a: 1\n"]).
TEST(TensorBoardEvent, Text) {
  EXPECT_EQ(text_event(2.0, 0, "config", "a: 1\n"),
            from_hex("09 00 00 00 00 00 00 00 40 2a 21 0a 1f 0a 06 63 6f 6e 66 69 67 42 0b 08 07 "
                     "12 00 42 05 61 3a 20 31 0a 4a 08 0a 06 0a 04 74 65 78 74"));
}

// Python: Event(wall_time=3.0, step=5) with session_log.status = SessionLog.START.
TEST(TensorBoardEvent, SessionStart) {
  EXPECT_EQ(session_start_event(3.0, 5), from_hex("09 00 00 00 00 00 00 08 40 10 05 3a 02 08 01"));
}

TEST(TensorBoardWriter, WritesFramedEventsAndANewFileEachTime) {
  const fs::path dir = test::temp_dir() / "tb_writer" / "tb";
  fs::remove_all(dir.parent_path());
  std::string first;
  {
    TensorBoardWriter w(dir.string());
    first = w.path();
    EXPECT_EQ(fs::path(first).parent_path(), dir);
    EXPECT_EQ(fs::path(first).filename().string().rfind("events.out.tfevents.", 0), 0u);
    w.scalars(1, {{"train/loss", 3.0}});
    // Flushed at once: the file holds both records while the writer is still open.
    const std::vector<std::string> r = read_records(first);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_NE(r[0].find("brain.Event:2"), std::string::npos);
    EXPECT_EQ(r[0].substr(9), from_hex("1a 0d") + "brain.Event:2");
    EXPECT_EQ(r[1].substr(9), scalars_event(0, 1, {{"train/loss", 3.0}}).substr(9));
  }
  TensorBoardWriter again(dir.string());  // a resume: a new file that sorts after the first
  EXPECT_NE(again.path(), first);
  EXPECT_GT(fs::path(again.path()).filename().string(), fs::path(first).filename().string());
  again.session_start(4);
  EXPECT_EQ(read_records(again.path()).size(), 2u);
  EXPECT_EQ(read_records(first).size(), 2u);
}

TEST(TensorBoardWriter, AnUncreatableDirectoryIsAUserErrorNamingIt) {
  const fs::path base = test::temp_dir() / "tb_blocked";
  fs::remove_all(base);
  fs::create_directories(base);
  std::ofstream(base / "file") << "x";
  const std::string dir = (base / "file" / "tb").string();
  test::expect_user_error([&] { TensorBoardWriter w(dir); },
                          {"cannot create the directory '" + dir + "'"});
  const std::string in_the_way = (base / "file").string();  // a file where the directory goes
  test::expect_user_error([&] { TensorBoardWriter w(in_the_way); },
                          {"cannot create the directory '" + in_the_way + "'"});
}

TEST(TensorBoardWriter, AFailedWriteIsAUserErrorNamingTheFile) {
  const fs::path dir = test::temp_dir() / "tb_full";
  fs::remove_all(dir);
  TensorBoardWriter w(dir.string());
  const std::string msg = test::user_error_when_the_disk_is_full(4096, [&] {
    for (int64_t s = 1; s <= 1000; ++s) w.scalars(s, {{"train/loss", 1.0}});
  });
  EXPECT_NE(msg.find("cannot write '" + w.path() + "'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace lmt
