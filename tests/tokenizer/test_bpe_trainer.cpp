// The BPE trainer: its tokenizer.json loads in BpeTokenizer, round-trips text, compresses the
// text it learned from, is deterministic, and rejects bad options with a message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/bpe_trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(BpeTrainer, TrainedTokenizerLoadsRoundTripsAndCompresses) {
  const std::string corpus = std::string(LMT_TEST_DATA) + "/tokenizers/train.txt";
  const fs::path dir = fs::temp_directory_path() / ("lmt_bpe_train_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  BpeTrainOptions opt;
  opt.vocab_size = 600;
  const int64_t merges = train_bpe_tokenizer({corpus}, opt, (dir / "a.json").string());
  EXPECT_EQ(merges, 600 - 256 - 1);
  train_bpe_tokenizer({corpus}, opt, (dir / "b.json").string());
  EXPECT_EQ(slurp(dir / "a.json"), slurp(dir / "b.json"));  // deterministic

  BpeTokenizer tok = BpeTokenizer::load((dir / "a.json").string());
  EXPECT_EQ(tok.vocab_size(), 600);
  const std::string text = slurp(corpus);
  std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(static_cast<double>(ids.size()), 0.6 * static_cast<double>(text.size()))
      << "merges learned from this text must shorten it";
  for (const char* t : {"naïve café 🙂", "x\r\n\ty  z", "<|endoftext|>"})
    EXPECT_EQ(tok.decode(tok.encode(t)), t);
  EXPECT_EQ(tok.encode("<|endoftext|>"), std::vector<int32_t>{599});
  fs::remove_all(dir);
}

TEST(BpeTrainer, BadOptionsAreUserErrors) {
  BpeTrainOptions opt;
  opt.vocab_size = 100;
  try {
    train_bpe_tokenizer({"x"}, opt, "/tmp/never.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab-size"), std::string::npos) << e.what();
  }
  opt.vocab_size = 300;
  try {
    train_bpe_tokenizer({"/nonexistent/corpus.txt"}, opt, "/tmp/never.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/corpus.txt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmt
