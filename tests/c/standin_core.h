/* The NCCL-driving core that the stand-in NCCLs of the tests share
 * (standin.c: a toy world for the profiler tests; world.c: a world read
 * from `dyncc simulate`'s truth). It loads the plugin library, resolves
 * ncclTunerPlugin_v6 (v7 when it stands for NCCL 2.32.6+, whose loader
 * tries v7 first) and ncclProfiler_vN, and drives ranks of one
 * communicator in NCCL's order and threads:
 *
 *  - per rank, profiler init then tuner init (as NCCL's init does);
 *  - per rank a host thread (the program's own loop) that, per
 *    collective, calls getCollInfo, picks what runs from the cost table as
 *    NCCL does (core_nccl_pick) and launches it with the profiler events
 *    of the release its ABI stands for (core_launch);
 *  - per rank a proxy thread that later sends each channel's KernelCh
 *    start, recordEventState(KernelChStop) and stop, long after the Coll
 *    event was stopped, with timestamps spanning the collective's GPU time;
 *    for profiler v7 (2.31+) it is NCCL's profiler thread: the work is
 *    posted before the Coll stop (hostStreamPlanTask), so its channels may
 *    start and stop before or after it (STANDIN_KERNELS_FIRST=1: always
 *    before), with each channel's KernelPhase events between its start and
 *    stop when the mask asks for them (profilerFireKernelPhaseEvents).
 *
 * Include it in exactly one translation unit (it defines the program's
 * globals, the logger and ncclGetVersion). */
#ifndef DYNCC_STANDIN_CORE_H
#define DYNCC_STANDIN_CORE_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_profiler.h"
#include "nccl_tuner.h"
#include "print_logger.h"

PRINT_LOGGER(standin_logger)

/* The NCCL version this stand-in claims to be (NCCL's code, e.g. 23007
 * for 2.30.7). */
static int core_nccl_version = 23007;

/* Found by the plugin through dlsym(RTLD_DEFAULT) (linked -rdynamic). */
ncclResult_t ncclGetVersion(int *version) {
  *version = core_nccl_version;
  return ncclSuccess;
}

#define QLEN 256
#define MAX_KERNEL_CHANNELS 64

static const char *ALGOS[7] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
static const char *PROTOS[3] = {"LL", "LL128", "SIMPLE"};
static const char *FUNCS[5] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};

/* The communicator every driven rank belongs to. */
typedef struct {
  const char *name;
  uint64_t id;
  int n_nodes;
  int n_ranks; /* the communicator's ranks (not only the driven ones) */
  int ppn;     /* ranks per NVLink domain, for the tuner's v5+ init */
} core_comm_t;

static int abi;
static void *lib, *plib;
/* ncclTunerPlugin_v6 or _v7 (the same table; v7's init takes v7 constants). */
static ncclTuner_v6_t *tuner;
static int tuner_abi = 6;
/* Profiler v7's profiler thread: the host waits for a collective's channels
 * to stop before its Coll stop. */
static int kernels_first;
static void *profiler; /* ncclProfiler_v3_t / v4 / v5 */
static core_comm_t comm;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
/* NCCL's event mask is process-wide: every profiler init gets this int. */
static int event_mask;
/* The proxy threads hold their kernel events back until QLEN collectives
 * were launched (standin's nchan0 mode). */
static int hold_kernels;

typedef struct {
  void *coll; /* the Coll event's handle (maybe NULL) */
  int mask;   /* NCCL's event mask when the collective was called */
  int nch;
  uint64_t base, t;
} kernel_work;

typedef struct {
  int rank;
  void *pctx, *tctx;
  kernel_work q[QLEN];
  int head, tail, done;
  int finished; /* kernel work items the proxy thread has completed */
  pthread_mutex_t m;
  pthread_cond_t c;
  uint64_t rng;
  uint64_t seq[5]; /* Coll events' sequence number per collective */
  int launch_mask; /* the event mask NCCL read for the last collective launched */
  uint64_t clock;  /* the GPU clock (ns) of the next kernel */
} rank_state;

/* Loads DYNCC_TEST_PLUGIN_LIB (and DYNCC_TEST_PROFILER_LIB if set) and
 * resolves the tuner and profiler ABI `abi_`; exits 2 if it cannot. */
static void core_load(int abi_, const char *prog) {
  abi = abi_;
  const char *path = getenv("DYNCC_TEST_PLUGIN_LIB");
  lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib) {
    fprintf(stderr, "%s: cannot dlopen DYNCC_TEST_PLUGIN_LIB: %s\n", prog, path ? dlerror() : "unset");
    exit(2);
  }
  char sym[32];
  snprintf(sym, sizeof sym, "ncclProfiler_v%d", abi);
  /* NCCL opens the profiler by its own name (libnccl-profiler-dyncc.so,
   * installed as a link to the tuner's file): DYNCC_TEST_PROFILER_LIB
   * opens it that way, as a second dlopen. */
  const char *ppath = getenv("DYNCC_TEST_PROFILER_LIB");
  plib = ppath ? dlopen(ppath, RTLD_NOW | RTLD_LOCAL) : lib;
  if (!plib) {
    fprintf(stderr, "%s: cannot dlopen DYNCC_TEST_PROFILER_LIB: %s\n", prog, dlerror());
    exit(2);
  }
  /* STANDIN_NCCL_VERSION: the release it stands for (NCCL's code). From
   * 2.32.6 (23206) NCCL's loader tries ncclTunerPlugin_v7 first. */
  const char *ver = getenv("STANDIN_NCCL_VERSION");
  if (ver) core_nccl_version = atoi(ver);
  tuner_abi = core_nccl_version >= 23206 ? 7 : 6;
  tuner = dlsym(lib, tuner_abi == 7 ? "ncclTunerPlugin_v7" : "ncclTunerPlugin_v6");
  profiler = dlsym(plib, sym);
  if (!tuner || !profiler) {
    fprintf(stderr, "%s: %s or ncclTunerPlugin_v%d missing\n", prog, sym, tuner_abi);
    exit(2);
  }
  kernels_first = abi >= 7 && getenv("STANDIN_KERNELS_FIRST") != NULL;
  const char *initial = getenv("DYNCC_TEST_INITIAL_MASK");
  event_mask = initial ? atoi(initial) : 0;
}

static void core_unload(void) {
  if (plib != lib) dlclose(plib);
  dlclose(lib);
}

/* Which events NCCL starts, from src/plugin/profiler.cc (runtime/README.md,
 * "Traces", cites file:line per tag): a Group event when the task's mask
 * has any of GROUP_ENABLE (ncclProfilerStartGroupEvent), a Coll event when
 * it has any of COLL_ENABLE (ncclProfilerStartTaskEvents; on 2.27 only
 * under a non-NULL Group handle, `if (plan->groupEventHandle)`), a KernelCh
 * event when it has KernelCh (ncclProfilerStartKernelChEvent); from 2.28 a
 * GroupApi and a CollApi event around the API call besides
 * (ncclProfilerStartGroupApiEvent, ncclProfilerStartCollApiEvent). */
#define GROUP_ENABLE                                                                                 \
  (PROFILE_GROUP | PROFILE_COLL | PROFILE_P2P | PROFILE_PROXY_OP | PROFILE_PROXY_STEP | PROFILE_KERNEL_CH | \
   PROFILE_NET_PLUGIN)
#define COLL_ENABLE (PROFILE_COLL | PROFILE_PROXY_OP | PROFILE_PROXY_STEP | PROFILE_KERNEL_CH | PROFILE_NET_PLUGIN)
#define GROUP_API_ENABLE (PROFILE_GROUP_API | PROFILE_P2P_API | PROFILE_COLL_API | PROFILE_KERNEL_LAUNCH | GROUP_ENABLE)
#define COLL_API_ENABLE (PROFILE_COLL_API | COLL_ENABLE)

/* The plugin's startEvent for an event NCCL decided to start (callers
 * check NCCL's conditions). */
static void *start_event(void *ctx, uint64_t type, void *parent, const prof_descr_union_t *u, int rank) {
  void *h = NULL;
  if (abi >= 5) {
    prof_descr_v5_t d;
    memset(&d, 0, sizeof d);
    d.type = type;
    d.parentObj = parent;
    d.rank = rank;
    if (u) d.u = *u;
    ((ncclProfiler_v5_t *)profiler)->startEvent(ctx, &h, &d);
  } else {
    prof_descr_v4_t d;
    memset(&d, 0, sizeof d);
    d.type = (uint8_t)type;
    d.parentObj = parent;
    d.rank = rank;
    if (u) d.u = *u;
    ((ncclProfiler_v4_t *)profiler)->startEvent(ctx, &h, &d);
  }
  return h;
}

static prof_stop_t stop_fn(void) { return ((ncclProfiler_v5_t *)profiler)->stopEvent; }

static void *proxy_thread(void *arg) {
  rank_state *r = arg;
  if (hold_kernels) {
    pthread_mutex_lock(&r->m);
    while (r->tail - r->head < QLEN && !r->done) pthread_cond_wait(&r->c, &r->m);
    pthread_mutex_unlock(&r->m);
  }
  for (;;) {
    pthread_mutex_lock(&r->m);
    while (r->head == r->tail && !r->done) pthread_cond_wait(&r->c, &r->m);
    if (r->head == r->tail && r->done) {
      pthread_mutex_unlock(&r->m);
      return NULL;
    }
    kernel_work w = r->q[r->head % QLEN];
    r->head++;
    pthread_cond_broadcast(&r->c);
    pthread_mutex_unlock(&r->m);
    /* Channel c starts at base + 50c and stops at base + t - 30c: first
     * start to last stop is exactly t. */
    void *hs[MAX_KERNEL_CHANNELS];
    for (int c = 0; c < w.nch; c++) {
      prof_descr_union_t u;
      memset(&u, 0, sizeof u);
      u.kernelCh.channelId = (uint8_t)c;
      u.kernelCh.pTimer = w.base + 50u * (uint64_t)c;
      hs[c] = w.mask & PROFILE_KERNEL_CH ? start_event(r->pctx, PROFILE_KERNEL_CH, w.coll, &u, r->rank) : NULL;
    }
    /* Profiler v7: each channel's phases (children of its KernelCh event)
     * fire just before its stop, initial_sync, compute, final_sync,
     * spanning the channel's time. */
    static const char *phase_names[3] = {"initial_sync", "compute", "final_sync"};
    for (int c = w.nch - 1; abi >= 7 && (w.mask & PROFILE_KERNEL_PHASE) && c >= 0; c--) {
      if (!hs[c]) continue;
      uint64_t a0 = w.base + 50u * (uint64_t)c, z = w.base + w.t - 30u * (uint64_t)c;
      uint64_t edge[4] = {a0, a0 + (z - a0) / 10, z - (z - a0) / 10, z};
      for (int ph = 0; ph < 3; ph++) {
        prof_descr_union_t u;
        memset(&u, 0, sizeof u);
        u.kernelPhase.channelId = (uint8_t)c;
        u.kernelPhase.phaseId = (uint8_t)ph;
        u.kernelPhase.phaseName = phase_names[ph];
        u.kernelPhase.pTimer = edge[ph];
        void *p = start_event(r->pctx, PROFILE_KERNEL_PHASE, hs[c], &u, r->rank);
        if (!p) continue;
        prof_state_args_t a;
        memset(&a, 0, sizeof a);
        a.pTimer = edge[ph + 1];
        ((ncclProfiler_v5_t *)profiler)->recordEventState(p, PROFILER_KERNEL_PHASE_STOP, &a);
        stop_fn()(p);
      }
    }
    for (int c = w.nch - 1; c >= 0; c--) {
      if (!hs[c]) continue;
      prof_state_args_t a;
      memset(&a, 0, sizeof a);
      a.pTimer = w.base + w.t - 30u * (uint64_t)c;
      ((ncclProfiler_v5_t *)profiler)->recordEventState(hs[c], PROFILER_KERNEL_CH_STOP, &a);
      stop_fn()(hs[c]);
    }
    pthread_mutex_lock(&r->m);
    r->finished++;
    pthread_cond_broadcast(&r->c);
    pthread_mutex_unlock(&r->m);
  }
}

/* Profiler init, then tuner init, for rank r->rank of `comm`; prints
 * "mask N" (the process-wide event mask after this init). */
static void init_rank(rank_state *r) {
  int *mask = &event_mask;
  r->pctx = NULL;
  if (abi == 3) {
    ((ncclProfiler_v3_t *)profiler)->init(&r->pctx, mask);
  } else if (abi == 4) {
    ((ncclProfiler_v4_t *)profiler)->init(&r->pctx, mask, comm.name, comm.id, comm.n_nodes, comm.n_ranks, r->rank,
                                          (ncclDebugLogger_t)standin_logger);
  } else {
    ((ncclProfiler_v5_t *)profiler)->init(&r->pctx, comm.id, mask, comm.name, comm.n_nodes, comm.n_ranks, r->rank,
                                          (ncclDebugLogger_t)standin_logger);
  }
  pthread_mutex_lock(&print_lock);
  printf("mask %d\n", event_mask);
  pthread_mutex_unlock(&print_lock);
  ncclNvlDomainInfo_v5_t nvl = {comm.n_nodes, comm.ppn, comm.ppn};
  r->tctx = NULL;
  ncclResult_t rc;
  if (tuner_abi == 7) {
    /* 2.32.6+: v7's constants, one compute-capability row more. */
    ncclTunerConstants_v7_t constants;
    memset(&constants, 0, sizeof constants);
    rc = ((ncclTuner_v7_t *)(void *)tuner)
             ->init(&r->tctx, comm.id, (size_t)comm.n_ranks, (size_t)comm.n_nodes,
                    (ncclDebugLogger_t)standin_logger, &nvl, &constants);
  } else {
    ncclTunerConstants_v5_t constants;
    memset(&constants, 0, sizeof constants);
    rc = tuner->init(&r->tctx, comm.id, (size_t)comm.n_ranks, (size_t)comm.n_nodes,
                     (ncclDebugLogger_t)standin_logger, &nvl, &constants);
  }
  if (rc != ncclSuccess) {
    fprintf(stderr, "standin: tuner init failed: %d\n", (int)rc);
    exit(2);
  }
}

/* What NCCL runs after the tuner's getCollInfo: the cheapest cell of the
 * cost table (the first of equal ones; -1 cells never), and whether the
 * tuner forced one (a cell it set to 0). */
typedef struct {
  int algo, proto, forced;
} nccl_pick_t;

static nccl_pick_t core_nccl_pick(float cost[7][3]) {
  nccl_pick_t k = {0, 0, 0};
  for (int a = 0; a < 7; a++)
    for (int p = 0; p < 3; p++) {
      if (cost[a][p] < 0) continue;
      if (cost[a][p] == 0.0f) k.forced = 1;
      if (cost[k.algo][k.proto] < 0 || cost[a][p] < cost[k.algo][k.proto]) k.algo = a, k.proto = p;
    }
  return k;
}

/* How a collective ran beyond its algorithm and protocol (profiler v7). */
typedef struct {
  const char *variant; /* a symmetric kernel's variant, or NULL */
  uint64_t tag;        /* the call's ncclCollConfig_t userProfilerTag */
} core_path_t;
static const core_path_t CORE_CLASSIC = {NULL, 0};

/* One collective call on the host thread of rank r, with the profiler
 * events of the release the ABI stands for (abi 4: NCCL 2.27; 5 and 6:
 * 2.28 to 2.30; 7: 2.31+, the profiler thread's work posted before the
 * Coll stop), in NCCL's order: on 2.28+ the GroupApi start and the
 * CollApi start and stop of the API call (collTaskAppend); then the plan
 * launch (hostStreamPlanTask): Group start, Coll start (2.27: only under a
 * non-NULL Group handle) saying `event_channels`, Coll stop, Group stop; on
 * 2.28+ the GroupApi stop (ncclGroupEnd). The proxy thread is then handed
 * `kernel_channels` channels spanning t ns of GPU time. */
static void core_launch_as(rank_state *r, int coll, size_t bytes, int algo, int proto, int event_channels,
                           int kernel_channels, uint64_t t, core_path_t path) {
  /* NCCL reads its mask once per call (2.27: into the task; 2.28+: at the
   * GroupApi start, into the API state the task copies). */
  int mask = __atomic_load_n(&event_mask, __ATOMIC_RELAXED);
  r->launch_mask = mask;
  void *gapi = NULL, *capi = NULL;
  if (abi >= 5) {
    if (mask & GROUP_API_ENABLE) gapi = start_event(r->pctx, PROFILE_GROUP_API, NULL, NULL, r->rank);
    prof_descr_union_t a;
    memset(&a, 0, sizeof a);
    a.collApi.func = FUNCS[coll];
    a.collApi.userTag = path.tag;
    if (mask & COLL_API_ENABLE) capi = start_event(r->pctx, PROFILE_COLL_API, gapi, &a, r->rank);
    if (capi) stop_fn()(capi);
  }
  void *g = mask & GROUP_ENABLE ? start_event(r->pctx, PROFILE_GROUP, NULL, NULL, r->rank) : NULL;
  prof_descr_union_t u;
  memset(&u, 0, sizeof u);
  u.coll.seqNumber = r->seq[coll]++;
  u.coll.func = FUNCS[coll];
  /* The plugin reads nBytes back as type size x count (x nRanks for
   * AllGather and ReduceScatter), as NCCL passes it to the tuner: float32
   * where that divides, else int8 (a size that does not divide even so
   * cannot be linked to the tuner's answer, as in NCCL). */
  size_t per = coll == 2 || coll == 3 ? (size_t)comm.n_ranks : 1;
  int f32 = bytes % (4 * per) == 0;
  u.coll.count = bytes / (f32 ? 4 : 1) / per;
  u.coll.datatype = f32 ? "ncclFloat32" : "ncclInt8";
  u.coll.nChannels = (uint8_t)event_channels;
  u.coll.nWarps = 16;
  u.coll.algo = ALGOS[algo];
  u.coll.proto = PROTOS[proto];
  u.coll.userTag = path.tag;
  if (path.variant) {
    /* ncclProfilerStartTaskEvents: the variant, its part after "_" as
     * algo, proto "". */
    const char *us = strchr(path.variant, '_');
    u.coll.kernelVariant = path.variant;
    u.coll.isSymColl = true;
    u.coll.algo = us ? us + 1 : path.variant;
    u.coll.proto = "";
  }
  void *h = NULL;
  if ((mask & COLL_ENABLE) && (abi >= 5 || g)) {
    /* 2.28+: the parent is the CollApi event, the Group is a member. */
    if (abi >= 5) u.coll.parentGroup = g;
    h = start_event(r->pctx, PROFILE_COLL, abi >= 5 ? capi : g, &u, r->rank);
  }
  if (kernel_channels > MAX_KERNEL_CHANNELS) kernel_channels = MAX_KERNEL_CHANNELS;
  /* 2.31+: the plan's work goes to the profiler thread before the Coll
   * stop (ncclProfilerPostPlanWork, then ncclProfilerStopTaskEvents). */
  if (abi >= 7) {
    pthread_mutex_lock(&r->m);
    while (r->tail - r->head >= QLEN) pthread_cond_wait(&r->c, &r->m);
    int item = r->tail;
    r->q[r->tail % QLEN] = (kernel_work){h, mask, kernel_channels, r->clock, t};
    r->tail++;
    pthread_cond_broadcast(&r->c);
    while (kernels_first && r->finished <= item) pthread_cond_wait(&r->c, &r->m);
    pthread_mutex_unlock(&r->m);
  }
  if (h) stop_fn()(h);
  if (g) stop_fn()(g);
  if (gapi) stop_fn()(gapi);
  if (abi < 7) {
    pthread_mutex_lock(&r->m);
    while (r->tail - r->head >= QLEN) pthread_cond_wait(&r->c, &r->m);
    r->q[r->tail % QLEN] = (kernel_work){h, mask, kernel_channels, r->clock, t};
    r->tail++;
    pthread_cond_broadcast(&r->c);
    pthread_mutex_unlock(&r->m);
  }
  r->clock += t + 1000;
}

static inline void core_launch(rank_state *r, int coll, size_t bytes, int algo, int proto, int event_channels,
                               int kernel_channels, uint64_t t) {
  core_launch_as(r, coll, bytes, algo, proto, event_channels, kernel_channels, t, CORE_CLASSIC);
}

/* A collective NCCL ran on the copy engines (2.29+): a CeColl event around
 * it when the mask asks (ncclProfilerStartCeCollEvent reads the global
 * mask), no Coll event, no kernel. */
static inline void core_launch_ce(rank_state *r, int coll, size_t bytes, uint64_t tag) {
  int mask = __atomic_load_n(&event_mask, __ATOMIC_RELAXED);
  if (abi < 6 || !(mask & PROFILE_CE_COLL)) return;
  prof_descr_union_t u;
  memset(&u, 0, sizeof u);
  size_t per = coll == 2 || coll == 3 ? (size_t)comm.n_ranks : 1;
  u.ceColl.func = FUNCS[coll];
  u.ceColl.count = bytes / 4 / per;
  u.ceColl.datatype = "ncclFloat32";
  u.ceColl.syncStrategy = "MC";
  u.ceColl.userTag = tag;
  void *h = start_event(r->pctx, PROFILE_CE_COLL, NULL, &u, r->rank);
  if (h) stop_fn()(h);
}

static void *core_init_thread(void *arg) {
  init_rank(arg);
  return NULL;
}

/* Inits n ranks (each on a thread of its own, all at once, if
 * init_threads: ncclCommInitAll runs one init job per rank on its own
 * thread), then runs each rank's host thread `host` beside its proxy
 * thread, and waits for all of them. */
static void core_run_ranks(rank_state *ranks, int n, void *(*host)(void *), int init_threads) {
  pthread_t *hosts = calloc((size_t)n, sizeof(pthread_t));
  pthread_t *proxies = calloc((size_t)n, sizeof(pthread_t));
  if (!hosts || !proxies) {
    fprintf(stderr, "standin: out of memory\n");
    exit(2);
  }
  for (int i = 0; i < n; i++) {
    rank_state *r = &ranks[i];
    pthread_mutex_init(&r->m, NULL);
    pthread_cond_init(&r->c, NULL);
    r->clock = 1000000;
    if (init_threads)
      pthread_create(&hosts[i], NULL, core_init_thread, r);
    else
      init_rank(r);
  }
  for (int i = 0; init_threads && i < n; i++) pthread_join(hosts[i], NULL);
  for (int i = 0; i < n; i++) {
    pthread_create(&proxies[i], NULL, proxy_thread, &ranks[i]);
    pthread_create(&hosts[i], NULL, host, &ranks[i]);
  }
  for (int i = 0; i < n; i++) {
    pthread_join(hosts[i], NULL);
    pthread_mutex_lock(&ranks[i].m);
    ranks[i].done = 1;
    pthread_cond_broadcast(&ranks[i].c);
    pthread_mutex_unlock(&ranks[i].m);
    pthread_join(proxies[i], NULL);
  }
  free(hosts);
  free(proxies);
}

/* NCCL's teardown: per rank the tuner's finalize first, the profiler's
 * last. */
static void core_finalize_ranks(rank_state *ranks, int n) {
  for (int i = 0; i < n; i++) {
    tuner->finalize(ranks[i].tctx);
    ((ncclProfiler_v5_t *)profiler)->finalize(ranks[i].pctx);
    pthread_mutex_destroy(&ranks[i].m);
    pthread_cond_destroy(&ranks[i].c);
  }
}

#endif
