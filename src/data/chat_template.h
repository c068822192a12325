// Chat templates: a conversation (system / user / assistant messages) rendered as the text a chat
// model was trained on, cut into Segments (data/document.h) that say which bytes count in the loss.
// No Jinja: a template is a small table (BOS prefix; per role a header, an end-of-turn marker and
// the text after it; trimming; Gemma's system folding and alternation) that reproduces the Hugging
// Face templates byte for byte (tests/data/test_template_parity.cpp checks the real ones, rendered
// by scripts/make_template_fixtures.py).
//
// Built in:
//   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n  (ChatML as Qwen 2 / 2.5 write it; no default
//   system) qwen2.5  chatml, plus Qwen2.5-Instruct's default system message when a chat has none
//   llama3   <|begin_of_text|>, then <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>,
//            content trimmed (Llama 3 Instruct)
//   gemma    <bos>, then <start_of_turn>user|model\nCONTENT<end_of_turn>\n, content trimmed; a
//   first
//            system message is folded into the first user turn ("SYSTEM\n\nUSER", Gemma 3); turns
//            must alternate user / assistant starting with user (Gemma 2 and 3 instruction-tuned)
//   plain    for base models, no special tokens. Chats: "System: ...", "User: ...",
//            "Assistant: ..." turns separated by a blank line. Instruction records (Alpaca style):
//            "### Instruction:\nINSTRUCTION[\n\n### Input:\nINPUT]\n\n### Response:\nOUTPUT".
// Custom: any other string with a {content} placeholder is one message's pattern:
//   [PREFIX{turn}]HEADER{content}END
//   {role} / {Role} in HEADER and END become the role (system, user, assistant / System, ...);
//   PREFIX, when a {turn} marker is present, is written once at the start (a BOS token);
//   END's trailing whitespace is written after the turn but is not part of its end marker;
//   {{ and }} are literal braces; any other {name} is an error. Example (Llama 2 style is not
//   expressible; ChatML is): "<|im_start|>{role}\n{content}<|im_end|>\n".
//
// Loss (loss = assistant): an assistant turn's content and its end marker (<|im_end|>,
// <|eot_id|>, <end_of_turn>: what makes the model stop) count; headers, system and user turns,
// the BOS prefix and the whitespace after an end marker (the "\n" after <|im_end|>) do not — the
// model never generates that newline, generation stops at the marker. loss = all: every byte
// counts. Adjacent pieces with the same loss flag are merged into one segment, so segment
// boundaries (token boundaries) fall only where the flag changes.
//
// has_special: true when the template writes its own BOS (llama3, gemma, a custom template with a
// {turn} prefix); prepare then adds no special tokens. chatml, qwen2.5, plain and custom templates
// without a prefix set it false, so prepare adds the tokenizer's own special prefix (what "add
// special tokens" adds: nothing for Qwen's tokenizer, as with Hugging Face; a base model's BOS).
// How a conversation ends: a template with an end-of-turn marker (chatml, qwen2.5, llama3, gemma,
// a custom END) ends it with the marker in the loss and what it writes after it outside, as
// apply_chat_template does, and prepare adds nothing (Document::ends_turn); plain ends on the
// answer, and prepare adds the tokenizer's EOS in the loss, which teaches the model to stop.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "data/document.h"

namespace lmt {

enum class ChatRole { kSystem = 0, kUser = 1, kAssistant = 2 };

// "system" | "user" | "assistant"; nullopt for anything else.
std::optional<ChatRole> parse_chat_role(std::string_view s);
const char* chat_role_name(ChatRole r);

struct ChatMessage {
  ChatRole role;
  std::string_view content;
};

// Why a record cannot be rendered: `reason` is the fixed text skipped records are counted under,
// `detail` the full message (names the message index and role).
struct RecordProblem {
  std::string reason;
  std::string detail;
};

class ChatTemplate {
 public:
  // A built-in name or a custom template string. Throws UserError naming `key`
  // ("data.sources[0].chat_template") for an unknown name or a malformed custom template.
  static ChatTemplate from_setting(const std::string& setting, const std::string& key);

  // Renders a chat into `doc` (replaced). `field` names the message list in problems
  // ("messages[2]: ..."). Problems: no messages, blank content, no assistant turn, or an order
  // the template cannot express (gemma).
  std::optional<RecordProblem> render_chat(std::span<const ChatMessage> messages, bool loss_all,
                                           Document& doc,
                                           const std::string& field = "messages") const;

  // An instruction record as a user turn and an assistant turn. The user turn is the instruction,
  // then, when `input` is not blank, "\n\n" and the input (plain: "\n\n### Input:\n" and the
  // input). Fields are used as given; templates that trim (llama3, gemma) trim the joined turn.
  std::optional<RecordProblem> render_instruction(std::string_view instruction,
                                                  std::string_view input, std::string_view output,
                                                  bool loss_all, Document& doc) const;

  // The template as Jinja for tokenizer_config.json's "chat_template": rendered by transformers'
  // apply_chat_template it writes the text render_chat writes (prefixes and markers literally,
  // so no bos_token is needed), plus the assistant header for add_generation_prompt. It raises
  // where the template cannot express a chat (gemma's order, a role other than system, user,
  // assistant), but does not refuse blank content or a chat without an assistant turn, which
  // render_chat leaves out of training data but which inference may need. `instruction`: the
  // style render_instruction uses (it differs only for plain: "### Instruction:" / "###
  // Response:").
  std::string jinja(bool instruction = false) const;

  const std::string& name() const { return name_; }
  bool has_special() const { return !chat_.prefix.empty(); }

  // One way of writing turns (plain has one for chats and one for instruction records).
  struct Turn {
    std::string header;  // before the content, never in the loss
    std::string end;     // the end-of-turn marker, in the loss with an assistant turn
    std::string after;   // after the marker (a newline), never in the loss
  };
  struct Style {
    std::string prefix;          // once at the start (BOS)
    Turn turns[3];               // by ChatRole
    std::string separator;       // between turns (plain)
    bool trim = false;           // content without leading / trailing whitespace (Jinja's | trim)
    bool gemma_rules = false;    // first system folded into the first user turn; strict alternation
    std::string default_system;  // used when the chat does not start with a system message
    std::string input_join = "\n\n";
  };

 private:
  std::optional<RecordProblem> render(const Style& style, std::span<const ChatMessage> messages,
                                      bool loss_all, Document& doc, const std::string& field) const;

  std::string name_;
  Style chat_, instruction_;
};

// Whitespace as Python's str.strip() sees it (what transformers' Jinja `trim` removes), ASCII and
// Unicode (U+00A0, U+2000..U+200A, U+3000, ...).
std::string_view trim_whitespace(std::string_view s);

}  // namespace lmt
