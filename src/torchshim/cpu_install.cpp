// Installing the CPU source's counting wrapper over c10's CPU allocator, and
// seeding the storages made before it (cpu_source.cpp has the wrapper).
#include "compat.h"
#include "cpu_state.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>

#include <pthread.h>

namespace memlab {
namespace cpu {

namespace {

using memlab::raise_to;

// A fork while another thread holds the table's mutex would leave the
// child's copy locked forever (DataLoader workers fork): hold it across
// fork(), like glibc does for malloc.  Remember which state was locked, in
// case a failed install clears g_state meanwhile.
CpuState *g_fork_locked = nullptr;

void lock_for_fork() {
    CpuState *state = g_state.load(std::memory_order_acquire);
    if (state != nullptr)
        state->mutex.lock();
    g_fork_locked = state;
}

void unlock_after_fork() {
    if (g_fork_locked != nullptr)
        g_fork_locked->mutex.unlock();
    g_fork_locked = nullptr;
}

// Serialises prepare() calls; never taken on the allocation path.
std::mutex g_install_mutex;
c10::Allocator *g_wrapper = nullptr;  // Borrowed: c10 owns it once registered.

}  // namespace

int install(char *err, int err_len) {
    std::lock_guard<std::mutex> lock(g_install_mutex);
    if (g_wrapper != nullptr) {
        if (c10::GetCPUAllocator() == g_wrapper)
            return 0;
        memlab::copy_error(err, err_len,
                           "the CPU allocator was replaced after pytorch_memlab "
                           "installed its counting wrapper; CPU memory can no "
                           "longer be counted");
        return -1;
    }

    c10::Allocator *base = c10::GetCPUAllocator();
    if (base == nullptr) {
        memlab::copy_error(err, err_len, "torch has no CPU allocator registered");
        return -1;
    }
    c10::DeleterFnPtr base_delete = base->raw_deleter();
    if (base_delete == nullptr) {
        memlab::copy_error(err, err_len,
                           "the current CPU allocator has no raw deleter, so it "
                           "cannot be wrapped safely; CPU profiling is unavailable");
        return -1;
    }
    {
        // Wrapping is only transparent if the base hands out simple blocks.
        c10::DataPtr probe = base->allocate(64);
        if (probe.get() == nullptr || probe.get_context() != probe.get()) {
            memlab::copy_error(err, err_len,
                               "the current CPU allocator returns blocks whose "
                               "context is not the data pointer; wrapping it "
                               "would break oneDNN, so CPU profiling is unavailable");
            return -1;
        }
    }

    // The state must exist before the wrapper can be reached by any thread.
    auto *state = new CpuState();
    state->base = base;
    state->base_delete = base_delete;
    g_state.store(state, std::memory_order_release);
    static bool fork_hooked = false;
    if (!fork_hooked)
        fork_hooked = pthread_atfork(lock_for_fork, unlock_after_fork,
                                     unlock_after_fork) == 0;

    c10::Allocator *wrapper = new_counting_allocator();
    // Priority 1 beats c10's default (0); a tie with an earlier priority-1
    // allocator also wins, and that allocator becomes our base.
    c10::SetCPUAllocator(wrapper, /*priority=*/1);
    if (c10::GetCPUAllocator() != wrapper) {
        // Refused: the wrapper was never reachable, so nothing refers to it
        // or to `state`.  Both are leaked (a few bytes per failed call).
        g_state.store(nullptr, std::memory_order_release);
        memlab::copy_error(err, err_len,
                           "another CPU allocator is registered with a higher "
                           "priority; CPU memory cannot be counted");
        return -1;
    }
    g_wrapper = wrapper;  // c10 owns it now and never frees it
    return 0;
}

namespace {

// Counts one storage made by the base allocator before the wrapper existed:
// its block joins the side table and its DataPtr gets counted_delete, which
// finds the base's deleter there.  The caller holds a reference to it, so
// it cannot be freed meanwhile.  Returns the bytes counted, 0 if skipped.
int64_t seed_one(CpuState *state, c10::StorageImpl *impl) {
    if (impl->device_type() != c10::DeviceType::CPU)
        return 0;
    // The const accessor skips copy-on-write materialisation; the DataPtr
    // itself is not const, and only its deleter changes.
    auto &data = const_cast<c10::DataPtr &>(impl->data_ptr());
    void *ptr = data.get();
    // Only blocks the wrapper would have counted: the base's own simple
    // blocks (not pinned, shared, mapped, copy-on-write or foreign memory).
    if (ptr == nullptr || data.get_context() != ptr ||
        data.get_deleter() != state->base_delete)
        return 0;
    const std::size_t size = impl->nbytes();
    {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (!state->live.try_emplace(ptr, Block{size, state->base_delete}).second)
            return 0;
    }
    if (!data.compare_exchange_deleter(state->base_delete, &counted_delete)) {
        std::lock_guard<std::mutex> lock(state->mutex);
        (void)state->live.take(ptr, nullptr);
        return 0;
    }
    // A later resize_ allocates through the storage's own allocator.
    if (impl->allocator() == state->base && g_wrapper != nullptr)
        impl->set_allocator(g_wrapper);
    std::lock_guard<std::mutex> lock(state->mutex);
    const int64_t b = state->bytes.current.fetch_add(static_cast<int64_t>(size)) +
                      static_cast<int64_t>(size);
    const int64_t n = state->blocks.current.fetch_add(1) + 1;
    raise_to(state->bytes.peak, b);
    raise_to(state->blocks.peak, n);
    state->raise_readers(b, n);
    tell(ptr, size, 1);
    return static_cast<int64_t>(size);
}

}  // namespace

}  // namespace cpu
}  // namespace memlab

namespace memlab {

using cpu::CpuState;
using cpu::g_state;

int cpu_seed(const std::uintptr_t *storages, std::size_t n, int64_t *seeded,
             int64_t *bytes) noexcept {
    *seeded = 0;
    *bytes = 0;
    CpuState *state = g_state.load(std::memory_order_acquire);
    if (state == nullptr)
        return -1;
    if (state->seeded.exchange(true))
        return 1;
    for (std::size_t i = 0; i < n; ++i) {
        try {
            const int64_t size = cpu::seed_one(state, reinterpret_cast<c10::StorageImpl *>(storages[i]));
            if (size > 0) {
                *seeded += 1;
                *bytes += size;
            }
        } catch (...) {
            // a storage whose data or size cannot be read (symbolic sizes,
            // guarded data pointers) is left uncounted
        }
    }
    return 0;
}

bool cpu_seeded() noexcept {
    const CpuState *state = g_state.load(std::memory_order_acquire);
    return state != nullptr && state->seeded.load();
}

bool cpu_counts(std::uintptr_t storage) noexcept {
    const auto *impl = reinterpret_cast<const c10::StorageImpl *>(storage);
    return impl->device_type() == c10::DeviceType::CPU &&
           impl->data_ptr().get_deleter() == &cpu::counted_delete;
}

}  // namespace memlab
