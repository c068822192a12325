// A chat template setting (a built-in name or a custom pattern) through ChatTemplate::from_setting,
// then a few messages rendered with it as a chat and as an instruction record, and the template
// written as Jinja. Input: the setting, a newline, then messages separated by 0x1e, each one's
// first byte choosing its role (byte % 3: system, user, assistant); at most 8 messages.
#include "data/chat_template.h"

#include <vector>

#include "fuzz_target.h"

namespace lmt::fuzz {

int chat_template(const uint8_t* data, size_t size) {
  const std::string_view input = as_text(data, size);
  const size_t eol = input.find('\n');
  const std::string setting(input.substr(0, eol));
  std::vector<ChatMessage> messages;
  for (size_t at = eol == std::string_view::npos ? input.size() : eol + 1;
       at < input.size() && messages.size() < 8;) {
    size_t end = input.find('\x1e', at);
    if (end == std::string_view::npos) end = input.size();
    const auto role = static_cast<ChatRole>(static_cast<uint8_t>(input[at]) % 3);
    messages.push_back({role, input.substr(at + 1, end - at - 1)});
    at = end + 1;
  }
  return accept_user_error([&] {
    const ChatTemplate t = ChatTemplate::from_setting(setting, "data.sources[0].chat_template");
    Document doc;
    const bool loss_all = messages.size() % 2;
    if (!t.render_chat(messages, loss_all, doc)) {
      expect(!doc.segments.empty(), "a rendered chat to have segments");
      for (size_t i = 1; i < doc.segments.size(); ++i)
        expect(doc.segments[i].loss != doc.segments[i - 1].loss,
               "adjacent segments to differ in their loss flag");
    }
    if (messages.size() >= 3)
      t.render_instruction(messages[0].content, messages[1].content, messages[2].content, loss_all,
                           doc);
    t.jinja(false);
    t.jinja(true);
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(chat_template)
