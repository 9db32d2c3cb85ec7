#!/usr/bin/env bash
# Runs a Python test with the tests' Python: <repo>/.venv, which tests/run.sh makes from Debian's
# python3 (it sees Debian's numpy and matplotlib) and fills with what Debian lacks, from PyPI
# (tensorboard, safetensors). Without it, python3: the tests that need what it adds then skip
# (exit 77), each saying what is missing.
#
#   bash tests/python.sh SCRIPT [ARGS...]
venv=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv
if [[ -x $venv/bin/python3 ]]; then
  exec "$venv/bin/python3" "$@"
fi
exec python3 "$@"
