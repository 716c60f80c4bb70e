// The CUDA push source: an AllocatorTraceTracker attached to the caching
// allocator raises each open reader's peak registers, so reading a line's
// peak never resets the allocator's own statistics: the user's
// max_memory_reserved() and every *.peak of torch.cuda.memory_stats() survive
// profiling.
//
// Fields (sorted, like torch.cuda.memory_stats()):
//   active_bytes.all.current, active_bytes.all.peak,
//   reserved_bytes.all.current, reserved_bytes.all.peak
// which covers the profiler's default columns and its growth field.  A second
// source over the same tracker, "cuda_push_counted", adds what the calling
// thread allocated and freed (allocated_bytes.all.allocated / .freed and
// allocation.all.allocated / .freed): see "Per-thread counts" below.  Other
// columns are read from the polled CUDA source (cuda_source.cpp); Python
// picks the source (pytorch_memlab/sources/choice.py, choose).
//
// Why the tracker does not sum event sizes: TraceEntry::size_ of ALLOC /
// FREE_REQUESTED / FREE_COMPLETED is the *requested* size, while
// active_bytes and allocated_bytes count whole blocks (rounded, and
// sometimes an unsplit remainder), which no event carries.  So the tracker
// *observes* the device's levels with getDeviceStats() -- the allocator's
// mutex is a recursive_mutex already held by this very thread, so this
// relocks it and takes nothing else; no GIL, no Python, no allocation -- and
// raises every open register with them.
//
// It observes only where a level is about to fall with a rise not yet seen,
// since a peak is the level just before a fall (or at a read).  In torch's
// CUDACachingAllocator:
//   ALLOC          active rises *after* the callback (seen later);
//   FREE_COMPLETED active falls *after* the callback: observe here if an
//                  ALLOC happened since the last observation;
//   SEGMENT_ALLOC / SEGMENT_MAP  reserved rises: observe at the next event
//                  (the ALLOC the segment was made for), because
//   SEGMENT_UNMAP  reserved falls *before* its callback;
//   FREE_REQUESTED moves neither level (allocated_bytes falls before it, so
//                  that peak cannot be caught this way: not offered here).
// (The counted source also reads the stats at ALLOC and FREE_REQUESTED.)
// A hot loop of `x = x + 1` then costs one observation per line instead of
// one per event.  A reader's read() skips its own getDeviceStats() when no
// level-moving event happened on the device since its previous read.
//
// The tracker cannot be detached, so one atomic flag makes it return at once
// while no reader is open and no tracer follows blocks.
//
// Per-block push (source.h's listen, for the breakdown of the peak): the
// events carry requested sizes, so each block reaches the listener at its
// ALLOC / FREE_COMPLETED with no size, and its size -- the step of the
// cumulative active_bytes .allocated / .freed, which move right after that
// callback -- at the device's next event or next read, whichever comes
// first.  Nothing moves the active level in between, so the course of the
// level the listener rebuilds, and every peak on it, is exact.  The figures
// read for one event serve the next, so a loop of `x = x + 1` reads the
// statistics no more often than it does without the push.
#include "compat.h"
#include "shim.h"

#if MEMLAB_HAVE_DEVICE_ALLOCATOR && defined(MEMLAB_HAVE_CUDA_TRACKER)

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace {

using memlab::raise_to;
using memlab::take_peak;

namespace cca = c10::cuda::CUDACachingAllocator;
using TraceEntry = cca::TraceEntry;
using c10::CachingDeviceAllocator::DeviceStats;

// The levels followed, in field order.
enum Quantity { ACTIVE = 0, RESERVED = 1, N_QUANTITIES = 2 };

constexpr int kMaxDevices = 64;  // events of higher indices are not followed
constexpr int kMaxReaders = 64;  // per device; a reader finding none fails

constexpr auto kAll =
    static_cast<std::size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);

void levels_of(const DeviceStats &stats, int64_t *out) noexcept {
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

// A counted reader of the calling thread, per device; validated by the
// reader's generation, since another thread may reuse the register.
struct Mine {
    int reader = kUnprofiled;
    uint64_t gen = 0;
};
thread_local Mine t_mine[kMaxDevices];

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

std::atomic<int> g_pushing{0};  // devices with a listener

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
    int me(int device) const noexcept {
        const Mine m = t_mine[device];
        if (m.reader < 0 ||
            (counted.load(std::memory_order_acquire) & (uint64_t{1} << m.reader)) == 0 ||
            gens[m.reader].load(std::memory_order_acquire) != m.gen)
            return kUnprofiled;
        return m.reader;
    }

    void credit(int reader, uint64_t gen, std::atomic<int64_t> Counts::*field,
                int64_t bytes) noexcept {
        if (reader >= 0 && bytes > 0 && gens[reader].load(std::memory_order_acquire) == gen)
            (counts[reader].*field).fetch_add(bytes, std::memory_order_relaxed);
    }

    // At an ALLOC callback: `allocated` is the cumulative figure before it.
    void count_alloc(int device, int64_t allocated) noexcept {
        const int mine = me(device);
        const uint64_t gen = mine >= 0 ? gens[mine].load(std::memory_order_relaxed) : 0;
        {
            SpinGuard guard(counting.busy);
            if (counting.owner != kNobody)
                credit(counting.owner, counting.owner_gen, &Counts::bytes_allocated,
                       allocated - counting.alloc_base);
            counting.owner = mine;
            counting.owner_gen = gen;
            counting.alloc_base = allocated;
        }
        if (mine >= 0)
            counts[mine].allocated.fetch_add(1, std::memory_order_relaxed);
    }

    // At a FREE_REQUESTED callback: `freed` is the cumulative figure after it.
    void count_free(int device, int64_t freed) noexcept {
        const int mine = me(device);
        const uint64_t gen = mine >= 0 ? gens[mine].load(std::memory_order_relaxed) : 0;
        {
            SpinGuard guard(counting.busy);
            if (counting.freed_known)
                credit(mine, gen, &Counts::bytes_freed, freed - counting.freed_base);
            counting.freed_base = freed;
            counting.freed_known = true;
        }
        if (mine >= 0)
            counts[mine].freed.fetch_add(1, std::memory_order_relaxed);
    }
};

Device g_devices[kMaxDevices];

std::atomic<bool> g_armed{false};  // any reader open on any device
std::mutex g_control;              // open / close / the one attach
int g_open_readers = 0;            // guarded by g_control, all devices
bool g_attached = false;           // guarded by g_control

// Under the allocator's device mutex, on the allocating or freeing thread.
void on_trace(const TraceEntry &e) {
    const bool armed = g_armed.load(std::memory_order_acquire);
    if (!armed && g_pushing.load(std::memory_order_acquire) == 0)
        return;
    const int d = static_cast<int>(e.device_);
    if (d < 0 || d >= kMaxDevices)
        return;
    Device &dev = g_devices[d];
    const bool reading = armed && dev.open.load(std::memory_order_acquire) != 0;
    const bool pushing = dev.pushing.following.load(std::memory_order_acquire);
    if (!reading && !pushing)
        return;
    try {
        std::optional<DeviceStats> read_once;
        auto stats = [&]() -> const DeviceStats & {
            if (!read_once)
                read_once.emplace(cca::getDeviceStats(e.device_));
            return *read_once;
        };
        if (pushing)
            dev.push(d, e, stats);
        if (!reading) {
            // Readers opened later poll afresh; a read skips its poll only
            // while nothing moved, and an unsized block counts as moving.
            if (e.action_ == TraceEntry::ALLOC || e.action_ == TraceEntry::FREE_COMPLETED)
                dev.changes.fetch_add(1, std::memory_order_release);
            return;
        }
        const unsigned pending = dev.pending.load(std::memory_order_relaxed);
        const bool counting = dev.counting.readers.load(std::memory_order_acquire) > 0;
        switch (e.action_) {
        case TraceEntry::SEGMENT_ALLOC:
        case TraceEntry::SEGMENT_MAP:
            dev.pending.store(pending | RESERVED_ROSE, std::memory_order_relaxed);
            break;
        case TraceEntry::ALLOC:
            if ((pending & RESERVED_ROSE) != 0)
                dev.observe(stats());
            if (counting)
                dev.count_alloc(d, stats().allocated_bytes[kAll].allocated);
            dev.pending.fetch_or(ACTIVE_ROSE, std::memory_order_relaxed);
            break;
        case TraceEntry::FREE_REQUESTED:  // moves no level
            if (counting)
                dev.count_free(d, stats().allocated_bytes[kAll].freed);
            return;
        case TraceEntry::FREE_COMPLETED:
        case TraceEntry::SEGMENT_FREE:
        case TraceEntry::SEGMENT_UNMAP:
            if (pending != 0)
                dev.observe(stats());
            break;
        default:  // OOM, SNAPSHOT...: no level moves
            return;
        }
        dev.changes.fetch_add(1, std::memory_order_release);
    } catch (...) {
        // Nothing may escape into the allocator; a missed raise only makes
        // a peak low, and read() still sees the level it polls.
    }
}

bool valid_device(int device) { return device >= 0 && device < kMaxDevices; }

// Why the tracker cannot serve, or nullptr.  Control path, GIL held.
const char *unavailable() {
    if (c10::GetAllocator(c10::kCUDA) == nullptr)
        return "this torch has no CUDA allocator (CPU-only build?)";
    cca::CUDAAllocator *alloc = cca::get();
    if (alloc == nullptr)
        return "no CUDA allocator is registered";
    // name() allocates a string: fine here, never on the hot path.
    if (alloc->name() != "native")
        return "the CUDA allocator backend is not the native caching allocator "
               "(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync or a pluggable "
               "allocator): it reports no trace events";
    return nullptr;
}

// ---------------------------------------------------------------------------
// The entry points of the contract.

int push_prepare(int device, char *err, int err_len) noexcept {
    const char *unknown = "unknown C++ exception attaching the CUDA tracker";
    return memlab::reporting_errors(err, err_len, unknown, [&] {
        if (const char *why = unavailable()) {
            memlab::copy_error(err, err_len, why);
            return -1;
        }
        if (!cca::get()->initialized()) {
            memlab::copy_error(err, err_len,
                               "CUDA is not initialised yet: call torch.cuda.init() "
                               "(or create a CUDA tensor) before profiling");
            return -1;
        }
        if (!valid_device(device)) {
            memlab::copy_error(err, err_len,
                               "CUDA device index out of range for the trace tracker");
            return -1;
        }
        // Throws (c10::Error) for a device the allocator does not know.
        (void)cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
        std::lock_guard<std::mutex> lock(g_control);
        if (!g_attached) {
            // Lazy init created every device's allocator at once, and the
            // tracker goes to each of them: all devices are covered.
            cca::attachAllocatorTraceTracker(on_trace);
            g_attached = true;
        }
        return 0;
    });
}

// This source never resets the allocator's peaks: it has readers instead.
int push_reset_peaks(int device) noexcept { return -1; }

// Opens a reader on the calling thread; a counted one also counts what this
// thread allocates and frees from now on.
int open_reader(int device, bool counted) noexcept {
    if (!valid_device(device))
        return -1;
    try {
        const DeviceStats stats = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
        g_devices[device].settle_pushed(device, stats);
        std::lock_guard<std::mutex> lock(g_control);
        if (!g_attached)
            return -1;
        Device &dev = g_devices[device];
        const uint64_t bits = dev.open.load(std::memory_order_relaxed);
        if (bits == ~uint64_t{0})
            return -1;  // (g_control serialises openers: no CAS loop needed)
        const int i = __builtin_ctzll(~bits);
        const uint64_t bit = uint64_t{1} << i;
        // Arm before publishing, so the first event seen raises from here.
        int64_t levels[N_QUANTITIES];
        levels_of(stats, levels);
        for (int q = 0; q < N_QUANTITIES; ++q)
            dev.registers[i][q].store(levels[q], std::memory_order_relaxed);
        dev.caches[i].valid = false;
        const uint64_t gen = dev.gens[i].fetch_add(1, std::memory_order_acq_rel) + 1;
        if (counted) {
            Counts &c = dev.counts[i];
            c.bytes_allocated.store(0, std::memory_order_relaxed);
            c.bytes_freed.store(0, std::memory_order_relaxed);
            c.allocated.store(0, std::memory_order_relaxed);
            c.freed.store(0, std::memory_order_relaxed);
            t_mine[device] = Mine{i, gen};
            dev.counted.fetch_or(bit, std::memory_order_acq_rel);
        }
        dev.open.fetch_or(bit, std::memory_order_acq_rel);
        if (g_open_readers++ == 0)
            g_armed.store(true, std::memory_order_release);
        if (counted && dev.counting.readers.fetch_add(1, std::memory_order_acq_rel) == 0) {
            // Counting starts now: the first FREE_REQUESTED needs a base.  One
            // racing with this read sets it itself (its thread has no counted
            // reader yet: nothing of a reader is lost).
            dev.counting.forget();
            const int64_t freed =
                cca::getDeviceStats(static_cast<c10::DeviceIndex>(device)).allocated_bytes[kAll].freed;
            SpinGuard guard(dev.counting.busy);
            if (!dev.counting.freed_known) {
                dev.counting.freed_base = freed;
                dev.counting.freed_known = true;
            }
        }
        return i;
    } catch (...) {  // getDeviceStats on a device torch does not know
        return -1;
    }
}

void close_reader(int device, int reader) noexcept {
    if (!valid_device(device) || reader < 0 || reader >= kMaxReaders)
        return;
    std::lock_guard<std::mutex> lock(g_control);
    Device &dev = g_devices[device];
    const uint64_t bit = uint64_t{1} << reader;
    if ((dev.open.fetch_and(~bit, std::memory_order_acq_rel) & bit) == 0)
        return;
    dev.gens[reader].fetch_add(1, std::memory_order_acq_rel);  // orphans its pending ALLOC
    if ((dev.counted.fetch_and(~bit, std::memory_order_acq_rel) & bit) != 0 &&
        dev.counting.readers.fetch_sub(1, std::memory_order_acq_rel) == 1)
        dev.counting.forget();
    if (--g_open_readers == 0)
        g_armed.store(false, std::memory_order_release);
}

int push_open_reader(int device) noexcept { return open_reader(device, false); }
int counted_open_reader(int device) noexcept { return open_reader(device, true); }

// out: active current, active peak, reserved current, reserved peak.
void read_levels(int device, int reader, int64_t *out) {
    Device &dev = g_devices[device];
    ReaderCache &cache = dev.caches[reader];
    // Loaded before the stats: an event racing with this read makes the
    // next read poll again, never reuse a stale level.
    const uint64_t changes = dev.changes.load(std::memory_order_acquire);
    if (!cache.valid || cache.seen != changes) {
        const DeviceStats stats = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
        levels_of(stats, cache.levels);
        dev.settle_pushed(device, stats);
        cache.seen = changes;
        cache.valid = true;
    }
    std::atomic<int64_t> *regs = dev.registers[reader];
    out[0] = cache.levels[ACTIVE];
    out[1] = take_peak(regs[ACTIVE], cache.levels[ACTIVE]);
    out[2] = cache.levels[RESERVED];
    out[3] = take_peak(regs[RESERVED], cache.levels[RESERVED]);
}

int push_read(int device, int reader, int64_t *out) noexcept {
    if (!valid_device(device) || reader < 0 || reader >= kMaxReaders)
        return -1;
    try {
        read_levels(device, reader, out);
        return 0;
    } catch (...) {
        return -1;
    }
}

// Sizes this thread's own last ALLOC if no other ALLOC has done it yet: the
// stats are read after that allocation finished, and any ALLOC after it
// would have sized it first (and taken the ownership).
void settle_own_alloc(Device &dev, int device, int reader) {
    const uint64_t gen = dev.gens[reader].load(std::memory_order_acquire);
    {
        SpinGuard guard(dev.counting.busy);
        if (dev.counting.owner != reader || dev.counting.owner_gen != gen)
            return;
    }
    const int64_t allocated =
        cca::getDeviceStats(static_cast<c10::DeviceIndex>(device)).allocated_bytes[kAll].allocated;
    SpinGuard guard(dev.counting.busy);
    if (dev.counting.owner != reader || dev.counting.owner_gen != gen)
        return;
    dev.credit(reader, gen, &Counts::bytes_allocated, allocated - dev.counting.alloc_base);
    dev.counting.owner = kNobody;
}

int counted_read(int device, int reader, int64_t *out) noexcept {
    if (!valid_device(device) || reader < 0 || reader >= kMaxReaders)
        return -1;
    try {
        Device &dev = g_devices[device];
        int64_t levels[4];
        read_levels(device, reader, levels);
        settle_own_alloc(dev, device, reader);
        const Counts &c = dev.counts[reader];
        const auto rel = std::memory_order_relaxed;
        // Order matches kCountedFields.
        out[0] = levels[0];
        out[1] = levels[1];
        out[2] = c.bytes_allocated.load(rel);
        out[3] = c.bytes_freed.load(rel);
        out[4] = c.allocated.load(rel);
        out[5] = c.freed.load(rel);
        out[6] = levels[2];
        out[7] = levels[3];
        return 0;
    } catch (...) {
        return -1;
    }
}

// source.h's listen.  The level returned is the active level at the moment
// the listener was set: read with no event in between (else read again), as
// the allocator's mutex cannot be held here.
int push_listen(int device, memlab_alloc_listener listener, int64_t *level) noexcept {
    if (!valid_device(device))
        return -1;
    try {
        std::lock_guard<std::mutex> lock(g_control);
        if (!g_attached)
            return -1;
        Pushing &p = g_devices[device].pushing;
        if (listener == nullptr) {
            {
                SpinGuard guard(p.busy);
                p.listener.store(nullptr, std::memory_order_release);
                p.unsized = NONE;
            }
            if (p.following.exchange(false, std::memory_order_acq_rel))
                g_pushing.fetch_sub(1, std::memory_order_acq_rel);
            return 0;
        }
        // From here the tracker counts events (pushing none while no listener).
        if (!p.following.exchange(true, std::memory_order_acq_rel))
            g_pushing.fetch_add(1, std::memory_order_acq_rel);
        for (int attempt = 0; attempt < 1000; ++attempt) {
            uint64_t seen;
            {
                SpinGuard guard(p.busy);
                seen = p.events;
            }
            const DeviceStats stats = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
            SpinGuard guard(p.busy);
            if (p.events != seen)
                continue;  // an event came in between: read again
            p.listener.store(listener, std::memory_order_release);
            p.unsized = NONE;
            p.know(stats);
            *level = stats.active_bytes[kAll].current;
            return 0;
        }
        return -1;  // never a quiet moment: refuse rather than guess
    } catch (...) {
        return -1;
    }
}

const memlab_field kFields[] = {
    {"active_bytes.all.current", MEMLAB_LEVEL, MEMLAB_BYTES},
    {"active_bytes.all.peak", MEMLAB_PEAK, MEMLAB_BYTES},
    {"reserved_bytes.all.current", MEMLAB_LEVEL, MEMLAB_BYTES},
    {"reserved_bytes.all.peak", MEMLAB_PEAK, MEMLAB_BYTES},
};

const memlab_field kCountedFields[] = {
    {"active_bytes.all.current", MEMLAB_LEVEL, MEMLAB_BYTES},
    {"active_bytes.all.peak", MEMLAB_PEAK, MEMLAB_BYTES},
    {"allocated_bytes.all.allocated", MEMLAB_COUNTER, MEMLAB_BYTES},
    {"allocated_bytes.all.freed", MEMLAB_COUNTER, MEMLAB_BYTES},
    {"allocation.all.allocated", MEMLAB_COUNTER, MEMLAB_COUNT},
    {"allocation.all.freed", MEMLAB_COUNTER, MEMLAB_COUNT},
    {"reserved_bytes.all.current", MEMLAB_LEVEL, MEMLAB_BYTES},
    {"reserved_bytes.all.peak", MEMLAB_PEAK, MEMLAB_BYTES},
};

// Where sample() finds each field in the allocator's DeviceStats, in the
// order of kFields / kCountedFields: one figure of one statistic's
// aggregate pool.
using c10::CachingDeviceAllocator::Stat;
using c10::CachingDeviceAllocator::StatArray;

struct StatRef {
    StatArray DeviceStats::*stat;
    int64_t Stat::*figure;
};

constexpr StatRef kStatRefs[] = {
    {&DeviceStats::active_bytes, &Stat::current},
    {&DeviceStats::active_bytes, &Stat::peak},
    {&DeviceStats::reserved_bytes, &Stat::current},
    {&DeviceStats::reserved_bytes, &Stat::peak},
};

constexpr StatRef kCountedStatRefs[] = {
    {&DeviceStats::active_bytes, &Stat::current},
    {&DeviceStats::active_bytes, &Stat::peak},
    {&DeviceStats::allocated_bytes, &Stat::allocated},
    {&DeviceStats::allocated_bytes, &Stat::freed},
    {&DeviceStats::allocation, &Stat::allocated},
    {&DeviceStats::allocation, &Stat::freed},
    {&DeviceStats::reserved_bytes, &Stat::current},
    {&DeviceStats::reserved_bytes, &Stat::peak},
};

static_assert(sizeof kStatRefs / sizeof kStatRefs[0] == sizeof kFields / sizeof kFields[0],
              "one StatRef per field");
static_assert(sizeof kCountedStatRefs / sizeof kCountedStatRefs[0] ==
                  sizeof kCountedFields / sizeof kCountedFields[0],
              "one StatRef per field");

// sample() of both sources: the allocator's own figures (its peaks, never
// reset by these sources; its counters, cumulative).
template <const StatRef *Refs, std::size_t N>
int sample_stats(int device, int64_t *out) noexcept {
    try {
        if (!valid_device(device))
            return -1;
        const DeviceStats stats = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
        for (std::size_t i = 0; i < N; ++i)
            out[i] = (stats.*(Refs[i].stat))[kAll].*(Refs[i].figure);
        g_devices[device].settle_pushed(device, stats);
        return 0;
    } catch (...) {
        return -1;
    }
}

constexpr auto push_sample = sample_stats<kStatRefs, sizeof kStatRefs / sizeof kStatRefs[0]>;
constexpr auto counted_sample =
    sample_stats<kCountedStatRefs, sizeof kCountedStatRefs / sizeof kCountedStatRefs[0]>;

const memlab_source kPushSource = {
    MEMLAB_SOURCE_ABI_VERSION,
    "cuda",
    static_cast<int>(sizeof kFields / sizeof kFields[0]),
    kFields,
    push_prepare,
    push_sample,
    push_reset_peaks,
    push_open_reader,
    close_reader,
    push_read,
    push_listen,
};

const memlab_source kCountedSource = {
    MEMLAB_SOURCE_ABI_VERSION,
    "cuda",
    static_cast<int>(sizeof kCountedFields / sizeof kCountedFields[0]),
    kCountedFields,
    push_prepare,
    counted_sample,
    push_reset_peaks,
    counted_open_reader,
    close_reader,
    counted_read,
    push_listen,
};

}  // namespace

namespace memlab {

const memlab_source *cuda_push_source() { return &kPushSource; }

const memlab_source *cuda_push_counted_source() { return &kCountedSource; }

const char *cuda_push_unavailable() noexcept {
    try {
        return unavailable();
    } catch (...) {
        return "the CUDA allocator could not be queried";
    }
}

}  // namespace memlab

#else  // no tracker in this build

#ifndef MEMLAB_CUDA_TRACKER_MISSING
#define MEMLAB_CUDA_TRACKER_MISSING "this torch has no c10::DeviceAllocator (torch < 2.9)"
#endif

namespace memlab {

const memlab_source *cuda_push_source() { return nullptr; }

const memlab_source *cuda_push_counted_source() { return nullptr; }

const char *cuda_push_unavailable() noexcept {
    return "the shim was built without the CUDA trace tracker: "
           MEMLAB_CUDA_TRACKER_MISSING;
}

}  // namespace memlab

#endif
