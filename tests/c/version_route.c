/* How the plugin finds ncclGetVersion when NCCL is not in the global
 * namespace: argv[1] is libfakenccl.so (ncclGetVersion + a logger), opened
 * RTLD_LOCAL as frameworks open libnccl; DYNCC_ROUTE_LIB is the plugin.
 * argv[2] = "nccl-logger": init gets the fake library's logger, so the
 * plugin can reach ncclGetVersion through it (dladdr + RTLD_NOLOAD);
 * "own-logger": init gets a logger of this program, so it cannot.
 * Prints what the plugin logs; used by tests/plugin_c.rs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "init_plugin.h"
#include "print_logger.h"

static PRINT_LOGGER(own_logger)

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  void *nccl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!nccl) {
    fprintf(stderr, "version_route: cannot dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  /* The route under test only matters when the global lookup fails. */
  if (dlsym(RTLD_DEFAULT, "ncclGetVersion") != NULL) {
    fprintf(stderr, "version_route: ncclGetVersion is global; the fallback would not be tested\n");
    return 3;
  }
  ncclDebugLogger_t logger = own_logger;
  if (strcmp(argv[2], "nccl-logger") == 0) {
    logger = (ncclDebugLogger_t)dlsym(nccl, "fake_nccl_debug_log");
    if (!logger) return 2;
  }
  ncclTuner_v6_t *v6;
  void *ctx;
  void *h = init_plugin("DYNCC_ROUTE_LIB", "version_route", logger, &v6, &ctx);
  if (!h) return 2;
  v6->finalize(ctx);
  dlclose(h);
  /* NCCL is still loaded and its logger was the plugin's: the plugin's
   * RTLD_NOLOAD handle must not have unloaded it. */
  printf("nccl still loaded: %s\n", dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD) ? "yes" : "no");
  dlclose(nccl);
  return 0;
}
