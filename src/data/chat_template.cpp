// Chat templates as tables (see chat_template.h): built-in styles, the custom-template parser and
// the one renderer every style goes through.
#include "data/chat_template.h"

#include "core/error.h"

namespace lmt {

namespace {

const char* const kRoleNames[3] = {"system", "user", "assistant"};

// Length of the UTF-8 whitespace character at the start / end of s (0 if none), as Python's
// str.isspace(): \t\n\v\f\r, \x1c-\x1f, space, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028,
// U+2029, U+202F, U+205F, U+3000.
bool is_space_cp(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Decodes the code point of a (valid) UTF-8 sequence of length n starting at p.
uint32_t decode(const unsigned char* p, size_t n) {
  if (n == 1) return p[0];
  uint32_t c = p[0] & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) c = (c << 6) | (p[i] & 0x3F);
  return c;
}

size_t seq_len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) return 2;
  if ((b >> 4) == 0xE) return 3;
  if ((b >> 3) == 0x1E) return 4;
  return 1;  // a stray byte: never whitespace
}

size_t leading_space(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = seq_len(p[0]);
  return n <= s.size() && is_space_cp(decode(p, n)) ? n : 0;
}

size_t trailing_space(std::string_view s) {
  size_t start = s.size() - 1;  // back up over continuation bytes (at most 3)
  while (start > 0 && s.size() - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
    --start;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + start;
  size_t n = seq_len(p[0]);
  if (start + n != s.size()) return 0;
  return is_space_cp(decode(p, n)) ? n : 0;
}

bool blank(std::string_view s) {
  return trim_whitespace(s).empty();
}

ChatTemplate::Style chatml_style() {
  ChatTemplate::Style s;
  for (int r = 0; r < 3; ++r)
    s.turns[r] = {std::string("<|im_start|>") + kRoleNames[r] + "\n", "<|im_end|>", "\n"};
  return s;
}

ChatTemplate::Style llama3_style() {
  ChatTemplate::Style s;
  s.prefix = "<|begin_of_text|>";
  for (int r = 0; r < 3; ++r)
    s.turns[r] = {std::string("<|start_header_id|>") + kRoleNames[r] + "<|end_header_id|>\n\n",
                  "<|eot_id|>", ""};
  s.trim = true;
  return s;
}

ChatTemplate::Style gemma_style() {
  ChatTemplate::Style s;
  s.prefix = "<bos>";
  s.turns[0] = {"", "", ""};  // never rendered: folded into the first user turn
  s.turns[1] = {"<start_of_turn>user\n", "<end_of_turn>", "\n"};
  s.turns[2] = {"<start_of_turn>model\n", "<end_of_turn>", "\n"};
  s.trim = true;
  s.gemma_rules = true;
  return s;
}

ChatTemplate::Style plain_chat_style() {
  ChatTemplate::Style s;
  s.turns[0] = {"System: ", "", ""};
  s.turns[1] = {"User: ", "", ""};
  s.turns[2] = {"Assistant: ", "", ""};
  s.separator = "\n\n";
  return s;
}

ChatTemplate::Style plain_instruction_style() {
  ChatTemplate::Style s = plain_chat_style();
  s.turns[1].header = "### Instruction:\n";
  s.turns[2].header = "### Response:\n";
  s.input_join = "\n\n### Input:\n";
  return s;
}

// A custom template (see the header for the syntax).
ChatTemplate::Style parse_custom(const std::string& t, const std::string& key) {
  auto fail = [&](const std::string& why) {
    throw UserError(key + ": " + why + " in the custom template '" + excerpt(t) +
                    "' (placeholders: {role}, {Role}, {content}, {turn}; {{ and }} for braces)");
  };
  // Pieces: text before {turn} (prefix), before {content} (header), after it (end).
  std::string parts[3];
  int part = 1;  // 0 prefix, 1 header, 2 end; {turn} moves header text into the prefix
  std::string cur;
  bool saw_turn = false, saw_content = false, saw_role = false;
  // Role placeholders are kept as \x01 (role) / \x02 (Role) and replaced per role below.
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '}') {
      if (i + 1 < t.size() && t[i + 1] == '}') {
        cur += '}';
        ++i;
        continue;
      }
      fail("a lone '}'");
    }
    if (c != '{') {
      if (c == '\x01' || c == '\x02') fail("a control character");
      cur += c;
      continue;
    }
    if (i + 1 < t.size() && t[i + 1] == '{') {
      cur += '{';
      ++i;
      continue;
    }
    const size_t close = t.find('}', i);
    if (close == std::string::npos) fail("an unclosed '{'");
    const std::string name = t.substr(i + 1, close - i - 1);
    i = close;
    if (name == "role" || name == "Role") {
      cur += name == "role" ? '\x01' : '\x02';
      saw_role = true;
    } else if (name == "content") {
      if (saw_content) fail("{content} twice");
      saw_content = true;
      parts[1] = cur;
      cur.clear();
      part = 2;
    } else if (name == "turn") {
      if (saw_turn || saw_content || saw_role) fail("{turn} not before everything else");
      saw_turn = true;
      parts[0] = cur;
      cur.clear();
    } else {
      fail("unknown placeholder {" + name + "}");
    }
  }
  if (!saw_content) fail("no {content}");
  parts[part] = cur;
  if (saw_turn && parts[0].empty()) fail("{turn} with nothing before it");

  std::string end = parts[2];
  size_t keep = end.size();
  while (keep > 0 && std::string_view(" \t\r\n").find(end[keep - 1]) != std::string_view::npos)
    --keep;
  ChatTemplate::Style s;
  s.prefix = parts[0];
  for (int r = 0; r < 3; ++r) {
    std::string role = kRoleNames[r];
    std::string Role = role;
    Role[0] = static_cast<char>(Role[0] - 'a' + 'A');
    auto subst = [&](const std::string& x) {
      std::string out;
      for (char c : x) out += c == '\x01' ? role : c == '\x02' ? Role : std::string(1, c);
      return out;
    };
    s.turns[r] = {subst(parts[1]), subst(end.substr(0, keep)), subst(end.substr(keep))};
  }
  return s;
}

// Appends text with a loss flag, merging with the last segment when the flag is the same.
void append(Document& doc, std::string_view text, bool loss) {
  if (text.empty()) return;
  if (!doc.segments.empty() && doc.segments.back().loss == loss)
    doc.segments.back().text.append(text);
  else
    doc.segments.push_back({std::string(text), loss});
}

}  // namespace

std::string_view trim_whitespace(std::string_view s) {
  while (!s.empty()) {
    size_t n = leading_space(s);
    if (!n) break;
    s.remove_prefix(n);
  }
  while (!s.empty()) {
    size_t n = trailing_space(s);
    if (!n) break;
    s.remove_suffix(n);
  }
  return s;
}

std::optional<ChatRole> parse_chat_role(std::string_view s) {
  for (int r = 0; r < 3; ++r)
    if (s == kRoleNames[r]) return static_cast<ChatRole>(r);
  return std::nullopt;
}

const char* chat_role_name(ChatRole r) {
  return kRoleNames[static_cast<int>(r)];
}

ChatTemplate ChatTemplate::from_setting(const std::string& setting, const std::string& key) {
  ChatTemplate t;
  t.name_ = setting;
  if (setting == "chatml") {
    t.chat_ = chatml_style();
  } else if (setting == "qwen2.5") {
    t.chat_ = chatml_style();
    t.chat_.default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  } else if (setting == "llama3") {
    t.chat_ = llama3_style();
  } else if (setting == "gemma") {
    t.chat_ = gemma_style();
  } else if (setting == "plain") {
    t.chat_ = plain_chat_style();
    t.instruction_ = plain_instruction_style();
    return t;
  } else if (setting.find('{') != std::string::npos) {
    t.name_ = "custom";
    t.chat_ = parse_custom(setting, key);
  } else {
    throw UserError(key + ": '" + excerpt(setting) +
                    "' is neither a built-in template (chatml, qwen2.5, llama3, gemma, plain) nor "
                    "a custom template (a message pattern with {role} and {content} placeholders)");
  }
  t.instruction_ = t.chat_;
  return t;
}

std::optional<RecordProblem> ChatTemplate::render_chat(std::span<const ChatMessage> messages,
                                                       bool loss_all, Document& doc,
                                                       const std::string& field) const {
  return render(chat_, messages, loss_all, doc, field);
}

std::optional<RecordProblem> ChatTemplate::render_instruction(std::string_view instruction,
                                                              std::string_view input,
                                                              std::string_view output,
                                                              bool loss_all, Document& doc) const {
  std::string user(instruction);
  if (!blank(input)) {
    user += instruction_.input_join;
    user += input;
  }
  const ChatMessage m[2] = {{ChatRole::kUser, user}, {ChatRole::kAssistant, output}};
  return render(instruction_, m, loss_all, doc, "turns");
}

std::optional<RecordProblem> ChatTemplate::render(const Style& style,
                                                  std::span<const ChatMessage> messages,
                                                  bool loss_all, Document& doc,
                                                  const std::string& field) const {
  auto where = [&](size_t i) {
    return field + "[" + std::to_string(i) + "] (" + chat_role_name(messages[i].role) + ")";
  };
  if (messages.empty()) return RecordProblem{"no messages", field + ": no messages"};
  bool any_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (blank(messages[i].content))
      return RecordProblem{"empty content", where(i) + ": empty content"};
    any_assistant = any_assistant || messages[i].role == ChatRole::kAssistant;
  }
  if (!any_assistant)
    return RecordProblem{"no assistant turn", field + ": no assistant turn (nothing to learn)"};

  size_t first = 0;
  std::string_view folded;  // gemma: the system message put before the first user turn
  if (style.gemma_rules) {
    if (messages[0].role == ChatRole::kSystem) {
      folded = messages[0].content;
      first = 1;
    }
    for (size_t i = first; i < messages.size(); ++i) {
      const ChatRole want = (i - first) % 2 == 0 ? ChatRole::kUser : ChatRole::kAssistant;
      if (messages[i].role == want) continue;
      if (messages[i].role == ChatRole::kSystem)
        return RecordProblem{
            "system message not first (" + name_ + ")",
            where(i) + ": " + name_ + " takes a system message only as the first message"};
      return RecordProblem{"roles do not alternate (" + name_ + ")",
                           where(i) + ": " + name_ + " needs turns alternating user / assistant, " +
                               "starting with user, and found " + chat_role_name(messages[i].role) +
                               " where " + chat_role_name(want) + " should be"};
    }
  }

  doc.segments.clear();
  doc.has_special = has_special();
  doc.ends_turn = !style.turns[static_cast<int>(messages.back().role)].end.empty();
  append(doc, style.prefix, loss_all);
  bool first_turn = true;
  auto turn = [&](ChatRole role, std::string_view fold, std::string_view content) {
    const Turn& t = style.turns[static_cast<int>(role)];
    const bool counts = loss_all || role == ChatRole::kAssistant;
    if (!first_turn) append(doc, style.separator, loss_all);
    first_turn = false;
    append(doc, t.header, loss_all);
    if (!fold.empty()) {
      append(doc, fold, loss_all);
      append(doc, "\n\n", loss_all);
    }
    append(doc, style.trim ? trim_whitespace(content) : content, counts);
    append(doc, t.end, counts);
    append(doc, t.after, loss_all);
  };
  if (!style.default_system.empty() && messages[0].role != ChatRole::kSystem)
    turn(ChatRole::kSystem, {}, style.default_system);
  for (size_t i = first; i < messages.size(); ++i)
    turn(messages[i].role, i == first ? folded : std::string_view{}, messages[i].content);
  return std::nullopt;
}

}  // namespace lmt
