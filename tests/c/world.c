/* A stand-in NCCL whose collective times come from a world file: the
 * truth.csv `dyncc simulate -o DIR` writes (the noise-free time of every
 * forced setting and of NCCL's own choice, per node count, collective and
 * size). It drives WORLD_RANKS ranks of one communicator (NNODES nodes,
 * NNODES*PPN ranks) through the plugin's tuner and profiler in NCCL's
 * order and threads (standin_core.h), like a job's production round.
 *
 * usage: world TRUTH_CSV NNODES PPN CALLS
 * env:   DYNCC_TEST_PLUGIN_LIB  the plugin library
 *        WORLD_RANKS  ranks driven (default 2), each with its own tuner
 *                     and profiler context, asking the tuner on every call
 *        WORLD_SEED   noise seed (default 1): the same seed draws the same
 *                     noise for call k whatever ran, so rounds with and
 *                     without exploration compare
 *        WORLD_NOISE  sd of ln(time) noise (default 0.03)
 *        WORLD_COLLS  comma list of truth collectives to run (default all)
 *        WORLD_NCCL_VERSION  the NCCL version claimed, as NCCL's code
 *                     (default 23007, 2.30.7; 22807 is 2.28.7)
 *        WORLD_JOB    a number mixed into the communicator id (default 0):
 *                     rounds of one shape with different numbers are
 *                     different communicators (NCCL's commHash)
 *        WORLD_JOB_NOISE  sd of ln(time) between jobs (default 0: none):
 *                     when set, each (job, collective, size) draws one
 *                     factor every call there shares, whatever setting
 *                     runs (a job's placement, contention, clocks), and
 *                     the per-call noise is drawn per job too; unset, every
 *                     job draws the same per-call noise
 *
 * Every (collective, size) the truth holds at the communicator's shape is
 * run CALLS times, round robin over them (ordered by NCCL's collective
 * number, then size), as a job's steps are. Per call every rank calls
 * getCollInfo with NCCL's cost table for the cell: -1 where the truth has
 * no row for an (algorithm, protocol), else that setting's time, with
 * NCCL's own choice (the truth's default row's ran_*) cheapest, so
 * without a tuner NCCL runs what the truth says it runs. NCCL then runs
 * the cheapest cell: one the tuner set to 0 (forced) if any, looked up in
 * the truth with the channel count the tuner wrote (-1 when it wrote
 * none), else the default row. What ran (the row's ran_* algorithm,
 * protocol and channels) is what the Coll event says; the kernel channels
 * span true_us x exp(noise).
 *
 * A truth with a `chunk` column (`dyncc simulate --chunks`) also holds
 * each forced setting at chunks the plugin answered; after getCollInfo,
 * as NCCL 2.30's calcCollChunking does, every rank asks getChunkSize
 * (tuner v6) what it ran, offering a size no table chunk can be (not a
 * multiple of 16) for NCCL's own, and the row run is the one at the chunk
 * answered (chunk 0 when the answer is unchanged). Without the column
 * every row is at NCCL's chunk and an answered chunk is exit status 3.
 *
 * Prints, per (collective, size), "shape COLL NBYTES nccl_us N table_us T
 * best_us B" (NCCL's default's time; the mean noise-free time of what rank
 * 0 ran over the calls; the best time any setting in the truth has), then
 * "summary calls N disagreements D ran_us T nccl_us TN best_us TB" (sums
 * over the calls of noise-free times; D: calls where some rank's answer,
 * forced cell, channel count or chunk, differed from rank 0's). Also "mask N"
 * per init and the plugin's log lines ("INFO ...", "WARN ...").
 * Exit status: 0 done; 2 bad usage or truth file; 3 the tuner forced a
 * setting the truth does not hold (the test world must answer every
 * setting); 4 the tuner wrote a cell NCCL marked unavailable. */
#include "standin_core.h"

#include <errno.h>
#include <math.h>
#include <unistd.h>

#define WORLD_COMM_ID 0x3D0A1DC0FFEE2020ULL
#define MAX_RANKS 64
/* What the world offers getChunkSize as NCCL's chunk: no table chunk is
 * it (chunks are multiples of 16 bytes), so an unchanged answer is NCCL's. */
#define WORLD_NCCL_CHUNK ((size_t)131071)

static const char *TRUTH_COLLS[5] = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"};
static const char *TRUTH_ALGOS[7] = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
static const char *TRUTH_PROTOS[3] = {"ll", "ll128", "simple"};

/* One truth row at the communicator's shape. */
typedef struct {
  int coll;
  size_t bytes;
  int algo, proto; /* -1, -1: NCCL's default */
  int channels;    /* -1: not forced */
  long chunk;      /* the chunk the plugin answered, bytes; 0: NCCL's */
  double us;
  int ran_algo, ran_proto, ran_channels;
  int line; /* in the truth file, for messages */
} row_t;

/* One (collective, size): its rows, NCCL's default row, the best time. */
typedef struct {
  int coll;
  size_t bytes;
  int first, n; /* rows[first .. first + n) */
  int def;      /* the default row */
  double best_us;
  float cost[7][3]; /* NCCL's cost table before the tuner */
} shape_t;

/* A rank's answer for one call, and what that rank then ran. */
typedef struct {
  int cell; /* the cell the tuner set to 0 (algo*3+proto), -1 none */
  int nch;  /* the channel count it wrote, 0 none */
  long chunk; /* the chunk getChunkSize answered, 0 none */
  int row;  /* the truth row that ran */
} answer_t;

static const char *truth_path;
static row_t *rows;
static int nrows;
static shape_t *shapes;
static int nshapes;
static int calls_per_shape;
static uint64_t seed;
static double noise_sd;
static double job_noise_sd;
static uint64_t job; /* WORLD_JOB */
static answer_t *answers[MAX_RANKS];

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("world: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stdout);
  /* Not exit(): other ranks' threads are still calling the plugin. */
  _exit(code);
}

static int name_index(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}

/* Splits line (modified in place) at commas; the number of fields. */
static int split(char *line, char **f, int max) {
  int n = 0;
  line[strcspn(line, "\r\n")] = 0;
  for (char *p = line;; p++) {
    if (n < max) f[n] = p;
    n++;
    p = strchr(p, ',');
    if (!p) break;
    *p = 0;
  }
  return n;
}

enum { C_PLATFORM, C_COLL, C_NODES, C_RANKS, C_BYTES, C_ALGO, C_PROTO, C_CH, C_US, C_RAN_ALGO, C_RAN_PROTO, C_RAN_CH, NCOLS };
static const char *COLUMNS[NCOLS] = {"platform",  "collective", "nodes",    "ranks",         "size_bytes",    "algorithm",
                                     "protocol",  "channels",   "true_us",  "ran_algorithm", "ran_protocol",  "ran_channels"};

static long parse_long(const char *s, int line, const char *what) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end)
    die(2, "%s:%d: %s '%s' is not an integer; regenerate the file with `dyncc simulate -o DIR`", truth_path, line, what, s);
  return v;
}

static int wanted_coll(const char *list, const char *name) {
  if (!list) return 1;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, name, n) == 0) return 1;
    p += len;
    if (*p == ',') p++;
  }
  return 0;
}

static int row_order(const void *a, const void *b) {
  const row_t *x = a, *y = b;
  if (x->coll != y->coll) return x->coll - y->coll;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
  return x->line - y->line;
}

/* Reads the truth rows at (nnodes, nranks) whose collective is wanted. */
static void read_truth(int nnodes, int nranks, const char *colls) {
  FILE *f = fopen(truth_path, "r");
  if (!f) die(2, "cannot open %s: %s", truth_path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  int col[NCOLS], col_chunk = -1, lineno = 0, cap_rows = 0;
  char platform[128] = "";
  char *fs[64];
  while (getline(&line, &cap, f) > 0) {
    lineno++;
    int n = split(line, fs, 64);
    if (lineno == 1) {
      for (int c = 0; c < NCOLS; c++) {
        col[c] = -1;
        for (int i = 0; i < n && i < 64; i++)
          if (strcmp(fs[i], COLUMNS[c]) == 0) col[c] = i;
        if (col[c] < 0)
          die(2, "%s:1: no column '%s' (a truth.csv from `dyncc simulate -o DIR` has it)", truth_path, COLUMNS[c]);
      }
      for (int i = 0; i < n && i < 64; i++)
        if (strcmp(fs[i], "chunk") == 0) col_chunk = i;
      continue;
    }
    if (n == 1 && fs[0][0] == 0) continue;
    if (n > 64) n = 64;
    for (int c = 0; c < NCOLS; c++)
      if (col[c] >= n) die(2, "%s:%d: %d fields, expected a '%s' column", truth_path, lineno, n, COLUMNS[c]);
    if (parse_long(fs[col[C_NODES]], lineno, "nodes") != nnodes) continue;
    if (parse_long(fs[col[C_RANKS]], lineno, "ranks") != nranks) continue;
    if (!wanted_coll(colls, fs[col[C_COLL]])) continue;
    if (!platform[0])
      snprintf(platform, sizeof platform, "%s", fs[col[C_PLATFORM]]);
    else if (strcmp(platform, fs[col[C_PLATFORM]]) != 0)
      die(2, "%s:%d: platform '%s' after '%s': a world is one platform; pass one profile's truth.csv", truth_path,
          lineno, fs[col[C_PLATFORM]], platform);
    row_t r;
    r.line = lineno;
    r.coll = name_index(TRUTH_COLLS, 5, fs[col[C_COLL]]);
    if (r.coll < 0) die(2, "%s:%d: unknown collective '%s'", truth_path, lineno, fs[col[C_COLL]]);
    long bytes = parse_long(fs[col[C_BYTES]], lineno, "size_bytes");
    if (bytes <= 0) die(2, "%s:%d: size_bytes %ld is not positive", truth_path, lineno, bytes);
    r.bytes = (size_t)bytes;
    int is_default = strcmp(fs[col[C_ALGO]], "default") == 0;
    r.algo = is_default ? -1 : name_index(TRUTH_ALGOS, 7, fs[col[C_ALGO]]);
    r.proto = is_default ? -1 : name_index(TRUTH_PROTOS, 3, fs[col[C_PROTO]]);
    r.ran_algo = name_index(TRUTH_ALGOS, 7, fs[col[C_RAN_ALGO]]);
    r.ran_proto = name_index(TRUTH_PROTOS, 3, fs[col[C_RAN_PROTO]]);
    if ((!is_default && (r.algo < 0 || r.proto < 0)) || r.ran_algo < 0 || r.ran_proto < 0)
      die(2, "%s:%d: unknown algorithm or protocol ('%s' '%s' ran '%s' '%s'); expected NCCL's names in lower case",
          truth_path, lineno, fs[col[C_ALGO]], fs[col[C_PROTO]], fs[col[C_RAN_ALGO]], fs[col[C_RAN_PROTO]]);
    r.channels = (int)parse_long(fs[col[C_CH]], lineno, "channels");
    r.ran_channels = (int)parse_long(fs[col[C_RAN_CH]], lineno, "ran_channels");
    if (col_chunk >= n) die(2, "%s:%d: %d fields, expected a 'chunk' column", truth_path, lineno, n);
    r.chunk = col_chunk < 0 ? 0 : parse_long(fs[col_chunk], lineno, "chunk");
    if (r.chunk < 0 || (is_default && r.chunk != 0))
      die(2, "%s:%d: chunk %ld: a forced setting's answered chunk in bytes, or 0 (NCCL's)", truth_path, lineno, r.chunk);
    if (r.ran_channels < 1 || r.ran_channels > MAX_KERNEL_CHANNELS)
      die(2, "%s:%d: ran_channels %d outside 1..%d", truth_path, lineno, r.ran_channels, MAX_KERNEL_CHANNELS);
    char *end;
    r.us = strtod(fs[col[C_US]], &end);
    if (end == fs[col[C_US]] || *end || !(r.us > 0) || !isfinite(r.us))
      die(2, "%s:%d: true_us '%s' is not a positive number", truth_path, lineno, fs[col[C_US]]);
    if (nrows == cap_rows) {
      cap_rows = cap_rows ? 2 * cap_rows : 1024;
      rows = realloc(rows, (size_t)cap_rows * sizeof *rows);
      if (!rows) die(2, "out of memory");
    }
    rows[nrows++] = r;
  }
  free(line);
  fclose(f);
  if (nrows == 0)
    die(2, "%s: no rows at %d nodes, %d ranks%s%s; simulate that node count (`dyncc simulate --nodes`)", truth_path,
        nnodes, nranks, colls ? " for WORLD_COLLS=" : "", colls ? colls : "");
}

static int find_row(const shape_t *s, int algo, int proto, int channels, long chunk) {
  for (int i = s->first; i < s->first + s->n; i++)
    if (rows[i].algo == algo && rows[i].proto == proto && rows[i].channels == channels && rows[i].chunk == chunk)
      return i;
  return -1;
}

/* Groups the rows by (collective, size) and builds each one's cost table. */
static void build_shapes(void) {
  qsort(rows, (size_t)nrows, sizeof *rows, row_order);
  shapes = calloc((size_t)nrows, sizeof *shapes);
  if (!shapes) die(2, "out of memory");
  for (int i = 0; i < nrows;) {
    shape_t *s = &shapes[nshapes++];
    s->coll = rows[i].coll;
    s->bytes = rows[i].bytes;
    s->first = i;
    while (i < nrows && rows[i].coll == s->coll && rows[i].bytes == s->bytes) i++;
    s->n = i - s->first;
    s->def = -1;
    s->best_us = INFINITY;
    for (int a = 0; a < 7; a++)
      for (int p = 0; p < 3; p++) s->cost[a][p] = -1.0f;
    float cheapest = INFINITY;
    for (int k = s->first; k < i; k++) {
      row_t *r = &rows[k];
      if (r->us < s->best_us) s->best_us = r->us;
      /* NCCL's estimate knows nothing of a tuner's chunk. */
      if (r->chunk != 0) continue;
      if (r->algo < 0) {
        if (s->def >= 0)
          die(2, "%s:%d: a second default row for %s %zu bytes (the first at line %d)", truth_path, r->line,
              TRUTH_COLLS[s->coll], s->bytes, rows[s->def].line);
        s->def = k;
        continue;
      }
      /* NCCL's estimate of a setting: its time on NCCL's own channel
       * count, or its best pinned one where the truth has only those. */
      float *c = &s->cost[r->algo][r->proto];
      if (r->channels == -1)
        *c = (float)r->us;
      else if (find_row(s, r->algo, r->proto, -1, 0) < 0 && (*c < 0 || (float)r->us < *c))
        *c = (float)r->us;
      if ((float)r->us < cheapest) cheapest = (float)r->us;
    }
    if (s->def < 0)
      die(2, "%s: no default row (algorithm 'default') for %s %zu bytes; NCCL's own choice is the world's baseline",
          truth_path, TRUTH_COLLS[s->coll], s->bytes);
    /* NCCL's model ranks its own choice first (not the fastest in truth). */
    const row_t *d = &rows[s->def];
    if ((float)d->us < cheapest) cheapest = (float)d->us;
    s->cost[d->ran_algo][d->ran_proto] = cheapest * 0.5f;
  }
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/* exp(noise) of call k: a normal draw (Box-Muller) from (seed, k) alone,
 * so every rank, and every round with the same seed, draws the same. */
static double normal_of(uint64_t key, uint64_t k) {
  uint64_t a = splitmix64(key * 0xD1342543DE82EF95ULL + 2 * k);
  uint64_t b = splitmix64(key * 0xD1342543DE82EF95ULL + 2 * k + 1);
  double u1 = ((double)(a >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
  double u2 = (double)(b >> 11) / 9007199254740992.0;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static double noise_factor(uint64_t k) {
  if (job_noise_sd == 0) return exp(noise_sd * normal_of(seed, k));
  uint64_t key = splitmix64(seed ^ splitmix64(job + 0x6A6F62ULL)); /* "job" */
  double per_job = job_noise_sd * normal_of(key ^ 0x5348415045ULL, k % (uint64_t)nshapes); /* "SHAPE" */
  return exp(noise_sd * normal_of(key, k) + per_job);
}

static void *host_thread(void *arg) {
  rank_state *r = arg;
  int total = nshapes * calls_per_shape;
  for (int i = 0; i < total; i++) {
    const shape_t *s = &shapes[i % nshapes];
    float cost[7][3];
    memcpy(cost, s->cost, sizeof cost);
    int nch = 0;
    tuner->getCollInfo(r->tctx, (ncclFunc_t)s->coll, s->bytes, 1, (float **)cost, 7, 3, 0, &nch);
    answer_t *ans = &answers[r->rank][i];
    ans->cell = -1;
    for (int a = 0; a < 7; a++)
      for (int p = 0; p < 3; p++) {
        if (s->cost[a][p] < 0 && cost[a][p] != s->cost[a][p])
          die(4, "rank %d call %d: the tuner wrote %g into %s/%s of %s %zu bytes, which NCCL marked unavailable (-1)",
              r->rank, i, (double)cost[a][p], TRUTH_ALGOS[a], TRUTH_PROTOS[p], TRUTH_COLLS[s->coll], s->bytes);
        if (cost[a][p] == 0.0f && ans->cell < 0) ans->cell = a * 3 + p;
      }
    ans->nch = nch;
    nccl_pick_t k = core_nccl_pick(cost);
    const row_t *d = &rows[s->def];
    int row = s->def;
    /* Channels written without a forced cell pin NCCL's own choice. */
    int algo = k.forced ? k.algo : d->ran_algo, proto = k.forced ? k.proto : d->ran_proto;
    /* calcCollChunking: NCCL offers its own chunk for what it will run. */
    size_t chunk = WORLD_NCCL_CHUNK;
    if (tuner->getChunkSize)
      tuner->getChunkSize(r->tctx, (ncclFunc_t)s->coll, s->bytes, algo, proto, nch > 0 ? nch : d->ran_channels, &chunk);
    ans->chunk = chunk == WORLD_NCCL_CHUNK ? 0 : (long)chunk;
    if (k.forced || nch > 0 || ans->chunk != 0) {
      row = find_row(s, algo, proto, nch > 0 ? nch : -1, ans->chunk);
      if (row < 0)
        die(3, "rank %d call %d: the tuner forced %s/%s on %d channels (-1: NCCL's count) at chunk %ld (0: NCCL's) "
               "for %s %zu bytes at this shape, which %s does not hold; simulate that setting (dyncc simulate "
               "--channels, --chunks)",
            r->rank, i, TRUTH_ALGOS[algo], TRUTH_PROTOS[proto], nch > 0 ? nch : -1, ans->chunk, TRUTH_COLLS[s->coll],
            s->bytes, truth_path);
    }
    ans->row = row;
    const row_t *ran = &rows[row];
    uint64_t t = (uint64_t)llround(ran->us * 1000.0 * noise_factor((uint64_t)i));
    if (t == 0) t = 1;
    core_launch(r, s->coll, s->bytes, ran->ran_algo, ran->ran_proto, ran->ran_channels, ran->ran_channels, t);
  }
  return NULL;
}

static double env_double(const char *name, double def) {
  const char *v = getenv(name);
  if (!v) return def;
  char *end;
  double x = strtod(v, &end);
  if (end == v || *end || !isfinite(x) || x < 0) die(2, "%s=%s: expected a number >= 0", name, v);
  return x;
}

static uint64_t env_u64(const char *name, uint64_t def) {
  const char *v = getenv(name);
  if (!v) return def;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end || v[0] == '-') die(2, "%s=%s: expected a non-negative integer", name, v);
  return (uint64_t)x;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: world TRUTH_CSV NNODES PPN CALLS\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  truth_path = argv[1];
  int nnodes = atoi(argv[2]), ppn = atoi(argv[3]);
  calls_per_shape = atoi(argv[4]);
  if (nnodes < 1 || ppn < 1 || calls_per_shape < 1) die(2, "NNODES, PPN and CALLS must be positive integers");
  const char *rv = getenv("WORLD_RANKS");
  int nranks_driven = rv ? atoi(rv) : 2;
  if (nranks_driven < 1 || nranks_driven > MAX_RANKS || nranks_driven > nnodes * ppn)
    die(2, "WORLD_RANKS=%s: expected 1..%d and at most NNODES*PPN", rv, MAX_RANKS);
  seed = env_u64("WORLD_SEED", 1);
  noise_sd = env_double("WORLD_NOISE", 0.03);
  job_noise_sd = env_double("WORLD_JOB_NOISE", 0);
  job = env_u64("WORLD_JOB", 0);
  core_nccl_version = (int)env_u64("WORLD_NCCL_VERSION", 23007);
  read_truth(nnodes, nnodes * ppn, getenv("WORLD_COLLS"));
  build_shapes();

  /* Every communicator has its own id (NCCL's commHash), so the rounds of
   * a test are different communicators; WORLD_JOB tells repeated rounds
   * of one shape apart. */
  uint64_t comm_id = WORLD_COMM_ID ^ ((uint64_t)nnodes << 40) ^ ((uint64_t)ppn << 32) ^ job;
  comm = (core_comm_t){"world-comm", comm_id, nnodes, nnodes * ppn, ppn};
  core_load(6, "world");
  rank_state *ranks = calloc((size_t)nranks_driven, sizeof *ranks);
  if (!ranks) die(2, "out of memory");
  int total = nshapes * calls_per_shape;
  for (int i = 0; i < nranks_driven; i++) {
    ranks[i].rank = i;
    answers[i] = calloc((size_t)total, sizeof(answer_t));
    if (!answers[i]) die(2, "out of memory");
  }
  core_run_ranks(ranks, nranks_driven, host_thread, 0);
  core_finalize_ranks(ranks, nranks_driven);

  double *ran_sum = calloc((size_t)nshapes, sizeof(double));
  if (!ran_sum) die(2, "out of memory");
  double ran_us = 0, nccl_us = 0, best_us = 0;
  int disagreements = 0;
  for (int i = 0; i < total; i++) {
    const shape_t *sh = &shapes[i % nshapes];
    const answer_t *a0 = &answers[0][i];
    for (int r = 1; r < nranks_driven; r++)
      if (answers[r][i].cell != a0->cell || answers[r][i].nch != a0->nch || answers[r][i].chunk != a0->chunk) {
        disagreements++;
        break;
      }
    ran_sum[i % nshapes] += rows[a0->row].us;
    ran_us += rows[a0->row].us;
    nccl_us += rows[sh->def].us;
    best_us += sh->best_us;
  }
  for (int k = 0; k < nshapes; k++)
    printf("shape %s %zu nccl_us %.6f table_us %.6f best_us %.6f\n", TRUTH_COLLS[shapes[k].coll], shapes[k].bytes,
           rows[shapes[k].def].us, ran_sum[k] / calls_per_shape, shapes[k].best_us);
  printf("summary calls %d disagreements %d ran_us %.6f nccl_us %.6f best_us %.6f\n", total, disagreements, ran_us,
         nccl_us, best_us);
  core_unload();
  for (int i = 0; i < nranks_driven; i++) free(answers[i]);
  free(ranks);
  free(ran_sum);
  free(shapes);
  free(rows);
  return 0;
}
