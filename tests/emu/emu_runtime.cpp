/* emu_runtime.cpp - the CPU side of the CUDA emulation (da_emu.h): every thread of a CTA
 * is a ucontext fiber; CTAs run one after another. A fiber runs until it reaches a
 * barrier or a warp collective; the last participant to arrive completes it (for a
 * collective: computes every lane's result with the PTX references of da_device.cuh)
 * and the others resume on a later round. Between barriers fibers are resumed in a
 * seeded random order. A round in which no fiber can move is a deadlock, reported with
 * what each fiber waits for.
 * A fiber starts on its own stack through makecontext / setcontext; after that the
 * scheduler and the fibers switch with _setjmp / _longjmp, which leave the signal mask
 * alone: swapcontext saves and restores it with a system call at every switch, a third of
 * the emulator's time. Under AddressSanitizer (which must be told of every stack switch)
 * every switch stays swapcontext. */
#undef _FORTIFY_SOURCE /* its __longjmp_chk refuses a jump to another stack: a fiber's */
#include "emu_runtime.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "../../templates/cuda/da_device.cuh"
#include "da_emu_abi.h"

extern "C" {
da_emu_thread *da_emu_cur;
}

#if defined(__SANITIZE_ADDRESS__)
#define DA_EMU_UCONTEXT_SWITCH 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DA_EMU_UCONTEXT_SWITCH 1
#endif
#endif
#ifndef DA_EMU_UCONTEXT_SWITCH
#define DA_EMU_UCONTEXT_SWITCH 0
#endif

namespace {

enum { OP_NONE, OP_SYNC, OP_SYNC_OR, OP_SYNC_AND, OP_SYNCWARP, OP_SHFL, OP_ANY, OP_BALLOT, OP_LDSM, OP_LDSM_T, OP_MMA, OP_MMA_BF16,
       OP_WG_FENCE, OP_WG_MMA, OP_WG_COMMIT, OP_WG_WAIT, OP_MBAR_WAIT, OP_NAMED };
const char *const OP_NAME[] = {"none",        "__syncthreads",     "__syncthreads_or", "__syncthreads_and",
                               "__syncwarp",  "__shfl_xor_sync",   "__any_sync",       "__ballot_sync",    "ldmatrix.x4",
                               "ldmatrix.x4.trans", "mma.f16",     "mma.bf16",         "wgmma.fence",
                               "wgmma.mma_async", "wgmma.commit_group", "wgmma.wait_group",
                               "mbarrier.try_wait", "bar.sync (named)"};
enum { READY, WAITING, DONE };
const size_t STACK = 256 * 1024;
/* The shared address of the first byte of dynamic shared memory: 16-byte aligned, as on
 * a GPU, and deliberately not 1024-aligned, so kernels that need 1024-byte alignment
 * (wgmma's swizzled layouts) must align it themselves, as they must on a GPU. Each launch
 * takes another (16 to 1008, from its seed), so the bytes the kernel skips to align run
 * from 16 to 1008, the most a GPU's placement can make it skip: a plan that reserves
 * fewer for it reaches past its shared memory on some launch. */
da_u32 SMEM_BASE = 0x230;

struct Copy {
  unsigned char *dst;
  const unsigned char *src; /* NULL: zero fill */
  /* a tensor copy's chunk (cp.async.bulk.tensor): its bytes, read at the issue, written
   * through the async proxy (a wgmma may read them without a fence.proxy.async) */
  bool tensor = false;
  unsigned char bytes[16] = {0};
};

struct Fiber {
  da_emu_thread t;
  ucontext_t ctx; /* where it starts */
  jmp_buf jb;     /* where it resumes, once started */
  bool started = false;
  void *stack = nullptr;
  int state = DONE;
  const unsigned *wait_gen = nullptr;
  unsigned wait_val = 0;
  int wait_op = OP_NONE;
  /* __syncwarp: the mask this lane waits with (0: none) and its own release counter */
  unsigned sw_mask = 0, sw_gen = 0;
  /* collective operands and results */
  int lane_mask = 0, pred = 0;
  float fin = 0, fout = 0;
  const unsigned char *addr = nullptr;
  da_u32 a[4] = {0, 0, 0, 0}, b[2] = {0, 0}, r[4] = {0, 0, 0, 0};
  float c[4] = {0, 0, 0, 0};
  std::vector<Copy> pending;
  std::vector<std::vector<Copy>> groups;
  /* wgmma operands at arrival */
  float *wg_d = nullptr;
  const da_u32 *wg_a = nullptr;
  da_u64 wg_desc_a = 0, wg_desc_b = 0;
  int wg_n = 0, wg_bf16 = 0, wg_mn = 0, wg_wait = 0, wg_scale_d = 1;
  bool wg_fenced = false;
  std::vector<int> dirty; /* smem chunks written since this thread's last fence.proxy.async */
  unsigned long long fence_seq = 0; /* event number of this thread's last fence.proxy.async */
};

/* One wgmma.mma_async of a warpgroup in flight: its operands, the hash of the shared
 * memory it read, and per thread the result that lands at the covering wait, the
 * accumulator registers as they were when the chain on them was issued, and the A
 * fragment (RS form) it read. */
struct WgOp {
  int n, bf16, mn, scale_d; /* scale_d 0: d = A B, the accumulators' values ignored */
  da_u64 desc_a, desc_b;
  bool a_regs;
  uint64_t hash;
  float *d[128];
  std::vector<float> result[128], before[128];
  const da_u32 *a[128];
  da_u32 a_copy[128][4];
  bool superseded = false; /* a later op on the same accumulators lands instead */
};
struct WgState {
  std::vector<WgOp> open;                /* issued, not yet committed */
  std::vector<std::vector<WgOp>> groups; /* committed, oldest first */
};

struct Barrier {
  unsigned gen = 0;
  int arrived = 0, op = OP_NONE, acc = 0, result = 0;
  unsigned mask = 0, who = 0;
};

/* An mbarrier (sm_90): `count` arrivals complete a phase; each cp.async copy it tracks
 * lands at the arrival or, at random, when the phase completes. A phase whose arrivals
 * are all in completes at once if a thread waits on it, else as late as the rules allow
 * (ready): when a thread waits, when the arrivers arrive again, when nothing else can
 * move, or at random. So a reader that skips its wait sees stale bytes, and a writer that
 * refills a buffer still in use changes it under the wgmma reading it. */
struct MBar {
  int count = 0, pending = 0, waiters = 0;
  long long tx = 0; /* bytes expected (expect_tx) and not yet issued to complete on it */
  int init_by = -1;       /* the thread that initialised it */
  bool init_fenced = false; /* that thread's proxy fence since: TMA may complete on it */
  bool ready = false;
  unsigned phase = 0; /* phases completed */
  std::vector<Copy> landing;
};
struct NamedBar {
  int count = 0, arrived = 0;
  int op = 0, acc = 0, result = 0; /* op: 0 sync / arrive, 1 red.or, 2 red.and */
  unsigned gen = 0;
};

struct Range {
  const unsigned char *p;
  size_t n;
  int writable;
};

ucontext_t sched;
jmp_buf sched_jb;
std::vector<Fiber> fibers;
Barrier block_bar, warp_bar[32], wg_bar[8];
std::map<const void *, MBar> mbars; /* by address; per block */
NamedBar named[16];
/* per 16-byte chunk: the event number at which data arrived there through an mbarrier
 * (0: none since the block began); a wgmma may read it only after a fence.proxy.async of
 * every thread of its warpgroup that came later */
std::vector<unsigned long long> landed_seq;
unsigned long long event_seq;
unsigned round_gen; /* scheduling rounds so far (a fiber can wait for the next) */
WgState wg_state[8];
int nthreads, live;
unsigned live_lanes[32];
Fiber *cur;
unsigned char *smem_window, *smem; /* smem = smem_window + SMEM_BASE */
size_t smem_bytes;
std::vector<Range> ranges;
std::string error;
uint64_t rng;
unsigned long long mma_count;  /* warp-level mma.m16n8k16 completed */
unsigned long long tma_count;  /* cp.async.bulk.tensor issued */
unsigned long long ldsm_count; /* warp-level ldmatrix.x4 completed */
unsigned long long bar_count;  /* CTA-wide barriers (__syncthreads and its variants) completed */
unsigned long long wgmma_count; /* warpgroup-level wgmma.mma_async completed */
double wgmma_flops;             /* their FLOPs: 2 * 64 * N * 16 each */
int (*block_keep)(void *, unsigned, unsigned, unsigned);
void *block_keep_user;
void (*entry_invoke)(void *, const void *);
void *entry_kernel;
const void *entry_args;

uint64_t next_rand() {
  uint64_t x = (rng += 0x9E3779B97F4A7C15ull);
  return da_splitmix64(x);
}

int self_id() { return (int)(cur - fibers.data()); }

/* The running fiber (cur) gives the CPU back to the scheduler (run_fiber returns); it
 * resumes here when the scheduler next runs it (a fiber that is DONE never does). */
bool on_fiber;
void to_sched() {
  if (!on_fiber) abort(); /* the scheduler has no one to give the CPU to */
#if DA_EMU_UCONTEXT_SWITCH
  swapcontext(&cur->ctx, &sched);
#else
  if (!_setjmp(cur->jb)) _longjmp(sched_jb, 1);
#endif
}

/* The scheduler runs fiber f (cur) until it gives the CPU back. Not inlined: the jump back
 * lands in this frame, which stays live while f runs, and no local of the scheduler's loop
 * lives across a setjmp. */
__attribute__((noinline)) void run_fiber(Fiber &f) {
  on_fiber = true;
#if DA_EMU_UCONTEXT_SWITCH
  swapcontext(&sched, &f.ctx);
#else
  if (!_setjmp(sched_jb)) {
    if (f.started) _longjmp(f.jb, 1);
    f.started = true;
    setcontext(&f.ctx); /* its first run: onto its own stack, at fiber_main */
  }
#endif
  on_fiber = false;
}


[[noreturn]] void fail(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (error.empty()) {
    char who[160];
    snprintf(who, sizeof who, "block (%u,%u,%u) thread %d: ", cur->t.bid.x, cur->t.bid.y, cur->t.bid.z, self_id());
    error = std::string(who) + buf;
  }
  cur->state = DONE;
  to_sched(); /* never resumed */
  abort();
}

void wait_gen(const unsigned *gen, int op) {
  cur->state = WAITING;
  cur->wait_gen = gen;
  cur->wait_val = *gen;
  cur->wait_op = op;
  to_sched();
}
void wait_on(Barrier &b, int op) { wait_gen(&b.gen, op); }

/* Shared-memory writes of the generic proxy not yet followed by the writer's
 * fence.proxy.async: the 16-byte chunk's writer (-1: none), and each thread's list. A
 * wgmma (async proxy) reading such a chunk is a missing fence. */
std::vector<int> async_dirty;
void note_generic_write(const unsigned char *dst, size_t n) {
  for (size_t off = (size_t)(dst - smem) / 16; off * 16 < (size_t)(dst - smem) + n; off++) {
    async_dirty[off] = (int)(cur - fibers.data());
    cur->dirty.push_back((int)off);
  }
}

/* a cp.async copy's 16 bytes arrive (zeros where it reads nothing) */
void copy16(const Copy &c) {
  static const unsigned char zero[16] = {0};
  memcpy(c.dst, c.tensor ? c.bytes : c.src ? c.src : zero, 16);
}

void land(const std::vector<Copy> &g) {
  for (const Copy &c : g) {
    copy16(c);
    note_generic_write(c.dst, 16);
  }
}

int in_smem(const void *p, size_t n) {
  const unsigned char *q = (const unsigned char *)p;
  return q >= smem && q + n <= smem + smem_bytes;
}

/* the 128-byte lines (address >> 7) the running CTA prefetched (da_emu_prefetch_l2) */
std::unordered_set<uintptr_t> prefetched;

const Range *find_range(const void *p, size_t n) {
  const unsigned char *q = (const unsigned char *)p;
  for (const Range &r : ranges)
    if (q >= r.p && q + n <= r.p + r.n) return &r;
  return nullptr;
}

/* ---- block barrier ---------------------------------------------------------------------- */
void complete_block() {
  bar_count++;
  block_bar.result = block_bar.acc;
  block_bar.arrived = 0;
  block_bar.gen++;
}

int syncthreads(int op, int pred) {
  Barrier &b = block_bar;
  if (b.arrived == 0) {
    b.op = op;
    b.acc = op == OP_SYNC_AND ? 1 : 0;
  } else if (b.op != op) {
    fail("%s while other threads wait in %s", OP_NAME[op], OP_NAME[b.op]);
  }
  if (op == OP_SYNC_OR) b.acc |= pred != 0;
  if (op == OP_SYNC_AND) b.acc &= pred != 0;
  if (++b.arrived == live) complete_block();
  else wait_on(b, op);
  return block_bar.result;
}

/* ---- warp collectives --------------------------------------------------------------------- */
void complete_warp(int w) {
  Barrier &b = warp_bar[w];
  Fiber *lanes = &fibers[(size_t)w * 32];
  switch (b.op) {
  case OP_SHFL:
    for (int l = 0; l < 32; l++)
      if (b.who >> l & 1) {
        int src = l ^ lanes[l].lane_mask;
        if (src >= 32 || !(b.who >> src & 1)) {
          cur = &lanes[l];
          fail("__shfl_xor_sync reads lane %d, which did not take part", src);
        }
        lanes[l].fout = lanes[src].fin;
      }
    break;
  case OP_ANY: {
    int any = 0;
    for (int l = 0; l < 32; l++)
      if (b.who >> l & 1) any |= lanes[l].pred != 0;
    for (int l = 0; l < 32; l++)
      if (b.who >> l & 1) lanes[l].pred = any;
    break;
  }
  case OP_BALLOT: {
    unsigned bits = 0;
    for (int l = 0; l < 32; l++)
      if (b.who >> l & 1) bits |= (unsigned)(lanes[l].pred != 0) << l;
    for (int l = 0; l < 32; l++)
      if (b.who >> l & 1) lanes[l].pred = (int)bits;
    break;
  }
  case OP_LDSM:
  case OP_LDSM_T: {
    da_u32 off[32], out[32][4];
    for (int l = 0; l < 32; l++) off[l] = (da_u32)(lanes[l].addr - smem);
    da_ref_ldmatrix_x4(smem, off, b.op == OP_LDSM_T, out);
    ldsm_count++;
    for (int l = 0; l < 32; l++) memcpy(lanes[l].r, out[l], sizeof out[l]);
    break;
  }
  case OP_MMA:
  case OP_MMA_BF16: {
    float a[32][4][2], bb[32][2][2], c[32][4];
    for (int l = 0; l < 32; l++) {
      for (int i = 0; i < 4; i++)
        for (int e = 0; e < 2; e++) {
          da_u16 h = (da_u16)(lanes[l].a[i] >> (16 * e));
          a[l][i][e] = b.op == OP_MMA ? da_f16_to_f32(h) : da_bf16_to_f32(h);
        }
      for (int i = 0; i < 2; i++)
        for (int e = 0; e < 2; e++) {
          da_u16 h = (da_u16)(lanes[l].b[i] >> (16 * e));
          bb[l][i][e] = b.op == OP_MMA ? da_f16_to_f32(h) : da_bf16_to_f32(h);
        }
      memcpy(c[l], lanes[l].c, sizeof c[l]);
    }
    da_ref_mma(a, bb, c);
    mma_count++;
    for (int l = 0; l < 32; l++) memcpy(lanes[l].c, c[l], sizeof c[l]);
    break;
  }
  default:
    break;
  }
  b.arrived = 0;
  b.who = 0;
  b.gen++;
}

/* __syncwarp(mask): lanes with disjoint masks synchronise independently; it completes
 * when every live lane of the mask waits with the same mask. */
bool try_complete_syncwarp(int w, unsigned mask) {
  Fiber *lanes = &fibers[(size_t)w * 32];
  unsigned need = mask & live_lanes[w];
  for (int l = 0; l < 32; l++)
    if ((need >> l & 1) && lanes[l].sw_mask != mask) return false;
  for (int l = 0; l < 32; l++)
    if (need >> l & 1) {
      lanes[l].sw_mask = 0;
      lanes[l].sw_gen++;
    }
  return true;
}

void syncwarp(unsigned mask) {
  int id = self_id(), w = id / 32, lane = id % 32;
  if (!(mask >> lane & 1)) fail("__syncwarp with mask 0x%08x that does not name lane %d", mask, lane);
  Fiber *lanes = &fibers[(size_t)w * 32];
  for (int l = 0; l < 32; l++)
    if (lanes[l].sw_mask && lanes[l].sw_mask != mask && (lanes[l].sw_mask & mask))
      fail("__syncwarp mask 0x%08x overlaps lane %d waiting with mask 0x%08x", mask, l, lanes[l].sw_mask);
  cur->sw_mask = mask;
  if (!try_complete_syncwarp(w, mask)) wait_gen(&cur->sw_gen, OP_SYNCWARP);
}

/* Expected participants: the live lanes named in the mask. Operations that need the
 * whole warp (ldmatrix, mma) or a partner (shuffle) fail if a named lane has exited. */
void warp_arrive(int op, unsigned mask) {
  int id = self_id(), w = id / 32, lane = id % 32;
  Barrier &b = warp_bar[w];
  if (!(mask >> lane & 1)) fail("%s with mask 0x%08x that does not name lane %d", OP_NAME[op], mask, lane);
  if ((op == OP_LDSM || op == OP_LDSM_T || op == OP_MMA || op == OP_MMA_BF16) && mask != 0xffffffffu)
    fail("%s needs the whole warp", OP_NAME[op]);
  if (mask & ~live_lanes[w])
    fail("%s names lanes 0x%08x that have exited", OP_NAME[op], mask & ~live_lanes[w]);
  if (b.arrived == 0) {
    b.op = op;
    b.mask = mask;
  } else if (b.op != op || b.mask != mask) {
    fail("divergent warp: %s mask 0x%08x while lanes 0x%08x wait in %s mask 0x%08x", OP_NAME[op], mask, b.who,
         OP_NAME[b.op], b.mask);
  }
  b.arrived++;
  b.who |= 1u << lane;
  if (b.who == (mask & live_lanes[w])) complete_warp(w);
  else wait_on(b, op);
}

/* ---- warpgroup collectives (wgmma, sm_90a) ----------------------------------------------
 * wgmma.fence / mma_async / commit_group / wait_group are .sync.aligned: the 128 threads of
 * the warpgroup execute each together, so each is a warpgroup barrier here. An mma_async
 * computes its result at issue (da_ref_wgmma) and keeps it until the wait that covers it. */
bool wg_addr_ok(da_u32 a) { return a >= SMEM_BASE && a + 2 <= SMEM_BASE + smem_bytes; }

uint64_t wg_hash(const WgOp &op) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  auto mix = [&](da_u32 a) {
    int w = async_dirty[(a - SMEM_BASE) / 16];
    if (w >= 0)
      fail("wgmma reads shared address 0x%x, written by thread %d without a fence.proxy.async since", a, w);
    da_u16 v;
    memcpy(&v, smem - SMEM_BASE + a, 2);
    h = da_splitmix64(h ^ v ^ ((uint64_t)a << 16));
  };
  for (int m = 0; m < 64 && !op.a_regs; m++)
    for (int k = 0; k < 16; k++) mix(da_wgmma_elem_addr(op.desc_a, 0, m, k));
  for (int k = 0; k < 16; k++)
    for (int c = 0; c < op.n; c++) mix(da_wgmma_elem_addr(op.desc_b, op.mn, c, k));
  return h;
}

/* the latest in-flight op of warpgroup state st whose accumulators for thread t are d */
WgOp *wg_latest(WgState &st, int t, const float *d) {
  for (size_t i = st.open.size(); i-- > 0;)
    if (st.open[i].d[t] == d) return &st.open[i];
  for (size_t g = st.groups.size(); g-- > 0;)
    for (size_t i = st.groups[g].size(); i-- > 0;)
      if (st.groups[g][i].d[t] == d) return &st.groups[g][i];
  return nullptr;
}

void wg_issue(int g, Fiber *th) {
  const Fiber &f0 = th[0];
  WgOp op;
  op.n = f0.wg_n, op.bf16 = f0.wg_bf16, op.mn = f0.wg_mn, op.desc_a = f0.wg_desc_a, op.desc_b = f0.wg_desc_b;
  op.scale_d = f0.wg_scale_d;
  op.a_regs = f0.wg_a != nullptr;
  for (int t = 0; t < 128; t++) {
    const Fiber &f = th[t];
    if (!f.wg_fenced) {
      cur = &th[t];
      fail("wgmma.mma_async without a wgmma.fence since this thread's last wait_group");
    }
    if (f.wg_n != op.n || f.wg_bf16 != op.bf16 || f.wg_mn != op.mn || f.wg_desc_b != op.desc_b || f.wg_scale_d != op.scale_d ||
        (f.wg_a != nullptr) != op.a_regs || (!op.a_regs && f.wg_desc_a != op.desc_a)) {
      cur = &th[t];
      fail("wgmma.mma_async operands differ across the warpgroup (thread %d)", t);
    }
  }
  unsigned long long fenced = ~0ull; /* the warpgroup's oldest last fence.proxy.async */
  for (int t = 0; t < 128; t++) fenced = std::min(fenced, th[t].fence_seq);
  auto arrived_ok = [&](da_u32 a) {
    if (landed_seq[(a - SMEM_BASE) / 16] > fenced)
      fail("wgmma reads shared address 0x%x, which arrived through an mbarrier after the last fence.proxy.async of a "
           "thread of the warpgroup",
           a);
  };
  for (int m = 0; m < 64 && !op.a_regs; m++)
    for (int k = 0; k < 16; k++) {
      if (!wg_addr_ok(da_wgmma_elem_addr(op.desc_a, 0, m, k))) fail("wgmma A operand (%d, %d) outside shared memory", m, k);
      arrived_ok(da_wgmma_elem_addr(op.desc_a, 0, m, k));
    }
  for (int k = 0; k < 16; k++)
    for (int c = 0; c < op.n; c++) {
      if (!wg_addr_ok(da_wgmma_elem_addr(op.desc_b, op.mn, c, k))) fail("wgmma B operand (%d, %d) outside shared memory", k, c);
      arrived_ok(da_wgmma_elem_addr(op.desc_b, op.mn, c, k));
    }
  op.hash = wg_hash(op);
  WgState &st = wg_state[g];
  float *acc[128];
  for (int t = 0; t < 128; t++) {
    float *d = th[t].wg_d;
    op.d[t] = d;
    WgOp *prev = wg_latest(st, t, d);
    if (prev) { /* chained on accumulators in flight: takes the earlier op's result */
      op.result[t] = prev->result[t];
      op.before[t] = prev->before[t];
      prev->superseded = true;
    } else {
      op.result[t].assign(d, d + op.n / 2);
      op.before[t] = op.result[t];
    }
    if (!op.scale_d) op.result[t].assign((size_t)op.n / 2, 0.f); /* d = A B */
    acc[t] = op.result[t].data();
    op.a[t] = th[t].wg_a;
    if (op.a_regs) memcpy(op.a_copy[t], th[t].wg_a, sizeof op.a_copy[t]);
  }
  da_ref_wgmma(smem - SMEM_BASE, op.n, op.bf16, op.desc_a, op.a_regs ? op.a_copy : nullptr, op.desc_b, op.mn, acc);
  wgmma_count++;
  wgmma_flops += 2.0 * 64 * op.n * 16;
  st.open.push_back(std::move(op));
}

void wg_land(WgOp &op, Fiber *th) {
  if (wg_hash(op) != op.hash)
    fail("shared memory read by an in-flight wgmma.mma_async changed before the wait_group that covers it");
  for (int t = 0; t < 128; t++) {
    cur = &th[t];
    if (op.a_regs && memcmp(op.a[t], op.a_copy[t], sizeof op.a_copy[t]))
      fail("A-fragment registers of an in-flight wgmma.mma_async modified before its wait_group");
    if (op.superseded) continue;
    if (memcmp(op.d[t], op.before[t].data(), op.before[t].size() * sizeof(float)))
      fail("accumulator registers of an in-flight wgmma.mma_async touched before its wait_group");
    memcpy(op.d[t], op.result[t].data(), op.result[t].size() * sizeof(float));
  }
}

void complete_wg(int g) {
  Barrier &b = wg_bar[g];
  Fiber *th = &fibers[(size_t)g * 128];
  WgState &st = wg_state[g];
  Fiber *caller = cur;
  switch (b.op) {
  case OP_WG_FENCE:
    for (int t = 0; t < 128; t++) th[t].wg_fenced = true;
    break;
  case OP_WG_MMA:
    wg_issue(g, th);
    break;
  case OP_WG_COMMIT:
    st.groups.push_back(std::move(st.open));
    st.open.clear();
    break;
  case OP_WG_WAIT:
    for (int t = 0; t < 128; t++)
      if (th[t].wg_wait != th[0].wg_wait) fail("wgmma.wait_group %d while thread 0 waits %d", th[t].wg_wait, th[0].wg_wait);
    while ((int)st.groups.size() > th[0].wg_wait) {
      for (WgOp &op : st.groups.front()) wg_land(op, th);
      st.groups.erase(st.groups.begin());
    }
    for (int t = 0; t < 128; t++) th[t].wg_fenced = false;
    break;
  default:
    break;
  }
  cur = caller;
  b.arrived = 0;
  b.gen++;
}

void wg_arrive(int op) {
  int id = self_id(), g = id / 128;
  if ((g + 1) * 128 > nthreads) fail("%s needs a whole warpgroup (128 threads)", OP_NAME[op]);
  for (int w = 4 * g; w < 4 * g + 4; w++)
    if (live_lanes[w] != 0xffffffffu) fail("%s while threads of the warpgroup have exited", OP_NAME[op]);
  Barrier &b = wg_bar[g];
  if (b.arrived == 0) b.op = op;
  else if (b.op != op) fail("divergent warpgroup: %s while others wait in %s", OP_NAME[op], OP_NAME[b.op]);
  if (++b.arrived == 128) {
    /* a wait_group takes time: at random the group lands a few scheduling rounds later,
     * while other warpgroups (a producer refilling buffers) run */
    if (op == OP_WG_WAIT && (next_rand() & 1))
      for (int r = 1 + (int)(next_rand() % 4); r > 0; r--) wait_gen(&round_gen, op);
    complete_wg(g);
  } else {
    wait_on(b, op);
  }
}

void fiber_main() {
  Fiber *f = cur;
  entry_invoke(entry_kernel, entry_args);
  if (!f->pending.empty() || !f->groups.empty()) fail("exits with cp.async copies outstanding");
  if (self_id() / 128 < 8 && (!wg_state[self_id() / 128].open.empty() || !wg_state[self_id() / 128].groups.empty()))
    fail("exits with wgmma.mma_async in flight");
  f->state = DONE;
  int id = self_id();
  live--;
  live_lanes[id / 32] &= ~(1u << (id % 32));
  /* an exited thread no longer holds back a barrier */
  if (block_bar.arrived && block_bar.arrived == live) complete_block();
  Fiber *lanes = &fibers[(size_t)(id / 32) * 32];
  for (int l = 0; l < 32; l++)
    if (lanes[l].sw_mask) try_complete_syncwarp(id / 32, lanes[l].sw_mask);
  to_sched(); /* DONE: never resumed (no return through uc_link: sched holds no context
               * when the switches are jumps) */
  abort();
}

std::string describe_deadlock() {
  std::string s = "deadlock: no thread can move;";
  int shown = 0;
  for (size_t i = 0; i < fibers.size() && shown < 8; i++)
    if (fibers[i].state == WAITING) {
      char buf[96];
      snprintf(buf, sizeof buf, " thread %zu waits in %s;", i, OP_NAME[fibers[i].wait_op]);
      s += buf;
      shown++;
    }
  char buf[64];
  snprintf(buf, sizeof buf, " %d live", live);
  return s + buf;
}

/* one copy tracked by an mbarrier lands (event ev) */
void mbar_land(const Copy &c, unsigned long long ev) {
  copy16(c);
  size_t chunk = (size_t)(c.dst - smem) / 16;
  landed_seq[chunk] = c.tensor ? 0 : ev; /* the async proxy's own writes need no proxy fence */
  async_dirty[chunk] = -1; /* its writer needs no fence: the readers' fence after their wait covers it */
}

void mbar_complete(MBar &m) {
  unsigned long long ev = ++event_seq;
  for (const Copy &c : m.landing) mbar_land(c, ev);
  m.landing.clear();
  m.pending = m.count;
  m.ready = false;
  m.phase++;
}

/* complete every ready mbarrier (all: else one at random, rarely); whether any was */
bool mbar_complete_ready(bool all) {
  bool any = false;
  for (auto &kv : mbars)
    if (kv.second.ready && (all || next_rand() % 64 == 0)) {
      mbar_complete(kv.second);
      any = true;
    }
  return any;
}

int run_block(dim3 bid, dim3 grid) {
  live = nthreads;
  prefetched.clear();
  block_bar = Barrier();
  mbars.clear();
  for (NamedBar &b : named) b = NamedBar();
  for (int g = 0; g < 8; g++) {
    wg_bar[g] = Barrier();
    wg_state[g] = WgState();
  }
  for (int w = 0; w < 32; w++) {
    warp_bar[w] = Barrier();
    int lo = w * 32, n = std::min(32, std::max(0, nthreads - lo));
    live_lanes[w] = n == 32 ? 0xffffffffu : (1u << n) - 1;
  }
  for (int i = 0; i < nthreads; i++) {
    Fiber &f = fibers[(size_t)i];
    f.t.tid = {(unsigned)i, 0, 0};
    f.t.bid = bid;
    f.t.bdim = {(unsigned)nthreads, 1, 1};
    f.t.gdim = grid;
    f.state = READY;
    f.sw_mask = 0;
    f.wg_fenced = false;
    f.dirty.clear();
    f.fence_seq = 0;
    f.pending.clear();
    f.groups.clear();
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = &sched;
    makecontext(&f.ctx, fiber_main, 0);
    f.started = false;
  }
  std::vector<int> order((size_t)nthreads);
  for (int i = 0; i < nthreads; i++) order[(size_t)i] = i;
  while (live > 0) {
    for (int i = nthreads - 1; i > 0; i--) std::swap(order[(size_t)i], order[next_rand() % (uint64_t)(i + 1)]);
    round_gen++;
    int moved = mbar_complete_ready(false);
    for (int i : order) {
      Fiber &f = fibers[(size_t)i];
      if (f.state == DONE || (f.state == WAITING && *f.wait_gen == f.wait_val)) continue;
      f.state = READY;
      cur = &f;
      da_emu_cur = &f.t;
      run_fiber(f);
      moved = 1;
      if (!error.empty()) return -1;
    }
    if (!moved && !mbar_complete_ready(true)) {
      error = describe_deadlock();
      return -1;
    }
  }
  return 0;
}

MBar &mbar(void *bar) {
  auto it = mbars.find(bar);
  if (it == mbars.end()) fail("mbarrier at %p used before mbarrier.init", bar);
  return it->second;
}

} // namespace

/* ---- hooks called by the emulated kernel (da_emu.h) ----------------------------------------- */
extern "C" {

void *da_emu_dyn_smem(void) { return smem; }

int da_emu_syncthreads(int kind, int pred) {
  return syncthreads(kind == 1 ? OP_SYNC_OR : kind == 2 ? OP_SYNC_AND : OP_SYNC, pred);
}

void da_emu_syncwarp(unsigned mask) { syncwarp(mask); }

float da_emu_shfl_xor(unsigned mask, float v, int lane_mask) {
  cur->fin = v;
  cur->lane_mask = lane_mask;
  warp_arrive(OP_SHFL, mask);
  return cur->fout;
}

int da_emu_vote_any(unsigned mask, int pred) {
  cur->pred = pred;
  warp_arrive(OP_ANY, mask);
  return cur->pred;
}

unsigned da_emu_vote_ballot(unsigned mask, int pred) {
  cur->pred = pred;
  warp_arrive(OP_BALLOT, mask);
  return (unsigned)cur->pred;
}

void da_emu_ldmatrix_x4(da_u32 r[4], const void *p, int trans) {
  if (!in_smem(p, 16)) fail("ldmatrix row address %p outside dynamic shared memory", p);
  if ((uintptr_t)p % 16) fail("ldmatrix row address %p not 16-byte aligned", p);
  cur->addr = (const unsigned char *)p;
  warp_arrive(trans ? OP_LDSM_T : OP_LDSM, 0xffffffffu);
  memcpy(r, cur->r, sizeof cur->r);
}

void da_emu_mma(float d[4], const da_u32 a[4], da_u32 b0, da_u32 b1, int bf16) {
  memcpy(cur->a, a, sizeof cur->a);
  cur->b[0] = b0;
  cur->b[1] = b1;
  memcpy(cur->c, d, sizeof cur->c);
  warp_arrive(bf16 ? OP_MMA_BF16 : OP_MMA, 0xffffffffu);
  memcpy(d, cur->c, sizeof cur->c);
}

void da_emu_cp_async16(void *dst, const void *src, int valid) {
  if (!in_smem(dst, 16)) fail("cp.async destination %p outside dynamic shared memory", dst);
  /* the source address must be aligned even where ignore-src (valid 0) reads nothing: the
   * kernels pass the row's own address there, past the tile, not a select of a valid one */
  if ((uintptr_t)dst % 16 || (uintptr_t)src % 16) fail("cp.async %p <- %p not 16-byte aligned", dst, src);
  if (valid && !find_range(src, 16)) fail("cp.async source %p (16 bytes) outside every buffer", src);
  cur->pending.push_back({(unsigned char *)dst, valid ? (const unsigned char *)src : nullptr});
}

void da_emu_cp_async_commit(void) {
  if (next_rand() & 1) { /* lands early */
    land(cur->pending);
    cur->groups.push_back({});
  } else {
    cur->groups.push_back(cur->pending);
  }
  cur->pending.clear();
}

void da_emu_cp_async_wait(int n) {
  while ((int)cur->groups.size() > n) {
    land(cur->groups.front());
    cur->groups.erase(cur->groups.begin());
  }
}

unsigned da_emu_smem_offset(const void *p) {
  if (!in_smem(p, 0)) fail("shared address of %p, which is outside dynamic shared memory", p);
  return SMEM_BASE + (unsigned)((const unsigned char *)p - smem);
}

void da_emu_wgmma(float *d, int n, int bf16, unsigned long long desc_a, const unsigned *a_regs,
                  unsigned long long desc_b, int b_mn_major, int scale_d) {
  cur->wg_scale_d = scale_d;
  cur->wg_d = d;
  cur->wg_n = n;
  cur->wg_bf16 = bf16;
  cur->wg_desc_a = desc_a;
  cur->wg_a = a_regs;
  cur->wg_desc_b = desc_b;
  cur->wg_mn = b_mn_major;
  wg_arrive(OP_WG_MMA);
}
void da_emu_wgmma_fence(void) { wg_arrive(OP_WG_FENCE); }
void da_emu_fence_proxy_async(void) {
  int me = self_id();
  for (auto &kv : mbars)
    if (kv.second.init_by == me) kv.second.init_fenced = true;
  cur->fence_seq = ++event_seq;
  for (int off : cur->dirty)
    if (async_dirty[(size_t)off] == me) async_dirty[(size_t)off] = -1;
  cur->dirty.clear();
}
void da_emu_smem_write(const void *p, size_t n) {
  if (in_smem(p, n)) note_generic_write((const unsigned char *)p, n);
}
void da_emu_wgmma_commit(void) { wg_arrive(OP_WG_COMMIT); }
void da_emu_wgmma_wait(int n) {
  cur->wg_wait = n;
  wg_arrive(OP_WG_WAIT);
}

void da_emu_mbar_init(void *bar, int count) {
  if (count <= 0) fail("mbarrier.init with count %d", count);
  if (mbars.count(bar)) fail("mbarrier at %p initialised twice", bar);
  MBar &m = mbars[bar];
  m.count = m.pending = count;
  m.init_by = self_id();
}

/* cp_async: cp.async.mbarrier.arrive.noinc - the phase also waits for this thread's
 * cp.async copies issued so far (committed or not), which land when it completes */
void da_emu_mbar_arrive(void *bar, int cp_async) {
  MBar &m = mbar(bar);
  if (m.ready) mbar_complete(m); /* a new phase begins */
  if (cp_async) {
    std::vector<Copy> mine;
    for (auto &g : cur->groups) mine.insert(mine.end(), g.begin(), g.end());
    mine.insert(mine.end(), cur->pending.begin(), cur->pending.end());
    cur->groups.clear();
    cur->pending.clear();
    for (const Copy &c : mine) {
      if (next_rand() & 1) m.landing.push_back(c);
      else mbar_land(c, ++event_seq);
    }
  }
  if (--m.pending > 0 || m.tx > 0) return; /* the phase waits for its arrivals and expected bytes */
  m.ready = true;
  if (m.waiters) mbar_complete(m);
}

void da_emu_mbar_expect_tx(void *bar, unsigned bytes) {
  MBar &m = mbar(bar);
  if (m.ready) mbar_complete(m);
  if (m.pending <= 0) fail("mbarrier.expect_tx on a phase whose arrivals are all in");
  m.tx += bytes;
}

/* The tensor map as the emulator encodes it (da_emu_tensor_map_encode) in the 128 bytes of
 * a CUtensorMap; the kernels never look inside. */
struct EmuTmap {
  unsigned magic, rank, esize, swizzle; /* swizzle: span in bytes, 0 none */
  const unsigned char *base;
  unsigned long long dims[5], strides[5]; /* strides in bytes; strides[0] = esize */
  unsigned box[5];
};
static_assert(sizeof(EmuTmap) <= 128, "a tensor map is 128 bytes");
static const unsigned EMU_TMAP_MAGIC = 0x746d6170u;

void da_emu_tma_load(void *dst, const void *map, const int *c, int rank, void *bar) {
  EmuTmap t;
  memcpy(&t, map, sizeof t);
  if (t.magic != EMU_TMAP_MAGIC) fail("cp.async.bulk.tensor with a tensor map never encoded (at %p)", map);
  if ((int)t.rank != rank) fail("cp.async.bulk.tensor.%dd on a tensor map of rank %u", rank, t.rank);
  const size_t row = (size_t)t.box[0] * t.esize;
  size_t rows = 1;
  for (int i = 1; i < rank; i++) rows *= t.box[i];
  const size_t total = row * rows;
  if (!in_smem(dst, total)) fail("cp.async.bulk.tensor destination %p (%zu bytes) outside dynamic shared memory", dst, total);
  const unsigned a0 = da_emu_smem_offset(dst);
  if (a0 % (t.swizzle == 128 ? 1024u : 128u))
    fail("cp.async.bulk.tensor destination 0x%x not %u-byte aligned", a0, t.swizzle == 128 ? 1024u : 128u);
  MBar &m = mbar(bar);
  if (!m.init_fenced)
    fail("cp.async.bulk.tensor completes on an mbarrier whose mbarrier.init its thread did not fence for the async "
         "proxy (fence.proxy.async / fence.mbarrier_init before the CTA barrier)");
  if ((long long)total > m.tx)
    fail("cp.async.bulk.tensor completes %zu bytes on an mbarrier expecting %lld (expect_tx before the copy)", total, m.tx);
  m.tx -= (long long)total;
  tma_count++;
  std::vector<Copy> copies;
  for (size_t r = 0; r < rows; r++) {
    long long g[5] = {0, 0, 0, 0, 0}; /* the row's coordinates */
    size_t rr = r;
    for (int i = 1; i < rank; i++) g[i] = (long long)c[i] + (long long)(rr % t.box[i]), rr /= t.box[i];
    for (size_t k = 0; k < row / 16; k++) {
      Copy cp;
      cp.tensor = true;
      unsigned a = a0 + (unsigned)(r * row + k * 16);
      if (t.swizzle == 128) a ^= ((a >> 7) & 7u) << 4;
      cp.dst = smem + (a - SMEM_BASE);
      for (size_t e = 0; e < 16 / t.esize; e++) {
        g[0] = (long long)c[0] + (long long)(k * 16 / t.esize + e);
        bool in = true;
        const unsigned char *p = t.base;
        for (int i = 0; i < rank; i++) {
          if (g[i] < 0 || (unsigned long long)g[i] >= t.dims[i]) in = false;
          else p += (unsigned long long)g[i] * t.strides[i];
        }
        if (!in) continue; /* zero-filled */
        if (!find_range(p, t.esize))
          fail("cp.async.bulk.tensor reads %p (coordinates %lld, %lld, %lld, %lld) outside every buffer", (const void *)p,
               g[0], g[1], g[2], g[3]);
        memcpy(cp.bytes + e * t.esize, p, t.esize);
      }
      copies.push_back(cp);
    }
  }
  for (const Copy &cp : copies) {
    if (next_rand() & 1) m.landing.push_back(cp);
    else mbar_land(cp, ++event_seq);
  }
  if (m.pending == 0 && m.tx == 0) {
    m.ready = true;
    if (m.waiters) mbar_complete(m);
  }
}

int da_emu_tensor_map_encode(void *map, int dtype, unsigned rank, void *addr, const uint64_t *dims,
                             const uint64_t *strides, const uint32_t *box, const uint32_t *estrides, int interleave,
                             int swizzle, int l2, int oob) {
  /* cuTensorMapEncodeTiled's rules (cuda.h) for what the emulator models: CUDA_ERROR_INVALID_VALUE (1) */
  static const unsigned esizes[10] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2};
  if ((uintptr_t)map % 64 || dtype < 0 || dtype > 9 || rank < 1 || rank > 5 || (uintptr_t)addr % 16) return 1;
  if (interleave != 0 || swizzle < 0 || swizzle > 3 || swizzle == 1 || swizzle == 2 || l2 < 0 || l2 > 3 || oob != 0)
    return 1; /* (32- and 64-byte swizzles, interleaved layouts and NaN fill are not modelled) */
  EmuTmap t;
  memset(&t, 0, sizeof t);
  t.magic = EMU_TMAP_MAGIC, t.rank = rank, t.esize = esizes[dtype], t.swizzle = swizzle == 3 ? 128 : 0;
  t.base = (const unsigned char *)addr;
  for (unsigned i = 0; i < rank; i++) {
    if (dims[i] == 0 || dims[i] > (1ull << 32) || box[i] == 0 || box[i] > 256 || estrides[i] != 1) return 1;
    t.dims[i] = dims[i], t.box[i] = box[i];
    t.strides[i] = i ? strides[i - 1] : t.esize;
    if (i && (strides[i - 1] % 16 || strides[i - 1] >= (1ull << 40))) return 1;
  }
  if (box[0] * t.esize % 16 || (t.swizzle && box[0] * t.esize > t.swizzle)) return 1;
  memset(map, 0, 128);
  memcpy(map, &t, sizeof t);
  return 0;
}

void da_emu_mbar_wait(void *bar, unsigned parity) {
  MBar &m = mbar(bar);
  if ((m.phase & 1) == (parity & 1) && m.ready) mbar_complete(m);
  m.waiters++;
  while ((m.phase & 1) == (parity & 1)) wait_gen(&m.phase, OP_MBAR_WAIT);
  m.waiters--;
}

/* op 0: bar.sync (wait) / bar.arrive; 1, 2: barrier.red.or / .and of pred (waits) */
static int named_bar(int id, int count, int wait, int op, int pred) {
  if (id < 1 || id > 15) fail("named barrier %d (1..15; 0 is __syncthreads)", id);
  if (count <= 0 || count % 32 || count > nthreads) fail("named barrier %d over %d threads (whole warps of the block)", id, count);
  NamedBar &b = named[id];
  if (b.arrived == 0) {
    b.count = count;
    b.op = op;
    b.acc = op == 2 ? 1 : 0;
  } else if (b.count != count) {
    fail("named barrier %d over %d threads while others use %d", id, count, b.count);
  } else if (b.op != op) {
    fail("named barrier %d: a reduction and a plain barrier in one phase", id);
  }
  if (op == 1) b.acc |= pred != 0;
  if (op == 2) b.acc &= pred != 0;
  if (++b.arrived == b.count) {
    b.arrived = 0;
    b.result = b.acc;
    b.gen++;
    return b.result;
  }
  if (wait) wait_gen(&b.gen, OP_NAMED);
  return b.result;
}

void da_emu_named_bar(int id, int count, int wait) { named_bar(id, count, wait, 0, 0); }
int da_emu_named_red(int id, int count, int pred, int and_) { return named_bar(id, count, 1, and_ ? 2 : 1, pred); }

void da_emu_check_global(const void *p, size_t bytes, int write) {
  const Range *r = find_range(p, bytes);
  if (!r) fail("%s of %zu bytes at %p outside every buffer", write ? "store" : "load", bytes, p);
  if (write && !r->writable) fail("store to read-only buffer at %p", p);
}

void da_emu_prefetch_l2(const void *p) {
  da_emu_check_global(p, 1, 0);
  prefetched.insert((uintptr_t)p >> 7);
}

void da_emu_check_prefetched(const void *p, size_t bytes) {
  for (uintptr_t l = (uintptr_t)p >> 7; l <= ((uintptr_t)p + bytes - 1) >> 7; l++)
    if (!prefetched.count(l))
      fail("load of %zu bytes at %p: its 128-byte line %p was not prefetched by this CTA (da_prefetch_l2)", bytes, p,
           (void *)(l << 7));
}

void da_emu_check_aligned(const void *p, size_t bytes) {
  if ((uintptr_t)p % bytes) fail("%zu-byte vector access at %p, not %zu-byte aligned", bytes, p, bytes);
}

void da_emu_register_buffer(const void *p, size_t bytes, int writable) {
  ranges.push_back({(const unsigned char *)p, bytes, writable});
}

void da_emu_reset_buffers(void) { ranges.clear(); }

unsigned long long da_emu_mma_count(void) { return mma_count; }
unsigned long long da_emu_tma_count(void) { return tma_count; }
unsigned long long da_emu_ldmatrix_count(void) { return ldsm_count; }
unsigned long long da_emu_barrier_count(void) { return bar_count; }
unsigned long long da_emu_wgmma_count(void) { return wgmma_count; }
double da_emu_wgmma_flops(void) { return wgmma_flops; }

void da_emu_set_block_filter(int (*keep)(void *user, unsigned x, unsigned y, unsigned z), void *user) {
  block_keep = keep;
  block_keep_user = user;
}

int da_emu_launch(void (*invoke)(void *kernel, const void *args), void *kernel, const void *args, unsigned gx,
                  unsigned gy, unsigned gz, unsigned threads, size_t smem_size, unsigned long long seed, char *err,
                  size_t err_len) {
  if (threads == 0 || threads > 1024 || threads % 32) {
    snprintf(err, err_len, "block of %u threads (the kernels use whole warps, at most 1024)", threads);
    return -1;
  }
  if ((size_t)threads > fibers.size()) {
    size_t old = fibers.size();
    fibers.resize(threads);
    for (size_t i = old; i < fibers.size(); i++) {
      void *st = mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (st == MAP_FAILED) {
        snprintf(err, err_len, "no memory for fiber stacks");
        return -1;
      }
      fibers[i].stack = st;
    }
  }
  nthreads = (int)threads;
  smem_bytes = smem_size;
  SMEM_BASE = 16u * (1u + (da_u32)(seed % 63u));
  smem_window = (unsigned char *)aligned_alloc(128, (SMEM_BASE + smem_size + 127) / 128 * 128 + 128);
  smem = smem_window + SMEM_BASE;
  error.clear();
  rng = seed;
  entry_invoke = invoke;
  entry_kernel = kernel;
  entry_args = args;
  int rc = 0;
  dim3 grid = {gx, gy, gz};
  for (unsigned z = 0; z < gz && rc == 0; z++)
    for (unsigned y = 0; y < gy && rc == 0; y++)
      for (unsigned x = 0; x < gx && rc == 0; x++) {
        if (block_keep && !block_keep(block_keep_user, x, y, z)) continue;
        memset(smem, 0xff, smem_size); /* NaN in every dtype */
        async_dirty.assign(smem_size / 16 + 1, -1);
        landed_seq.assign(smem_size / 16 + 1, 0);
        rc = run_block({x, y, z}, grid);
      }
  free(smem_window);
  smem = smem_window = nullptr;
  if (rc) snprintf(err, err_len, "%s", error.c_str());
  return rc;
}

} // extern "C"

extern "C" int da_emu_compile(const char *source, const char *work_dir, const char *name, const char *include_dir,
                              char *so_path, size_t so_len, char *err, size_t err_len) {
  std::string src = std::string(work_dir) + "/" + name + ".cu", so = std::string(work_dir) + "/" + name + ".so",
              log = std::string(work_dir) + "/" + name + ".log";
  FILE *f = fopen(src.c_str(), "w");
  if (!f || fputs(source, f) < 0 || fclose(f) != 0) {
    snprintf(err, err_len, "cannot write %s", src.c_str());
    return -1;
  }
  const char *cxx = getenv("CXX");
  /* -g1: line tables, enough for a backtrace into the kernel's source; full -g made each
   * compile a third slower (0.95 s against 0.70 s on the LongNet 5-branch kernel), and
   * compiling is most of what the emulator suites spend */
  std::string cmd = std::string(cxx && *cxx ? cxx : "c++") +
                    " -std=c++17 -O1 -g1 -fPIC -shared -fno-strict-aliasing -fsanitize=undefined -fno-sanitize-recover=undefined"
                    " -DDA_EMULATE -x c++ -I'" + include_dir +
                    "' '" + src + "' -o '" + so + "' > '" + log + "' 2>&1";
  if (system(cmd.c_str()) != 0) {
    std::string text;
    if (FILE *l = fopen(log.c_str(), "r")) {
      char buf[4096];
      size_t n = fread(buf, 1, sizeof buf - 1, l);
      buf[n] = 0;
      text = buf;
      fclose(l);
    }
    snprintf(err, err_len, "%s failed:\n%s", cmd.c_str(), text.c_str());
    return -1;
  }
  snprintf(so_path, so_len, "%s", so.c_str());
  return 0;
}
