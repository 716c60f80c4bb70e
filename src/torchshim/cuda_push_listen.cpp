// The per-block push of the CUDA push sources (source.h's listen, for the
// breakdown of the peak); the tracker's part is Device::push
// (cuda_push_state.h).
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

#if MEMLAB_HAVE_DEVICE_ALLOCATOR && defined(MEMLAB_HAVE_CUDA_TRACKER)

#include "cuda_push_state.h"

namespace memlab::cuda_push {

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

}  // namespace memlab::cuda_push

#endif  // the CUDA trace tracker
