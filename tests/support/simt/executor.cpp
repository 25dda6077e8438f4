// The SIMT executor's scheduler (see executor.hpp for the model).
//
// A block is a set of fibers plus the bookkeeping of its collectives: how many threads wait
// at the block barrier, and per warp which lanes wait at a warp collective. A thread that
// arrives at a collective records what it brings, releases the collective if it was the
// last participant (computing every participant's result then, so that nobody can overwrite
// a value before the others read it) and yields to the scheduler, which resumes the runnable
// thread its policy (schedule.hpp) picks. A collective that SIMT_MUTANT names (mutant.hpp)
// is skipped or changed here, as an edit of its source line would.
#include "simt/executor.hpp"

#include <boost/context/fiber.hpp>

#include <algorithm>
#include <bit>
#include <exception>
#include <memory>
#include <random>
#include <sstream>

#include "simt/fiber_switch.hpp"
#include "simt/mutant.hpp"
#include "simt/schedule.hpp"
#include "simt/stack_pool.hpp"

namespace simt {
namespace detail {

thread_local const Coords* g_coords = nullptr;  // set at every switch to a thread

const Coords& coords() {
  if (!g_coords) throw std::logic_error("simt: threadIdx/blockIdx used outside a kernel");
  return *g_coords;
}

namespace {

namespace ctx = boost::context;

constexpr unsigned kWarp = 32;
std::uint64_t g_switches = 0;  // process-wide, for cost measurements only

enum class State { runnable, at_barrier, at_warp, done };

// Thrown inside a suspended thread when its block is abandoned after a fault: unwinds the
// kernel's frames through the ordinary exit path (no forced unwinding across contexts).
struct Abandon {};

struct Thread {
  Coords coords;
  unsigned linear = 0, warp = 0, lane = 0;
  State state = State::runnable;
  // The warp collective this thread waits at.
  Collective kind = Collective::syncwarp;
  unsigned mask = 0;
  std::uint64_t bits = 0, result = 0;
  int arg = 0, width = 32;
  ctx::fiber fiber;  // this thread, while suspended
  ctx::fiber sink;   // the scheduler, while this thread runs
  boost::context::stack_context stack;
  void* fake_stack = nullptr;  // ASan's, while suspended
  std::exception_ptr error;
  StackBounds bounds() const {
    return {static_cast<const char*>(stack.sp) - stack.size, stack.size};
  }
};

struct Block {
  std::vector<Thread> threads;
  Schedule schedule;  // the runnable threads
  std::vector<unsigned> warp_exists, warp_exited, warp_waiting;  // lane masks per warp
  unsigned live = 0, at_barrier = 0;
  Thread* current = nullptr;
  void* dyn = nullptr;
  bool abandoned = false;  // a thread faulted: the others are unwound, not run on
  StackBounds scheduler_stack;
  void* scheduler_fake_stack = nullptr;
};

thread_local Block* g_block = nullptr;

Block& block() {
  if (!g_block) throw std::logic_error("simt: a device function was called outside a kernel");
  return *g_block;
}

std::string lane_mask(unsigned m) {
  std::ostringstream s;
  s << "0x" << std::hex << m;
  return s.str();
}

std::string where(const Coords& c) {
  std::ostringstream s;
  s << "block (" << c.block_idx.x << "," << c.block_idx.y << "," << c.block_idx.z
    << ") thread (" << c.thread_idx.x << "," << c.thread_idx.y << "," << c.thread_idx.z << ")";
  return s.str();
}

// Back to the scheduler; returns when this thread is resumed.
void suspend() {
  Block& b = block();
  Thread& t = *b.current;
  start_switch(&t.fake_stack, b.scheduler_stack);
  t.sink = std::move(t.sink).resume();
  finish_switch(t.fake_stack, &b.scheduler_stack);
  if (b.abandoned) throw Abandon{};
}

// Runs thread t until it suspends or exits.
void resume(Block& b, Thread& t) {
  b.current = &t;
  g_coords = &t.coords;
  ++g_switches;
  start_switch(&b.scheduler_fake_stack, t.bounds());
  t.fiber = std::move(t.fiber).resume();
  finish_switch(b.scheduler_fake_stack, nullptr);
}

void make_runnable(Block& b, Thread& t) {
  t.state = State::runnable;
  b.schedule.push(t.linear);
}

void release_barrier_if_complete(Block& b) {
  if (b.at_barrier == 0 || b.at_barrier != b.live) return;
  for (auto& t : b.threads)
    if (t.state == State::at_barrier) make_runnable(b, t);
  b.at_barrier = 0;
}

// Result of a shuffle for lane l; faults where a GPU's result would be undefined.
std::uint64_t shuffle_result(const Block& b, const Thread& t) {
  const unsigned l = t.lane, w = static_cast<unsigned>(t.width);
  const unsigned base = l / w * w;
  unsigned src = l;
  switch (t.kind) {
    case Collective::shfl_idx:
      src = base + static_cast<unsigned>(((t.arg % t.width) + t.width) % t.width);
      break;
    case Collective::shfl_up:
      src = t.arg < 0 || static_cast<unsigned>(t.arg) > l - base ? l : l - t.arg;
      break;
    case Collective::shfl_down:
      src = t.arg < 0 || l + t.arg >= base + w ? l : l + t.arg;
      break;
    case Collective::shfl_xor:
      src = l ^ static_cast<unsigned>(t.arg);
      if (src >= base + w) src = l;  // later groups are out of reach: own value
      break;
    default: break;
  }
  if (!(t.mask >> src & 1u))
    fault("shuffle: lane " + std::to_string(l) + " reads lane " + std::to_string(src) +
          ", which is not in the mask " + lane_mask(t.mask) + " (undefined on a GPU)");
  return b.threads[t.warp * kWarp + src].bits;
}

void release_warp(Block& b, unsigned warp, unsigned mask) {
  Thread* lanes[kWarp] = {};
  unsigned ballot = 0;
  for (unsigned l = 0; l < kWarp; ++l) {
    if (!(mask >> l & 1u)) continue;
    Thread& o = b.threads[warp * kWarp + l];
    if (o.mask != mask)
      fault("warp " + std::to_string(warp) + ": lane " + std::to_string(l) +
            " waits at a collective with mask " + lane_mask(o.mask) + ", another lane with " +
            lane_mask(mask));
    lanes[l] = &o;
    if (o.bits) ballot |= 1u << l;
  }
  const Thread& first = *lanes[std::countr_zero(mask)];
  for (unsigned l = 0; l < kWarp; ++l)
    if (lanes[l] && (lanes[l]->kind != first.kind || lanes[l]->width != first.width))
      fault("warp " + std::to_string(warp) + ": the lanes of mask " + lane_mask(mask) +
            " reached different warp collectives (divergent code)");
  for (unsigned l = 0; l < kWarp; ++l) {
    if (!lanes[l]) continue;
    Thread& o = *lanes[l];
    switch (o.kind) {
      case Collective::syncwarp: o.result = 0; break;
      case Collective::ballot: o.result = ballot; break;
      case Collective::any: o.result = ballot != 0; break;
      case Collective::all: o.result = ballot == mask; break;
      default: o.result = shuffle_result(b, o); break;
    }
  }
  for (unsigned l = 0; l < kWarp; ++l)
    if (lanes[l]) make_runnable(b, *lanes[l]);
  b.warp_waiting[warp] &= ~mask;
}

void on_exit(Block& b, Thread& t) {
  --b.live;
  b.warp_exited[t.warp] |= 1u << t.lane;
  if (b.warp_waiting[t.warp])
    for (unsigned l = 0; l < kWarp; ++l) {
      const Thread& o = b.threads[t.warp * kWarp + l];
      if (o.state == State::at_warp && (o.mask >> t.lane & 1u))
        fault("warp collective with mask " + lane_mask(o.mask) + ": lane " +
              std::to_string(t.lane) + " exited without reaching it (" + where(t.coords) + ")");
    }
  release_barrier_if_complete(b);
}

std::string describe_deadlock(const Block& b) {
  std::ostringstream s;
  s << "deadlock in block (" << b.threads[0].coords.block_idx.x << ","
    << b.threads[0].coords.block_idx.y << "," << b.threads[0].coords.block_idx.z
    << "): " << b.at_barrier << " thread(s) wait at __syncthreads while " << b.live - b.at_barrier
    << " other live thread(s) cannot reach it";
  for (unsigned w = 0; w < b.warp_waiting.size(); ++w)
    if (b.warp_waiting[w])
      s << "; warp " << w << ": lanes " << lane_mask(b.warp_waiting[w])
        << " wait at a warp collective";
  s << " (a barrier in divergent code, or a collective whose lanes never all arrive)";
  return s.str();
}

std::uint64_t block_seed(std::uint64_t seed, std::uint64_t block) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (block + 1);  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct DynamicSmem {
  std::size_t bytes;
  void* p;
  explicit DynamicSmem(std::size_t n) : bytes(n), p(::operator new(n, std::align_val_t{16})) {}
  ~DynamicSmem() { ::operator delete(p, std::align_val_t{16}); }
  void poison() { std::memset(p, 0xff, bytes); }
};

// One fiber per thread of the block, each queued to run body from its start.
void spawn_threads(Block& b, const LaunchConfig& cfg, uint3 block_idx, const std::function<void()>& body) {
  const unsigned n = static_cast<unsigned>(b.threads.size());
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = b.threads[i];
    t.coords = Coords{uint3{i % cfg.block.x, i / cfg.block.x % cfg.block.y,
                            i / (cfg.block.x * cfg.block.y)},
                      block_idx, cfg.block, cfg.grid};
    t.linear = i, t.warp = i / kWarp, t.lane = i % kWarp;
    b.warp_exists[t.warp] |= 1u << t.lane;
    t.fiber = ctx::fiber(std::allocator_arg, PooledStack{&t.stack},
                         [&t, &b, &body](ctx::fiber&& sink) {
      finish_switch(nullptr, &b.scheduler_stack);
      t.sink = std::move(sink);
      try {
        if (!b.abandoned) body();
      } catch (const Abandon&) {
        // unwound after another thread faulted
      } catch (...) {
        t.error = std::current_exception();
      }
      t.state = State::done;
      start_switch(nullptr, b.scheduler_stack);  // this stack is done with
      return std::move(t.sink);
    });
    b.schedule.push(i);
  }
}

void run_block(const LaunchConfig& cfg, uint3 block_idx, std::uint64_t block_linear,
               DynamicSmem& smem, const std::function<void()>& body) {
  Block b;
  const unsigned n = cfg.block.x * cfg.block.y * cfg.block.z;
  const unsigned warps = (n + kWarp - 1) / kWarp;
  b.threads.resize(n);
  b.warp_exists.assign(warps, 0);
  b.warp_exited.assign(warps, 0);
  b.warp_waiting.assign(warps, 0);
  b.live = n;
  b.schedule.start(policy_for_seed(cfg.seed), block_seed(cfg.seed, block_linear), n);
  smem.poison();
  b.dyn = smem.p;

  spawn_threads(b, cfg, block_idx, body);

  Block* const outer = g_block;
  const Coords* const outer_coords = g_coords;
  g_block = &b;
  std::exception_ptr error;
  std::string error_where;
  while (!b.schedule.empty()) {
    Thread& t = b.threads[b.schedule.pop()];
    resume(b, t);
    if (t.error) {
      error = t.error, error_where = where(t.coords);
      break;
    }
    if (t.state == State::done) {
      try {
        on_exit(b, t);
      } catch (...) {
        error = std::current_exception(), error_where = where(t.coords);
        break;
      }
    }
  }
  if (!error && b.live > 0) {
    error = std::make_exception_ptr(KernelFault(describe_deadlock(b)));
    error_where.clear();
  }
  // Unwind every thread that has not finished: each is resumed once more and leaves the
  // kernel by an exception (Abandon), so its frames are destroyed on its own stack.
  b.abandoned = true;
  for (auto& t : b.threads)
    if (t.fiber) resume(b, t);
  g_block = outer;
  g_coords = outer_coords;
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const KernelFault& f) {
    throw KernelFault(error_where.empty() ? std::string(f.what())
                                          : error_where + ": " + f.what());
  } catch (const std::exception& e) {
    throw KernelFault(error_where + ": exception in device code: " + e.what());
  }
}

}  // namespace

void sync_block(const Site& at) {
  if (mutation_at(at, Call::syncthreads) == Mutation::removed) return;  // no wait, no switch
  Block& b = block();
  Thread& t = *b.current;
  t.state = State::at_barrier;
  ++b.at_barrier;
  release_barrier_if_complete(b);
  suspend();
}

std::uint64_t warp_collective(Collective kind, unsigned mask, std::uint64_t bits, int arg,
                              int width, const Site& at) {
  Block& b = block();
  Thread& t = *b.current;
  switch (mutation_at(at, kind == Collective::syncwarp ? Call::syncwarp : Call::exchange)) {
    case Mutation::removed:
    case Mutation::no_exchange: return without_exchange(kind, bits, t.lane);  // no wait, no switch
    case Mutation::mask_halved: mask &= 0x0000ffffu; break;
    case Mutation::none: break;
  }
  if (!(mask >> t.lane & 1u))
    fault("warp collective: the calling lane " + std::to_string(t.lane) +
          " is not in its mask " + lane_mask(mask));
  if (mask & ~b.warp_exists[t.warp])
    fault("warp collective: mask " + lane_mask(mask) + " names lanes that do not exist (warp " +
          std::to_string(t.warp) + " has lanes " + lane_mask(b.warp_exists[t.warp]) + ")");
  if (mask & b.warp_exited[t.warp])
    fault("warp collective: mask " + lane_mask(mask) + " names lanes that have exited (" +
          lane_mask(mask & b.warp_exited[t.warp]) + ")");
  if (width < 1 || width > 32 || (width & (width - 1)))
    fault("shuffle: width " + std::to_string(width) + " is not a power of two in [1, 32]");
  t.state = State::at_warp;
  t.kind = kind, t.mask = mask, t.bits = bits, t.arg = arg, t.width = width;
  b.warp_waiting[t.warp] |= 1u << t.lane;
  if ((b.warp_waiting[t.warp] & mask) == mask) release_warp(b, t.warp, mask);
  suspend();
  return t.result;
}

unsigned active_mask() {
  Block& b = block();
  const Thread& t = *b.current;
  return b.warp_exists[t.warp] & ~b.warp_exited[t.warp];
}

void* dynamic_shared() { return block().dyn; }

void fault(const std::string& what) { throw KernelFault(what); }

void check_aligned(const void* p, std::size_t alignment, std::size_t bytes, const char* op) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignment == 0) return;
  std::ostringstream s;
  s << op << ": misaligned " << bytes << "-byte access at " << p << " (needs " << alignment
    << "-byte alignment; a GPU faults)";
  fault(s.str());
}

void run_grid(const LaunchConfig& cfg, const std::function<void()>& thread_body) {
  check_launch(cfg);
  const std::uint64_t gx = cfg.grid.x, gy = cfg.grid.y, gz = cfg.grid.z;
  const std::uint64_t blocks = gx * gy * gz;
  std::vector<std::uint64_t> order(blocks);
  for (std::uint64_t i = 0; i < blocks; ++i) order[i] = i;
  std::mt19937_64 rng(block_seed(cfg.seed, ~0ull));
  std::shuffle(order.begin(), order.end(), rng);
  DynamicSmem smem(cfg.dynamic_smem);
  for (const std::uint64_t i : order) {
    const uint3 idx{static_cast<unsigned>(i % gx), static_cast<unsigned>(i / gx % gy),
                    static_cast<unsigned>(i / (gx * gy))};
    run_block(cfg, idx, i, smem, thread_body);
  }
}

}  // namespace detail

std::uint64_t switch_count() { return detail::g_switches; }

}  // namespace simt
