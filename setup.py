"""Builds two extensions:

* pytorch_memlab._tracer    (C11, src/tracer/)     -- never depends on torch
* pytorch_memlab._torchshim (C++17, src/torchshim/) -- links libc10; built only
  when torch is importable at build time (pip install --no-build-isolation).

A build that cannot make the shim stops with a message naming the fix, unless
MEMLAB_NO_TORCHSHIM=1 asks for a tracer-only build.  The shim records the torch
version and C++ ABI it was compiled against (MEMLAB_TORCH_VERSION,
MEMLAB_TORCH_CXX11_ABI); the loader refuses it under any other torch.

MEMLAB_WERROR=1 turns warnings into errors; MEMLAB_ASAN=1 builds with
AddressSanitizer (see Makefile's asan target); MEMLAB_UBSAN=1 adds
UndefinedBehaviorSanitizer (run with UBSAN_OPTIONS=halt_on_error=1 to stop at
its first report).
"""
import glob
import os
import re

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

WERROR = os.environ.get("MEMLAB_WERROR") == "1"
ASAN = os.environ.get("MEMLAB_ASAN") == "1"
UBSAN = os.environ.get("MEMLAB_UBSAN") == "1"


def c_flags():
    flags = ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
             "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
    if WERROR:
        flags.append("-Werror")
    if ASAN:
        flags += ["-fsanitize=address", "-fno-omit-frame-pointer", "-O1", "-g"]
    if UBSAN:
        # Python's CFLAGS (-fno-strict-overflow or -fwrapv) make signed
        # overflow wrap, so the sanitizer would not see it: -fno-wrapv.
        flags += ["-fsanitize=undefined", "-fno-wrapv", "-fno-omit-frame-pointer", "-g"]
    return flags


def sanitizer_link_flags():
    return (["-fsanitize=address"] if ASAN else []) + (["-fsanitize=undefined"] if UBSAN else [])


def headers(*folders):
    """An extension's headers: a change to one rebuilds it (setuptools looks
    at sources only unless told)."""
    return sorted(h for folder in folders for h in glob.glob(os.path.join(folder, "*.h")))


def testsource_extension():
    return Extension(
        TEST_SOURCE,
        sources=["src/testsource/testsource.c"],
        depends=headers("include/memlab", "src/tracer"),
        include_dirs=["include", "src/tracer"],
        extra_compile_args=c_flags(),
        extra_link_args=sanitizer_link_flags(),
    )


TEST_SOURCE = "pytorch_memlab._testsource"


def tracer_extension():
    return Extension(
        "pytorch_memlab._tracer",
        sources=sorted(glob.glob("src/tracer/*.c")),
        depends=headers("include/memlab", "src/tracer"),
        include_dirs=["include", "src/tracer"],
        extra_compile_args=c_flags(),
        extra_link_args=sanitizer_link_flags(),
    )


def torch_build_defines(torch):
    """The torch this shim is compiled against, for the loader to compare."""
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return [("MEMLAB_TORCH_VERSION", '"%s"' % torch.__version__),
            ("MEMLAB_TORCH_CXX11_ABI", str(abi))]


NO_SHIM_MESSAGE = (
    "pytorch_memlab: torch is not importable while building, so the torch shim "
    "(pytorch_memlab._torchshim, needed for CPU profiling and fast CUDA profiling) "
    "cannot be compiled.  pip builds in an isolated environment without your torch "
    "unless told not to: install torch, setuptools and wheel first, then run "
    "`python -m pip install --no-build-isolation .` (add -e for a checkout you edit).  "
    "For a tracer-only build on purpose, set MEMLAB_NO_TORCHSHIM=1.")


class build_ext_with_shim_check(build_ext):
    """Fails the build, loudly, when the shim is wanted but cannot be built.

    pip shows the output of a successful build only with -v, so a warning
    would go unseen; the check runs here, not at import of setup.py, so that
    `python -m build --sdist` (isolated, no torch) still works.
    """

    def run(self):
        if SHIM_WANTED and SHIM_MISSING:
            raise SystemExit(NO_SHIM_MESSAGE)
        # The test source only where the tests run: in place, or when asked.
        if not (self.inplace or getattr(self, "editable_mode", False)
                or os.environ.get("MEMLAB_TEST_SOURCE") == "1"):
            self.extensions = [e for e in self.extensions if e.name != TEST_SOURCE]
        super().run()


def cuda_tracker_config(torch):
    """(include dirs for the CUDA runtime headers, None) when the shim can
    attach the CUDA allocator's trace tracker, else (None, why not).  The
    tracker's header (c10/cuda/CUDACachingAllocator.h) includes
    cuda_runtime.h, which needs cuda_runtime_api.h and crt/host_config.h;
    no CUDA function is called, so the declarations of any CUDA 12/13
    toolkit do.  A CPU torch has no CUDA allocator to track."""
    if getattr(torch.version, "cuda", None) is None:
        return None, "this torch has no CUDA"
    torch_dir = os.path.dirname(torch.__file__)
    if not os.path.exists(os.path.join(torch_dir, "include", "c10", "cuda",
                                       "CUDACachingAllocator.h")):
        return None, "torch ships no c10/cuda headers"
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    if not any(homes):
        try:
            from torch.utils.cpp_extension import CUDA_HOME
            homes.append(CUDA_HOME)
        except Exception:  # never fatal: the wheels below may still do
            pass
    homes.append("/usr/local/cuda")
    candidates = [os.path.join(home, "include") for home in homes if home]
    # The NVIDIA wheels next to a CUDA torch: the runtime (nvidia/cu13/include
    # for CUDA 13, nvidia/cuda_runtime/include before) lacks crt/, which the
    # nvcc wheel and triton's bundled CUDA headers have.
    site = os.path.dirname(torch_dir)
    candidates += sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "include")))
    candidates += [os.path.join(site, "nvidia", name, "include")
                   for name in ("cuda_runtime", "cuda_nvcc")]
    candidates.append(os.path.join(site, "triton", "backends", "nvidia", "include"))

    def holding(header):
        return [c for c in candidates if os.path.exists(os.path.join(c, header))]
    api, crt = holding("cuda_runtime_api.h"), holding(os.path.join("crt", "host_config.h"))
    complete = [c for c in api if c in crt]
    if complete:
        return complete[:1], None
    if api and crt:
        return [api[0], crt[0]], None
    return None, ("the CUDA runtime headers (cuda_runtime_api.h, crt/host_config.h) "
                  "were not found; set CUDA_HOME")


def torchshim_extension():
    try:
        import torch  # (only to find its headers and libc10)
    except ImportError:
        return None
    torch_dir = os.path.dirname(torch.__file__)
    # torch's headers need C++20 from 2.10 on (intrusive_ptr's operator<=>,
    # reached through the CUDA allocator header).
    version = tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2])
    std = "-std=c++20" if version >= (2, 10) else "-std=c++17"
    flags = [std, "-Wall", "-Wextra", "-Wno-unused-parameter"]
    if WERROR:
        flags.append("-Werror")
    include_dirs = ["include", os.path.join(torch_dir, "include")]
    libraries = ["c10"]
    defines = torch_build_defines(torch)
    cuda_includes, why_not = cuda_tracker_config(torch)
    if cuda_includes is not None:
        include_dirs += cuda_includes
        libraries.append("c10_cuda")
        defines.append(("MEMLAB_HAVE_CUDA_TRACKER", "1"))
    else:
        # _torchshim.CUDA_TRACKER_MISSING reports it through info().
        defines.append(("MEMLAB_CUDA_TRACKER_MISSING", '"%s"' % why_not))
    return Extension(
        "pytorch_memlab._torchshim",
        sources=sorted(glob.glob("src/torchshim/*.cpp")),
        depends=headers("include/memlab", "src/torchshim"),
        include_dirs=include_dirs,
        library_dirs=[os.path.join(torch_dir, "lib")],
        runtime_library_dirs=[os.path.join(torch_dir, "lib")],
        libraries=libraries,
        extra_compile_args=flags,
        define_macros=defines,
        language="c++",
    )


extensions = [tracer_extension(), testsource_extension()]
SHIM_WANTED = os.environ.get("MEMLAB_NO_TORCHSHIM") != "1"
SHIM_MISSING = False
if SHIM_WANTED:
    shim = torchshim_extension()
    SHIM_MISSING = shim is None
    if shim is not None:
        extensions.append(shim)

setup(ext_modules=extensions, cmdclass={"build_ext": build_ext_with_shim_check})
