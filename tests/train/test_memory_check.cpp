// The memory a training step needs, checked against the machine's before anything is allocated:
// the terms match what is allocated for them, and a run too big names the keys behind the largest
// term and both numbers.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/transformer.h"
#include "train/memory_check.h"
#include "train/model_builder.h"

namespace lmt {
namespace {

RunConfig small() {
  RunConfig c;
  c.model.vocab_size = 257;
  c.model.hidden_size = 16;
  c.model.intermediate_size = 24;
  c.model.num_hidden_layers = 2;
  c.model.num_attention_heads = 2;
  c.model.max_position_embeddings = 32;
  c.data.sources = {SourceConfig{}};
  c.data.sources[0].path = "x.txt";
  c.data.seq_len = 16;
  c.train.micro_batch_size = 3;
  c.train.grad_accum_steps = 5;
  c.validate();
  return c;
}

std::string refusal(const RunConfig& c, uint64_t available) {
  try {
    check_training_memory(c, available);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryCheck, TermsMatchTheModel) {
  const RunConfig c = small();
  const TrainingMemory m = training_memory(c);
  int64_t flat = 0;
  param_layout(c.model, &flat);
  EXPECT_EQ(m.weights, static_cast<uint64_t>(flat) * 4);
  EXPECT_EQ(m.gradients, m.weights);
  EXPECT_EQ(m.optimizer, 2 * m.weights);  // AdamW, the default
  EXPECT_EQ(m.activations, ActivationPlan::bytes(c.model, DType::f32, 3, 16, {false, 0, loss_chunk_rows(c, DeviceInfo{})}));
  EXPECT_EQ(m.step_tokens, 3u * 16 * 5 * 4 * sizeof(int32_t));
  EXPECT_EQ(m.total(), m.weights * 4 + m.activations + m.step_tokens);
  EXPECT_EQ(refusal(c, m.total()), "");
  EXPECT_EQ(refusal(c, 0), "");  // unknown: no check
}

// The optimizer term is optimizer_bytes of the trained parameters: Lion and SGD hold one f32 per
// parameter, Muon about AdamW's two plus Newton-Schulz's scratch.
TEST(MemoryCheck, OptimizerStateFollowsTheOptimizer) {
  RunConfig c = small();
  const uint64_t adamw = training_memory(c).optimizer;
  for (const char* name : {"lion", "sgd"}) {
    c.optimizer.name = name;
    EXPECT_EQ(training_memory(c).optimizer, adamw / 2) << name;
  }
  c.optimizer.name = "muon";
  const uint64_t muon = training_memory(c).optimizer;
  EXPECT_GT(muon, adamw);
  EXPECT_LT(muon, adamw * 11 / 10);
  EXPECT_EQ(training_memory(c).total() - muon, training_memory(small()).total() - adamw);
}

// LoRA: gradients and AdamW moments of the adapters alone, which a frozen base does not have.
TEST(MemoryCheck, LoraCountsTheAdaptersGradientsAndMomentsOnly) {
  RunConfig c = small();
  c.lora.rank = 4;
  c.lora.target_modules = {"q_proj", "down_proj"};
  c.validate();
  const TrainingMemory m = training_memory(c);
  int64_t flat = 0;
  param_layout(c.model, &flat);
  const uint64_t adapters = static_cast<uint64_t>(lora_layout(c.model, c.lora).flat_size) * 4;
  EXPECT_GT(adapters, 0u);
  EXPECT_EQ(m.weights, static_cast<uint64_t>(flat) * 4 + adapters);
  EXPECT_EQ(m.gradients, adapters);
  EXPECT_EQ(m.optimizer, 2 * adapters);
  EXPECT_LT(m.total(), training_memory(small()).total());
  c.lora.base_dtype = "bf16";  // the base as Transformer::set_base_dtype holds it
  EXPECT_EQ(training_memory(c).weights, ModelWeights::base_bytes(c.model, DType::bf16) + adapters);
}

TEST(MemoryCheck, TooBigNamesTheKeysAndBothNumbers) {
  const uint64_t gib16 = uint64_t{16} << 30;
  RunConfig a = small();
  a.train.grad_accum_steps = 1000000000;
  std::string msg = refusal(a, gib16);
  EXPECT_NE(msg.find("lower train.grad_accum_steps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs 715.3 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("this machine has 16.0 GiB"), std::string::npos) << msg;

  RunConfig b = small();
  b.train.micro_batch_size = 1000000000;
  msg = refusal(b, gib16);
  EXPECT_NE(msg.find("lower train.micro_batch_size"), std::string::npos) << msg;

  RunConfig h = small();
  h.model.hidden_size = 1 << 20;
  msg = refusal(h, gib16);
  EXPECT_NE(msg.find("lower model.hidden_size"), std::string::npos) << msg;

  // Sizes past 64 bits saturate instead of wrapping round to a small number.
  RunConfig w = small();
  w.train.grad_accum_steps = int64_t{1} << 62;
  msg = refusal(w, gib16);
  EXPECT_NE(msg.find("more than 16 EiB"), std::string::npos) << msg;
}

TEST(MemoryCheck, PhysicalMemoryIsKnown) {
  EXPECT_GT(physical_memory_bytes(), uint64_t{64} << 20);
}

}  // namespace
}  // namespace lmt
