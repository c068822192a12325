// A PJRT plugin (XLA's plugin C API: libtpu, the CUDA plugin, XLA's CPU plugin) loaded into this
// process. A plugin is loaded once per path and stays loaded until the process exits: its
// PJRT_Plugin_Initialize is one-time setup, and XLA plugins keep threads and static state that
// dlclose would pull out from under them. Everything here is declared without pjrt_c_api.h, so a
// build without PJRT compiles the same header against the stub (backend/pjrt/stub.cpp).
#pragma once

#include <string>
#include <utility>

struct PJRT_Api;
struct PJRT_Error;

namespace lmt {

// False when lmtrain was built without pjrt_c_api.h; every entry point below then throws.
bool pjrt_built();

// The plugin to load: `explicit_path` when not empty, else $LMTRAIN_PJRT_PLUGIN, else XLA's CPU
// plugin in the environment scripts/setup.sh makes (${LMTRAIN_VENV:-~/.cache/lmtrain/venv}).
// Throws UserError, saying how to get one, when none is found.
std::string resolve_pjrt_plugin_path(const std::string& explicit_path = "");

// The CUDA plugin a compile for a GPU target goes through: `explicit_path` when not empty, else
// the one the jax-cuda13-pjrt wheel installs into lmtrain's environment
// (<venv>/lib/python3*/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so). UserError,
// saying how to get it, when there is none.
std::string resolve_cuda_plugin_path(const std::string& explicit_path);
// Where the CUDA plugin at `plugin_path` finds ptxas (bin/ptxas) and libdevice (nvvm/libdevice):
// $LMTRAIN_CUDA_DATA_DIR, else the site-packages/nvidia/cu13 beside the plugin's wheel, where
// the nvidia-cuda-nvcc and nvidia-nvvm wheels put them. UserError naming what is missing.
std::string resolve_cuda_data_dir(const std::string& plugin_path);
// libtpu, which a compile for a TPU target goes through: `explicit_path` when not empty, else
// the one the libtpu wheel installs into lmtrain's environment
// (<venv>/lib/python3*/site-packages/libtpu/libtpu.so). UserError naming `target` and saying how
// to get it when there is none.
std::string resolve_tpu_plugin_path(const std::string& explicit_path, const std::string& target);

class PjrtPlugin {
 public:
  const std::string& path() const { return path_; }
  const PJRT_Api* api() const { return api_; }
  // "0.81": the C API version the plugin was built with.
  std::string version() const;

  // Turns a PJRT call's error into a UserError naming the plugin, the call and the plugin's
  // message, and frees the error. Does nothing for nullptr.
  void check(PJRT_Error* error, const char* call) const;

 private:
  friend const PjrtPlugin& load_pjrt_plugin(const std::string& path);
  PjrtPlugin(std::string path, const PJRT_Api* api) : path_(std::move(path)), api_(api) {}

  std::string path_;
  const PJRT_Api* api_;
};

// dlopen + GetPjrtApi + version check + PJRT_Plugin_Initialize, once per path. Throws UserError
// for a missing file, a file that is not a shared library, a library without GetPjrtApi, or a
// C API version this build cannot talk to.
const PjrtPlugin& load_pjrt_plugin(const std::string& path);

}  // namespace lmt
