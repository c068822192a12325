// A CSV or TSV source through csv_documents, as prepare reads it. The first byte chooses the
// separator (bit 0: tab) and whether bad records are skipped (bit 1); the rest is the file.
#include "data/csv_source.h"
#include "fuzz_target.h"

namespace lmt::fuzz {

int csv(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char sep = data[0] & 1 ? '\t' : ',';
  const bool skip = data[0] & 2;
  const std::string_view text = as_text(data + 1, size - 1);
  return accept_user_error([&] {
    SkippedRecords skipped;
    size_t consumed = 0;
    csv_documents(
        text, sep, "fuzz.csv", "text", skip ? &skipped : nullptr,
        [&](std::string_view doc) {
          expect(!doc.empty(), "documents not empty");
          expect(consumed <= text.size(), "the offset consumed within the file");
        },
        &consumed);
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(csv)
