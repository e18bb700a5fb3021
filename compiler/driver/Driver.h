//===- Driver.h - the zplan command line ------------------------*- C++ -*-===//

#ifndef ZPLAN_COMPILER_DRIVER_DRIVER_H
#define ZPLAN_COMPILER_DRIVER_DRIVER_H

namespace zplan::driver {

/// Runs the zplan command line (`zplan import ...`, `zplan MODEL ...`) and
/// returns the process exit code.
int run(int argc, char **argv);

} // namespace zplan::driver

#endif // ZPLAN_COMPILER_DRIVER_DRIVER_H
