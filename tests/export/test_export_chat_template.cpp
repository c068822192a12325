// `lmtrain export` writes the chat template a run was trained with into tokenizer_config.json:
// the Jinja of data.sources[].chat_template from the checkpoint's config.yaml, none where the
// sources disagree or have no chat data, and a Hugging Face directory's own template carried
// over. That transformers renders the Jinja as lmtrain renders chats is
// tests/reference/test_chat_templates.py's part.
#include <gtest/gtest.h>

#include "cli/cli_util.h"
#include "data/chat_template.h"
#include "data/tokenizer/tokenizer.h"
#include "export_test_util.h"
#include "train/checkpoint.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

// A run with one checkpoint whose config.yaml holds `sources` (YAML list items).
fs::path run_with_sources(const std::string& name, const std::string& sources) {
  CpuBackend be;
  const std::string tok = std::string(LMT_TEST_DATA) + "/tokenizers/llama3_style_bpe.json";
  ModelConfig cfg = test::tiny_config("llama");
  cfg.vocab_size = load_tokenizer(tok)->vocab_size();
  Transformer m(&be, cfg);
  m.init_weights(test::random_seed());
  const fs::path run_dir = test::fresh_dir(name);
  CheckpointState s;
  s.tokenizer = tok;
  s.loader = nlohmann::json::object();
  s.step = 3;
  save_checkpoint(run_dir.string(), m, {}, s,
                  "model: {}\ndata:\n  tokenizer: " + tok + "\n  sources:\n" + sources, 0);
  return run_dir;
}

struct Exported {
  Result r;
  nlohmann::json config;  // tokenizer_config.json
};

Exported export_run(const fs::path& run_dir) {
  const fs::path out = test::fresh_dir(run_dir.filename().string() + "_out");
  Exported e{
      run("export --checkpoint " + run_dir.string() + " --out " + out.string() + " --dtype f32"),
      {}};
  if (e.r.code == 0) e.config = test::read_json(out / "tokenizer_config.json");
  return e;
}

TEST(ExportChatTemplate, TheRunsTemplateGoesIntoTokenizerConfig) {
  const std::string custom = "<s>{turn}[{Role}] 'q' \\\\ {content}</s>\\n";
  for (const std::string& setting :
       std::vector<std::string>{"chatml", "qwen2.5", "llama3", "gemma", "plain", custom}) {
    SCOPED_TRACE(setting);
    const std::string yaml_setting = "\"" + setting + "\"";
    const Exported e = export_run(
        run_with_sources("chat_template_run",
                         "    - {path: a.jsonl, format: jsonl, schema: text}\n"
                         "    - {path: b.jsonl, format: jsonl, schema: chat, chat_template: " +
                             yaml_setting + "}\n"));
    ASSERT_EQ(e.r.code, 0) << e.r.out;
    // The YAML string unescaped: \\ -> \, \n -> newline.
    const std::string unescaped =
        setting == custom ? "<s>{turn}[{Role}] 'q' \\ {content}</s>\n" : setting;
    const std::string want = ChatTemplate::from_setting(unescaped, "k").jinja();
    ASSERT_TRUE(e.config.contains("chat_template")) << e.config.dump(2);
    EXPECT_EQ(e.config["chat_template"], want);
    EXPECT_NE(e.r.out.find("data.sources[1].chat_template"), std::string::npos) << e.r.out;
  }
}

TEST(ExportChatTemplate, PlainInstructionsGetTheirOwnStyle) {
  const Exported e = export_run(run_with_sources(
      "chat_template_plain_instruction",
      "    - {path: a.jsonl, format: jsonl, schema: instruction, chat_template: plain}\n"));
  ASSERT_EQ(e.r.code, 0) << e.r.out;
  const std::string j = e.config.value("chat_template", "");
  EXPECT_EQ(j, ChatTemplate::from_setting("plain", "k").jinja(/*instruction=*/true));
  EXPECT_NE(j.find("### Instruction:\\n"), std::string::npos) << j;
  EXPECT_NE(j.find("### Response:\\n"), std::string::npos) << j;
}

TEST(ExportChatTemplate, JinjaEscapesWhatJinjaWouldRead) {
  const std::string j =
      ChatTemplate::from_setting("<s>{turn}[{Role}] 'q' \\ {content}</s>\r\n\t", "k").jinja();
  // Literals are single-quoted: the quote, the backslash and control characters escaped.
  EXPECT_NE(j.find("'[User] \\'q\\' \\\\ '"), std::string::npos) << j;
  EXPECT_NE(j.find("'</s>\\r\\n\\t'"), std::string::npos) << j;
  EXPECT_EQ(j.find('\n'), std::string::npos) << j;
  EXPECT_EQ(j.find('\r'), std::string::npos) << j;
  EXPECT_EQ(j.rfind("{{- '<s>' -}}", 0), 0u) << j;
  // Gemma refuses what it cannot render, as the Hugging Face template does.
  const std::string g = ChatTemplate::from_setting("gemma", "k").jinja();
  EXPECT_NE(g.find("raise_exception"), std::string::npos) << g;
  EXPECT_NE(g.find("| trim"), std::string::npos) << g;
  EXPECT_EQ(ChatTemplate::from_setting("chatml", "k").jinja().find("| trim"), std::string::npos);
}

TEST(ExportChatTemplate, NoneWhereTheSourcesDisagreeOrHaveNoChats) {
  Exported e = export_run(run_with_sources(
      "chat_template_differ",
      "    - {path: a.jsonl, format: jsonl, schema: chat, chat_template: llama3}\n"
      "    - {path: b.jsonl, format: jsonl, schema: instruction, chat_template: chatml}\n"));
  ASSERT_EQ(e.r.code, 0) << e.r.out;
  EXPECT_FALSE(e.config.contains("chat_template")) << e.config.dump(2);
  EXPECT_NE(e.r.out.find("data.sources[0].chat_template and data.sources[1].chat_template render "
                         "chats differently"),
            std::string::npos)
      << e.r.out;
  // plain writes instruction records in its own style, so plain chats and plain instructions
  // disagree, while chatml's chats and instructions agree.
  e = export_run(run_with_sources(
      "chat_template_plain_mixed",
      "    - {path: a.jsonl, format: jsonl, schema: chat, chat_template: plain}\n"
      "    - {path: b.jsonl, format: jsonl, schema: instruction, chat_template: plain}\n"));
  ASSERT_EQ(e.r.code, 0) << e.r.out;
  EXPECT_FALSE(e.config.contains("chat_template")) << e.config.dump(2);
  e = export_run(run_with_sources(
      "chat_template_chatml_mixed",
      "    - {path: a.jsonl, format: jsonl, schema: chat}\n"
      "    - {path: b.jsonl, format: jsonl, schema: instruction, chat_template: chatml}\n"));
  ASSERT_EQ(e.r.code, 0) << e.r.out;
  EXPECT_EQ(e.config["chat_template"], ChatTemplate::from_setting("chatml", "k").jinja());
  e = export_run(
      run_with_sources("chat_template_text", "    - {path: a.txt, format: text, schema: text}\n"));
  ASSERT_EQ(e.r.code, 0) << e.r.out;
  EXPECT_FALSE(e.config.contains("chat_template")) << e.config.dump(2);
}

TEST(ExportChatTemplate, AHuggingFaceDirectoryKeepsItsTemplate) {
  const Exported first = export_run(
      run_with_sources("chat_template_hf",
                       "    - {path: b.jsonl, format: jsonl, schema: chat, chat_template: "
                       "llama3}\n"));
  ASSERT_EQ(first.r.code, 0) << first.r.out;
  const fs::path dir = test::temp_dir() / "chat_template_hf_out";
  // Re-exporting the export (say to bf16) keeps the template it carries.
  const fs::path again = test::fresh_dir("chat_template_hf_again");
  const Result r = run("export --checkpoint " + dir.string() + " --out " + again.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(test::read_json(again / "tokenizer_config.json")["chat_template"],
            first.config["chat_template"]);
}

}  // namespace
}  // namespace lmt
