#!/usr/bin/env bash
# Runs a Python test with the tests' Python: the venv tests/run.sh makes from Debian's python3 (it
# sees Debian's numpy and matplotlib) and fills with what Debian lacks, from PyPI (tensorboard,
# safetensors, torch), in PSTRAIN_TEST_VENV (default ~/.cache/pstrain/test-venv, outside the
# checkout: installed once per machine). Without it, python3: the tests that need what it adds
# then skip (exit 77), each saying what is missing.
#
#   bash tests/python.sh SCRIPT [ARGS...]
#   bash tests/python.sh --venv          prints the venv's directory
venv=${PSTRAIN_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pstrain/test-venv}
if [[ ${1:-} == --venv ]]; then
  printf '%s\n' "$venv"
  exit 0
fi
if [[ -x $venv/bin/python3 ]]; then
  exec "$venv/bin/python3" "$@"
fi
exec python3 "$@"
