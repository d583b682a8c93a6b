# ctest version_agrees: what a build says about its version equals project(VERSION), the one
# source (CMakeLists.txt): `stallscope --version` and the Python package's _version.py.
#   cmake -DBIN=<stallscope> -DVERSION=<x.y.z> -DPY_PKG=<build>/python/stallscope -P this
execute_process(COMMAND ${BIN} --version OUTPUT_VARIABLE out RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR NOT out STREQUAL "stallscope ${VERSION}")
  message(FATAL_ERROR "${BIN} --version: '${out}' (exit ${rc}), expected 'stallscope ${VERSION}'")
endif()
file(STRINGS ${PY_PKG}/_version.py line REGEX "^__version__ = ")
if(NOT line STREQUAL "__version__ = \"${VERSION}\"")
  message(FATAL_ERROR "${PY_PKG}/_version.py: '${line}', expected __version__ = \"${VERSION}\"")
endif()
message(STATUS "stallscope ${VERSION}: binary and Python package agree")
