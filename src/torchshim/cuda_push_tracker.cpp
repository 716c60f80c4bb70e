// The trace tracker of the CUDA push sources (cuda_push_source.cpp):
// attached once to the caching allocator, it raises the open readers' peak
// registers and pushes the blocks to a listener.
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
#include "compat.h"

#if MEMLAB_HAVE_DEVICE_ALLOCATOR && defined(MEMLAB_HAVE_CUDA_TRACKER)

#include "cuda_push_state.h"

#include <c10/util/Exception.h>

#include <optional>

namespace memlab::cuda_push {

Device g_devices[kMaxDevices];

std::atomic<int> g_pushing{0};
std::atomic<bool> g_armed{false};
std::mutex g_control;
int g_open_readers = 0;
bool g_attached = false;

namespace {

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

}  // namespace

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

// Attaches the tracker (once, for every device).
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

}  // namespace memlab::cuda_push

#endif  // the CUDA trace tracker
