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
  const char *lib = getenv("DYNCC_ROUTE_LIB");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!h) {
    fprintf(stderr, "version_route: cannot dlopen DYNCC_ROUTE_LIB: %s\n", lib ? dlerror() : "unset");
    return 2;
  }
  ncclTuner_v6_t *v6 = dlsym(h, "ncclTunerPlugin_v6");
  if (!v6) return 2;
  ncclNvlDomainInfo_v5_t nvl = {1, 8, 8};
  ncclTunerConstants_v5_t constants = {0};
  void *ctx = NULL;
  ncclResult_t rc = v6->init(&ctx, 0x1234abcdULL, 8, 1, logger, &nvl, &constants);
  printf("rc %d ctx %s\n", (int)rc, ctx ? "set" : "null");
  v6->finalize(ctx);
  dlclose(h);
  /* NCCL is still loaded and its logger was the plugin's: the plugin's
   * RTLD_NOLOAD handle must not have unloaded it. */
  printf("nccl still loaded: %s\n", dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD) ? "yes" : "no");
  dlclose(nccl);
  return 0;
}
