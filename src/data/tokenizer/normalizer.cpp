// Normalizer: the steps of tokenizer.json's normalizer, applied in order.
#include "data/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lmt {

Normalizer Normalizer::from_json(const nlohmann::json& j, const std::string& where) {
  Normalizer n;
  if (!j.is_null()) n.add(j, where);
  return n;
}

void Normalizer::add(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    const auto& list = j.value("normalizers", nlohmann::json::array());
    for (size_t i = 0; i < list.size(); ++i)
      add(list[i], where + ".normalizers[" + std::to_string(i) + "]");
  } else if (type == "Prepend") {
    steps_.push_back({Step::Kind::kPrepend, "", j.value("prepend", "")});
  } else if (type == "Replace") {
    const auto& pattern = j.value("pattern", nlohmann::json::object());
    if (!pattern.contains("String"))
      throw UserError(where + ".pattern: only a String pattern is supported (not Regex)");
    const std::string from = pattern["String"].get<std::string>();
    if (from.empty()) throw UserError(where + ".pattern: empty String");
    steps_.push_back({Step::Kind::kReplace, from, j.value("content", "")});
  } else {
    throw UserError(where + ".type: '" + type +
                    "' is not supported (supported: Prepend, Replace, Sequence)");
  }
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text), next;
  for (const Step& st : steps_) {
    if (st.kind == Step::Kind::kPrepend) {
      if (!s.empty()) s.insert(0, st.content);
      continue;
    }
    next.clear();
    size_t pos = 0;
    for (size_t hit; (hit = s.find(st.pattern, pos)) != std::string::npos;
         pos = hit + st.pattern.size()) {
      next.append(s, pos, hit - pos);
      next += st.content;
    }
    next.append(s, pos, std::string::npos);
    s.swap(next);
  }
  return s;
}

}  // namespace lmt
