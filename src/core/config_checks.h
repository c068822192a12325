// What every config section's validate() checks the same way (model, data, train, optimizer,
// lora, ...): a value against a rule, a string against the choices its key declares in visit(),
// and every number finite. Messages start with the key as the YAML names it
// ("train.lr must be > 0 (got -1)"), so that a loader can tell which file and line gave it.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace lmt {

// The values a string key takes, declared in visit() beside its name and help:
//   v("schedule", schedule, "help", {"constant", "cosine", "linear", "wsd"});
// --help-config lists them and require_choices() checks them: one list for both.
using Choices = std::initializer_list<const char*>;

template <class T>
void require(bool ok, const std::string& key, const char* rule, T got) {
  if (!ok) throw UserError(fmt::format("{} must be {} (got {})", key, rule, got));
}

// "KEY must be one of A, B (got 'V')" unless `value` is one of `choices`.
void require_one_of(const std::string& key, const std::string& value, Choices choices);
// Whether `value` is one of `choices`, and the choices as messages list them: "a, b, c".
bool one_of(const std::string& value, Choices choices);
std::string choices_text(Choices choices);

namespace config_checks_detail {

struct ChoiceCheck {
  const std::string& prefix;
  template <class T>
  void operator()(const char* name, const T& field, const char*, Choices choices = {}) const {
    if constexpr (std::is_same_v<T, std::string>)
      if (choices.size() > 0) require_one_of(prefix + name, field, choices);
  }
};

struct FiniteCheck {
  const std::string& prefix;
  template <class T>
  void operator()(const char* name, const T& field, const char*, Choices = {}) const {
    if constexpr (std::is_floating_point_v<T>)
      require(std::isfinite(field), prefix + name, "a finite number", field);
  }
};

}  // namespace config_checks_detail

// Every string key of `section` declared with choices holds one of them. `prefix` names the
// section as the YAML does: "train.", "data.sources[2].". (visit() is not const: a copy.)
template <class Section>
void require_choices(Section section, const std::string& prefix) {
  config_checks_detail::ChoiceCheck check{prefix};
  section.visit(check);
}

// Every floating-point key of `section` is finite: YAML's .inf and .nan read as numbers, and a
// range test such as `lr > 0` lets infinity through.
template <class Section>
void require_finite(Section section, const std::string& prefix) {
  config_checks_detail::FiniteCheck check{prefix};
  section.visit(check);
}

}  // namespace lmt
