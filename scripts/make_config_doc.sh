#!/usr/bin/env bash
# Regenerates docs/config.md from `lmtrain train --help-config` (a CLI test checks they match).
set -euo pipefail
bin=${1:-build/lmtrain}
{
  cat <<'HEAD'
# Config keys

Every key of a run config, its type, its default and what it does. This page is the output of
`lmtrain train --help-config`; regenerate it with `scripts/make_config_doc.sh` when a key changes.
Any key can be overridden on the command line with `--set section.key=value`; list elements are
addressed by index (`--set data.sources.0.path=my.txt`) or replaced whole
(`--set 'data.sources=[{path: a.txt}]'`).

```
HEAD
  "$bin" train --help-config
  echo '```'
} > docs/config.md
