// The per-thread counts of the counted CUDA push source
// (cuda_push_state.h says how the allocator's cumulative figures are split
// between threads): the calling thread's counted readers, the tracker's
// part at ALLOC and FREE_REQUESTED, and a counted reader's read.
#include "compat.h"

#if MEMLAB_HAVE_DEVICE_ALLOCATOR && defined(MEMLAB_HAVE_CUDA_TRACKER)

#include "cuda_push_state.h"

namespace memlab::cuda_push {

namespace {

// A counted reader of the calling thread, per device; validated by the
// reader's generation, since another thread may reuse the register.
struct Mine {
    int reader = kUnprofiled;
    uint64_t gen = 0;
};
thread_local Mine t_mine[kMaxDevices];

}  // namespace

void count_for_this_thread(int device, int reader, uint64_t gen) noexcept {
    t_mine[device] = Mine{reader, gen};
}

// The calling thread's counted reader on this device, or kUnprofiled.
int Device::me(int device) const noexcept {
    const Mine m = t_mine[device];
    if (m.reader < 0 ||
        (counted.load(std::memory_order_acquire) & (uint64_t{1} << m.reader)) == 0 ||
        gens[m.reader].load(std::memory_order_acquire) != m.gen)
        return kUnprofiled;
    return m.reader;
}

// At an ALLOC callback: `allocated` is the cumulative figure before it.
void Device::count_alloc(int device, int64_t allocated) noexcept {
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
void Device::count_free(int device, int64_t freed) noexcept {
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

namespace {

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

}  // namespace

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

}  // namespace memlab::cuda_push

#endif  // the CUDA trace tracker
