// A CPU emulation of the parts of CUDA that kernels/treeshap.cu uses, so the real CUDA source
// runs (compiled as C++) in `cargo test` on machines without a GPU.
//
// Every CUDA thread of a block is a fiber; all fibers run on one OS thread, switched by hand.
// Warp-level operations (__shfl*_sync, __ballot_sync) are barriers across the lanes of the warp
// named by the mask, __syncthreads a barrier across the block. The emulator refuses what CUDA
// would not run, or would run wrongly:
//   * lanes of a warp at different shuffles (a shuffle in divergent code),
//   * a lane named by a shuffle's mask that has exited,
//   * threads at different __syncthreads, or some exited while others wait at one,
//   * a block of more than 1024 threads or not a whole number of warps, a grid beyond CUDA's
//     dimensions, more than 48 KiB of dynamic shared memory (no opt-in).
// Shared memory is filled with NaN before each block (an uninitialised read poisons the sums)
// and a canary past its end is checked after it. Two schedules: lanes round robin, and whole
// warps at a time in a seeded random order (legal for CUDA; it exposes a missing
// __syncthreads). A refusal prints why and exits with status 3.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

using std::isnan;
using std::trunc;

#define __global__
#define __device__
#define __forceinline__ inline
// Register caps mean nothing on the CPU.
#define __launch_bounds__(...)
#define __shared__

template <class T>
inline T min(T a, T b) { return b < a ? b : a; }
template <class T>
inline T max(T a, T b) { return a < b ? b : a; }

namespace emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

[[noreturn]] inline void refuse(const std::string& why) {
  std::fprintf(stderr, "cuda emulator: refused: %s\n", why.c_str());
  std::exit(3);
}

// ---- fibers ------------------------------------------------------------------------------

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save,
// switches to `load` and restores what was saved there (System V x86-64).
extern "C" void emu_switch(void** save, void* load);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size emu_switch, .-emu_switch
)");
#endif

enum class State { Runnable, AtWarp, AtBlock, Exited };
enum class WarpOp { Idx, Up, Down, Xor, Ballot };

struct Fiber {
  State state = State::Runnable;
  Dim3 thread_idx;
  int lane = 0, warp = 0;
  // The operation it waits at: its source line, kind, mask, posted value and argument.
  int site = 0;
  WarpOp op = WarpOp::Idx;
  unsigned mask = 0;
  uint64_t posted = 0, result = 0;
  int arg = 0;
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  std::vector<char> stack;
};

enum class Schedule { RoundRobin, RandomWarps };

// The state of the launch in progress (one block runs at a time).
struct Machine {
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler;
#endif
  std::function<void()> body;
  Dim3 block_idx, block_dim, grid_dim;
};

inline Machine& machine() {
  static Machine m;
  return m;
}

inline void yield() {
  Machine& m = machine();
#if defined(__x86_64__)
  emu_switch(&m.current->sp, m.scheduler_sp);
#else
  swapcontext(&m.current->ctx, &m.scheduler);
#endif
}

inline void fiber_main() {
  Machine& m = machine();
  m.body();
  m.current->state = State::Exited;
  yield();
  std::abort();  // an exited fiber is never resumed
}

inline void start_fiber(Fiber& f, size_t stack_bytes) {
  if (f.stack.size() != stack_bytes) f.stack.resize(stack_bytes);  // reused across blocks
#if defined(__x86_64__)
  // The first switch pops six registers, then returns into fiber_main with the stack aligned
  // as at a call (rsp + 8 a multiple of 16).
  uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack.data()) + stack_bytes) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                                          // alignment pad
  *--sp = reinterpret_cast<void*>(&fiber_main);             // return address
  for (int i = 0; i < 6; ++i) *--sp = nullptr;              // rbp rbx r12 r13 r14 r15
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = stack_bytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
#endif
}

inline void resume(Fiber& f) {
  Machine& m = machine();
  m.current = &f;
#if defined(__x86_64__)
  emu_switch(&m.scheduler_sp, f.sp);
#else
  swapcontext(&m.scheduler, &f.ctx);
#endif
  m.current = nullptr;
}

// ---- warp and block operations (called by the kernel's threads) --------------------------

template <class T>
inline T warp_op(WarpOp op, unsigned mask, T value, int arg, int site) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  Fiber* f = machine().current;
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  f->op = op;
  f->mask = mask;
  f->posted = bits;
  f->arg = arg;
  f->site = site;
  f->state = State::AtWarp;
  yield();
  T out;
  std::memcpy(&out, &f->result, sizeof(T));
  return out;
}

inline void sync_block(int site) {
  Fiber* f = machine().current;
  f->site = site;
  f->state = State::AtBlock;
  yield();
}

// ---- the scheduler --------------------------------------------------------------------------

inline const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Idx: return "__shfl_sync";
    case WarpOp::Up: return "__shfl_up_sync";
    case WarpOp::Down: return "__shfl_down_sync";
    case WarpOp::Xor: return "__shfl_xor_sync";
    default: return "__ballot_sync";
  }
}

inline std::string where() {
  const Machine& m = machine();
  return "block (" + std::to_string(m.block_idx.x) + "," + std::to_string(m.block_idx.y) + ")";
}

// Releases warp `w`'s lanes from the warp operation they all wait at, when they do; refuses a
// warp whose lanes can no longer meet (`stuck`: none of them can run on).
inline bool try_release_warp(int w, bool stuck) {
  Machine& m = machine();
  Fiber* lanes = &m.fibers[size_t(w) * 32];
  int first = -1;
  for (int l = 0; l < 32; ++l)
    if (lanes[l].state == State::AtWarp) { first = l; break; }
  if (first < 0) return false;
  const Fiber& a = lanes[first];
  if (!((a.mask >> first) & 1u))
    refuse(where() + ", warp " + std::to_string(w) + ": lane " + std::to_string(first) + " calls " + op_name(a.op) +
           " with a mask that leaves it out");
  for (int l = 0; l < 32; ++l) {
    if (!((a.mask >> l) & 1u)) continue;
    const Fiber& b = lanes[l];
    if (b.state == State::Exited)
      refuse(where() + ", warp " + std::to_string(w) + ": lane " + std::to_string(l) + " has exited but the " +
             op_name(a.op) + " at line " + std::to_string(a.site) + " names it in its mask");
    if (b.state == State::Runnable) {
      if (stuck) refuse(where() + ": warp " + std::to_string(w) + " deadlocked");
      return false;
    }
    if (b.state == State::AtBlock || b.site != a.site || b.op != a.op || b.mask != a.mask) {
      if (!stuck) return false;  // lane l may still be on its way (another lane waits elsewhere)
      refuse(where() + ", warp " + std::to_string(w) + ": lanes at different warp operations: lane " +
             std::to_string(first) + " at " + op_name(a.op) + " (line " + std::to_string(a.site) + "), lane " +
             std::to_string(l) + (b.state == State::AtBlock ? " at __syncthreads" : std::string(" at ") + op_name(b.op)) +
             " (line " + std::to_string(b.site) + ")");
    }
  }
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l)
    if (((a.mask >> l) & 1u) && lanes[l].posted != 0) ballot |= 1u << l;
  for (int l = 0; l < 32; ++l) {
    if (!((a.mask >> l) & 1u)) continue;
    Fiber& b = lanes[l];
    int src = l;
    switch (a.op) {
      case WarpOp::Idx: src = b.arg & 31; break;
      case WarpOp::Up: src = (l - b.arg >= 0) ? l - b.arg : l; break;
      case WarpOp::Down: src = (l + b.arg < 32) ? l + b.arg : l; break;
      case WarpOp::Xor: src = (l ^ b.arg) & 31; break;
      case WarpOp::Ballot: break;
    }
    if (a.op != WarpOp::Ballot && !((a.mask >> src) & 1u))
      refuse(where() + ", warp " + std::to_string(w) + ": lane " + std::to_string(l) + " reads lane " + std::to_string(src) +
             " outside the mask of " + op_name(a.op) + " (line " + std::to_string(a.site) + ")");
    b.result = (a.op == WarpOp::Ballot) ? uint64_t(ballot) : lanes[src].posted;
  }
  for (int l = 0; l < 32; ++l)
    if ((a.mask >> l) & 1u) lanes[l].state = State::Runnable;
  return true;
}

// Releases the block from __syncthreads when every thread waits at the same one.
inline bool try_release_block() {
  Machine& m = machine();
  int site = -1, exited = 0, waiting = 0;
  for (const Fiber& f : m.fibers) {
    if (f.state == State::Runnable || f.state == State::AtWarp) return false;
    if (f.state == State::Exited) { ++exited; continue; }
    ++waiting;
    if (site < 0) site = f.site;
    else if (f.site != site)
      refuse(where() + ": threads wait at different __syncthreads (lines " + std::to_string(site) + " and " +
             std::to_string(f.site) + ")");
  }
  if (waiting == 0) return false;
  if (exited > 0)
    refuse(where() + ": " + std::to_string(waiting) + " threads wait at __syncthreads (line " + std::to_string(site) +
           ") that " + std::to_string(exited) + " exited threads never reach");
  for (Fiber& f : m.fibers) f.state = State::Runnable;
  return true;
}

// Runs warp `w`'s lanes round robin until none can run on; true when any ran.
inline bool run_warp(int w) {
  Machine& m = machine();
  bool any = false, progress = true;
  while (progress) {
    progress = false;
    for (int l = 0; l < 32; ++l) {
      Fiber& f = m.fibers[size_t(w) * 32 + l];
      if (f.state == State::Runnable) {
        resume(f);
        progress = any = true;
      }
    }
    if (try_release_warp(w, false)) progress = any = true;
  }
  return any;
}

inline void run_block(Schedule schedule, std::mt19937_64& rng) {
  Machine& m = machine();
  const int warps = int(m.fibers.size() / 32);
  for (;;) {
    bool progress = false;
    if (schedule == Schedule::RoundRobin) {
      for (Fiber& f : m.fibers)
        if (f.state == State::Runnable) { resume(f); progress = true; }
      for (int w = 0; w < warps; ++w) progress |= try_release_warp(w, false);
    } else {
      std::vector<int> order(warps);
      for (int w = 0; w < warps; ++w) order[w] = w;
      std::shuffle(order.begin(), order.end(), rng);
      for (int w : order) progress |= run_warp(w);
    }
    if (progress) continue;
    if (try_release_block()) continue;
    bool all_exited = true;
    for (const Fiber& f : m.fibers) all_exited &= f.state == State::Exited;
    if (all_exited) return;
    // Nothing can run and no barrier opens: name what is stuck.
    for (int w = 0; w < warps; ++w) try_release_warp(w, true);
    refuse(where() + ": the block deadlocked (threads wait at __syncthreads and at warp operations)");
  }
}

// ---- launches -------------------------------------------------------------------------------

// Largest dynamic shared memory without opting in, and the canary after it.
constexpr size_t SHARED_LIMIT_BYTES = 48 * 1024;
constexpr size_t CANARY_DOUBLES = 16;
constexpr uint64_t CANARY_BITS = 0x7ff4dead5eedbeefULL;  // a NaN no arithmetic produces

struct LaunchConfig {
  Dim3 grid, block;
  size_t shared_bytes = 0;
  Schedule schedule = Schedule::RoundRobin;
  uint64_t seed = 0;
};

// Runs `body` (the kernel call) for every thread of every block of `config`. `shared` is the
// kernels' `extern __shared__` array, SHARED_LIMIT_BYTES / 8 + CANARY_DOUBLES long.
inline void launch(const LaunchConfig& config, double* shared, std::function<void()> body) {
  const Dim3& g = config.grid;
  const Dim3& b = config.block;
  if (b.x * b.y * b.z > 1024 || b.x * b.y * b.z == 0) refuse("a block of " + std::to_string(b.x * b.y * b.z) + " threads (CUDA: 1 to 1024)");
  if ((b.x * b.y * b.z) % 32 != 0) refuse("a block of " + std::to_string(b.x * b.y * b.z) + " threads is not whole warps");
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535 || g.x > 2147483647u)
    refuse("grid (" + std::to_string(g.x) + "," + std::to_string(g.y) + "," + std::to_string(g.z) + ") is outside CUDA's limits");
  if (config.shared_bytes > SHARED_LIMIT_BYTES)
    refuse(std::to_string(config.shared_bytes) + " bytes of dynamic shared memory: more than 48 KiB needs an opt-in the engine does not make");
  Machine& m = machine();
  m.body = std::move(body);
  m.block_dim = b;
  m.grid_dim = g;
  std::mt19937_64 rng(config.seed);
  const size_t threads = size_t(b.x) * b.y * b.z;
  const size_t shared_doubles = config.shared_bytes / 8;
  double nan = std::nan("");
  // Blocks in order, or in a random order under the random schedule.
  std::vector<Dim3> blocks;
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) blocks.push_back(Dim3{x, y, z});
  if (config.schedule == Schedule::RandomWarps) std::shuffle(blocks.begin(), blocks.end(), rng);
  m.fibers.assign(threads, Fiber{});
  for (const Dim3& bi : blocks) {
    m.block_idx = bi;
    for (size_t i = 0; i < shared_doubles; ++i) shared[i] = nan;
    for (size_t i = 0; i < CANARY_DOUBLES; ++i) std::memcpy(&shared[shared_doubles + i], &CANARY_BITS, 8);
    for (size_t t = 0; t < threads; ++t) {
      Fiber& f = m.fibers[t];
      f.state = State::Runnable;
      f.thread_idx = Dim3{unsigned(t % b.x), unsigned((t / b.x) % b.y), unsigned(t / (size_t(b.x) * b.y))};
      f.lane = int(t % 32);
      f.warp = int(t / 32);
      start_fiber(f, 64 * 1024);
    }
    run_block(config.schedule, rng);
    for (size_t i = 0; i < CANARY_DOUBLES; ++i) {
      uint64_t bits;
      std::memcpy(&bits, &shared[shared_doubles + i], 8);
      if (bits != CANARY_BITS) refuse(where() + " wrote past the end of its " + std::to_string(config.shared_bytes) + " bytes of shared memory");
    }
  }
}

}  // namespace emu

// ---- CUDA's names ---------------------------------------------------------------------------

#define threadIdx (emu::machine().current->thread_idx)
#define blockIdx (emu::machine().block_idx)
#define blockDim (emu::machine().block_dim)
#define gridDim (emu::machine().grid_dim)
#define warpSize 32

#define __syncthreads() emu::sync_block(__LINE__)
#define __shfl_sync(mask, value, lane) emu::warp_op(emu::WarpOp::Idx, (mask), (value), (lane), __LINE__)
#define __shfl_up_sync(mask, value, delta) emu::warp_op(emu::WarpOp::Up, (mask), (value), int(delta), __LINE__)
#define __shfl_down_sync(mask, value, delta) emu::warp_op(emu::WarpOp::Down, (mask), (value), int(delta), __LINE__)
#define __shfl_xor_sync(mask, value, bits) emu::warp_op(emu::WarpOp::Xor, (mask), (value), int(bits), __LINE__)
#define __ballot_sync(mask, predicate) \
  unsigned(emu::warp_op(emu::WarpOp::Ballot, (mask), uint64_t((predicate) ? 1 : 0), 0, __LINE__))

// The lanes of the calling warp that have not exited.
inline unsigned __activemask() {
  emu::Machine& m = emu::machine();
  const emu::Fiber* lanes = &m.fibers[size_t(m.current->warp) * 32];
  unsigned mask = 0;
  for (int l = 0; l < 32; ++l)
    if (lanes[l].state != emu::State::Exited) mask |= 1u << l;
  return mask;
}

inline double atomicAdd(double* address, double value) {
  return std::atomic_ref<double>(*address).fetch_add(value);
}
