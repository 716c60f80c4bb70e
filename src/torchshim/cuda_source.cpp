// The CUDA source: reads the caching allocator's DeviceStats through the
// generic c10::DeviceAllocator interface, so the shim links libc10 only and
// needs no CUDA headers.  Fields are every key torch.cuda.memory_stats()
// reports, in its (sorted) order.
#include "compat.h"
#include "shim.h"

#if MEMLAB_HAVE_DEVICE_ALLOCATOR

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using c10::CachingDeviceAllocator::DeviceStats;

// ---------------------------------------------------------------------------
// Field table: name -> byte offset of an int64_t inside DeviceStats.
//
// DeviceStats gains members between torch releases (num_oom_rejections in
// 2.12+), so each known member is detected at compile time and the table is
// built from whatever this torch has.  sample() then copies int64s at fixed
// offsets: no per-field branching on the hot path.

// Each member with the unit of its figures (DeviceStats states units only in
// its member names, so they are written down here, once).
#define MEMLAB_DEVICE_STATS_MEMBERS(X)                                      \
    X(allocation, MEMLAB_COUNT)                                             \
    X(segment, MEMLAB_COUNT)                                                \
    X(active, MEMLAB_COUNT)                                                 \
    X(inactive_split, MEMLAB_COUNT)                                         \
    X(allocated_bytes, MEMLAB_BYTES)                                        \
    X(reserved_bytes, MEMLAB_BYTES)                                         \
    X(active_bytes, MEMLAB_BYTES)                                           \
    X(inactive_split_bytes, MEMLAB_BYTES)                                   \
    X(requested_bytes, MEMLAB_BYTES)                                        \
    X(num_alloc_retries, MEMLAB_COUNT)                                      \
    X(num_ooms, MEMLAB_COUNT)                                               \
    X(oversize_allocations, MEMLAB_COUNT)                                   \
    X(oversize_segments, MEMLAB_COUNT)                                      \
    X(num_sync_all_streams, MEMLAB_COUNT)                                   \
    X(num_device_alloc, MEMLAB_COUNT)                                       \
    X(num_device_free, MEMLAB_COUNT)                                        \
    X(num_oom_rejections, MEMLAB_COUNT)                                     \
    X(max_split_size, MEMLAB_BYTES)

// has_<member><S>::value: does S have a data member of that name?
#define MEMLAB_DETECT_MEMBER(member, unit)                                     \
    template <typename S, typename = void>                                     \
    struct has_##member : std::false_type {};                                  \
    template <typename S>                                                      \
    struct has_##member<S, std::void_t<decltype(&S::member)>>                  \
        : std::true_type {};
MEMLAB_DEVICE_STATS_MEMBERS(MEMLAB_DETECT_MEMBER)
#undef MEMLAB_DETECT_MEMBER

template <typename T>
struct is_std_array : std::false_type {};
template <typename T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};

// One column of the source.
struct Field {
    std::string name;
    std::ptrdiff_t offset;  // of an int64_t, from the start of DeviceStats
    int kind;               // memlab_field_kind
    int unit;               // memlab_field_unit
};

// Walks one DeviceStats instance and records where every int64_t lives,
// naming it the way torch.cuda.memory_stats() flattens it.
class FieldCollector {
  public:
    explicit FieldCollector(const DeviceStats &stats)
        : base_(reinterpret_cast<const char *>(&stats)) {}

    // A member is an int64_t scalar, a Stat (current/peak/allocated/freed)
    // or a StatArray (one Stat per pool).  Anything else fails to compile,
    // which is what we want if DeviceStats changes shape.  A scalar is kept
    // as read (num_ooms and the like included, as torch reports them).
    template <typename T>
    void add(const std::string &name, const T &value, int unit, int kind = MEMLAB_LEVEL) {
        if constexpr (std::is_same_v<T, int64_t>) {
            fields_.push_back(
                {name, reinterpret_cast<const char *>(&value) - base_, kind, unit});
        } else if constexpr (is_std_array<T>::value) {
            using c10::CachingDeviceAllocator::StatType;
            static_assert(std::tuple_size<T>::value ==
                              static_cast<std::size_t>(StatType::NUM_TYPES),
                          "StatArray has an unknown pool");
            add(name + ".all", value[static_cast<std::size_t>(StatType::AGGREGATE)], unit);
            add(name + ".small_pool", value[static_cast<std::size_t>(StatType::SMALL_POOL)], unit);
            add(name + ".large_pool", value[static_cast<std::size_t>(StatType::LARGE_POOL)], unit);
        } else {
            add(name + ".current", value.current, unit, MEMLAB_LEVEL);
            add(name + ".peak", value.peak, unit, MEMLAB_PEAK);
            add(name + ".allocated", value.allocated, unit, MEMLAB_COUNTER);
            add(name + ".freed", value.freed, unit, MEMLAB_COUNTER);
        }
    }

    std::vector<Field> take() { return std::move(fields_); }

  private:
    const char *base_;
    std::vector<Field> fields_;
};

// A template only so that `if constexpr` may name members this torch lacks.
template <typename S>
std::vector<Field> collect_fields() {
    S stats{};
    FieldCollector collector(stats);
#define MEMLAB_COLLECT(member, unit)                                           \
    if constexpr (has_##member<S>::value)                                      \
        collector.add(#member, stats.member, unit);
    MEMLAB_DEVICE_STATS_MEMBERS(MEMLAB_COLLECT)
#undef MEMLAB_COLLECT
    std::vector<Field> fields = collector.take();
    // torch.cuda.memory_stats() sorts its keys; keep the same order.
    std::sort(fields.begin(), fields.end(),
              [](const Field &a, const Field &b) { return a.name < b.name; });
    return fields;
}

// Everything the source struct points at.  Built once, never freed: the
// capsule's pointers must stay valid for the life of the process.
struct CudaTable {
    std::vector<std::string> names;        // Owned storage of the names.
    std::vector<memlab_field> fields;      // Names borrowed from `names`.
    std::vector<std::ptrdiff_t> offsets;   // Parallel to `names`.
    memlab_source source;
};

// Set once by memlab::cuda_source() before any capsule exists, so the hot
// path reads it without synchronisation.
const CudaTable *g_table = nullptr;

// ---------------------------------------------------------------------------
// Allocator lookup.  dynamic_cast across shared libraries costs tens of ns,
// so the result is cached and re-derived only if the registered CUDA
// allocator pointer changes (it does not after CUDA init in practice).

struct Resolved {
    c10::Allocator *raw;         // Borrowed: c10's registry keeps it alive.
    c10::DeviceAllocator *device;  // Borrowed: same object as `raw`.
};

// Each published Resolved is immutable and leaked: a concurrent reader may
// still hold the previous one.
std::atomic<const Resolved *> g_resolved{nullptr};

// nullptr when CUDA is absent or its allocator is not a DeviceAllocator.
c10::DeviceAllocator *device_allocator() {
    c10::Allocator *raw = c10::GetAllocator(c10::kCUDA);
    if (raw == nullptr)
        return nullptr;
    const Resolved *cached = g_resolved.load(std::memory_order_acquire);
    if (cached != nullptr && cached->raw == raw)
        return cached->device;
    auto *fresh = new Resolved{raw, dynamic_cast<c10::DeviceAllocator *>(raw)};
    g_resolved.store(fresh, std::memory_order_release);
    return fresh->device;
}

bool valid_index(int device) {
    return device >= 0 &&
           device <= std::numeric_limits<c10::DeviceIndex>::max();
}

// ---------------------------------------------------------------------------
// The three entry points of the contract.

int cuda_prepare(int device, char *err, int err_len) noexcept {
    const char *unknown = "unknown C++ exception reading CUDA stats";
    return memlab::reporting_errors(err, err_len, unknown, [&] {
        if (c10::GetAllocator(c10::kCUDA) == nullptr) {
            memlab::copy_error(err, err_len,
                               "CUDA is not available: this torch has no CUDA "
                               "allocator (CPU-only build?)");
            return -1;
        }
        c10::DeviceAllocator *alloc = device_allocator();
        if (alloc == nullptr) {
            memlab::copy_error(err, err_len,
                               "the CUDA allocator is not a c10::DeviceAllocator "
                               "(custom pluggable allocator?); its statistics "
                               "cannot be read");
            return -1;
        }
        if (!alloc->initialized()) {
            memlab::copy_error(err, err_len,
                               "CUDA is not initialised yet: call "
                               "torch.cuda.init() (or create a CUDA tensor) "
                               "before profiling");
            return -1;
        }
        if (!valid_index(device)) {
            memlab::copy_error(err, err_len, "CUDA device index out of range");
            return -1;
        }
        // Throws (c10::Error) for a device index the allocator does not know.
        (void)alloc->getDeviceStats(static_cast<c10::DeviceIndex>(device));
        return 0;
    });
}

int cuda_sample(int device, int64_t *out) noexcept {
    try {
        c10::DeviceAllocator *alloc = device_allocator();
        if (alloc == nullptr || !valid_index(device))
            return -1;
        const DeviceStats stats =
            alloc->getDeviceStats(static_cast<c10::DeviceIndex>(device));
        const char *base = reinterpret_cast<const char *>(&stats);
        const std::size_t n = g_table->offsets.size();
        const std::ptrdiff_t *offsets = g_table->offsets.data();
        for (std::size_t i = 0; i < n; ++i)
            std::memcpy(&out[i], base + offsets[i], sizeof(int64_t));
        return 0;
    } catch (...) {
        // Uninitialised CUDA, bad device, allocator without stats: the
        // tracer counts the failure; nothing may escape into C.
        return -1;
    }
}

int cuda_reset_peaks(int device) noexcept {
    try {
        c10::DeviceAllocator *alloc = device_allocator();
        if (alloc == nullptr || !valid_index(device))
            return -1;
        alloc->resetPeakStats(static_cast<c10::DeviceIndex>(device));
        return 0;
    } catch (...) {
        return -1;
    }
}

const CudaTable *build_table() {
    auto *table = new CudaTable();
    const std::vector<Field> collected = collect_fields<DeviceStats>();
    for (const Field &f : collected) {
        table->names.push_back(f.name);
        table->offsets.push_back(f.offset);
    }
    // `names` no longer grows, so its c_str()s stay put.
    for (std::size_t i = 0; i < collected.size(); ++i)
        table->fields.push_back({table->names[i].c_str(), collected[i].kind, collected[i].unit});
    table->source.abi_version = MEMLAB_SOURCE_ABI_VERSION;
    table->source.name = "cuda";
    table->source.n_fields = static_cast<int>(table->names.size());
    table->source.fields = table->fields.data();
    table->source.prepare = cuda_prepare;
    table->source.sample = cuda_sample;
    table->source.reset_peaks = cuda_reset_peaks;
    table->source.open_reader = nullptr;   // polled: no push path yet
    table->source.close_reader = nullptr;
    table->source.read = nullptr;
    table->source.listen = nullptr;   // polled: no block is reported
    return table;
}

}  // namespace

namespace memlab {

const memlab_source *cuda_source() {
    // Magic static: built once, thread-safe; g_table is then fixed.
    static const CudaTable *table = (g_table = build_table());
    return &table->source;
}

}  // namespace memlab

#else  // !MEMLAB_HAVE_DEVICE_ALLOCATOR

namespace memlab {

const memlab_source *cuda_source() { return nullptr; }

}  // namespace memlab

#endif
