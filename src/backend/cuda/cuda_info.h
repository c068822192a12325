// What the build and the machine know about CUDA. Compiled from cuda_info.cu when lmtrain is built
// with CUDA, from cuda_info_stub.cpp otherwise, so a CPU-only build links and says so.
#pragma once

#include <string>

namespace lmt {

bool cuda_built();
// Number of visible CUDA devices (0 when built without CUDA or none is present).
int cuda_device_count();
// One line: "CUDA 13.0, 1 device: NVIDIA H100 ..." or "built without CUDA".
std::string cuda_device_summary();

}  // namespace lmt
