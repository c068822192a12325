// Every way of pointing lmtrain at a bad PJRT plugin or a bad program is one UserError that
// names the file (or the PJRT call) and the cause: a missing file, a text file, a real shared
// library without GetPjrtApi (libm), a plugin of a C API version we cannot talk to, no plugin at
// all, and MLIR the plugin refuses. Also: the plugin search order, and objects outliving their
// client.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "backend/pjrt/runtime/client.h"
#include "core/error.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;
using test::PjrtTest;
using test::ScopedEnv;
using test::user_error_of;

fs::path temp_dir(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("lmt_pjrt_test_" + name + "_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir;
}

TEST(PjrtPluginErrors, NonexistentPath) {
  std::string msg = user_error_of([] { load_pjrt_plugin("/nonexistent/lmtrain/plugin.so"); });
  EXPECT_NE(msg.find("/nonexistent/lmtrain/plugin.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST(PjrtPluginErrors, TextFileIsNotASharedLibrary) {
  fs::path file = temp_dir("text") / "plugin.so";
  std::ofstream(file) << "not a shared library\n";
  std::string msg = user_error_of([&] { load_pjrt_plugin(file.string()); });
  EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("could not be loaded as a shared library"), std::string::npos) << msg;
  fs::remove_all(file.parent_path());
}

TEST(PjrtPluginErrors, SharedLibraryWithoutGetPjrtApi) {
  void* libm = dlopen("libm.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libm) libm = dlopen("libm.so.6", RTLD_NOW);
  ASSERT_NE(libm, nullptr) << dlerror();
  link_map* map = nullptr;
  ASSERT_EQ(dlinfo(libm, RTLD_DI_LINKMAP, &map), 0) << dlerror();
  std::string path = map->l_name;  // libm's full path on this machine
  dlclose(libm);
  ASSERT_TRUE(fs::exists(path)) << path;
  std::string msg = user_error_of([&] { load_pjrt_plugin(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("has no GetPjrtApi symbol"), std::string::npos) << msg;
}

TEST(PjrtPluginErrors, VersionsWeCannotTalkTo) {
  // The header is 0.81 (PJRT_API_MINOR of the wheel's pjrt_c_api.h): older minors and another
  // major are refused.
  for (const char* version : {"0.80", "0.1", "1.81"}) {
    ScopedEnv env("LMT_FAKE_PJRT_VERSION", version);
    std::string msg = user_error_of([] { load_pjrt_plugin(LMT_FAKE_PJRT_PLUGIN); });
    EXPECT_NE(msg.find(LMT_FAKE_PJRT_PLUGIN), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("implements PJRT C API ") + version), std::string::npos) << msg;
    EXPECT_NE(msg.find("built against the header of 0."), std::string::npos) << msg;
  }
}

TEST(PjrtPluginErrors, NoPluginAnywhereSaysRunSetup) {
  fs::path venv = temp_dir("empty_venv");
  ScopedEnv v("LMTRAIN_VENV", venv.c_str());
  ScopedEnv p("LMTRAIN_PJRT_PLUGIN", nullptr);
  std::string msg = user_error_of([] { resolve_pjrt_plugin_path(); });
  EXPECT_NE(msg.find(venv.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("run scripts/setup.sh"), std::string::npos) << msg;
  fs::remove_all(venv);
}

TEST(PjrtPluginErrors, SearchOrder) {
  ScopedEnv p("LMTRAIN_PJRT_PLUGIN", "/from/env.so");
  EXPECT_EQ(resolve_pjrt_plugin_path("/explicit.so"), "/explicit.so");
  EXPECT_EQ(resolve_pjrt_plugin_path(), "/from/env.so");
}

TEST_F(PjrtTest, InvalidMlirIsOneMessageWithTheDiagnostic) {
  std::string msg = user_error_of([&] { client_->compile("module { func.func @main( garbage"); });
  EXPECT_NE(msg.find(client_->plugin().path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("PJRT_Client_Compile failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected"), std::string::npos) << msg;  // the parser's own words
}

TEST_F(PjrtTest, IllTypedProgramIsRefused) {
  const char* mlir = R"(
module {
  func.func @main(%a: tensor<3xf32>, %b: tensor<4xf32>) -> tensor<3xf32> {
    %0 = stablehlo.add %a, %b : (tensor<3xf32>, tensor<4xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
})";
  std::string msg = user_error_of([&] { client_->compile(mlir); });
  EXPECT_NE(msg.find("PJRT_Client_Compile failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stablehlo.add"), std::string::npos) << msg;
}

TEST_F(PjrtTest, HugeDiagnosticIsShortened) {
  // The diagnostic quotes the failing operation, attribute and all.
  std::string big(100000, 'x');
  std::string mlir = R"(
module {
  func.func @main(%a: tensor<3xf32>, %b: tensor<4xf32>) -> tensor<3xf32> {
    %0 = stablehlo.add %a, %b {note = ")" +
                     big + R"("} : (tensor<3xf32>, tensor<4xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
})";
  std::string msg = user_error_of([&] { client_->compile(mlir); });
  EXPECT_NE(msg.find("PJRT_Client_Compile failed"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 3000u) << msg.size();
}

TEST_F(PjrtTest, WrongArgumentsAreRefusedByThePlugin) {
  PjrtExecutable exe = client_->compile(R"(
module {
  func.func @main(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
    %0 = stablehlo.add %x, %x : tensor<4x3xf32>
    return %0 : tensor<4x3xf32>
  }
})");
  std::vector<float> data(15, 1.0f);
  PjrtBuffer wrong_size = client_->to_device(data.data(), DType::f32, {3, 5});
  PjrtBuffer* one[] = {&wrong_size};
  std::string msg = user_error_of([&] { exe.execute(one); });
  EXPECT_NE(msg.find("PJRT_LoadedExecutable_Execute"), std::string::npos) << msg;
  PjrtBuffer right = client_->to_device(data.data(), DType::f32, {4, 3});
  PjrtBuffer* two[] = {&right, &right};
  msg = user_error_of([&] { exe.execute(two); });
  EXPECT_NE(msg.find("PJRT_LoadedExecutable_Execute"), std::string::npos) << msg;
}

TEST_F(PjrtTest, BuffersAndProgramsOutliveTheirClient) {
  std::optional<PjrtExecutable> exe;
  PjrtBuffer x;
  const float one = 1.5f;
  {
    PjrtClient own(client_->plugin().path());
    exe.emplace(own.compile(R"(
module {
  func.func @main(%x: tensor<f32>) -> tensor<f32> {
    %0 = stablehlo.multiply %x, %x : tensor<f32>
    return %0 : tensor<f32>
  }
})"));
    x = own.to_device(&one, DType::f32, {});
  }
  PjrtBuffer* args[] = {&x};
  std::vector<PjrtBuffer> out = exe->execute(args);
  EXPECT_EQ(out.at(0).to_host<float>(), std::vector<float>{2.25f});
}

// A program whose output cannot be allocated (4 TiB on a machine with far less): the device's out
// of memory is one UserError naming the plugin, not a crash.
TEST_F(PjrtTest, DeviceOutOfMemoryIsOneMessage) {
  PjrtExecutable exe = client_->compile(R"(
module {
  func.func @main(%x: tensor<f32>) -> tensor<1099511627776xf32> {
    %0 = stablehlo.broadcast_in_dim %x, dims = [] : (tensor<f32>) -> tensor<1099511627776xf32>
    return %0 : tensor<1099511627776xf32>
  }
})");
  const float one = 1.0f;
  PjrtBuffer x = client_->to_device(&one, DType::f32, {});
  PjrtBuffer* args[] = {&x};
  const std::string msg = user_error_of([&] { exe.execute(args); });
  EXPECT_NE(msg.find(client_->plugin().path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("PJRT_LoadedExecutable_Execute failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("emory"), std::string::npos) << msg;  // "Out of memory allocating ..."
}

}  // namespace
}  // namespace lmt
