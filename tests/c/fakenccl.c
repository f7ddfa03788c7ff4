/* A stand-in for libnccl as a framework loads it: opened with RTLD_LOCAL
 * (so its symbols are not in the global namespace), holding both
 * ncclGetVersion and the logger NCCL hands to a tuner's init. Built as a
 * shared library by tests/plugin_c.rs for version_route.c. */
#include "print_logger.h"

__attribute__((visibility("default"))) ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetVersion(int *version) {
  *version = 22703; /* NCCL 2.27.3 */
  return ncclSuccess;
}

__attribute__((visibility("default"))) void fake_nccl_debug_log(ncclDebugLogLevel level, unsigned long flags,
                                                                const char *file, int line, const char *fmt, ...);
PRINT_LOGGER(fake_nccl_debug_log)
