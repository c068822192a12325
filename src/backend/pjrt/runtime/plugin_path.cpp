// Where the PJRT plugin comes from when the caller names none: $LMTRAIN_PJRT_PLUGIN, else XLA's
// CPU plugin from the Python wheel that scripts/setup.sh installs into lmtrain's virtual
// environment (the same place CMake found pjrt_c_api.h, so header and plugin match).
#include <cstdlib>
#include <filesystem>

#include "backend/pjrt/runtime/plugin.h"
#include "core/error.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

fs::path default_venv() {
  if (const char* v = std::getenv("LMTRAIN_VENV"); v && *v) return v;
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : "") / ".cache/lmtrain/venv";
}

// <venv>/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so, or "".
std::string find_cpu_plugin(const fs::path& venv) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(venv / "lib", ec)) {
    if (entry.path().filename().string().rfind("python3", 0) != 0) continue;
    fs::path so = entry.path() / "site-packages/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";
    if (fs::exists(so, ec)) return so.string();
  }
  return "";
}

}  // namespace

std::string resolve_pjrt_plugin_path(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  if (const char* p = std::getenv("LMTRAIN_PJRT_PLUGIN"); p && *p) return p;
  fs::path venv = default_venv();
  std::string found = find_cpu_plugin(venv);
  if (found.empty()) {
    throw UserError("no PJRT plugin: XLA's CPU plugin is not in " + venv.string() +
                    "/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/ (run scripts/setup.sh "
                    "to install it), and LMTRAIN_PJRT_PLUGIN names no other plugin");
  }
  return found;
}

}  // namespace lmt
