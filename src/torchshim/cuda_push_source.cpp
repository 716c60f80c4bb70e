// The CUDA push source: an AllocatorTraceTracker attached to the caching
// allocator keeps, per device, the current allocated / active / reserved
// bytes, each open reader's peak registers and each thread's own
// allocated / freed totals.  Reading it never touches the allocator's own
// statistics, so the user's max_memory_allocated() and every *.peak of
// torch.cuda.memory_stats() survive profiling.
//
// Fields (sorted, like torch.cuda.memory_stats()):
//   active_bytes.all.*, allocated_bytes.all.*, reserved_bytes.all.*
// each with .allocated/.current/.freed/.peak.  Columns outside this set are
// read from the polled CUDA source (cuda_source.cpp); Python picks which
// source a profiler gets (_sources.get_source).
//
// The tracker runs on the allocating / freeing thread with the allocator's
// per-device mutex held: it never takes the GIL, never calls into torch,
// never allocates.  It cannot be detached, so one atomic flag (g_armed)
// makes it return at once while no reader is open.
//
// Start values: while disarmed the tracked levels go stale, so arming
// re-synchronises each device from one getDeviceStats() read.  We cannot
// hold the allocator's mutex around that read, so every event also bumps a
// per-device sequence number: read seq, read the stats, read our levels,
// read seq again; equal numbers mean no event fell between the stats and
// our levels, and their difference is the device's offset (retried a few
// times, else the reader is refused and that thread's lines are not read).
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

// The three levels the tracker follows, in field order.
enum Quantity { ACTIVE = 0, ALLOCATED = 1, RESERVED = 2, N_QUANTITIES = 3 };

constexpr int kMaxDevices = 32;  // events of higher indices are not followed
constexpr int kMaxReaders = 64;  // per device; a reader finding none polls

void raise_to(std::atomic<int64_t> &peak, int64_t now) noexcept {
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen &&
           !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
}

// One device.  Levels are raw: the tracker's running sums since the
// process attached it; value = raw + offset, offset set at each sync.
// Registers hold raw peaks, so the tracker never needs the offset.
struct Device {
    std::atomic<uint64_t> seq{0};
    std::atomic<int64_t> raw[N_QUANTITIES] = {};
    std::atomic<int64_t> offset[N_QUANTITIES] = {};
    std::atomic<uint64_t> open{0};  // bit i: registers[i] in use
    std::atomic<int64_t> registers[kMaxReaders][N_QUANTITIES] = {};
    uint64_t synced_epoch = 0;       // guarded by g_control

    void raise_readers(Quantity q, int64_t now) noexcept {
        uint64_t bits = open.load(std::memory_order_acquire);
        while (bits != 0) {
            const int i = __builtin_ctzll(bits);
            bits &= bits - 1;
            raise_to(registers[i][q], now);
        }
    }
};

Device g_devices[kMaxDevices];

// What the calling thread itself allocated / freed, per device and
// quantity.  Only its own thread touches it (the tracker runs on the
// allocating or freeing thread, read() on the reader's thread).
struct ThreadTotals {
    int64_t allocated[kMaxDevices][N_QUANTITIES];
    int64_t freed[kMaxDevices][N_QUANTITIES];
};
thread_local ThreadTotals t_totals{};

std::atomic<bool> g_armed{false};
std::mutex g_control;        // open/close/arm/sync and the one attach
uint64_t g_epoch = 0;        // guarded by g_control; bumped at each arming
int g_open_readers = 0;      // guarded by g_control, all devices
bool g_attached = false;     // guarded by g_control

// Under the allocator's device mutex: no GIL, no torch, no allocation.
void on_trace(const TraceEntry &e) {
    if (!g_armed.load(std::memory_order_acquire))
        return;
    const int d = static_cast<int>(e.device_);
    if (d < 0 || d >= kMaxDevices)
        return;
    Device &dev = g_devices[d];
    const auto size = static_cast<int64_t>(e.size_);
    ThreadTotals &mine = t_totals;
    int64_t now;
    switch (e.action_) {
    case TraceEntry::ALLOC:
        dev.seq.fetch_add(1, std::memory_order_relaxed);
        now = dev.raw[ACTIVE].fetch_add(size, std::memory_order_release) + size;
        dev.raise_readers(ACTIVE, now);
        now = dev.raw[ALLOCATED].fetch_add(size, std::memory_order_release) + size;
        dev.raise_readers(ALLOCATED, now);
        mine.allocated[d][ACTIVE] += size;
        mine.allocated[d][ALLOCATED] += size;
        break;
    case TraceEntry::FREE_REQUESTED:
        dev.seq.fetch_add(1, std::memory_order_relaxed);
        dev.raw[ALLOCATED].fetch_sub(size, std::memory_order_release);
        mine.freed[d][ALLOCATED] += size;
        break;
    case TraceEntry::FREE_COMPLETED:
        dev.seq.fetch_add(1, std::memory_order_relaxed);
        dev.raw[ACTIVE].fetch_sub(size, std::memory_order_release);
        mine.freed[d][ACTIVE] += size;
        break;
    case TraceEntry::SEGMENT_ALLOC:
    case TraceEntry::SEGMENT_MAP:
        dev.seq.fetch_add(1, std::memory_order_relaxed);
        now = dev.raw[RESERVED].fetch_add(size, std::memory_order_release) + size;
        dev.raise_readers(RESERVED, now);
        mine.allocated[d][RESERVED] += size;
        break;
    case TraceEntry::SEGMENT_FREE:
    case TraceEntry::SEGMENT_UNMAP:
        dev.seq.fetch_add(1, std::memory_order_relaxed);
        dev.raw[RESERVED].fetch_sub(size, std::memory_order_release);
        mine.freed[d][RESERVED] += size;
        break;
    default:  // SNAPSHOT, OOM, ANNOTATE...: no bytes move
        break;
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

// The device's offset from one stats read, see the file comment.  Caller
// holds g_control with g_armed set.  Returns false if events kept racing.
bool sync_device(int device) {
    Device &dev = g_devices[device];
    const auto index = static_cast<c10::DeviceIndex>(device);
    for (int attempt = 0; attempt < 100; ++attempt) {
        const uint64_t before = dev.seq.load(std::memory_order_acquire);
        const c10::CachingDeviceAllocator::DeviceStats stats = cca::getDeviceStats(index);
        int64_t raw[N_QUANTITIES];
        for (int q = 0; q < N_QUANTITIES; ++q)
            raw[q] = dev.raw[q].load(std::memory_order_acquire);
        if (dev.seq.load(std::memory_order_acquire) != before)
            continue;
        constexpr auto all = static_cast<std::size_t>(
            c10::CachingDeviceAllocator::StatType::AGGREGATE);
        const int64_t truth[N_QUANTITIES] = {stats.active_bytes[all].current,
                                             stats.allocated_bytes[all].current,
                                             stats.reserved_bytes[all].current};
        for (int q = 0; q < N_QUANTITIES; ++q)
            dev.offset[q].store(truth[q] - raw[q], std::memory_order_relaxed);
        dev.synced_epoch = g_epoch;
        return true;
    }
    return false;
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

// The allocator's own totals (global, not per reader or thread).
int push_sample(int device, int64_t *out) noexcept {
    try {
        if (!valid_device(device))
            return -1;
        const auto stats = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
        constexpr auto all = static_cast<std::size_t>(
            c10::CachingDeviceAllocator::StatType::AGGREGATE);
        const c10::CachingDeviceAllocator::Stat *stat[N_QUANTITIES] = {
            &stats.active_bytes[all], &stats.allocated_bytes[all],
            &stats.reserved_bytes[all]};
        for (int q = 0; q < N_QUANTITIES; ++q) {
            out[4 * q + 0] = stat[q]->allocated;
            out[4 * q + 1] = stat[q]->current;
            out[4 * q + 2] = stat[q]->freed;
            out[4 * q + 3] = stat[q]->peak;
        }
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
        std::lock_guard<std::mutex> lock(g_control);
        if (!g_attached)
            return -1;
        if (!g_armed.load(std::memory_order_relaxed)) {
            ++g_epoch;
            g_armed.store(true, std::memory_order_release);
        }
        Device &dev = g_devices[device];
        if (dev.synced_epoch != g_epoch && !sync_device(device)) {
            if (g_open_readers == 0)
                g_armed.store(false, std::memory_order_release);
            return -1;
        }
        uint64_t bits = dev.open.load(std::memory_order_relaxed);
        if (bits == ~uint64_t{0})
            return -1;  // (g_control serialises openers: no CAS loop needed)
        const int i = __builtin_ctzll(~bits);
        // Arm before publishing, so the first event seen raises from here.
        for (int q = 0; q < N_QUANTITIES; ++q)
            dev.registers[i][q].store(dev.raw[q].load(std::memory_order_relaxed),
                                      std::memory_order_relaxed);
        dev.open.fetch_or(uint64_t{1} << i, std::memory_order_acq_rel);
        ++g_open_readers;
        return i;
    } catch (...) {  // getDeviceStats on a device torch does not know
        return -1;
    }
}

void push_close_reader(int device, int reader) noexcept {
    if (!valid_device(device) || reader < 0 || reader >= kMaxReaders)
        return;
    std::lock_guard<std::mutex> lock(g_control);
    Device &dev = g_devices[device];
    const uint64_t bit = uint64_t{1} << reader;
    if ((dev.open.fetch_and(~bit, std::memory_order_acq_rel) & bit) == 0)
        return;
    if (--g_open_readers == 0)
        g_armed.store(false, std::memory_order_release);  // levels go stale
}

// This reader's raw peak since its last read, rearmed at the current level
// (an event racing with the exchange lands in this read or the next).
int64_t take_peak(std::atomic<int64_t> &reg, int64_t current) noexcept {
    const int64_t peak = reg.exchange(current, std::memory_order_relaxed);
    return peak > current ? peak : current;
}

int push_read(int device, int reader, int64_t *out) noexcept {
    if (!valid_device(device) || reader < 0 || reader >= kMaxReaders)
        return -1;
    Device &dev = g_devices[device];
    const ThreadTotals &mine = t_totals;
    for (int q = 0; q < N_QUANTITIES; ++q) {
        const int64_t raw = dev.raw[q].load(std::memory_order_relaxed);
        const int64_t offset = dev.offset[q].load(std::memory_order_relaxed);
        out[4 * q + 0] = mine.allocated[device][q];
        out[4 * q + 1] = raw + offset;
        out[4 * q + 2] = mine.freed[device][q];
        out[4 * q + 3] = take_peak(dev.registers[reader][q], raw) + offset;
    }
    return 0;
}

const char *const kFieldNames[] = {
    "active_bytes.all.allocated",    "active_bytes.all.current",
    "active_bytes.all.freed",        "active_bytes.all.peak",
    "allocated_bytes.all.allocated", "allocated_bytes.all.current",
    "allocated_bytes.all.freed",     "allocated_bytes.all.peak",
    "reserved_bytes.all.allocated",  "reserved_bytes.all.current",
    "reserved_bytes.all.freed",      "reserved_bytes.all.peak",
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

int cuda_tracked(int device, int64_t *out) noexcept {
    if (!valid_device(device))
        return -1;
    std::lock_guard<std::mutex> lock(g_control);
    Device &dev = g_devices[device];
    if (!g_armed.load(std::memory_order_relaxed) || dev.synced_epoch != g_epoch)
        return -1;
    for (int q = 0; q < N_QUANTITIES; ++q)
        out[q] = dev.raw[q].load(std::memory_order_relaxed) +
                 dev.offset[q].load(std::memory_order_relaxed);
    return 0;
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

int cuda_tracked(int device, int64_t *out) noexcept { return -1; }

}  // namespace memlab

#endif
