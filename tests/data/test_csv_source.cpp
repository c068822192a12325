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

}  // namespace
}  // namespace lmt
