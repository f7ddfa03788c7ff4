/* A stand-in NCCL for the profiler tests: loads the plugin library
 * (DYNCC_TEST_PLUGIN_LIB), resolves ncclTunerPlugin_v6 and ncclProfiler_vN,
 * and drives two ranks of one communicator in NCCL's order and threads:
 * per rank a host thread (tuner init after profiler init, as NCCL's init
 * does; then per collective getCollInfo, Group start, Coll start, Coll
 * stop, Group stop) and a proxy thread that later sends each channel's
 * KernelCh start, recordEventState(KernelChStop) and stop, long after the
 * Coll event was stopped. Collective GPU times come from a small world
 * (latency + bytes / bandwidth per algorithm and protocol) with noise.
 *
 * usage: standin ABI CALLS MODE
 *   ABI   6, 5, 4 (profiler versions with GPU timestamps) or 3 (none)
 *   MODE  finalize    finalize both plugins per rank, then exit
 *         nofinalize  exit without finalizing (the exit hook must write)
 *         loop        init, CALLS collectives, finalize, forever; each round
 *                     adds 4096 bytes x its number to every size (new cells,
 *                     so every round's file is larger than the last)
 *         lostdir     as finalize, but the trace directory is removed first
 *                     (the write fails: one WARN, the job goes on)
 *         fork        as nofinalize, but first fork a child that exits at once
 *                     (a data-loader worker: it must not write the parent's trace)
 *         nchan0      as finalize, but every third collective's Coll event says
 *                     nChannels 0 (NCCL's CollNet, multi-node NVLS) though its
 *                     channels run, and the proxy threads hold their kernel
 *                     events back until QLEN collectives were launched
 *         ownchannels as finalize, but NCCL runs 4 channels whatever the tuner
 *                     asked (a forced channel count not honoured)
 * DYNCC_TEST_INITIAL_MASK: NCCL's process-wide event mask before the first
 * init (default 0); every init is handed that one int.
 * With STANDIN_AGGREGATE set, every 7th call is two AllReduce tasks NCCL
 * aggregated: one getCollInfo (numPipeOps 2, the summed nBytes), then a
 * Coll event per task, fed as "unknown" (no answer links either).
 * With STANDIN_INIT_THREADS set, each rank's init runs on a thread of its own.
 * Prints "mask N" after each rank's init, "fed COLL NBYTES ALGO PROTO CH SRC
 * NS" for each collective rank 0 ran and timed, "untimed COLL NBYTES" for
 * those it ran with nChannels 0, and the logger's lines ("WARN ...",
 * "INFO ..."). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_profiler.h"
#include "nccl_tuner.h"
#include "print_logger.h"

PRINT_LOGGER(standin_logger)

/* Found by the plugin through dlsym(RTLD_DEFAULT) (linked -rdynamic). */
ncclResult_t ncclGetVersion(int *version) {
  *version = 23007;
  return ncclSuccess;
}

#define NRANKS 2
#define COMM_ID 0xC0FFEE0011223344ULL
#define QLEN 256

static const char *ALGOS[7] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
static const char *PROTOS[3] = {"LL", "LL128", "SIMPLE"};
static const char *FUNCS[5] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};

static int abi;
static void *lib;
static ncclTuner_v6_t *tuner;
static void *profiler; /* ncclProfiler_v3_t / v4 / v5 */
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
/* NCCL's event mask is process-wide: every profiler init gets this int. */
static int event_mask;
static int zero_channels, own_channels, round_no;

/* The world: GPU time of a collective in ns. */
static double world_ns(int algo, int proto, size_t bytes) {
  static const double lat[3] = {4000, 6000, 9000};  /* LL, LL128, SIMPLE */
  static const double bw[3] = {2.0, 8.0, 20.0};     /* bytes per ns */
  double a = algo == 0 ? 0.8 : 1.0;                 /* TREE a little faster to start */
  return lat[proto] * a + (double)bytes / (bw[proto] * (algo == 0 ? 0.7 : 1.0));
}

typedef struct {
  void *coll; /* the Coll event's handle (maybe NULL) */
  int nch;
  uint64_t base, t;
} kernel_work;

typedef struct {
  int rank;
  void *pctx, *tctx;
  kernel_work q[QLEN];
  int head, tail, done;
  pthread_mutex_t m;
  pthread_cond_t c;
  uint64_t rng;
} rank_state;

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void *start_event(void *ctx, uint64_t type, void *parent, const prof_descr_union_t *u, int rank) {
  void *h = NULL;
  /* NCCL creates Group and Coll events when any of Coll or KernelCh is
   * asked for, and KernelCh events only when KernelCh is. */
  if (!(event_mask & (PROFILE_COLL | PROFILE_KERNEL_CH))) return NULL;
  if (type == PROFILE_KERNEL_CH && !(event_mask & PROFILE_KERNEL_CH)) return NULL;
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
  /* nchan0: kernel events arrive only after many later collectives started. */
  if (zero_channels) {
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
    void *hs[64];
    for (int c = 0; c < w.nch; c++) {
      prof_descr_union_t u;
      memset(&u, 0, sizeof u);
      u.kernelCh.channelId = (uint8_t)c;
      u.kernelCh.pTimer = w.base + 50u * (uint64_t)c;
      hs[c] = start_event(r->pctx, PROFILE_KERNEL_CH, w.coll, &u, r->rank);
    }
    for (int c = w.nch - 1; c >= 0; c--) {
      if (!hs[c]) continue;
      prof_state_args_t a;
      memset(&a, 0, sizeof a);
      a.pTimer = w.base + w.t - 30u * (uint64_t)c;
      ((ncclProfiler_v5_t *)profiler)->recordEventState(hs[c], PROFILER_KERNEL_CH_STOP, &a);
      stop_fn()(hs[c]);
    }
  }
}

static void init_rank(rank_state *r) {
  int *mask = &event_mask;
  r->pctx = NULL;
  if (abi == 3) {
    ((ncclProfiler_v3_t *)profiler)->init(&r->pctx, mask);
  } else if (abi == 4) {
    ((ncclProfiler_v4_t *)profiler)->init(&r->pctx, mask, "standin-comm", COMM_ID, 1, NRANKS, r->rank,
                                          (ncclDebugLogger_t)standin_logger);
  } else {
    ((ncclProfiler_v5_t *)profiler)->init(&r->pctx, COMM_ID, mask, "standin-comm", 1, NRANKS, r->rank,
                                          (ncclDebugLogger_t)standin_logger);
  }
  pthread_mutex_lock(&print_lock);
  printf("mask %d\n", event_mask);
  pthread_mutex_unlock(&print_lock);
  ncclNvlDomainInfo_v5_t nvl = {1, NRANKS, NRANKS};
  ncclTunerConstants_v5_t constants;
  memset(&constants, 0, sizeof constants);
  r->tctx = NULL;
  ncclResult_t rc = tuner->init(&r->tctx, COMM_ID, NRANKS, 1, (ncclDebugLogger_t)standin_logger, &nvl, &constants);
  if (rc != ncclSuccess) {
    fprintf(stderr, "standin: tuner init failed: %d\n", (int)rc);
    exit(2);
  }
}

static int calls;
static int lose_dir;

static void *host_thread(void *arg) {
  rank_state *r = arg;
  static const size_t sizes[4] = {4096, 65536, 1 << 20, 8 << 20};
  uint64_t seq[5] = {0};
  uint64_t clock = 1000000;
  int aggregate = getenv("STANDIN_AGGREGATE") != NULL;
  for (int i = 0; i < calls; i++) {
    int coll = (i % 5 == 4) ? 2 : 4; /* AllGather now and then, else AllReduce */
    size_t bytes = sizes[(i / 5) % 4] + 4096u * (size_t)round_no;
    int ntasks = aggregate && i % 7 == 3 ? 2 : 1;
    if (ntasks > 1) coll = 4;
    float cost[7][3];
    /* NCCL's own estimate: the world without noise; -1 where it cannot run. */
    for (int a = 0; a < 7; a++)
      for (int p = 0; p < 3; p++) cost[a][p] = a > 1 ? -1.0f : (float)world_ns(a, p, bytes);
    int nch = 0;
    tuner->getCollInfo(r->tctx, (ncclFunc_t)coll, bytes * (size_t)ntasks, ntasks, (float **)cost, 7, 3, 0, &nch);
    int best_a = 0, best_p = 0, forced = 0;
    for (int a = 0; a < 7; a++)
      for (int p = 0; p < 3; p++) {
        if (cost[a][p] < 0) continue;
        if (cost[a][p] == 0.0f) forced = 1;
        if (cost[best_a][best_p] < 0 || cost[a][p] < cost[best_a][best_p]) best_a = a, best_p = p;
      }
    int asked = nch;
    if (nch <= 0 || own_channels) nch = 4;
    if (nch > 32) nch = 32;
    /* The table chose what ran only if NCCL honoured all it forced. */
    if (own_channels && asked > 0 && asked != nch) forced = 0;
    for (int task = 0; task < ntasks; task++) {
      int says_zero = zero_channels && i % 3 == 1;
      /* Plan launch on the host thread: Group, Coll start/stop, Group stop. */
      void *g = start_event(r->pctx, PROFILE_GROUP, NULL, NULL, r->rank);
      prof_descr_union_t u;
      memset(&u, 0, sizeof u);
      u.coll.seqNumber = seq[coll]++;
      u.coll.func = FUNCS[coll];
      u.coll.count = coll == 2 ? bytes / 4 / NRANKS : bytes / 4;
      u.coll.datatype = "ncclFloat32";
      u.coll.nChannels = says_zero ? 0 : (uint8_t)nch;
      u.coll.nWarps = 16;
      u.coll.algo = ALGOS[best_a];
      u.coll.proto = PROTOS[best_p];
      u.coll.parentGroup = g;
      void *h = start_event(r->pctx, PROFILE_COLL, NULL, &u, r->rank);
      if (h) stop_fn()(h);
      if (g) stop_fn()(g);
      double noise = 1.0 + 0.1 * ((double)(next_rand(&r->rng) % 1000) / 1000.0 - 0.5);
      uint64_t t = (uint64_t)llround(world_ns(best_a, best_p, bytes) * noise);
      if (r->rank == 0) {
        pthread_mutex_lock(&print_lock);
        if (says_zero)
          printf("untimed %s %zu\n", FUNCS[coll], bytes);
        else
          printf("fed %s %zu %s %s %d %s %llu\n", FUNCS[coll], bytes, ALGOS[best_a], PROTOS[best_p], nch,
                 ntasks > 1 ? "unknown" : forced ? "table" : "nccl", (unsigned long long)t);
        pthread_mutex_unlock(&print_lock);
      }
      pthread_mutex_lock(&r->m);
      while (r->tail - r->head >= QLEN) pthread_cond_wait(&r->c, &r->m);
      r->q[r->tail % QLEN] = (kernel_work){h, nch, clock, t};
      r->tail++;
      pthread_cond_broadcast(&r->c);
      pthread_mutex_unlock(&r->m);
      clock += t + 1000;
    }
  }
  return NULL;
}

static void *init_thread(void *arg) {
  init_rank(arg);
  return NULL;
}

static void run_round(int finalize) {
  static rank_state ranks[NRANKS];
  pthread_t host[NRANKS], proxy[NRANKS];
  /* STANDIN_INIT_THREADS: each rank's init on a thread of its own, all at
   * once (ncclCommInitAll runs one init job per rank on its own thread). */
  int init_threads = getenv("STANDIN_INIT_THREADS") != NULL;
  for (int i = 0; i < NRANKS; i++) {
    rank_state *r = &ranks[i];
    memset(r, 0, sizeof *r);
    r->rank = i;
    r->rng = 0x9E3779B97F4A7C15ULL; /* every rank draws the same noise */
    pthread_mutex_init(&r->m, NULL);
    pthread_cond_init(&r->c, NULL);
    if (init_threads)
      pthread_create(&host[i], NULL, init_thread, r);
    else
      init_rank(r);
  }
  for (int i = 0; init_threads && i < NRANKS; i++) pthread_join(host[i], NULL);
  for (int i = 0; i < NRANKS; i++) {
    pthread_create(&proxy[i], NULL, proxy_thread, &ranks[i]);
    pthread_create(&host[i], NULL, host_thread, &ranks[i]);
  }
  for (int i = 0; i < NRANKS; i++) {
    pthread_join(host[i], NULL);
    pthread_mutex_lock(&ranks[i].m);
    ranks[i].done = 1;
    pthread_cond_broadcast(&ranks[i].c);
    pthread_mutex_unlock(&ranks[i].m);
    pthread_join(proxy[i], NULL);
  }
  if (!finalize) return;
  if (lose_dir && rmdir(getenv("DYNCC_TRACE")) != 0) {
    perror("standin: rmdir DYNCC_TRACE");
    exit(2);
  }
  /* NCCL's teardown: the tuner's finalize first, the profiler's last. */
  for (int i = 0; i < NRANKS; i++) {
    tuner->finalize(ranks[i].tctx);
    ((ncclProfiler_v5_t *)profiler)->finalize(ranks[i].pctx);
    pthread_mutex_destroy(&ranks[i].m);
    pthread_cond_destroy(&ranks[i].c);
  }
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: standin ABI CALLS finalize|nofinalize|loop\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  abi = atoi(argv[1]);
  calls = atoi(argv[2]);
  const char *mode = argv[3];
  const char *path = getenv("DYNCC_TEST_PLUGIN_LIB");
  lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib) {
    fprintf(stderr, "standin: cannot dlopen DYNCC_TEST_PLUGIN_LIB: %s\n", path ? dlerror() : "unset");
    return 2;
  }
  char sym[32];
  snprintf(sym, sizeof sym, "ncclProfiler_v%d", abi);
  /* NCCL opens the profiler by its own name (libnccl-profiler-dyncc.so,
   * installed as a link to the tuner's file): DYNCC_TEST_PROFILER_LIB
   * opens it that way, as a second dlopen. */
  const char *ppath = getenv("DYNCC_TEST_PROFILER_LIB");
  void *plib = ppath ? dlopen(ppath, RTLD_NOW | RTLD_LOCAL) : lib;
  if (!plib) {
    fprintf(stderr, "standin: cannot dlopen DYNCC_TEST_PROFILER_LIB: %s\n", dlerror());
    return 2;
  }
  tuner = dlsym(lib, "ncclTunerPlugin_v6");
  profiler = dlsym(plib, sym);
  if (!tuner || !profiler) {
    fprintf(stderr, "standin: %s or ncclTunerPlugin_v6 missing\n", sym);
    return 2;
  }
  const char *initial = getenv("DYNCC_TEST_INITIAL_MASK");
  event_mask = initial ? atoi(initial) : 0;
  if (strcmp(mode, "loop") == 0) {
    for (;; round_no++) {
      run_round(1);
      printf("round %d\n", round_no);
    }
  }
  lose_dir = strcmp(mode, "lostdir") == 0;
  zero_channels = strcmp(mode, "nchan0") == 0;
  own_channels = strcmp(mode, "ownchannels") == 0;
  int finalize = strcmp(mode, "finalize") == 0 || lose_dir || zero_channels || own_channels;
  run_round(finalize);
  if (strcmp(mode, "fork") == 0) {
    pid_t child = fork();
    if (child == 0) exit(0); /* runs the exit hooks in the child */
    int status = 0;
    waitpid(child, &status, 0);
    printf("child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  if (finalize && !lose_dir) {
    if (plib != lib) dlclose(plib);
    dlclose(lib);
  }
  return 0;
}
