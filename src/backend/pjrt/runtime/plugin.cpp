// Loading a PJRT plugin: dlopen, GetPjrtApi, a C API version check, PJRT_Plugin_Initialize. Each
// way this can fail is one UserError naming the file and the cause. Loaded plugins are kept for
// the life of the process (see plugin.h), one per canonical path.
#include "backend/pjrt/runtime/plugin.h"

#include <dlfcn.h>

#include <cctype>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "pjrt_c_api.h"

namespace lmt {

namespace {

constexpr size_t kMaxPluginMessage = 2000;

std::string version_string(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// The plugin must speak the header's major version and at least its minor version: we fill
// argument structs as the header lays them out, which an older plugin may not know.
void check_version(const std::string& path, const PJRT_Api* api) {
  int major = api->pjrt_api_version.major_version, minor = api->pjrt_api_version.minor_version;
  if (major != PJRT_API_MAJOR || minor < PJRT_API_MINOR) {
    throw UserError("PJRT plugin " + path + " implements PJRT C API " +
                    version_string(major, minor) +
                    ", but lmtrain was built against the header of " +
                    version_string(PJRT_API_MAJOR, PJRT_API_MINOR) +
                    " (a plugin must have the same major version and at least the minor version)");
  }
}

// The refusals that need no PJRT call: a file that is not there, not a shared library, not a
// PJRT plugin, or one of a version we cannot talk to. The library is closed again on refusal.
const PJRT_Api* open_api(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw UserError("PJRT plugin " + path + " does not exist");
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    throw UserError("PJRT plugin " + path + " could not be loaded as a shared library: " +
                    (why ? why : "unknown dlopen error"));
  }
  try {
    using GetPjrtApiFn = const PJRT_Api* (*)();
    auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
    if (!get_api) {
      throw UserError("PJRT plugin " + path + " has no GetPjrtApi symbol: it is not a PJRT plugin");
    }
    const PJRT_Api* api = get_api();
    if (!api) throw UserError("PJRT plugin " + path + ": GetPjrtApi returned no API");
    check_version(path, api);
    return api;  // the handle stays open: the plugin lives as long as the process
  } catch (...) {
    dlclose(handle);
    throw;
  }
}

}  // namespace

bool pjrt_built() {
  return true;
}

std::string PjrtPlugin::version() const {
  return version_string(api_->pjrt_api_version.major_version, api_->pjrt_api_version.minor_version);
}

void PjrtPlugin::check(PJRT_Error* error, const char* call) const {
  if (!error) return;
  PJRT_Error_Message_Args msg{};
  msg.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  msg.error = error;
  api_->PJRT_Error_Message(&msg);
  std::string text(msg.message, msg.message_size);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api_->PJRT_Error_Destroy(&destroy);
  throw UserError("PJRT plugin " + path_ + ": " + call +
                  " failed: " + excerpt(text, kMaxPluginMessage));
}

const PjrtPlugin& load_pjrt_plugin(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<PjrtPlugin>> loaded;
  std::error_code ec;
  std::string key = std::filesystem::weakly_canonical(path, ec).string();
  if (ec) key = path;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(key); it != loaded.end()) return *it->second;

  const PJRT_Api* api = open_api(path);
  std::unique_ptr<PjrtPlugin> plugin(new PjrtPlugin(path, api));
  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  plugin->check(api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");
  return *loaded.emplace(key, std::move(plugin)).first->second;
}

}  // namespace lmt
