/* One communicator initialised the way NCCL does it, for the small C
 * programs of the tests: the plugin library named by the environment
 * variable `env`, opened RTLD_LOCAL, its ncclTunerPlugin_v6 resolved and
 * init called for 8 ranks on 1 node (or DYNCC_INIT_RANKS ranks on
 * DYNCC_INIT_NODES nodes, one NVLink domain per node) with `logger`; prints
 * "rc N ctx set|null". Returns the library handle, or NULL after saying on
 * stderr why (`who` names the program). */
#ifndef DYNCC_INIT_PLUGIN_H
#define DYNCC_INIT_PLUGIN_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl_tuner.h"

static inline void *init_plugin(const char *env, const char *who, ncclDebugLogger_t logger,
                                ncclTuner_v6_t **v6, void **ctx) {
  const char *lib = getenv(env);
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!h) {
    fprintf(stderr, "%s: cannot dlopen %s: %s\n", who, env, lib ? dlerror() : "unset");
    return NULL;
  }
  *v6 = dlsym(h, "ncclTunerPlugin_v6");
  if (!*v6) {
    fprintf(stderr, "%s: no ncclTunerPlugin_v6 in %s\n", who, lib);
    dlclose(h);
    return NULL;
  }
  const char *r = getenv("DYNCC_INIT_RANKS"), *n = getenv("DYNCC_INIT_NODES");
  int ranks = r ? atoi(r) : 8, nodes = n ? atoi(n) : 1;
  if (ranks < 1 || nodes < 1) {
    fprintf(stderr, "%s: DYNCC_INIT_RANKS and DYNCC_INIT_NODES must be positive\n", who);
    dlclose(h);
    return NULL;
  }
  ncclNvlDomainInfo_v5_t nvl = {nodes, ranks / nodes, (ranks + nodes - 1) / nodes};
  ncclTunerConstants_v5_t constants = {0};
  *ctx = NULL;
  ncclResult_t rc =
      (*v6)->init(ctx, 0x1234abcdULL, (size_t)ranks, (size_t)nodes, logger, &nvl, &constants);
  printf("rc %d ctx %s\n", (int)rc, *ctx ? "set" : "null");
  return h;
}

#endif
