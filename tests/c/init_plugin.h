/* One communicator initialised the way NCCL does it, for the small C
 * programs of the tests: the plugin library named by the environment
 * variable `env`, opened RTLD_LOCAL, its ncclTunerPlugin_v6 resolved and
 * init called for 8 ranks on 1 node with `logger`; prints
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
  ncclNvlDomainInfo_v5_t nvl = {1, 8, 8};
  ncclTunerConstants_v5_t constants = {0};
  *ctx = NULL;
  ncclResult_t rc = (*v6)->init(ctx, 0x1234abcdULL, 8, 1, logger, &nvl, &constants);
  printf("rc %d ctx %s\n", (int)rc, *ctx ? "set" : "null");
  return h;
}

#endif
