// The CPU source: c10 keeps no statistics for CPU tensors, so prepare()
// installs a counting wrapper over the current CPU allocator.
//
// The wrapper must look exactly like a "simple" allocator to the rest of
// torch: ctx == data, one static deleter, raw_deleter() returning it.
// oneDNN / to_mkldnn allocate and free through the raw interface and assert
// on anything else, so sizes live in a side table keyed by pointer rather
// than in a per-allocation context.
//
// Fields (sorted, like torch.cuda.memory_stats()):
//   active_bytes.all.*    bytes requested through the wrapper and not freed
//   allocation.all.*      number of those blocks
//   reserved_bytes.all.*  same as active_bytes: the CPU allocator caches
//                         nothing, so reserved == active
// each with .current/.peak/.allocated/.freed.
//
// Storages allocated before the wrapper was installed: cpu_seed() (called
// once, with the storages Python can see) counts them as live (levels and
// peaks, not .allocated), records them in the side table, and gives their
// DataPtr our deleter and their StorageImpl our allocator, so their free
// (or a resize's reallocation) is counted exactly like a new block's.
// Storages Python cannot reach stay uncounted, alive or freed.
//
// Push path (read()): every allocation raises the peak register of each
// open reader, and counts into the allocating thread's own thread_local
// allocated/freed totals.  A read rearms only its reader's register, so the
// global peaks that sample() reports are never reset by profiling.
#include "compat.h"
#include "cpu_state.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <chrono>
#include <mutex>
#include <thread>

namespace memlab {
namespace cpu {

std::atomic<CpuState *> g_state{nullptr};

namespace {

// What the calling thread itself allocated and freed through the wrapper.
// Only its own thread writes or reads it (read() runs on the reader's
// thread), so plain integers suffice.
struct ThreadTotals {
    int64_t bytes_allocated = 0;
    int64_t bytes_freed = 0;
    int64_t blocks_allocated = 0;
    int64_t blocks_freed = 0;
};

thread_local ThreadTotals t_totals;

}  // namespace

// The tracer's per-allocation listener (source.h's listen), or null, and
// the device indices it listens on (bit i: device i).  CPU memory is one
// pool whatever index a profiler reads it under, so each block reaches the
// listener once per index listened on, and stopping one index leaves the
// others' pushes alone.  Both change under CpuState::mutex only.
std::atomic<memlab_alloc_listener> g_listener{nullptr};
std::atomic<uint64_t> g_listening{0};

// Called with state->mutex held, right where the totals move: a listener
// installed meanwhile (cpu_listen takes the same mutex) reads a level that
// either includes this block or sees its event, never both nor neither.
void tell(void *ptr, std::size_t size, int alloc) noexcept {
    memlab_alloc_listener fn = g_listener.load(std::memory_order_acquire);
    if (fn == nullptr)
        return;
    uint64_t bits = g_listening.load(std::memory_order_acquire);
    while (bits != 0) {
        const int device = __builtin_ctzll(bits);
        bits &= bits - 1;
        (void)fn("cpu", device, reinterpret_cast<uintptr_t>(ptr), static_cast<int64_t>(size),
                 alloc ? MEMLAB_ALLOC : MEMLAB_FREE);
    }
}

// The one deleter of every block the wrapper hands out.  Unknown pointers
// (someone mixed raw_allocate of the base with our raw_deleter) are still
// freed, by the base's raw deleter, just not counted.
void counted_delete(void *ptr) {
    CpuState *state = g_state.load(std::memory_order_acquire);
    c10::DeleterFnPtr deleter = state->base_delete;
    if (ptr != nullptr) {
        std::lock_guard<std::mutex> lock(state->mutex);
        Block block{0, nullptr};
        if (state->live.take(ptr, &block)) {
            deleter = block.deleter;
            state->bytes.decrease(static_cast<int64_t>(block.size));
            state->blocks.decrease(1);
            t_totals.bytes_freed += static_cast<int64_t>(block.size);
            t_totals.blocks_freed += 1;
            // Before the base frees it: its address cannot be handed out
            // again (and reach the listener as a new block) before this
            // free does.
            tell(ptr, block.size, 0);
        }
    }
    deleter(ptr);
}

namespace {

// Tests only (pause_next_cpu_block): the next block counted waits this long
// between its count and its push, and `g_paused` says it is waiting; a
// listener starting meanwhile on another thread must read a level that holds
// the block or see its push, not both.  One relaxed load per block otherwise.
std::atomic<int64_t> g_pause_ns{0};
std::atomic<bool> g_paused{false};

void pause_if_asked() noexcept {
    const int64_t ns = g_pause_ns.exchange(0, std::memory_order_acq_rel);
    if (ns <= 0)
        return;
    g_paused.store(true, std::memory_order_release);
    std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
    g_paused.store(false, std::memory_order_release);
}

// Records `ptr` as live.  Called before the block leaves the base's
// DataPtr, so an exception here still frees it.
void remember(CpuState *state, void *ptr, std::size_t size,
              c10::DeleterFnPtr deleter) {
    Block stale{0, nullptr};
    std::lock_guard<std::mutex> lock(state->mutex);
    auto [block, inserted] = state->live.try_emplace(ptr, Block{size, deleter});
    if (!inserted) {
        // The address was freed behind our back and reused: retire the
        // stale entry so the totals do not drift.
        stale = *block;
        *block = Block{size, deleter};
    }
    if (stale.deleter != nullptr) {
        state->bytes.decrease(static_cast<int64_t>(stale.size));
        state->blocks.decrease(1);
        t_totals.bytes_freed += static_cast<int64_t>(stale.size);
        t_totals.blocks_freed += 1;
        tell(ptr, stale.size, 0);
    }
    const int64_t b = state->bytes.increase(static_cast<int64_t>(size));
    const int64_t n = state->blocks.increase(1);
    t_totals.bytes_allocated += static_cast<int64_t>(size);
    t_totals.blocks_allocated += 1;
    state->raise_readers(b, n);
    if (g_pause_ns.load(std::memory_order_relaxed) != 0)
        pause_if_asked();
    tell(ptr, size, 1);
}

}  // namespace

// The wrapper registered with c10::SetCPUAllocator.
class CountingAllocator final : public c10::Allocator {
  public:
    c10::DataPtr allocate(std::size_t n) MEMLAB_ALLOCATE_CONST override {
        CpuState *state = g_state.load(std::memory_order_acquire);
        c10::DataPtr data = state->base->allocate(n);
        void *ptr = data.get();
        // Only simple blocks can be re-wrapped with our deleter; anything
        // else (a zero-byte null block, a context object) passes through
        // untouched and uncounted.
        if (ptr == nullptr || data.get_context() != ptr ||
            data.get_deleter() == nullptr)
            return data;
        remember(state, ptr, n, data.get_deleter());
        const c10::Device device = data.device();
        (void)data.release_context();  // ownership moves to the new DataPtr
        return c10::DataPtr(ptr, ptr, &counted_delete, device);
    }

    c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

#if MEMLAB_HAVE_COPY_DATA
    void copy_data(void *dest, const void *src, std::size_t count) const override {
        g_state.load(std::memory_order_acquire)->base->copy_data(dest, src, count);
    }
#else
    // Older c10 may declare copy_data as an optional virtual: define it
    // plainly so that it overrides where it exists.
    void copy_data(void *dest, const void *src, std::size_t count) const {
        std::memcpy(dest, src, count);
    }
#endif
};

c10::Allocator *new_counting_allocator() { return new CountingAllocator(); }

}  // namespace cpu
}  // namespace memlab

namespace {

using namespace memlab::cpu;
using memlab::take_peak;

// ---------------------------------------------------------------------------
// The three entry points of the contract.  The device index is ignored: there
// is one CPU allocator.

int cpu_prepare(int device, char *err, int err_len) noexcept {
    const char *unknown = "unknown C++ exception installing the CPU counter";
    return memlab::reporting_errors(err, err_len, unknown, [&] {
        return install(err, err_len);
    });
}

int cpu_sample(int device, int64_t *out) noexcept {
    const CpuState *state = g_state.load(std::memory_order_acquire);
    if (state == nullptr)
        return -1;  // not prepared: there is nothing to read yet
    const auto rel = std::memory_order_relaxed;
    const int64_t bytes[4] = {state->bytes.allocated.load(rel),
                              state->bytes.current.load(rel),
                              state->bytes.freed.load(rel),
                              state->bytes.peak.load(rel)};
    // Order matches kFields below.
    std::memcpy(out + 0, bytes, sizeof bytes);                  // active_bytes
    out[4] = state->blocks.allocated.load(rel);                 // allocation
    out[5] = state->blocks.current.load(rel);
    out[6] = state->blocks.freed.load(rel);
    out[7] = state->blocks.peak.load(rel);
    std::memcpy(out + 8, bytes, sizeof bytes);                  // reserved_bytes
    return 0;
}

int cpu_reset_peaks(int device) noexcept {
    CpuState *state = g_state.load(std::memory_order_acquire);
    if (state == nullptr)
        return -1;
    state->bytes.reset_peak();
    state->blocks.reset_peak();
    return 0;
}

int cpu_open_reader(int device) noexcept {
    CpuState *state = g_state.load(std::memory_order_acquire);
    if (state == nullptr)
        return -1;
    uint64_t bits = state->open.load(std::memory_order_relaxed);
    for (;;) {
        if (bits == ~uint64_t{0})
            return -1;
        const int i = __builtin_ctzll(~bits);
        // Arm before publishing, so the first allocation seen raises from here.
        Register &r = state->registers[i];
        r.bytes.store(state->bytes.current.load(std::memory_order_relaxed),
                      std::memory_order_relaxed);
        r.blocks.store(state->blocks.current.load(std::memory_order_relaxed),
                       std::memory_order_relaxed);
        if (state->open.compare_exchange_weak(bits, bits | (uint64_t{1} << i),
                                              std::memory_order_acq_rel))
            return i;
    }
}

void cpu_close_reader(int device, int reader) noexcept {
    CpuState *state = g_state.load(std::memory_order_acquire);
    if (state == nullptr || reader < 0 || reader >= kMaxReaders)
        return;
    state->open.fetch_and(~(uint64_t{1} << reader), std::memory_order_acq_rel);
}

int cpu_read(int device, int reader, int64_t *out) noexcept {
    CpuState *state = g_state.load(std::memory_order_acquire);
    if (state == nullptr || reader < 0 || reader >= kMaxReaders)
        return -1;
    const auto rel = std::memory_order_relaxed;
    Register &r = state->registers[reader];
    const int64_t bytes_now = state->bytes.current.load(rel);
    const int64_t blocks_now = state->blocks.current.load(rel);
    const ThreadTotals &mine = t_totals;
    const int64_t bytes[4] = {mine.bytes_allocated, bytes_now, mine.bytes_freed,
                              take_peak(r.bytes, bytes_now)};
    // Order matches kFields below.
    std::memcpy(out + 0, bytes, sizeof bytes);                  // active_bytes
    out[4] = mine.blocks_allocated;                             // allocation
    out[5] = blocks_now;
    out[6] = mine.blocks_freed;
    out[7] = take_peak(r.blocks, blocks_now);
    std::memcpy(out + 8, bytes, sizeof bytes);                  // reserved_bytes
    return 0;
}

int cpu_listen(int device, memlab_alloc_listener listener, int64_t *level) noexcept {
    CpuState *state = g_state.load(std::memory_order_acquire);
    if (state == nullptr)
        return -1;
    if (device < 0 || device >= 64)
        return -1;
    // Under the mutex every block's count and push happen together (tell):
    // the level read here and the pushes from here on add up exactly.
    std::lock_guard<std::mutex> lock(state->mutex);
    const uint64_t bit = uint64_t{1} << device;
    uint64_t bits = g_listening.load(std::memory_order_relaxed);
    bits = listener != nullptr ? bits | bit : bits & ~bit;
    if (listener != nullptr)
        g_listener.store(listener, std::memory_order_release);
    g_listening.store(bits, std::memory_order_release);
    if (bits == 0)
        g_listener.store(nullptr, std::memory_order_release);
    *level = state->bytes.current.load(std::memory_order_acquire);
    return 0;
}

const memlab_field kFields[] = {
    {"active_bytes.all.allocated", MEMLAB_COUNTER, MEMLAB_BYTES},
    {"active_bytes.all.current", MEMLAB_LEVEL, MEMLAB_BYTES},
    {"active_bytes.all.freed", MEMLAB_COUNTER, MEMLAB_BYTES},
    {"active_bytes.all.peak", MEMLAB_PEAK, MEMLAB_BYTES},
    {"allocation.all.allocated", MEMLAB_COUNTER, MEMLAB_COUNT},
    {"allocation.all.current", MEMLAB_LEVEL, MEMLAB_COUNT},
    {"allocation.all.freed", MEMLAB_COUNTER, MEMLAB_COUNT},
    {"allocation.all.peak", MEMLAB_PEAK, MEMLAB_COUNT},
    {"reserved_bytes.all.allocated", MEMLAB_COUNTER, MEMLAB_BYTES},
    {"reserved_bytes.all.current", MEMLAB_LEVEL, MEMLAB_BYTES},
    {"reserved_bytes.all.freed", MEMLAB_COUNTER, MEMLAB_BYTES},
    {"reserved_bytes.all.peak", MEMLAB_PEAK, MEMLAB_BYTES},
};

const memlab_source kCpuSource = {
    MEMLAB_SOURCE_ABI_VERSION,
    "cpu",
    static_cast<int>(sizeof kFields / sizeof kFields[0]),
    kFields,
    cpu_prepare,
    cpu_sample,
    cpu_reset_peaks,
    cpu_open_reader,
    cpu_close_reader,
    cpu_read,
    cpu_listen,
};

}  // namespace

namespace memlab {

const memlab_source *cpu_source() { return &kCpuSource; }

}  // namespace memlab

namespace memlab {

void cpu_pause_next_block(int64_t ns) noexcept {
    g_paused.store(false, std::memory_order_release);
    g_pause_ns.store(ns, std::memory_order_release);
}

bool cpu_block_paused() noexcept {
    return g_paused.load(std::memory_order_acquire);
}

}  // namespace memlab
