/* Version shims for the torch shim, all in one place.  The shim is built
 * against the torch it runs with (pip install --no-build-isolation), so the
 * choices below are made at compile time from that torch's headers. */
#ifndef MEMLAB_TORCHSHIM_COMPAT_H
#define MEMLAB_TORCHSHIM_COMPAT_H

#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#elif __has_include(<torch/csrc/api/include/torch/version.h>)
#include <torch/csrc/api/include/torch/version.h>
#endif

#ifndef TORCH_VERSION_MAJOR
/* No version header: assume the oldest torch we support. */
#define TORCH_VERSION_MAJOR 2
#define TORCH_VERSION_MINOR 0
#endif

#define MEMLAB_TORCH_AT_LEAST(major, minor)                                    \
    (TORCH_VERSION_MAJOR > (major) ||                                          \
     (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

/* c10::DeviceAllocator and c10::getDeviceAllocator() (the generic way to read
 * CUDA allocator stats from c10 alone) exist from torch 2.9.  Without them
 * the shim exports no cuda_source and Python falls back to
 * torch._C._cuda_memoryStats. */
#if MEMLAB_TORCH_AT_LEAST(2, 9) &&                                             \
    __has_include(<c10/core/CachingDeviceAllocator.h>)
#define MEMLAB_HAVE_DEVICE_ALLOCATOR 1
#else
#define MEMLAB_HAVE_DEVICE_ALLOCATOR 0
#endif

/* Allocator::allocate lost its const qualifier in torch 2.3 (pytorch#120969),
 * the release that also made copy_data a required override. */
#if MEMLAB_TORCH_AT_LEAST(2, 3)
#define MEMLAB_ALLOCATE_CONST
#define MEMLAB_HAVE_COPY_DATA 1
#else
#define MEMLAB_ALLOCATE_CONST const
#define MEMLAB_HAVE_COPY_DATA 0
#endif

#endif /* MEMLAB_TORCHSHIM_COMPAT_H */
