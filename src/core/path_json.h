// Paths are bytes; JSON holds text. lmtrain writes a path into a JSON file (state.json, a store's
// manifest.json, metrics.jsonl) as a JSON string when it is valid UTF-8, and otherwise as
// {"path_bytes": "<hex>"}, which path_from_json reads back byte for byte: a run, a store or an
// export under a directory whose name is not UTF-8 works like any other.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace lmt {

bool is_valid_utf8(const std::string& s);
nlohmann::json path_to_json(const std::string& path);
// The path of path_to_json's value; UserError naming `where` for any other value.
std::string path_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace lmt
