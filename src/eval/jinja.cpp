// JinjaTemplate's lexer and parser (jinja.h). The lexer follows jinja2's: data runs to the next
// "{{", "{%" or "{#"; a "-" against a delimiter strips the whitespace on that side (newlines
// included); "\r\n" and "\r" in data become "\n"; the template's last newline is kept
// (keep_trailing_newline). The parser follows jinja2's precedence: conditional < or < and < not <
// comparisons and `in` < + - < ~ < * / // % < ** < unary minus < filters and tests < postfix.
#include "eval/jinja.h"

#include <cctype>
#include <stdexcept>

#include "core/error.h"
#include "eval/jinja_ast.h"

namespace lmt::eval {

namespace {

struct Token {
  enum Kind { kName, kInt, kFloat, kString, kOp, kEnd } kind;
  std::string text;  // name, operator, or the decoded string
  PyValue value;
  size_t pos;  // offset in the template source
};

// One piece of the template: data, an {{ }} tag, or a {% %} tag.
struct Item {
  enum Kind { kData, kVar, kBlock } kind;
  std::string data;
  std::vector<Token> tokens;
  size_t pos;
};

class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(size_t pos, const std::string& msg) : std::runtime_error(msg), pos(pos) {}
  size_t pos;
};

std::string normalize_newlines(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Python's str.rstrip() / lstrip() without arguments, as jinja2's "-" applies them.
std::string rstrip_ws(const std::string& s) {
  return py_strip(s, std::nullopt, false, true);
}
std::string lstrip_ws(const std::string& s) {
  return py_strip(s, std::nullopt, true, false);
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(src) {}

  std::vector<Item> run() {
    std::vector<Item> items;
    size_t p = 0;
    bool strip_next = false;
    while (p <= s_.size()) {
      size_t open = p;
      while (true) {
        open = s_.find('{', open);
        if (open == std::string::npos || open + 1 >= s_.size()) {
          open = std::string::npos;
          break;
        }
        const char c = s_[open + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++open;
      }
      std::string data = s_.substr(p, open == std::string::npos ? std::string::npos : open - p);
      const bool strip_before =
          open != std::string::npos && open + 2 < s_.size() && s_[open + 2] == '-';
      if (strip_next) data = lstrip_ws(data);
      if (strip_before) data = rstrip_ws(data);
      if (!data.empty()) items.push_back({Item::kData, normalize_newlines(data), {}, p});
      if (open == std::string::npos) break;
      const char kind = s_[open + 1];
      size_t q = open + 2;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) ++q;
      if (kind == '#') {
        size_t close = s_.find("#}", q);
        if (close == std::string::npos) throw SyntaxError(open, "a comment {# is not closed");
        strip_next = close > q && s_[close - 1] == '-';
        p = close + 2;
        continue;
      }
      Item item{kind == '{' ? Item::kVar : Item::kBlock, "", {}, open};
      p = tokenize(q, kind == '{' ? '}' : '%', item.tokens, strip_next);
      items.push_back(std::move(item));
    }
    return items;
  }

 private:
  // Tokens from `p` to the closing delimiter ("}}" or "%}", outside brackets); returns the offset
  // after it and whether it asked for the following whitespace to be stripped.
  size_t tokenize(size_t p, char close, std::vector<Token>& out, bool& strip_after) {
    int depth = 0;
    while (true) {
      while (p < s_.size() && std::isspace(static_cast<unsigned char>(s_[p]))) ++p;
      if (p >= s_.size())
        throw SyntaxError(p, std::string("the tag is not closed (expected '") + close + "}')");
      if (depth == 0) {
        if (s_[p] == '-' && s_.compare(p + 1, 2, std::string(1, close) + "}") == 0) {
          strip_after = true;
          out.push_back({Token::kEnd, "", {}, p});
          return p + 3;
        }
        if (s_.compare(p, 2, std::string(1, close) + "}") == 0) {
          strip_after = false;
          out.push_back({Token::kEnd, "", {}, p});
          return p + 2;
        }
      }
      const char c = s_[p];
      const size_t start = p;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (p < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p])) || s_[p] == '_'))
          ++p;
        out.push_back({Token::kName, s_.substr(start, p - start), {}, start});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        out.push_back(number(p));
      } else if (c == '\'' || c == '"') {
        ++p;
        std::string body;
        while (p < s_.size() && s_[p] != c) {
          if (s_[p] == '\\' && p + 1 < s_.size()) body += s_[p++];
          body += s_[p++];
        }
        if (p >= s_.size()) throw SyntaxError(start, "a string literal is not closed");
        ++p;
        std::string decoded;
        try {
          decoded = decode_py_escapes(normalize_newlines(body));
        } catch (const std::invalid_argument& e) {
          throw SyntaxError(start, std::string("bad escape in a string literal: ") + e.what());
        }
        out.push_back({Token::kString, decoded, PyValue(decoded), start});
      } else {
        static const char* ops2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* o : ops2)
          if (s_.compare(p, 2, o) == 0) op = o;
        if (op.size() == 1 && std::string("+-*/%~<>=()[]{},.:|").find(c) == std::string::npos)
          throw SyntaxError(p, std::string("unexpected character '") + c + "'");
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") {
          if (depth == 0) throw SyntaxError(p, "unexpected '" + op + "'");
          --depth;
        }
        p += op.size();
        out.push_back({Token::kOp, op, {}, start});
      }
    }
  }

  // jinja2's integer and float literals: 12, 1_000, 1.5, 1e3, 2.5e-3 ("1." is 1 then ".").
  Token number(size_t& p) {
    const size_t start = p;
    auto digits = [&] {
      while (p < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[p])) ||
                               (s_[p] == '_' && p + 1 < s_.size() &&
                                std::isdigit(static_cast<unsigned char>(s_[p + 1])))))
        ++p;
    };
    digits();
    bool is_float = false;
    if (p + 1 < s_.size() && s_[p] == '.' && std::isdigit(static_cast<unsigned char>(s_[p + 1]))) {
      ++p;
      digits();
      is_float = true;
    }
    if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
      size_t q = p + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && std::isdigit(static_cast<unsigned char>(s_[q]))) {
        p = q;
        digits();
        is_float = true;
      }
    }
    std::string text = s_.substr(start, p - start);
    std::string clean;
    for (char ch : text)
      if (ch != '_') clean += ch;
    if (is_float) return {Token::kFloat, text, PyValue(std::stod(clean)), start};
    try {
      return {Token::kInt, text, PyValue(int64_t(std::stoll(clean))), start};
    } catch (const std::out_of_range&) {
      throw SyntaxError(start, "integer literal " + text + " is too large");
    }
  }

  const std::string& s_;
};

class Parser {
 public:
  Parser(const std::string& src, std::vector<Item> items) : src_(src), items_(std::move(items)) {}

  std::shared_ptr<JinjaNode> parse_template() {
    auto [body, end] = parse_body({});
    (void)end;
    return body;
  }

 private:
  using NodePtr = std::shared_ptr<JinjaNode>;

  // Nodes up to a block tag named in `ends` (returned, its tokens current) or the end.
  std::pair<NodePtr, std::string> parse_body(const std::vector<std::string>& ends) {
    auto body = std::make_shared<JinjaNode>();
    body->kind = JinjaNode::kBody;
    while (i_ < items_.size()) {
      Item& it = items_[i_];
      if (it.kind == Item::kData) {
        auto n = std::make_shared<JinjaNode>();
        n->kind = JinjaNode::kText;
        n->text = it.data;
        body->children.push_back(n);
        ++i_;
        continue;
      }
      toks_ = &it.tokens;
      t_ = 0;
      if (it.kind == Item::kVar) {
        auto n = std::make_shared<JinjaNode>();
        n->kind = JinjaNode::kOutput;
        n->expr = parse_expr();
        expect_end();
        body->children.push_back(n);
        ++i_;
        continue;
      }
      const Token& head = cur();
      if (head.kind != Token::kName) throw SyntaxError(head.pos, "a {% %} tag needs a name");
      for (const auto& e : ends)
        if (head.text == e) return {body, e};
      ++i_;
      ++t_;
      if (head.text == "if") {
        body->children.push_back(parse_if(head.pos));
      } else if (head.text == "for") {
        body->children.push_back(parse_for(head.pos));
      } else if (head.text == "set") {
        body->children.push_back(parse_set());
      } else {
        throw SyntaxError(head.pos, "unsupported or unexpected tag '" + head.text + "'");
      }
    }
    if (!ends.empty()) throw SyntaxError(src_.size(), "missing {% " + ends.back() + " %}");
    return {body, ""};
  }

  // After a closing tag's name (current token): the tag must end there.
  void finish_tag() {
    ++t_;
    expect_end();
    ++i_;
  }

  NodePtr parse_if(size_t pos) {
    (void)pos;
    auto n = std::make_shared<JinjaNode>();
    n->kind = JinjaNode::kIf;
    ExprPtr cond = parse_expr();
    expect_end();
    while (true) {
      auto [body, end] = parse_body({"elif", "else", "endif"});
      n->branches.push_back({cond, body});
      if (end == "elif") {
        ++t_;
        ++i_;
        cond = parse_expr();
        expect_end();
        continue;
      }
      if (end == "else") {
        finish_tag();
        auto [else_body, end2] = parse_body({"endif"});
        (void)end2;
        n->else_body = else_body;
      }
      finish_tag();
      return n;
    }
  }

  NodePtr parse_for(size_t pos) {
    auto n = std::make_shared<JinjaNode>();
    n->kind = JinjaNode::kFor;
    n->targets = parse_targets();
    if (!(cur().kind == Token::kName && cur().text == "in"))
      throw SyntaxError(cur().pos, "expected 'in' in a for tag");
    ++t_;
    n->expr = parse_or();
    if (cur().kind == Token::kName && (cur().text == "if" || cur().text == "recursive"))
      throw SyntaxError(cur().pos, "a for tag's '" + cur().text + "' is not supported");
    expect_end();
    (void)pos;
    auto [body, end] = parse_body({"else", "endfor"});
    n->body = body;
    if (end == "else") {
      finish_tag();
      auto [else_body, end2] = parse_body({"endfor"});
      (void)end2;
      n->else_body = else_body;
    }
    finish_tag();
    return n;
  }

  NodePtr parse_set() {
    auto n = std::make_shared<JinjaNode>();
    n->kind = JinjaNode::kSet;
    n->targets = parse_targets();
    if (!is_op("="))
      throw SyntaxError(cur().pos, "expected '=' in a set tag (block set is not supported)");
    ++t_;
    n->expr = parse_expr();
    expect_end();
    return n;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    do {
      if (!names.empty()) ++t_;
      if (cur().kind != Token::kName) throw SyntaxError(cur().pos, "expected a name");
      names.push_back(cur().text);
      ++t_;
    } while (is_op(","));
    return names;
  }

  const Token& cur() const { return (*toks_)[t_]; }
  bool is_op(const char* op) const { return cur().kind == Token::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Token::kName && cur().text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) throw SyntaxError(cur().pos, std::string("expected '") + op + "'");
    ++t_;
  }
  void expect_end() {
    if (cur().kind != Token::kEnd)
      throw SyntaxError(cur().pos,
                        "unexpected '" +
                            (cur().kind == Token::kString ? "'" + cur().text + "'" : cur().text) +
                            "'");
  }

  ExprPtr make(JinjaExpr::Kind k, size_t start, std::vector<ExprPtr> args = {},
               std::string name = "") {
    auto e = std::make_shared<JinjaExpr>();
    e->kind = k;
    e->args = std::move(args);
    e->name = std::move(name);
    size_t end = t_ > 0 ? (*toks_)[t_ - 1].pos + token_len((*toks_)[t_ - 1]) : start;
    e->text = src_.substr(start, end > start ? end - start : 0);
    return e;
  }
  size_t token_len(const Token& t) const {
    if (t.kind == Token::kString) {
      // The literal's source length: find its closing quote from the start.
      const char q = src_[t.pos];
      size_t p = t.pos + 1;
      while (p < src_.size() && src_[p] != q) p += src_[p] == '\\' ? 2 : 1;
      return p + 1 - t.pos;
    }
    return t.text.size();
  }

  ExprPtr parse_expr() {
    const size_t start = cur().pos;
    ExprPtr e = parse_or();
    while (is_name("if")) {
      ++t_;
      ExprPtr cond = parse_or();
      std::vector<ExprPtr> args = {cond, e};
      if (is_name("else")) {
        ++t_;
        args.push_back(parse_expr());
      }
      e = make(JinjaExpr::kCond, start, args);
    }
    return e;
  }
  ExprPtr parse_or() {
    const size_t start = cur().pos;
    ExprPtr e = parse_and();
    while (is_name("or")) {
      ++t_;
      e = make(JinjaExpr::kOr, start, {e, parse_and()});
    }
    return e;
  }
  ExprPtr parse_and() {
    const size_t start = cur().pos;
    ExprPtr e = parse_not();
    while (is_name("and")) {
      ++t_;
      e = make(JinjaExpr::kAnd, start, {e, parse_not()});
    }
    return e;
  }
  ExprPtr parse_not() {
    const size_t start = cur().pos;
    if (is_name("not")) {
      ++t_;
      return make(JinjaExpr::kNot, start, {parse_not()});
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const size_t start = cur().pos;
    ExprPtr first = parse_math1();
    std::vector<ExprPtr> args = {first};
    std::vector<std::string> ops;
    while (true) {
      if (cur().kind == Token::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        ops.push_back(cur().text);
        ++t_;
      } else if (is_name("in")) {
        ops.push_back("in");
        ++t_;
      } else if (is_name("not") && t_ + 1 < toks_->size() &&
                 (*toks_)[t_ + 1].kind == Token::kName && (*toks_)[t_ + 1].text == "in") {
        ops.push_back("not in");
        t_ += 2;
      } else {
        break;
      }
      args.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    ExprPtr e = make(JinjaExpr::kCompare, start, args);
    e->ops = ops;
    return e;
  }
  ExprPtr parse_math1() {
    const size_t start = cur().pos;
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      ++t_;
      e = make(JinjaExpr::kBinary, start, {e, parse_concat()}, op);
    }
    return e;
  }
  ExprPtr parse_concat() {
    const size_t start = cur().pos;
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      ++t_;
      e = make(JinjaExpr::kBinary, start, {e, parse_math2()}, "~");
    }
    return e;
  }
  ExprPtr parse_math2() {
    const size_t start = cur().pos;
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      ++t_;
      e = make(JinjaExpr::kBinary, start, {e, parse_pow()}, op);
    }
    return e;
  }
  ExprPtr parse_pow() {
    const size_t start = cur().pos;
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      ++t_;
      e = make(JinjaExpr::kBinary, start, {e, parse_unary(true)}, "**");
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    const size_t start = cur().pos;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const bool neg = is_op("-");
      ++t_;
      e = make(neg ? JinjaExpr::kNeg : JinjaExpr::kPos, start, {parse_unary(false)});
    } else {
      e = parse_primary();
    }
    e = parse_postfix(e, start);
    if (with_filter) e = parse_filters(e, start);
    return e;
  }
  ExprPtr parse_primary() {
    const size_t start = cur().pos;
    const Token& tok = cur();
    switch (tok.kind) {
      case Token::kName: {
        ++t_;
        auto lit = [&](PyValue v) {
          ExprPtr e = make(JinjaExpr::kLiteral, start);
          e->value = std::move(v);
          return e;
        };
        if (tok.text == "true" || tok.text == "True") return lit(PyValue(true));
        if (tok.text == "false" || tok.text == "False") return lit(PyValue(false));
        if (tok.text == "none" || tok.text == "None") return lit(PyValue());
        return make(JinjaExpr::kName, start, {}, tok.text);
      }
      case Token::kString: {
        std::string s;
        while (cur().kind == Token::kString) s += (*toks_)[t_++].text;  // adjacent literals join
        ExprPtr e = make(JinjaExpr::kLiteral, start);
        e->value = PyValue(s);
        return e;
      }
      case Token::kInt:
      case Token::kFloat: {
        ++t_;
        ExprPtr e = make(JinjaExpr::kLiteral, start);
        e->value = tok.value;
        return e;
      }
      case Token::kOp:
        if (tok.text == "(") {
          ++t_;
          ExprPtr e = parse_expr();
          if (is_op(",")) throw SyntaxError(cur().pos, "tuples are not supported");
          expect_op(")");
          return e;
        }
        if (tok.text == "[") {
          ++t_;
          std::vector<ExprPtr> items;
          while (!is_op("]")) {
            if (!items.empty()) expect_op(",");
            if (is_op("]")) break;
            items.push_back(parse_expr());
          }
          ++t_;
          return make(JinjaExpr::kList, start, items);
        }
        if (tok.text == "{") {
          ++t_;
          std::vector<ExprPtr> items;  // key, value, key, value...
          while (!is_op("}")) {
            if (!items.empty()) expect_op(",");
            if (is_op("}")) break;
            items.push_back(parse_expr());
            expect_op(":");
            items.push_back(parse_expr());
          }
          ++t_;
          return make(JinjaExpr::kDict, start, items);
        }
        break;
      default:
        break;
    }
    if (tok.kind == Token::kEnd) throw SyntaxError(tok.pos, "expected an expression");
    throw SyntaxError(tok.pos, "unexpected '" + tok.text + "'");
  }
  void parse_call_args(JinjaExpr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (cur().kind == Token::kName && t_ + 1 < toks_->size() &&
          (*toks_)[t_ + 1].kind == Token::kOp && (*toks_)[t_ + 1].text == "=") {
        std::string key = cur().text;
        t_ += 2;
        e.kwargs.push_back({key, parse_expr()});
      } else {
        if (!e.kwargs.empty())
          throw SyntaxError(cur().pos, "a positional argument follows a keyword argument");
        e.args.push_back(parse_expr());
      }
    }
    ++t_;
  }
  ExprPtr parse_postfix(ExprPtr e, size_t start) {
    while (true) {
      if (is_op(".")) {
        ++t_;
        if (cur().kind == Token::kName) {
          std::string attr = cur().text;
          ++t_;
          e = make(JinjaExpr::kGetattr, start, {e}, attr);
        } else if (cur().kind == Token::kInt) {
          ExprPtr idx = std::make_shared<JinjaExpr>();
          idx->kind = JinjaExpr::kLiteral;
          idx->value = cur().value;
          ++t_;
          e = make(JinjaExpr::kGetitem, start, {e, idx});
        } else {
          throw SyntaxError(cur().pos, "expected an attribute name after '.'");
        }
      } else if (is_op("[")) {
        ++t_;
        std::vector<ExprPtr> parts(3);
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = parse_expr();
          if (k < 2 && is_op(":")) {
            slice = true;
            ++t_;
          } else {
            break;
          }
        }
        expect_op("]");
        if (slice) {
          std::vector<ExprPtr> args = {e, parts[0], parts[1], parts[2]};
          e = make(JinjaExpr::kSlice, start, args);
        } else {
          if (!parts[0]) throw SyntaxError(cur().pos, "expected a subscript");
          e = make(JinjaExpr::kGetitem, start, {e, parts[0]});
        }
      } else if (is_op("(")) {
        ExprPtr call = std::make_shared<JinjaExpr>();
        call->kind = JinjaExpr::kCall;
        call->args.push_back(e);
        parse_call_args(*call);
        size_t end = (*toks_)[t_ - 1].pos + 1;
        call->text = src_.substr(start, end - start);
        e = call;
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_filters(ExprPtr e, size_t start) {
    while (true) {
      if (is_op("|")) {
        ++t_;
        if (cur().kind != Token::kName) throw SyntaxError(cur().pos, "expected a filter name");
        ExprPtr f = std::make_shared<JinjaExpr>();
        f->kind = JinjaExpr::kFilter;
        f->name = cur().text;
        ++t_;
        f->args.push_back(e);
        if (is_op("(")) parse_call_args(*f);
        f->text = src_.substr(start, (*toks_)[t_ - 1].pos + token_len((*toks_)[t_ - 1]) - start);
        e = parse_postfix(f, start);
      } else if (is_name("is")) {
        ++t_;
        ExprPtr test = std::make_shared<JinjaExpr>();
        test->kind = JinjaExpr::kTest;
        if (is_name("not")) {
          test->negated = true;
          ++t_;
        }
        if (cur().kind != Token::kName) throw SyntaxError(cur().pos, "expected a test name");
        test->name = cur().text;
        ++t_;
        test->args.push_back(e);
        if (is_op("(")) parse_call_args(*test);
        test->text = src_.substr(start, (*toks_)[t_ - 1].pos + token_len((*toks_)[t_ - 1]) - start);
        e = test;
      } else {
        return e;
      }
    }
  }

  const std::string& src_;
  std::vector<Item> items_;
  size_t i_ = 0;
  std::vector<Token>* toks_ = nullptr;
  size_t t_ = 0;
};

}  // namespace

JinjaTemplate::JinjaTemplate(std::string source, std::string where)
    : source_(std::move(source)), where_(std::move(where)) {
  try {
    root_ = Parser(source_, Lexer(source_).run()).parse_template();
  } catch (const SyntaxError& e) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < e.pos && i < source_.size(); ++i) {
      if (source_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    const bool multiline = source_.find('\n') != std::string::npos;
    throw UserError(where_ + ": template syntax error at " +
                    (multiline ? "template line " + std::to_string(line) + ", " : "") + "column " +
                    std::to_string(col) + ": " + e.what() + " (in " + excerpt(source_) + ")");
  }
}

std::string JinjaTemplate::render(const Json& doc, const std::string& record) const {
  const PyValue v = from_json(doc);
  if (!v.is_dict()) throw UserError(record + ": a record must be a JSON object");
  return render(v.dict(), record);
}

std::string JinjaTemplate::render(const PyDict& vars, const std::string& record) const {
  return jinja_render(*root_, vars, where_, record);
}

}  // namespace lmt::eval
