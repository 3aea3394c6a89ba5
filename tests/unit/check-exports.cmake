cmake_minimum_required(VERSION 3.20)
# libsd.so exports the C API and nothing else (lib/libsd.map):
#
#   cmake -DNM=<nm> -DLIB=<libsd.so> -DHEADER=<sd/sd.h> -P check-exports.cmake
#
# Every defined dynamic symbol is an sd_* name, and every function the
# header declares is among them.
execute_process(COMMAND "${NM}" -D --defined-only "${LIB}"
	OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
	message(FATAL_ERROR "${NM} ${LIB} failed: ${rc}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${out}")
set(exported)
foreach(line IN LISTS lines)
	string(REGEX REPLACE "^.* ([^ ]+)$" "\\1" sym "${line}")
	string(REGEX REPLACE "@.*$" "" sym "${sym}")
	if(line MATCHES " A ")			# the version node itself
		continue()
	endif()
	if(NOT sym MATCHES "^sd_")
		message(SEND_ERROR "libsd.so exports ${sym}")
	endif()
	list(APPEND exported "${sym}")
endforeach()

file(READ "${HEADER}" header)
string(REGEX MATCHALL "[ *]sd_[a-z_]+\\(" calls "${header}")
set(declared)
foreach(c IN LISTS calls)
	string(REGEX REPLACE "^[ *](sd_[a-z_]+)\\($" "\\1" name "${c}")
	list(APPEND declared "${name}")
endforeach()
list(REMOVE_DUPLICATES declared)
list(LENGTH declared n)
if(n LESS 3)
	message(FATAL_ERROR "found only ${n} functions in ${HEADER}")
endif()
foreach(name IN LISTS declared)
	if(NOT name IN_LIST exported)
		message(SEND_ERROR "${HEADER} names ${name}, libsd.so does not export it")
	endif()
endforeach()
list(LENGTH exported e)
message(STATUS "libsd.so exports ${e} symbols, all sd_*; the header names ${n}")
