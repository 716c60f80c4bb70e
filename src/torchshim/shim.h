/* What the files of _torchshim share: the sources they define and one helper.
 * Nothing here crosses into the tracer; that is include/memlab/source.h. */
#ifndef MEMLAB_TORCHSHIM_SHIM_H
#define MEMLAB_TORCHSHIM_SHIM_H

#include <memlab/source.h>

#include <c10/util/Exception.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>

namespace memlab {

/* The CUDA caching allocator's DeviceStats, one field per key of
 * torch.cuda.memory_stats().  nullptr when this torch has no generic
 * c10::DeviceAllocator (torch < 2.9).  Builds its field table on first call. */
const memlab_source *cuda_source();

/* The CUDA caching allocator's active / reserved bytes, with per-reader
 * peaks raised by a trace tracker (cuda_push_source.cpp).  nullptr when the
 * shim was built without the CUDA headers. */
const memlab_source *cuda_push_source();

/* The same tracker, adding what the calling thread allocated and freed
 * (allocated_bytes.all.allocated / .freed, allocation.all.allocated / .freed).
 * Costs a stats read per ALLOC and FREE_REQUESTED while one is open. */
const memlab_source *cuda_push_counted_source();

/* Why cuda_push_source() cannot serve now (no tracker in this build, CPU
 * torch, cudaMallocAsync backend), or nullptr.  GIL held. */
const char *cuda_push_unavailable() noexcept;

/* Counts of the CPU allocator, through a wrapper installed by prepare(). */
const memlab_source *cpu_source();

/* Count the CPU storages alive before the wrapper (`storages`: n
 * c10::StorageImpl addresses the caller keeps alive) as live, their frees
 * exactly; only the first call after install does anything.  0 (with how
 * many storages and bytes were counted), 1 when already done, -1 when the
 * wrapper is not installed.  GIL held. */
int cpu_seed(const std::uintptr_t *storages, std::size_t n, int64_t *seeded,
             int64_t *bytes) noexcept;

/* cpu_seed() has run (false before the wrapper is installed). */
bool cpu_seeded() noexcept;

/* Does the CPU source count this storage's block (a c10::StorageImpl
 * address the caller keeps alive): made through the wrapper, or seeded? */
bool cpu_counts(std::uintptr_t storage) noexcept;

/* Tests only: the next CPU block counted waits `ns` between its count and its
 * push to the listener, and cpu_block_paused() is true meanwhile. */
void cpu_pause_next_block(int64_t ns) noexcept;
bool cpu_block_paused() noexcept;

/* Copy msg into err (err_len bytes, always NUL-terminated when err_len > 0). */
void copy_error(char *err, int err_len, const char *msg) noexcept;

/* A contract entry point's body (returning 0 or -1) with every C++ exception
 * turned into -1 and its message in err; `unknown` names the step for an
 * exception that is no std::exception. */
template <typename Body>
int reporting_errors(char *err, int err_len, const char *unknown, Body &&body) noexcept {
    try {
        return body();
    } catch (const c10::Error &e) {
        copy_error(err, err_len, e.what_without_backtrace());
    } catch (const std::exception &e) {
        copy_error(err, err_len, e.what());
    } catch (...) {
        copy_error(err, err_len, unknown);
    }
    return -1;
}

/* The push sources' per-reader peak registers.  raise_to: an allocation
 * raises the register to the level it made. */
inline void raise_to(std::atomic<int64_t> &peak, int64_t now) noexcept {
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen &&
           !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
}

/* A read: the peak since the reader's last read, and the register rearmed at
 * the current level.  An allocation racing with the exchange either raised
 * the register before it (counted now) or raises it after (counted next). */
inline int64_t take_peak(std::atomic<int64_t> &reg, int64_t current) noexcept {
    const int64_t peak = reg.exchange(current, std::memory_order_relaxed);
    return peak > current ? peak : current;
}

}  // namespace memlab

#endif /* MEMLAB_TORCHSHIM_SHIM_H */
