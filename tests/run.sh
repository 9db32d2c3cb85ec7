#!/usr/bin/env bash
# Runs every test: installs missing Debian packages, configures (Release, once) and builds
# pstrain with launch/setup.sh, then runs ctest. Arguments go to ctest, e.g.
#   tests/run.sh -R Mirrored        tests/run.sh -R JobTest -V
# Exit status: ctest's, or setup's when the install or the build fails.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR/..
# shellcheck source=launch/setup.sh
source "$repo/launch/setup.sh"
# What only the tests use (tests/cluster/): real sshd in network namespaces, a single-node Slurm,
# Open MPI; pgrep.
PSTRAIN_PACKAGES+=(openssh-server openssh-client iproute2 procps slurmctld slurmd slurm-client munge
  openmpi-bin)
pstrain_setup </dev/null || exit $?
exec ctest --test-dir "$(pstrain_build_dir)" --output-on-failure -j2 "$@" </dev/null
