// JinjaTemplate: fixed cases (what Python prints, the messages), then many random templates on
// random records rendered by lmtrain and by lm-evaluation-harness's own Jinja environment
// (tests/eval/jinja_reference.py), compared byte for byte, failures included.
#include <gtest/gtest.h>

#include "eval/jinja.h"
#include "eval_test_util.h"
#include "test_util.h"

namespace lmt::eval {
namespace {

std::string render(const std::string& tmpl, const Json& doc) {
  return JinjaTemplate(tmpl, "t.yaml:3 (doc_to_text)").render(doc, "data.jsonl:1");
}

TEST(Jinja, PrintsValuesAsPythonDoes) {
  const Json doc = {{"xs", {"a", "it's", "say \"hi\"", "both ' \""}},
                    {"f", 1e-05},
                    {"g", 2.0},
                    {"h", 1e16},
                    {"n", nullptr},
                    {"b", true},
                    {"d", {{"k", {1, 2.5}}}}};
  EXPECT_EQ(render("{{ xs }}", doc), R"(['a', "it's", 'say "hi"', 'both \' "'])");
  EXPECT_EQ(render("{{ f }} {{ g }} {{ h }} {{ n }} {{ b }}", doc), "1e-05 2.0 1e+16 None True");
  EXPECT_EQ(render("{{ d }}", doc), "{'k': [1, 2.5]}");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 4 / 2 }}", doc), "3.5 3 2 2.0");
}

TEST(Jinja, ControlFlowAndWhitespace) {
  const Json doc = {{"xs", {"a", "b", "c"}}, {"q", "  Why?  "}};
  EXPECT_EQ(render("{% for x in xs -%}\n {{ loop.index }}. {{ x }}{% if not loop.last %}, {% endif "
                   "%}\n{%- endfor %}",
                   doc),
            "1. a, 2. b, 3. c");
  EXPECT_EQ(render("Q: {{ q | trim }}\n{# note #}A:\n", doc), "Q: Why?\nA:\n");
  EXPECT_EQ(render("{% set n = xs | length %}{% if n > 3 %}many{% elif n == 3 %}three{% else "
                   "%}few{% endif %}",
                   doc),
            "three");
  EXPECT_EQ(render("{{ xs[1:] | join('|') }} {{ q.split() }} {{ xs.index('c') }}", doc),
            "b|c ['Why?'] 2");
}

TEST(Jinja, AMissingFieldNamesTheRecordAndTheField) {
  const std::string msg = test::user_error_of([] {
    render("Q: {{ question }}", Json{{"q", "x"}});
  });
  EXPECT_NE(msg.find("data.jsonl:1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("t.yaml:3 (doc_to_text)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'question'"), std::string::npos) << msg;
  const std::string msg2 = test::user_error_of([] {
    render("{{ d.label }}", Json{{"d", {{"text", 1}}}});
  });
  EXPECT_NE(msg2.find("'d.label'"), std::string::npos) << msg2;
}

TEST(Jinja, ASyntaxErrorNamesThePlaceAndColumn) {
  const std::string msg =
      test::user_error_of([] { JinjaTemplate("Q: {{ question ]] }}", "t.yaml:7 (doc_to_text)"); });
  EXPECT_NE(msg.find("t.yaml:7 (doc_to_text)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("column 16"), std::string::npos) << msg;
  const std::string msg2 =
      test::user_error_of([] { JinjaTemplate("{% if x %}a", "t.yaml:2 (doc_to_text)"); });
  EXPECT_NE(msg2.find("endif"), std::string::npos) << msg2;
  const std::string msg3 =
      test::user_error_of([] { JinjaTemplate("a\n{{ x | }}", "t.yaml:2 (doc_to_text)"); });
  EXPECT_NE(msg3.find("template line 2, column 8"), std::string::npos) << msg3;
}

// Random records and templates for the comparison with jinja2.
class Cases {
 public:
  explicit Cases(uint32_t seed) : gen_(seed) {}

  std::string str(int max_len) {
    static const std::vector<std::string> alphabet = {
        "a", "b",  "c", "X",  "Y",  " ",        " ",
        ",", ".",  "'", "\"", "\n", "\t",       "\\",
        "é", "日", "]", "1",  "7",  "\xc2\xa0", "\xe2\x80\x83",
        "-", "?",  "{", "}",  "Ω",  "Σ",        "ж",
        "Ж", "ß",  "İ", "ǅ"};
    std::string s;
    const int n = int(gen_() % (max_len + 1));
    for (int i = 0; i < n; ++i) s += alphabet[gen_() % alphabet.size()];
    return s;
  }
  Json doc() {
    static const double floats[] = {0.5,  1.0, 2.5, 1e-05, 1e16, 123456789.125,
                                    -0.0, 3.0, 0.1, 1e18,  -2.75};
    Json xs = Json::array(), ns = Json::array(), fs = Json::array(), ls = Json::array();
    const int k = int(gen_() % 5);
    for (int i = 0; i < k; ++i) {
      xs.push_back(str(6));
      ns.push_back(int(gen_() % 21) - 10);
      fs.push_back(floats[gen_() % std::size(floats)]);
      ls.push_back(int(gen_() % 4));
    }
    Json d = {
        {"s", str(12)},
        {"t", (gen_() % 2 ? "  " : "") + str(8) + (gen_() % 2 ? " \n" : "")},
        {"n", int(gen_() % 101) - 50},
        {"m", int(gen_() % 9) + 1},
        {"f", gen_() % 3 ? floats[gen_() % std::size(floats)] : double(gen_() % 100000) / 64.0},
        {"b", gen_() % 2 == 0},
        {"xs", xs},
        {"ns", ns},
        {"fs", fs},
        {"d", {{"text", xs}, {"label", ls}}},
        {"z", nullptr}};
    if (gen_() % 2) d["opt"] = str(4);
    return d;
  }
  std::string piece() {
    static const std::vector<std::string> exprs = {"s",
                                                   "t",
                                                   "n",
                                                   "f",
                                                   "b",
                                                   "xs",
                                                   "ns",
                                                   "fs",
                                                   "d",
                                                   "z",
                                                   "d.text",
                                                   "d['label']",
                                                   "d.text[0]",
                                                   "s.strip()",
                                                   "t.strip()",
                                                   "t.lstrip()",
                                                   "t.rstrip()",
                                                   "s.split()",
                                                   "s.split(',')",
                                                   "s.split(' ', 1)",
                                                   "t.split(None, 1)",
                                                   "s.replace('a', 'b')",
                                                   "s.replace('', '-')",
                                                   "s.lower()",
                                                   "s.upper()",
                                                   "s.startswith('a')",
                                                   "s.endswith('.')",
                                                   "', '.join(xs)",
                                                   "s | trim",
                                                   "s | lower",
                                                   "s|upper",
                                                   "xs | join(', ')",
                                                   "xs|join",
                                                   "ns | join('-')",
                                                   "xs | length",
                                                   "s | length",
                                                   "s | replace(' ', '_')",
                                                   "xs | first",
                                                   "xs | last",
                                                   "n | string",
                                                   "s | int",
                                                   "f | int",
                                                   "n | default(3)",
                                                   "opt | default('none')",
                                                   "opt is defined",
                                                   "xs | list",
                                                   "s | list",
                                                   "xs[1:]",
                                                   "xs[:-1]",
                                                   "s[::-1]",
                                                   "s[1:3]",
                                                   "ns[::2]",
                                                   "s[-1]",
                                                   "xs[0] if xs else 'empty'",
                                                   "s ~ n",
                                                   "s ~ f",
                                                   "n + m",
                                                   "n - m",
                                                   "n * m",
                                                   "n / m",
                                                   "n // m",
                                                   "n % m",
                                                   "-n",
                                                   "n ** 2",
                                                   "f * 2",
                                                   "f / 3",
                                                   "f // 1",
                                                   "f % 1",
                                                   "n == m",
                                                   "n < m",
                                                   "s == t",
                                                   "s in t",
                                                   "'a' in s",
                                                   "'x' not in xs",
                                                   "n > 0 and b",
                                                   "n > 0 or b",
                                                   "not b",
                                                   "xs + ns",
                                                   "s * 2",
                                                   "[s, n, f, b, z]",
                                                   "range(m) | list",
                                                   "ns.index(ns[0]) if ns else -1",
                                                   "xs.count(s)",
                                                   "d.label.index(n) if n in d.label else 'no'",
                                                   "(n + 1) * 2",
                                                   "'%d' ~ n",
                                                   "\"q'\" ~ s",
                                                   "'\\n'.join(xs)",
                                                   "s.split()[-1] if s.split() else ''",
                                                   "1.5 + n",
                                                   "1e3",
                                                   "1_000 + n",
                                                   "fs | join(' ')",
                                                   "f | float",
                                                   "s | float",
                                                   "n | abs",
                                                   "xs | length > 1",
                                                   "s.isdigit()",
                                                   "s.find('a')",
                                                   "s.count(' ')",
                                                   "{'a': n}",
                                                   "ns | first is none",
                                                   "d.get('text')",
                                                   "z is none",
                                                   "missing",
                                                   "d.nope",
                                                   "n + s",
                                                   "xs[9]",
                                                   "s.nope()",
                                                   "loop.index"};
    static const std::vector<std::string> blocks = {
        "{% if b %}yes{% elif n > 0 %}pos{% else %}no{% endif %}",
        "{% for x in xs %}{{ loop.index }}. {{ x }}\n{% endfor %}",
        "{% for x in xs -%}\n  {{ loop.index0 }}:{{ x }}{% if not loop.last %}, {% endif %}\n{%- "
        "endfor %}",
        "{% for k in d %}{{ k }}={{ d[k] }};{% endfor %}",
        "{% set y = n * 2 %}{{ y }}",
        "{% for a in ns %}{% set q = a + 1 %}{{ q }}{% endfor %}",
        "{# a comment #}x",
        "  {{- s -}}  ",
        "{% for x in xs %}{{ x }}{% else %}none{% endfor %}",
        "{% for i in range(m) %}{{ i }}{% if loop.first %}!{% endif %}{% endfor %}",
        "{% if xs|length > 1 %}{{ xs[1] }}{% endif %}",
        "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
        "\n  {%- if b -%}  B  {%- endif -%}  \n"};
    static const std::vector<std::string> texts = {"Question: ", "\n",     "Answer:", " ", "\n\n",
                                                   "A. ",        "x\r\ny", "\t",      ""};
    switch (gen_() % 4) {
      case 0:
        return blocks[gen_() % blocks.size()];
      case 1:
        return texts[gen_() % texts.size()];
      default: {
        const std::string e = exprs[gen_() % exprs.size()];
        switch (gen_() % 3) {
          case 0:
            return "{{" + e + "}}";
          case 1:
            return "{{- " + e + " }}";
          default:
            return "{{ " + e + " }}";
        }
      }
    }
  }
  std::string tmpl() {
    std::string t;
    const int n = 1 + int(gen_() % 4);
    for (int i = 0; i < n; ++i) t += piece();
    if (gen_() % 4 == 0) t += "\n";
    return t;
  }

 private:
  std::mt19937 gen_;
};

TEST(JinjaReference, RandomTemplatesRenderAsJinja2Does) {
  Cases cases(test::fresh_seed("JinjaReference"));
  // Ordered JSON all the way: Python's json keeps the records' field order, as ours does.
  Json input = Json::array();
  std::vector<Json> docs;
  for (int i = 0; i < 3000; ++i) {
    docs.push_back(cases.doc());
    input.push_back({{"template", cases.tmpl()}, {"doc", docs.back()}});
  }
  test::ScratchDir dir("jinja");
  const nlohmann::json ref = test::run_eval_reference("jinja_reference.py", input, dir.path());
  ASSERT_EQ(ref.size(), input.size());
  int failures = 0, errors = 0;
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string tmpl = input[i]["template"];
    std::optional<std::string> ours;
    std::string our_error;
    try {
      ours = JinjaTemplate(tmpl, "case").render(docs[i], "record " + std::to_string(i));
    } catch (const UserError& e) {
      our_error = e.what();
    }
    if (ref[i].contains("out")) {
      if ((!ours || *ours != ref[i]["out"].get<std::string>()) && ++failures <= 10) {
        ADD_FAILURE() << "template " << nlohmann::json(tmpl).dump() << "\ndoc " << docs[i].dump()
                      << "\njinja2: " << ref[i]["out"].dump() << "\nlmtrain: "
                      << (ours ? nlohmann::json(*ours).dump() : "error: " + our_error);
      }
    } else {
      ++errors;
      if (ours && ++failures <= 10) {
        ADD_FAILURE() << "template " << nlohmann::json(tmpl).dump() << "\ndoc " << docs[i].dump()
                      << "\njinja2 fails (" << ref[i]["error"].get<std::string>()
                      << ") but lmtrain renders " << nlohmann::json(*ours).dump();
      }
    }
  }
  // Both kinds of case must be well represented for the comparison to mean something.
  EXPECT_EQ(failures, 0);
  EXPECT_GT(errors, 100);
  EXPECT_LT(errors, 2000);
}

}  // namespace
}  // namespace lmt::eval
