// The training step lmtrain would send a CUDA plugin, against the programs JAX sent one for the
// same models (jax.nn.dot_product_attention(implementation="cudnn"); tests/data/cudnn holds
// their cuDNN calls): GPT-2 124M, a 2-layer Llama with grouped queries (32 / 8 heads), the same
// with a sliding window, and with activation checkpointing. The test plugin plays the "cuda"
// platform, records the program and refuses to compile it; the recorded step must hold as many
// forward and backward calls as JAX's, each with JAX's operand and result types, layouts and
// backend_config, each backward reading a forward's output and statistics and giving the
// gradients of q, k and v. Where cuDNN does not apply (soft-capping, f32, document masks, a head
// size it does not take, XLA's CPU plugin) no custom call appears and the backend says why. No GPU
// runs any of it here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../model/model_test_util.h"
#include "backend/pjrt/backend.h"
#include "cudnn_calls.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;
using test::CudnnCall;
using test::JaxFixture;

constexpr const char* kForward = "__cudnn$fmhaSoftmax";
constexpr const char* kBackward = "__cudnn$fmhaSoftmaxBackward";

struct StepCase {
  ModelConfig cfg;
  int64_t B = 2, T = 1024;
  DType compute = DType::bf16;
  bool checkpointing = false;
  bool packed = false;  // two documents per row (doc_start)
};

// GPT-2 124M as JAX's program has it (vocab 50304).
ModelConfig gpt2_124m() {
  ModelConfig c = family_defaults("gpt2");
  c.vocab_size = 50304, c.hidden_size = 768, c.intermediate_size = 3072;
  c.num_hidden_layers = 12, c.num_attention_heads = 12, c.max_position_embeddings = 1024;
  return c;
}

// The 2-layer Llama of JAX's GQA programs, its vocab read from their embedding's type.
ModelConfig llama_gqa(const JaxFixture& jax, const std::string& family = "llama") {
  ModelConfig c = family_defaults(family);
  c.vocab_size = test::tensor_dims(jax.embedding).at(0);
  c.hidden_size = 2048, c.intermediate_size = 8192, c.num_hidden_layers = 2;
  c.num_attention_heads = 32, c.num_key_value_heads = 8, c.head_dim = 64;
  c.max_position_embeddings = 2048, c.rope_theta = 500000, c.tie_word_embeddings = true;
  c.sliding_window = 0;
  return c;
}

// A small model whose attention cuDNN would take (bf16, head_dim 64) unless a case says otherwise.
ModelConfig small_llama() {
  ModelConfig c = family_defaults("llama");
  c.vocab_size = 256, c.hidden_size = 128, c.intermediate_size = 256, c.num_hidden_layers = 2;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 64;
  c.max_position_embeddings = 64;
  return c;
}

struct RecordedStep {
  std::string program;    // the step's StableHLO
  std::string attention;  // ProgramReport::attention: "cudnn", or "xla: " and why
};

class CudnnStep : public test::TestPluginTest {
 protected:
  // One training step as bench's time_steps runs it (zero_grads, forward_backward leaving the
  // loss on the device, AdamW, the step's end), compile-only, on the test plugin as `platform`
  // ("": XLA's CPU plugin as it is, "cpu"): the program it was asked to compile, which it
  // recorded and refused (LMT_TEST_PLUGIN_RECORD_ONLY: XLA need not build what is only read).
  RecordedStep step_program(const StepCase& s, const std::string& platform = "cuda") {
    test::ScopedEnv platform_env("LMT_TEST_PLUGIN_PLATFORM", platform.c_str());
    test::ScopedEnv record("LMT_TEST_PLUGIN_RECORD", record_dir_.c_str());
    test::ScopedEnv record_only("LMT_TEST_PLUGIN_RECORD_ONLY", "1");
    fs::remove_all(record_dir_);
    RecordedStep r;
    {
      auto be = make_pjrt_backend(LMT_TEST_PJRT_PLUGIN, PjrtOptions{.compile_only = true});
      EXPECT_EQ(be->device().platform, platform.empty() ? "cpu" : platform);
      Transformer m(be.get(), s.cfg);
      m.set_compute_dtype(s.compute);
      m.set_activation_checkpointing(s.checkpointing);
      auto opt = make_optimizer(be.get(), m.trainable_params(), m.trainable_flat_size(), {}, 0.0);
      const int64_t N = s.B * s.T;
      const std::vector<int32_t> ids = test::random_ids(N, s.cfg.vocab_size, seed_);
      std::vector<int32_t> starts(N), pos(N);
      for (int64_t i = 0; i < N; ++i) {  // two documents per row
        const int64_t t = i % s.T, d0 = t < s.T / 3 ? 0 : s.T / 3;
        starts[i] = static_cast<int32_t>(d0), pos[i] = static_cast<int32_t>(t - d0);
      }
      const Transformer::Packing packing{pos.data(), starts.data()};
      const std::string msg = test::user_error_of([&] {
        m.zero_grads();
        LossSums sums = m.make_loss_sums();
        sums.zero();
        m.forward_backward(ids.data(), ids.data(), s.B, s.T, 1.0 / double(N), sums,
                           s.packed ? &packing : nullptr);
        opt->step(static_cast<float*>(m.trainable_data()),
                  static_cast<float*>(m.trainable_grads_data()), 1e-4, 1.0);
        m.discard_grads();
        opt->finish_step();
        sums.read(0);
        be->synchronize();
      });
      EXPECT_NE(msg.find("lmtrain test plugin: recorded, not compiled"), std::string::npos) << msg;
      r.attention = be->device().programs.attention;
    }
    EXPECT_TRUE(fs::exists(record_dir_ / "program_0.mlir"));
    EXPECT_FALSE(fs::exists(record_dir_ / "program_1.mlir")) << "the step is one program";
    r.program = test::read_file(record_dir_ / "program_0.mlir");
    return r;
  }
};

std::map<std::string, int> count_targets(const std::vector<CudnnCall>& calls) {
  std::map<std::string, int> n;
  for (const CudnnCall& c : calls) ++n[c.target];
  return n;
}

// lmtrain's calls are JAX's: as many of each target, each with the types, layouts and
// backend_config of JAX's call to that target. No field of the config needs to differ for the
// same model and mask: lmtrain writes every field JAX writes, with JAX's values (the algorithm
// and tuning knobs as JAX sets them, seed 42 though no dropout reads it). The fields named in
// `differ` must differ (the caller says why); every other field, and with `differ` empty the
// text itself, is JAX's.
void expect_calls_like_jax(const std::vector<CudnnCall>& ours, const JaxFixture& jax,
                           const std::set<std::string>& differ = {}) {
  EXPECT_EQ(count_targets(ours), jax.counts);
  for (const CudnnCall& c : ours) {
    SCOPED_TRACE(c.result + " " + c.target);
    const CudnnCall* want = nullptr;
    for (const CudnnCall& j : jax.calls)
      if (j.target == c.target) want = &j;
    ASSERT_NE(want, nullptr) << "JAX's program has no call to " << c.target;
    EXPECT_EQ(c.types, want->types);
    EXPECT_EQ(c.layouts, want->layouts);
    EXPECT_EQ(c.operands.size(), want->operands.size());
    nlohmann::json got = nlohmann::json::parse(c.config), exp = nlohmann::json::parse(want->config);
    for (const std::string& key : differ) {
      EXPECT_NE(got["cudnn_fmha_backend_config"][key], exp["cudnn_fmha_backend_config"][key])
          << key;
      got["cudnn_fmha_backend_config"].erase(key), exp["cudnn_fmha_backend_config"].erase(key);
    }
    EXPECT_EQ(got, exp) << "ours: " << got.dump() << "\nJAX's: " << exp.dump();
    if (differ.empty()) EXPECT_EQ(c.config, want->config) << "the same JSON, not the same text";
  }
}

// Each value a reshape or transpose makes, with its op and operand: `%5 = stablehlo.reshape %4`
// gives "%5" -> {"reshape", "%4"}.
std::map<std::string, std::pair<std::string, std::string>> reshapes_and_transposes(
    const std::string& program) {
  std::map<std::string, std::pair<std::string, std::string>> made;
  std::istringstream in(program);
  for (std::string line; std::getline(in, line);) {
    for (const std::string op : {"reshape", "transpose"}) {
      const size_t at = line.find(" = stablehlo." + op + " %");
      if (at == std::string::npos) continue;
      const size_t name = line.find('%'), arg = line.find('%', at);
      made[line.substr(name, at - name)] = {op,
                                            line.substr(arg, line.find_first_of(" ,", arg) - arg)};
    }
  }
  return made;
}

// v with the reshapes that made it (in `made`, from reshapes_and_transposes) undone.
std::string before_reshapes(const std::map<std::string, std::pair<std::string, std::string>>& made,
                            std::string v) {
  for (auto it = made.find(v); it != made.end() && it->second.first == "reshape"; it = made.find(v))
    v = it->second.second;
  return v;
}

// Every backward call reads one forward call's statistics and output: its stats operand is that
// call's second result, its out operand the first transposed back to [B,T,H,D], each through
// reshapes only (which move no data), as in JAX's programs. Returns, per backward call, the
// forward call it reads ("%12").
std::vector<std::string> expect_backward_reads_a_forward(const std::string& program,
                                                         const std::vector<CudnnCall>& calls) {
  const auto made = reshapes_and_transposes(program);
  auto source = [&](const std::string& v) { return before_reshapes(made, v); };
  std::set<std::string> forwards;
  std::vector<std::string> read;
  for (const CudnnCall& c : calls) {
    if (c.target == kForward) forwards.insert(c.result.substr(0, c.result.find(':')));
    if (c.target != kBackward) continue;
    EXPECT_EQ(c.operands.size(), 6u) << c.line;
    if (c.operands.size() != 6) return read;
    const std::string stats = source(c.operands[3]), out = source(c.operands[5]);
    const std::string forward = stats.substr(0, stats.find('#'));
    EXPECT_TRUE(forwards.count(forward) && stats == forward + "#1")
        << c.operands[3] << " (" << stats << ") is no forward call's statistics";
    const auto t = made.find(out);
    EXPECT_TRUE(t != made.end() && t->second.first == "transpose" &&
                t->second.second == forward + "#0")
        << c.operands[5] << " (" << out << ") is not the output of " << forward;
    read.push_back(forward);
  }
  return read;
}

// Every backward call's dQ, dK and dV (its results 0, 1, 2), each transposed back to [B,T,H,D]
// and flattened by reshapes, write the model's fused dq|dk|dv rows, in that order: the gradients
// come from the call. On the "cuda" platform they are each zero-padded to their place in the rows
// (then summed: XLA's GPU compiler fuses that with the bias gradient's reduction; GpuForms checks
// the values); elsewhere a concatenation. (The builder's folding may make the same concatenation
// again in another shape, [N, QKV] beside [B, T, QKV], for the rows' readers.)
void expect_backward_gives_gradients(const std::string& program,
                                     const std::vector<CudnnCall>& calls) {
  const auto made = reshapes_and_transposes(program);
  auto source = [&](const std::string& v) { return before_reshapes(made, v); };
  std::vector<std::vector<std::string>> concatenated;  // each concatenate's operands, sources
  std::istringstream in(program);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(" = stablehlo.concatenate ");
    if (at == std::string::npos) continue;
    std::stringstream ops(line.substr(at + 25, line.find(", dim =") - at - 25));
    std::vector<std::string> sources;
    for (std::string op; std::getline(ops, op, ',');) {
      const std::string v = source(op.substr(op.find('%')));
      const auto t = made.find(v);
      sources.push_back(t != made.end() && t->second.first == "transpose" ? t->second.second : v);
    }
    concatenated.push_back(sources);
  }
  std::map<std::string, std::vector<int64_t>> padded_at;  // a pad's source -> where it starts
  in = std::istringstream(program);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(" = stablehlo.pad ");
    if (at == std::string::npos) continue;
    const std::string op = line.substr(at + 17, line.find(',', at) - at - 17);
    const std::string v = source(op);
    const auto t = made.find(v);
    const std::string from = t != made.end() && t->second.first == "transpose" ? t->second.second : v;
    const size_t low = line.find("low = [");
    const std::string lows = line.substr(low + 7, line.find(']', low) - low - 7);
    padded_at[from].push_back(std::stoll(lows.substr(lows.rfind(' ') + 1)));
  }
  auto padded_in_order = [&](const std::vector<std::string>& want) {
    int64_t last = -1;
    for (const std::string& w : want) {
      const auto it = padded_at.find(w);
      if (it == padded_at.end()) return false;
      const int64_t first = *std::min_element(it->second.begin(), it->second.end());
      if (first <= last) return false;
      last = first;
    }
    return true;
  };
  int backward = 0;
  for (const CudnnCall& c : calls) {
    if (c.target != kBackward) continue;
    ++backward;
    const std::string call = c.result.substr(0, c.result.find(':'));
    const std::vector<std::string> want = {call + "#0", call + "#1", call + "#2"};
    EXPECT_TRUE(std::count(concatenated.begin(), concatenated.end(), want) >= 1 ||
                padded_in_order(want))
        << "no concatenation of " << call << "'s dQ, dK, dV, nor the three padded in order";
  }
  EXPECT_GT(backward, 0);
}

// No [B,H,T,T] scores in the program (by their last two dimensions T x T): XLA's lowering of
// attention computed nowhere.
void expect_no_scores(const std::string& program, int64_t T) {
  const std::string scores = "x" + std::to_string(T) + "x" + std::to_string(T) + "x";
  EXPECT_EQ(program.find(scores), std::string::npos) << "a tensor<..." << scores << "...>";
}

// The checks every cuDNN step passes: calls like JAX's, each backward reading a forward and
// giving the gradients, no attention lowered by XLA besides.
void expect_cudnn_step(const RecordedStep& step, const JaxFixture& jax, int64_t T,
                       const std::set<std::string>& differ = {}) {
  const std::vector<CudnnCall> calls = test::cudnn_calls(step.program);
  EXPECT_EQ(step.attention, "cudnn");
  expect_calls_like_jax(calls, jax, differ);
  expect_backward_reads_a_forward(step.program, calls);
  expect_backward_gives_gradients(step.program, calls);
  expect_no_scores(step.program, T);
}

TEST_F(CudnnStep, Gpt2StepCallsCudnnAsJaxDoes) {
  const JaxFixture jax = test::read_jax_fixture("jax_gpt2_124m_bf16_B16_T1024_cudnn");
  StepCase s;
  s.cfg = gpt2_124m();
  s.B = test::tensor_dims(jax.tokens).at(0), s.T = test::tensor_dims(jax.tokens).at(1);
  ASSERT_EQ(s.B, 16);
  ASSERT_EQ(test::tensor_dims(jax.embedding), (std::vector<int64_t>{50304, 768}));
  const RecordedStep step = step_program(s);
  EXPECT_EQ(count_targets(test::cudnn_calls(step.program)),
            (std::map<std::string, int>{{kForward, 12}, {kBackward, 12}}));
  expect_cudnn_step(step, jax, s.T);
}

// Grouped queries: 32 query heads over 8 kv heads, k and v (and dK, dV) with their 8 heads.
TEST_F(CudnnStep, GroupedQueryStepCallsCudnnAsJaxDoes) {
  const JaxFixture jax = test::read_jax_fixture("jax_llama_gqa32x8_cudnn_T1024");
  StepCase s;
  s.cfg = llama_gqa(jax);
  s.B = test::tensor_dims(jax.tokens).at(0), s.T = test::tensor_dims(jax.tokens).at(1);
  const RecordedStep step = step_program(s);
  EXPECT_EQ(count_targets(test::cudnn_calls(step.program)),
            (std::map<std::string, int>{{kForward, 2}, {kBackward, 2}}))
      << "one forward and one backward per layer";
  expect_cudnn_step(step, jax, s.T);
}

// JAX's program asked for local_window_size (256, 0): each query sees itself and 256 earlier
// keys. cuDNN's window has an exclusive left boundary, so JAX passes sliding_window_length 257
// (jax/_src/nn/functions.py: sliding_window = l_window + 1), the keys in (i - 257, i]. lmtrain's
// window w keeps the keys with i - j < w: the same w keys, passed as sliding_window_length w.
// JAX's program is then lmtrain's window 257, which must give JAX's calls exactly; lmtrain's
// window 256 (one key fewer) must differ from them in sliding_window_length only.
TEST_F(CudnnStep, SlidingWindowStepCallsCudnnAsJaxDoes) {
  const JaxFixture jax = test::read_jax_fixture("jax_llama_gqa32x8_window256_cudnn_T1024");
  for (int64_t window : {257, 256}) {
    SCOPED_TRACE("sliding_window " + std::to_string(window));
    StepCase s;
    s.cfg = llama_gqa(jax, "mistral");
    s.cfg.sliding_window = window, s.cfg.sliding_window_pattern = 0;  // every layer
    s.B = test::tensor_dims(jax.tokens).at(0), s.T = test::tensor_dims(jax.tokens).at(1);
    const RecordedStep step = step_program(s);
    if (window == 257) {
      expect_cudnn_step(step, jax, s.T);
    } else {
      expect_cudnn_step(step, jax, s.T, {"sliding_window_length"});
      for (const CudnnCall& c : test::cudnn_calls(step.program))
        EXPECT_EQ(
            nlohmann::json::parse(c.config)["cudnn_fmha_backend_config"]["sliding_window_length"],
            256);
    }
  }
}

// jax.checkpoint per layer: JAX's program runs each layer's forward call twice (the pass and the
// recomputation XLA keeps); lmtrain recomputes each layer in the backward, so it does too, and
// each backward reads the recomputation just before it, as JAX's does.
TEST_F(CudnnStep, CheckpointedStepCallsCudnnAsJaxDoes) {
  const JaxFixture jax = test::read_jax_fixture("jax_llama_gqa32x8_remat_cudnn_T1024");
  ASSERT_EQ(jax.counts.at(kForward), 4);
  StepCase s;
  s.cfg = llama_gqa(jax);
  s.B = test::tensor_dims(jax.tokens).at(0), s.T = test::tensor_dims(jax.tokens).at(1);
  s.checkpointing = true;
  const RecordedStep step = step_program(s);
  expect_cudnn_step(step, jax, s.T);
  const std::vector<CudnnCall> calls = test::cudnn_calls(step.program);
  const std::vector<std::string> read = expect_backward_reads_a_forward(step.program, calls);
  std::vector<std::string> before;  // the call before each backward
  for (size_t i = 1; i < calls.size(); ++i)
    if (calls[i].target == kBackward && calls[i - 1].target == kForward)
      before.push_back(calls[i - 1].result.substr(0, calls[i - 1].result.find(':')));
  EXPECT_EQ(read, before);
  EXPECT_EQ(read.size(), 2u);
}

// On "cuda", what cuDNN does not compute stays with XLA's lowering, and the backend says why:
// soft-capped scores, f32 compute, document masks, a head size cuDNN does not take. The same
// small model without them calls cuDNN (so the test can see calls when they are there).
TEST_F(CudnnStep, FallsBackWhereCudnnDoesNotApply) {
  StepCase plain;
  plain.cfg = small_llama(), plain.B = 2, plain.T = 48;
  const RecordedStep with = step_program(plain);
  EXPECT_EQ(count_targets(test::cudnn_calls(with.program)),
            (std::map<std::string, int>{{kForward, 2}, {kBackward, 2}}));
  EXPECT_EQ(with.attention, "cudnn");
  expect_no_scores(with.program, plain.T);

  StepCase capped = plain, f32 = plain, packed = plain, head36 = plain;
  capped.cfg.attn_logit_softcapping = 50;
  f32.compute = DType::f32;
  packed.packed = true;
  head36.cfg.head_dim = 36;  // not a multiple of 8
  const std::vector<std::tuple<const char*, StepCase, const char*>> cases = {
      {"softcap", capped, "xla: logit soft-capping"},
      {"f32", f32, "xla: f32 / f64"},
      {"documents", packed, "xla: document masks"},
      {"head_dim 36", head36, "xla: head_dim"}};
  for (const auto& [name, s, reason] : cases) {
    SCOPED_TRACE(name);
    const RecordedStep step = step_program(s);
    EXPECT_NE(step.program.find("func.func @main"), std::string::npos);
    EXPECT_EQ(step.program.find("custom_call"), std::string::npos);
    EXPECT_EQ(step.attention.rfind(reason, 0), 0u) << step.attention;
    EXPECT_NE(step.program.find("tensor<2x2x48x48x"), std::string::npos)
        << "XLA's lowering forms the scores [B,H,T,T]";
  }
}

// XLA's CPU plugin as it is (platform "cpu"): the same steps that call cuDNN on "cuda", bf16,
// grouped queries, windows and checkpointing included, hold no custom call; XLA's lowering
// computes the attention.
TEST_F(CudnnStep, CpuPluginStepHasNoCustomCall) {
  const JaxFixture jax = test::read_jax_fixture("jax_llama_gqa32x8_cudnn_T1024");
  StepCase small, gqa, windowed, checkpointed;
  small.cfg = small_llama(), small.T = 48;
  gqa.cfg = llama_gqa(jax);
  windowed.cfg = llama_gqa(jax, "mistral");
  windowed.cfg.sliding_window = 257, windowed.cfg.sliding_window_pattern = 0;
  checkpointed.cfg = llama_gqa(jax), checkpointed.checkpointing = true;
  const std::vector<std::tuple<const char*, StepCase, const char*>> cases = {
      {"small", small, "tensor<2x2x48x48x"},
      {"gqa", gqa, "tensor<2x32x1024x1024x"},
      {"window", windowed, "tensor<2x32x1024x1024x"},
      {"checkpointed", checkpointed, "tensor<2x32x1024x1024x"}};
  for (const auto& [name, s, scores] : cases) {
    SCOPED_TRACE(name);
    const RecordedStep step = step_program(s, "");
    EXPECT_EQ(step.program.find("custom_call"), std::string::npos);
    EXPECT_EQ(step.attention.rfind("xla: not XLA's CUDA plugin", 0), 0u) << step.attention;
    EXPECT_NE(step.program.find(scores), std::string::npos) << "no attention lowered by XLA";
  }
}

}  // namespace
}  // namespace lmt
