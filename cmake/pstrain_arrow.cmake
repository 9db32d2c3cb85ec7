# Parquet (docs/data.md, "Parquet"): Apache Arrow's C++ library, taken from pyarrow's wheel, which
# ships it with its headers (Debian 12 packages no Arrow). PSTRAIN_ARROW_PYTHON is a Python whose
# pyarrow provides them (launch/setup.sh installs pyarrow into a venv of its own and passes it);
# without it, python3 on PATH is asked. Sets PSTRAIN_HAVE_PARQUET and, when ON, the imported
# targets pstrain::arrow and pstrain::parquet (the binaries find them by RPATH: the venv must stay).
set(PSTRAIN_PARQUET AUTO CACHE STRING "Read Parquet files with pyarrow's Arrow C++ library: AUTO (when found), ON (required), OFF")
set_property(CACHE PSTRAIN_PARQUET PROPERTY STRINGS AUTO ON OFF)
set(PSTRAIN_ARROW_PYTHON "" CACHE FILEPATH "A Python interpreter with pyarrow >= 24 (its Arrow C++ headers and libraries)")

set(PSTRAIN_HAVE_PARQUET OFF)
set(_pstrain_arrow_why "not asked for")
if(NOT PSTRAIN_PARQUET STREQUAL "OFF")
  set(_py "${PSTRAIN_ARROW_PYTHON}")
  if(NOT _py)
    find_program(_py NAMES python3)
  endif()
  if(_py)
    execute_process(
      COMMAND "${_py}" -c "import pyarrow; print(pyarrow.__version__.split('.')[0]); print(pyarrow.get_include()); print(pyarrow.get_library_dirs()[0])"
      OUTPUT_VARIABLE _out RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  else()
    set(_rc 1)
  endif()
  if(NOT _rc EQUAL 0)
    set(_pstrain_arrow_why "no pyarrow in ${_py} (launch/setup.sh installs it; or -DPSTRAIN_ARROW_PYTHON=PYTHON)")
  else()
    string(REPLACE "\n" ";" _out "${_out}")
    list(GET _out 0 _major)
    list(GET _out 1 _inc)
    list(GET _out 2 _libdir)
    file(GLOB _arrow_so "${_libdir}/libarrow.so.${_major}00")
    file(GLOB _parquet_so "${_libdir}/libparquet.so.${_major}00")
    if(_major LESS 24)
      set(_pstrain_arrow_why "pyarrow ${_major} in ${_py} is older than 24")
    elseif(NOT _arrow_so OR NOT _parquet_so OR NOT EXISTS "${_inc}/parquet/arrow/reader.h")
      set(_pstrain_arrow_why "pyarrow in ${_py} lacks libarrow.so.${_major}00, libparquet.so.${_major}00 or its headers")
    else()
      set(PSTRAIN_HAVE_PARQUET ON)
      set(PSTRAIN_ARROW_PYTHON_USED "${_py}")  # tests/launch/parquet_check.py writes Parquet with it
    endif()
  endif()
endif()
if(PSTRAIN_HAVE_PARQUET)
  add_library(pstrain::arrow SHARED IMPORTED)
  set_target_properties(pstrain::arrow PROPERTIES IMPORTED_LOCATION "${_arrow_so}" INTERFACE_INCLUDE_DIRECTORIES "${_inc}")
  add_library(pstrain::parquet SHARED IMPORTED)
  set_target_properties(pstrain::parquet PROPERTIES IMPORTED_LOCATION "${_parquet_so}"
                        INTERFACE_LINK_LIBRARIES pstrain::arrow)
  message(STATUS "pstrain: Parquet ON (pyarrow ${_major}: ${_libdir})")
elseif(PSTRAIN_PARQUET STREQUAL "ON")
  message(FATAL_ERROR "pstrain: -DPSTRAIN_PARQUET=ON, but ${_pstrain_arrow_why}")
else()
  message(STATUS "pstrain: Parquet OFF (PSTRAIN_PARQUET=${PSTRAIN_PARQUET}; ${_pstrain_arrow_why})")
endif()
