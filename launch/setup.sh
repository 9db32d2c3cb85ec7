# shellcheck shell=bash
# Installs the Debian packages pstrain needs and builds it. Sourced (never executed) by
# launch/launch.sh and tests/run.sh so the logic exists once; sourcing only defines functions.
#
#   source launch/setup.sh && pstrain_setup     # packages, then configure (once) and build
#
# Environment:
#   PSTRAIN_BUILD_DIR=DIR   build directory (default: <repo>/build)
#   PSTRAIN_NO_INSTALL=1    skip the package step (not Debian, or packages managed elsewhere), and
#                           pyarrow's install (a venv that has it is still used)
#   PSTRAIN_PARQUET=auto|on|off   Parquet (pstrain_parquet_args below); default auto
#   PSTRAIN_ARROW_VENV=DIR  the venv holding pyarrow (default ~/.cache/pstrain/arrow-venv)
# Never reads standard input. Functions return non-zero (never exit) after printing why.

declare -g PSTRAIN_REPO
PSTRAIN_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Build and run-time dependencies: libraries, test framework and the default data set; numpy for
# tools/ctr_score.py and the Python package; pybind11 and Python's headers for the package's
# module (worker/python/, docs/python.md).
declare -ga PSTRAIN_PACKAGES=(python3 python3-numpy libzmq3-dev cppzmq-dev libmsgpack-cxx-dev
  libboost-program-options-dev libgtest-dev libdnnl-dev zlib1g-dev nlohmann-json3-dev
  dataset-fashion-mnist pybind11-dev python3-dev python3-venv)
# Wanted, not needed: matplotlib for the launcher's plots (launch.sh plot). A failed install is a
# warning, never a failed setup.
declare -ga PSTRAIN_OPTIONAL_PACKAGES=(python3-matplotlib)
# Tools: only installed when the command is missing (a cmake from elsewhere is fine).
declare -gA PSTRAIN_TOOLS=([cmake]=cmake [g++]=g++ [make]=make)

pstrain_build_dir() {
  printf '%s\n' "${PSTRAIN_BUILD_DIR:-$PSTRAIN_REPO/build}"
}

# Prints the packages of PSTRAIN_PACKAGES/PSTRAIN_TOOLS that are not installed, one a line.
pstrain_missing_packages() {
  local pkg tool
  for pkg in "${PSTRAIN_PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null) == installed ]] ||
      printf '%s\n' "$pkg"
  done
  for tool in "${!PSTRAIN_TOOLS[@]}"; do
    command -v "$tool" >/dev/null || printf '%s\n' "${PSTRAIN_TOOLS[$tool]}"
  done
}

# True when apt knows an installation candidate for every package given.
pstrain_apt_knows() {
  local pkg
  for pkg in "$@"; do
    apt-cache show --no-all-versions "$pkg" >/dev/null 2>&1 || return 1
  done
}

# Runs apt-get noninteractively, as root or through passwordless sudo.
pstrain_apt_get() {
  local -a prefix=()
  if ((EUID != 0)); then
    prefix=(sudo -n)
  fi
  "${prefix[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y "$@" </dev/null
}

pstrain_install_packages() {
  local -a missing
  mapfile -t missing < <(pstrain_missing_packages)
  ((${#missing[@]})) || return 0
  echo "setup: installing missing packages: ${missing[*]}"
  if ((EUID != 0)) && ! sudo -n true 2>/dev/null </dev/null; then
    echo "setup: error: packages missing and not root (no passwordless sudo); run:" >&2
    echo "  sudo apt-get install ${missing[*]}" >&2
    echo "  or set PSTRAIN_NO_INSTALL=1 / use --no-setup if they are installed elsewhere" >&2
    return 1
  fi
  local updated=0
  if ! pstrain_apt_knows "${missing[@]}"; then
    echo "setup: refreshing package lists (apt-get update)"
    pstrain_apt_get update || { echo "setup: error: apt-get update failed" >&2; return 1; }
    updated=1
  fi
  pstrain_apt_get install --no-install-recommends "${missing[@]}" && return 0
  if ((!updated)); then  # stale package lists: refresh once and retry
    echo "setup: install failed; refreshing package lists and retrying"
    pstrain_apt_get update && pstrain_apt_get install --no-install-recommends "${missing[@]}" &&
      return 0
  fi
  echo "setup: error: could not install: ${missing[*]} (see apt-get's messages above)" >&2
  return 1
}

# Installs PSTRAIN_OPTIONAL_PACKAGES where it can; says what it could not, and returns 0.
pstrain_install_optional() {
  local -a missing=()
  local pkg
  for pkg in "${PSTRAIN_OPTIONAL_PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null) == installed ]] || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  if ((EUID != 0)) && ! sudo -n true 2>/dev/null </dev/null; then
    echo "setup: optional packages missing (plots): ${missing[*]}; sudo apt-get install ${missing[*]}"
  elif ! pstrain_apt_knows "${missing[@]}"; then
    echo "setup: warning: apt knows no ${missing[*]} (optional: plots); going on without" >&2
  else
    echo "setup: installing optional packages (plots): ${missing[*]}"
    pstrain_apt_get install --no-install-recommends "${missing[@]}" ||
      echo "setup: warning: could not install ${missing[*]} (optional: plots); going on without" >&2
  fi
  return 0
}

pstrain_check_packages() {
  if [[ ${PSTRAIN_NO_INSTALL:-0} == 1 ]]; then
    echo "setup: PSTRAIN_NO_INSTALL=1: not checking packages"
  elif ! command -v dpkg-query >/dev/null; then
    echo "setup: not a Debian system (no dpkg-query); install the equivalents of:" \
         "${PSTRAIN_PACKAGES[*]} cmake g++ make"
  else
    echo "setup: checking packages (dpkg-query)"
    pstrain_install_packages && pstrain_install_optional
  fi
}

# CMake arguments that put ccache in front of the compilers, where it is installed (tests/run.sh
# installs it: CI's three builds of a clean clone then reuse the objects of the last run on the
# machine). Paths are taken relative to the checkout, so a clone elsewhere finds them too.
pstrain_compiler_launcher() {
  command -v ccache >/dev/null || return 0
  export CCACHE_BASEDIR=$PSTRAIN_REPO CCACHE_NOHASHDIR=1
  printf '%s\n' -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
}

# Parquet (docs/data.md, "Parquet"): Apache Arrow's C++ library, which Debian 12 does not package,
# from pyarrow's wheel on PyPI (it ships the library and its headers), in a venv outside the
# checkout, PSTRAIN_ARROW_VENV, made once per machine; the binaries find the library there by
# RPATH, so the venv must stay. Prints the CMake arguments, one a line (cmake/pstrain_arrow.cmake);
# says on standard error what it installs. PSTRAIN_PARQUET=on: no pyarrow fails the setup (CI:
# tests/run.sh); auto: a warning, and a build without Parquet; off: none.
declare -g PSTRAIN_PYARROW_SPEC='pyarrow>=24'
pstrain_parquet_args() {
  local mode=${PSTRAIN_PARQUET:-auto} venv python
  mode=${mode,,}
  case $mode in
    off) printf '%s\n' -DPSTRAIN_PARQUET=OFF; return 0 ;;
    on | auto) ;;
    *) echo "setup: error: PSTRAIN_PARQUET=$mode: give on, off or auto" >&2; return 1 ;;
  esac
  venv=${PSTRAIN_ARROW_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pstrain/arrow-venv}
  python=$venv/bin/python3
  if ! "$python" -c 'import pyarrow' 2>/dev/null </dev/null && [[ ${PSTRAIN_NO_INSTALL:-0} != 1 ]]; then
    echo "setup: installing $PSTRAIN_PYARROW_SPEC (Arrow's C++ library, for Parquet) into $venv (PyPI; once per machine)" >&2
    { mkdir -p "$(dirname "$venv")" && { [[ -x $python ]] || python3 -m venv "$venv"; } &&
      "$python" -m pip install --quiet --disable-pip-version-check "$PSTRAIN_PYARROW_SPEC"; } </dev/null >&2
  fi
  if "$python" -c 'import pyarrow' 2>/dev/null </dev/null; then
    printf '%s\n' "-DPSTRAIN_PARQUET=${mode^^}" "-DPSTRAIN_ARROW_PYTHON=$python"
  elif [[ $mode == on ]]; then
    echo "setup: error: PSTRAIN_PARQUET=on, but $venv has no pyarrow (see the messages above)" >&2
    return 1
  else
    echo "setup: warning: no pyarrow in $venv: building without Parquet (PSTRAIN_PARQUET=off: not tried)" >&2
    printf '%s\n' -DPSTRAIN_PARQUET=AUTO
  fi
}

# True when the CMake cache file $1 holds NAME=VALUE ($2) as it is.
pstrain_cache_has() {
  local name=${2%%=*} value=${2#*=}
  awk -v n="$name:" -v v="$value" 'index($0, n) == 1 && substr($0, index($0, "=") + 1) == v {found = 1}
    END {exit !found}' "$1"
}

# Configures the build directory once (Release), then builds incrementally; again when the
# Parquet arguments changed (pyarrow installed since).
pstrain_build() {
  local build_dir jobs
  build_dir=$(pstrain_build_dir)
  jobs=$(nproc 2>/dev/null || echo 2)
  # CUDA code is always compiled where the toolkit exists, even when nvcc is not on PATH.
  if [[ -z ${CUDACXX:-} ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
  # Also after a configure that failed half way (a cache but no build system), e.g. before a
  # missing package was installed.
  local parquet_text arg configure=0
  parquet_text=$(pstrain_parquet_args) || return 1
  local -a parquet launcher
  mapfile -t parquet <<<"$parquet_text"
  if [[ ! -f $build_dir/CMakeCache.txt || (! -f $build_dir/Makefile && ! -f $build_dir/build.ninja) ]]; then
    configure=1
  else
    for arg in "${parquet[@]}"; do
      pstrain_cache_has "$build_dir/CMakeCache.txt" "${arg#-D}" || configure=1
    done
  fi
  if ((configure)); then
    echo "setup: configuring $build_dir (cmake, Release)"
    mapfile -t launcher < <(pstrain_compiler_launcher)
    cmake -S "$PSTRAIN_REPO" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${parquet[@]}" </dev/null ||
      { echo "setup: error: cmake configure failed" >&2; return 1; }
  fi
  pstrain_compiler_launcher >/dev/null  # the environment ccache reads, for a directory configured before
  echo "setup: building in $build_dir (cmake --build, -j$jobs)"
  cmake --build "$build_dir" -j"$jobs" </dev/null ||
    { echo "setup: error: build failed" >&2; return 1; }
}

pstrain_setup() {
  pstrain_check_packages && pstrain_build
}
