// Creating the client of one process among several that run one program (the CUDA plugin's
// multi-process options, as JAX and PyTorch/XLA pass them): the named values node_id (this rank)
// and num_nodes (the count), and the key-value callbacks kv_get / kv_try_get / kv_put over the
// run's DirectoryStore, through which the plugins of all processes exchange what they must
// (topologies, NCCL ids). libtpu needs none of this (it finds its slice itself).
#pragma once

#include <vector>

#include "backend/pjrt/runtime/c_api.h"

namespace lmt {

// A plugin that refuses node_id and num_nodes, or ignores them (its client is not process
// `rank`, or sees no device of another process), cannot run one program across processes: one
// UserError naming it. A get that failed while the plugin waited (a lost process, a timeout) is
// reported in the store's own words, naming the rank and the key, not the plugin's.
PJRT_Client* create_multiprocess_client(const PjrtPlugin& plugin, DirectoryStore& store);

// Every device of every process of the run (PJRT_Client_Devices), ordered by process, the
// plugin's order within each: the order of the mesh that spans them (so process r's devices are
// a block of consecutive mesh positions, holding rows [r B / P, (r + 1) B / P) of a batch split
// over the mesh's major axes), as JAX lays out a multi-process mesh.
struct ProcessDevice {
  PJRT_Device* device = nullptr;
  int64_t id = 0;   // PJRT_DeviceDescription_Id: what a device assignment names
  int process = 0;  // PJRT_DeviceDescription_ProcessIndex
};
std::vector<ProcessDevice> devices_by_process(const PjrtPlugin& plugin, PJRT_Client* client);

}  // namespace lmt
