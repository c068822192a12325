// The table of devices (backend/devices.h), the CPU backend's description of its device, and
// what make_backend says of the names that are not backends of their own (cuda, auto).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/devices.h"
#include "test_util.h"

namespace lmt {

TEST(DeviceTable, MatchesPjrtsDeviceKindsInTheTablesOrder) {
  struct Case {
    const char* kind;
    const char* name;  // the row's, or nullptr: not in the table
  };
  for (const Case& c :
       {Case{"NVIDIA H100 PCIe", "NVIDIA H100 PCIe"},  // before the SXM row
        Case{"NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"},
        Case{"NVIDIA A100-SXM4-40GB", "NVIDIA A100 SXM 80GB"}, Case{"TPU v5 lite", "Cloud TPU v5e"},
        Case{"TPU v5", "Cloud TPU v5p"}, Case{"TPU v6 lite", "Cloud TPU v6e"}, Case{"cpu", nullptr},
        Case{"", nullptr}, Case{"NVIDIA GeForce RTX 4090", nullptr}}) {
    SCOPED_TRACE(c.kind);
    const DeviceSpec* d = device_spec_of_kind(c.kind);
    if (!c.name) {
      EXPECT_EQ(d, nullptr);
      continue;
    }
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->name, c.name);
    EXPECT_DOUBLE_EQ(d->bf16_flops, d->bf16_tflops * 1e12);
  }
  // The A100's peaks are every A100's; its memory is the 80 GB part's.
  const DeviceSpec* a100 = device_spec_of_kind("NVIDIA A100-SXM4-80GB");
  ASSERT_NE(a100, nullptr);
  EXPECT_EQ(a100->chip, "NVIDIA A100");
  EXPECT_EQ(a100->memory, uint64_t{80} << 30);
}

TEST(DeviceTable, KeysOfInfoMeshDevice) {
  EXPECT_EQ(device_spec("TPU-v5p", "--device").name, "Cloud TPU v5p");
  EXPECT_EQ(device_spec("h200", "--device").memory, uint64_t{141} << 30);
  // A row known only by its peaks (the H100 PCIe) is no --device key.
  EXPECT_EQ(test::user_error_of([] { device_spec("h100pcie", "--device"); }),
            "--device 'h100pcie' is not a device lmtrain knows (one of h100, h200, a100, v4, "
            "v5e, v5p, v6e)");
}

TEST(BackendDevice, TheCpuBackendComputesOnTheHostAndCompilesNothing) {
  const DeviceInfo d = make_backend("cpu")->device();
  EXPECT_EQ(d.platform, "cpu");
  EXPECT_EQ(d.kind, "");
  EXPECT_EQ(d.devices, 1);
  EXPECT_EQ(d.spec, nullptr);
  EXPECT_FALSE(d.compiles);
  EXPECT_FALSE(d.peak_bytes.has_value());
  EXPECT_EQ(d.programs.compiled, 0);
}

TEST(MakeBackend, AutoIsTheCpuBackend) {
  EXPECT_EQ(make_backend("auto")->name(), "cpu");
}

TEST(MakeBackend, CudaIsRefusedSayingThatGpusTrainThroughPjrt) {
  const std::string msg = test::user_error_of([] { make_backend("cuda"); });
  EXPECT_EQ(msg.rfind("train.backend: 'cuda' is not a backend of lmtrain's own", 0), 0u) << msg;
  EXPECT_NE(msg.find("train.backend: pjrt with the CUDA PJRT plugin"), std::string::npos) << msg;
}

}  // namespace lmt
