// JSONL sources: documents from one string field per line, every bad record reported as
// FILE:LINE and a reason, or skipped and counted when asked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/jsonl_source.h"
#include "data/prepare.h"
#include "data/text_source.h"

namespace lmt {
namespace {

using Docs = std::vector<std::string>;

Docs parse_jsonl(const std::string& text, SkippedRecords* skipped = nullptr,
                 const std::string& field = "text") {
  Docs out;
  jsonl_documents(text, "f.jsonl", field, skipped,
                  [&](std::string_view d) { out.emplace_back(d); });
  return out;
}

std::string jsonl_error_of(const std::string& text) {
  try {
    parse_jsonl(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Jsonl, ReadsTheFieldOfEveryLine) {
  EXPECT_EQ(
      parse_jsonl(
          "{\"text\": \"a\"}\n{\"id\": 3, \"text\": \"b\\nc \\u00e9\"}\n\n  \n{\"text\":\"d\"}"),
      (Docs{"a", "b\nc \xc3\xa9", "d"}));
  EXPECT_EQ(parse_jsonl("{\"body\": \"x\", \"text\": \"y\"}\r\n", nullptr, "body"), (Docs{"x"}));
  EXPECT_EQ(parse_jsonl(""), Docs{});
}

TEST(Jsonl, BadRecordsNameFileLineAndReason) {
  const std::string good = "{\"text\": \"ok\"}\n";
  EXPECT_NE(jsonl_error_of(good + "{\"text\": \"unterminated}\n").find("f.jsonl:2: malformed JSON"),
            std::string::npos);
  EXPECT_NE(jsonl_error_of(good + good + "{\"text\": \"a\"} trailing\n")
                .find("f.jsonl:3: malformed JSON"),
            std::string::npos);
  EXPECT_NE(jsonl_error_of("[1, 2]\n").find("f.jsonl:1: not a JSON object"), std::string::npos);
  EXPECT_NE(jsonl_error_of(good + "{\"txt\": \"a\"}\n").find("f.jsonl:2: missing field 'text'"),
            std::string::npos);
  EXPECT_NE(jsonl_error_of("{\"text\": 5}\n").find("f.jsonl:1: field 'text' is not a string"),
            std::string::npos);
  EXPECT_NE(jsonl_error_of("{\"text\": \"\"}\n").find("f.jsonl:1: empty document"),
            std::string::npos);
  EXPECT_NE(jsonl_error_of("{\"text\": \"caf\xc3\"}\n").find("f.jsonl:1: invalid UTF-8"),
            std::string::npos);
  EXPECT_EQ(jsonl_error_of("{\"text\": \"a\"}\n"), "");  // a good file raises nothing
  EXPECT_NE(jsonl_error_of("{oops\n").find("on_error: skip"), std::string::npos);  // the way out
}

TEST(Jsonl, SkipCountsBadRecordsByReason) {
  SkippedRecords skipped;
  Docs docs = parse_jsonl(
      "{\"text\": \"a\"}\n{oops\n{\"text\": 1}\n{\"text\": \"\"}\n{\"text\": \"b\"}\n{}\n",
      &skipped);
  EXPECT_EQ(docs, (Docs{"a", "b"}));
  EXPECT_EQ(skipped.total, 4);
  EXPECT_EQ(skipped.by_reason["malformed JSON"], 1);
  EXPECT_EQ(skipped.by_reason["field 'text' is not a string"], 1);
  EXPECT_EQ(skipped.by_reason["empty document"], 1);
  EXPECT_EQ(skipped.by_reason["missing field 'text'"], 1);
}

TEST(Jsonl, ARecordLongerThanTheBoundIsABadRecordNotAParse) {
  const std::string good = "{\"text\": \"ok\"}\n";
  const std::string long_line = "{\"text\": \"" + std::string(100, 'x') + "\"}\n";
  Docs docs;
  auto keep = [&](std::string_view d) { docs.emplace_back(d); };
  try {
    jsonl_documents(good + long_line + good, "f.jsonl", "text", nullptr, keep, nullptr, 64);
    FAIL() << "no error";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("f.jsonl:2: a record of 112 bytes, more than the 64 of the source's "
                     "max_record_bytes"),
              std::string::npos)
        << m;
  }
  docs.clear();
  SkippedRecords skipped;
  jsonl_documents(good + long_line + good, "f.jsonl", "text", &skipped, keep, nullptr, 64);
  EXPECT_EQ(docs, (Docs{"ok", "ok"}));
  EXPECT_EQ(skipped.by_reason["record too long"], 1);
  // The default bound: a line of more than 64 MiB is refused unparsed.
  const std::string huge = "{\"text\": \"" + std::string(kMaxRecordBytes, 'y') + "\"}";
  EXPECT_THROW(parse_jsonl(huge), UserError);
}

TEST(Jsonl, SourcesReportSkippedRecords) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lmt_jsonl_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "d.jsonl");
    for (int i = 0; i < 30; ++i)
      f << "{\"text\": \"document number " << i << " with some words\"}\n";
    f << "not json\n";
  }
  PrepareOptions opt;
  opt.sources.resize(1);
  TextSourceSpec& spec = opt.sources[0];
  spec.path = (dir / "d.jsonl").string();
  spec.format = "jsonl";
  opt.seq_len = 16;
  opt.val_fraction = 0.1;
  opt.out_dir = (dir / "store").string();
  opt.progress = false;
  try {
    prepare_store(opt);
    FAIL() << "a bad record must stop the run by default";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("d.jsonl:31: malformed JSON"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "store")) << "a failed prepare leaves no store";
  spec.on_error = "skip";
  Manifest m = prepare_store(opt);
  EXPECT_EQ(m.sources[0].documents, 30);
  EXPECT_EQ(m.sources[0].skipped, 1);
  EXPECT_NE(manifest_summary(m).find("skipped 1: malformed JSON 1"), std::string::npos)
      << manifest_summary(m);
  // A record past the source's max_record_bytes is skipped the same way.
  spec.max_record_bytes = 45;
  m = prepare_store(opt);
  EXPECT_EQ(m.sources[0].documents, 10);  // "document number N with some words": 0 to 9 fit
  EXPECT_EQ(m.sources[0].skipped_by_reason["record too long"], 20);
  spec.max_record_bytes = 0;
  EXPECT_THROW(prepare_store(opt), UserError);
  spec.max_record_bytes = kMaxRecordBytes;
  spec.on_error = "ignore";
  EXPECT_THROW(prepare_store(opt), UserError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt
