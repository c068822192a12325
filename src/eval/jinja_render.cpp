// JinjaTemplate's evaluator (jinja.h): jinja2's semantics under StrictUndefined on PyValue. A
// missing name or field yields an undefined value that fails as soon as it is used (printed,
// compared, iterated, tested for truth); `is defined` and `default` may look at it. Python's
// TypeError, ValueError and friends become one UserError naming the record and the expression.
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "core/error.h"
#include "eval/jinja_ast.h"

namespace lmt::eval {

namespace {

// A Python exception inside an expression; the renderer adds the record and the expression.
struct PyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct UndefinedUse : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const PyValue& need(const PyValue& v) {
  if (v.is_undefined()) throw UndefinedUse(v.undefined_name());
  return v;
}

int64_t index_of(int64_t i, size_t n) {
  return i < 0 ? i + int64_t(n) : i;
}

// Python's slice indices for a sequence of length n (slice.indices()).
std::vector<size_t> slice_positions(size_t n, const PyValue& a, const PyValue& b,
                                    const PyValue& c) {
  auto as_opt = [](const PyValue& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) throw PyError("slice indices must be integers or None");
    return v.as_int();
  };
  const auto step_opt = as_opt(c);
  const int64_t step = step_opt.value_or(1);
  if (step == 0) throw PyError("slice step cannot be zero");
  const int64_t len = int64_t(n);
  auto clamp = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t v = *x < 0 ? *x + len : *x;
    if (step > 0) return std::clamp<int64_t>(v, 0, len);
    return std::clamp<int64_t>(v, -1, len - 1);
  };
  const int64_t start = clamp(as_opt(a), step > 0 ? 0 : len - 1);
  const int64_t stop = clamp(as_opt(b), step > 0 ? len : -1);
  std::vector<size_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(size_t(i));
  return out;
}

// The items a for loop, join or list sees: a list's items, a string's characters, a dict's keys.
PyList iterate(const PyValue& v) {
  need(v);
  if (v.is_list()) return v.list();
  if (v.is_str()) {
    PyList out;
    for (char32_t c : utf8_to_u32(v.str()))
      out.push_back(PyValue(u32_to_utf8(std::u32string(1, c))));
    return out;
  }
  if (v.is_dict()) {
    PyList out;
    for (const auto& [k, e] : v.dict()) out.push_back(PyValue(k));
    return out;
  }
  throw PyError(std::string("'") + v.type_name() + "' object is not iterable");
}

int64_t py_len(const PyValue& v) {
  need(v);
  if (v.is_str()) return int64_t(utf8_to_u32(v.str()).size());
  if (v.is_list()) return int64_t(v.list().size());
  if (v.is_dict()) return int64_t(v.dict().size());
  throw PyError(std::string("object of type '") + v.type_name() + "' has no len()");
}

bool py_contains(const PyValue& container, const PyValue& item) {
  need(container);
  need(item);
  if (container.is_str()) {
    if (!item.is_str())
      throw PyError(std::string("'in <string>' requires string as left operand, not ") +
                    item.type_name());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict()) return item.is_str() && dict_get(container.dict(), item.str());
  for (const auto& e : iterate(container))
    if (py_equal(e, item)) return true;
  return false;
}

double floor_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m == 0) return std::copysign(0.0, b);  // CPython's float_rem: the divisor's sign
  if ((m < 0) != (b < 0)) m += b;
  return m;
}

PyValue binary(const std::string& op, const PyValue& a, const PyValue& b) {
  need(a);
  need(b);
  if (op == "~") return PyValue(py_str(a) + py_str(b));
  const std::string unsupported = "unsupported operand type(s) for " + op + ": '" + a.type_name() +
                                  "' and '" + b.type_name() + "'";
  if (a.is_number() && b.is_number()) {
    const bool ints = !a.is_float() && !b.is_float();
    if (op == "/") {
      if (b.as_double() == 0) throw PyError("division by zero");
      return PyValue(a.as_double() / b.as_double());
    }
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (op == "+") return PyValue(x + y);
      if (op == "-") return PyValue(x - y);
      if (op == "*") return PyValue(x * y);
      if (op == "//" || op == "%") {
        if (y == 0) throw PyError("integer division or modulo by zero");
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          --q;
          r += y;
        }
        return op == "//" ? PyValue(q) : PyValue(r);
      }
      if (op == "**") {
        if (y < 0) return PyValue(std::pow(double(x), double(y)));
        int64_t r = 1;
        for (int64_t k = 0; k < y; ++k) r *= x;
        return PyValue(r);
      }
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return PyValue(x + y);
    if (op == "-") return PyValue(x - y);
    if (op == "*") return PyValue(x * y);
    if (op == "//" || op == "%") {
      if (y == 0) throw PyError("float floor division by zero");
      return op == "//" ? PyValue(std::floor((x - floor_mod(x, y)) / y)) : PyValue(floor_mod(x, y));
    }
    if (op == "**") return PyValue(std::pow(x, y));
  }
  if (op == "+" && a.is_str() && b.is_str()) return PyValue(a.str() + b.str());
  if (op == "+" && a.is_list() && b.is_list()) {
    PyList l = a.list();
    l.insert(l.end(), b.list().begin(), b.list().end());
    return PyValue(std::move(l));
  }
  if (op == "*" && (((a.is_str() || a.is_list()) && (b.is_int() || b.is_bool())) ||
                    ((b.is_str() || b.is_list()) && (a.is_int() || a.is_bool())))) {
    const PyValue& seq = a.is_int() || a.is_bool() ? b : a;
    const int64_t n = (a.is_int() || a.is_bool() ? a : b).as_int();
    if (seq.is_str()) {
      std::string out;
      for (int64_t k = 0; k < n; ++k) out += seq.str();
      return PyValue(out);
    }
    PyList out;
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list().begin(), seq.list().end());
    return PyValue(std::move(out));
  }
  throw PyError(unsupported);
}

bool compare(const std::string& op, const PyValue& a, const PyValue& b) {
  need(a);
  need(b);
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in") return py_contains(b, a);
  if (op == "not in") return !py_contains(b, a);
  const auto lt = op == "<" || op == ">=" ? py_less(a, b) : py_less(b, a);
  if (!lt)
    throw PyError("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" +
                  b.type_name() + "'");
  return op == "<" || op == ">" ? *lt : !*lt;
}

std::string as_string_arg(const PyValue& v, const char* what) {
  need(v);
  if (!v.is_str()) throw PyError(std::string(what) + " must be str, not " + v.type_name());
  return v.str();
}

// int(x) as jinja2's `int` filter takes it: strings as int(s) (whitespace, sign and underscores
// allowed) else int(float(s)), numbers truncated, anything else the default.
PyValue to_int(const PyValue& v, const PyValue& dflt) {
  need(v);
  if (v.is_int() || v.is_bool()) return PyValue(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (!std::isfinite(d)) return dflt;
    // Python's int is unbounded; lmtrain's stops at 64 bits and says so rather than wrap.
    if (std::fabs(d) >= 9.2e18)
      throw PyError("int() of " + py_float_repr(d) +
                    " is beyond the 64-bit integers lmtrain computes with");
    return PyValue(int64_t(d));
  }
  if (v.is_str()) {
    std::string s = py_strip(v.str(), std::nullopt, true, true);
    std::string digits;
    size_t i = 0;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) digits += s[i++];
    bool ok = i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]));
    for (; ok && i < s.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(s[i]))) {
        digits += s[i];
      } else if (!(s[i] == '_' && i + 1 < s.size() &&
                   std::isdigit(static_cast<unsigned char>(s[i + 1])) &&
                   std::isdigit(static_cast<unsigned char>(s[i - 1])))) {
        ok = false;
      }
    }
    if (ok) {
      try {
        return PyValue(int64_t(std::stoll(digits)));
      } catch (const std::out_of_range&) {
        return dflt;
      }
    }
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return PyValue(int64_t(d));
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

PyValue to_float(const PyValue& v, const PyValue& dflt) {
  need(v);
  if (v.is_number()) return PyValue(v.as_double());
  if (v.is_str()) {
    const std::string s = py_strip(v.str(), std::nullopt, true, true);
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return PyValue(d);
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

std::string capitalize(const std::string& s) {
  std::u32string u = utf8_to_u32(s);
  if (u.empty()) return s;
  return py_upper(u32_to_utf8(u.substr(0, 1))) + py_lower(u32_to_utf8(u.substr(1)));
}

class Renderer {
 public:
  Renderer(const PyDict& vars, const std::string& where, const std::string& record)
      : where_(where), record_(record) {
    scopes_.emplace_back();
    for (const auto& [k, v] : vars) scopes_.back()[k] = v;
    scopes_.emplace_back();  // the template's own top-level {% set %}s
  }

  void node(const JinjaNode& n, std::string& out) {
    switch (n.kind) {
      case JinjaNode::kBody:
        for (const auto& c : n.children) node(*c, out);
        return;
      case JinjaNode::kText:
        out += n.text;
        return;
      case JinjaNode::kOutput:
        out += py_str(need_at(eval(*n.expr), *n.expr));
        return;
      case JinjaNode::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (truth(eval(*cond), *cond)) {
            node(*body, out);
            return;
          }
        }
        if (n.else_body) node(*n.else_body, out);
        return;
      case JinjaNode::kFor:
        render_for(n, out);
        return;
      case JinjaNode::kSet:
        assign(n.targets, eval(*n.expr), *n.expr);
        return;
    }
  }

 private:
  [[noreturn]] void fail(const JinjaExpr& e, const std::string& why) {
    throw UserError(record_ + ": " + where_ + ": " + why + " (in {{ " + excerpt(e.text) + " }})");
  }
  const PyValue& need_at(const PyValue& v, const JinjaExpr& e) {
    if (v.is_undefined()) undefined_error(v.undefined_name());
    (void)e;
    return v;
  }
  [[noreturn]] void undefined_error(const std::string& name) {
    throw UserError(record_ + ": " + where_ + ": the template uses '" + name +
                    "', which this record does not have (the harness's StrictUndefined fails "
                    "here too)");
  }
  bool truth(const PyValue& v, const JinjaExpr& e) { return py_truth(need_at(v, e)); }

  void assign(const std::vector<std::string>& targets, const PyValue& v, const JinjaExpr& e) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = v;
      return;
    }
    PyList items;
    try {
      items = iterate(v);
    } catch (const PyError& err) {
      fail(e, std::string("cannot unpack: ") + err.what());
    } catch (const UndefinedUse& u) {
      undefined_error(u.what());
    }
    if (items.size() != targets.size())
      fail(e, "cannot unpack " + std::to_string(items.size()) + " values into " +
                  std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = items[i];
  }

  void render_for(const JinjaNode& n, std::string& out) {
    const PyValue seq = eval(*n.expr);
    PyList items;
    try {
      items = iterate(seq);
    } catch (const PyError& err) {
      fail(*n.expr, err.what());
    } catch (const UndefinedUse& u) {
      undefined_error(u.what());
    }
    const int64_t len = int64_t(items.size());
    for (int64_t i = 0; i < len; ++i) {
      scopes_.emplace_back();
      scopes_.back()["loop"] = PyValue(PyDict{{"index", PyValue(i + 1)},
                                              {"index0", PyValue(i)},
                                              {"revindex", PyValue(len - i)},
                                              {"revindex0", PyValue(len - i - 1)},
                                              {"first", PyValue(i == 0)},
                                              {"last", PyValue(i == len - 1)},
                                              {"length", PyValue(len)}});
      assign(n.targets, items[i], *n.expr);
      node(*n.body, out);
      scopes_.pop_back();
    }
    if (len == 0 && n.else_body) node(*n.else_body, out);
  }

  PyValue lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return PyValue::undefined(name);
  }

  PyValue eval(const JinjaExpr& e) {
    try {
      return eval_inner(e);
    } catch (const UndefinedUse& u) {
      undefined_error(u.what());
    } catch (const PyError& err) {
      fail(e, err.what());
    } catch (const std::invalid_argument& err) {
      fail(e, err.what());
    }
  }

  PyValue getitem(const PyValue& obj, const PyValue& key, const std::string& text) {
    need(obj);
    need(key);
    if (obj.is_dict()) {
      if (key.is_str())
        if (const PyValue* v = dict_get(obj.dict(), key.str())) return *v;
      return PyValue::undefined(text);
    }
    if ((obj.is_list() || obj.is_str()) && (key.is_int() || key.is_bool())) {
      const size_t n = obj.is_list() ? obj.list().size() : utf8_to_u32(obj.str()).size();
      const int64_t i = index_of(key.as_int(), n);
      if (i < 0 || i >= int64_t(n)) return PyValue::undefined(text);
      if (obj.is_list()) return obj.list()[size_t(i)];
      return PyValue(u32_to_utf8(std::u32string(1, utf8_to_u32(obj.str())[size_t(i)])));
    }
    return PyValue::undefined(text);
  }

  PyValue eval_inner(const JinjaExpr& e) {
    switch (e.kind) {
      case JinjaExpr::kLiteral:
        return e.value;
      case JinjaExpr::kName:
        return lookup(e.name);
      case JinjaExpr::kGetattr: {
        const PyValue obj = need(eval(*e.args[0]));
        if (obj.is_dict()) {
          if (const PyValue* v = dict_get(obj.dict(), e.name)) return *v;
        }
        return PyValue::undefined(e.text);
      }
      case JinjaExpr::kGetitem:
        return getitem(eval(*e.args[0]), eval(*e.args[1]), e.text);
      case JinjaExpr::kSlice: {
        const PyValue obj = need(eval(*e.args[0]));
        PyValue parts[3];
        for (int k = 0; k < 3; ++k)
          if (e.args[k + 1]) parts[k] = need(eval(*e.args[k + 1]));
        if (obj.is_list()) {
          PyList out;
          for (size_t i : slice_positions(obj.list().size(), parts[0], parts[1], parts[2]))
            out.push_back(obj.list()[i]);
          return PyValue(std::move(out));
        }
        if (obj.is_str()) {
          const std::u32string u = utf8_to_u32(obj.str());
          std::u32string out;
          for (size_t i : slice_positions(u.size(), parts[0], parts[1], parts[2])) out += u[i];
          return PyValue(u32_to_utf8(out));
        }
        throw PyError(std::string("'") + obj.type_name() + "' object is not subscriptable");
      }
      case JinjaExpr::kCall:
        return call(e);
      case JinjaExpr::kFilter:
        return filter(e);
      case JinjaExpr::kTest:
        return PyValue(test(e) != e.negated);
      case JinjaExpr::kNeg:
      case JinjaExpr::kPos: {
        const PyValue v = need(eval(*e.args[0]));
        if (!v.is_number())
          throw PyError(std::string("bad operand type for unary ") +
                        (e.kind == JinjaExpr::kNeg ? "-" : "+") + ": '" + v.type_name() + "'");
        if (e.kind == JinjaExpr::kPos) return v.is_float() ? v : PyValue(v.as_int());
        return v.is_float() ? PyValue(-v.as_double()) : PyValue(-v.as_int());
      }
      case JinjaExpr::kNot:
        return PyValue(!py_truth(need(eval(*e.args[0]))));
      case JinjaExpr::kBinary:
        return binary(e.name, eval(*e.args[0]), eval(*e.args[1]));
      case JinjaExpr::kCompare: {
        PyValue left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          PyValue right = eval(*e.args[i + 1]);
          if (!compare(e.ops[i], left, right)) return PyValue(false);
          left = right;
        }
        return PyValue(true);
      }
      case JinjaExpr::kAnd: {
        PyValue a = eval(*e.args[0]);
        return py_truth(need(a)) ? eval(*e.args[1]) : a;
      }
      case JinjaExpr::kOr: {
        PyValue a = eval(*e.args[0]);
        return py_truth(need(a)) ? a : eval(*e.args[1]);
      }
      case JinjaExpr::kCond:
        if (py_truth(need(eval(*e.args[0])))) return eval(*e.args[1]);
        if (e.args.size() > 2) return eval(*e.args[2]);
        return PyValue::undefined(e.text);
      case JinjaExpr::kList: {
        PyList l;
        for (const auto& a : e.args) l.push_back(eval(*a));
        return PyValue(std::move(l));
      }
      case JinjaExpr::kDict: {
        PyDict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const PyValue k = need(eval(*e.args[i]));
          if (!k.is_str()) throw PyError("only string keys are supported in dict literals");
          d.emplace_back(k.str(), eval(*e.args[i + 1]));
        }
        return PyValue(std::move(d));
      }
    }
    return PyValue();
  }

  // The positional and keyword arguments of a call, filter or test (after its subject).
  struct Args {
    std::vector<PyValue> pos;
    std::map<std::string, PyValue> kw;
    const PyValue* get(size_t i, const char* name) const {
      if (i < pos.size()) return &pos[i];
      auto it = kw.find(name);
      return it == kw.end() ? nullptr : &it->second;
    }
  };
  Args args_of(const JinjaExpr& e, size_t first) {
    Args a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.kw[k] = eval(*v);
    return a;
  }
  static void arity(const Args& a, size_t lo, size_t hi, const std::string& what) {
    if (a.pos.size() + a.kw.size() < lo || a.pos.size() + a.kw.size() > hi)
      throw PyError(
          what + " takes " +
          (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) +
          " argument(s), " + std::to_string(a.pos.size() + a.kw.size()) + " given");
  }
  static std::optional<std::string> opt_str(const Args& a, size_t i, const char* name) {
    const PyValue* v = a.get(i, name);
    if (!v || need(*v).is_none()) return std::nullopt;
    return as_string_arg(*v, name);
  }
  static int64_t opt_int(const Args& a, size_t i, const char* name, int64_t dflt) {
    const PyValue* v = a.get(i, name);
    if (!v) return dflt;
    if (!need(*v).is_int() && !v->is_bool())
      throw PyError(std::string(name) + " must be an integer");
    return v->as_int();
  }

  PyValue call(const JinjaExpr& e) {
    const JinjaExpr& callee = *e.args[0];
    const Args a = args_of(e, 1);
    if (callee.kind == JinjaExpr::kName && callee.name == "range" &&
        lookup("range").is_undefined()) {
      arity(a, 1, 3, "range()");
      for (const auto& v : a.pos)
        if (!need(v).is_int() && !v.is_bool()) throw PyError("range() arguments must be integers");
      int64_t start = 0, stop, step = 1;
      if (a.pos.size() == 1) {
        stop = a.pos[0].as_int();
      } else {
        start = a.pos[0].as_int();
        stop = a.pos[1].as_int();
        if (a.pos.size() == 3) step = a.pos[2].as_int();
      }
      if (step == 0) throw PyError("range() arg 3 must not be zero");
      PyList out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(PyValue(i));
      return PyValue(std::move(out));
    }
    if (callee.kind != JinjaExpr::kGetattr)
      throw PyError("'" + callee.text + "' is not callable here");
    const PyValue obj = need(eval(*callee.args[0]));
    const std::string& m = callee.name;
    if (obj.is_str()) return str_method(obj.str(), m, a);
    if (obj.is_list()) {
      if (m == "index" || m == "count") {
        arity(a, 1, 1, m + "()");
        const PyValue& x = need(a.pos.at(0));
        int64_t count = 0;
        for (size_t i = 0; i < obj.list().size(); ++i) {
          if (py_equal(obj.list()[i], x)) {
            if (m == "index") return PyValue(int64_t(i));
            ++count;
          }
        }
        if (m == "index") throw PyError(py_repr(x) + " is not in list");
        return PyValue(count);
      }
    }
    if (obj.is_dict()) {
      if (m == "get") {
        arity(a, 1, 2, "get()");
        const PyValue& k = need(a.pos.at(0));
        if (k.is_str())
          if (const PyValue* v = dict_get(obj.dict(), k.str())) return *v;
        return a.pos.size() > 1 ? a.pos[1] : PyValue();
      }
      if (m == "keys" || m == "values") {
        arity(a, 0, 0, m + "()");
        PyList out;
        for (const auto& [k, v] : obj.dict()) out.push_back(m == "keys" ? PyValue(k) : v);
        return PyValue(std::move(out));
      }
    }
    throw PyError(std::string("'") + obj.type_name() + "' object has no supported method '" + m +
                  "'");
  }

  PyValue str_method(const std::string& s, const std::string& m, const Args& a) {
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      arity(a, 0, 1, m + "()");
      return PyValue(py_strip(s, opt_str(a, 0, "chars"), m != "rstrip", m != "lstrip"));
    }
    if (m == "split") {
      arity(a, 0, 2, "split()");
      PyList out;
      for (auto& p : py_split(s, opt_str(a, 0, "sep"), opt_int(a, 1, "maxsplit", -1)))
        out.push_back(PyValue(p));
      return PyValue(std::move(out));
    }
    if (m == "replace") {
      arity(a, 2, 3, "replace()");
      return PyValue(py_replace(s, as_string_arg(a.pos.at(0), "old"),
                                as_string_arg(a.pos.at(1), "new"), opt_int(a, 2, "count", -1)));
    }
    if (m == "lower" || m == "upper" || m == "capitalize" || m == "isdigit") {
      arity(a, 0, 0, m + "()");
      if (m == "isdigit") return PyValue(py_isdigit_str(s));
      return PyValue(m == "lower" ? py_lower(s) : m == "upper" ? py_upper(s) : capitalize(s));
    }
    if (m == "startswith" || m == "endswith") {
      arity(a, 1, 1, m + "()");
      const std::string x = as_string_arg(a.pos.at(0), "prefix");
      const bool ok = x.size() <= s.size() &&
                      (m == "startswith" ? s.compare(0, x.size(), x) == 0
                                         : s.compare(s.size() - x.size(), x.size(), x) == 0);
      return PyValue(ok);
    }
    if (m == "join") {
      arity(a, 1, 1, "join()");
      std::string out;
      bool first = true;
      for (const auto& item : iterate(a.pos.at(0))) {
        if (!item.is_str())
          throw PyError(std::string("sequence item: expected str instance, ") + item.type_name() +
                        " found");
        if (!first) out += s;
        first = false;
        out += item.str();
      }
      return PyValue(out);
    }
    if (m == "count" || m == "find" || m == "index") {
      arity(a, 1, 1, m + "()");
      const std::string x = as_string_arg(a.pos.at(0), "sub");
      const size_t f = s.find(x);
      if (m == "count") {
        if (x.empty()) return PyValue(int64_t(utf8_to_u32(s).size()) + 1);
        int64_t n = 0;
        for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + x.size())) ++n;
        return PyValue(n);
      }
      if (f == std::string::npos) {
        if (m == "index") throw PyError("substring not found");
        return PyValue(int64_t(-1));
      }
      return PyValue(int64_t(utf8_to_u32(s.substr(0, f)).size()));
    }
    throw PyError("'str' object has no supported method '" + m + "'");
  }

  PyValue filter(const JinjaExpr& e) {
    const std::string& f = e.name;
    const PyValue v = eval(*e.args[0]);
    const Args a = args_of(e, 1);
    if (f == "default" || f == "d") {
      arity(a, 0, 2, f);
      const PyValue* boolean = a.get(1, "boolean");
      if (v.is_undefined() || (boolean && py_truth(need(*boolean)) && !py_truth(v))) {
        const PyValue* d = a.get(0, "default_value");
        return d ? *d : PyValue("");
      }
      return v;
    }
    need(v);
    if (f == "trim") {
      arity(a, 0, 1, f);
      return PyValue(py_strip(py_str(v), opt_str(a, 0, "chars"), true, true));
    }
    if (f == "lower" || f == "upper" || f == "capitalize") {
      arity(a, 0, 0, f);
      return PyValue(f == "lower"   ? py_lower(py_str(v))
                     : f == "upper" ? py_upper(py_str(v))
                                    : capitalize(py_str(v)));
    }
    if (f == "string") return PyValue(py_str(v));
    if (f == "length" || f == "count") return PyValue(py_len(v));
    if (f == "join") {
      arity(a, 0, 1, f);
      const std::string d = a.get(0, "d") ? py_str(need(*a.get(0, "d"))) : "";
      std::string out;
      bool first = true;
      for (const auto& item : iterate(v)) {
        if (!first) out += d;
        first = false;
        out += py_str(need(item));
      }
      return PyValue(out);
    }
    if (f == "replace") {
      arity(a, 2, 3, f);
      const int64_t count =
          a.get(2, "count") && !a.get(2, "count")->is_none() ? opt_int(a, 2, "count", -1) : -1;
      return PyValue(
          py_replace(py_str(v), py_str(need(a.pos.at(0))), py_str(need(a.pos.at(1))), count));
    }
    if (f == "first" || f == "last") {
      const PyList items = iterate(v);
      if (items.empty()) return PyValue::undefined(e.text);
      return f == "first" ? items.front() : items.back();
    }
    if (f == "list") return PyValue(iterate(v));
    if (f == "int") {
      arity(a, 0, 1, f);
      return to_int(v, a.get(0, "default") ? *a.get(0, "default") : PyValue(int64_t(0)));
    }
    if (f == "float") {
      arity(a, 0, 1, f);
      return to_float(v, a.get(0, "default") ? *a.get(0, "default") : PyValue(0.0));
    }
    if (f == "abs") {
      if (v.is_float()) return PyValue(std::fabs(v.as_double()));
      if (v.is_number()) return PyValue(v.as_int() < 0 ? -v.as_int() : v.as_int());
      throw PyError(std::string("bad operand type for abs(): '") + v.type_name() + "'");
    }
    throw PyError("the filter '" + f + "' is not supported by lmtrain");
  }

  bool test(const JinjaExpr& e) {
    const std::string& t = e.name;
    const PyValue v = eval(*e.args[0]);
    if (t == "defined") return !v.is_undefined();
    if (t == "undefined") return v.is_undefined();
    // jinja2's type tests are isinstance checks (or catch the failure), so an undefined value
    // is simply not a string, a number, ...; even, odd, lower and upper use it and fail.
    static const std::set<std::string> kTypeTests = {"none",    "string",   "number",  "integer",
                                                     "float",   "boolean",  "true",    "false",
                                                     "mapping", "sequence", "iterable"};
    if (v.is_undefined() && kTypeTests.count(t)) return false;
    need(v);
    if (t == "none") return v.is_none();
    if (t == "string") return v.is_str();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_int();
    if (t == "float") return v.is_float();
    if (t == "boolean") return v.is_bool();
    if (t == "true") return v.is_bool() && std::get<bool>(v.v);
    if (t == "false") return v.is_bool() && !std::get<bool>(v.v);
    if (t == "mapping") return v.is_dict();
    if (t == "sequence" || t == "iterable") return v.is_str() || v.is_list() || v.is_dict();
    if (t == "even" || t == "odd") {
      if (!v.is_int() && !v.is_bool()) throw PyError("'" + t + "' needs an integer");
      const bool even = v.as_int() % 2 == 0;
      return t == "even" ? even : !even;
    }
    if (t == "lower")
      return v.is_str() && py_lower(v.str()) == v.str() && py_upper(v.str()) != v.str();
    if (t == "upper")
      return v.is_str() && py_upper(v.str()) == v.str() && py_lower(v.str()) != v.str();
    throw PyError("the test '" + t + "' is not supported by lmtrain");
  }

  const std::string& where_;
  const std::string& record_;
  std::vector<std::map<std::string, PyValue>> scopes_;
};

}  // namespace

std::string jinja_render(const JinjaNode& root, const PyDict& vars, const std::string& where,
                         const std::string& record) {
  Renderer r(vars, where, record);
  std::string out;
  r.node(root, out);
  return out;
}

}  // namespace lmt::eval
