#include "pushpull/version.h"

// The Makefile defines it from the tree's VERSION file, the one place the version is written.
#ifndef PUSHPULL_VERSION_STRING
#error "PUSHPULL_VERSION_STRING is not defined: build with the Makefile or setup.py, which read VERSION"
#endif

namespace pushpull {

const char* Version() { return PUSHPULL_VERSION_STRING; }

}  // namespace pushpull
