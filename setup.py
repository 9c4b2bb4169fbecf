"""The Python package's extension, pushpull._core, for `pip install .` (pyproject.toml holds the
rest of the package). It is built from the sources, as the Makefile builds it, but without make:
python/src/core.cc and the client library's sources, with the system's compiler and pybind11,
linked with libzmq. The compiles run in parallel, one a core.

PUSHPULL_ARCH: the -march flag (default -march=x86-64-v3, the Makefile's ARCH: AVX2 CPUs; give
-march=x86-64 for older ones). PUSHPULL_BUILD_JOBS: how many compiles at once.
"""

import glob
import os

# The folders of the client library, as the Makefile lists them (CLIENT_DIRS).
CLIENT_DIRS = ("worker", "optimizers", "common")


def client_sources():
    """The Makefile's CLIENT_SRCS: the code behind include/pushpull/, none of the daemons',
    the sample apps', CUDA's or gflags'. tests/python/test_pip_install.py checks they agree."""
    return sorted(s for d in CLIENT_DIRS for s in glob.glob(d + "/*.cc"))


def version():
    with open("VERSION") as f:
        return f.read().strip()


def extension():
    import pybind11
    from setuptools import Extension

    return Extension(
        "pushpull._core",
        sources=["python/src/core.cc"] + client_sources(),
        # The headers too: setuptools rebuilds the module only when one of these is newer than it,
        # and a header's change must not leave a module built against the old one.
        depends=sorted(glob.glob("include/pushpull/*.h") + glob.glob("common/*.h") + glob.glob("worker/*.h") +
                       glob.glob("optimizers/*.h") + ["VERSION"]),
        include_dirs=["include", ".", pybind11.get_include()],
        # Only common/version.cc reads it; the Makefile gives it the same text.
        define_macros=[("PUSHPULL_VERSION_STRING", f'"{version()}"')],
        # -g0 undoes Python's own -g: a smaller module, quicker to build. -fvisibility=hidden:
        # the module exports its init function only, as pybind11 asks.
        extra_compile_args=["-std=c++17", "-O2", "-g0", os.environ.get("PUSHPULL_ARCH", "-march=x86-64-v3"),
                            "-fvisibility=hidden", "-isystem", "/usr/include/eigen3", "-Wall", "-Wextra",
                            "-Wno-unused-parameter", "-pthread"],
        libraries=["zmq"],
        extra_link_args=["-pthread"],
        language="c++",
    )


def main():
    from pybind11.setup_helpers import ParallelCompile
    from setuptools import setup
    from setuptools.command.egg_info import egg_info

    class EggInfo(egg_info):
        # Its directory must exist: made here, where it is known (a config file may move it).
        def finalize_options(self):
            if self.egg_base:
                os.makedirs(self.egg_base, exist_ok=True)
            super().finalize_options()

    ParallelCompile("PUSHPULL_BUILD_JOBS", default=len(os.sched_getaffinity(0))).install()
    # pip runs this in the tree: setuptools' files go under build/pip (in the Makefile's build/,
    # which `make clean` removes), not beside the sources. A config file may place them elsewhere
    # (DIST_EXTRA_CONFIG: tests/python/test_pip_install.py).
    setup(version=version(),
          package_dir={"": "python"},
          packages=["pushpull"],
          package_data={"pushpull": ["*.pyi", "py.typed"]},
          ext_modules=[extension()],
          cmdclass={"egg_info": EggInfo},
          options={"build": {"build_base": "build/pip"}, "egg_info": {"egg_base": "build/pip"}})


if __name__ == "__main__":
    main()
