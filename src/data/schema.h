// Sources as Documents: every record of a source, whatever its format (text, jsonl, csv, tsv,
// parquet) and schema, becomes one Document (data/document.h):
//   text:        the record's text as one segment with loss = true;
//   instruction: instruction / input / output fields rendered through the source's chat
//                template as a user turn and an assistant turn;
//   chat:        a list of {role, content} messages (role system | user | assistant) rendered
//                through the chat template.
// For instruction and chat, only the assistant's turns count in the loss unless loss = all.
// Bad records (missing field, wrong type, invalid UTF-8, empty, unknown role, ...) stop with
// FILE:LINE and the reason, or are skipped and counted by reason under on_error: skip.
#pragma once

#include <functional>

#include "data/document.h"
#include "data/text_source.h"

namespace lmt {

// Reads every record of source number `index` in order and passes it to `fn` as a Document;
// returns the counts. Throws UserError naming data.sources[index].<key> for a bad setting
// (unknown schema, template or loss; a schema the format cannot carry).
TextSourceStats for_each_source_document(const TextSourceSpec& spec, int index,
                                         const std::function<void(Document&&)>& fn);

}  // namespace lmt
