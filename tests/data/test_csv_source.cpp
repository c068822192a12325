// CSV / TSV sources: RFC 4180 quoting, header columns, FILE:LINE errors, skip and count.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "data/csv_source.h"

namespace lmt {
namespace {

using Docs = std::vector<std::string>;

Docs parse(const std::string& text, char sep = ',', const std::string& col = "text",
           SkippedRecords* skipped = nullptr) {
  Docs out;
  csv_documents(text, sep, "f.csv", col, skipped, [&](std::string_view d) { out.emplace_back(d); });
  return out;
}

std::string error_of(const std::string& text, char sep = ',') {
  try {
    parse(text, sep);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Csv, Rfc4180Quoting) {
  EXPECT_EQ(parse("id,text\n1,plain\n2,\"with, comma\"\r\n3,\"say \"\"hi\"\"\"\n"),
            (Docs{"plain", "with, comma", "say \"hi\""}));
  // A quoted field may span lines; the line after it is counted correctly for messages.
  EXPECT_EQ(parse("text,n\n\"two\nlines\",1\n\nlast,2"), (Docs{"two\nlines", "last"}));
  EXPECT_EQ(parse("a\tb\tc\nx\t\"q\tr\"\tz\n", '\t', "b"), (Docs{"q\tr"}));
  EXPECT_EQ(parse(""), Docs{});
  EXPECT_EQ(parse("text\n"), Docs{});
}

TEST(Csv, ErrorsNameFileAndLine) {
  EXPECT_NE(error_of("id,body\n1,x\n")
                .find("f.csv:1: no column 'text' in the header (columns: id, body)"),
            std::string::npos);
  EXPECT_NE(error_of("text,n\n\"a\nb\",1\nc\n").find("f.csv:4: 1 fields, the header has 2"),
            std::string::npos)
      << error_of("text,n\n\"a\nb\",1\nc\n");
  EXPECT_NE(error_of("text\nok\n\"never closed\n").find("unterminated quoted field"),
            std::string::npos);
  EXPECT_NE(error_of("text\nab\"c\n").find("f.csv:2: a quote inside an unquoted field"),
            std::string::npos);
  EXPECT_NE(error_of("text\n\"ab\"c\n").find("f.csv:2: text after a closing quote"),
            std::string::npos);
  EXPECT_NE(error_of("text,n\n,1\n").find("f.csv:2: empty document"), std::string::npos);
  EXPECT_NE(error_of("text\nbad \xff byte\n").find("f.csv:2: invalid UTF-8"), std::string::npos);
}

TEST(Csv, SkipCountsBadRecords) {
  SkippedRecords skipped;
  EXPECT_EQ(parse("text,n\na,1\n,2\nb\xfe,3\nc,4\n", ',', "text", &skipped), (Docs{"a", "c"}));
  EXPECT_EQ(skipped.total, 2);
  EXPECT_EQ(skipped.by_reason["empty document"], 1);
  EXPECT_EQ(skipped.by_reason["invalid UTF-8"], 1);
}

// A record past max_record_bytes is a bad record named with its size and the limit, skipped and
// counted under on_error skip; a quoted field holding line breaks counts whole; the records after
// it read on (its line count is kept); a header that long is an error.
TEST(Csv, ARecordPastMaxRecordBytesIsABadRecord) {
  const std::string big(200, 'x');
  const std::string text = "text,n\na,1\n\"" + big + "\nmore " + big + "\",2\nb,3\n";
  Docs out;
  auto run = [&](SkippedRecords* skipped) {
    out.clear();
    csv_documents(
        text, ',', "f.csv", "text", skipped, [&](std::string_view d) { out.emplace_back(d); },
        nullptr, 100);
  };
  try {
    run(nullptr);
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "f.csv:3: a record of 411 bytes, more than the 100 of the source's "
                  "max_record_bytes"),
              std::string::npos)
        << e.what();
  }
  SkippedRecords skipped;
  run(&skipped);
  EXPECT_EQ(out, (Docs{"a", "b"}));
  EXPECT_EQ(skipped.by_reason["record too long"], 1);
  // The lines of the long record are counted: a bad record after it is named at its own line.
  skipped = {};
  try {
    csv_documents(
        text + ",4\n", ',', "f.csv", "text", &skipped, [](std::string_view) {}, nullptr, 100);
  } catch (const UserError& e) {
    ADD_FAILURE() << e.what();
  }
  EXPECT_EQ(skipped.total, 2);
  EXPECT_NE(error_of(text + ",4\n").find("f.csv:6: empty document"), std::string::npos);
  try {
    csv_documents(
        "text" + big + "\nx\n", ',', "f.csv", "text" + big, nullptr, [](std::string_view) {},
        nullptr, 100);
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("f.csv:1: the header row is a record of"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lmt
