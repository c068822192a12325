// CPython's printing, comparison and string rules for PyValue (py_value.h).
#include "eval/py_value.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <charconv>
#include <clocale>
#include <cmath>
#include <cwctype>
#include <stdexcept>

namespace lmt::eval {

const char* PyValue::type_name() const {
  static const char* names[] = {"NoneType", "bool", "int",  "float",
                                "str",      "list", "dict", "Undefined"};
  return names[v.index()];
}

PyValue from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return PyValue();
    case Json::value_t::boolean:
      return PyValue(j.get<bool>());
    case Json::value_t::number_integer:
      return PyValue(j.get<int64_t>());
    case Json::value_t::number_unsigned:
      return PyValue(int64_t(j.get<uint64_t>()));
    case Json::value_t::number_float:
      return PyValue(j.get<double>());
    case Json::value_t::string:
      return PyValue(j.get<std::string>());
    case Json::value_t::array: {
      PyList l;
      for (const auto& e : j) l.push_back(from_json(e));
      return PyValue(std::move(l));
    }
    case Json::value_t::object: {
      PyDict d;
      for (auto it = j.begin(); it != j.end(); ++it)
        d.emplace_back(it.key(), from_json(it.value()));
      return PyValue(std::move(d));
    }
    default:
      return PyValue();
  }
}

Json to_json(const PyValue& v) {
  if (v.is_bool()) return std::get<bool>(v.v);
  if (v.is_int()) return std::get<int64_t>(v.v);
  if (v.is_float()) return std::get<double>(v.v);
  if (v.is_str()) return v.str();
  if (v.is_list()) {
    Json a = Json::array();
    for (const auto& e : v.list()) a.push_back(to_json(e));
    return a;
  }
  if (v.is_dict()) {
    Json o = Json::object();
    for (const auto& [k, e] : v.dict()) o[k] = to_json(e);
    return o;
  }
  return nullptr;
}

std::u32string utf8_to_u32(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + n > s.size()) n = 1;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

static void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string u32_to_utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool py_isdigit_str(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// str.isprintable() for one character: not Cc, Cf, Cs, Co, Zl, Zp, Zs (but ' '), as far as a
// table-free check can tell (unassigned code points print as themselves here).
static bool py_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000) return false;
  if (c == 0xFEFF || (c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if (c >= 0xF0000) return false;
  return true;
}

std::string py_repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  static const char* hex = "0123456789abcdef";
  for (char32_t c : utf8_to_u32(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (py_printable(c)) {
      append_utf8(out, c);
    } else {
      const int digits = c < 0x100 ? 2 : c < 0x10000 ? 4 : 8;
      out += digits == 2 ? "\\x" : digits == 4 ? "\\u" : "\\U";
      for (int k = digits - 1; k >= 0; --k) out += hex[(c >> (4 * k)) & 0xF];
    }
  }
  return out + quote;
}

// repr(float): the shortest digits that round-trip, fixed notation for exponents -4..15, else
// d.ddde+XX; a fixed number always shows a fractional part ("2.0").
std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(epos + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp + 1;
  const int nd = int(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
    if (decpt >= nd) return sign + digits + std::string(decpt - nd, '0') + ".0";
    return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  std::string out = sign + digits.substr(0, 1);
  if (nd > 1) out += "." + digits.substr(1);
  const int e = decpt - 1;
  std::string es = std::to_string(e < 0 ? -e : e);
  if (es.size() < 2) es = "0" + es;
  return out + "e" + (e < 0 ? "-" : "+") + es;
}

std::string py_repr(const PyValue& v) {
  if (v.is_str()) return py_repr_string(v.str());
  if (v.is_list()) {
    std::string out = "[";
    bool first = true;
    for (const auto& e : v.list()) {
      if (!first) out += ", ";
      first = false;
      out += py_repr(e);
    }
    return out + "]";
  }
  if (v.is_dict()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, e] : v.dict()) {
      if (!first) out += ", ";
      first = false;
      out += py_repr_string(k) + ": " + py_repr(e);
    }
    return out + "}";
  }
  return py_str(v);
}

std::string py_str(const PyValue& v) {
  if (v.is_none()) return "None";
  if (v.is_bool()) return std::get<bool>(v.v) ? "True" : "False";
  if (v.is_int()) return std::to_string(std::get<int64_t>(v.v));
  if (v.is_float()) return py_float_repr(std::get<double>(v.v));
  if (v.is_str()) return v.str();
  if (v.is_undefined()) return "";
  return py_repr(v);
}

bool py_truth(const PyValue& v) {
  if (v.is_none() || v.is_undefined()) return false;
  if (v.is_bool()) return std::get<bool>(v.v);
  if (v.is_int()) return std::get<int64_t>(v.v) != 0;
  if (v.is_float()) return std::get<double>(v.v) != 0.0;
  if (v.is_str()) return !v.str().empty();
  if (v.is_list()) return !v.list().empty();
  return !v.dict().empty();
}

const PyValue* dict_get(const PyDict& d, const std::string& key) {
  for (const auto& [k, e] : d)
    if (k == key) return &e;
  return nullptr;
}

bool py_equal(const PyValue& a, const PyValue& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.v.index() != b.v.index()) return false;
  if (a.is_none()) return true;
  if (a.is_str()) return a.str() == b.str();
  if (a.is_list()) {
    const auto &x = a.list(), &y = b.list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!py_equal(x[i], y[i])) return false;
    return true;
  }
  if (a.is_dict()) {
    if (a.dict().size() != b.dict().size()) return false;
    for (const auto& [k, e] : a.dict()) {
      const PyValue* o = dict_get(b.dict(), k);
      if (!o || !py_equal(e, *o)) return false;
    }
    return true;
  }
  return false;
}

std::optional<bool> py_less(const PyValue& a, const PyValue& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_str() && b.is_str()) return a.str() < b.str();  // UTF-8 order is code point order
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_equal(x[i], y[i])) return py_less(x[i], y[i]);
    return x.size() < y.size();
  }
  return std::nullopt;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  const std::u32string u = utf8_to_u32(s);
  const std::u32string set = chars ? utf8_to_u32(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return u32_to_utf8(u.substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      const size_t f = s.find(*sep, pos);
      if (f == std::string::npos) break;
      out.push_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  const std::u32string u = utf8_to_u32(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && py_isspace(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
      // The rest, its trailing whitespace kept, is the last piece.
      out.push_back(u32_to_utf8(u.substr(i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !py_isspace(u[j])) ++j;
    out.push_back(u32_to_utf8(u.substr(i, j - i)));
    i = j;
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    // Python inserts `repl` before every character and at the end.
    const std::u32string u = utf8_to_u32(s);
    for (char32_t c : u) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out += s.substr(pos, f - pos) + repl;
    pos = f + old.size();
    ++done;
  }
  return out + s.substr(pos);
}

// Unicode simple case mapping from the C library's C.UTF-8 tables (towlower_l / towupper_l),
// plus the special cases of Python's full mapping that task text meets: 'ß'.upper() == 'SS',
// 'İ'.lower() == 'i̇', and a capital sigma ending a word lowering to 'ς'. Without C.UTF-8, ASCII
// and Latin-1 only.
static locale_t utf8_locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t(0));
  return loc;
}

static char32_t simple_case(char32_t c, bool upper) {
  if (const locale_t loc = utf8_locale())
    return char32_t(upper ? towupper_l(wint_t(c), loc) : towlower_l(wint_t(c), loc));
  if (upper && ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7))) return c - 0x20;
  if (!upper && ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7))) return c + 0x20;
  return c;
}

// Unicode's Cased and Case_Ignorable properties, as far as the C tables and a short list give them
// (for the final-sigma rule only).
static bool is_cased(char32_t c) {
  if (c == 0xDF || c == 0xAA || c == 0xBA) return true;
  if (const locale_t loc = utf8_locale())
    if (iswlower_l(wint_t(c), loc) || iswupper_l(wint_t(c), loc)) return true;
  return simple_case(c, true) != c || simple_case(c, false) != c;
}
static bool is_case_ignorable(char32_t c) {
  switch (c) {
    case '\'':
    case '.':
    case ':':
    case '^':
    case '`':
    case 0xA8:
    case 0xAD:
    case 0xAF:
    case 0xB4:
    case 0xB7:
    case 0xB8:
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0x2027:
    case 0xFEFF:
      return true;
    default:
      return (c >= 0x2B0 && c <= 0x36F) || (c >= 0x200B && c <= 0x200F) ||
             (c >= 0x483 && c <= 0x489);
  }
}

// CPython's handle_capital_sigma: final when a cased letter precedes (case-ignorable ones
// skipped) and none follows.
static bool final_sigma(const std::u32string& u, size_t i) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(u[j - 1])) --j;
  if (j == 0 || !is_cased(u[j - 1])) return false;
  size_t k = i + 1;
  while (k < u.size() && is_case_ignorable(u[k])) ++k;
  return k == u.size() || !is_cased(u[k]);
}

static std::string map_case(const std::string& s, bool upper) {
  const std::u32string u = utf8_to_u32(s);
  std::u32string out;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    if (upper && c == 0xDF) {
      out += U"SS";
    } else if (!upper && c == 0x130) {
      out += U"i\u0307";
    } else if (!upper && c == 0x3A3) {
      out += final_sigma(u, i) ? char32_t(0x3C2) : char32_t(0x3C3);
    } else {
      out += simple_case(c, upper);
    }
  }
  return u32_to_utf8(out);
}
std::string py_lower(const std::string& s) {
  return map_case(s, false);
}
std::string py_upper(const std::string& s) {
  return map_case(s, true);
}

std::string decode_py_escapes(const std::string& body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    auto hex_escape = [&](int n) {
      char32_t cp = 0;
      for (int k = 1; k <= n; ++k) {
        if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k])))
          throw std::invalid_argument("truncated escape");
        const char h = body[i + k];
        cp = cp * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      i += n;
      append_utf8(out, cp);
    };
    switch (c) {
      case '\n':
        break;  // line continuation
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        hex_escape(2);
        break;
      case 'u':
        hex_escape(4);
        break;
      case 'U':
        hex_escape(8);
        break;
      default:
        if (c >= '0' && c <= '7') {
          char32_t cp = c - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            cp = cp * 8 + (body[++i] - '0');
          append_utf8(out, cp);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

namespace {

// ast.literal_eval's grammar, as far as task files use it.
class LiteralParser {
 public:
  explicit LiteralParser(const std::string& t) : t_(t) {}
  PyValue parse_all() {
    PyValue v = value();
    skip();
    if (p_ != t_.size()) fail();
    return v;
  }

 private:
  [[noreturn]] void fail() { throw std::invalid_argument("malformed node or string"); }
  void skip() {
    while (p_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[p_]))) ++p_;
  }
  bool eat(char c) {
    skip();
    if (p_ < t_.size() && t_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  std::string string_literal() {
    const char q = t_[p_];
    const bool triple = t_.compare(p_, 3, std::string(3, q)) == 0;
    const size_t ql = triple ? 3 : 1;
    size_t i = p_ + ql;
    std::string body;
    while (true) {
      if (i >= t_.size()) throw std::invalid_argument("unterminated string literal");
      if (t_[i] == '\\' && i + 1 < t_.size()) {
        body += t_.substr(i, 2);
        i += 2;
        continue;
      }
      if (t_.compare(i, ql, std::string(ql, q)) == 0) break;
      if (!triple && t_[i] == '\n') throw std::invalid_argument("unterminated string literal");
      body += t_[i++];
    }
    p_ = i + ql;
    return decode_py_escapes(body);
  }
  PyValue sequence(char close) {
    PyList l;
    while (!eat(close)) {
      l.push_back(value());
      if (!eat(',')) {
        if (!eat(close)) fail();
        break;
      }
    }
    return PyValue(std::move(l));
  }
  PyValue value() {
    skip();
    if (p_ >= t_.size()) fail();
    const char c = t_[p_];
    if (c == '\'' || c == '"') {
      std::string s = string_literal();
      for (skip(); p_ < t_.size() && (t_[p_] == '\'' || t_[p_] == '"'); skip())
        s += string_literal();
      return PyValue(s);
    }
    if (c == '[') {
      ++p_;
      return sequence(']');
    }
    if (c == '(') {
      ++p_;
      return sequence(')');
    }
    if (c == '{') {
      ++p_;
      PyDict d;
      while (!eat('}')) {
        PyValue k = value();
        if (!k.is_str() || !eat(':')) fail();
        d.emplace_back(k.str(), value());
        if (!eat(',')) {
          if (!eat('}')) fail();
          break;
        }
      }
      return PyValue(std::move(d));
    }
    if (c == '-' || c == '+') {
      ++p_;
      PyValue v = value();
      if (v.is_int()) return c == '-' ? PyValue(-v.as_int()) : v;
      if (v.is_float()) return c == '-' ? PyValue(-v.as_double()) : v;
      fail();
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      size_t e = p_;
      bool is_float = false;
      while (e < t_.size() &&
             (std::isalnum(static_cast<unsigned char>(t_[e])) || t_[e] == '.' || t_[e] == '_' ||
              ((t_[e] == '-' || t_[e] == '+') && (t_[e - 1] | 0x20) == 'e'))) {
        if (t_[e] == '.' || (t_[e] | 0x20) == 'e') is_float = true;
        ++e;
      }
      std::string num = t_.substr(p_, e - p_);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      p_ = e;
      try {
        size_t used = 0;
        if (is_float) {
          const double d = std::stod(num, &used);
          if (used != num.size()) fail();
          return PyValue(d);
        }
        const int64_t i = std::stoll(num, &used, 10);
        if (used != num.size() || (num.size() > 1 && num[0] == '0')) fail();
        return PyValue(i);
      } catch (const std::out_of_range&) {
        fail();
      }
    }
    for (const char* name : {"True", "False", "None"}) {
      const size_t n = std::string(name).size();
      if (t_.compare(p_, n, name) == 0 &&
          (p_ + n == t_.size() || !std::isalnum(static_cast<unsigned char>(t_[p_ + n])))) {
        p_ += n;
        return name[0] == 'N' ? PyValue() : PyValue(name[0] == 'T');
      }
    }
    fail();
  }
  const std::string& t_;
  size_t p_ = 0;
};

}  // namespace

PyValue py_literal_eval(const std::string& text) {
  // literal_eval strips leading spaces and tabs (not newlines) before parsing.
  size_t b = 0;
  while (b < text.size() && (text[b] == ' ' || text[b] == '\t')) ++b;
  if (b < text.size() && (text[b] == '\n' || text[b] == '\r') &&
      text.find_first_not_of(" \t\r\n", b) != std::string::npos)
    throw std::invalid_argument("unexpected indent");
  const std::string t = text.substr(b);
  return LiteralParser(t).parse_all();
}

}  // namespace lmt::eval
