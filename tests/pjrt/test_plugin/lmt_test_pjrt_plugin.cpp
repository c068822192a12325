// A PJRT plugin for lmtrain's tests: XLA's CPU plugin with a few answers changed. It loads the real
// plugin, copies its PJRT_Api table and replaces a handful of entries, so programs compile and run
// for real while a test chooses what the plugin says about itself and sees what lmtrain sends it.
//
//   LMT_TEST_PLUGIN_WRAP=PATH         the plugin wrapped (read once, at GetPjrtApi); default: the
//                                     CPU plugin CMake found (LMT_TEST_PLUGIN_DEFAULT_WRAP)
//   LMT_TEST_PLUGIN_PLATFORM=NAME     PJRT_Client_PlatformName answers NAME (say "cuda")
//   LMT_TEST_PLUGIN_DEVICE_KIND=KIND  PJRT_DeviceDescription_Kind answers KIND
//   LMT_TEST_PLUGIN_RECORD=DIR        PJRT_Client_Compile writes the program to DIR/program_N.mlir
//                                     and the serialized compile options to DIR/options_N.pb (N:
//                                     0, 1, ... the first free number); a program for another
//                                     platform than the real one, or one that calls a cuDNN custom
//                                     call (@__cudnn...), is then refused with "lmtrain test
//                                     plugin: recorded, not compiled": XLA here could not build it
//   LMT_TEST_PLUGIN_RECORD_ONLY=1     with RECORD, every program is refused so after recording it
//                                     (a test that only reads the program skips XLA's compile)
//   LMT_TEST_PLUGIN_MEMORY=U,P,L      PJRT_Device_MemoryStats answers bytes_in_use U, peak P and
//                                     limit L (P or L empty: reported as not set)
//
// The others are read at every call, so one loaded plugin serves tests that set them differently.
// The version reported is the real plugin's. The main choice: the real plugin's PJRT_Error cannot
// be made from outside it, so the errors made here are this file's own PJRT_Error, and the three
// error entries are replaced too, telling the two kinds apart by a registry of the ones made here.
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "pjrt_c_api.h"

// This plugin's own errors. The header leaves PJRT_Error incomplete: each plugin defines it.
struct PJRT_Error {
  PJRT_Error_Code code;
  std::string message;
};

namespace {

const PJRT_Api* real = nullptr;  // the wrapped plugin's table
PJRT_Api wrapped;                // the table handed out: real's, with the entries below replaced

std::mutex mutex;                  // guards the two sets and the record numbering
std::set<const PJRT_Error*> ours;  // errors made here and not yet destroyed
std::set<std::string> answers;     // strings handed out; they must outlive any client

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

PJRT_Error* make_error(PJRT_Error_Code code, std::string message) {
  auto* error = new PJRT_Error{code, std::move(message)};
  std::lock_guard<std::mutex> lock(mutex);
  ours.insert(error);
  return error;
}

bool is_ours(const PJRT_Error* error) {
  std::lock_guard<std::mutex> lock(mutex);
  return ours.count(error) != 0;
}

// A string that stays valid for the life of the process: the C API hands out borrowed pointers
// that live as long as the client.
const std::string& keep(const char* s) {
  std::lock_guard<std::mutex> lock(mutex);
  return *answers.insert(s).first;
}

void error_destroy(PJRT_Error_Destroy_Args* args) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (ours.erase(args->error)) {
      delete args->error;
      return;
    }
  }
  real->PJRT_Error_Destroy(args);
}

void error_message(PJRT_Error_Message_Args* args) {
  if (!is_ours(args->error)) return real->PJRT_Error_Message(args);
  args->message = args->error->message.data();
  args->message_size = args->error->message.size();
}

PJRT_Error* error_get_code(PJRT_Error_GetCode_Args* args) {
  if (!is_ours(args->error)) return real->PJRT_Error_GetCode(args);
  args->code = args->error->code;
  return nullptr;
}

PJRT_Error* client_platform_name(PJRT_Client_PlatformName_Args* args) {
  const char* name = env("LMT_TEST_PLUGIN_PLATFORM");
  if (!name) return real->PJRT_Client_PlatformName(args);
  const std::string& kept = keep(name);
  args->platform_name = kept.data();
  args->platform_name_size = kept.size();
  return nullptr;
}

PJRT_Error* device_description_kind(PJRT_DeviceDescription_Kind_Args* args) {
  const char* kind = env("LMT_TEST_PLUGIN_DEVICE_KIND");
  if (!kind) return real->PJRT_DeviceDescription_Kind(args);
  const std::string& kept = keep(kind);
  args->device_kind = kept.data();
  args->device_kind_size = kept.size();
  return nullptr;
}

// Writes program_N.mlir and options_N.pb into `dir` under the first N not taken. Returns what
// went wrong, or "".
std::string record(const std::filesystem::path& dir, std::string_view program,
                   std::string_view options) {
  std::lock_guard<std::mutex> lock(mutex);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  int n = 0;
  while (std::filesystem::exists(dir / ("program_" + std::to_string(n) + ".mlir"), ec)) ++n;
  auto write = [&](const std::string& name, std::string_view bytes) {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return static_cast<bool>(out.flush());
  };
  const std::string program_file = "program_" + std::to_string(n) + ".mlir";
  const std::string options_file = "options_" + std::to_string(n) + ".pb";
  if (!write(program_file, program)) return "cannot write " + (dir / program_file).string();
  if (!write(options_file, options)) return "cannot write " + (dir / options_file).string();
  return "";
}

// Why XLA here should not see the program ("" when it may).
std::string refusal(PJRT_Client* client, std::string_view program) {
  if (env("LMT_TEST_PLUGIN_RECORD_ONLY")) return "LMT_TEST_PLUGIN_RECORD_ONLY";
  if (const char* platform = env("LMT_TEST_PLUGIN_PLATFORM")) {
    PJRT_Client_PlatformName_Args name{};
    name.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
    name.client = client;
    if (PJRT_Error* error = real->PJRT_Client_PlatformName(&name)) {
      PJRT_Error_Destroy_Args destroy{};
      destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
      destroy.error = error;
      real->PJRT_Error_Destroy(&destroy);
      return "the real platform is unknown";
    }
    if (std::string_view(name.platform_name, name.platform_name_size) != platform) {
      return std::string("a program for platform ") + platform;
    }
  }
  if (program.find("custom_call @__cudnn") != std::string_view::npos) {
    return "the program calls a cuDNN custom call";
  }
  return "";
}

PJRT_Error* client_compile(PJRT_Client_Compile_Args* args) {
  const char* dir = env("LMT_TEST_PLUGIN_RECORD");
  if (!dir) return real->PJRT_Client_Compile(args);
  std::string_view program(args->program->code, args->program->code_size);
  std::string_view options(args->compile_options, args->compile_options_size);
  if (std::string failure = record(dir, program, options); !failure.empty()) {
    return make_error(PJRT_Error_Code_INTERNAL, "lmtrain test plugin: " + failure);
  }
  std::string why = refusal(args->client, program);
  if (why.empty()) return real->PJRT_Client_Compile(args);
  return make_error(PJRT_Error_Code_UNIMPLEMENTED,
                    "lmtrain test plugin: recorded, not compiled (" + why + ")");
}

// "123" -> 123; false for anything but digits.
bool parse_bytes(const std::string& s, int64_t& out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

PJRT_Error* device_memory_stats(PJRT_Device_MemoryStats_Args* args) {
  const char* spec = env("LMT_TEST_PLUGIN_MEMORY");
  if (!spec) return real->PJRT_Device_MemoryStats(args);
  std::string s = spec;
  size_t a = s.find(','), b = a == std::string::npos ? a : s.find(',', a + 1);
  int64_t in_use = 0, peak = 0, limit = 0;
  std::string peak_text = b == std::string::npos ? "" : s.substr(a + 1, b - a - 1);
  std::string limit_text = b == std::string::npos ? "" : s.substr(b + 1);
  if (b == std::string::npos || !parse_bytes(s.substr(0, a), in_use) ||
      (!peak_text.empty() && !parse_bytes(peak_text, peak)) ||
      (!limit_text.empty() && !parse_bytes(limit_text, limit))) {
    return make_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "lmtrain test plugin: LMT_TEST_PLUGIN_MEMORY=" + s +
                          " is not \"in_use,peak,limit\" (bytes; peak and limit may be empty)");
  }
  if (args->struct_size < PJRT_Device_MemoryStats_Args_STRUCT_SIZE) {
    return make_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "lmtrain test plugin: PJRT_Device_MemoryStats_Args is too small");
  }
  PJRT_Device_MemoryStats_Args answer{};  // every statistic not named here: not set
  answer.struct_size = args->struct_size;
  answer.extension_start = args->extension_start;
  answer.device = args->device;
  answer.bytes_in_use = in_use;
  answer.peak_bytes_in_use = peak;
  answer.peak_bytes_in_use_is_set = !peak_text.empty();
  answer.bytes_limit = limit;
  answer.bytes_limit_is_set = !limit_text.empty();
  *args = answer;
  return nullptr;
}

const PJRT_Api* make_api() {
  const char* path = env("LMT_TEST_PLUGIN_WRAP");
  if (!path) path = LMT_TEST_PLUGIN_DEFAULT_WRAP;
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::fprintf(stderr, "lmtrain test plugin: cannot load %s: %s\n", path, dlerror());
    return nullptr;
  }
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  real = get_api ? get_api() : nullptr;
  if (!real) {
    std::fprintf(stderr, "lmtrain test plugin: %s gives no PJRT API\n", path);
    return nullptr;
  }
  // A table shorter than this header's (an older plugin) keeps its size; lmtrain's version check
  // refuses such a plugin before using any entry.
  const size_t size = std::min(real->struct_size, sizeof(PJRT_Api));
  std::memcpy(&wrapped, real, size);
  wrapped.struct_size = size;
  wrapped.PJRT_Error_Destroy = error_destroy;
  wrapped.PJRT_Error_Message = error_message;
  wrapped.PJRT_Error_GetCode = error_get_code;
  wrapped.PJRT_Client_PlatformName = client_platform_name;
  wrapped.PJRT_DeviceDescription_Kind = device_description_kind;
  wrapped.PJRT_Client_Compile = client_compile;
  wrapped.PJRT_Device_MemoryStats = device_memory_stats;
  return &wrapped;
}

}  // namespace

extern "C" const PJRT_Api* GetPjrtApi() {
  static const PJRT_Api* api = make_api();
  return api;
}
