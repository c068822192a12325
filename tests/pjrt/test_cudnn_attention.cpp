// cuDNN's fused attention calls as lmtrain writes them (hlo/attention_cudnn.cpp), without a
// GPU: when the backend picks them, the backend_config JSON in JAX's own text form, and the whole
// custom-call lines of a forward and a backward against those JAX wrote for GPT-2 124M on an H100
// (tests/data/cudnn). What the kernel computes is not checked here: that needs a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/pjrt/hlo/lowering.h"
#include "cudnn_calls.h"

namespace lmt {
namespace {

using test::CudnnCall;
using test::without_names;

AttentionArgs training_args(int Hq, int Hkv, int D) {
  AttentionArgs a;
  a.batch = 2, a.q_len = 1024, a.kv_len = 1024;
  a.num_heads = Hq, a.num_kv_heads = Hkv, a.head_dim = D;
  a.scale = 1.0 / std::sqrt(double(D));
  return a;
}

// The reason given (nullptr: cuDNN's kernel), checked by its opening words.
void expect_fallback(const char* platform, DType dt, const AttentionArgs& a, const char* reason) {
  const char* why = hlo::cudnn_attention_fallback(platform, dt, a, false, 1);
  ASSERT_NE(why, nullptr) << "cuDNN's kernel chosen where XLA's lowering should be: " << reason;
  EXPECT_EQ(std::string(why).rfind(reason, 0), 0u) << why;
  EXPECT_FALSE(hlo::use_cudnn_attention(platform, dt, a, false, 1));
}

TEST(CudnnAttention, UsedOnCudaForWhatItComputes) {
  const AttentionArgs gqa = training_args(32, 8, 64);
  AttentionArgs window = gqa, wide = training_args(8, 8, 128), narrow = training_args(4, 2, 8),
                long_seq = gqa;
  window.window = 256;
  long_seq.q_len = long_seq.kv_len = 32768;
  for (const AttentionArgs& a : {gqa, window, wide, narrow, long_seq}) {
    EXPECT_EQ(hlo::cudnn_attention_fallback("cuda", DType::bf16, a, false, 1), nullptr);
    EXPECT_TRUE(hlo::use_cudnn_attention("cuda", DType::bf16, a, false, 1));
    EXPECT_TRUE(hlo::use_cudnn_attention("cuda", DType::f16, a, false, 1));
    // A mesh: XLA's partitioner cannot split the call.
    const char* mesh = hlo::cudnn_attention_fallback("cuda", DType::bf16, a, false, 4);
    ASSERT_NE(mesh, nullptr);
    EXPECT_EQ(std::string(mesh).rfind("a mesh", 0), 0u) << mesh;
  }

  // Other plugins, other dtypes, and what the kernel does not compute: XLA's lowering.
  for (const char* platform : {"cpu", "tpu", "rocm", "CUDA", ""})
    expect_fallback(platform, DType::bf16, gqa, "not XLA's CUDA plugin");
  const char* det = hlo::cudnn_attention_fallback("cuda", DType::bf16, gqa, true, 1);
  ASSERT_NE(det, nullptr) << "cuDNN's kernel chosen under train.deterministic";
  EXPECT_EQ(std::string(det).rfind("train.deterministic", 0), 0u) << det;
  EXPECT_FALSE(hlo::use_cudnn_attention("cuda", DType::bf16, gqa, true, 1));
  expect_fallback("cuda", DType::f32, gqa, "f32 / f64");
  expect_fallback("cuda", DType::f64, gqa, "f32 / f64");
  AttentionArgs capped = gqa, docs = gqa, offset = gqa;
  capped.softcap = 50;
  const int32_t starts[1] = {0};
  docs.doc_start = starts;  // only its presence is read
  offset.q_offset = 3, offset.q_len = 1;
  expect_fallback("cuda", DType::bf16, capped, "logit soft-capping");
  expect_fallback("cuda", DType::bf16, docs, "document masks");
  expect_fallback("cuda", DType::bf16, offset, "a query offset");
  for (int D : {4, 60, 136, 256})  // not a multiple of 8; past 128 (256 needs Hopper)
    expect_fallback("cuda", DType::bf16, training_args(8, 8, D), "head_dim");
}

// fmha_scale as Python's repr writes a float (json.dumps does), whatever the head size.
TEST(CudnnAttention, ConfigWritesNumbersAsJaxDoes) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0.125, "0.125"},
      {1.0 / std::sqrt(80.0), "0.11180339887498948"},
      {1.0 / std::sqrt(128.0), "0.08838834764831843"},
      {1.0 / std::sqrt(96.0), "0.10206207261596577"},
      {1e-5, "1e-05"},
      {0.0001, "0.0001"},
      {2.5e-7, "2.5e-07"},
      {123.0, "123.0"},
      {12345678.9, "12345678.9"},
      {9999999999999998.0, "9999999999999998.0"},
      {1e16, "1e+16"},
      {1.5e300, "1.5e+300"},
      {-0.5, "-0.5"}};
  for (const auto& [scale, text] : cases) {
    const std::string config = hlo::cudnn_fmha_config(1, 2, 8, DType::bf16, scale, 0, false);
    EXPECT_NE(config.find("\"fmha_scale\": " + text + ", "), std::string::npos)
        << text << " in " << config;
    EXPECT_EQ(nlohmann::json::parse(config)["cudnn_fmha_backend_config"]["fmha_scale"], scale);
  }
  const auto f16 = nlohmann::json::parse(hlo::cudnn_fmha_config(3, 4, 5, DType::f16, 0.5, 2, true));
  const auto& c = f16["cudnn_fmha_backend_config"];
  EXPECT_EQ(c["intermediate_tensor_shape"]["element_type"], "F16");
  EXPECT_EQ(c["intermediate_tensor_shape"]["dimensions"],
            nlohmann::json::array({"3", "4", "5", "5"}));
  EXPECT_EQ(c["sliding_window_length"], 2);
  EXPECT_TRUE(c.contains("bmm2_grad_gemm2_dot_dimension_numbers"));
  EXPECT_FALSE(c.contains("bmm1_dot_dimension_numbers"));
}

// A forward and a backward on GPT-2 124M's shapes (B16 T1024, 12 heads of 64) are JAX's lines,
// character for character but for SSA names: operands, backend_config, layouts, types.
TEST(CudnnAttention, CallsAreTheLinesJaxWrites) {
  const test::JaxFixture jax = test::read_jax_fixture("jax_gpt2_124m_bf16_B16_T1024_cudnn");
  ASSERT_EQ(jax.calls.size(), 2u);
  StablehloBuilder b;
  const std::vector<int64_t> shape = {16, 1024, 12, 64};
  const HloValue q = b.param(DType::bf16, shape), k = b.param(DType::bf16, shape),
                 v = b.param(DType::bf16, shape), dout = b.param(DType::bf16, shape);
  hlo::AttentionArgsHlo a;
  a.scale = 0.125;
  const hlo::AttentionOut o = hlo::cudnn_attention_forward(b, a, q, k, v);
  const hlo::AttentionGrads g = hlo::cudnn_attention_backward(b, a, dout, q, k, v, o.out, o.lse);
  EXPECT_EQ(o.out.dims, shape);
  EXPECT_EQ(o.lse.dims, (std::vector<int64_t>{16, 12, 1024}));
  EXPECT_EQ(o.lse.dtype, DType::f32);
  for (const HloValue& d : {g.dq, g.dk, g.dv}) EXPECT_EQ(d.dims, shape);
  b.ret({o.out, o.lse, g.dq, g.dk, g.dv});

  const std::vector<CudnnCall> ours = test::cudnn_calls(b.text());
  ASSERT_EQ(ours.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(jax.calls[i].target);
    EXPECT_EQ(ours[i].target, jax.calls[i].target);
    EXPECT_EQ(ours[i].config, jax.calls[i].config);
    EXPECT_EQ(without_names(ours[i].line), without_names(jax.calls[i].line));
  }
  // The backward reads the forward's statistics (its second result), as JAX's does.
  ASSERT_EQ(ours[1].operands.size(), 6u);
  EXPECT_EQ(ours[1].operands[3], ours[0].result.substr(0, ours[0].result.find(':')) + "#1");
  EXPECT_NE(jax.calls[1].operands[3].find("#1"), std::string::npos);
}

// GQA and a window: k and v keep their 8 heads, the window is sliding_window_length as it is
// (lmtrain's w keeps keys i - j < w, cuDNN's (i - w, i]); a window of T or more is no window.
TEST(CudnnAttention, GroupedQueriesAndWindows) {
  StablehloBuilder b;
  const HloValue q = b.param(DType::bf16, {2, 100, 32, 64}),
                 k = b.param(DType::bf16, {2, 100, 8, 64}),
                 v = b.param(DType::bf16, {2, 100, 8, 64});
  std::vector<HloValue> outs;
  for (int64_t w : {0, 17, 99, 100, 4096}) {
    hlo::AttentionArgsHlo a;
    a.window = w;
    const hlo::AttentionOut o = hlo::cudnn_attention_forward(b, a, q, k, v);
    outs.push_back(o.out);
    const hlo::AttentionGrads g = hlo::cudnn_attention_backward(b, a, o.out, q, k, v, o.out, o.lse);
    EXPECT_EQ(g.dk.dims, k.dims);
    EXPECT_EQ(g.dv.dims, v.dims);
    outs.push_back(g.dk);
  }
  b.ret(outs);
  const std::vector<CudnnCall> calls = test::cudnn_calls(b.text());
  ASSERT_EQ(calls.size(), 10u);
  const int64_t want[] = {0, 17, 99, 0, 0};
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto c = nlohmann::json::parse(calls[i].config)["cudnn_fmha_backend_config"];
    EXPECT_EQ(c["sliding_window_length"], want[i / 2]) << i;
    EXPECT_EQ(c["intermediate_tensor_shape"]["dimensions"],
              nlohmann::json::array({"2", "32", "100", "100"}));
  }
  EXPECT_NE(calls[0].types.find("(tensor<2x100x32x64xbf16>, tensor<2x100x8x64xbf16>, "
                                "tensor<2x100x8x64xbf16>) -> (tensor<2x32x100x64xbf16>, "
                                "tensor<2x32x100xf32>, tensor<0xui8>)"),
            std::string::npos)
      << calls[0].types;
  EXPECT_NE(calls[1].types.find("-> (tensor<2x32x100x64xbf16>, tensor<2x8x100x64xbf16>, "
                                "tensor<2x8x100x64xbf16>, tensor<0xui8>)"),
            std::string::npos)
      << calls[1].types;
}

}  // namespace
}  // namespace lmt
