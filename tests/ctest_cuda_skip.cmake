# Checks that CTest reports a [cuda] test as skipped where no GPU is visible (issue 26, item 7):
# cmake -DCTEST=... -DBIN=<build dir> -DTEST_BIN=<test_kernels> -P ctest_cuda_skip.cmake
set(case "cuda backend basics*")  # a spec with no comma: Catch splits specs at commas
execute_process(COMMAND ${TEST_BIN} "${case}" OUTPUT_VARIABLE direct ERROR_VARIABLE direct)
execute_process(COMMAND ${CTEST} -R "^kernels:cuda backend basics" WORKING_DIRECTORY ${BIN}
                OUTPUT_VARIABLE report ERROR_VARIABLE report)
message(STATUS "ctest says:\n${report}")
if(NOT report MATCHES "kernels:cuda backend basics")
  message(FATAL_ERROR "ctest did not run the [cuda] test")
endif()
if(direct MATCHES "SKIPPED: no CUDA device")
  if(NOT report MATCHES "Skipped")
    message(FATAL_ERROR "no GPU here, yet CTest did not report the [cuda] test as skipped")
  endif()
elseif(NOT report MATCHES "Passed")
  message(FATAL_ERROR "a GPU is visible, yet the [cuda] test did not pass:\n${direct}")
endif()
