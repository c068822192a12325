// The Jinja subset lm-evaluation-harness task files use (doc_to_text, doc_to_target, ...),
// rendered as the harness renders them: jinja2's Environment(undefined=StrictUndefined,
// keep_trailing_newline=True), no trim_blocks, no lstrip_blocks, the record's fields as top-level
// variables. Values print as Python's str() prints them, so "{{ choices }}" writes
// "['a', 'b']" just as Python would, and the harness's literal_eval reads it back.
//
// Supported: {{ }}, {% if/elif/else/endif %}, {% for x in xs %} (else, loop.index, index0,
// revindex, revindex0, first, last, length), {% set %}, whitespace control ({%- -%}), comments
// {# #}; literals, names, .attr, [key], slices, ~ + - * / // % **, comparisons, in, not in, and,
// or, not, `a if c else b`, `is` tests (defined, undefined, none, string, number, integer, float,
// mapping, sequence, iterable, true, false, boolean, even, odd, lower, upper); filters trim,
// lower, upper, capitalize, join, length/count, replace, first, last, string, int, float, abs,
// default/d, list; str methods strip, lstrip, rstrip, split, replace, lower, upper, capitalize,
// startswith, endswith, join, count, find, index, isdigit, format-free; list methods index and
// count; dict methods get, keys, values; range(). Anything else is a syntax error naming the
// place, so a template lmtrain would render differently is refused rather than misread.
#pragma once

#include <memory>
#include <string>

#include "eval/py_value.h"

namespace lmt::eval {

struct JinjaNode;

class JinjaTemplate {
 public:
  // `where` ("tasks/x.yaml:12 (doc_to_text)") opens every message. Throws UserError with the
  // template line and column of a syntax error.
  JinjaTemplate(std::string source, std::string where);
  // `record` ("data.jsonl record 12") names the record in messages: a name or field the record
  // lacks (what StrictUndefined raises on), or an operation Python would refuse.
  std::string render(const Json& doc, const std::string& record) const;
  std::string render(const PyDict& vars, const std::string& record) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_, where_;
  std::shared_ptr<const JinjaNode> root_;
};

}  // namespace lmt::eval
