/* A stand-in NCCL for the profiler tests: loads the plugin library
 * (DYNCC_TEST_PLUGIN_LIB), resolves ncclTunerPlugin_v6 and ncclProfiler_vN,
 * and drives two ranks of one communicator in NCCL's order and threads:
 * per rank a host thread (tuner init after profiler init, as NCCL's init
 * does; then per collective getCollInfo, getChunkSize per task, Group start, Coll start, Coll
 * stop, Group stop) and a proxy thread that later sends each channel's
 * KernelCh start, recordEventState(KernelChStop) and stop, long after the
 * Coll event was stopped. Collective GPU times come from a small world
 * (latency + bytes / bandwidth per algorithm and protocol) with noise.
 *
 * usage: standin ABI CALLS MODE
 *   ABI   7, 6, 5, 4 (profiler versions with GPU timestamps) or 3 (none);
 *         7 is NCCL 2.31+ (STANDIN_NCCL_VERSION=23102 or 23206: from 2.32.6
 *         the tuner is ncclTunerPlugin_v7)
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
 *         seqcomms    STANDIN_COMMS (default 100) communicators (ids COMM_ID + k)
 *                     one after another: init, CALLS collectives, finalize
 *         livecomms   as seqcomms, but every communicator stays alive until all
 *                     ran; then all are finalized, in order
 *         chdir       as finalize, but the process changes its working directory
 *                     to STANDIN_CHDIR before finalizing (a relative DYNCC_TRACE)
 *         tmplink     as finalize (its trace file written), then a symbolic link
 *                     to STANDIN_LINK_TARGET is made at the file's temporary name
 *                     and a second round (new sizes) is run and finalized: its
 *                     write must fail, naming the temporary, and leave the link
 * DYNCC_TEST_INITIAL_MASK: NCCL's process-wide event mask before the first
 * init (default 0); every init is handed that one int.
 * With STANDIN_AGGREGATE set, every 7th call is two AllReduce tasks NCCL
 * aggregated: one getCollInfo (numPipeOps 2, the summed nBytes), then a
 * Coll event per task, fed as "unknown" (no answer links either).
 * With STANDIN_INIT_THREADS set, each rank's init runs on a thread of its own.
 * With STANDIN_PRINT_CHUNK set, rank 0 prints "chunk COLL NBYTES CHUNK" per
 * call: what getChunkSize answered for its first task (NCCL's 131072 offered).
 * Profiler v7 only: with STANDIN_SYMK set, every 6th call (an AllReduce)
 * runs as a symmetric kernel (its Coll event says isSymColl, kernelVariant
 * AllReduce_AGxLL_R, algo AGxLL_R, proto ""), printed "sym COLL NBYTES
 * VARIANT"; with STANDIN_CE set, every AllGather runs on the copy engines
 * (a CeColl event, no Coll event, no kernel), printed "ce COLL NBYTES";
 * with STANDIN_TAGS set, call i carries userTag 0x100 + i % 3 (on its
 * CollApi, Coll and CeColl events). STANDIN_KERNELS_FIRST: see
 * standin_core.h. NCCL_ALGO (a comma list of algorithm names, any case):
 * as NCCL, the cost table's cells of every other algorithm are IGNORE
 * (-1) before getCollInfo, whatever the tuner then forces.
 * With STANDIN_PHASES set, the calls are AllReduce in three phases of CALLS
 * calls each: 4096 and 65536 bytes alternately, then 1 MiB (a new shape),
 * then 4096 again; rank 0 prints "callmask PHASE I MASK" with the event
 * mask NCCL read for each call.
 * STANDIN_PATTERN (a job's ways of holding tracing up, CALLS calls of steady
 * AllReduce at 4096 and 65536 bytes alternately, plus):
 *   oneoff    first 40 one-off calls at init, one per shape (Broadcast and
 *             Reduce, 20 sizes each: a parameter broadcast)
 *   simulate  every 1000th call also a tuner call NCCL never launches (1 MiB,
 *             as ncclGroupSimulateEnd asks the tuner)
 *   replay    after the first 2 calls (one per size: the graph's capture),
 *             CUDA-graph replays: the captured collectives' events with no
 *             tuner call
 * and rank 0 prints "events E N" at the end: of the N collectives launched
 * from call STANDIN_WARMUP on (default CALLS / 5), E read a mask asking for
 * Coll events (NCCL paid for the event).
 * Prints "mask N" after each rank's init, "fed COLL NBYTES ALGO PROTO CH SRC
 * NS" for each collective rank 0 ran and timed, "untimed COLL NBYTES" for
 * those it ran with nChannels 0, and the logger's lines ("WARN ...",
 * "INFO ..."). */
#include "standin_core.h"

#include <dirent.h>
#include <strings.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 2
#define COMM_ID 0xC0FFEE0011223344ULL

static int own_channels, round_no;

/* The world: GPU time of a collective in ns. */
static double world_ns(int algo, int proto, size_t bytes) {
  static const double lat[3] = {4000, 6000, 9000};  /* LL, LL128, SIMPLE */
  static const double bw[3] = {2.0, 8.0, 20.0};     /* bytes per ns */
  double a = algo == 0 ? 0.8 : 1.0;                 /* TREE a little faster to start */
  return lat[proto] * a + (double)bytes / (bw[proto] * (algo == 0 ? 0.7 : 1.0));
}

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static int calls;
static int lose_dir;
/* Bit a: algorithm a allowed by the job's NCCL_ALGO (all when unset). */
static int allowed_algos = 0x7f;

static void read_nccl_algo(void) {
  const char *v = getenv("NCCL_ALGO");
  if (!v || !*v) return;
  allowed_algos = 0;
  for (int a = 0; a < 7; a++) {
    size_t n = strlen(ALGOS[a]);
    for (const char *p = v; *p; p++)
      if ((p == v || p[-1] == ',') && strncasecmp(p, ALGOS[a], n) == 0 && (p[n] == ',' || p[n] == 0))
        allowed_algos |= 1 << a;
  }
}

static void *host_thread(void *arg) {
  rank_state *r = arg;
  static const size_t sizes[4] = {4096, 65536, 1 << 20, 8 << 20};
  int aggregate = getenv("STANDIN_AGGREGATE") != NULL;
  int symk = abi >= 7 && getenv("STANDIN_SYMK") != NULL;
  int cecoll = abi >= 7 && getenv("STANDIN_CE") != NULL;
  int tags = abi >= 7 && getenv("STANDIN_TAGS") != NULL;
  int phases = getenv("STANDIN_PHASES") != NULL;
  int print_chunk = getenv("STANDIN_PRINT_CHUNK") != NULL;
  const char *pattern = getenv("STANDIN_PATTERN");
  int oneoff = pattern && strcmp(pattern, "oneoff") == 0;
  int simulate = pattern && strcmp(pattern, "simulate") == 0;
  int replay = pattern && strcmp(pattern, "replay") == 0;
  const char *warm = getenv("STANDIN_WARMUP");
  int warmup = warm ? atoi(warm) : calls / 5;
  long paid = 0, launched = 0;
  for (int i = 0; i < (phases ? 3 * calls : calls); i++) {
    int coll = (i % 5 == 4) ? 2 : 4; /* AllGather now and then, else AllReduce */
    size_t bytes = sizes[(i / 5) % 4] + 4096u * (size_t)round_no;
    int phase = phases ? i / calls : 0;
    if (phases) {
      static const size_t phase_sizes[3][2] = {{4096, 65536}, {1 << 20, 1 << 20}, {4096, 4096}};
      coll = 4;
      bytes = phase_sizes[phase > 2 ? 2 : phase][i % 2];
    }
    if (pattern) {
      coll = 4;
      bytes = i % 2 ? 65536 : 4096;
      if (oneoff && i < 40) {
        coll = i < 20 ? 0 : 1;
        bytes = (size_t)8 << (i % 20);
      }
    }
    int ntasks = aggregate && i % 7 == 3 ? 2 : 1;
    if (ntasks > 1) coll = 4;
    float cost[7][3];
    /* NCCL's own estimate: the world without noise; -1 where it cannot run. */
    for (int a = 0; a < 7; a++)
      for (int p = 0; p < 3; p++)
        cost[a][p] = a > 1 || !(allowed_algos & (1 << a)) ? -1.0f : (float)world_ns(a, p, bytes);
    if (simulate && i % 1000 == 999) {
      /* ncclGroupSimulateEnd: the tuner is asked, nothing is launched. */
      float sim[7][3];
      memcpy(sim, cost, sizeof sim);
      int sch = 0;
      tuner->getCollInfo(r->tctx, (ncclFunc_t)4, 1 << 20, 1, (float **)sim, 7, 3, 0, &sch);
    }
    int nch = 0;
    /* A graph replay launches what was captured: no tuner call. */
    if (!(replay && i >= 2))
      tuner->getCollInfo(r->tctx, (ncclFunc_t)coll, bytes * (size_t)ntasks, ntasks, (float **)cost, 7, 3, 0, &nch);
    nccl_pick_t ran = core_nccl_pick(cost);
    int asked = nch;
    if (nch <= 0 || own_channels) nch = 4;
    if (nch > 32) nch = 32;
    /* The table chose what ran only if NCCL honoured all it forced; a
     * forced call NCCL ran on other channels is "answered X, ran Y". */
    int overrode = own_channels && asked > 0 && asked != nch && ran.forced;
    core_path_t path = {NULL, tags ? 0x100 + (uint64_t)(i % 3) : 0};
    if (cecoll && coll == 2 && ntasks == 1) {
      /* NCCL ranked a copy-engine method cheapest (beside the table). */
      core_launch_ce(r, coll, bytes, path.tag);
      if (r->rank == 0) {
        pthread_mutex_lock(&print_lock);
        printf("ce %s %zu\n", FUNCS[coll], bytes);
        pthread_mutex_unlock(&print_lock);
      }
      continue;
    }
    if (symk && coll == 4 && ntasks == 1 && i % 6 == 5) {
      /* NCCL ranked a symmetric kernel cheapest: whatever the table
       * forced, no classic pair ran. */
      path.variant = "AllReduce_AGxLL_R";
      double noise = 1.0 + 0.1 * ((double)(next_rand(&r->rng) % 1000) / 1000.0 - 0.5);
      uint64_t t = (uint64_t)llround(world_ns(1, 0, bytes) * 0.5 * noise);
      core_launch_as(r, coll, bytes, ran.algo, ran.proto, nch, nch, t, path);
      if (r->rank == 0) {
        pthread_mutex_lock(&print_lock);
        printf("sym %s %zu %s\n", FUNCS[coll], bytes, path.variant);
        pthread_mutex_unlock(&print_lock);
      }
      continue;
    }
    for (int task = 0; task < ntasks; task++) {
      /* calcCollChunking (NCCL 2.30-2.32 enqueue): per task, after
       * getCollInfo chose, NCCL's own chunk offered to the tuner. */
      if (tuner->getChunkSize) {
        size_t chunk = 131072;
        tuner->getChunkSize(r->tctx, (ncclFunc_t)coll, bytes, ran.algo, ran.proto, nch, &chunk);
        if (print_chunk && r->rank == 0 && task == 0) {
          pthread_mutex_lock(&print_lock);
          printf("chunk %s %zu %zu\n", FUNCS[coll], bytes, chunk);
          pthread_mutex_unlock(&print_lock);
        }
      }
      int says_zero = hold_kernels && i % 3 == 1;
      double noise = 1.0 + 0.1 * ((double)(next_rand(&r->rng) % 1000) / 1000.0 - 0.5);
      uint64_t t = (uint64_t)llround(world_ns(ran.algo, ran.proto, bytes) * noise);
      core_launch_as(r, coll, bytes, ran.algo, ran.proto, says_zero ? 0 : nch, nch, t, path);
      if (i >= warmup) {
        launched++;
        paid += (r->launch_mask & PROFILE_COLL) != 0;
      }
      if (r->rank == 0 && !pattern) {
        pthread_mutex_lock(&print_lock);
        if (phases) printf("callmask %d %d %d\n", phase, i % calls, r->launch_mask);
        if (says_zero)
          printf("untimed %s %zu\n", FUNCS[coll], bytes);
        else
          printf("fed %s %zu %s %s %d %s %llu\n", FUNCS[coll], bytes, ALGOS[ran.algo], PROTOS[ran.proto], nch,
                 ntasks > 1   ? "unknown"
                 : overrode   ? "ran-other-channels"
                 : ran.forced ? "table"
                              : "nccl",
                 (unsigned long long)t);
        pthread_mutex_unlock(&print_lock);
      }
    }
  }
  if (pattern && r->rank == 0) {
    pthread_mutex_lock(&print_lock);
    printf("events %ld %ld\n", paid, launched);
    pthread_mutex_unlock(&print_lock);
  }
  return NULL;
}

/* Runs `ranks` (NRANKS of them) of `comm` through CALLS collectives;
 * finalizes them if `finalize`. */
static void run_comm(rank_state *ranks, int finalize) {
  for (int i = 0; i < NRANKS; i++) {
    rank_state *r = &ranks[i];
    memset(r, 0, sizeof *r);
    r->rank = i;
    r->rng = 0x9E3779B97F4A7C15ULL; /* every rank draws the same noise */
  }
  /* STANDIN_INIT_THREADS: each rank's init on a thread of its own. */
  core_run_ranks(ranks, NRANKS, host_thread, getenv("STANDIN_INIT_THREADS") != NULL);
  if (!finalize) return;
  if (lose_dir && rmdir(getenv("DYNCC_TRACE")) != 0) {
    perror("standin: rmdir DYNCC_TRACE");
    exit(2);
  }
  core_finalize_ranks(ranks, NRANKS);
}

static void run_round(int finalize) {
  static rank_state ranks[NRANKS];
  run_comm(ranks, finalize);
}

/* seqcomms and livecomms: n communicators, one after another. */
static void run_comms(int n, int live) {
  rank_state *all = calloc((size_t)n * NRANKS, sizeof(rank_state));
  if (!all) {
    fprintf(stderr, "standin: out of memory\n");
    exit(2);
  }
  for (int k = 0; k < n; k++) {
    comm.id = COMM_ID + (uint64_t)k;
    run_comm(&all[k * NRANKS], !live);
  }
  for (int k = 0; live && k < n; k++) core_finalize_ranks(&all[k * NRANKS], NRANKS);
  free(all);
}

/* tmplink: a symbolic link at the temporary name of the one trace file
 * in DYNCC_TRACE (".NAME.tmp"). */
static void link_tmp(void) {
  const char *dir = getenv("DYNCC_TRACE");
  const char *target = getenv("STANDIN_LINK_TARGET");
  DIR *d = dir && target ? opendir(dir) : NULL;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || len < 6 || strcmp(e->d_name + len - 6, ".trace") != 0) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/.%s.tmp", dir, e->d_name);
    if (symlink(target, path) != 0) break;
    printf("linked %s\n", path);
    closedir(d);
    return;
  }
  fprintf(stderr, "standin: no trace file to link beside in %s\n", dir ? dir : "(unset)");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: standin ABI CALLS finalize|nofinalize|loop\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  calls = atoi(argv[2]);
  const char *mode = argv[3];
  /* STANDIN_COMM_ID: another commHash, as another job's communicator has. */
  const char *id = getenv("STANDIN_COMM_ID");
  comm = (core_comm_t){"standin-comm", id ? strtoull(id, NULL, 0) : COMM_ID, 1, NRANKS, NRANKS};
  core_load(atoi(argv[1]), "standin");
  read_nccl_algo();
  if (strcmp(mode, "loop") == 0) {
    for (;; round_no++) {
      run_round(1);
      printf("round %d\n", round_no);
    }
  }
  if (strcmp(mode, "seqcomms") == 0 || strcmp(mode, "livecomms") == 0) {
    const char *n = getenv("STANDIN_COMMS");
    run_comms(n ? atoi(n) : 100, mode[0] == 'l');
    core_unload();
    return 0;
  }
  if (strcmp(mode, "chdir") == 0) {
    static rank_state ranks[NRANKS];
    run_comm(ranks, 0);
    const char *to = getenv("STANDIN_CHDIR");
    if (!to || chdir(to) != 0) {
      perror("standin: chdir STANDIN_CHDIR");
      exit(2);
    }
    core_finalize_ranks(ranks, NRANKS);
    core_unload();
    return 0;
  }
  if (strcmp(mode, "tmplink") == 0) {
    run_round(1);
    link_tmp();
    round_no = 1;
    run_round(1);
    core_unload();
    return 0;
  }
  lose_dir = strcmp(mode, "lostdir") == 0;
  hold_kernels = strcmp(mode, "nchan0") == 0;
  own_channels = strcmp(mode, "ownchannels") == 0;
  int finalize = strcmp(mode, "finalize") == 0 || lose_dir || hold_kernels || own_channels;
  run_round(finalize);
  if (strcmp(mode, "fork") == 0) {
    pid_t child = fork();
    if (child == 0) exit(0); /* runs the exit hooks in the child */
    int status = 0;
    waitpid(child, &status, 0);
    printf("child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  if (finalize && !lose_dir) core_unload();
  return 0;
}
