// Makes the SentencePiece-style tokenizer.json fixtures and the reference ids of every tokenizer.json
// fixture in tests/data/tokenizers, with Hugging Face tokenizers itself (the npm package `tokenizers`,
// HF's Node bindings of the Rust library, version pinned in scripts/tokenizer_fixtures/package.json).
//
//   cd scripts/tokenizer_fixtures && npm install && cd ../.. && node scripts/make_tokenizer_fixtures.mjs
//
// 1. llama2_style_bpe.json, metaspace_bpe.json, metaspace_split_bpe.json, metaspace_never_bpe.json,
//    split_behaviors_bpe.json:
//    sp_bpe.vocab's pieces (ids in order) and scores converted the way transformers' LlamaConverter
//    does (merges: every split of a piece into two vocab pieces, ordered by the piece's score), with
//    the "▁" handling of Llama 2 (normalizer Prepend + Replace) or of a Metaspace pre-tokenizer with
//    prepend_scheme first / always / never, split false / true, or Gemma's Replace-only normalizer
//    with Split pre-tokenizers of every behavior. Each is loaded into HF and saved back,
//    so the files are what HF writes.
// 2. hf_ref.json: for each tokenizer.json fixture (these four, the byte-level ones, and the file that
//    `lmtrain tokenizer train` wrote, lmtrain_trained_bpe.json), HF's ids without and with special
//    tokens and HF's decode of the ids, for ref_ids.json's texts plus harder ones.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'tokenizer_fixtures', 'package.json'));
const { Tokenizer } = require('tokenizers');
const hfVersion = require('tokenizers/package.json').version;
const dir = path.join(here, '..', 'tests', 'data', 'tokenizers');

// ---- 1. SentencePiece-style tokenizer.json files from sp_bpe.vocab ----
const pieces = fs.readFileSync(path.join(dir, 'sp_bpe.vocab'), 'utf8').split('\n').filter((l) => l)
  .map((l) => { const [p, s] = l.split('\t'); return [p, Number(s)]; });
const vocab = {};
pieces.forEach(([p], i) => { vocab[p] = i; });

// transformers' SentencePieceExtractor.extract(vocab_scores): stable sorts, as Python's.
function llamaMerges() {
  let merges = [];
  for (const [piece, score] of pieces) {
    const cps = [...piece];
    const local = [];
    for (let k = 1; k < cps.length; ++k) {
      const l = cps.slice(0, k).join(''), r = cps.slice(k).join('');
      if (l in vocab && r in vocab) local.push([l, r, score]);
    }
    local.sort((a, b) => vocab[a[0]] - vocab[b[0]] || vocab[a[1]] - vocab[b[1]]);
    merges.push(...local);
  }
  const len = (s) => [...s].length;
  merges.sort((a, b) => b[2] - a[2] || len(b[0]) - len(a[0]) || len(b[1]) - len(a[1]));
  return merges.map(([l, r]) => [l, r]);
}

const special = (content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: true });
const baseAdded = [special('<unk>', 0), special('<s>', 1), special('</s>', 2)];
const bpeModel = (extra) => ({ type: 'BPE', dropout: null, unk_token: '<unk>',
  continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: true,
  ignore_merges: false, vocab, merges: llamaMerges(), ...extra });
const llamaDecoder = { type: 'Sequence', decoders: [
  { type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' },
  { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
const template = (single) => ({ type: 'TemplateProcessing',
  single: single.map((s) => (s === '$A' ? { Sequence: { id: 'A', type_id: 0 } }
    : { SpecialToken: { id: s, type_id: 0 } })),
  pair: [], special_tokens: Object.fromEntries(single.filter((s) => s !== '$A')
    .map((s) => [s, { id: s, ids: [vocab[s]], tokens: [s] }])) });
const metaspace = (scheme, split) => ({ type: 'Metaspace', replacement: '▁', prepend_scheme: scheme,
  split });

const spStyle = {
  // Llama 2 / Mistral (transformers' legacy conversion).
  llama2_style_bpe: { version: '1.0', truncation: null, padding: null,
    added_tokens: [...baseAdded, { id: 600, content: '<|sep|>', single_word: false, lstrip: false,
      rstrip: false, normalized: true, special: false }],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' },
      { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
    pre_tokenizer: null, post_processor: template(['<s>', '$A']), decoder: llamaDecoder,
    model: bpeModel({}) },
  // Llama 2 converted with legacy=false: Metaspace, prepend only at the start of the text.
  metaspace_bpe: { version: '1.0', truncation: null, padding: null, added_tokens: baseAdded,
    normalizer: null, pre_tokenizer: metaspace('first', false),
    post_processor: template(['<s>', '$A', '</s>']), decoder: llamaDecoder, model: bpeModel({}) },
  // Metaspace that splits words, prepends to every segment, decoder Metaspace, ignore_merges, added
  // tokens that strip whitespace (lstrip / rstrip).
  metaspace_split_bpe: { version: '1.0', truncation: null, padding: null,
    added_tokens: [...baseAdded, { ...special('<eos>', 601), rstrip: true },
      { ...special('<|user|>', 600), lstrip: true, rstrip: true }],
    normalizer: null, pre_tokenizer: metaspace('always', true), post_processor: null,
    decoder: metaspace('always', true), model: bpeModel({ ignore_merges: true }) },
  // No prepend, no byte fallback: unknown characters become one fused <unk>.
  metaspace_never_bpe: { version: '1.0', truncation: null, padding: null, added_tokens: baseAdded,
    normalizer: null, pre_tokenizer: metaspace('never', true), post_processor: null,
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' },
      content: ' ' }, { type: 'Fuse' }] },
    model: bpeModel({ byte_fallback: false, fuse_unk: true }) },
  // Gemma-like normalizer (Replace only, no prepend) and a chain of Split pre-tokenizers that
  // exercises every split behavior.
  split_behaviors_bpe: { version: '1.0', truncation: null, padding: null, added_tokens: baseAdded,
    normalizer: { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: '[0-9]' }, behavior: 'Isolated', invert: false },
      { type: 'Split', pattern: { String: '-' }, behavior: 'Removed', invert: false },
      { type: 'Split', pattern: { Regex: '[.,!?;:]' }, behavior: 'Contiguous', invert: false },
      { type: 'Split', pattern: { String: '\n' }, behavior: 'MergedWithPrevious', invert: false },
      { type: 'Split', pattern: { String: '▁' }, behavior: 'MergedWithNext', invert: false }] },
    post_processor: null,
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' },
      content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' }] },
    model: bpeModel({}) },
};
for (const [name, json] of Object.entries(spStyle)) {
  const file = path.join(dir, `${name}.json`);
  Tokenizer.fromString(JSON.stringify(json)).save(file, false);
}

// ---- 2. reference ids ----
const ref = JSON.parse(fs.readFileSync(path.join(dir, 'ref_ids.json'), 'utf8'));
const hard = ['', ' ', '  ', '   leading', 'trailing   ', 'many     spaces   here', '\n',
  'line1\nline2\n\nline3\n', '\ttabs\t\tand\tmore\t', 'cr\r\nlf', '🙂👍🏽 family: 👨‍👩‍👧‍👦',
  'emoji at the end 🙂', '中文字符，日本語のテキスト、한국어', 'e\u0301 a\u0308 n\u0303 combining vs é ä ñ',
  'mixed Ελληνικά русский العربية हिन्दी', 'digits 1234567 and 3.14159', "DON'T it's we've",
  'a\u00a0non-breaking\u2003em space', 'nul\u0000byte and \u0001\u007f controls',
  '<s>Hello</s> world', 'Hello <s> world </s>', '<s> leading special', '<unk>', 'a<unk>b',
  'x <|sep|> y<|sep|>z', '<|user|>hi<eos>', '<|endoftext|> in text <|end_of_text|><|begin_of_text|>',
  '▁already▁has▁metaspace', ' ▁ mixed ▁', '<0x41> a literal byte token', 'ẞ ǅ ﬁ ligature \u{10FFFF}',
  'the the the the quick quick brown', 'Supercalifragilisticexpialidocious',
  'hi  <|user|>  there', 'x\t<eos>\n y <eos>', ' \u00a0<|user|>\u2003', 'well-known, right?! yes... 12-34 a--b\n\nnext\n', '-leading-and-trailing-', '!!!?? 2024-11-23'];
const texts = [...ref.texts, ...hard];
const names = ['llama2_style_bpe', 'metaspace_bpe', 'metaspace_split_bpe', 'metaspace_never_bpe',
  'split_behaviors_bpe',
  'bytelevel_bpe', 'llama3_style_bpe', 'lmtrain_trained_bpe'];
const out = { generator: `scripts/make_tokenizer_fixtures.mjs, HF tokenizers ${hfVersion} (npm)`,
  texts, tokenizers: {} };
for (const name of names) {
  const file = path.join(dir, `${name}.json`);
  if (!fs.existsSync(file)) throw new Error(`missing ${file}`);
  const tok = Tokenizer.fromFile(file);
  const r = { ids: [], ids_special: [], decoded: [] };
  for (const t of texts) {
    const ids = (await tok.encode(t, null, { addSpecialTokens: false })).getIds();
    r.ids.push(ids);
    r.ids_special.push((await tok.encode(t, null, { addSpecialTokens: true })).getIds());
    r.decoded.push(await tok.decode(ids, false));
  }
  out.tokenizers[name] = r;
}
fs.writeFileSync(path.join(dir, 'hf_ref.json'), JSON.stringify(out) + '\n');
console.log(`wrote ${Object.keys(spStyle).length} tokenizer.json files and hf_ref.json ` +
  `(${texts.length} texts x ${names.length} tokenizers) with HF tokenizers ${hfVersion}`);
