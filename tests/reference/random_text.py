"""Random text for the tokenizer and chat-template reference tests: words of many scripts (Latin
with accents, CJK, kana, Hangul, Arabic, Devanagari), emoji (skin tones, ZWJ families, flags,
variation selectors), digit runs, punctuation and braces, joined by runs of spaces, tabs, newlines,
CRLF and Unicode spaces. Everything comes from the `random.Random` it is given, so a seed replays
a text exactly."""
import random

LATIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZàáâãäåæçèéêëìíîïñòóôõöøùúûüýÿœšžßĀłŁđ"
ARABIC = [chr(c) for c in range(0x0621, 0x064B)] + ["\u064e", "\u0650", "\u0651"]
DEVANAGARI = [chr(c) for c in range(0x0905, 0x093A)] + [chr(c) for c in range(0x093E, 0x094E)]
PUNCT = ".,;:!?'\"()[]{}<>-_/\\@#$%^&*+=~`|…—«»¿¡“”„"
SKIN = [chr(c) for c in range(0x1F3FB, 0x1F400)]
ZWJ = [
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",  # family
    "\U0001F469\U0001F3FD\u200d\U0001F4BB",  # woman technologist, medium skin tone
    "\U0001F3F3\ufe0f\u200d\U0001F308",  # rainbow flag
    "\U0001F9D1\U0001F3FF\u200d\U0001F91D\u200d\U0001F9D1\U0001F3FB",  # people holding hands
    "\u2764\ufe0f\u200d\U0001F525",  # heart on fire
]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\r\n", "\n\n", " \n ", "\u00a0", "\u3000", "\u2003"]


def _word(rng: random.Random) -> str:
    n = rng.randint(1, 8)
    kind = rng.randrange(11)
    if kind == 0:
        return "".join(rng.choice(LATIN[:52]) for _ in range(n))
    if kind == 1:
        return "".join(rng.choice(LATIN) for _ in range(n))
    if kind == 2:  # CJK ideographs, a common block and the whole range
        lo, hi = rng.choice([(0x4E00, 0x4FFF), (0x4E00, 0x9FFF)])
        return "".join(chr(rng.randint(lo, hi)) for _ in range(n))
    if kind == 3:  # hiragana, katakana, hangul
        lo, hi = rng.choice([(0x3041, 0x3096), (0x30A1, 0x30FA), (0xAC00, 0xD7A3)])
        return "".join(chr(rng.randint(lo, hi)) for _ in range(n))
    if kind == 4:
        return "".join(rng.choice(ARABIC) for _ in range(n))
    if kind == 5:
        return "".join(rng.choice(DEVANAGARI) for _ in range(n))
    if kind == 6:  # emoji: plain, skin-toned, ZWJ sequences, flags, variation selectors
        out = []
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(5)
            if k == 0:
                out.append(chr(rng.randint(0x1F600, 0x1F64F)))
            elif k == 1:
                out.append(chr(rng.choice([0x1F44D, 0x1F44B, 0x1F590, 0x1F9D1])) + rng.choice(SKIN))
            elif k == 2:
                out.append(rng.choice(ZWJ))
            elif k == 3:
                out.append("".join(chr(0x1F1E6 + rng.randrange(26)) for _ in range(2)))
            else:
                out.append(rng.choice(["\u2764\ufe0f", "\u263a\ufe0f", "\u2601\ufe0e", "#\ufe0f\u20e3"]))
        return "".join(out)
    if kind == 7:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 14)))
    if kind == 8:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4)))
    if kind == 9:  # a word with punctuation stuck to it, contractions, numbers with separators
        w = "".join(rng.choice(LATIN[:52]) for _ in range(n))
        return rng.choice([w + "'s", w + "n't", "(" + w + ")", w + ",", w + ".", "3.14" + w, w + "'LL",
                           "1,000,000", w + "!?", "{" + w + "}", "{{" + w + "}}"])
    return rng.choice(["", "x"]) + "".join(chr(rng.randint(0x00A1, 0x024F)) for _ in range(n))


def random_text(rng: random.Random, max_words: int = 30) -> str:
    parts = []
    for _ in range(rng.randint(1, max_words)):
        parts.append(_word(rng))
        parts.append(" " if rng.random() < 0.6 else rng.choice(SPACES))
    if rng.random() < 0.3:
        parts.pop()  # no trailing whitespace
    if rng.random() < 0.15:
        parts.insert(0, rng.choice(SPACES))  # leading whitespace
    return "".join(parts)


def corpus(rng: random.Random, lines: int) -> str:
    """Training text: `lines` random texts, one after another on new lines (their own newlines,
    CRLF and whitespace runs kept, so that merges over whitespace are learned too)."""
    return "\n".join(random_text(rng, 40) for _ in range(lines)) + "\n"
