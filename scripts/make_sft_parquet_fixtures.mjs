// Writes tests/data/parquet_sft/sft_instruction.parquet (instruction / input / output, input sometimes
// null) and sft_chat.parquet (messages: the chat as a JSON string), with DuckDB, for the
// instruction / chat schema tests. Run: cd scripts/parquet_fixtures && npm install &&
// node ../make_sft_parquet_fixtures.mjs
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'parquet_fixtures', 'package.json'));
const { DuckDBInstance } = require('@duckdb/node-api');
const out = path.join(here, '..', 'tests', 'data', 'parquet_sft');

const db = await DuckDBInstance.create(':memory:');
const con = await db.connect();
await con.run(`COPY (SELECT * FROM (VALUES
    ('Name a colour.', NULL, 'Blue.'),
    ('Translate to French.', 'cheese', 'fromage'),
    ('Add the numbers.', '2 and 3', '5'),
    ('Say hello in Greek.', '', 'γειά σου'))
  AS t(instruction, input, output))
  TO '${path.join(out, 'sft_instruction.parquet')}' (FORMAT parquet, COMPRESSION zstd)`);
await con.run(`COPY (SELECT * FROM (VALUES
    ('[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}]'),
    ('[{"role": "system", "content": "terse"}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]'),
    ('[{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]'))
  AS t(messages))
  TO '${path.join(out, 'sft_chat.parquet')}' (FORMAT parquet, COMPRESSION snappy)`);
console.log('wrote sft_instruction.parquet and sft_chat.parquet');
