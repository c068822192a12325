// Writes the Parquet reader's reference fixtures (tests/data/parquet) with two independent
// writers: arrow-rs (the Rust parquet crate, compiled to wasm as parquet-wasm) and DuckDB. Every
// X.parquet gets an X.json beside it holding the expected values of each column, from the same
// rows the writer was given. The data is deterministic (a seeded PRNG).
//
//   cd scripts/parquet_fixtures && npm install && node ../make_parquet_fixtures.mjs [OUT_DIR]
//
// Expected values in X.json: {"rows": N, "columns": {"name": [value, ...]}} where a value is a
// string, null, {"repeat": S, "times": K} (S repeated K times; long strings) or {"hex": H}
// (binary columns, which may hold invalid UTF-8).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'parquet_fixtures', 'package.json'));
const arrow = require('apache-arrow');
const pw = require('parquet-wasm');
const { DuckDBInstance } = require('@duckdb/node-api');

const out = path.resolve(process.argv[2] ?? path.join(here, '..', 'tests', 'data', 'parquet'));
fs.mkdirSync(out, { recursive: true });

function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'data', 'model', 'token', 'parquet',
  'über', 'naïve', 'café', '日本語', 'ελληνικά', 'emoji😀', '𝄞clef', 'zero', 'page', 'row'];
const LONG_UNIT = 'long ab€😀 ';  // 15 bytes of UTF-8 (1- to 4-byte characters)

// Rows of the test table. `long` puts one string of more than 64 KiB into `text`.
function makeRows(n, seed, long) {
  const rnd = mulberry32(seed);
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const rows = [];
  for (let i = 0; i < n; i++) {
    let text;
    if (i % 11 === 3 || (i >= 100 && i < 150)) text = null;  // row group 3: all null
    else if (i % 13 === 5) text = '';
    else if (long && i === 7) text = { repeat: LONG_UNIT, times: 5000 };
    else if (i % 4 === 0) text = `common phrase ${i % 5}`;  // repeats: worth a dictionary
    else text = Array.from({ length: 1 + Math.floor(rnd() * 12) }, () => pick(WORDS)).join(' ') + ` #${i}`;
    const blob = i % 19 === 4 ? [0xff, 0xfe, 0x41] : Array.from(Buffer.from(`b${i}é`));
    rows.push({
      id: BigInt(i * 3 - 50),
      score: i % 7 === 0 ? null : i * 0.25,
      text,
      title: ['Alpha', 'Beta', 'Gamma 🚀', 'Δέλτα', 'Epsilon'][i % 5],
      tags: i % 9 === 2 ? null : Array.from({ length: i % 4 }, (_, k) => WORDS[(i + k) % WORDS.length]),
      blob: Uint8Array.from(blob),
    });
  }
  return rows;
}

const expand = (v) => (v && typeof v === 'object' ? v.repeat.repeat(v.times) : v);
const hex = (b) => Buffer.from(b).toString('hex');

function writeExpected(name, rows) {
  const columns = {
    id: rows.map((r) => r.id.toString()),
    score: rows.map((r) => (r.score === null ? null : String(r.score))),
    text: rows.map((r) => r.text),
    title: rows.map((r) => r.title),
    blob: rows.map((r) => ({ hex: hex(r.blob) })),
  };
  fs.writeFileSync(path.join(out, name + '.json'), JSON.stringify({ rows: rows.length, columns }) + '\n');
}

// `title` is declared non-nullable, so arrow-rs writes it as a REQUIRED column (no levels).
function arrowTable(rows) {
  const { vectorFromArray, Utf8, Float64, Int64, Binary, List, Field, makeTable } = arrow;
  const t = makeTable({
    id: vectorFromArray(BigInt64Array.from(rows.map((r) => r.id)), new Int64()),
    score: vectorFromArray(rows.map((r) => r.score), new Float64()),
    text: vectorFromArray(rows.map((r) => expand(r.text)), new Utf8()),
    title: vectorFromArray(rows.map((r) => r.title), new Utf8()),
    tags: vectorFromArray(rows.map((r) => r.tags), new List(new Field('item', new Utf8(), true))),
    blob: vectorFromArray(rows.map((r) => r.blob), new Binary()),
  });
  const fields = t.schema.fields.map((f) => (f.name === 'title' ? new Field(f.name, f.type, false) : f));
  const schema = new arrow.Schema(fields, t.schema.metadata);
  return new arrow.Table(schema, t.batches.map((b) => new arrow.RecordBatch(schema, b.data)));
}

const manifest = [];

// arrow-rs: every codec x data page version x dictionary on/off; small pages and row groups so
// that each column chunk has several pages and the file several row groups.
function writeArrowRs(name, rows, { codec, v2, dict, encoding }) {
  const ipc = arrow.tableToIPC(arrowTable(rows), 'stream');
  let b = new pw.WriterPropertiesBuilder()
    .setCompression(codec)
    .setWriterVersion(v2 ? pw.WriterVersion.V2 : pw.WriterVersion.V1)
    .setDictionaryEnabled(dict)
    .setDictionaryPageSizeLimit(1024)
    .setDataPageSizeLimit(512)
    .setWriteBatchSize(16)
    .setMaxRowGroupSize(50);
  if (encoding !== undefined) b = b.setColumnEncoding('text', encoding);
  const bytes = pw.writeParquet(pw.Table.fromIPCStream(ipc), b.build());
  fs.writeFileSync(path.join(out, name + '.parquet'), bytes);
  writeExpected(name, rows);
  manifest.push({ name, writer: 'parquet-wasm 0.8.0 (arrow-rs parquet)' });
}

const C = pw.Compression;
for (const [cname, codec] of [['uncompressed', C.UNCOMPRESSED], ['snappy', C.SNAPPY], ['zstd', C.ZSTD]])
  for (const v2 of [false, true])
    for (const dict of [true, false]) {
      const name = `arrowrs_${cname}_${v2 ? 'v2' : 'v1'}_${dict ? 'dict' : 'plain'}`;
      writeArrowRs(name, makeRows(150, 1 + manifest.length, codec !== C.UNCOMPRESSED), { codec, v2, dict });
    }
writeArrowRs('arrowrs_uncompressed_v1_long', makeRows(12, 99, true), { codec: C.UNCOMPRESSED, v2: false, dict: false });
writeArrowRs('arrowrs_snappy_v1_delta_length', makeRows(150, 7, true),
  { codec: C.SNAPPY, v2: false, dict: false, encoding: pw.Encoding.DELTA_LENGTH_BYTE_ARRAY });
writeArrowRs('arrowrs_zstd_v2_delta_byte_array', makeRows(150, 8, false),
  { codec: C.ZSTD, v2: true, dict: false, encoding: pw.Encoding.DELTA_BYTE_ARRAY });
writeArrowRs('arrowrs_gzip_v1', makeRows(20, 9, false), { codec: C.GZIP, v2: false, dict: false });

// DuckDB: three row groups (one per UNION ALL branch, ROW_GROUP_SIZE 50), its own choice of
// encodings (dictionary for repetitive columns, DELTA_LENGTH_BYTE_ARRAY under V2).
const db = await DuckDBInstance.create(':memory:');
const con = await db.connect();
await con.run('SET threads = 1');
const duckVersion = (await con.runAndReadAll('SELECT version()')).getRows()[0][0];
async function writeDuck(name, rows, codec, version) {
  const tmp = path.join(out, name + '.tmp.json');
  fs.writeFileSync(tmp, rows.map((r) => JSON.stringify({
    id: r.id.toString(), score: r.score, text: expand(r.text), title: r.title, tags: r.tags,
    blob: hex(r.blob),
  })).join('\n') + '\n');
  await con.run(`CREATE OR REPLACE TABLE t AS SELECT row_number() OVER () AS rn, id::BIGINT AS id,
      score, text, title, tags, unhex(blob) AS blob
    FROM read_json('${tmp}', format='newline_delimited', columns={id: 'VARCHAR', score: 'DOUBLE',
      text: 'VARCHAR', title: 'VARCHAR', tags: 'VARCHAR[]', blob: 'VARCHAR'})`);
  const part = (lo, hi) => `SELECT id, score, text, title, tags, blob FROM t WHERE rn > ${lo} AND rn <= ${hi}`;
  const file = path.join(out, name + '.parquet');
  await con.run(`COPY (${part(0, 50)} UNION ALL ${part(50, 100)} UNION ALL ${part(100, 1e9)})
    TO '${file}' (FORMAT parquet, COMPRESSION ${codec}, ROW_GROUP_SIZE 50, PARQUET_VERSION ${version})`);
  fs.unlinkSync(tmp);
  writeExpected(name, rows);
  manifest.push({ name, writer: `DuckDB ${duckVersion} (@duckdb/node-api)` });
}
await writeDuck('duckdb_uncompressed_v1', makeRows(150, 21, false), 'uncompressed', 'V1');
await writeDuck('duckdb_snappy_v1', makeRows(150, 22, true), 'snappy', 'V1');
await writeDuck('duckdb_zstd_v2', makeRows(150, 23, true), 'zstd', 'V2');
await writeDuck('duckdb_snappy_v2', makeRows(150, 24, false), 'snappy', 'V2');

// What each file holds, from DuckDB's own metadata reader (for the README).
const lines = [];
for (const { name, writer } of manifest) {
  const file = path.join(out, name + '.parquet');
  const meta = (await con.runAndReadAll(`SELECT count(DISTINCT row_group_id), max(compression),
      string_agg(DISTINCT encodings, ' / ') FILTER (WHERE path_in_schema = 'text'),
      string_agg(DISTINCT encodings, ' / ') FILTER (WHERE path_in_schema = 'title')
    FROM parquet_metadata('${file}')`)).getRows()[0];
  lines.push(`| ${name}.parquet | ${writer} | ${meta[1]} | ${meta[0]} | ${meta[2]} | ${meta[3]} | ${fs.statSync(file).size} |`);
}
fs.writeFileSync(path.join(out, 'manifest.md'), [
  '| file | writer | codec | row groups | encodings of `text` | of `title` | bytes |',
  '|---|---|---|---|---|---|---|', ...lines].join('\n') + '\n');
console.log(lines.join('\n'));
