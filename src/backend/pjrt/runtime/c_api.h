// What the PJRT wrappers share, for src/backend/pjrt/*.cpp only: it includes pjrt_c_api.h, which
// exists only in a build with PJRT (CMake finds it in the plugin's Python wheel).
#pragma once

#include <memory>
#include <vector>

#include "backend/mesh.h"
#include "backend/pjrt/runtime/plugin.h"
#include "core/dtype.h"
#include "pjrt_c_api.h"

namespace lmt {

class DirectoryStore;

// The client every buffer and executable was made by, destroyed after the last of them.
struct PjrtSession {
  const PjrtPlugin& plugin;
  PJRT_Client* client = nullptr;
  // A deviceless session (a compile target): the plugin's topology of the target's devices in
  // place of a client, which programs are compiled for and never run on.
  PJRT_TopologyDescription* topology = nullptr;
  PJRT_Device* device = nullptr;  // first addressable device: buffers live and programs run here
  std::vector<PJRT_Device*> devices;  // every addressable device, in the plugin's order
  // The devices programs run on: this process's devices of the mesh, mesh_devices[i] at mesh
  // position mesh_positions[i] (one process: every position, in order; one device: the first).
  // A run across processes spans every process's devices; each feeds and runs its own.
  Mesh mesh;
  std::vector<PJRT_Device*> mesh_devices;
  std::vector<int64_t> mesh_positions;
  // Several processes: the store behind the client's key-value callbacks, kept until after
  // the client is destroyed (the plugin may use it as long as the client lives).
  std::shared_ptr<DirectoryStore> store;

  explicit PjrtSession(const PjrtPlugin& p) : plugin(p) {}
  PjrtSession(const PjrtSession&) = delete;
  PjrtSession& operator=(const PjrtSession&) = delete;
  ~PjrtSession();
};

// The PJRT_Executable of a loaded program (PJRT_LoadedExecutable_GetExecutable), which the
// questions about a compiled program (outputs, memory) are asked of; destroyed with this object.
class ExecutableView {
 public:
  ExecutableView(const PjrtPlugin& plugin, PJRT_LoadedExecutable* loaded);
  ExecutableView(const ExecutableView&) = delete;
  ExecutableView& operator=(const ExecutableView&) = delete;
  ~ExecutableView();
  PJRT_Executable* get() const { return executable_; }

 private:
  const PjrtPlugin& plugin_;
  PJRT_Executable* executable_ = nullptr;
};

// Waits for `event` (nullptr: nothing to wait for), destroys it, and throws the UserError of a
// failed `call`.
void await_event(const PjrtPlugin& plugin, PJRT_Event* event, const char* call);
// The device's description (PJRT_Device_GetDescription), which says its id, kind and process.
PJRT_DeviceDescription* description_of(const PjrtPlugin& plugin, PJRT_Device* device);
// Frees an error nobody can report (destructors).
void discard_error(const PjrtPlugin& plugin, PJRT_Error* error) noexcept;

PJRT_Buffer_Type to_pjrt_type(DType t);
// The DType of a buffer the plugin made; UserError for element types lmtrain does not hold.
DType from_pjrt_type(const PjrtPlugin& plugin, PJRT_Buffer_Type t);

}  // namespace lmt
