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
// allocation.all.allocated / .freed): see "Per-thread counts" in
// cuda_push_state.h.  Other
// columns are read from the polled CUDA source (cuda_source.cpp); Python
// picks the source (pytorch_memlab/sources/choice.py, choose).
//
// The parts: the shared state (cuda_push_state.h), the tracker
// (cuda_push_tracker.cpp), the readers (cuda_push_readers.cpp), the
// per-thread counts (cuda_push_counting.cpp) and the per-block push
// (cuda_push_listen.cpp); here, the fields and the two source tables.
#include "compat.h"
#include "shim.h"

#if MEMLAB_HAVE_DEVICE_ALLOCATOR && defined(MEMLAB_HAVE_CUDA_TRACKER)

#include "cuda_push_state.h"

#include <c10/util/Exception.h>

namespace {

using namespace memlab::cuda_push;

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
        return cuda_push::unavailable();
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
