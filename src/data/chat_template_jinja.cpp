// ChatTemplate::jinja: a chat template's table (chat_template.h) written as a Jinja template that
// transformers renders to the same text. One generic template serves every style: literals for the
// prefix, headers, markers and separator, `| trim` where the style trims, Gemma's folding and
// alternation checks, and a default system turn. Everything sits on one line between tags, so
// transformers' trim_blocks / lstrip_blocks change nothing.
#include <string>

#include "data/chat_template.h"

namespace lmt {

namespace {

// A Jinja string literal. Jinja unescapes literals as Python's unicode-escape after turning
// non-ASCII into backslash escapes, so only the backslash, the quote and control characters
// need escaping (a raw CR would be normalised to LF).
std::string lit(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\'':
        out += "\\'";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\x";
          out += hex[(c >> 4) & 0xF];
          out += hex[c & 0xF];
        } else {
          out += c;
        }
    }
  }
  return out + "'";
}

// Emits a literal when it is not empty.
std::string emit(const std::string& s) {
  return s.empty() ? "" : "{{- " + lit(s) + " -}}";
}

}  // namespace

std::string ChatTemplate::jinja(bool instruction) const {
  const Style& st = instruction ? instruction_ : chat_;
  const char* roles[3] = {"system", "user", "assistant"};
  const std::string content = st.trim ? "message['content'] | trim" : "message['content']";
  auto turn_body = [&](int r, bool fold) {
    const Turn& t = st.turns[r];
    std::string out = emit(t.header);
    if (fold) out += "{%- if loop.first and fold -%}{{- fold + '\\n\\n' -}}{%- endif -%}";
    return out + "{{- " + content + " -}}" + emit(t.end + t.after);
  };
  std::string j = emit(st.prefix);
  j += "{%- set ns = namespace(first=true) -%}";
  if (st.gemma_rules) {
    j += "{%- if messages[0]['role'] == 'system' -%}{%- set fold = messages[0]['content'] -%}"
         "{%- set loop_messages = messages[1:] -%}"
         "{%- else -%}{%- set fold = '' -%}{%- set loop_messages = messages -%}{%- endif -%}";
  } else {
    j += "{%- set loop_messages = messages -%}";
  }
  if (!st.default_system.empty()) {
    const Turn& t = st.turns[0];
    j += "{%- if messages[0]['role'] != 'system' -%}" + emit(t.header) +
         emit((st.trim ? std::string(trim_whitespace(st.default_system)) : st.default_system) +
              t.end + t.after) +
         "{%- set ns.first = false -%}{%- endif -%}";
  }
  j += "{%- for message in loop_messages -%}";
  if (st.gemma_rules) {
    j += "{%- if message['role'] == 'system' -%}{{- raise_exception('" + name_ +
         ": a system message must be the first message') -}}{%- endif -%}"
         "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}{{- raise_exception('" +
         name_ +
         ": conversation roles must alternate user/assistant/user/assistant/...') -}}"
         "{%- endif -%}";
  }
  if (!st.separator.empty()) j += "{%- if not ns.first -%}" + emit(st.separator) + "{%- endif -%}";
  j += "{%- set ns.first = false -%}";
  for (int r = 0; r < 3; ++r) {
    j += std::string(r == 0 ? "{%- if" : "{%- elif") + " message['role'] == '" + roles[r] + "' -%}";
    j += turn_body(r, st.gemma_rules && r != 0);
  }
  j += "{%- else -%}{{- raise_exception('" + name_ +
       ": roles are system, user and assistant') -}}{%- endif -%}";
  j += "{%- endfor -%}";
  j += "{%- if add_generation_prompt -%}";
  if (!st.separator.empty()) j += "{%- if not ns.first -%}" + emit(st.separator) + "{%- endif -%}";
  j += emit(st.turns[2].header) + "{%- endif -%}";
  return j;
}

}  // namespace lmt
