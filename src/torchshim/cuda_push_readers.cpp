// The readers of the CUDA push sources (cuda_push_source.cpp): each open
// reader has its peak registers, which the tracker raises
// (cuda_push_tracker.cpp) and a read takes.
#include "compat.h"

#if MEMLAB_HAVE_DEVICE_ALLOCATOR && defined(MEMLAB_HAVE_CUDA_TRACKER)

#include "cuda_push_state.h"

namespace memlab::cuda_push {

// This source never resets the allocator's peaks: it has readers instead.
int push_reset_peaks(int device) noexcept { return -1; }

namespace {

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
            count_for_this_thread(device, i, gen);
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

}  // namespace

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

}  // namespace memlab::cuda_push

#endif  // the CUDA trace tracker
