#!/usr/bin/env bash
# Runs every qforge command of README.md's ```sh blocks from the repository root and checks the
# figures and messages the README states for the fixture models (../shared/fixtures); prints
# PASS / FAIL (with the first error line) / SKIP (with the reason) per command and figure, and
# ends with "check_readme: N passed, M failed, K skipped in T s". Exit 0 when nothing failed,
# 77 when the fixtures are absent. Needs build/qforge (scripts/build.sh) and python3.
#
#   scripts/check_readme.sh            everything (commands, then figures)
#   scripts/check_readme.sh --fast     skip commands marked '# check_readme: slow (...)' and the
#                                      slow figure checks (what the GoogleTest runs)
#   scripts/check_readme.sh --list     the extracted commands as they would run, nothing run
#   scripts/check_readme.sh --only RE  only commands / figure checks matching the regex
#   scripts/check_readme.sh -v         also the rewrites and the measured figures
#
# In README.md, a command that cannot run here (apt, a GPU, a network, a model that takes
# minutes) carries '# check_readme: skip (reason)' on its line or the comment line above it;
# the script lists it with the reason. See scripts/check_readme.py for the rules (optional
# [--flags], placeholders, scratch outputs).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/check_readme.py "$@"
