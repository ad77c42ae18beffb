#!/usr/bin/env bash
# Fails when nbdev_export or nbdev_clean would change a tracked file (the library or a notebook is out of sync).
# Committed outputs are fine: chapters are committed with the outputs `make chapters` gives them, already cleaned, and
# nbdev_clean keeps outputs (clear_all = False); it only strips execution counts and metadata, which must not be committed.
# Whether every chapter has them, and whether they are still what a re-execution gives, is checked by tests/test_notebooks.py
# (every chapter for structure, a rotating sample of two re-executed).
set -euo pipefail
bin=${1:-.venv/bin}
state() { git diff --no-ext-diff HEAD -- . | sha256sum; git status --porcelain --untracked-files=no; }
before=$(state)
$bin/nbdev_export
$bin/nbdev_clean
after=$(state)
if [ "$before" != "$after" ]; then
  echo "nbdev_export / nbdev_clean changed tracked files: run them, review the diff and commit." >&2
  git status --porcelain --untracked-files=no >&2
  exit 1
fi
echo "notebooks and library in sync"
