"""Builds two extensions:

* pytorch_memlab._tracer    (C11, src/tracer/)     -- never depends on torch
* pytorch_memlab._torchshim (C++17, src/torchshim/) -- links libc10; built only
  when torch is importable at build time (pip install --no-build-isolation).

MEMLAB_WERROR=1 turns warnings into errors; MEMLAB_ASAN=1 builds with
AddressSanitizer (see Makefile's asan target).
"""
import glob
import os
import sys

from setuptools import Extension, setup

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


def torchshim_extension():
    try:
        import torch  # noqa: F401  (only to find its headers and libc10)
    except ImportError:
        sys.stderr.write("pytorch_memlab: torch not importable at build time; "
                         "building without _torchshim (slow fallback source)\n")
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
        language="c++",
    )


extensions = [tracer_extension()]
if os.environ.get("MEMLAB_NO_TORCHSHIM") != "1" and glob.glob("src/torchshim/*.cpp"):
    shim = torchshim_extension()
    if shim is not None:
        extensions.append(shim)

setup(ext_modules=extensions)
