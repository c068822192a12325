// One training document before tokenization: a list of text segments, each saying whether its
// tokens count in the loss. A pretraining text is one segment with loss = true; a rendered chat
// is the template's pieces, where only the assistant's turns (content and end-of-turn marker)
// count by default. Segments are tokenized one by one and concatenated, so a segment boundary is
// also a token boundary (templates put boundaries next to special tokens, where BPE and
// SentencePiece split anyway).
#pragma once

#include <string>
#include <vector>

namespace lmt {

struct Segment {
  std::string text;
  bool loss = true;  // its tokens are targets of the loss
};

struct Document {
  std::vector<Segment> segments;
  // True when the template already put the tokenizer's BOS/EOS in the text (chat templates do);
  // prepare then adds no special tokens of its own.
  bool has_special = false;
  // True when the template ended the conversation with its own end-of-turn marker (chatml's
  // <|im_end|>, in the loss): as apply_chat_template, prepare then writes no end-of-sequence token
  // after it. A template without one (plain) ends on the answer, and the tokenizer's EOS follows,
  // in the loss, so that the model learns to stop.
  bool ends_turn = false;
  // Where the record is, for messages about it ("FILE:LINE", "FILE: row N"); "" where the source
  // does not say (text-schema records).
  std::string origin;
};

}  // namespace lmt
