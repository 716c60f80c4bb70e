// The CUDA push sources' state (cuda_push_source.cpp says what they do): per
// device, the open readers' peak registers, the per-thread counts and the
// per-block push, and the globals the tracker (cuda_push_tracker.cpp), the
// readers (cuda_push_readers.cpp), the counting (cuda_push_counting.cpp) and
// the listener (cuda_push_listen.cpp) share.  Included only where the shim
// has the CUDA trace tracker.
#ifndef MEMLAB_TORCHSHIM_CUDA_PUSH_STATE_H
#define MEMLAB_TORCHSHIM_CUDA_PUSH_STATE_H

#include "compat.h"
#include "shim.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace memlab::cuda_push {

namespace cca = c10::cuda::CUDACachingAllocator;
using TraceEntry = cca::TraceEntry;
using c10::CachingDeviceAllocator::DeviceStats;

// The levels followed, in field order.
enum Quantity { ACTIVE = 0, RESERVED = 1, N_QUANTITIES = 2 };

constexpr int kMaxDevices = 64;  // events of higher indices are not followed
constexpr int kMaxReaders = 64;  // per device; a reader finding none fails

constexpr auto kAll =
    static_cast<std::size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);

inline void levels_of(const DeviceStats &stats, int64_t *out) noexcept {
    out[ACTIVE] = stats.active_bytes[kAll].current;
    out[RESERVED] = stats.reserved_bytes[kAll].current;
}

// What a reader last read, for skipping the next read when nothing moved.
// Touched only by the reader's own thread.
struct ReaderCache {
    bool valid = false;
    uint64_t seen = 0;  // Device::changes at that read
    int64_t levels[N_QUANTITIES] = {};
};

// Rises not yet observed, bits of Device::pending.
enum : unsigned { ACTIVE_ROSE = 1u, RESERVED_ROSE = 2u };

// Per-thread counts.  allocated_bytes' cumulative .allocated rises right
// *after* each ALLOC callback, and its cumulative .freed right *before* each
// FREE_REQUESTED callback, both under the allocator's mutex.  So the
// difference of .allocated between two consecutive ALLOC callbacks (or an
// ALLOC callback and the allocating thread's next read) is exactly the first
// ALLOC's block, and the difference of .freed between two consecutive
// FREE_REQUESTED callbacks is exactly the second one's block: each is
// credited to the reader of the thread that made the event.
constexpr int kNobody = -2;      // no ALLOC waiting for its size
constexpr int kUnprofiled = -1;  // a thread without a counted reader here

struct Counts {
    std::atomic<int64_t> bytes_allocated{0}, bytes_freed{0}, allocated{0}, freed{0};
};

// A tiny lock for Counting: held for a few stores, never across a call that
// could block (a callback holding it already holds the allocator's mutex).
class SpinGuard {
  public:
    explicit SpinGuard(std::atomic<bool> &busy) : busy_(busy) {
        while (busy_.exchange(true, std::memory_order_acquire)) {
        }
    }
    ~SpinGuard() { busy_.store(false, std::memory_order_release); }
    SpinGuard(const SpinGuard &) = delete;
    SpinGuard &operator=(const SpinGuard &) = delete;

  private:
    std::atomic<bool> &busy_;
};

struct Counting {
    std::atomic<int> readers{0};  // counted readers open on this device
    std::atomic<bool> busy{false};
    // Guarded by busy:
    int owner = kNobody;          // reader whose last ALLOC is not sized yet
    uint64_t owner_gen = 0;
    int64_t alloc_base = 0;       // cumulative .allocated at that ALLOC
    bool freed_known = false;
    int64_t freed_base = 0;       // cumulative .freed after the last FREE_REQUESTED

    void forget() noexcept {
        SpinGuard guard(busy);
        owner = kNobody;
        freed_known = false;
    }
};

// The last pushed block whose size is not yet known.
enum Unsized { NONE = 0, UNSIZED_ALLOC, UNSIZED_FREE };

// One device's per-block push.  Guarded by busy (taken under the allocator's
// mutex by the tracker, and without it by read() and listen()).
struct Pushing {
    std::atomic<bool> following{false};  // the tracker calls push()
    std::atomic<memlab_alloc_listener> listener{nullptr};
    std::atomic<bool> busy{false};
    uint64_t events = 0;       // events seen while following
    int unsized = NONE;
    uintptr_t ptr = 0;
    int64_t base = 0;          // its cumulative figure before it
    // Cumulative active_bytes .allocated / .freed as of now, when known (no
    // ALLOC / FREE_COMPLETED since they were read).
    bool allocated_known = false, freed_known = false;
    int64_t allocated = 0, freed = 0;

    // Sizes the unsized block from stats read after its event.  busy held.
    void settle(int device, const DeviceStats &stats) noexcept {
        if (unsized == NONE)
            return;
        const auto &active = stats.active_bytes[kAll];
        const int64_t now = unsized == UNSIZED_ALLOC ? active.allocated : active.freed;
        if (now <= base)
            return;  // stats from before its event (a read racing with it)
        if (memlab_alloc_listener fn = listener.load(std::memory_order_relaxed))
            (void)fn("cuda", device, ptr, now - base, MEMLAB_SIZED);
        unsized = NONE;
    }

    void know(const DeviceStats &stats) noexcept {
        allocated = stats.active_bytes[kAll].allocated;
        freed = stats.active_bytes[kAll].freed;
        allocated_known = freed_known = true;
    }
};


// One device's readers.
struct Device {
    std::atomic<uint64_t> open{0};     // bit i: registers[i] in use
    std::atomic<uint64_t> counted{0};  // bit i: reader i is a counted one
    std::atomic<uint64_t> gens[kMaxReaders] = {};  // bumped at each open / close
    std::atomic<int64_t> registers[kMaxReaders][N_QUANTITIES] = {};
    Counts counts[kMaxReaders];
    Counting counting;
    // Written by the tracker only, under this device's allocator mutex.
    std::atomic<unsigned> pending{0};
    std::atomic<uint64_t> changes{0};  // level-moving events seen while armed
    ReaderCache caches[kMaxReaders];
    Pushing pushing;

    // The tracker's part of the push, at an event under the allocator's
    // mutex; `stats` reads the device's statistics (once per event).
    template <class Stats>
    void push(int device, const TraceEntry &e, Stats &&stats) noexcept {
        SpinGuard guard(pushing.busy);
        Pushing &p = pushing;
        ++p.events;
        memlab_alloc_listener fn = p.listener.load(std::memory_order_relaxed);
        if (fn == nullptr)
            return;
        const bool alloc = e.action_ == TraceEntry::ALLOC;
        if (!alloc && e.action_ != TraceEntry::FREE_COMPLETED)
            return;  // moves no active bytes
        if (p.unsized != NONE || !(alloc ? p.allocated_known : p.freed_known)) {
            const DeviceStats &now = stats();
            p.settle(device, now);
            p.know(now);
            p.unsized = NONE;  // (settled; never left for the wrong block)
        }
        const auto ptr = static_cast<uintptr_t>(e.addr_);
        if (alloc) {
            (void)fn("cuda", device, ptr, 0, MEMLAB_ALLOC);
            p.unsized = UNSIZED_ALLOC;
            p.base = p.allocated;
            p.allocated_known = false;
        } else {
            p.base = p.freed;
            p.freed_known = false;
            if (fn("cuda", device, ptr, -1, MEMLAB_FREE) == 0)
                p.unsized = UNSIZED_FREE;
        }
        p.ptr = ptr;
    }

    // The read()/sample() part: sizes the last block if its event is over.
    void settle_pushed(int device, const DeviceStats &stats) noexcept {
        if (pushing.listener.load(std::memory_order_acquire) == nullptr)
            return;
        SpinGuard guard(pushing.busy);
        pushing.settle(device, stats);
    }

    void raise_readers(const int64_t *levels) noexcept {
        uint64_t bits = open.load(std::memory_order_acquire);
        while (bits != 0) {
            const int i = __builtin_ctzll(bits);
            bits &= bits - 1;
            for (int q = 0; q < N_QUANTITIES; ++q)
                raise_to(registers[i][q], levels[q]);
        }
    }

    void observe(const DeviceStats &stats) noexcept {
        int64_t levels[N_QUANTITIES];
        levels_of(stats, levels);
        pending.store(0, std::memory_order_relaxed);
        raise_readers(levels);
    }

    // The calling thread's counted reader on this device, or kUnprofiled.
    int me(int device) const noexcept;

    void credit(int reader, uint64_t gen, std::atomic<int64_t> Counts::*field,
                int64_t bytes) noexcept {
        if (reader >= 0 && bytes > 0 && gens[reader].load(std::memory_order_acquire) == gen)
            (counts[reader].*field).fetch_add(bytes, std::memory_order_relaxed);
    }

    // At an ALLOC callback: `allocated` is the cumulative figure before it.
    void count_alloc(int device, int64_t allocated) noexcept;

    // At a FREE_REQUESTED callback: `freed` is the cumulative figure after it.
    void count_free(int device, int64_t freed) noexcept;
};

extern Device g_devices[kMaxDevices];
extern std::atomic<int> g_pushing;  // devices with a listener
extern std::atomic<bool> g_armed;   // any reader open on any device
extern std::mutex g_control;        // open / close / the one attach
extern int g_open_readers;          // guarded by g_control, all devices
extern bool g_attached;             // guarded by g_control

bool valid_device(int device);

// Why the tracker cannot serve, or nullptr.  Control path, GIL held.
const char *unavailable();

// A reader's levels and peaks: active current, active peak, reserved
// current, reserved peak.  Throws what getDeviceStats throws.
void read_levels(int device, int reader, int64_t *out);

// Reader `reader` (generation `gen`) of `device` counts what the calling
// thread allocates and frees from now on.
void count_for_this_thread(int device, int reader, uint64_t gen) noexcept;

// The entry points of the contract (include/memlab/source.h), in the
// source tables of cuda_push_source.cpp.
int push_prepare(int device, char *err, int err_len) noexcept;
int push_reset_peaks(int device) noexcept;
int push_open_reader(int device) noexcept;
int counted_open_reader(int device) noexcept;
void close_reader(int device, int reader) noexcept;
int push_read(int device, int reader, int64_t *out) noexcept;
int counted_read(int device, int reader, int64_t *out) noexcept;
int push_listen(int device, memlab_alloc_listener listener, int64_t *level) noexcept;

}  // namespace memlab::cuda_push

#endif  // MEMLAB_TORCHSHIM_CUDA_PUSH_STATE_H
