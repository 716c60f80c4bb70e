// A table of values by block address, for the CPU wrapper's live blocks.
//
// Open addressing with linear probing and backward-shift deletion: no node
// is allocated or freed per entry (std::unordered_map does both, and this
// runs for every CPU tensor the program makes), and the hash is a multiply
// and a shift, not a division.  Not thread-safe: the caller holds a lock.
// It grows at half full and never shrinks (as a map's buckets do not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace memlab {

template <class V>
class AddressTable {
  public:
    // The value at `ptr`, or null.
    V *find(const void *ptr) noexcept {
        if (slots_.empty())
            return nullptr;
        for (std::size_t i = home(ptr);; i = next(i)) {
            Slot &s = slots_[i];
            if (s.ptr == ptr)
                return &s.value;
            if (s.ptr == nullptr)
                return nullptr;
        }
    }

    // Adds ptr -> value unless ptr is there: (its value, whether added).
    // Throws std::bad_alloc when growing fails (nothing changed then).
    std::pair<V *, bool> try_emplace(const void *ptr, const V &value) {
        if ((used_ + 1) * 2 > slots_.size())
            grow();
        for (std::size_t i = home(ptr);; i = next(i)) {
            Slot &s = slots_[i];
            if (s.ptr == ptr)
                return {&s.value, false};
            if (s.ptr == nullptr) {
                s.ptr = ptr;
                s.value = value;
                ++used_;
                return {&s.value, true};
            }
        }
    }

    // Removes ptr; its value into *out when given.  Whether it was there.
    bool take(const void *ptr, V *out) noexcept {
        if (slots_.empty())
            return false;
        std::size_t hole = home(ptr);
        for (;; hole = next(hole)) {
            if (slots_[hole].ptr == ptr)
                break;
            if (slots_[hole].ptr == nullptr)
                return false;
        }
        if (out != nullptr)
            *out = slots_[hole].value;
        // Shift back each later entry of the run that may sit in the hole:
        // one whose home is not cyclically within (hole, j].
        for (std::size_t j = next(hole); slots_[j].ptr != nullptr; j = next(j)) {
            const std::size_t k = home(slots_[j].ptr);
            const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
            if (!stays) {
                slots_[hole] = slots_[j];
                hole = j;
            }
        }
        slots_[hole].ptr = nullptr;
        --used_;
        return true;
    }

    std::size_t size() const noexcept { return used_; }

  private:
    struct Slot {
        const void *ptr = nullptr;  // null: empty
        V value{};
    };

    std::size_t next(std::size_t i) const noexcept { return (i + 1) & (slots_.size() - 1); }

    // Fibonacci hashing of the address (blocks are aligned: the low bits
    // carry nothing, the multiply spreads the rest into the top bits).
    std::size_t home(const void *ptr) const noexcept {
        const uint64_t h = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)) *
                           UINT64_C(0x9E3779B97F4A7C15);
        return static_cast<std::size_t>(h >> shift_);
    }

    void grow() {
        std::vector<Slot> old(slots_.empty() ? kMinSlots * 2 : slots_.size() * 2);
        old.swap(slots_);  // slots_ is the new, empty table; old the entries
        shift_ = 64 - log2(slots_.size());
        used_ = 0;
        for (const Slot &s : old)
            if (s.ptr != nullptr)
                (void)try_emplace(s.ptr, s.value);
    }

    static unsigned log2(std::size_t n) noexcept {
        unsigned bits = 0;
        while ((std::size_t{1} << bits) < n)
            ++bits;
        return bits;
    }

    static constexpr std::size_t kMinSlots = 512;
    std::vector<Slot> slots_;
    std::size_t used_ = 0;
    unsigned shift_ = 64;
};

}  // namespace memlab
