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

// <venv>/lib/python3*/site-packages/<in_site_packages>, or "".
std::string find_in_venv(const fs::path& venv, const std::string& in_site_packages) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(venv / "lib", ec)) {
    if (entry.path().filename().string().rfind("python3", 0) != 0) continue;
    fs::path so = entry.path() / "site-packages" / in_site_packages;
    if (fs::exists(so, ec)) return so.string();
  }
  return "";
}

const char kCpuPlugin[] = "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";
const char kCudaPlugin[] = "jax_plugins/xla_cuda13/xla_cuda_plugin.so";
const char kTpuPlugin[] = "libtpu/libtpu.so";

}  // namespace

std::string resolve_pjrt_plugin_path(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  if (const char* p = std::getenv("LMTRAIN_PJRT_PLUGIN"); p && *p) return p;
  fs::path venv = default_venv();
  std::string found = find_in_venv(venv, kCpuPlugin);
  if (found.empty()) {
    throw UserError("no PJRT plugin: XLA's CPU plugin is not in " + venv.string() +
                    "/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/ (run scripts/setup.sh "
                    "to install it), and LMTRAIN_PJRT_PLUGIN names no other plugin");
  }
  return found;
}

std::string resolve_cuda_plugin_path(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  const fs::path venv = default_venv();
  std::string found = find_in_venv(venv, kCudaPlugin);
  if (found.empty())
    throw UserError("--target compiles through XLA's CUDA PJRT plugin, which is not in " +
                    venv.string() + "/lib/python3*/site-packages/" + kCudaPlugin +
                    " (scripts/setup.sh installs it: the jax-cuda13-pjrt wheel); or name it in "
                    "train.pjrt_plugin");
  return found;
}

std::string resolve_tpu_plugin_path(const std::string& explicit_path, const std::string& target) {
  if (!explicit_path.empty()) return explicit_path;
  const fs::path venv = default_venv();
  std::string found = find_in_venv(venv, kTpuPlugin);
  if (found.empty())
    throw UserError("--target " + target + " compiles through libtpu, which is not in " +
                    venv.string() + "/lib/python3*/site-packages/" + kTpuPlugin +
                    " (scripts/setup.sh installs it: the libtpu wheel); or name it in "
                    "train.pjrt_plugin");
  return found;
}

std::string resolve_cuda_data_dir(const std::string& plugin_path) {
  fs::path dir;
  if (const char* d = std::getenv("LMTRAIN_CUDA_DATA_DIR"); d && *d)
    dir = d;
  else  // <site-packages>/jax_plugins/xla_cuda13/xla_cuda_plugin.so -> <site-packages>/nvidia/cu13
    dir = fs::path(plugin_path).parent_path().parent_path().parent_path() / "nvidia" / "cu13";
  std::error_code ec;
  const fs::path ptxas = dir / "bin" / "ptxas", libdevice = dir / "nvvm" / "libdevice";
  if (!fs::exists(ptxas, ec))
    throw UserError("no ptxas at " + ptxas.string() +
                    ": the CUDA plugin runs it to compile for a GPU target (scripts/setup.sh "
                    "installs it: the nvidia-cuda-nvcc wheel), or set LMTRAIN_CUDA_DATA_DIR to a "
                    "CUDA directory holding bin/ptxas and nvvm/libdevice");
  if (!fs::exists(libdevice, ec))
    throw UserError("no libdevice at " + libdevice.string() +
                    ": the CUDA plugin links it into every kernel (scripts/setup.sh installs it: "
                    "the nvidia-nvvm wheel), or set LMTRAIN_CUDA_DATA_DIR");
  return dir.string();
}

}  // namespace lmt
