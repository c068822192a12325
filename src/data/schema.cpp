// Sources as Documents (schema.h): text records pass through as one loss-bearing segment;
// instruction and chat records are read field by field (JSONL objects, CSV/TSV columns), checked,
// and rendered through the source's chat template (chat_template.h). Files are read through a
// MappedFile whose pages are handed back as records are passed on, so memory stays bounded.
#include "data/schema.h"

#include <simdjson.h>

#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "data/chat_template.h"
#include "data/csv_source.h"
#include "data/parquet_source.h"

namespace lmt {

namespace {

using Problem = std::optional<RecordProblem>;

Problem problem(const std::string& reason, const std::string& detail = "") {
  return RecordProblem{reason, detail.empty() ? reason : detail};
}

// A string field of a JSON object. `required`: missing (or null) is a problem, else it reads as "".
Problem json_string(const simdjson::dom::object& obj, const std::string& name, bool required,
                    std::string_view& out) {
  out = {};
  simdjson::dom::element v;
  if (obj.at_key(name).get(v) || v.is_null()) {
    if (required) return problem("missing field '" + name + "'");
    return std::nullopt;
  }
  if (v.get_string().get(out)) return problem("field '" + name + "' is not a string");
  return std::nullopt;
}

// The messages of a chat record: a JSON array of {"role": ..., "content": ...} objects.
Problem read_messages(const simdjson::dom::element& list, const std::string& field,
                      std::vector<ChatMessage>& out) {
  out.clear();
  simdjson::dom::array arr;
  if (list.get_array().get(arr)) return problem("field '" + field + "' is not a list");
  size_t i = 0;
  for (simdjson::dom::element e : arr) {
    const std::string at = field + "[" + std::to_string(i++) + "]";
    simdjson::dom::object m;
    if (e.get_object().get(m)) return problem("message is not an object", at + " is not an object");
    simdjson::dom::element role_v, content_v;
    std::string_view role, content;
    if (m.at_key("role").get(role_v))
      return problem("message without 'role'", at + ": missing 'role'");
    if (role_v.get_string().get(role))
      return problem("message 'role' is not a string", at + ": 'role' is not a string");
    const std::optional<ChatRole> r = parse_chat_role(role);
    if (!r)
      return problem("unknown role", at + ": unknown role '" + std::string(role) +
                                         "' (roles: system, user, assistant)");
    if (m.at_key("content").get(content_v))
      return problem("message without 'content'",
                     at + " (" + std::string(role) + "): missing 'content'");
    if (content_v.get_string().get(content))
      return problem("message 'content' is not a string",
                     at + " (" + std::string(role) + "): 'content' is not a string");
    out.push_back({*r, content});
  }
  return std::nullopt;
}

// What a record holds before rendering: an instruction triple or a message list.
struct SchemaReader {
  const TextSourceSpec& spec;
  const ChatTemplate& tmpl;
  bool chat = false;
  bool loss_all = false;
  std::vector<ChatMessage> messages;
  Document doc;

  Problem render_instruction(std::string_view instruction, std::string_view input,
                             std::string_view output) {
    if (trim_whitespace(instruction).empty())
      return problem("field '" + spec.instruction_field + "' is empty");
    if (trim_whitespace(output).empty())
      return problem("field '" + spec.output_field + "' is empty");
    return tmpl.render_instruction(instruction, input, output, loss_all, doc);
  }

  Problem from_json(const simdjson::dom::object& obj) {
    if (chat) {
      simdjson::dom::element list;
      if (obj.at_key(spec.messages_field).get(list))
        return problem("missing field '" + spec.messages_field + "'");
      if (Problem p = read_messages(list, spec.messages_field, messages)) return p;
      return tmpl.render_chat(messages, loss_all, doc, spec.messages_field);
    }
    std::string_view instruction, input, output;
    if (Problem p = json_string(obj, spec.instruction_field, true, instruction)) return p;
    if (Problem p = json_string(obj, spec.input_field, false, input)) return p;
    if (Problem p = json_string(obj, spec.output_field, true, output)) return p;
    return render_instruction(instruction, input, output);
  }
};

Problem utf8(const std::string& s, const std::string& column) {
  if (simdjson::validate_utf8(s.data(), s.size())) return std::nullopt;
  return problem("invalid UTF-8", "column '" + column + "': invalid UTF-8");
}

}  // namespace

TextSourceStats for_each_source_document(const TextSourceSpec& spec, int index,
                                         const std::function<void(Document&&)>& fn) {
  const std::string key = "data.sources[" + std::to_string(index) + "]";
  if (spec.schema == "text") {
    return for_each_document(spec, index, [&](std::string_view text) {
      Document d;
      d.segments.push_back({std::string(text), true});
      fn(std::move(d));
    });
  }
  if (spec.schema != "instruction" && spec.schema != "chat")
    throw UserError(key + ".schema: '" + spec.schema +
                    "' is not a schema (text, instruction or chat)");
  if (spec.max_record_bytes < 1)
    throw UserError(key + ".max_record_bytes: must be at least 1 (got " +
                    std::to_string(spec.max_record_bytes) + ")");
  if (spec.loss != "assistant" && spec.loss != "all")
    throw UserError(key + ".loss: '" + spec.loss + "' must be assistant or all");
  if (spec.on_error != "stop" && spec.on_error != "skip")
    throw UserError(key + ".on_error: '" + spec.on_error + "' must be stop or skip");
  const ChatTemplate tmpl = ChatTemplate::from_setting(spec.chat_template, key + ".chat_template");
  SchemaReader reader{spec, tmpl, spec.schema == "chat", spec.loss == "all", {}, {}};
  TextSourceStats stats;
  SkippedRecords* skipped = spec.on_error == "skip" ? &stats.skipped : nullptr;
  // A rendered record goes on, or is reported at FILE + sep + n ("FILE:LINE", "FILE: row N").
  auto pass_on = [&](const Problem& p, const std::string& file, const char* sep, int64_t n) {
    if (p) {
      report_bad_record(skipped, file + sep + std::to_string(n), p->reason, p->detail);
      return;
    }
    ++stats.documents;
    for (const Segment& s : reader.doc.segments) stats.bytes += static_cast<int64_t>(s.text.size());
    reader.doc.origin = file + sep + std::to_string(n);
    fn(std::move(reader.doc));
    reader.doc = Document{};
  };
  if (spec.format == "parquet") {
    simdjson::dom::parser parser;  // chat: the messages column holds JSON, as in CSV
    for (const std::string& file : list_source_files(spec.path, key, spec.exclude)) {
      ++stats.files;
      bool has_input = false;
      for (const ParquetColumn& c : parquet_columns(file)) has_input |= c.name == spec.input_field;
      std::vector<std::string> cols =
          reader.chat ? std::vector<std::string>{spec.messages_field}
                      : std::vector<std::string>{spec.instruction_field, spec.output_field};
      if (!reader.chat && has_input) cols.push_back(spec.input_field);
      parquet_rows(file, cols, [&](int64_t row, std::span<const std::optional<std::string_view>> v) {
        auto cell = [&](size_t i, std::string& out) -> Problem {
          if (!v[i]) return problem("null in column '" + cols[i] + "'");
          out.assign(*v[i]);
          return utf8(out, cols[i]);
        };
        pass_on(
            [&]() -> Problem {
              std::string a, b, c;
              if (reader.chat) {
                if (Problem p = cell(0, a)) return p;
                simdjson::dom::element list;
                if (parser.parse(a).get(list))
                  return problem("malformed JSON",
                                 "column '" + spec.messages_field + "': malformed JSON");
                if (Problem p = read_messages(list, spec.messages_field, reader.messages)) return p;
                return tmpl.render_chat(reader.messages, reader.loss_all, reader.doc,
                                        spec.messages_field);
              }
              if (Problem p = cell(0, a)) return p;
              if (Problem p = cell(1, b)) return p;
              if (has_input && v[2])
                if (Problem p = cell(2, c)) return p;
              return reader.render_instruction(a, c, b);
            }(),
            file, ": row ", row);
      });
    }
    return stats;
  }
  const bool jsonl = spec.format == "jsonl";
  const bool csv = spec.format == "csv" || spec.format == "tsv";
  if (!jsonl && !csv)
    throw UserError(key + ".format: '" + spec.format + "' cannot hold " + spec.schema +
                    " records (use jsonl, csv or tsv)");

  for (const std::string& file : list_source_files(spec.path, key, spec.exclude)) {
    MappedFile mapped(file, key);
    const std::string_view text = mapped.text();
    ++stats.files;
    size_t consumed = 0;
    // Passes a rendered record on (or reports why it cannot be), then hands back read pages.
    auto finish = [&](const Problem& p, int64_t line) {
      mapped.check();  // the file truncated under the read: its zeros are not passed on
      pass_on(p, file, ":", line);
      mapped.release_before(text.data() + consumed);
    };
    try {
      if (jsonl) {
        jsonl_objects(
            text, file, skipped,
            [&](const simdjson::dom::object& obj, int64_t line) {
              finish(reader.from_json(obj), line);
            },
            &consumed, spec.max_record_bytes);
        mapped.check();
        continue;
      }
      size_t instruction_col = 0, input_col = 0, output_col = 0, messages_col = 0;
      simdjson::dom::parser parser;  // chat: the messages column holds JSON
      csv_rows(
          text, spec.format == "csv" ? ',' : '\t', file,
          [&](const std::vector<std::string>& names, int64_t line) {
            if (reader.chat) {
              messages_col = csv_column(names, spec.messages_field, file, line);
              return;
            }
            instruction_col = csv_column(names, spec.instruction_field, file, line);
            input_col = csv_column(names, spec.input_field, file, line, /*optional=*/true);
            output_col = csv_column(names, spec.output_field, file, line);
          },
          [&](const std::vector<std::string>& f, int64_t line) {
            finish(
                [&]() -> Problem {
                  if (reader.chat) {
                    const std::string& cell = f[messages_col];
                    if (Problem p = utf8(cell, spec.messages_field)) return p;
                    simdjson::dom::element list;
                    if (parser.parse(cell).get(list))
                      return problem("malformed JSON",
                                     "column '" + spec.messages_field + "': malformed JSON");
                    if (Problem p = read_messages(list, spec.messages_field, reader.messages))
                      return p;
                    return tmpl.render_chat(reader.messages, reader.loss_all, reader.doc,
                                            spec.messages_field);
                  }
                  static const std::string kNone;
                  const std::string& input = input_col < f.size() ? f[input_col] : kNone;
                  if (Problem p = utf8(f[instruction_col], spec.instruction_field)) return p;
                  if (Problem p = utf8(input, spec.input_field)) return p;
                  if (Problem p = utf8(f[output_col], spec.output_field)) return p;
                  return reader.render_instruction(f[instruction_col], input, f[output_col]);
                }(),
                line);
          },
          &consumed, spec.max_record_bytes, skipped);
    } catch (const UserError&) {
      mapped.check();  // a record the truncation's zeros broke: the truncation is the error
      throw;
    }
    mapped.check();
  }
  return stats;
}

}  // namespace lmt
