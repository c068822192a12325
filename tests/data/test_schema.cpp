// Sources through schemas: JSONL and CSV/TSV instruction and chat records become Documents with
// the right text and loss mask; every kind of bad record stops with FILE:LINE and the reason, or
// is skipped and counted; bad settings name data.sources[i].<key>; custom templates.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/schema.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

class Schema : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmt_schema_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  TextSourceSpec spec(const std::string& name, const std::string& body, const std::string& schema,
                      const std::string& format = "jsonl") {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << body;
    TextSourceSpec s;
    s.path = p.string();
    s.format = format;
    s.schema = schema;
    return s;
  }

  fs::path dir_;
};

std::vector<Document> read_all(const TextSourceSpec& s, TextSourceStats* stats = nullptr) {
  std::vector<Document> docs;
  TextSourceStats st = for_each_source_document(s, 3, [&](Document&& d) { docs.push_back(d); });
  if (stats) *stats = st;
  return docs;
}

std::string error_of(const TextSourceSpec& s) {
  try {
    read_all(s);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string text_of(const Document& d) {
  std::string s;
  for (const Segment& g : d.segments) s += g.text;
  return s;
}

std::string loss_of(const Document& d) {  // the loss-bearing text, segments joined by '|'
  std::string s;
  for (const Segment& g : d.segments)
    if (g.loss) s += (s.empty() ? "" : "|") + g.text;
  return s;
}

TEST_F(Schema, TextSchemaIsOneLossSegment) {
  TextSourceSpec s = spec("t.jsonl", "{\"text\": \"hello\"}\n{\"text\": \"world\"}\n", "text");
  TextSourceStats st;
  std::vector<Document> d = read_all(s, &st);
  ASSERT_EQ(d.size(), 2u);
  ASSERT_EQ(d[1].segments.size(), 1u);
  EXPECT_EQ(d[1].segments[0].text, "world");
  EXPECT_TRUE(d[1].segments[0].loss);
  EXPECT_FALSE(d[1].has_special);
  EXPECT_EQ(st.documents, 2);
  EXPECT_EQ(st.bytes, 10);
}

TEST_F(Schema, JsonlChatMaskCoversAssistantTurnsAndEndMarkers) {
  TextSourceSpec s = spec("c.jsonl",
                          "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": "
                          "\"user\", \"content\": \"Q1\"}, {\"role\": \"assistant\", \"content\": "
                          "\"A1\"}, {\"role\": \"user\", \"content\": \"Q2\"}, {\"role\": "
                          "\"assistant\", \"content\": \"A2\"}]}\n",
                          "chat");
  std::vector<Document> d = read_all(s);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(text_of(d[0]),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>"
            "assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n"
            "A2<|im_end|>\n");
  EXPECT_EQ(loss_of(d[0]), "A1<|im_end|>|A2<|im_end|>");
  EXPECT_FALSE(d[0].segments.back().loss);  // the newline after the last end marker
  EXPECT_EQ(d[0].segments.back().text, "\n");
  EXPECT_FALSE(d[0].has_special);
  EXPECT_TRUE(d[0].ends_turn);  // <|im_end|> ends it: prepare adds no EOS

  s.chat_template = "llama3";
  d = read_all(s);
  EXPECT_TRUE(d[0].has_special);
  EXPECT_EQ(d[0].segments[0].text.rfind("<|begin_of_text|><|start_header_id|>system", 0), 0u);
  EXPECT_EQ(loss_of(d[0]), "A1<|eot_id|>|A2<|eot_id|>");
  EXPECT_TRUE(d[0].segments.back().loss);  // llama3 writes nothing after <|eot_id|>

  s.chat_template = "gemma";
  d = read_all(s);
  EXPECT_EQ(d[0].segments[0].text,
            "<bos><start_of_turn>user\nS\n\nQ1<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(loss_of(d[0]), "A1<end_of_turn>|A2<end_of_turn>");

  s.loss = "all";
  d = read_all(s);
  ASSERT_EQ(d[0].segments.size(), 1u);
  EXPECT_TRUE(d[0].segments[0].loss);
}

TEST_F(Schema, InstructionRecordsJsonlAndCsv) {
  TextSourceSpec s = spec("i.jsonl",
                          "{\"instruction\": \"Add.\", \"input\": \"2 and 3\", \"output\": \"5\"}\n"
                          "{\"instruction\": \"Greet.\", \"output\": \"Hi\"}\n"
                          "{\"instruction\": \"Greet.\", \"input\": null, \"output\": \"Hey\"}\n"
                          "{\"instruction\": \"Greet.\", \"input\": \" \", \"output\": \"Yo\"}\n",
                          "instruction");
  std::vector<Document> d = read_all(s);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(text_of(d[0]),
            "<|im_start|>user\nAdd.\n\n2 and 3<|im_end|>\n<|im_start|>assistant\n5<|im_end|>\n");
  EXPECT_EQ(loss_of(d[0]), "5<|im_end|>");
  for (int i = 1; i < 4; ++i) EXPECT_EQ(text_of(d[i]).find("Greet.<|im_end|>"), 17u) << i;

  s.chat_template = "plain";
  d = read_all(s);
  EXPECT_EQ(text_of(d[0]), "### Instruction:\nAdd.\n\n### Input:\n2 and 3\n\n### Response:\n5");
  EXPECT_EQ(loss_of(d[0]), "5");
  EXPECT_EQ(text_of(d[1]), "### Instruction:\nGreet.\n\n### Response:\nHi");
  EXPECT_FALSE(d[1].has_special);

  // CSV with a quoted multi-line field and a comma; TSV without an input column; custom names.
  TextSourceSpec c = spec(
      "i.csv", "id,prompt,context,answer\n1,Add.,\"2, and\n3\",5\n2,Greet.,,\"Hi \"\"there\"\"\"\n",
      "instruction", "csv");
  c.instruction_field = "prompt";
  c.input_field = "context";
  c.output_field = "answer";
  d = read_all(c);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(text_of(d[0]),
            "<|im_start|>user\nAdd.\n\n2, and\n3<|im_end|>\n<|im_start|>assistant\n5<|im_end|>\n");
  EXPECT_EQ(loss_of(d[1]), "Hi \"there\"<|im_end|>");
  TextSourceSpec t = spec("i.tsv", "instruction\toutput\nSay x.\tx\n", "instruction", "tsv");
  d = read_all(t);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(loss_of(d[0]), "x<|im_end|>");
  t = spec("j.tsv", "instruction\tresponse\nSay x.\tx\n", "instruction", "tsv");
  EXPECT_NE(error_of(t).find("j.tsv:1: no column 'output' in the header (columns: instruction, "
                             "response)"),
            std::string::npos)
      << error_of(t);
}

TEST_F(Schema, CsvChatColumnHoldsJson) {
  TextSourceSpec s =
      spec("c.csv",
           "id,messages\n"
           "1,\"[{\"\"role\"\": \"\"user\"\", \"\"content\"\": \"\"hi\"\"}, {\"\"role\"\": "
           "\"\"assistant\"\", \"\"content\"\": \"\"yo\"\"}]\"\n"
           "2,not json\n",
           "chat", "csv");
  EXPECT_NE(error_of(s).find("c.csv:3: column 'messages': malformed JSON"), std::string::npos)
      << error_of(s);
  s.on_error = "skip";
  TextSourceStats st;
  std::vector<Document> d = read_all(s, &st);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(loss_of(d[0]), "yo<|im_end|>");
  EXPECT_EQ(st.skipped.by_reason["malformed JSON"], 1);
}

// Every bad record: the stop message names FILE:LINE and the reason; skip counts it by reason.
TEST_F(Schema, BadChatRecordsStopOrAreCounted) {
  const std::string good =
      "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
      "\"content\": \"a\"}]}\n";
  struct Case {
    std::string line, detail, reason;
  };
  const std::vector<Case> cases = {
      {"{\"messages\": [}", "malformed JSON", "malformed JSON"},
      {"[1]", "not a JSON object", "not a JSON object"},
      {"{\"msgs\": []}", "missing field 'messages'", "missing field 'messages'"},
      {"{\"messages\": \"hi\"}", "field 'messages' is not a list",
       "field 'messages' is not a list"},
      {"{\"messages\": []}", "messages: no messages", "no messages"},
      {"{\"messages\": [3]}", "messages[0] is not an object", "message is not an object"},
      {"{\"messages\": [{\"content\": \"x\"}]}", "messages[0]: missing 'role'",
       "message without 'role'"},
      {"{\"messages\": [{\"role\": 1, \"content\": \"x\"}]}", "messages[0]: 'role' is not a string",
       "message 'role' is not a string"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"tool\", "
       "\"content\": \"x\"}]}",
       "messages[1]: unknown role 'tool'", "unknown role"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": [\"x\"]}]}",
       "messages[0] (user): 'content' is not a string", "message 'content' is not a string"},
      {"{\"messages\": [{\"role\": \"user\"}]}", "messages[0] (user): missing 'content'",
       "message without 'content'"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
       "\"content\": \" \\n\"}]}",
       "messages[1] (assistant): empty content", "empty content"},
      {"{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
       "\"content\": \"q\"}]}",
       "messages: no assistant turn", "no assistant turn"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xc3\"}]}", "invalid UTF-8",
       "invalid UTF-8"},
  };
  std::string body;
  for (size_t i = 0; i < cases.size(); ++i) {
    TextSourceSpec s = spec("bad.jsonl", good + "\n" + cases[i].line + "\n" + good, "chat");
    const std::string e = error_of(s);
    EXPECT_NE(e.find("bad.jsonl:3: " + cases[i].detail), std::string::npos) << i << ": " << e;
    EXPECT_NE(e.find("on_error: skip"), std::string::npos) << e;
    body += cases[i].line + "\n" + good;
  }
  TextSourceSpec s = spec("all.jsonl", body, "chat");
  s.on_error = "skip";
  TextSourceStats st;
  std::vector<Document> d = read_all(s, &st);
  EXPECT_EQ(d.size(), cases.size());
  EXPECT_EQ(st.documents, static_cast<int64_t>(cases.size()));
  EXPECT_EQ(st.skipped.total, static_cast<int64_t>(cases.size()));
  for (const Case& c : cases) EXPECT_EQ(st.skipped.by_reason[c.reason], 1) << c.reason;
}

TEST_F(Schema, BadInstructionRecordsAndGemmaOrder) {
  struct Case {
    std::string line, detail;
  };
  const std::vector<Case> cases = {
      {"{\"input\": \"x\", \"output\": \"y\"}", "missing field 'instruction'"},
      {"{\"instruction\": \"x\"}", "missing field 'output'"},
      {"{\"instruction\": 1, \"output\": \"y\"}", "field 'instruction' is not a string"},
      {"{\"instruction\": \"x\", \"input\": 2, \"output\": \"y\"}",
       "field 'input' is not a string"},
      {"{\"instruction\": \"x\", \"output\": \"\"}", "field 'output' is empty"},
      {"{\"instruction\": \"  \", \"output\": \"y\"}", "field 'instruction' is empty"},
  };
  for (const Case& c : cases) {
    TextSourceSpec s = spec("i.jsonl", "\n" + c.line + "\n", "instruction");
    EXPECT_NE(error_of(s).find("i.jsonl:2: " + c.detail), std::string::npos) << error_of(s);
  }
  TextSourceSpec s = spec("bad.csv", "instruction,output\nx,\"\"\n", "instruction", "csv");
  EXPECT_NE(error_of(s).find("bad.csv:2: field 'output' is empty"), std::string::npos);
  s = spec("bad.csv", "instruction,output\nx,caf\xc3\n", "instruction", "csv");
  EXPECT_NE(error_of(s).find("bad.csv:2: column 'output': invalid UTF-8"), std::string::npos);

  // Gemma cannot express out-of-order turns or a later system message.
  s = spec("g.jsonl",
           "{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"user\", "
           "\"content\": \"q\"}]}\n"
           "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"system\", "
           "\"content\": \"s\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}\n",
           "chat");
  s.chat_template = "gemma";
  EXPECT_NE(error_of(s).find("g.jsonl:1: messages[0] (assistant): gemma needs turns alternating "
                             "user / assistant"),
            std::string::npos)
      << error_of(s);
  s.on_error = "skip";
  TextSourceStats st;
  EXPECT_TRUE(read_all(s, &st).empty());
  EXPECT_EQ(st.skipped.by_reason["roles do not alternate (gemma)"], 1);
  EXPECT_EQ(st.skipped.by_reason["system message not first (gemma)"], 1);
  s.chat_template = "chatml";  // chatml takes both
  EXPECT_EQ(read_all(s).size(), 2u);
}

TEST_F(Schema, BadSettingsNameTheKey) {
  TextSourceSpec s = spec("c.jsonl", "{}\n", "chat");
  s.schema = "dialog";
  EXPECT_NE(error_of(s).find("data.sources[3].schema: 'dialog'"), std::string::npos);
  s.schema = "chat";
  s.chat_template = "chatlm";
  EXPECT_NE(error_of(s).find("data.sources[3].chat_template: 'chatlm' is neither a built-in"),
            std::string::npos)
      << error_of(s);
  s.chat_template = "{role}: {contents}";
  EXPECT_NE(error_of(s).find("data.sources[3].chat_template: unknown placeholder {contents}"),
            std::string::npos)
      << error_of(s);
  s.chat_template = "chatml";
  s.loss = "response";
  EXPECT_NE(error_of(s).find("data.sources[3].loss: 'response' must be assistant or all"),
            std::string::npos);
  s.loss = "assistant";
  s.format = "text";
  EXPECT_NE(error_of(s).find("data.sources[3].format: 'text' cannot hold chat records"),
            std::string::npos);
  s.format = "parquet";  // the file is not Parquet: the reader says so, naming it
  EXPECT_NE(error_of(s).find("Parquet"), std::string::npos) << error_of(s);
  s.format = "jsonl";
  s.on_error = "ignore";
  EXPECT_NE(error_of(s).find("data.sources[3].on_error"), std::string::npos);
}

TEST(CustomTemplate, SyntaxAndMask) {
  const ChatTemplate t = ChatTemplate::from_setting(
      "<s>{turn}[{Role}] {{{role}}}\n{content}</{role}>\n\n", "data.sources[0].chat_template");
  EXPECT_TRUE(t.has_special());
  const ChatMessage chat[] = {{ChatRole::kUser, "hi"}, {ChatRole::kAssistant, "yo"}};
  Document d;
  ASSERT_FALSE(t.render_chat(chat, false, d).has_value());
  EXPECT_EQ(text_of(d),
            "<s>[User] {user}\nhi</user>\n\n[Assistant] {assistant}\nyo</assistant>\n\n");
  EXPECT_EQ(loss_of(d), "yo</assistant>");  // the end marker without its trailing blank line
  EXPECT_TRUE(d.has_special);

  const ChatTemplate chatml =
      ChatTemplate::from_setting("<|im_start|>{role}\n{content}<|im_end|>\n", "k");
  const ChatTemplate builtin = ChatTemplate::from_setting("chatml", "k");
  Document a, b;
  ASSERT_FALSE(chatml.render_chat(chat, false, a).has_value());
  ASSERT_FALSE(builtin.render_chat(chat, false, b).has_value());
  EXPECT_EQ(text_of(a), text_of(b));
  EXPECT_EQ(loss_of(a), loss_of(b));
  EXPECT_FALSE(chatml.has_special());

  for (const char* bad : {"{content} {content}", "{role}{turn}{content}", "{turn}{content}",
                          "{content} }", "{content {role}", "x {content} {bos}"}) {
    try {
      ChatTemplate::from_setting(bad, "data.sources[1].chat_template");
      ADD_FAILURE() << bad << " must be refused";
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("data.sources[1].chat_template: ", 0), 0u) << e.what();
    }
  }
  // A bad template of megabytes is quoted by its start, not echoed whole.
  for (const std::string& huge :
       {"{content} {content}" + std::string(5 << 20, 'x'), std::string(5 << 20, 'x') + "{"}) {
    try {
      ChatTemplate::from_setting(huge, "k");
      ADD_FAILURE() << "a bad template must be refused";
    } catch (const UserError& e) {
      EXPECT_LT(std::string(e.what()).size(), 1000u);
    }
  }
  try {
    ChatTemplate::from_setting(std::string(5 << 20, 'x'), "k");  // neither built-in nor custom
    ADD_FAILURE() << "an unknown template must be refused";
  } catch (const UserError& e) {
    EXPECT_LT(std::string(e.what()).size(), 1000u);
  }
}

TEST(PlainTemplate, ChatTurnsAreRolePrefixed) {
  const ChatTemplate t = ChatTemplate::from_setting("plain", "k");
  const ChatMessage chat[] = {{ChatRole::kSystem, "Be nice."},
                              {ChatRole::kUser, "hi"},
                              {ChatRole::kAssistant, "hello"},
                              {ChatRole::kUser, "bye"},
                              {ChatRole::kAssistant, "ciao"}};
  Document d;
  ASSERT_FALSE(t.render_chat(chat, false, d).has_value());
  EXPECT_EQ(text_of(d),
            "System: Be nice.\n\nUser: hi\n\nAssistant: hello\n\nUser: bye\n\nAssistant: ciao");
  EXPECT_EQ(loss_of(d), "hello|ciao");
  EXPECT_FALSE(d.has_special);
  EXPECT_FALSE(d.ends_turn);  // ends on the answer: prepare adds the EOS, in the loss
}

// Parquet records (written by DuckDB: scripts/make_sft_parquet_fixtures.mjs) render exactly as
// the same records from JSONL do.
TEST_F(Schema, ParquetInstructionAndChatRecords) {
  const std::string pq = std::string(LMT_TEST_DATA) + "/parquet_sft/";
  TextSourceSpec inst;
  inst.path = pq + "sft_instruction.parquet";
  inst.format = "parquet";
  inst.schema = "instruction";
  inst.chat_template = "plain";
  std::vector<Document> got = read_all(inst);
  TextSourceSpec json = spec(
      "i.jsonl",
      "{\"instruction\": \"Name a colour.\", \"output\": \"Blue.\"}\n"
      "{\"instruction\": \"Translate to French.\", \"input\": \"cheese\", \"output\": "
      "\"fromage\"}\n"
      "{\"instruction\": \"Add the numbers.\", \"input\": \"2 and 3\", \"output\": \"5\"}\n"
      "{\"instruction\": \"Say hello in Greek.\", \"input\": \"\", \"output\": \"γειά σου\"}\n",
      "instruction");
  json.chat_template = "plain";
  std::vector<Document> want = read_all(json);
  ASSERT_EQ(got.size(), 4u);
  ASSERT_EQ(want.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    ASSERT_EQ(got[k].segments.size(), want[k].segments.size()) << k;
    for (size_t j = 0; j < got[k].segments.size(); ++j) {
      EXPECT_EQ(got[k].segments[j].text, want[k].segments[j].text) << k;
      EXPECT_EQ(got[k].segments[j].loss, want[k].segments[j].loss) << k;
    }
  }

  TextSourceSpec chat;
  chat.path = pq + "sft_chat.parquet";
  chat.format = "parquet";
  chat.schema = "chat";
  const std::string msg = error_of(chat);
  EXPECT_NE(msg.find("sft_chat.parquet: row 3: messages[1]: unknown role 'robot'"),
            std::string::npos)
      << msg;
  chat.on_error = "skip";
  TextSourceStats st;
  std::vector<Document> docs = read_all(chat, &st);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(st.skipped.total, 1);
  EXPECT_EQ(st.skipped.by_reason["unknown role"], 1);
  std::string text;
  for (const Segment& g : docs[1].segments) text += g.text;
  EXPECT_EQ(text,
            "<|im_start|>system\nterse<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n4<|im_end|>\n");
}

}  // namespace
}  // namespace lmt
