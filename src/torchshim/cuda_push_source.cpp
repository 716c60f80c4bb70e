// The CUDA push source: an AllocatorTraceTracker attached to the caching
// allocator raises each open reader's peak registers, so reading a line's
// peak never resets the allocator's own statistics: the user's
// max_memory_reserved() and every *.peak of torch.cuda.memory_stats() survive
// profiling.
//
// Fields (sorted, like torch.cuda.memory_stats()):
//   active_bytes.all.current, active_bytes.all.peak,
//   reserved_bytes.all.current, reserved_bytes.all.peak
// which covers the profiler's default columns and its growth field.  Other
// columns are read from the polled CUDA source (cuda_source.cpp); Python
// picks the source (_sources.get_source).
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
// A hot loop of `x = x + 1` then costs one observation per line instead of
// one per event.  A reader's read() skips its own getDeviceStats() when no
// level-moving event happened on the device since its previous read.
//
// The tracker cannot be detached, so one atomic flag makes it return at once
// while no reader is open.
#include "compat.h"
#include "shim.h"

#if MEMLAB_HAVE_DEVICE_ALLOCATOR && defined(MEMLAB_HAVE_CUDA_TRACKER)

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace {

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

void raise_to(std::atomic<int64_t> &peak, int64_t now) noexcept {
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen &&
           !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
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

// One device's readers.
struct Device {
    std::atomic<uint64_t> open{0};  // bit i: registers[i] in use
    std::atomic<int64_t> registers[kMaxReaders][N_QUANTITIES] = {};
    // Written by the tracker only, under this device's allocator mutex.
    std::atomic<unsigned> pending{0};
    std::atomic<uint64_t> changes{0};  // level-moving events seen while armed
    ReaderCache caches[kMaxReaders];

    void raise_readers(const int64_t *levels) noexcept {
        uint64_t bits = open.load(std::memory_order_acquire);
        while (bits != 0) {
            const int i = __builtin_ctzll(bits);
            bits &= bits - 1;
            for (int q = 0; q < N_QUANTITIES; ++q)
                raise_to(registers[i][q], levels[q]);
        }
    }

    void observe(c10::DeviceIndex index) {
        int64_t levels[N_QUANTITIES];
        levels_of(cca::getDeviceStats(index), levels);
        pending.store(0, std::memory_order_relaxed);
        raise_readers(levels);
    }
};

Device g_devices[kMaxDevices];

std::atomic<bool> g_armed{false};  // any reader open on any device
std::mutex g_control;              // open / close / the one attach
int g_open_readers = 0;            // guarded by g_control, all devices
bool g_attached = false;           // guarded by g_control

// Under the allocator's device mutex, on the allocating or freeing thread.
void on_trace(const TraceEntry &e) {
    if (!g_armed.load(std::memory_order_acquire))
        return;
    const int d = static_cast<int>(e.device_);
    if (d < 0 || d >= kMaxDevices)
        return;
    Device &dev = g_devices[d];
    if (dev.open.load(std::memory_order_acquire) == 0)
        return;
    try {
        const unsigned pending = dev.pending.load(std::memory_order_relaxed);
        switch (e.action_) {
        case TraceEntry::SEGMENT_ALLOC:
        case TraceEntry::SEGMENT_MAP:
            dev.pending.store(pending | RESERVED_ROSE, std::memory_order_relaxed);
            break;
        case TraceEntry::ALLOC:
            if (pending & RESERVED_ROSE)
                dev.observe(e.device_);
            dev.pending.fetch_or(ACTIVE_ROSE, std::memory_order_relaxed);
            break;
        case TraceEntry::FREE_COMPLETED:
        case TraceEntry::SEGMENT_FREE:
        case TraceEntry::SEGMENT_UNMAP:
            if (pending != 0)
                dev.observe(e.device_);
            break;
        default:  // FREE_REQUESTED, OOM, SNAPSHOT...: no level moves
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
    try {
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
    } catch (const c10::Error &e) {
        memlab::copy_error(err, err_len, e.what_without_backtrace());
    } catch (const std::exception &e) {
        memlab::copy_error(err, err_len, e.what());
    } catch (...) {
        memlab::copy_error(err, err_len, "unknown C++ exception attaching the CUDA tracker");
    }
    return -1;
}

// The allocator's own figures (its peaks, never reset by this source).
int push_sample(int device, int64_t *out) noexcept {
    try {
        if (!valid_device(device))
            return -1;
        const DeviceStats stats = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
        out[0] = stats.active_bytes[kAll].current;
        out[1] = stats.active_bytes[kAll].peak;
        out[2] = stats.reserved_bytes[kAll].current;
        out[3] = stats.reserved_bytes[kAll].peak;
        return 0;
    } catch (...) {
        return -1;
    }
}

// This source never resets the allocator's peaks: it has readers instead.
int push_reset_peaks(int device) noexcept { return -1; }

int push_open_reader(int device) noexcept {
    if (!valid_device(device))
        return -1;
    try {
        int64_t levels[N_QUANTITIES];
        levels_of(cca::getDeviceStats(static_cast<c10::DeviceIndex>(device)), levels);
        std::lock_guard<std::mutex> lock(g_control);
        if (!g_attached)
            return -1;
        Device &dev = g_devices[device];
        const uint64_t bits = dev.open.load(std::memory_order_relaxed);
        if (bits == ~uint64_t{0})
            return -1;  // (g_control serialises openers: no CAS loop needed)
        const int i = __builtin_ctzll(~bits);
        // Arm before publishing, so the first event seen raises from here.
        for (int q = 0; q < N_QUANTITIES; ++q)
            dev.registers[i][q].store(levels[q], std::memory_order_relaxed);
        dev.caches[i].valid = false;
        dev.open.fetch_or(uint64_t{1} << i, std::memory_order_acq_rel);
        if (g_open_readers++ == 0)
            g_armed.store(true, std::memory_order_release);
        return i;
    } catch (...) {  // getDeviceStats on a device torch does not know
        return -1;
    }
}

void push_close_reader(int device, int reader) noexcept {
    if (!valid_device(device) || reader < 0 || reader >= kMaxReaders)
        return;
    std::lock_guard<std::mutex> lock(g_control);
    const uint64_t bit = uint64_t{1} << reader;
    if ((g_devices[device].open.fetch_and(~bit, std::memory_order_acq_rel) & bit) == 0)
        return;
    if (--g_open_readers == 0)
        g_armed.store(false, std::memory_order_release);
}

// This reader's peak since its last read, rearmed at the current level (an
// event racing with the exchange lands in this read or the next).
int64_t take_peak(std::atomic<int64_t> &reg, int64_t current) noexcept {
    const int64_t peak = reg.exchange(current, std::memory_order_relaxed);
    return peak > current ? peak : current;
}

int push_read(int device, int reader, int64_t *out) noexcept {
    if (!valid_device(device) || reader < 0 || reader >= kMaxReaders)
        return -1;
    try {
        Device &dev = g_devices[device];
        ReaderCache &cache = dev.caches[reader];
        // Loaded before the stats: an event racing with this read makes the
        // next read poll again, never reuse a stale level.
        const uint64_t changes = dev.changes.load(std::memory_order_acquire);
        if (!cache.valid || cache.seen != changes) {
            levels_of(cca::getDeviceStats(static_cast<c10::DeviceIndex>(device)),
                      cache.levels);
            cache.seen = changes;
            cache.valid = true;
        }
        const int64_t *levels = cache.levels;
        std::atomic<int64_t> *regs = dev.registers[reader];
        out[0] = levels[ACTIVE];
        out[1] = take_peak(regs[ACTIVE], levels[ACTIVE]);
        out[2] = levels[RESERVED];
        out[3] = take_peak(regs[RESERVED], levels[RESERVED]);
        return 0;
    } catch (...) {
        return -1;
    }
}

const char *const kFieldNames[] = {
    "active_bytes.all.current",   "active_bytes.all.peak",
    "reserved_bytes.all.current", "reserved_bytes.all.peak",
};

const memlab_source kPushSource = {
    MEMLAB_SOURCE_ABI_VERSION,
    "cuda",
    static_cast<int>(sizeof kFieldNames / sizeof kFieldNames[0]),
    kFieldNames,
    push_prepare,
    push_sample,
    push_reset_peaks,
    push_open_reader,
    push_close_reader,
    push_read,
};

}  // namespace

namespace memlab {

const memlab_source *cuda_push_source() { return &kPushSource; }

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

const char *cuda_push_unavailable() noexcept {
    return "the shim was built without the CUDA trace tracker: "
           MEMLAB_CUDA_TRACKER_MISSING;
}

}  // namespace memlab

#endif
