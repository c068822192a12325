// Sources as Documents: every record of a source, whatever its format (text, jsonl, csv, tsv,
// parquet) and schema, becomes one Document (data/document.h):
//   text:        the record's text as one segment with loss = true, has_special = false;
//   instruction: instruction / input / output fields (JSONL string fields; CSV/TSV columns, the
//                input column optional) rendered through the source's chat template as a user turn
//                (the instruction, then "\n\n" and the input when it is present and not blank;
//                plain: "\n\n### Input:\n") and an assistant turn (the output);
//   chat:        a list of {"role": system | user | assistant, "content": string} messages (JSONL:
//                the messages_field array; CSV/TSV: that column holds the array as JSON text)
//                rendered through the chat template.
// Templates, loss masks and has_special: data/chat_template.h. With loss = assistant only the
// assistant turns' content and end-of-turn marker count; with loss = all every byte does.
// Bad records (malformed JSON, missing field, wrong type, invalid UTF-8, blank content / output,
// unknown role, no assistant turn, an order the template cannot express) stop with
// "FILE:LINE: reason" (naming the field, message index and role), or under on_error: skip are
// counted in TextSourceStats::skipped by a fixed reason ("unknown role", "empty content", ...).
// Files are read through a MappedFile whose read pages are handed back (bounded memory).
#pragma once

#include <functional>

#include "data/document.h"
#include "data/text_source.h"

namespace lmt {

// Reads every record of source number `index` in order and passes it to `fn` as a Document;
// returns the counts (bytes: of the rendered text). Throws UserError naming
// data.sources[index].<key> for a bad setting (unknown schema, chat_template, loss or on_error; a
// format that cannot carry the schema; parquet for instruction / chat, not supported yet).
TextSourceStats for_each_source_document(const TextSourceSpec& spec, int index,
                                         const std::function<void(Document&&)>& fn);

}  // namespace lmt
