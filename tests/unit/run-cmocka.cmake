cmake_minimum_required(VERSION 3.20)
# Runs one cmocka test program for ctest:
#
#   cmake -DTEST=<program> -DGROUP=<group name> -P run-cmocka.cmake
#
# with CMOCKA_MESSAGE_OUTPUT=xml and CMOCKA_XML_FILE=<dir>/cmocka-%g.xml in
# the environment.  cmocka writes nothing when the directory is missing and
# will not replace an existing file (it prints the XML to stderr instead,
# and the stale file stays), so make the directory and remove the file
# first, then insist that the program wrote it.
if(NOT DEFINED ENV{CMOCKA_XML_FILE})
	message(FATAL_ERROR "CMOCKA_XML_FILE is not set")
endif()
string(REPLACE "%g" "${GROUP}" xml "$ENV{CMOCKA_XML_FILE}")
get_filename_component(dir "${xml}" DIRECTORY)
file(MAKE_DIRECTORY "${dir}")
file(REMOVE "${xml}")

execute_process(COMMAND "${TEST}" RESULT_VARIABLE rc)

if(NOT EXISTS "${xml}")
	message(FATAL_ERROR "${TEST} (${rc}) wrote no ${xml}")
endif()
if(NOT rc EQUAL 0)
	file(READ "${xml}" out)
	message("${out}")
	message(FATAL_ERROR "${TEST} failed: ${rc}")
endif()
