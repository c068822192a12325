// Our chat templates against the real Hugging Face Jinja templates: every fixture conversation in
// tests/data/templates (rendered by scripts/make_template_fixtures.py with transformers' Jinja)
// must come out byte for byte, with exactly the assistant contents and their end markers in the
// loss, and must be refused where the Jinja template raises.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "data/chat_template.h"

namespace lmt {
namespace {

using nlohmann::json;

json load(const std::string& name) {
  std::ifstream f(std::string(LMT_TEST_DATA) + "/templates/" + name);
  EXPECT_TRUE(f.good()) << name;
  return json::parse(f);
}

std::string concat(const Document& d) {
  std::string s;
  for (const Segment& g : d.segments) s += g.text;
  return s;
}

std::vector<std::string> loss_segments(const Document& d) {
  std::vector<std::string> out;
  for (const Segment& g : d.segments)
    if (g.loss) out.push_back(g.text);
  return out;
}

struct Expect {
  std::string ours;  // our template name
  std::vector<std::string>
      fixtures;  // the first decides refusals; the others are compared where they render
  std::string end_marker;
  bool trim;
  bool has_special;
};

const Expect kTemplates[] = {
    {"chatml", {"chatml.json"}, "<|im_end|>", false, false},
    {"qwen2.5", {"qwen2.5.json"}, "<|im_end|>", false, false},
    {"llama3", {"llama3.json"}, "<|eot_id|>", true, true},
    {"gemma", {"gemma3.json", "gemma2.json"}, "<end_of_turn>", true, true},
};

// Checks one rendering against the fixtures' results for `name`; returns how many it matched.
int check(const Expect& e, const std::vector<json>& fixtures, const std::string& name, bool reject,
          const std::vector<std::pair<std::string, std::string>>& msgs,
          const std::function<std::optional<RecordProblem>(bool, Document&)>& render) {
  Document doc;
  const std::optional<RecordProblem> p = render(false, doc);
  const json& primary = fixtures[0]["results"][name];
  if (reject || primary.contains("error")) {
    EXPECT_TRUE(p.has_value()) << e.ours << " / " << name << " must be refused";
    return 0;
  }
  EXPECT_FALSE(p.has_value()) << e.ours << " / " << name << ": " << (p ? p->detail : "");
  if (p) return 0;
  std::vector<std::string> want_loss;
  for (const auto& [role, content] : msgs)
    if (role == "assistant")
      want_loss.push_back(std::string(e.trim ? trim_whitespace(content) : content) + e.end_marker);
  EXPECT_EQ(loss_segments(doc), want_loss) << e.ours << " / " << name;
  EXPECT_EQ(doc.has_special, e.has_special) << e.ours;
  int matched = 0;
  for (const json& f : fixtures) {
    const json& r = f["results"][name];
    if (!r.contains("text")) continue;
    EXPECT_EQ(concat(doc), r["text"].get<std::string>())
        << e.ours << " vs " << f["template"] << " / " << name;
    ++matched;
  }
  Document all;
  EXPECT_FALSE(render(true, all).has_value());
  EXPECT_EQ(all.segments.size(), 1u) << "loss = all: one segment";
  if (all.segments.size() == 1) {
    EXPECT_TRUE(all.segments[0].loss);
    EXPECT_EQ(all.segments[0].text, concat(doc));
  }
  return matched;
}

TEST(TemplateParity, BuiltInTemplatesMatchTheJinjaReference) {
  const json cases = load("cases.json");
  for (const Expect& e : kTemplates) {
    std::vector<json> fixtures;
    for (const std::string& f : e.fixtures) fixtures.push_back(load(f));
    const ChatTemplate t = ChatTemplate::from_setting(e.ours, "test");
    int matched = 0;
    for (const json& c : cases["conversations"]) {
      std::vector<std::pair<std::string, std::string>> msgs;
      for (const json& m : c["messages"]) msgs.emplace_back(m["role"], m["content"]);
      std::vector<ChatMessage> chat;
      for (const auto& [role, content] : msgs) chat.push_back({*parse_chat_role(role), content});
      matched += check(e, fixtures, c["name"], c.value("reject", false), msgs,
                       [&](bool all, Document& d) { return t.render_chat(chat, all, d); });
    }
    for (const json& c : cases["instructions"]) {
      const std::string ins = c["instruction"], in = c["input"], out = c["output"];
      const std::string user = trim_whitespace(in).empty() ? ins : ins + "\n\n" + in;
      matched +=
          check(e, fixtures, c["name"], false, {{"user", user}, {"assistant", out}},
                [&](bool all, Document& d) { return t.render_instruction(ins, in, out, all, d); });
    }
    // Every fixture file has at least 8 renderings to match; a fixture that went missing fails.
    EXPECT_GE(matched, 8 * static_cast<int>(e.fixtures.size())) << e.ours;
  }
}

// Random chats of random unicode with whitespace edges: the loss segments are the assistant
// turns, and removing them leaves the other messages' contents in order.
TEST(TemplateParity, RandomChatsKeepTheirStructure) {
  std::mt19937 rng(std::random_device{}());
  const char* pieces[] = {"a",    "Z",    " ",   "\n",    "\t",      "é",
                          "日本", "🙂", "{x}", "<|x|>", "\xc2\xa0"};
  auto text = [&]() {
    std::string s = "w";  // never blank
    const int n = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int i = 0; i < n; ++i)
      s.insert(rng() % (s.size() + 1) == 0 ? 0 : s.size(), pieces[rng() % 11]);
    return s;
  };
  for (const char* name : {"chatml", "llama3", "gemma"}) {
    const ChatTemplate t = ChatTemplate::from_setting(name, "test");
    const bool trim = std::string(name) != "chatml";
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<std::string> contents;
      std::vector<ChatMessage> chat;
      const int turns = 1 + static_cast<int>(rng() % 4);
      const bool system = rng() % 2;
      if (system) contents.push_back(text());
      for (int i = 0; i < 2 * turns; ++i) contents.push_back(text());
      for (size_t i = 0; i < contents.size(); ++i) {
        const size_t k = i - (system ? 1 : 0);
        const ChatRole role = system && i == 0 ? ChatRole::kSystem
                              : k % 2 == 0     ? ChatRole::kUser
                                               : ChatRole::kAssistant;
        chat.push_back({role, contents[i]});
      }
      Document d;
      ASSERT_FALSE(t.render_chat(chat, false, d).has_value());
      std::vector<std::string> want;
      for (const ChatMessage& m : chat)
        if (m.role == ChatRole::kAssistant)
          want.push_back(std::string(trim ? trim_whitespace(m.content) : m.content));
      std::vector<std::string> got = loss_segments(d);
      ASSERT_EQ(got.size(), want.size()) << name;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].rfind(want[i], 0), 0u) << name;
      size_t pos = 0;
      const std::string all = concat(d);
      for (const ChatMessage& m : chat) {
        const std::string_view c = trim ? trim_whitespace(m.content) : m.content;
        pos = all.find(c, pos);
        ASSERT_NE(pos, std::string::npos) << name << " lost a message";
        pos += c.size();
      }
    }
  }
}

TEST(TemplateParity, TrimFollowsPythonStrip) {
  EXPECT_EQ(trim_whitespace(" \t\n\r\v\fx y\x1c\x1f"), "x y");
  EXPECT_EQ(trim_whitespace("\xc2\xa0\xe3\x80\x80x\xe2\x80\x83\xc2\x85"),
            "x");  // NBSP, ideographic, em space, NEL
  EXPECT_EQ(trim_whitespace("\xe2\x80\x8bx"),
            "\xe2\x80\x8bx");  // zero-width space is not whitespace
  EXPECT_EQ(trim_whitespace("   "), "");
  EXPECT_EQ(trim_whitespace("\xc3\xa9"), "\xc3\xa9");
}

}  // namespace
}  // namespace lmt
