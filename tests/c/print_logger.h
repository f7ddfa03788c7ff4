/* NCCL's logger as the small C programs of the tests stand it in: one line
 * per message on stdout, "WARN ...", "INFO ..." or "OTHER ...", for the
 * Rust side to read. PRINT_LOGGER(name) defines a logger called `name`
 * (with `extern` linkage where a shared library must export it). */
#ifndef DYNCC_PRINT_LOGGER_H
#define DYNCC_PRINT_LOGGER_H

#include <stdarg.h>
#include <stdio.h>

#include "nccl_tuner.h"

static inline void print_log_line(ncclDebugLogLevel level, const char *fmt, va_list ap) {
  char buf[2048];
  vsnprintf(buf, sizeof buf, fmt, ap);
  printf("%s %s\n", level == NCCL_LOG_WARN ? "WARN" : level == NCCL_LOG_INFO ? "INFO" : "OTHER", buf);
}

#define PRINT_LOGGER(name)                                                                           \
  void name(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, \
            ...) {                                                                                   \
    (void)flags;                                                                                     \
    (void)file;                                                                                      \
    (void)line;                                                                                      \
    va_list ap;                                                                                      \
    va_start(ap, fmt);                                                                               \
    print_log_line(level, fmt, ap);                                                                  \
    va_end(ap);                                                                                      \
  }

#endif
