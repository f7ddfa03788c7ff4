/* A stand-in for libnccl as a framework loads it: opened with RTLD_LOCAL
 * (so its symbols are not in the global namespace), holding both
 * ncclGetVersion and the logger NCCL hands to a tuner's init. Built as a
 * shared library by tests/plugin_c.rs for version_route.c. */
#include <stdarg.h>
#include <stdio.h>

#include "nccl_tuner.h"

__attribute__((visibility("default"))) ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetVersion(int *version) {
  *version = 22703; /* NCCL 2.27.3 */
  return ncclSuccess;
}

__attribute__((visibility("default"))) void fake_nccl_debug_log(ncclDebugLogLevel level, unsigned long flags,
                                                                const char *file, int line, const char *fmt, ...);
void fake_nccl_debug_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  printf("%s %s\n", level == NCCL_LOG_WARN ? "WARN" : level == NCCL_LOG_INFO ? "INFO" : "OTHER", buf);
}
