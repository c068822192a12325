// What lmtrain reads from a PJRT plugin and what it sends to one, seen through the test plugin
// (tests/pjrt/test_plugin: XLA's CPU plugin with its platform, device kind and device memory
// chosen by the test, and its compile calls recorded): the plugin trains like the CPU plugin; the
// client reports the platform and device kind the plugin gives; device memory is nullopt on the CPU
// plugin and the given numbers on the test plugin; compiled memory counts a small program's
// arguments and outputs; the deterministic setting reaches the plugin as the field path
// compile_options.cpp writes, and XLA:CPU compiles and runs with it; a cuDNN custom call sent to a
// "cuda" plugin is recorded and refused as one UserError.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/pjrt/runtime/compile_options.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;
using test::PjrtTest;
using test::read_file;
using test::ScopedEnv;
using test::user_error_of;

constexpr const char* kRefused = "lmtrain test plugin: recorded, not compiled";

// y = a * b + a and s = sum(a), on [3,5] arrays.
constexpr const char* kTwoOutputs = R"(
module {
  func.func @main(%a: tensor<3x5xf32>, %b: tensor<3x5xf32>) -> (tensor<3x5xf32>, tensor<f32>) {
    %0 = stablehlo.multiply %a, %b : tensor<3x5xf32>
    %1 = stablehlo.add %0, %a : tensor<3x5xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %2 = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<3x5xf32>, tensor<f32>) -> tensor<f32>
    return %1, %2 : tensor<3x5xf32>, tensor<f32>
  }
})";

// One field of a protobuf message as the wire format has it: a varint, or length-delimited bytes.
struct WireField {
  int number = 0;
  int wire_type = 0;
  uint64_t varint = 0;
  std::string bytes;
};

// The fields of a message of varint and length-delimited fields (all compile options use); a
// failure, and no fields, for anything else.
std::vector<WireField> parse_message(const std::string& m) {
  std::vector<WireField> fields;
  size_t i = 0;
  auto varint = [&](uint64_t& v) {
    v = 0;
    for (int shift = 0; i < m.size() && shift < 64; shift += 7) {
      const auto byte = static_cast<unsigned char>(m[i++]);
      v |= uint64_t{byte & 0x7Fu} << shift;
      if (byte < 0x80) return true;
    }
    return false;
  };
  while (i < m.size()) {
    uint64_t key = 0;
    WireField f;
    if (!varint(key)) break;
    f.number = static_cast<int>(key >> 3), f.wire_type = static_cast<int>(key & 7);
    if (f.wire_type == 0 && varint(f.varint)) {
      fields.push_back(f);
    } else if (f.wire_type == 2 && varint(f.varint) && f.varint <= m.size() - i) {
      f.bytes = m.substr(i, f.varint);
      i += f.varint;
      fields.push_back(f);
    } else {
      ADD_FAILURE() << "not a message of varint and length-delimited fields at byte " << i;
      return {};
    }
  }
  return fields;
}

std::vector<WireField> fields_numbered(const std::vector<WireField>& fields, int number) {
  std::vector<WireField> out;
  for (const WireField& f : fields) {
    if (f.number == number) out.push_back(f);
  }
  return out;
}

// Tests on the test plugin; client_ (the fixture's) is the plugin every other PJRT test uses, which
// the test plugin wraps.
class TestPlugin : public test::TestPluginTest {
 protected:
  // A new client: the platform and device kind are read when a client is made.
  static PjrtClient test_client() { return PjrtClient(LMT_TEST_PJRT_PLUGIN); }

  // Runs kTwoOutputs on `client` with inputs a and b; returns y then s.
  static std::vector<std::vector<float>> run_two_outputs(const PjrtClient& client,
                                                         const std::vector<float>& a,
                                                         const std::vector<float>& b,
                                                         const CompileSettings& settings = {}) {
    PjrtExecutable exe = client.compile(kTwoOutputs, settings);
    PjrtBuffer da = client.to_device(a.data(), DType::f32, {3, 5});
    PjrtBuffer db = client.to_device(b.data(), DType::f32, {3, 5});
    PjrtBuffer* args[] = {&da, &db};
    std::vector<std::vector<float>> out;
    for (PjrtBuffer& o : exe.execute(args)) out.push_back(o.to_host<float>());
    return out;
  }
};

TEST_F(TestPlugin, RunsProgramsAsTheWrappedPluginDoes) {
  SCOPED_TRACE(seed_note());
  const PjrtClient plugin = test_client();
  EXPECT_EQ(plugin.platform_name(), client_->platform_name());
  EXPECT_EQ(plugin.device_kind(), client_->device_kind());
  EXPECT_EQ(plugin.device_count(), client_->device_count());
  EXPECT_EQ(plugin.plugin().version(), client_->plugin().version());

  const std::vector<float> a = uniform(15), b = uniform(15);
  const auto got = run_two_outputs(plugin, a, b);
  const auto want = run_two_outputs(*client_, a, b);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got, want);  // the same compiler on the same inputs: the same bits
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(got[0][i], double(a[i]) * b[i] + a[i], 1e-6) << i;
    sum += a[i];
  }
  EXPECT_NEAR(got[1].at(0), sum, 1e-5);

  // The wrapped plugin's own errors come through the replaced error entries intact.
  const std::string msg =
      user_error_of([&] { plugin.compile("module { func.func @main( garbage"); });
  EXPECT_NE(msg.find("PJRT_Client_Compile failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected"), std::string::npos) << msg;  // the MLIR parser's words
}

TEST_F(TestPlugin, ClientReportsThePlatformAndDeviceKindThePluginGives) {
  ScopedEnv platform("LMT_TEST_PLUGIN_PLATFORM", "cuda");
  ScopedEnv kind("LMT_TEST_PLUGIN_DEVICE_KIND", "NVIDIA H100 80GB HBM3");
  const PjrtClient plugin = test_client();
  EXPECT_EQ(plugin.platform_name(), "cuda");
  EXPECT_EQ(plugin.device_kind(), "NVIDIA H100 80GB HBM3");
}

TEST_F(TestPlugin, RecordsProgramsAndCompileOptions) {
  SCOPED_TRACE(seed_note());
  ScopedEnv record("LMT_TEST_PLUGIN_RECORD", record_dir_.c_str());
  const PjrtClient plugin = test_client();
  const std::vector<float> a = uniform(15), b = uniform(15);
  const auto plain = run_two_outputs(plugin, a, b);
  const auto deterministic = run_two_outputs(plugin, a, b, CompileSettings{.deterministic = true});
  EXPECT_EQ(plain, deterministic);  // compiled and run for real, both times

  EXPECT_EQ(read_file(record_dir_ / "program_0.mlir"), kTwoOutputs);
  EXPECT_EQ(read_file(record_dir_ / "options_0.pb"), single_device_compile_options());
  EXPECT_EQ(read_file(record_dir_ / "program_1.mlir"), kTwoOutputs);
  EXPECT_EQ(read_file(record_dir_ / "options_1.pb"),
            compile_options(CompileSettings{.deterministic = true}));
  EXPECT_FALSE(fs::exists(record_dir_ / "program_2.mlir"));
}

// The recorded bytes, read back field by field: CompileOptionsProto { executable_build_options (3)
// { device_ordinal (1) = 0, num_replicas (4) = 1, num_partitions (5) = 1 }, env_option_overrides
// (7) { key (1) = "xla_gpu_exclude_nondeterministic_ops", value (2) { bool_field (2) = true } } }.
TEST_F(TestPlugin, DeterministicSettingReachesThePluginAsADebugOptionOverride) {
  ScopedEnv record("LMT_TEST_PLUGIN_RECORD", record_dir_.c_str());
  const PjrtClient plugin = test_client();
  plugin.compile(kTwoOutputs);
  plugin.compile(kTwoOutputs, CompileSettings{.deterministic = true});

  for (int n : {0, 1}) {
    SCOPED_TRACE("options_" + std::to_string(n) + ".pb");
    const auto options =
        parse_message(read_file(record_dir_ / ("options_" + std::to_string(n) + ".pb")));
    const auto build = fields_numbered(options, 3);
    ASSERT_EQ(build.size(), 1u);
    const auto build_fields = parse_message(build[0].bytes);
    for (auto [number, value] : {std::pair{1, 0}, std::pair{4, 1}, std::pair{5, 1}}) {
      const auto f = fields_numbered(build_fields, number);
      ASSERT_EQ(f.size(), 1u) << "ExecutableBuildOptionsProto field " << number;
      EXPECT_EQ(f[0].wire_type, 0);
      EXPECT_EQ(f[0].varint, uint64_t(value)) << "ExecutableBuildOptionsProto field " << number;
    }
    EXPECT_TRUE(fields_numbered(build_fields, 3).empty()) << "no DebugOptions message";

    const auto overrides = fields_numbered(options, 7);
    if (n == 0) {
      EXPECT_TRUE(overrides.empty()) << "default settings override nothing";
      continue;
    }
    ASSERT_EQ(overrides.size(), 1u);
    const auto entry = parse_message(overrides[0].bytes);
    const auto key = fields_numbered(entry, 1), value = fields_numbered(entry, 2);
    ASSERT_EQ(key.size(), 1u);
    ASSERT_EQ(value.size(), 1u);
    EXPECT_EQ(key[0].bytes, "xla_gpu_exclude_nondeterministic_ops");
    const auto bool_field = fields_numbered(parse_message(value[0].bytes), 2);
    ASSERT_EQ(bool_field.size(), 1u);
    EXPECT_EQ(bool_field[0].wire_type, 0);
    EXPECT_EQ(bool_field[0].varint, 1u);
  }
}

// The op the setting is for: a scatter-add with repeated indices (an embedding's gradient), which
// a GPU would otherwise sum with atomics in any order. XLA:CPU compiles it with the setting on.
TEST_F(PjrtTest, DeterministicScatterAddCompilesAndRunsOnTheCpuPlugin) {
  SCOPED_TRACE(seed_note());
  const char* mlir = R"(
module {
  func.func @main(%table: tensor<5x3xf32>, %rows: tensor<7x1xi32>, %updates: tensor<7x3xf32>) -> tensor<5x3xf32> {
    %0 = "stablehlo.scatter"(%table, %rows, %updates) ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = stablehlo.add %x, %y : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false} : (tensor<5x3xf32>, tensor<7x1xi32>, tensor<7x3xf32>) -> tensor<5x3xf32>
    return %0 : tensor<5x3xf32>
  }
})";
  PjrtExecutable exe = client_->compile(mlir, CompileSettings{.deterministic = true});
  const std::vector<float> table = uniform(15), updates = uniform(21);
  std::vector<int32_t> rows(7);
  for (int32_t& r : rows) r = static_cast<int32_t>(rng_() % 3);  // rows 0..2, repeated; 3, 4 kept
  PjrtBuffer dt = client_->to_device(table.data(), DType::f32, {5, 3});
  PjrtBuffer dr = client_->to_device(rows.data(), DType::i32, {7, 1});
  PjrtBuffer du = client_->to_device(updates.data(), DType::f32, {7, 3});
  PjrtBuffer* args[] = {&dt, &dr, &du};
  const std::vector<float> got = exe.execute(args).at(0).to_host<float>();
  EXPECT_EQ(exe.execute(args).at(0).to_host<float>(), got);  // run to run: the same bits

  std::vector<double> want(table.begin(), table.end()), scale(15, 1.0);
  for (int i = 0; i < 7; ++i) {
    for (int j = 0; j < 3; ++j) want[rows[i] * 3 + j] += updates[i * 3 + j];
  }
  // At most 7 f32 additions per element, each rounding a partial sum below 8 by 2^-24 of it.
  test::expect_near_all(got, want, scale, 7 * 8 * 0x1p-24, "scatter-add");
}

TEST_F(PjrtTest, CpuPluginHasNoDeviceMemoryStatistics) {
  if (client_->platform_name() != "cpu") {
    GTEST_SKIP() << "the PJRT plugin under test is " << client_->platform_name()
                 << ", not XLA's CPU plugin";
  }
  EXPECT_FALSE(client_->device_memory().has_value());  // "GetAllocatorStats is not supported"
}

TEST_F(TestPlugin, DeviceMemoryIsWhatThePluginReports) {
  const PjrtClient plugin = test_client();
  {
    ScopedEnv memory("LMT_TEST_PLUGIN_MEMORY", "1000,85899345920,85899345921");  // past 32 bits
    const std::optional<DeviceMemory> m = plugin.device_memory();
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->bytes_in_use, 1000);
    EXPECT_EQ(m->peak_bytes_in_use, 85899345920);
    EXPECT_EQ(m->bytes_limit, 85899345921);
  }
  {
    ScopedEnv memory("LMT_TEST_PLUGIN_MEMORY", "7,,");  // only bytes_in_use is set
    const std::optional<DeviceMemory> m = plugin.device_memory();
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->bytes_in_use, 7);
    EXPECT_FALSE(m->peak_bytes_in_use.has_value());
    EXPECT_FALSE(m->bytes_limit.has_value());
  }
  {
    ScopedEnv memory("LMT_TEST_PLUGIN_MEMORY", "lots");  // the plugin answers with an error
    EXPECT_FALSE(plugin.device_memory().has_value());
  }
  if (client_->platform_name() == "cpu") {
    EXPECT_FALSE(plugin.device_memory().has_value());  // passed through to the CPU plugin
  }
}

// XLA:CPU plans every parameter and result as its own buffer, so its counts are the arrays' bytes;
// several results are returned as a tuple whose table of pointers is an output too.
TEST_F(PjrtTest, CompiledMemoryCountsArgumentsAndOutputs) {
  {
    // f32[7,13] and i32[5] in, f32[7,13] out.
    PjrtExecutable exe = client_->compile(R"(
module {
  func.func @main(%a: tensor<7x13xf32>, %n: tensor<5xi32>) -> tensor<7x13xf32> {
    %0 = stablehlo.add %a, %a : tensor<7x13xf32>
    return %0 : tensor<7x13xf32>
  }
})");
    const std::optional<CompiledMemory> m = exe.compiled_memory();
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->argument, 7 * 13 * 4 + 5 * 4);
    EXPECT_EQ(m->output, 7 * 13 * 4);
    EXPECT_EQ(m->alias, 0);
    EXPECT_GE(m->temp, 0);
    EXPECT_GE(m->peak, m->argument) << "the arguments are live when the program starts";
    EXPECT_EQ(m->host_argument + m->host_output + m->host_temp, 0) << "no host memory space";
  }
  {
    // Two results: f32[3,5] and f32[], plus a table of two pointers at most.
    PjrtExecutable exe = client_->compile(kTwoOutputs);
    const std::optional<CompiledMemory> m = exe.compiled_memory();
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->argument, 2 * 15 * 4);
    EXPECT_GE(m->output, 15 * 4 + 4);
    EXPECT_LE(m->output, 15 * 4 + 4 + 2 * 8);
  }
  {
    // The parameter given to the result: its bytes are counted as an alias.
    PjrtExecutable exe = client_->compile(R"(
module {
  func.func @main(%x: tensor<4x3xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4x3xf32> {
    %0 = stablehlo.add %x, %x : tensor<4x3xf32>
    return %0 : tensor<4x3xf32>
  }
})");
    const std::optional<CompiledMemory> m = exe.compiled_memory();
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->argument, 48);
    EXPECT_EQ(m->output, 48);
    EXPECT_EQ(m->alias, 48);
  }
}

TEST_F(TestPlugin, CudnnCustomCallForCudaIsRecordedAndRefused) {
  ScopedEnv platform("LMT_TEST_PLUGIN_PLATFORM", "cuda");
  ScopedEnv record("LMT_TEST_PLUGIN_RECORD", record_dir_.c_str());
  const PjrtClient plugin = test_client();
  ASSERT_EQ(plugin.platform_name(), "cuda");
  const std::string mlir = R"(
module {
  func.func @main(%q: tensor<1x8x2x16xbf16>, %k: tensor<1x8x2x16xbf16>, %v: tensor<1x8x2x16xbf16>) -> tensor<1x8x2x16xbf16> {
    %0:2 = stablehlo.custom_call @__cudnn$fmhaSoftmax(%q, %k, %v) {api_version = 2 : i32, backend_config = "{}"} : (tensor<1x8x2x16xbf16>, tensor<1x8x2x16xbf16>, tensor<1x8x2x16xbf16>) -> (tensor<1x2x8x16xbf16>, tensor<0xui8>)
    %1 = stablehlo.transpose %0#0, dims = [0, 2, 1, 3] : (tensor<1x2x8x16xbf16>) -> tensor<1x8x2x16xbf16>
    return %1 : tensor<1x8x2x16xbf16>
  }
})";
  const std::string msg = user_error_of([&] { plugin.compile(mlir); });
  EXPECT_NE(msg.find(LMT_TEST_PJRT_PLUGIN), std::string::npos) << msg;
  EXPECT_NE(msg.find("PJRT_Client_Compile failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find(kRefused), std::string::npos) << msg;
  EXPECT_EQ(read_file(record_dir_ / "program_0.mlir"), mlir);
  EXPECT_EQ(read_file(record_dir_ / "options_0.pb"), single_device_compile_options());

  // Any program for a platform XLA here is not: recorded and refused the same way.
  const std::string plain = user_error_of([&] { plugin.compile(kTwoOutputs); });
  EXPECT_NE(plain.find(kRefused), std::string::npos) << plain;
  EXPECT_EQ(read_file(record_dir_ / "program_1.mlir"), kTwoOutputs);
}

TEST_F(TestPlugin, CudnnCustomCallIsRefusedOnTheRealPlatformToo) {
  ScopedEnv record("LMT_TEST_PLUGIN_RECORD", record_dir_.c_str());
  const PjrtClient plugin = test_client();
  const std::string msg = user_error_of([&] {
    plugin.compile(R"(
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.custom_call @__cudnn$norm(%x) {api_version = 2 : i32} : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
})");
  });
  EXPECT_NE(msg.find(kRefused), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(record_dir_ / "program_0.mlir"));
}

// LMT_TEST_PLUGIN_RECORD_ONLY: a plain program on the real platform, which XLA would build, is
// recorded and refused all the same; without it the same program compiles.
TEST_F(TestPlugin, RecordOnlyRefusesEveryProgram) {
  ScopedEnv record("LMT_TEST_PLUGIN_RECORD", record_dir_.c_str());
  const PjrtClient plugin = test_client();
  {
    ScopedEnv only("LMT_TEST_PLUGIN_RECORD_ONLY", "1");
    const std::string msg = user_error_of([&] { plugin.compile(kTwoOutputs); });
    EXPECT_NE(msg.find(std::string(kRefused) + " (LMT_TEST_PLUGIN_RECORD_ONLY)"), std::string::npos)
        << msg;
    EXPECT_EQ(read_file(record_dir_ / "program_0.mlir"), kTwoOutputs);
  }
  EXPECT_NO_THROW(plugin.compile(kTwoOutputs));
  EXPECT_EQ(read_file(record_dir_ / "program_1.mlir"), kTwoOutputs);
}

}  // namespace
}  // namespace lmt
