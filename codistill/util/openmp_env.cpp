#include "codistill/util/openmp_env.hpp"

#include <unistd.h>

#include <cstdlib>

namespace codistill {

void reexec_with_bounded_openmp_spin(char** argv) {
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if ((spin && *spin) || (policy && *policy)) return;
  if (::setenv("GOMP_SPINCOUNT", kOpenMpSpinCount, 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Not executed again (no /proc, say): run on as before, with libgomp's defaults, and
  // without a GOMP_SPINCOUNT that would claim otherwise to this process's children.
  ::unsetenv("GOMP_SPINCOUNT");
}

}  // namespace codistill
