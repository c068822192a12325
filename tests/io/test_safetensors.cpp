// safetensors: round trips of every dtype and odd shapes, the exact bytes the writer produces,
// and one test per malformed-file rule checking that the message names the file and the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"

namespace lmt {
namespace {

using test::expect_user_error;

HostTensor random_tensor(DType dtype, Shape shape, std::mt19937& rng) {
  HostTensor t(dtype, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  return t;
}

TEST(Safetensors, RoundTripDtypesAndShapes) {
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, HostTensor>> tensors;
  tensors.emplace_back("u8_odd", random_tensor(DType::u8, {5}, rng));
  tensors.emplace_back("f32_2x3", random_tensor(DType::f32, {2, 3}, rng));
  tensors.emplace_back("bf16_3x1x2", random_tensor(DType::bf16, {3, 1, 2}, rng));
  tensors.emplace_back("f64_5", random_tensor(DType::f64, {5}, rng));
  tensors.emplace_back("f16_7", random_tensor(DType::f16, {7}, rng));
  tensors.emplace_back("i32_4", random_tensor(DType::i32, {4}, rng));
  tensors.emplace_back("u16_3", random_tensor(DType::u16, {3}, rng));
  tensors.emplace_back("scalar", random_tensor(DType::f32, Shape{}, rng));
  tensors.emplace_back("empty", random_tensor(DType::f32, {0, 4}, rng));
  tensors.emplace_back("model.layers.0.mlp.up_proj.weight", random_tensor(DType::f32, {3, 2}, rng));

  SafetensorsWriter w;
  for (auto& [name, t] : tensors) w.add(name, t.dtype(), t.shape(), t.data());
  w.set_metadata("format", "pt");
  w.set_metadata("step", "42");
  const std::string path = (test::temp_dir() / "round_trip.safetensors").string();
  w.write(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.size(), tensors.size());
  EXPECT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("step"), "42");
  for (auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.contains(name));
    const SafetensorsMeta& m = f.meta(name);
    EXPECT_EQ(m.dtype, t.dtype());
    EXPECT_EQ(m.file_dtype, safetensors_dtype_name(t.dtype()));
    EXPECT_EQ(m.shape, t.shape());
    HostTensor r = f.read(name);
    EXPECT_EQ(r.dtype(), t.dtype());
    EXPECT_EQ(r.shape(), t.shape());
    ASSERT_EQ(r.nbytes(), t.nbytes());
    if (t.nbytes()) {  // memcmp wants non-null pointers even for 0 bytes
      EXPECT_EQ(std::memcmp(r.data(), t.data(), t.nbytes()), 0);
      EXPECT_EQ(std::memcmp(f.raw(name), t.data(), t.nbytes()), 0);
    }
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.raw(name)) % dtype_size(t.dtype()), 0u) << "misaligned";
  }
  EXPECT_EQ(f.meta("scalar").shape.rank(), 0);
  EXPECT_EQ(f.read("scalar").numel(), 1);
  EXPECT_EQ(f.read("empty").nbytes(), 0u);
  // Data order: larger elements first, the order added within one size.
  const std::vector<std::string> names = f.names();
  EXPECT_EQ(names.front(), "f64_5");
  EXPECT_EQ(names.back(), "u8_odd");
  EXPECT_FALSE(f.contains("nope"));
}

TEST(Safetensors, CopiesOutliveTheSource) {
  SafetensorsWriter w;
  {
    std::vector<float> v = {1.5f, -2.0f};
    w.add_copy("v", DType::f32, {2}, v.data());
    std::fill(v.begin(), v.end(), 0.0f);
  }
  SafetensorsFile f = SafetensorsFile::from_bytes(w.to_bytes(), "mem");
  HostTensor t = f.read("v");
  EXPECT_EQ(t.ptr<float>()[0], 1.5f);
  EXPECT_EQ(t.ptr<float>()[1], -2.0f);
}

TEST(Safetensors, ReadAsConvertsFloatingTypes) {
  const uint16_t bf[] = {f32_to_bf16(1.5f), f32_to_bf16(-3.0f)};
  const uint16_t hf[] = {f32_to_f16(0.25f), f32_to_f16(65504.0f)};
  const float f32[] = {0.1f, 2.0f};
  const int32_t i32[] = {1, 2};
  SafetensorsWriter w;
  w.add("bf", DType::bf16, {2}, bf);
  w.add("hf", DType::f16, {2}, hf);
  w.add("f", DType::f32, {2}, f32);
  w.add("i", DType::i32, {2}, i32);
  SafetensorsFile f = SafetensorsFile::from_bytes(w.to_bytes(), "conv.safetensors");
  HostTensor a = f.read_as("bf", DType::f32);
  EXPECT_EQ(a.dtype(), DType::f32);
  EXPECT_EQ(a.ptr<float>()[0], 1.5f);
  EXPECT_EQ(a.ptr<float>()[1], -3.0f);
  HostTensor b = f.read_as("hf", DType::f64);
  EXPECT_EQ(b.ptr<double>()[0], 0.25);
  EXPECT_EQ(b.ptr<double>()[1], 65504.0);
  HostTensor c = f.read_as("f", DType::f64);
  EXPECT_EQ(c.ptr<double>()[0], static_cast<double>(0.1f));
  EXPECT_EQ(f.read_as("i", DType::i32).ptr<int32_t>()[1], 2);
  expect_user_error([&] { f.read_as("i", DType::f32); }, {"conv.safetensors", "'i'", "I32"});
}

// The exact bytes: length prefix, compact JSON padded with spaces to 8, then the data.
TEST(Safetensors, WriterBytesMatchTheFormat) {
  const float a[] = {1.0f, 2.0f};
  const uint8_t b[] = {7, 8, 9};
  SafetensorsWriter w;
  w.add("b", DType::u8, {3}, b);  // added first, laid out after the 4-byte elements
  w.add("a", DType::f32, {2}, a);
  w.set_metadata("format", "pt");
  const std::vector<uint8_t> bytes = w.to_bytes();

  std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::vector<uint8_t> expected(8);
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) expected[i] = static_cast<uint8_t>(n >> (8 * i));
  expected.insert(expected.end(), json.begin(), json.end());
  const uint8_t data[] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 7, 8, 9};  // 1.0f, 2.0f little-endian
  expected.insert(expected.end(), std::begin(data), std::end(data));
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(n % 8, 0u);
}

// A file written by hand the way other tools write them: sorted keys, no metadata, padding.
TEST(Safetensors, ReadsAHandBuiltFile) {
  std::string json = R"({"x":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]}}   )";
  std::vector<uint8_t> bytes(8);
  bytes[0] = static_cast<uint8_t>(json.size());
  bytes.insert(bytes.end(), json.begin(), json.end());
  const uint16_t v[] = {f32_to_bf16(0.5f), f32_to_bf16(-1.0f)};
  bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(v),
               reinterpret_cast<const uint8_t*>(v) + 4);
  SafetensorsFile f = SafetensorsFile::open(test::write_bytes("hand.safetensors", bytes));
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.meta("x").shape, (Shape{1, 2}));
  HostTensor t = f.read_as("x", DType::f32);
  EXPECT_EQ(t.ptr<float>()[0], 0.5f);
  EXPECT_EQ(t.ptr<float>()[1], -1.0f);
}

// ---- malformed files ----

// A file image: length prefix, the header text as given, then `data_bytes` zero bytes.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void expect_rejected(const std::string& header, size_t data_bytes,
                     std::initializer_list<std::string> parts) {
  SCOPED_TRACE(header);
  const std::string path = test::write_bytes("bad.safetensors", image(header, data_bytes));
  std::vector<std::string> all(parts);
  all.push_back(path);
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "accepted";
  } catch (const UserError& e) {
    for (const std::string& p : all)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

TEST(SafetensorsMalformed, FileAndHeaderLength) {
  const std::string shorty = test::write_bytes("short.safetensors", {1, 2, 3});
  expect_user_error([&] { SafetensorsFile::open(shorty); }, {shorty, "too short (3 bytes)"});
  const std::string empty = test::write_bytes("empty.safetensors", {});
  expect_user_error([&] { SafetensorsFile::open(empty); }, {empty, "too short (0 bytes)"});
  std::vector<uint8_t> past = image("{}", 0);
  past[0] = 100;
  const std::string p = test::write_bytes("past.safetensors", past);
  expect_user_error([&] { SafetensorsFile::open(p); }, {p, "header length 100 runs past the end"});
  std::vector<uint8_t> huge = image("{}", 0);
  huge[7] = 0x40;
  expect_user_error([&] { SafetensorsFile::from_bytes(huge, "huge.st"); },
                    {"huge.st", "absurdly large"});
  expect_user_error([&] { SafetensorsFile::open("/nonexistent/x.safetensors"); },
                    {"/nonexistent/x.safetensors", "not found"});
  expect_user_error([&] { SafetensorsFile::open(test::temp_dir().string()); },
                    {"not a regular file"});
}

TEST(SafetensorsMalformed, HeaderJson) {
  expect_rejected("{\"a\": ", 0, {"not valid JSON"});
  expect_rejected("", 0, {"not valid JSON"});
  expect_rejected("[1, 2]", 0, {"not a JSON object"});
  expect_rejected("{\"a\": 5}", 0, {"tensor 'a'", "not an object"});
  expect_rejected("{\"__metadata__\": {\"k\": 1}}", 0, {"__metadata__ 'k' is not a string"});
  expect_rejected("{\"__metadata__\": [1]}", 0, {"__metadata__ is not an object"});
}

TEST(SafetensorsMalformed, TensorEntries) {
  expect_rejected("{" + entry("w", "F12", "[2]", "[0,8]") + "}", 8,
                  {"tensor 'w'", "unknown dtype 'F12'"});
  expect_rejected(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8,
                  {"tensor 'w'", "dtype missing"});
  expect_rejected("{" + entry("w", "F32", "[-2, 1]", "[0,8]") + "}", 8,
                  {"tensor 'w'", "negative dimension (-2)"});
  expect_rejected("{" + entry("w", "F32", "[2.5]", "[0,8]") + "}", 8,
                  {"tensor 'w'", "not a list of integers"});
  expect_rejected("{" + entry("w", "F32", "5", "[0,8]") + "}", 8,
                  {"tensor 'w'", "shape missing or not a list"});
  expect_rejected("{" + entry("w", "F32", "[4294967296, 4294967296]", "[0,8]") + "}", 8,
                  {"tensor 'w'", "too large"});
  for (const char* off : {"[0]", "[0,8,9]", "[0,\"8\"]", "[0,8.5]", "[-1,8]", "{}", "null"})
    expect_rejected("{" + entry("w", "F32", "[2]", off) + "}", 8,
                    {"tensor 'w'", "data_offsets must be two non-negative integers"});
  expect_rejected("{" + entry("w", "F32", "[1]", "[8,4]") + "}", 8,
                  {"tensor 'w'", "begin 8 > end 4"});
  expect_rejected("{" + entry("w", "F32", "[4]", "[0,16]") + "}", 8,
                  {"tensor 'w'", "end 16 runs past the data buffer (8 bytes)"});
  expect_rejected("{" + entry("w", "F32", "[3]", "[0,8]") + "}", 8,
                  {"tensor 'w'", "holds 8 bytes but shape [3] of F32 needs 12"});
  expect_rejected("{" + entry("w", "F32", "[0, 9223372036854775807]", "[0,0]") + "," +
                      entry("v", "F64", "[9223372036854775807]", "[0,8]") + "}",
                  8, {"tensor 'v'", "needs over 2^64"});
}

TEST(SafetensorsMalformed, OverlapsRejectedGapsAccepted) {
  expect_rejected(
      "{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}", 12,
      {"tensors 'a' and 'b' overlap"});
  expect_rejected(
      "{" + entry("big", "U8", "[12]", "[0,12]") + "," + entry("in", "U8", "[2]", "[4,6]") + "}",
      12, {"'big' and 'in' overlap"});
  // A gap between tensors and unused bytes at the end: accepted.
  SafetensorsFile f =
      SafetensorsFile::from_bytes(image("{" + entry("a", "F32", "[1]", "[0,4]") + "," +
                                            entry("b", "F32", "[1]", "[8,12]") + "}",
                                        16),
                                  "gap.st");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  // Empty tensors may share an offset.
  SafetensorsFile g = SafetensorsFile::from_bytes(
      image("{" + entry("e1", "F32", "[0]", "[4,4]") + "," + entry("e2", "F32", "[0,3]", "[4,4]") +
                "," + entry("a", "F32", "[1]", "[0,4]") + "}",
            4),
      "empties.st");
  EXPECT_EQ(g.size(), 3u);
}

TEST(SafetensorsMalformed, AccessorErrors) {
  SafetensorsFile f = SafetensorsFile::from_bytes(
      image("{" + entry("ids", "I64", "[2]", "[0,16]") + "}", 16), "ids.safetensors");
  ASSERT_TRUE(f.contains("ids"));
  EXPECT_EQ(f.meta("ids").file_dtype, "I64");
  EXPECT_FALSE(f.meta("ids").dtype.has_value());
  EXPECT_NE(f.raw("ids"), nullptr);
  expect_user_error([&] { f.read("ids"); },
                    {"ids.safetensors", "tensor 'ids'", "I64", "cannot hold"});
  expect_user_error([&] { f.meta("nope"); }, {"ids.safetensors", "no tensor named 'nope'"});
}

TEST(SafetensorsWriter, RejectsBadNames) {
  const float v = 1.0f;
  SafetensorsWriter w;
  w.add("a", DType::f32, Shape{}, &v);
  expect_user_error([&] { w.add("a", DType::f32, Shape{}, &v); }, {"'a' added twice"});
  expect_user_error([&] { w.add("__metadata__", DType::f32, Shape{}, &v); }, {"__metadata__"});
  expect_user_error([&] { w.write("/nonexistent/dir/out.safetensors"); },
                    {"/nonexistent/dir/out.safetensors", "cannot create"});
}

}  // namespace
}  // namespace lmt
