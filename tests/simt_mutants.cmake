# Mutants of the kernels' collectives, one CTest entry each (docs/architecture.md, "The
# SIMT executor"). Every __syncthreads, __syncwarp, warp shuffle and vote called in
# kernels/cuda/device/*.cuh is found here at configure time; its entry runs the SIMT suite
# (the tests/kernels/cuda_simt executables) with the executor treating that one call as
# edited (SIMT_MUTANT, tests/support/simt/mutant.hpp):
#   __syncthreads   removed
#   __syncwarp      removed, mask-halved
#   shuffle, vote   no-exchange (each lane keeps its own value), mask-halved
# and passes only when a test fails on it, having reached it (tests/simt/run_mutant.sh).
# Nothing is recompiled: the entries need only the SIMT test executables. Label:
# simt_mutant. Names: simt_mutant:<file>:<line>[:<columns>]:<kind>, the part after
# "simt_mutant:" being the SIMT_MUTANT value that reproduces it by hand.

set(_simt_device_dir ${PROJECT_SOURCE_DIR}/kernels/cuda/device)
set(_simt_call_regex
    "(__syncthreads|__syncwarp|__shfl_sync|__shfl_up_sync|__shfl_down_sync|__shfl_xor_sync|__ballot_sync|__any_sync|__all_sync)")

# The collective calls of `file` as "line|from|to|name" in `out`: from is the column of the
# name, to that of its '(' (GCC's call site is the one, clang's the other). A name on a
# comment line, after a //, or not followed by '(' is no call.
function(_simt_collective_calls file out)
  file(READ ${file} text)
  set(calls)
  set(rest "${text}")
  set(offset 0)  # of rest in text
  while(TRUE)
    string(REGEX MATCH "${_simt_call_regex}" name "${rest}")
    if(name STREQUAL "")
      break()
    endif()
    string(FIND "${rest}" "${name}" pos)
    string(LENGTH "${name}" len)
    math(EXPR at "${offset} + ${pos}")
    math(EXPR skip "${pos} + ${len}")
    string(SUBSTRING "${rest}" ${skip} -1 rest)
    math(EXPR offset "${offset} + ${skip}")
    string(SUBSTRING "${text}" 0 ${at} before)
    string(FIND "${before}" "\n" line_start REVERSE)  # -1 on the first line
    math(EXPR prefix_start "${line_start} + 1")
    string(SUBSTRING "${before}" ${prefix_start} -1 prefix)
    if(prefix MATCHES "//|/\\*" OR prefix MATCHES "^[ \t]*\\*" OR
       NOT rest MATCHES "^[ \t]*(<[^>;(]*>)?[ \t]*\\(")
      continue()
    endif()
    string(REGEX REPLACE "[^\n]" "" newlines "${before}")
    string(LENGTH "${newlines}" line)
    math(EXPR line "${line} + 1")
    math(EXPR from "${at} - ${line_start}")
    string(FIND "${rest}" "(" paren)
    math(EXPR to "${from} + ${len} + ${paren}")
    list(APPEND calls "${line}|${from}|${to}|${name}")
  endwhile()
  set(${out} "${calls}" PARENT_SCOPE)
endfunction()

# The device headers `file` includes, directly or not (its own name included if it is one).
function(_simt_device_headers file out)
  set(seen)
  set(todo ${file})
  while(todo)
    list(POP_FRONT todo f)
    if(f IN_LIST seen OR NOT EXISTS ${f})
      continue()
    endif()
    list(APPEND seen ${f})
    file(STRINGS ${f} includes REGEX "^#include \"")
    foreach(inc ${includes})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" inc "${inc}")
      foreach(dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/support)
        if(EXISTS ${dir}/${inc})
          list(APPEND todo ${dir}/${inc})
        endif()
      endforeach()
    endforeach()
  endwhile()
  list(FILTER seen INCLUDE REGEX "^${_simt_device_dir}/[^/]+\\.cuh$")
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()

# Kernel code with collectives outside kernels/cuda/device would escape its mutants (and
# the SIMT executor: only device/*.cuh compiles for the host). The launchers sit in
# kernels/cuda/ and its op folders (image/, sequence/, loss/), all scanned.
file(GLOB_RECURSE _simt_cuda_sources ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cuh)
list(FILTER _simt_cuda_sources EXCLUDE REGEX "^${_simt_device_dir}/")
foreach(src ${_simt_cuda_sources})
  _simt_collective_calls(${src} calls)
  if(calls)
    message(FATAL_ERROR "${src} calls a collective (${calls}): device code belongs in "
                        "kernels/cuda/device/*.cuh, where the SIMT suite runs it and its mutants")
  endif()
endforeach()

file(GLOB _simt_test_sources ${CMAKE_CURRENT_SOURCE_DIR}/kernels/cuda_simt/test_*.cpp)
file(GLOB _simt_headers ${_simt_device_dir}/*.cuh)
# Line numbers change with any edit: scan again then.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_simt_headers} ${_simt_test_sources})

# Per test executable, the device headers it includes itself and those it compiles at all.
set(_simt_tests)
foreach(src ${_simt_test_sources})
  get_filename_component(name ${src} NAME_WE)
  if(TARGET ${name})
    list(APPEND _simt_tests ${name})
    _simt_device_headers(${src} _simt_reach_${name})
    file(STRINGS ${src} direct REGEX "^#include \"kernels/cuda/device/")
    list(TRANSFORM direct REPLACE "^#include \"([^\"]+)\".*" "${PROJECT_SOURCE_DIR}/\\1")
    set(_simt_direct_${name} ${direct})
  endif()
endforeach()

set(_simt_mutant_count 0)
foreach(header ${_simt_headers})
  get_filename_component(base ${header} NAME)
  # Those that include the header first, then those that compile it (Catch2's --abort
  # ends each at its first failure), then the rest.
  set(order)
  foreach(group direct reach)
    foreach(t ${_simt_tests})
      if(header IN_LIST _simt_${group}_${t} AND NOT $<TARGET_FILE:${t}> IN_LIST order)
        list(APPEND order $<TARGET_FILE:${t}>)
      endif()
    endforeach()
  endforeach()
  foreach(t ${_simt_tests})
    if(NOT $<TARGET_FILE:${t}> IN_LIST order)
      list(APPEND order $<TARGET_FILE:${t}>)
    endif()
  endforeach()
  _simt_collective_calls(${header} calls)
  foreach(call ${calls})
    string(REPLACE "|" ";" f "${call}")
    list(GET f 0 line)
    list(GET f 1 from)
    list(GET f 2 to)
    list(GET f 3 name)
    # Several calls on the line: this one by its columns.
    set(where "${base}:${line}")
    set(same_line ${calls})
    list(FILTER same_line INCLUDE REGEX "^${line}\\|")
    list(LENGTH same_line n)
    if(n GREATER 1)
      set(where "${where}:${from}-${to}")
    endif()
    if(name STREQUAL "__syncthreads")
      set(kinds removed)
    elseif(name STREQUAL "__syncwarp")
      set(kinds removed mask-halved)
    else()
      set(kinds no-exchange mask-halved)
    endif()
    foreach(kind ${kinds})
      add_test(NAME "simt_mutant:${where}:${kind}"
               COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/simt/run_mutant.sh "${where}:${kind}" ${order})
      set_tests_properties("simt_mutant:${where}:${kind}" PROPERTIES LABELS simt_mutant TIMEOUT 600)
      math(EXPR _simt_mutant_count "${_simt_mutant_count} + 1")
    endforeach()
  endforeach()
endforeach()
message(STATUS "codistill: ${_simt_mutant_count} SIMT mutants of the kernels' collectives (CTest label simt_mutant)")
