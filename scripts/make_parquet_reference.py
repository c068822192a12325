#!/usr/bin/env python3
"""Writes Parquet files with pyarrow for lmtrain's reference test of its Parquet reader
(tests/reference/test_parquet_reference.cpp), from random values drawn from --seed.

One file per codec (none, snappy, zstd) x data page version (1.0, 2.0) x encoding of the string
columns (dictionary, PLAIN, DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY): 24 files of a few hundred
rows in several row groups, small data pages (several per column chunk) and, in the dictionary
files, a small dictionary page limit (so chunks fall back to plain mid-chunk). Every file has the
columns of tests/data/parquet: `id` INT64, `score` DOUBLE (nullable), `text` STRING (nullable:
nulls, a row group of nulls only, empty strings, 1- to 4-byte UTF-8, in the compressed files one
value over 64 KiB), `title` STRING (REQUIRED, repetitive), `tags` LIST<STRING> (nested; lmtrain
lists it and never reads it) and `blob` BINARY (nullable, some values invalid UTF-8).

Beside each X.parquet, X.json holds the values given to pyarrow, as the fixtures' JSON does:
{"rows": N, "columns": {"text": [...], ...}, "meta": {...}} with a value a string, null or
{"hex": H}; "meta" is what pyarrow's metadata says was written (codec, encodings, row groups),
and the script fails unless that is what was asked for.

    python3 scripts/make_parquet_reference.py --out DIR [--seed N]
    python3 scripts/make_parquet_reference.py --out DIR --big ROWS   one large zstd file, big.parquet
"""
import argparse
import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

CODECS = ["none", "snappy", "zstd"]
PAGE_VERSIONS = ["1.0", "2.0"]
ENCODINGS = ["dictionary", "PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"]
STRING_COLUMNS = ["text", "title", "blob"]

# Code point ranges: ASCII letters, Latin-1 and Latin Extended (2 bytes), CJK and Devanagari
# (3 bytes), emoji and CJK Extension B (4 bytes).
RANGES = [(0x61, 0x7A), (0x20, 0x7E), (0xC0, 0x17F), (0x0900, 0x097F), (0x4E00, 0x9FFF),
          (0x1F300, 0x1F64F), (0x20000, 0x2A6DF)]


def random_text(rng, n):
    out = []
    while len(out) < n:
        lo, hi = rng.choice(RANGES)
        out.extend(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8)))
        if rng.random() < 0.3:
            out.append(rng.choice([" ", "\n", "\t", "  "]))
    return "".join(out[:n])


def columns(rng, rows, group, long_value):
    text = []
    for i in range(rows):
        if group <= i < 2 * group:  # the second row group: nulls only
            text.append(None)
        elif rng.random() < 0.1:
            text.append(None)
        elif rng.random() < 0.05:
            text.append("")
        else:
            text.append(random_text(rng, rng.randint(1, 120)))
    if long_value:
        text[rows - 3] = random_text(rng, 70_000)
    titles = [random_text(rng, rng.randint(3, 12)) for _ in range(5)]
    title = [rng.choice(titles) for _ in range(rows)]
    blob = []
    for _ in range(rows):
        if rng.random() < 0.1:
            blob.append(None)
        else:
            b = bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
            if rng.random() < 0.3:
                b += b"\xff\xfe"  # never valid UTF-8
            blob.append(b)
    return {
        "id": [rng.randrange(-2**40, 2**40) for _ in range(rows)],
        "score": [None if rng.random() < 0.2 else rng.uniform(-1e3, 1e3) for _ in range(rows)],
        "text": text,
        "title": title,
        "tags": [[random_text(rng, 5) for _ in range(rng.randint(0, 3))] for _ in range(rows)],
        "blob": blob,
    }


SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("score", pa.float64()),
    pa.field("text", pa.string()),
    pa.field("title", pa.string(), nullable=False),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("blob", pa.binary()),
])


def write(path, cols, codec, page_version, encoding, group):
    table = pa.table(cols, schema=SCHEMA)
    opts = dict(compression=codec, data_page_version=page_version, row_group_size=group,
                data_page_size=1024, write_statistics=True)
    if encoding == "dictionary":
        opts.update(use_dictionary=STRING_COLUMNS, dictionary_pagesize_limit=1024)
    else:
        opts.update(use_dictionary=False,
                    column_encoding={c: encoding for c in STRING_COLUMNS})
    pq.write_table(table, path, **opts)

    meta = pq.ParquetFile(path).metadata
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    enc = {c: sorted({e for g in range(meta.num_row_groups)
                      for e in meta.row_group(g).column(names.index(c)).encodings})
           for c in STRING_COLUMNS}
    compression = {meta.row_group(g).column(j).compression
                   for g in range(meta.num_row_groups) for j in range(meta.num_columns)}
    want_codec = "UNCOMPRESSED" if codec == "none" else codec.upper()
    assert compression == {want_codec}, (path, compression)
    assert meta.num_row_groups >= 3, (path, meta.num_row_groups)
    for c in STRING_COLUMNS:
        if encoding == "dictionary":
            assert any("DICTIONARY" in e for e in enc[c]), (path, c, enc[c])
        else:
            assert encoding in enc[c], (path, c, enc[c])
    return {"codec": want_codec, "page_version": page_version, "encoding": encoding,
            "row_groups": meta.num_row_groups, "encodings": enc}


def expected_json(cols, rows, meta):
    def value(v):
        if v is None:
            return None
        return {"hex": v.hex()} if isinstance(v, bytes) else v
    out = {c: [value(v) for v in cols[c]] for c in STRING_COLUMNS}
    out["id"] = [str(v) for v in cols["id"]]
    return {"rows": rows, "columns": out, "meta": meta}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--big", type=int, default=0, help="write only big.parquet with this many rows")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    if a.big:
        cols = columns(rng, a.big, a.big // 8 + 1, False)
        cols["text"] = [t if t is not None else random_text(rng, 200) for t in cols["text"]]
        write(os.path.join(a.out, "big.parquet"), cols, "zstd", "2.0", "dictionary", 65536)
        print(os.path.join(a.out, "big.parquet"))
        return
    n = 0
    for codec in CODECS:
        for page_version in PAGE_VERSIONS:
            for encoding in ENCODINGS:
                rows, group = rng.randint(180, 320), rng.randint(40, 70)
                cols = columns(rng, rows, group, long_value=codec != "none")
                name = f"pyarrow_{codec}_v{page_version[0]}_{encoding.lower()}"
                path = os.path.join(a.out, name + ".parquet")
                meta = write(path, cols, codec, page_version, encoding, group)
                with open(os.path.join(a.out, name + ".json"), "w") as f:
                    json.dump(expected_json(cols, rows, meta), f, ensure_ascii=False)
                n += 1
    print(f"wrote {n} files to {a.out} (pyarrow {pa.__version__}, seed {a.seed})")


if __name__ == "__main__":
    main()
