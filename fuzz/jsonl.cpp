// A JSONL source through jsonl_documents, as prepare reads it. The first byte chooses whether bad
// records stop the run (a UserError) or are skipped and counted; the rest is the file.
#include "data/jsonl_source.h"
#include "fuzz_target.h"

namespace lmt::fuzz {

int jsonl(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool skip = data[0] & 1;
  const std::string_view text = as_text(data + 1, size - 1);
  return accept_user_error([&] {
    SkippedRecords skipped;
    size_t consumed = 0;
    jsonl_documents(
        text, "fuzz.jsonl", "text", skip ? &skipped : nullptr,
        [&](std::string_view doc) {
          expect(!doc.empty(), "documents not empty");
          expect(consumed <= text.size(), "the offset consumed within the file");
        },
        &consumed);
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(jsonl)
