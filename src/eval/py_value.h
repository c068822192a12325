// Python values as lm-evaluation-harness sees a dataset record and what its Jinja templates compute
// from it: None, bool, int, float, str, list and dict, printed as Python's str() and repr() print
// them (a list of strings renders "['a', \"b'c\"]", a float 1e-05), compared and tested for truth
// as Python does. The harness's strings are rendered, literal_eval'd and compared in this form,
// so every rule here is CPython's. Strings hold UTF-8; length and indexing count code points.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace lmt::eval {

// Records keep their fields in file order (Python dicts and Arrow structs do), hence ordered_json.
using Json = nlohmann::ordered_json;

struct PyValue;
using PyList = std::vector<PyValue>;
using PyDict = std::vector<std::pair<std::string, PyValue>>;  // insertion order; string keys

struct PyNone {};
// Jinja's undefined (StrictUndefined): `name` says what was looked up, for the error message.
struct PyUndefined {
  std::string name;
};

struct PyValue {
  std::variant<PyNone, bool, int64_t, double, std::string, std::shared_ptr<PyList>,
               std::shared_ptr<PyDict>, PyUndefined>
      v;

  PyValue() : v(PyNone{}) {}
  PyValue(bool b) : v(b) {}
  PyValue(int64_t i) : v(i) {}
  PyValue(int i) : v(int64_t(i)) {}
  PyValue(double d) : v(d) {}
  PyValue(std::string s) : v(std::move(s)) {}
  PyValue(const char* s) : v(std::string(s)) {}
  PyValue(PyList l) : v(std::make_shared<PyList>(std::move(l))) {}
  PyValue(PyDict d) : v(std::make_shared<PyDict>(std::move(d))) {}
  static PyValue undefined(std::string name) {
    PyValue u;
    u.v = PyUndefined{std::move(name)};
    return u;
  }

  bool is_none() const { return std::holds_alternative<PyNone>(v); }
  bool is_undefined() const { return std::holds_alternative<PyUndefined>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }  // not bool
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_str() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<PyList>>(v); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<PyDict>>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  const PyList& list() const { return *std::get<std::shared_ptr<PyList>>(v); }
  const PyDict& dict() const { return *std::get<std::shared_ptr<PyDict>>(v); }
  const std::string& undefined_name() const { return std::get<PyUndefined>(v).name; }
  int64_t as_int() const { return is_bool() ? int64_t(std::get<bool>(v)) : std::get<int64_t>(v); }
  double as_double() const { return is_float() ? std::get<double>(v) : double(as_int()); }
  // Python's type name, for messages ("str", "list", ...).
  const char* type_name() const;
};

PyValue from_json(const Json& j);
Json to_json(const PyValue& v);

std::string py_str(const PyValue& v);   // str(v)
std::string py_repr(const PyValue& v);  // repr(v)
std::string py_repr_string(const std::string& s);
std::string py_float_repr(double d);
bool py_truth(const PyValue& v);
bool py_equal(const PyValue& a, const PyValue& b);
// a < b, or nullopt where Python raises TypeError ('<' not supported between ...).
std::optional<bool> py_less(const PyValue& a, const PyValue& b);
const PyValue* dict_get(const PyDict& d, const std::string& key);

// ast.literal_eval of `text` (strings, numbers, True/False/None, lists, tuples as lists, dicts with
// string keys, unary minus). Throws std::invalid_argument with Python's reason where it raises.
PyValue py_literal_eval(const std::string& text);

// The body of a Python (or Jinja) string literal with its backslash escapes decoded, as the
// unicode-escape codec decodes them (an unknown escape stays as written).
std::string decode_py_escapes(const std::string& body);

// UTF-8 <-> code points (strings index by code point in Python).
std::u32string utf8_to_u32(const std::string& s);
std::string u32_to_utf8(const std::u32string& s);
bool py_isspace(char32_t c);  // str.isspace() for one character
bool py_isdigit_str(
    const std::string& s);  // str.isdigit(): non-empty, all Unicode digits (ASCII here)

// The string methods templates call, as CPython implements them.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right);
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count);
std::string py_lower(const std::string& s);  // Unicode, see py_value.cpp
std::string py_upper(const std::string& s);

}  // namespace lmt::eval
