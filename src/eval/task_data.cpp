// A split's records as `datasets`' json builder gives them to the harness: JSON Lines (or a file
// holding one JSON array of objects), every file of the split in order, and the columns unified as
// Arrow unifies them (a missing field is None, ints in a column with floats are floats, a struct
// has every field any record gave it), so templates print what the harness prints ("1.0", None).
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_depth.h"
#include "eval/task_spec.h"

namespace lmt::eval {

namespace {

struct Shape {
  enum Kind { kNull, kBool, kInt, kFloat, kStr, kList, kDict } kind = kNull;
  std::vector<Shape> elem;                            // kList: one
  // kDict: its fields' names and shapes (two vectors: a pair of an incomplete Shape is refused
  // by clang with libstdc++).
  std::vector<std::string> names;
  std::vector<Shape> fields;
};

const char* kind_name(Shape::Kind k) {
  static const char* n[] = {"null", "bool", "int", "float", "string", "list", "object"};
  return n[k];
}

Shape::Kind kind_of(const PyValue& v) {
  if (v.is_none()) return Shape::kNull;
  if (v.is_bool()) return Shape::kBool;
  if (v.is_int()) return Shape::kInt;
  if (v.is_float()) return Shape::kFloat;
  if (v.is_str()) return Shape::kStr;
  if (v.is_list()) return Shape::kList;
  return Shape::kDict;
}

// Widens `s` to hold `v` as well; throws std::runtime_error with the conflict.
void widen(Shape& s, const PyValue& v, const std::string& path) {
  const Shape::Kind k = kind_of(v);
  if (k == Shape::kNull) return;
  if (s.kind == Shape::kNull) {
    s.kind = k;
  } else if (s.kind != k) {
    if ((s.kind == Shape::kInt && k == Shape::kFloat) ||
        (s.kind == Shape::kFloat && k == Shape::kInt)) {
      s.kind = Shape::kFloat;
      return;
    }
    throw std::runtime_error("field '" + path + "' holds both " + kind_name(s.kind) + " and " +
                             kind_name(k) + " values, which a dataset column cannot");
  }
  if (k == Shape::kList) {
    if (s.elem.empty()) s.elem.emplace_back();
    for (const auto& e : v.list()) widen(s.elem[0], e, path + "[]");
  } else if (k == Shape::kDict) {
    for (const auto& [key, e] : v.dict()) {
      Shape* f = nullptr;
      for (size_t i = 0; i < s.names.size(); ++i)
        if (s.names[i] == key) f = &s.fields[i];
      if (!f) {
        s.names.push_back(key);
        f = &s.fields.emplace_back();
      }
      widen(*f, e, path + "." + key);
    }
  }
}

PyValue conform(const PyValue& v, const Shape& s) {
  if (v.is_none()) return v;
  switch (s.kind) {
    case Shape::kFloat:
      return PyValue(v.as_double());
    case Shape::kList: {
      PyList out;
      for (const auto& e : v.list()) out.push_back(s.elem.empty() ? e : conform(e, s.elem[0]));
      return PyValue(std::move(out));
    }
    case Shape::kDict: {
      PyDict out;
      for (size_t i = 0; i < s.names.size(); ++i) {
        const PyValue* e = dict_get(v.dict(), s.names[i]);
        out.emplace_back(s.names[i], e ? conform(*e, s.fields[i]) : PyValue());
      }
      return PyValue(std::move(out));
    }
    default:
      return v;
  }
}

void read_file(const std::string& file, const std::string& where, SplitData& out) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UserError(where + ": cannot read data file " + file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    Json arr;
    check_json_depth(text, file);
    try {
      arr = Json::parse(text);
    } catch (const Json::exception& e) {
      throw UserError(file + ": not valid JSON: " + e.what());
    }
    for (size_t i = 0; i < arr.size(); ++i) {
      if (!arr[i].is_object())
        throw UserError(file + ": element " + std::to_string(i) + " is not an object");
      out.rows.push_back(from_json(arr[i]));
      out.labels.push_back(file + " element " + std::to_string(i));
    }
    return;
  }
  std::istringstream lines(text);
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j;
    check_json_depth(line, file + ":" + std::to_string(n));
    try {
      j = Json::parse(line);
    } catch (const Json::exception& e) {
      throw UserError(file + ":" + std::to_string(n) + ": not valid JSON: " + e.what());
    }
    if (!j.is_object())
      throw UserError(file + ":" + std::to_string(n) + ": a record must be a JSON object");
    out.rows.push_back(from_json(j));
    out.labels.push_back(file + ":" + std::to_string(n));
  }
}

}  // namespace

SplitData load_split(const std::vector<std::string>& files, const std::string& where) {
  SplitData out;
  for (const auto& f : files) read_file(f, where, out);
  Shape row;
  row.kind = Shape::kDict;
  for (size_t i = 0; i < out.rows.size(); ++i) {
    try {
      widen(row, out.rows[i], "");
    } catch (const std::runtime_error& e) {
      std::string msg = e.what();
      // The path starts with "." for a top-level field.
      const size_t q = msg.find("'.");
      if (q != std::string::npos) msg.erase(q + 1, 1);
      throw UserError(out.labels[i] + ": " + msg);
    }
  }
  for (auto& r : out.rows) r = conform(r, row);
  out.columns.insert(out.columns.end(), row.names.begin(), row.names.end());
  return out;
}

}  // namespace lmt::eval
