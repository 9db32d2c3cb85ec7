#!/usr/bin/env bash
# launch/launch.sh under a real single-node Slurm (tests/cluster/slurm_node.sh: munged,
# slurmctld, slurmd from Debian) and under Debian's Open MPI: sbatch launch/pstrain.sbatch and
# launch.sh inside salloc both train and report test_accuracy; launch.sh --launcher mpirun trains
# to the parameters of the same job run locally; a failing worker is named under both; Python
# workers (--worker-cmd) under salloc and mpirun equal the local run.
#
#   tests/cluster/check_slurm_mpi.sh      one line per check; exit 1 if any failed,
#                                         77 (skipped, with the reason) where impossible
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
launch=$repo/launch/launch.sh
# shellcheck source=slurm_node.sh
source "$here/slurm_node.sh"
# shellcheck source=../launch/check_lib.sh
source "$repo/tests/launch/check_lib.sh"

why=$(slurm_node_unavailable)
command -v mpirun >/dev/null || why=${why:-needs mpirun (openmpi-bin)}
if [[ -n $why ]]; then
  echo "check_slurm_mpi: SKIPPED: $why"
  exit 77
fi
build=${PSTRAIN_BUILD_DIR:-$repo/build}
export PSTRAIN_BUILD_DIR=$build
work=$(mktemp -d "${TMPDIR:-/tmp}/check_slurm_mpi.XXXXXX")
trap 'slurm_node_down' EXIT
slurm_node_up "$work/slurm" || { echo "check_slurm_mpi: could not start the Slurm node"; exit 1; }
marker=$work/cache
job=(--hidden 16 --optimizer momentum --lr 0.05 --timeout 30 --cache-dir "$marker")

# start CASE COMMAND...: runs COMMAND in the background with its output in $out.
start() {
  case=$1
  shift
  out=$work/$case.out
  : >"$out"
  "$@" >"$out" 2>&1 &
  lpid=$!
}

case_sbatch() {
  start sbatch sbatch --wait --output="$work/sbatch-%j.out" --chdir="$repo" "$repo/launch/pstrain.sbatch" \
    --run-dir "$work/sbatch-run" --base-port "$(free_port)" -- "${job[@]}" --steps 20 --batch-size 8
  finish 180
  expect_exit 0 180
  out=$(ls "$work"/sbatch-*.out 2>/dev/null | head -n1)
  check "the batch job's output names the step's placement" out_has '^launch: placement \(1 host\(s\), one srun step\):$'
  check "chief's summary with test_accuracy, prefixed" out_has '^\[w0@[^]]+\] .*summary: .*test_accuracy='
  check "the PS ran as rank 0 and exited on its own" out_has '^\[ps0@[^]]+\] .*all 2 workers done'
}

case_salloc() {
  start salloc salloc --ntasks=3 "$launch" --no-setup --run-dir "$work/salloc-run" --base-port "$(free_port)" \
    --num-workers 2 -- "${job[@]}" --steps 20 --batch-size 8
  finish 180
  expect_exit 0 180
  check "auto picks slurm inside the allocation" out_has '^launch: placement \(1 host\(s\), one srun step\):$'
  check "chief's summary with test_accuracy" out_has '^\[w0@[^]]+\] .*summary: .*test_accuracy='
  check "per-process logs in the run directory" file_has "$work/salloc-run/w1.log" 'w1: done'
  local shown
  shown=$(bash "$launch" status "$work/salloc-run")
  check "status: every process through the one srun step, ended" \
    eval 'grep -Eq "^  w1@[^ ]+ +on [^ ]+  pid [0-9]+ \(its slurm pid\)  exited with status 0\$" <<<"$shown"'
}

case_salloc_worker_fails() {
  start salloc_fails salloc --ntasks=3 "$launch" --no-setup --run-dir "$work/salloc-fail" --base-port "$(free_port)" \
    --num-workers 2 -- "${job[@]}" --steps 20 --batch-size 8 --data-dir "$work/no-such-dir"
  finish 120
  expect_exit 1 120
  check "names the failed workers" out_has '^launch: (w[01]@[^ ]+ ?)+ died: Exited with exit code 1; stopping all$'
}

case_mpirun_matches_local() {
  start local_reference "$launch" --no-setup --run-dir "$work/local-run" --num-ps 1 --num-workers 1 \
    -- "${job[@]}" --steps 20 --batch-size 24 --save-params "$work/local-params"
  finish 120
  check "local reference job exits 0 (got $rc)" test "$rc" -eq 0
  start mpirun "$launch" --no-setup --launcher mpirun --run-dir "$work/mpirun-run" --base-port "$(free_port)" \
    --num-ps 2 --num-workers 3 -- "${job[@]}" --steps 20 --batch-size 8 --save-params "$work/mpirun-params"
  finish 120
  expect_exit 0 120
  check "placement says one mpirun" out_has '^launch: placement \(1 host\(s\), one mpirun\):$'
  check "ranks' output mapped to names" out_has '^\[ps1\] .*all 3 workers done'
  check "parameters equal the local run's" python3 "$here/compare_params.py" "$work/local-params" "$work/mpirun-params"
  local shown
  shown=$(bash "$launch" status "$work/mpirun-run")
  check "status: the 5 processes through the one mpirun, ended" \
    eval 'test "$(grep -cE "^  (ps[01]|w[0-2]) +on [^ ]+  pid [0-9]+ \(its mpirun pid\)  exited with status 0\$" <<<"$shown")" -eq 5'
}

case_mpirun_worker_fails() {
  start mpirun_fails "$launch" --no-setup --launcher mpirun --run-dir "$work/mpirun-fail" --base-port "$(free_port)" \
    --num-workers 2 -- "${job[@]}" --steps 20 --data-dir "$work/no-such-dir"
  finish 120
  expect_exit 1 120
  check "names a failed worker" out_has '^launch: w[01] died: exited with a non-zero status; stopping all$'
}

# One command for every rank, roles from the environment only (no --index, --num-workers or
# --ps-hosts): the first --num-ps ranks become PS shards, the rest workers (docs/cluster.md).
case_roles_from_environment() {
  local bin=$build/pstrain-worker port
  port=$(free_port)
  start srun_roles salloc --ntasks=4 srun --ntasks=4 --label "$bin" --role auto --num-ps 1 --base-port "$port" \
    "${job[@]}" --steps 20 --batch-size 8 --save-params "$work/srun-roles-params"
  finish 120
  expect_exit 0 120
  check "srun rank 0 became the PS from SLURM_PROCID" out_has '^0: .*ps0: role ps \(Slurm\), index 0 of 1 \(Slurm\)'
  check "srun rank 3 became worker 2" out_has '^3: .*w2: role worker \(Slurm\), index 2 of 3 \(Slurm\)'
  port=$(free_port)
  start mpirun_roles mpirun --allow-run-as-root --oversubscribe -np 4 "$bin" --role auto --num-ps 1 --base-port "$port" \
    "${job[@]}" --steps 20 --batch-size 8 --save-params "$work/mpirun-roles-params"
  finish 120
  expect_exit 0 120
  check "mpirun rank 0 became the PS from OMPI_COMM_WORLD_RANK" out_has 'ps0: role ps \(Open MPI\), index 0 of 1 \(Open MPI\)'
  check "srun and mpirun trained the same parameters" \
    python3 "$here/compare_params.py" "$work/srun-roles-params" "$work/mpirun-roles-params"
}

# Python workers (launch.sh --worker-cmd, tests/python/numpy_worker.py) under salloc (one srun
# step) and under mpirun: each the bits of the same job run locally.
case_python_workers() {
  case=python_workers
  local python
  python=$(python_with_package) || { echo "skip  $case: $python"; return; }
  local py=("$python" "$repo/tests/python/numpy_worker.py")
  local pyjob=(--optimizer adam --lr 0.01 --batch-size 16 --seed 5 --timeout 30 --steps 20 --cache-dir "$marker")
  start py_local "$launch" --no-setup --run-dir "$work/py-local-run" --num-ps 2 --num-workers 2 \
    --worker-cmd "${py[*]} $work/py-local.npy --" -- "${pyjob[@]}"
  finish 120
  check "python: local reference job exits 0 (got $rc)" test "$rc" -eq 0
  start py_salloc salloc --ntasks=4 "$launch" --no-setup --run-dir "$work/py-salloc-run" --base-port "$(free_port)" \
    --num-ps 2 --num-workers 2 --worker-cmd "${py[*]} $work/py-salloc.npy --" -- "${pyjob[@]}"
  finish 120
  expect_exit 0 120
  check "python: one srun step" out_has '^launch: placement \(1 host\(s\), one srun step\):$'
  check "python: srun ran the workers' command with the package" \
    file_has "$work/py-salloc-run/slurm.multiprog" "^3 env PYTHONPATH=$build/python $python "
  check "python: srun's parameters equal the local run's, bit for bit" cmp -s "$work/py-local.npy" "$work/py-salloc.npy"
  start py_mpirun "$launch" --no-setup --launcher mpirun --run-dir "$work/py-mpirun-run" --base-port "$(free_port)" \
    --num-ps 2 --num-workers 2 --worker-cmd "${py[*]} $work/py-mpirun.npy --" -- "${pyjob[@]}"
  finish 120
  expect_exit 0 120
  check "python: ranks' output mapped to names" out_has '^\[w1\] .*w1: registered with 2 PS shard'
  check "python: mpirun's parameters equal the local run's, bit for bit" cmp -s "$work/py-local.npy" "$work/py-mpirun.npy"
}

main() {
  case_roles_from_environment
  case_sbatch
  case_salloc
  case_salloc_worker_fails
  case_mpirun_matches_local
  case_mpirun_worker_fails
  case_python_workers
  report_and_exit check_slurm_mpi
}

main
