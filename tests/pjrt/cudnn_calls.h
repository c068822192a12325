// cuDNN custom calls read back from a program's text, and the fixtures of JAX's programs that the
// cuDNN attention tests compare them with (tests/data/cudnn, extracted by
// scripts/make_cudnn_fixtures.py from programs JAX made on an H100).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace lmt::test {

// One line `%r:n = stablehlo.custom_call @target(operands) {attributes} : types`, in parts.
struct CudnnCall {
  std::string line;                   // the whole line, leading spaces removed
  std::string result;                 // "%55:3"
  std::string target;                 // "__cudnn$fmhaSoftmax"
  std::vector<std::string> operands;  // "%51", "%50#1"
  std::string config;                 // backend_config as the target reads it (\22 -> ")
  std::string layouts;                // "operand_layouts = [...], result_layouts = [...]"
  std::string types;                  // "(tensor<..>, ...) -> (tensor<..>, ...)"
};

inline std::string unescape_mlir(const std::string& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 3, "\\22") == 0) {
      r += '"', i += 2;
    } else if (s.compare(i, 3, "\\5C") == 0) {
      r += '\\', i += 2;
    } else {
      r += s[i];
    }
  }
  return r;
}

// nullopt (and a test failure) for a line that is not such a call.
inline std::optional<CudnnCall> parse_cudnn_call(const std::string& text) {
  CudnnCall c;
  c.line = text.substr(std::min(text.size(), text.find_first_not_of(' ')));
  const std::string& l = c.line;
  const size_t eq = l.find(" = stablehlo.custom_call @"), open = l.find('(', eq),
               close = l.find(')', open), types = l.rfind("} : (");
  const size_t config = l.find("backend_config = \""), layouts = l.find("operand_layouts = ");
  if (eq == std::string::npos || open == std::string::npos || close == std::string::npos ||
      types == std::string::npos || config == std::string::npos || layouts == std::string::npos ||
      types < layouts) {
    ADD_FAILURE() << "not a custom call with a backend_config and layouts: " << l;
    return std::nullopt;
  }
  c.result = l.substr(0, eq);
  const size_t at = eq + std::string(" = stablehlo.custom_call @").size();
  c.target = l.substr(at, open - at);
  std::stringstream ops(l.substr(open + 1, close - open - 1));
  for (std::string op; std::getline(ops, op, ',');)
    c.operands.push_back(op.substr(op.find_first_not_of(' ')));
  const size_t config_at = config + std::string("backend_config = \"").size();
  c.config = unescape_mlir(l.substr(config_at, l.find('"', config_at) - config_at));
  c.layouts = l.substr(layouts, types - layouts);
  c.types = l.substr(types + std::string("} : ").size());
  return c;
}

// Every cuDNN custom call of a program, in program order.
inline std::vector<CudnnCall> cudnn_calls(const std::string& program) {
  std::vector<CudnnCall> calls;
  std::istringstream in(program);
  for (std::string line; std::getline(in, line);) {
    if (line.find("stablehlo.custom_call @__cudnn") == std::string::npos) continue;
    if (auto c = parse_cudnn_call(line)) calls.push_back(*c);
  }
  return calls;
}

// A fixture of tests/data/cudnn: @main's token and embedding argument types, the count of each
// call target, and the first call of each text (SSA names aside).
struct JaxFixture {
  std::string tokens, embedding;  // "tensor<2x1024xi32>", "tensor<32000x2048xf32>"
  std::map<std::string, int> counts;
  std::vector<CudnnCall> calls;
};

inline JaxFixture read_jax_fixture(const std::string& name) {
  const std::string path = std::string(LMT_TEST_DATA) + "/cudnn/" + name + ".txt";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  JaxFixture f;
  for (std::string line; std::getline(in, line);) {
    const size_t sp = line.find(' ');
    const std::string key = line.substr(0, sp), rest = line.substr(sp + 1);
    if (key == "tokens") f.tokens = rest;
    if (key == "embedding") f.embedding = rest;
    if (key == "count")
      f.counts[rest.substr(0, rest.find(' '))] = std::stoi(rest.substr(rest.find(' ') + 1));
    if (key == "call") {
      if (auto c = parse_cudnn_call(rest)) f.calls.push_back(*c);
    }
  }
  EXPECT_FALSE(f.tokens.empty() || f.embedding.empty() || f.calls.empty()) << path;
  return f;
}

// "tensor<32000x2048xf32>" -> {32000, 2048}
inline std::vector<int64_t> tensor_dims(const std::string& type) {
  std::vector<int64_t> dims;
  std::stringstream s(type.substr(type.find('<') + 1));
  for (std::string d; std::getline(s, d, 'x');) {
    if (d.empty() || d.find_first_not_of("0123456789") != std::string::npos) break;
    dims.push_back(std::stoll(d));
  }
  return dims;
}

// The line with every SSA name (%12, %7#1, %55:3) written %_.
inline std::string without_names(const std::string& line) {
  std::string r;
  for (size_t i = 0; i < line.size(); ++i) {
    r += line[i];
    if (line[i] != '%') continue;
    r += '_';
    size_t j = i + 1;
    while (j < line.size() && (std::isalnum(static_cast<unsigned char>(line[j])) ||
                               line[j] == '_' || line[j] == '#' || line[j] == ':'))
      ++j;
    i = j - 1;
  }
  return r;
}

}  // namespace lmt::test
