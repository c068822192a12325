// The training step as the PJRT backend hands it to XLA: every argument of the step's program is
// a named tensor of the model, its own typed array (each parameter, optimizer moment and batch
// array, and the few per-step values the host writes), not a range of a flat buffer; the gradients
// live inside the program; a second step runs the same program; and a LoRA step contains no matrix
// product that would make a frozen weight's gradient.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "backend/backend.h"
#include "backend/pjrt/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

using Dims = std::vector<int64_t>;

struct Step {
  ModelConfig cfg;
  int64_t B = 2, T = 7;
  bool lora = false;
  bool bf16 = false;
  bool packed = true;
};

// Two training steps as the trainer runs them; returns the backend's counters after them.
ProgramReport run_steps(Backend& be, Transformer& m, const Step& s, Optimizer& opt) {
  const int64_t N = s.B * s.T;
  const std::vector<int32_t> ids = test::random_ids(N, s.cfg.vocab_size, 7);
  std::vector<int32_t> starts(N), pos(N);
  for (int64_t i = 0; i < N; ++i) {  // two documents per row
    const int64_t t = i % s.T, d0 = t < 3 ? 0 : 3;
    starts[i] = static_cast<int32_t>(d0), pos[i] = static_cast<int32_t>(t - d0);
  }
  const Transformer::Packing packing{pos.data(), starts.data()};
  LossSums sums = m.make_loss_sums();
  for (int step = 0; step < 2; ++step) {
    m.zero_grads();
    sums.zero();
    m.forward_backward(ids.data(), ids.data(), s.B, s.T, 1.0 / N, sums,
                       s.packed ? &packing : nullptr);
    opt.clip_and_step(static_cast<float*>(m.trainable_data()),
                      static_cast<float*>(m.trainable_grads_data()), 1e-3, 1.0);
    m.discard_grads();
    sums.read(0);
    be.synchronize();
  }
  return be.device().programs;
}

class StepProgram : public test::PjrtTest {};

TEST_F(StepProgram, EveryArgumentIsANamedTensor) {
  for (const char* family : {"llama", "gpt2"}) {
    SCOPED_TRACE(family);
    Step s;
    s.cfg = test::tiny(family);
    auto be = make_pjrt_backend("");
    Transformer m(be.get(), s.cfg);
    m.init_weights(3);
    auto opt = make_optimizer(be.get(), m.trainable_params(), m.trainable_flat_size(),
                              OptimizerSpec{}, /*weight_decay=*/0.1);
    const ProgramReport st = run_steps(*be, m, s, *opt);
    EXPECT_EQ(st.compiled, 1) << "the second step compiled a program of its own";

    // What each argument may be: name -> (dtype, dims).
    // (A fused group, q|k|v or gate|up, is one tensor named after its first: fused_groups.)
    const std::vector<ParamInfo> tensors = update_params(be.get(), m.params());
    std::map<std::string, std::pair<DType, Dims>> known;
    for (const ParamInfo& p : tensors) {
      known[p.name] = {DType::f32, p.shape.dims()};
      known["exp_avg." + p.name] = {DType::f32, p.shape.dims()};
      known["exp_avg_sq." + p.name] = {DType::f32, p.shape.dims()};
    }
    for (const char* b : {"batch.ids", "batch.labels", "batch.positions", "batch.doc_start"})
      known[b] = {DType::i32, {s.B, s.T}};
    if (family == std::string("llama"))
      known["rope.inv_freq"] = {DType::f32, {s.cfg.head_size() / 2}};
    known["keep.one"] = {DType::f32, {}};        // Backend::keep's loop bound on XLA:CPU
    known["adamw.factors"] = {DType::f32, {3}};  // the step's decay, step size and 1/sqrt(bc2)
    known["loss.grad_scale"] = {DType::f64, {}};

    std::set<std::string> seen;
    for (const ProgramArgument& a : st.last_arguments) {
      auto it = known.find(a.name);
      ASSERT_NE(it, known.end()) << "argument '" << a.name << "' is no named tensor";
      EXPECT_EQ(a.dtype, it->second.first) << a.name;
      EXPECT_EQ(a.dims, it->second.second) << a.name;
      EXPECT_TRUE(seen.insert(a.name).second) << a.name << " passed twice";
    }
    for (const ParamInfo& p : tensors) {
      EXPECT_TRUE(seen.count(p.name)) << p.name << " is not an argument";
      EXPECT_TRUE(seen.count("exp_avg." + p.name)) << "exp_avg." << p.name;
      EXPECT_TRUE(seen.count("exp_avg_sq." + p.name)) << "exp_avg_sq." << p.name;
    }
    for (const char* x : {"batch.ids", "batch.labels", "adamw.factors", "loss.grad_scale"})
      EXPECT_TRUE(seen.count(x)) << x;
    // Every parameter and moment is donated to its own update.
    const std::string& text = st.last_text;
    std::regex alias("tf\\.aliasing_output");
    const auto n_alias = std::distance(std::sregex_iterator(text.begin(), text.end(), alias),
                                       std::sregex_iterator());
    EXPECT_GE(n_alias, static_cast<long>(3 * tensors.size()));
  }
}

// A cached program run on weights that the previous program updated in place (donated) reads
// the new values: the gradients of a model whose weights were scaled between two passes equal
// those of a fresh backend given the scaled weights. (XLA:CPU's XNNPACK dots keep a weight's
// packed form by its address and read the old one here unless lmtrain turns them off,
// CompileSettings::xnnpack: seen as wrong gradients from a training run's second step.)
TEST_F(StepProgram, CachedProgramReadsUpdatedDonatedWeights) {
  ModelConfig cfg = test::tiny("llama");
  cfg.vocab_size = 2048, cfg.hidden_size = 32, cfg.intermediate_size = 64;
  cfg.num_hidden_layers = 1, cfg.num_attention_heads = 2, cfg.num_key_value_heads = 1;
  cfg.head_dim = 16, cfg.max_position_embeddings = 256;
  const int64_t B = 4, T = 128, N = B * T;
  const std::vector<int32_t> ids = test::random_ids(N, cfg.vocab_size, seed_);
  auto grads = [&](Backend& be, Transformer& m) {
    m.zero_grads();
    LossSums sums = m.make_loss_sums();
    m.forward_backward(ids.data(), ids.data(), B, T, 1.0 / N, sums);
    std::vector<float> g(m.flat_size());
    be.to_host(g.data(), m.grads_data(), g.size() * 4);
    return g;
  };
  auto be = make_pjrt_backend("");
  Transformer m(be.get(), cfg);
  m.init_weights(seed_);
  grads(*be, m);
  for (const ParamInfo& p : m.params())  // each weight *= 1.01 in place: its array donated
    be->scale(DType::f32, static_cast<float*>(m.params_data()) + p.offset, 1.01, p.numel());
  be->synchronize();
  const std::vector<float> got = grads(*be, m);
  EXPECT_EQ(be->device().programs.compiled, 2) << "the pass ran again as compiled";

  std::vector<float> w(m.flat_size());
  be->to_host(w.data(), m.params_data(), w.size() * 4);
  auto fresh = make_pjrt_backend("");
  Transformer f(fresh.get(), cfg);
  fresh->from_host(f.params_data(), w.data(), w.size() * 4);
  const std::vector<float> want = grads(*fresh, f);
  for (const ParamInfo& p : m.params()) {
    double err = 0, ref = 0;
    for (int64_t i = p.offset; i < p.offset + p.numel(); ++i)
      err = std::max(err, double(std::fabs(got[i] - want[i]))),
      ref = std::max(ref, double(std::fabs(want[i])));
    EXPECT_LE(err, 1e-5 * ref) << p.name << " (" << seed_note() << ")";
  }
}

// Result shapes of the program's dot_general ops, as "AxB" strings, with their counts.
std::map<std::string, int> dot_result_shapes(const std::string& text) {
  std::map<std::string, int> shapes;
  const std::regex dot("stablehlo\\.dot_general[^\\n]*-> tensor<([0-9x]+)x[a-z0-9]+>");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), dot); it != std::sregex_iterator();
       ++it)
    ++shapes[(*it)[1]];
  return shapes;
}

std::string shape_key(const Dims& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

TEST_F(StepProgram, LoraComputesNoFrozenWeightGradient) {
  for (bool lora : {false, true}) {
    SCOPED_TRACE(lora ? "lora" : "full");
    Step s;
    s.cfg = test::tiny("llama");
    s.cfg.hidden_size = 24, s.cfg.intermediate_size = 40, s.cfg.vocab_size = 37;
    s.cfg.num_attention_heads = 4, s.cfg.num_key_value_heads = 2, s.cfg.head_dim = 6;
    s.B = 1, s.T = 5;  // 5 tokens: no activation has a weight's shape
    auto be = make_pjrt_backend("");
    Transformer m(be.get(), s.cfg);
    m.init_weights(3);
    if (lora) {
      LoraSpec spec;
      spec.rank = 2, spec.alpha = 4, spec.target_modules = {"all-linear"};
      m.add_lora(spec, 5);
    }
    auto opt = make_optimizer(be.get(), m.trainable_params(), m.trainable_flat_size(), {}, 0.0);
    const ProgramReport st = run_steps(*be, m, s, *opt);
    const std::map<std::string, int> dots = dot_result_shapes(st.last_text);
    // Every base matrix's shape, and those of the fused q|k|v and gate|up products.
    const int64_t C = s.cfg.hidden_size, F = s.cfg.intermediate_size;
    const int64_t QKV = (s.cfg.num_attention_heads + 2 * s.cfg.num_key_value_heads) * 6;
    std::vector<std::pair<std::string, Dims>> shapes = {{"q|k|v", {QKV, C}},
                                                        {"gate|up", {2 * F, C}}};
    for (const ParamInfo& p : m.params())
      if (p.shape.rank() == 2) shapes.emplace_back(p.name, p.shape.dims());
    int weight_grads = 0;
    std::string which;
    for (const auto& [name, dims] : shapes) {
      for (const Dims& d : {dims, Dims{dims[1], dims[0]}}) {
        auto it = dots.find(shape_key(d));
        if (it == dots.end()) continue;
        weight_grads += it->second;
        which += " " + name;
      }
    }
    if (lora)
      EXPECT_EQ(weight_grads, 0) << "products with a frozen weight's shape:" << which;
    else
      EXPECT_GT(weight_grads, 0) << "full training makes every weight's gradient";
  }
}

}  // namespace
}  // namespace lmt
