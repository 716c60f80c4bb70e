// The CPU source's shared state (cpu_source.cpp: the counting wrapper and the
// contract's entry points; cpu_install.cpp: installing the wrapper and
// seeding the storages made before it).
#ifndef MEMLAB_CPU_STATE_H
#define MEMLAB_CPU_STATE_H

#include "address_table.h"
#include "shim.h"

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

// Shared between this library's files only: hidden, so that calls between
// them need no PLT and the allocation path's own calls can be inlined.
#if defined(__GNUC__)
#  define MEMLAB_CPU_INTERNAL __attribute__((visibility("hidden")))
#else
#  define MEMLAB_CPU_INTERNAL
#endif

namespace memlab {
namespace cpu {

// Running totals of one quantity (bytes or blocks).  Atomics, so sample()
// and reset_peaks() never wait on the allocation path.
struct Counter {
    std::atomic<int64_t> current{0};
    std::atomic<int64_t> peak{0};
    std::atomic<int64_t> allocated{0};
    std::atomic<int64_t> freed{0};

    // Returns the level this allocation reached.
    int64_t increase(int64_t n) noexcept;

    void decrease(int64_t n) noexcept {
        current.fetch_sub(n, std::memory_order_relaxed);
        freed.fetch_add(n, std::memory_order_relaxed);
    }

    void reset_peak() noexcept {
        peak.store(current.load(std::memory_order_relaxed),
                   std::memory_order_relaxed);
    }
};

// One reader's peak register per quantity.  kMaxReaders bounds the work an
// allocation does; a reader that finds none free falls back to polling.
constexpr int kMaxReaders = 64;

struct Register {
    std::atomic<int64_t> bytes{0};
    std::atomic<int64_t> blocks{0};
};

inline int64_t Counter::increase(int64_t n) noexcept {
    const int64_t now = current.fetch_add(n, std::memory_order_relaxed) + n;
    allocated.fetch_add(n, std::memory_order_relaxed);
    raise_to(peak, now);
    return now;
}

// One live block handed out by the wrapper.
struct Block {
    std::size_t size;
    c10::DeleterFnPtr deleter;  // the base's deleter for this block
};

// Everything the wrapper needs.  Heap-allocated at install and never freed:
// tensors can be released during interpreter or static teardown and their
// deleter must still find this.
struct CpuState {
    c10::Allocator *base;           // Borrowed: c10's registry never frees it.
    c10::DeleterFnPtr base_delete;  // base->raw_deleter() at install time.
    std::mutex mutex;               // guards `live`
    memlab::AddressTable<Block> live;
    Counter bytes;
    Counter blocks;
    // Readers: bit i of `open` set means registers[i] is in use.  The
    // allocation path only walks set bits.
    std::atomic<uint64_t> open{0};
    Register registers[kMaxReaders];
    std::atomic<bool> seeded{false};  // cpu_seed() ran (it runs once)

    void raise_readers(int64_t b, int64_t n) noexcept {
        uint64_t bits = open.load(std::memory_order_acquire);
        while (bits != 0) {
            const int i = __builtin_ctzll(bits);
            bits &= bits - 1;
            raise_to(registers[i].bytes, b);
            raise_to(registers[i].blocks, n);
        }
    }
};

// The state, published once the wrapper is installed; never freed.
MEMLAB_CPU_INTERNAL extern std::atomic<CpuState *> g_state;

// The counting wrapper's pieces install() and seeding need (cpu_source.cpp).
MEMLAB_CPU_INTERNAL void tell(void *ptr, std::size_t size, int alloc) noexcept;
MEMLAB_CPU_INTERNAL void counted_delete(void *ptr);
MEMLAB_CPU_INTERNAL c10::Allocator *new_counting_allocator();

// Installs the wrapper once; later calls check it is still the allocator
// (cpu_install.cpp).
MEMLAB_CPU_INTERNAL int install(char *err, int err_len);

}  // namespace cpu
}  // namespace memlab

#endif  // MEMLAB_CPU_STATE_H
