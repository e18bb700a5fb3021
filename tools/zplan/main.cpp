//===- main.cpp - zplan ---------------------------------------------------===//
//
// The compiler's command line; everything lives in compiler/driver.
//
//===----------------------------------------------------------------------===//

#include "compiler/driver/Driver.h"

int main(int argc, char **argv) { return zplan::driver::run(argc, argv); }
