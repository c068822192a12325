// lmtrain prepare: the store holds exactly the tokenized documents, split by content hash, per
// source; it is the same for any thread count and batch size; errors leave nothing behind.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "data/prepare.h"
#include "data/token_store.h"
#include "data/tokenizer/tokenizer.h"
#include "prepare_util.h"

namespace lmt {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

std::vector<int32_t> bytes_doc(const std::string& s) {
  std::vector<int32_t> t;
  for (unsigned char c : s) t.push_back(c);
  t.push_back(256);
  return t;
}

std::vector<int32_t> read_doc(const TokenStore& st, int64_t d) {
  std::vector<int32_t> t(static_cast<size_t>(st.document_length(d)));
  st.read(d, 0, static_cast<int64_t>(t.size()), t.data());
  return t;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(Prepare, StoreHoldsEveryDocumentTokenizedInItsSplit) {
  TempDir dir("prep");
  std::vector<std::string> a = test::numbered_docs(300, 0), b = test::numbered_docs(50, 1);
  PrepareOptions opt;
  opt.sources = {test::line_source(test::write_lines(dir.path / "a.txt", a)),
                 test::line_source(test::write_lines(dir.path / "b.txt", b), 2.0)};
  opt.val_fraction = 0.2;
  opt.seq_len = 32;
  opt.out_dir = (dir.path / "store").string();
  opt.progress = false;
  opt.batch_bytes = 1000;  // many batches
  Manifest m = prepare_store(opt);
  ASSERT_EQ(m.sources.size(), 2u);
  EXPECT_EQ(m.vocab_size, 257);
  EXPECT_EQ(m.dtype, "uint16");
  EXPECT_EQ(m.tokenizer_hash, "bytes");
  EXPECT_EQ(m.sources[1].weight, 2.0);
  EXPECT_EQ(m.sources[0].packing, "continue");
  Manifest again = read_manifest(opt.out_dir);
  EXPECT_EQ(again.tokens(false), m.tokens(false));
  EXPECT_EQ(again.sources[1].validation.documents, m.sources[1].validation.documents);

  for (int s = 0; s < 2; ++s) {
    const auto& docs = s == 0 ? a : b;
    std::vector<std::vector<int32_t>> want_train, want_val;
    for (const auto& d : docs)
      (document_split_value(d) < 0.2 ? want_val : want_train).push_back(bytes_doc(d));
    EXPECT_FALSE(want_val.empty());
    for (int v = 0; v < 2; ++v) {
      const ShardInfo& info = v ? m.sources[s].validation : m.sources[s].train;
      TokenStore st((fs::path(opt.out_dir) / info.prefix).string());
      const auto& want = v ? want_val : want_train;
      ASSERT_EQ(st.num_documents(), static_cast<int64_t>(want.size()));
      EXPECT_EQ(info.documents, st.num_documents());
      EXPECT_EQ(info.tokens, st.num_tokens());
      EXPECT_FALSE(st.has_mask());
      for (int64_t d = 0; d < st.num_documents(); ++d) ASSERT_EQ(read_doc(st, d), want[d]);
    }
  }
  EXPECT_FALSE(fs::exists(dir.path / ("store.tmp-" + std::to_string(::getpid()))));
}

TEST(Prepare, SameFilesForAnyThreadCountAndBatchSize) {
  TempDir dir("prep_threads");
  std::vector<std::string> docs = test::numbered_docs(2000);
  PrepareOptions opt;
  opt.sources = {test::line_source(test::write_lines(dir.path / "a.txt", docs))};
  opt.progress = false;
  const int saved = omp_get_max_threads();
  std::vector<std::map<std::string, std::string>> outs;
  for (auto [threads, batch] : {std::pair{1, 100000}, std::pair{2, 777}, std::pair{3, 50}}) {
    omp_set_num_threads(threads);
    opt.batch_bytes = batch;
    opt.out_dir = (dir.path / ("s" + std::to_string(threads))).string();
    prepare_store(opt);
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(opt.out_dir))
      if (e.path().filename() != "manifest.json")
        files[e.path().filename().string()] = file_bytes(e.path());
    outs.push_back(files);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(outs[0].size(), 4u);  // train and validation .bin/.idx
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

TEST(Prepare, BadRecordStopsWithFileLineAndLeavesNothing) {
  TempDir dir("prep_bad");
  {
    std::ofstream f(dir.path / "d.jsonl");
    for (int i = 0; i < 5000; ++i) f << "{\"text\": \"record " << i << "\"}\n";
    f << "{\"text\": 42}\n";
  }
  PrepareOptions opt;
  TextSourceSpec s;
  s.path = (dir.path / "d.jsonl").string();
  s.format = "jsonl";
  opt.sources = {s};
  opt.out_dir = (dir.path / "store").string();
  opt.progress = false;
  opt.batch_bytes = 4096;
  try {
    prepare_store(opt);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("d.jsonl:5001:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a string"), std::string::npos) << e.what();
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path)) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"d.jsonl"});
}

TEST(Prepare, ATextPastTheTokenizersRegexLimitIsABadRecord) {
  // A Split pattern that backtracks exponentially on a long run of 'a' before a 'b'.
  TempDir dir("prep_regex");
  nlohmann::json tok = nlohmann::json::parse(
      file_bytes(std::string(LMT_TEST_DATA) + "/tokenizers/llama3_style_bpe.json"));
  tok["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(a|aa)+$"}};
  std::ofstream(dir.path / "tok.json") << tok.dump();
  {
    std::ofstream f(dir.path / "d.jsonl");
    f << "{\"instruction\": \"say\", \"output\": \"fine\"}\n";
    f << "{\"instruction\": \"say\", \"output\": \"" << std::string(200, 'a') << "b\"}\n";
    f << "{\"instruction\": \"again\", \"output\": \"fine\"}\n";
  }
  PrepareOptions opt;
  TextSourceSpec s;
  s.path = (dir.path / "d.jsonl").string();
  s.format = "jsonl";
  s.schema = "instruction";
  s.chat_template = "plain";
  opt.sources = {s};
  opt.tokenizer = (dir.path / "tok.json").string();
  opt.out_dir = (dir.path / "store").string();
  opt.progress = false;
  try {
    prepare_store(opt);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("d.jsonl:2: tokenizer " + opt.tokenizer), std::string::npos) << m;
    EXPECT_NE(m.find("limit"), std::string::npos) << m;
    EXPECT_NE(m.find("on_error: skip"), std::string::npos) << m;
  }
  opt.sources[0].on_error = "skip";
  const Manifest m = prepare_store(opt);
  EXPECT_EQ(m.sources[0].train.documents + m.sources[0].validation.documents, 2);
  EXPECT_EQ(m.sources[0].skipped_by_reason.at("tokenizer limit"), 1);
}

TEST(Prepare, ReplacesAStoreButNotOtherDirectories) {
  TempDir dir("prep_replace");
  PrepareOptions opt;
  opt.sources = {test::line_source(test::write_lines(dir.path / "a.txt", test::numbered_docs(40)))};
  opt.out_dir = (dir.path / "store").string();
  opt.progress = false;
  prepare_store(opt);
  test::write_lines(dir.path / "a.txt", test::numbered_docs(80));
  Manifest m = prepare_store(opt);
  EXPECT_EQ(m.sources[0].documents, 80);
  EXPECT_EQ(read_manifest(opt.out_dir).sources[0].documents, 80);

  fs::create_directories(dir.path / "mine");
  test::write_lines(dir.path / "mine" / "notes.txt", {"keep me"});
  opt.out_dir = (dir.path / "mine").string();
  try {
    prepare_store(opt);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a token store"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir.path / "mine" / "notes.txt"));
}

// A killed prepare's leftovers (DIR.tmp-PID and DIR.old-PID of a process that is gone) are removed
// by the next prepare, a live process's are left alone, and a store that a killed swap left only
// as DIR.old-PID is put back before the new one is built: a rerun that fails loses nothing.
TEST(Prepare, RemovesTheLeftoversOfAKilledPrepare) {
  TempDir dir("prep_leftovers");
  PrepareOptions opt;
  opt.sources = {test::line_source(test::write_lines(dir.path / "a.txt", test::numbered_docs(40)))};
  const fs::path store = dir.path / "store";
  opt.out_dir = store.string();
  opt.progress = false;
  prepare_store(opt);
  const pid_t dead = [] {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    ::waitpid(p, nullptr, 0);
    return p;
  }();
  const fs::path old_dead = store.string() + ".old-" + std::to_string(dead);
  const fs::path tmp_dead = store.string() + ".tmp-" + std::to_string(dead);
  const fs::path tmp_live = store.string() + ".tmp-" + std::to_string(::getppid());
  fs::rename(store, old_dead);  // killed between the swap's two renames
  fs::create_directories(tmp_dead);
  test::write_lines(tmp_dead / "train-00000.bin", {"half written"});
  fs::create_directories(tmp_live);

  PrepareOptions bad = opt;
  {
    std::ofstream f(dir.path / "bad.jsonl");
    f << "{\"text\": 42}\n";
  }
  TextSourceSpec s;
  s.path = (dir.path / "bad.jsonl").string();
  s.format = "jsonl";
  bad.sources = {s};
  EXPECT_THROW(prepare_store(bad), UserError);
  EXPECT_EQ(read_manifest(store.string()).sources[0].documents, 40);  // put back
  EXPECT_FALSE(fs::exists(old_dead));
  EXPECT_FALSE(fs::exists(tmp_dead));
  EXPECT_TRUE(fs::exists(tmp_live));  // another process's, still running

  test::write_lines(dir.path / "a.txt", test::numbered_docs(60));
  EXPECT_EQ(prepare_store(opt).sources[0].documents, 60);
  EXPECT_TRUE(fs::exists(tmp_live));
}

TEST(Prepare, BadOptionsNameTheirKey) {
  TempDir dir("prep_opts");
  PrepareOptions opt;
  opt.sources = {test::line_source(test::write_lines(dir.path / "a.txt", test::numbered_docs(5)))};
  opt.out_dir = (dir.path / "store").string();
  opt.progress = false;
  auto expect_error = [&](PrepareOptions o, const std::string& what) {
    try {
      prepare_store(o);
      ADD_FAILURE() << "expected an error naming " << what;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  PrepareOptions o = opt;
  o.val_fraction = 1.5;
  expect_error(o, "data.val_fraction");
  o = opt;
  o.packing = "tight";
  expect_error(o, "data.packing");
  o = opt;
  o.sources[0].weight = 0;
  expect_error(o, "data.sources[0].weight");
  o = opt;
  o.tokenizer = (dir.path / "missing.json").string();
  expect_error(o, "missing.json");
  o = opt;
  o.sources[0].path = (dir.path / "nope.txt").string();
  expect_error(o, "nope.txt");
}

TEST(Prepare, TokenizeDocumentAddsSpecialTokensUnlessTheTemplateDid) {
  std::unique_ptr<Tokenizer> tok = load_tokenizer("bytes");
  Document d;
  d.segments = {{"ab", false}, {"c", true}};
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  tokenize_document(*tok, d, /*text_schema=*/true, ids, mask);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 'b', 'c', 256}));
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 1}));
  // A chat that ends on its answer (the plain template): the end-of-sequence token is learned, so
  // that the model learns to stop; after text outside the loss it is not.
  tokenize_document(*tok, d, /*text_schema=*/false, ids, mask);
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 1}));
  d.segments.push_back({"\n", false});
  tokenize_document(*tok, d, /*text_schema=*/false, ids, mask);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 'b', 'c', '\n', 256}));
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 0, 0}));
  // A template that closed the conversation with its end-of-turn marker (chatml): nothing after
  // it, as apply_chat_template writes nothing after it.
  d.ends_turn = true;
  tokenize_document(*tok, d, /*text_schema=*/false, ids, mask);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 'b', 'c', '\n'}));
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 0}));
  d.ends_turn = false;
  d.segments.pop_back();
  d.has_special = true;
  tokenize_document(*tok, d, false, ids, mask);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 'b', 'c'}));
}

TEST(Prepare, TokenizeDocumentEncodesTheSegmentsAsOneText) {
  // A rendered chat is tokenized as Hugging Face tokenizes apply_chat_template's text: whole. Cut
  // at the loss boundary, byte-level BPE would give "\n" "\n\n" where the whole text gives
  // "\n\n" "\n" (GPT-2's \s+(?!\S)), and Llama 2's normalizer would prepend a "▁" per segment.
  const std::string dir = std::string(LMT_TEST_DATA) + "/tokenizers/";
  for (const char* name : {"bytelevel_bpe.json", "llama2_style_bpe.json"}) {
    std::unique_ptr<Tokenizer> tok = load_tokenizer(dir + name);
    Document d;
    d.segments = {{"<|sep|>assistant\n", false}, {"\n\nHello  there", true}, {"\nuser:", false}};
    d.has_special = true;
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    tokenize_document(*tok, d, false, ids, mask);
    const std::string text = d.segments[0].text + d.segments[1].text + d.segments[2].text;
    EXPECT_EQ(ids, tok->encode(text)) << name;
    ASSERT_EQ(mask.size(), ids.size()) << name;
    // The loss tokens decode to the middle segment, give or take the bytes of tokens that span
    // its ends (a token counts where its last byte is).
    std::vector<int32_t> in_loss;
    for (size_t k = 0; k < ids.size(); ++k)
      if (mask[k]) in_loss.push_back(ids[k]);
    const std::string loss_text = tok->decode(in_loss);
    EXPECT_NE(loss_text.find("Hello  there"), std::string::npos) << name << ": " << loss_text;
    EXPECT_EQ(loss_text.find("assistant"), std::string::npos) << name << ": " << loss_text;
    EXPECT_EQ(loss_text.find("user"), std::string::npos) << name << ": " << loss_text;
    EXPECT_EQ(mask.back(), 0) << name;
  }
}

}  // namespace
}  // namespace lmt
