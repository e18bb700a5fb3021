# Installs the zrt component of the build to a fresh prefix, builds examples/hello_zrt against it with
# find_package(zrt), and runs the example on 2 ranks. Variables: BUILD_DIR SOURCE_DIR WORK_DIR DATA MPIRUN
# GENERATOR.
file(REMOVE_RECURSE ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
step(${CMAKE_COMMAND} --install ${BUILD_DIR} --component zrt --prefix ${WORK_DIR}/prefix)
step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/hello_zrt -B ${WORK_DIR}/build -G ${GENERATOR}
     -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${MPIRUN} -np 2 ${WORK_DIR}/build/hello_zrt ${DATA}/mlp_tp2.zplan ${DATA}/x.npy ${DATA}/expected.npy)
step(${MPIRUN} -np 2 ${WORK_DIR}/build/hello_zrt_c ${DATA}/mlp_tp2.zplan)
