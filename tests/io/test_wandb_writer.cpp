// W&B offline runs: the CRC-32 against its published check value, the record log's framing read
// back by a reader written here from the format's rules (chunks never cross a 32 KiB block, a
// block's tail under 7 bytes is zeros, FIRST/MIDDLE/LAST for records that do not fit), records
// against bytes that Python's protobuf made from W&B's own wandb_internal_pb2 (the generating
// lines are in each test), and the run directory's layout. The reference tier
// (tests/reference/test_wandb.py) reads a whole lmtrain run with W&B's schema, after checking its
// reader on a run that W&B itself wrote.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/crc32.h"
#include "io/io_test_util.h"
#include "io/protobuf_wire.h"
#include "io/wandb_writer.h"

namespace lmt {
namespace wandb_writer_test {

namespace fs = std::filesystem;
constexpr uint64_t kBlock = WandbLogFramer::kBlockSize;

std::string hex_bytes(const std::string& hex) {
  std::string out;
  std::istringstream in(hex);
  for (std::string byte; in >> byte;)
    out.push_back(static_cast<char>(std::stoi(byte, nullptr, 16)));
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t le_at(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

struct Chunk {
  uint64_t at;
  int type;
  std::string data;
};

// Reads a whole log by the format's rules, failing the test at the first broken one; the
// records, and every chunk in `chunks`.
std::vector<std::string> read_log(const std::string& f, std::vector<Chunk>* chunks = nullptr) {
  std::vector<std::string> records;
  EXPECT_EQ(f.substr(0, 7), std::string(":W&B\xe1\xbe\x00", 7));
  uint64_t pos = 7;
  std::string pending;
  bool in_record = false;
  while (pos < f.size()) {
    const uint64_t room = kBlock - pos % kBlock;
    if (room < 7) {
      EXPECT_EQ(f.substr(pos, room), std::string(room, '\0')) << "padding at " << pos;
      pos += room;
      continue;
    }
    EXPECT_LE(pos + 7, f.size()) << "a chunk header cut short at " << pos;
    const auto n = le_at(f, pos + 4, 2);
    const int type = static_cast<unsigned char>(f[pos + 6]);
    EXPECT_LE(7 + n, room) << "a chunk crosses a block boundary at " << pos;
    EXPECT_LE(pos + 7 + n, f.size());
    const std::string data = f.substr(pos + 7, n);
    EXPECT_EQ(le_at(f, pos, 4), crc32_ieee(f.substr(pos + 6, 1 + n))) << "CRC at " << pos;
    if (chunks) chunks->push_back({pos, type, data});
    if (type == 1 || type == 2) EXPECT_FALSE(in_record) << "a record starts inside one at " << pos;
    if (type == 3 || type == 4) EXPECT_TRUE(in_record) << "a record goes on from none at " << pos;
    EXPECT_TRUE(type >= 1 && type <= 4) << "chunk type " << type << " at " << pos;
    pending += data;
    in_record = type == 2 || type == 3;
    if (type == 1 || type == 4) records.push_back(std::move(pending)), pending.clear();
    pos += 7 + n;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_FALSE(in_record) << "the last record is not complete";
  return records;
}

TEST(WandbWriter, Crc32IsZlibs) {
  EXPECT_EQ(crc32_ieee(""), 0u);
  EXPECT_EQ(crc32_ieee("123456789"), 0xCBF43926u);  // the CRC catalogue's check value
  EXPECT_EQ(crc32_ieee("56789", crc32_ieee("1234")), 0xCBF43926u);  // in pieces
  EXPECT_EQ(crc32_ieee(std::string(1, '\x01') + "x"), 0x61CDAB0u);  // zlib.crc32(b"\x01x")
}

TEST(WandbWriter, ASmallRecordIsOneFullChunkAfterTheHeader) {
  WandbLogFramer framer;
  const std::string f = wandb_file_header() + framer.frame("abc");
  std::string want(":W&B\xe1\xbe\x00", 7);
  append_little_endian(want,
                       crc32_ieee(std::string("\x01"
                                              "abc")),
                       4);
  want += std::string("\x03\x00\x01", 3) + "abc";
  EXPECT_EQ(f, want);
  EXPECT_EQ(framer.offset(), f.size());
}

TEST(WandbWriter, RecordsSplitAcrossBlocksReadBackWhole) {
  std::mt19937 rng(std::random_device{}());
  // Sizes around the block's edges: a record that leaves exactly a header's room (the next one
  // starts with an empty FIRST chunk), one that leaves 1-6 bytes (zeros), ones over two blocks.
  std::vector<size_t> sizes = {kBlock - 7 - 7 - 7, 40, kBlock - 57, 100, 2 * kBlock + 5, 0};
  for (int i = 0; i < 40; ++i) sizes.push_back(std::uniform_int_distribution<size_t>(0, 9000)(rng));
  sizes.push_back(3 * kBlock);
  std::vector<std::string> records;
  WandbLogFramer framer;
  std::string f = wandb_file_header();
  for (size_t n : sizes) {
    std::string r(n, '\0');
    for (char& c : r) c = static_cast<char>(rng());
    f += framer.frame(r);
    records.push_back(std::move(r));
  }
  EXPECT_EQ(framer.offset(), f.size());
  std::vector<Chunk> chunks;
  EXPECT_EQ(read_log(f, &chunks), records);
  // The first record fills block 0 but for a header's room: the second begins there, empty.
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks[1].at, kBlock - 7);
  EXPECT_EQ(chunks[1].type, 2);
  EXPECT_EQ(chunks[1].data, "");
  EXPECT_EQ(chunks[2].at, kBlock);
  EXPECT_EQ(chunks[2].type, 4);
  // The third record leaves 3 bytes of block 1: zeros, and the fourth starts block 2.
  EXPECT_EQ(chunks[4].at, 2 * kBlock);
  EXPECT_EQ(f.substr(2 * kBlock - 3, 3), std::string(3, '\0'));
  // A record over two blocks: FIRST, MIDDLE, LAST.
  int middles = 0;
  for (const Chunk& c : chunks) middles += c.type == 3;
  EXPECT_GE(middles, 3);
}

TEST(WandbWriter, RecordsMatchProtobufsEncoding) {
  // r = Record(num=3); r.history.item.add(key='loss', value_json='2.5')
  // r.history.item.add(key='_step', value_json='7'); r.history.step.num = 7
  EXPECT_EQ(wandb_history_record(3, 7, {{"loss", "2.5"}, {"_step", "7"}}),
            hex_bytes("08 03 12 1f 0a 0c 0a 04 6c 6f 73 73 82 01 03 32 2e 35 0a 0b 0a 05 5f 73 "
                      "74 65 70 82 01 01 37 12 02 08 07"));
  // r = Record(num=9); r.exit.exit_code = 130; r.exit.runtime = 12
  EXPECT_EQ(wandb_exit_record(9, 130, 12), hex_bytes("08 09 92 01 05 08 82 01 10 0c"));
  // r = Record(num=9); r.exit.SetInParent()
  EXPECT_EQ(wandb_exit_record(9, 0, 0), hex_bytes("08 09 92 01 00"));
  // r = Record(num=4); r.summary.update.add(key='loss', value_json='NaN')
  EXPECT_EQ(wandb_summary_record(4, {{"loss", wandb_json_number(std::nan(""))}}),
            hex_bytes("08 04 1a 0e 0a 0c 0a 04 6c 6f 73 73 82 01 03 4e 61 4e"));
  // r = Record(num=2); x = r.run; x.run_id='ab12cd34'; x.entity='team'; x.project='proj'
  // x.config.update.add(key='train', value_json='{"lr":0.01}'); x.run_group='g'
  // x.display_name='nm'; x.notes='n'; x.tags.extend(['t1','t2']); x.host='h'
  // x.start_time.seconds=1700000000; x.start_time.nanos=500000000; x.resumed=True
  WandbRunInfo run;
  run.id = "ab12cd34", run.entity = "team", run.project = "proj", run.group = "g";
  run.name = "nm", run.notes = "n", run.tags = {"t1", "t2"}, run.host = "h";
  run.config = {{"train", {{"lr", 0.01}}}};
  run.start_time = 1700000000.5;
  run.resumed = true;
  EXPECT_EQ(wandb_run_record(2, run),
            hex_bytes("08 02 8a 01 56 0a 08 61 62 31 32 63 64 33 34 12 04 74 65 61 6d 1a 04 70 "
                      "72 6f 6a 22 17 0a 15 0a 05 74 72 61 69 6e 82 01 0b 7b 22 6c 72 22 3a 30 "
                      "2e 30 31 7d 32 01 67 42 02 6e 6d 4a 01 6e 52 02 74 31 52 02 74 32 6a 01 "
                      "68 8a 01 0c 08 80 e2 cf aa 06 10 80 ca b5 ee 01 90 01 01"));
  EXPECT_EQ(wandb_json_number(INFINITY), "Infinity");
  EXPECT_EQ(wandb_json_number(-INFINITY), "-Infinity");
  EXPECT_EQ(wandb_json_number(0.1), "0.1");
}

// The record type (Record's oneof field number) and, for history records, the step and items.
struct Decoded {
  int type = 0;
  int64_t num = 0, step = -1, exit_code = 0;
  std::vector<WandbItem> items;
};

Decoded decode(const std::string& record) {
  Decoded d;
  ProtoReader r(record, "record");
  for (ProtoReader::Field f; r.next(f);) {
    if (f.number == 1) d.num = static_cast<int64_t>(f.number_value);
    if (f.wire_type != 2) continue;
    d.type = f.number;
    ProtoReader m(f.bytes, "message");
    for (ProtoReader::Field g; m.next(g);) {
      if (f.number == 18 && g.number == 1) d.exit_code = static_cast<int64_t>(g.number_value);
      if ((f.number == 2 || f.number == 3) && g.number == 1) {
        ProtoReader item(g.bytes, "item");
        WandbItem it;
        for (ProtoReader::Field h; item.next(h);)
          (h.number == 1 ? it.key : it.value_json) = std::string(h.bytes);
        d.items.push_back(it);
      }
      if (f.number == 2 && g.number == 2) {
        ProtoReader step(g.bytes, "step");
        for (ProtoReader::Field h; step.next(h);) d.step = static_cast<int64_t>(h.number_value);
      }
    }
  }
  return d;
}

std::string item(const Decoded& d, const std::string& key) {
  for (const WandbItem& it : d.items)
    if (it.key == key) return it.value_json;
  return "(none)";
}

TEST(WandbWriter, AnOfflineRunMergesRowsByStepAndEndsWithTheExitCode) {
  const fs::path parent = test::temp_dir() / "wandb";
  WandbRunInfo info;
  info.id = new_wandb_run_id();
  info.project = "p";
  info.start_time = 1700000000;
  std::string path;
  {
    WandbOfflineRun run(parent.string(), info);
    path = run.path();
    EXPECT_EQ(fs::path(run.dir()).filename().string().substr(0, 12), "offline-run-");
    EXPECT_EQ(fs::path(path).filename(), "run-" + info.id + ".wandb");
    EXPECT_TRUE(fs::is_directory(fs::path(run.dir()) / "files"));
    EXPECT_TRUE(fs::is_directory(fs::path(run.dir()) / "logs"));
    EXPECT_EQ(fs::read_symlink(parent / "latest-run"), fs::path(run.dir()).filename());
    run.log(1, {{"loss", "3"}});
    run.log(2, {{"loss", "2"}});
    run.log(2, {{"val_loss", "2.5"}, {"loss", "1.5"}});  // the same step: one row
    run.log(4, {{"loss", "1"}});
    run.finish(143);
    run.finish(0);  // once only
  }
  EXPECT_EQ(newest_wandb_run_id(parent.string()), info.id);
  const std::vector<std::string> records = read_log(file_bytes(path));
  std::vector<Decoded> d;
  for (const std::string& r : records) d.push_back(decode(r));
  ASSERT_EQ(d.size(), 9u);  // header, run, 3 x (history, summary), exit
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i].num, static_cast<int64_t>(i + 1));
  EXPECT_EQ(d[0].type, 21);
  EXPECT_EQ(d[1].type, 17);
  const int64_t steps[] = {1, 2, 4};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(d[2 + 2 * k].type, 2);
    EXPECT_EQ(d[3 + 2 * k].type, 3);
    EXPECT_EQ(d[2 + 2 * k].step, steps[k]);
    EXPECT_EQ(item(d[2 + 2 * k], "_step"), std::to_string(steps[k]));
    EXPECT_EQ(item(d[3 + 2 * k], "loss"), item(d[2 + 2 * k], "loss"));
  }
  EXPECT_EQ(item(d[4], "loss"), "1.5");
  EXPECT_EQ(item(d[4], "val_loss"), "2.5");
  EXPECT_EQ(d[8].type, 18);
  EXPECT_EQ(d[8].exit_code, 143);

  // A run that is not finished (an exception unwinding the trainer) ends as failed, exit 1; a
  // second run of the same id takes its own directory and the latest-run link.
  {
    WandbOfflineRun run(parent.string(), info);
    path = run.path();
    run.log(5, {{"loss", "0.5"}});
  }
  EXPECT_EQ(fs::read_symlink(parent / "latest-run"), fs::path(path).parent_path().filename());
  const std::vector<std::string> again = read_log(file_bytes(path));
  ASSERT_EQ(again.size(), 5u);
  EXPECT_EQ(decode(again[2]).step, 5);
  EXPECT_EQ(decode(again[4]).exit_code, 1);
}

TEST(WandbWriter, AnUnwritableDirectoryIsNamed) {
  const fs::path file = test::temp_dir() / "a_file";
  std::ofstream(file) << "x";
  WandbRunInfo info;
  info.id = "abc", info.project = "p";
  try {
    WandbOfflineRun run((file / "wandb").string(), info);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
}

}  // namespace wandb_writer_test
}  // namespace lmt
