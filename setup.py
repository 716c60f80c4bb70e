"""Builds two extensions:

* pytorch_memlab._tracer    (C11, src/tracer/)     -- never depends on torch
* pytorch_memlab._torchshim (C++17, src/torchshim/) -- links libc10; built only
  when torch is importable at build time (pip install --no-build-isolation).

A build that cannot make the shim stops with a message naming the fix, unless
MEMLAB_NO_TORCHSHIM=1 asks for a tracer-only build.  The shim records the torch
version and C++ ABI it was compiled against (MEMLAB_TORCH_VERSION,
MEMLAB_TORCH_CXX11_ABI); the loader refuses it under any other torch.

MEMLAB_WERROR=1 turns warnings into errors; MEMLAB_ASAN=1 builds with
AddressSanitizer (see Makefile's asan target).
"""
import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

WERROR = os.environ.get("MEMLAB_WERROR") == "1"
ASAN = os.environ.get("MEMLAB_ASAN") == "1"


def c_flags():
    flags = ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
             "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
    if WERROR:
        flags.append("-Werror")
    if ASAN:
        flags += ["-fsanitize=address", "-fno-omit-frame-pointer", "-O1", "-g"]
    return flags


def tracer_extension():
    return Extension(
        "pytorch_memlab._tracer",
        sources=sorted(glob.glob("src/tracer/*.c")),
        include_dirs=["include", "src/tracer"],
        extra_compile_args=c_flags(),
        extra_link_args=["-fsanitize=address"] if ASAN else [],
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
        super().run()


def torchshim_extension():
    try:
        import torch  # (only to find its headers and libc10)
    except ImportError:
        return None
    torch_dir = os.path.dirname(torch.__file__)
    flags = ["-std=c++17", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    if WERROR:
        flags.append("-Werror")
    return Extension(
        "pytorch_memlab._torchshim",
        sources=sorted(glob.glob("src/torchshim/*.cpp")),
        include_dirs=["include", os.path.join(torch_dir, "include")],
        library_dirs=[os.path.join(torch_dir, "lib")],
        runtime_library_dirs=[os.path.join(torch_dir, "lib")],
        libraries=["c10"],
        extra_compile_args=flags,
        define_macros=torch_build_defines(torch),
        language="c++",
    )


extensions = [tracer_extension()]
SHIM_WANTED = os.environ.get("MEMLAB_NO_TORCHSHIM") != "1"
SHIM_MISSING = False
if SHIM_WANTED:
    shim = torchshim_extension()
    SHIM_MISSING = shim is None
    if shim is not None:
        extensions.append(shim)

setup(ext_modules=extensions, cmdclass={"build_ext": build_ext_with_shim_check})
