// Text sources: split modes, directory order, error messages naming the source.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "data/text_source.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

// A fresh temporary directory, removed at the end of the test.
struct SourceDir {
  fs::path path;
  SourceDir() {
    path = fs::temp_directory_path() / ("lmt_text_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~SourceDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    fs::path p = path / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
};

std::vector<std::string> split(const std::string& text, const std::string& mode,
                               const std::string& delim = "%") {
  std::vector<std::string> out;
  split_documents(text, mode, delim, "data.sources[0]",
                  [&](std::string_view d) { out.emplace_back(d); });
  return out;
}

using Docs = std::vector<std::string>;

TEST(TextSource, DelimiterSplitsFortuneFiles) {
  EXPECT_EQ(split("one\ntwo\n%\nthree\n%\n", "delimiter"), (Docs{"one\ntwo", "three"}));
  // No trailing delimiter, empty documents skipped, CRLF line ends, a '%' inside a line stays.
  EXPECT_EQ(split("%\n%\n50% off\r\n%\r\n\n%\nlast\n", "delimiter"), (Docs{"50% off", "last"}));
  EXPECT_EQ(split("a\n\nb\n%", "delimiter"), (Docs{"a\n\nb"}));
  EXPECT_EQ(split("", "delimiter"), Docs{});
  // An empty delimiter splits at blank lines (paragraphs).
  EXPECT_EQ(split("p1 l1\np1 l2\n\n\np2\n", "delimiter", ""), (Docs{"p1 l1\np1 l2", "p2"}));
}

TEST(TextSource, LineAndFileModes) {
  EXPECT_EQ(split("a\n\nbb\r\n  \nc", "line"), (Docs{"a", "bb", "  ", "c"}));
  EXPECT_EQ(split("a\n\nb\n", "file"), (Docs{"a\n\nb\n"}));
  EXPECT_EQ(split("", "file"), Docs{});
  EXPECT_THROW(split("x", "paragraph"), UserError);
}

TEST(TextSource, DirectoryIsReadRecursivelyInPathOrder) {
  SourceDir dir;
  dir.write("b.txt", "B1\n%\nB2\n");
  dir.write("a/z.txt", "AZ\n");
  dir.write("a.txt", "A\n");
  dir.write("c/d/e.txt", "CDE");
  TextSourceSpec spec{dir.path.string(), "text", "delimiter", "%", 1.0};
  TextSourceStats stats;
  Docs docs = read_documents(spec, 0, &stats);
  // "a.txt" < "a/z.txt" byte-wise ('.' = 0x2e < '/' = 0x2f).
  EXPECT_EQ(docs, (Docs{"A", "AZ", "B1", "B2", "CDE"}));
  EXPECT_EQ(stats.files, 4);
  EXPECT_EQ(stats.documents, 5);
  EXPECT_EQ(stats.bytes, 1 + 2 + 2 + 2 + 3);
}

TEST(TextSource, ExcludePatternsAndSymlinkRepeatsAreLeftOut) {
  SourceDir dir;
  dir.write("art", "A1\n%\nA2\n");
  dir.write("art.dat", std::string("\x00\x01binary", 8));
  fs::create_symlink(dir.path / "art", dir.path / "art.u8");  // the layout of fortune files
  dir.write("sub/more", "M\n");
  TextSourceSpec spec{dir.path.string(), "text", "delimiter", "%", 1.0, {"*.dat"}};
  TextSourceStats stats;
  EXPECT_EQ(read_documents(spec, 0, &stats), (Docs{"A1", "A2", "M"}));
  EXPECT_EQ(stats.files, 2);
  TextSourceSpec all{dir.path.string(), "text", "delimiter", "%", 1.0, {"*"}};
  try {
    read_documents(all, 2);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("data.sources[2].path"), std::string::npos) << e.what();
  }
}

TEST(TextSource, SingleFileKeepsItsBytes) {
  SourceDir dir;
  const std::string bytes = "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\r\n\tend";
  std::string path = dir.write("one.txt", bytes);
  Docs docs = read_documents({path, "text", "file", "%", 1.0}, 0);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0], bytes);
}

std::string error_of(const std::function<void()>& fn);

// Text must be text. Under on_error: stop a binary file (a NUL byte in its first 8 KiB) and a
// document that is not valid UTF-8 are errors naming the file and line; under skip they are left
// out and counted, and every good document still comes through.
TEST(TextSource, BinaryFilesAndInvalidUtf8AreRefusedOrCounted) {
  SourceDir dir;
  const std::string bin = dir.write("d/a.bin", std::string(100, 'x') + std::string("\x00\x01", 2));
  std::string msg = error_of([&] { read_documents({bin, "text", "line", "%", 1.0}, 1); });
  EXPECT_NE(msg.find(bin + ": a binary file (a NUL byte at offset 100); leave it out with "
                           "data.sources[1].exclude (set on_error: skip"),
            std::string::npos)
      << msg;
  const std::string bad = dir.write("d/b.txt",
                                    "good one\n\nfine \xc3\xa9\ncaf\xc3\n"
                                    "\xed\xa0\x80 surrogate\nlast\n");
  msg = error_of([&] { read_documents({bad, "text", "line", "%", 1.0}, 0); });
  EXPECT_NE(msg.find(bad + ":4: the document starting on this line is not valid UTF-8"),
            std::string::npos)
      << msg;
  const std::string delim =
      dir.write("d/c.txt", "first\nfortune\n%\nsecond\n%\nthird \xff\nfortune\n%\nok\n");
  msg = error_of([&] { read_documents({delim, "text", "delimiter", "%", 1.0}, 0); });
  EXPECT_NE(msg.find(delim + ":6: the document starting"), std::string::npos) << msg;

  TextSourceSpec skip{(dir.path / "d").string(), "text", "line", "%", 1.0};
  skip.on_error = "skip";
  TextSourceStats stats;
  Docs docs = read_documents(skip, 0, &stats);
  EXPECT_EQ(docs, (Docs{"good one", "fine \xc3\xa9", "last", "first", "fortune", "%", "second", "%",
                        "fortune", "%", "ok"}));
  EXPECT_EQ(stats.skipped.total, 4);
  EXPECT_EQ(stats.skipped.by_reason["binary file"], 1);
  EXPECT_EQ(stats.skipped.by_reason["invalid UTF-8"], 3);
  EXPECT_EQ(stats.files, 3);  // every file of the source, the skipped one included

  // A NUL past the first 8 KiB does not make a file binary: U+0000 is valid UTF-8.
  const std::string late = dir.write("late.txt", std::string(9000, 'y') + std::string("\0z", 2));
  docs = read_documents({late, "text", "file", "%", 1.0}, 0);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].size(), 9002u);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

TEST(TextSource, ErrorsNameTheSource) {
  SourceDir dir;
  std::string missing = (dir.path / "nope.txt").string();
  std::string msg = error_of([&] { read_documents({missing, "text", "line", "%", 1.0}, 3); });
  EXPECT_NE(msg.find("data.sources[3].path"), std::string::npos) << msg;
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;

  fs::create_directories(dir.path / "empty");
  msg = error_of([&] {
    read_documents({(dir.path / "empty").string(), "text", "line", "%", 1.0}, 1);
  });
  EXPECT_NE(msg.find("data.sources[1].path"), std::string::npos) << msg;

  std::string file = dir.write("x.txt", "x");
  msg = error_of([&] { read_documents({file, "xml", "line", "%", 1.0}, 2); });
  EXPECT_NE(msg.find("data.sources[2].format"), std::string::npos) << msg;
  msg = error_of([&] { read_documents({file, "text", "words", "%", 1.0}, 2); });
  EXPECT_NE(msg.find("data.sources[2].split"), std::string::npos) << msg;
}

}  // namespace
}  // namespace lmt
