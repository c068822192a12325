// A PJRT client: one plugin's view of its devices, the thing that compiles StableHLO programs
// and moves arrays to and from the device. Programs run on the first addressable device.
// Buffers and executables keep the client alive, so they may outlive this object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/pjrt/pjrt_buffer.h"
#include "backend/pjrt/pjrt_executable.h"
#include "backend/pjrt/pjrt_plugin.h"

namespace lmt {

class PjrtClient {
 public:
  // Loads the plugin (load_pjrt_plugin) and creates a client with default options.
  explicit PjrtClient(const std::string& plugin_path);

  const PjrtPlugin& plugin() const;
  const std::string& platform_name() const { return platform_name_; }  // "cpu", "cuda", "tpu"
  size_t device_count() const { return device_count_; }                // addressable devices
  const std::string& device_kind() const { return device_kind_; }      // of the device we use

  // Compiles a StableHLO module given as MLIR text (`module { func.func @main(...) ... }`) for
  // one device. A program the plugin refuses is a UserError carrying its diagnostic.
  PjrtExecutable compile(const std::string& mlir) const;

  // Copies a dense row-major host array to the device and waits for the copy.
  PjrtBuffer to_device(const void* data, DType dtype, std::vector<int64_t> dims) const;

 private:
  std::shared_ptr<PjrtSession> session_;
  std::string platform_name_, device_kind_;
  size_t device_count_ = 0;
};

}  // namespace lmt
