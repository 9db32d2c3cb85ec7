#!/usr/bin/env bash
# Runs a pstrain job: S parameter servers (PS) and N workers, on this machine or across hosts
# (ssh), started in order, watched together and stopped together, with one exit code. With no
# arguments it installs what is missing, builds pstrain and runs the default job
# (configs/fashion_mlp.cfg). See --help, docs/operations.md and docs/cluster.md. `launch.sh status
# [RUNDIR]` and `launch.sh stop [RUNDIR]` look at and stop a running job (pstrain_launch/status.py);
# `launch.sh plot [RUNDIR]` draws its curves (pstrain_launch/plot.py).
#
# This script does the setup (launch/setup.sh: packages and build), then hands over to the
# launcher's core, the Python package launch/pstrain_launch (placement, commands, supervision).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly REPO EXIT_SETUP=3

no_setup=${PSTRAIN_NO_SETUP:-0}
case ${1:-} in
  status | stop | plot) no_setup=1 ;;  # a job's run directory: nothing to build
esac
for arg in "$@"; do
  case $arg in
    --) break ;;
    --no-setup | -h | --help | --dry-run) no_setup=1 ;;
  esac
done

if [[ $no_setup != 1 ]]; then
  # shellcheck source=setup.sh
  source "$REPO/launch/setup.sh"
  pstrain_setup </dev/null || { echo "launch: setup failed" >&2; exit "$EXIT_SETUP"; }
fi
if ! command -v python3 >/dev/null; then
  echo "launch: python3 is missing; run launch/launch.sh without --no-setup to install it" >&2
  exit "$EXIT_SETUP"
fi
PYTHONPATH=$REPO/launch${PYTHONPATH:+:$PYTHONPATH} exec python3 -m pstrain_launch "$@"
