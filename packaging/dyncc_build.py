"""PEP 517 build backend of `pip install .`: maturin, after building the plugin.

maturin builds one cargo package into a wheel: here the `dyncc` command
(`bindings = "bin"`, pyproject.toml says why maturin). The NCCL plugin is
another package (runtime/, a cdylib), so before handing over to maturin this
wrapper builds it the way `make plugin-portable` does (cargo-zigbuild, glibc
2.17 symbols, stripped) and stages it as wheel data (`[tool.maturin] data`):

    data/lib/libnccl-tuner-dyncc.so     -> <env>/lib/  beside <env>/bin/dyncc
    data/lib/libnccl-profiler-dyncc.so     (packaging/profiler-stub.sh: the
                                            tuner's file under NCCL's
                                            profiler name, one object)
    data/include/dyncc.h                -> <env>/include/

the PREFIX/bin + PREFIX/lib + PREFIX/include layout of `make install`, so
`dyncc plugin-path` finds the library the same way after either. The command
itself is linked by zig against glibc 2.17 too (maturin `--zig`), so the
wheel is a manylinux2014 wheel that installs on old clusters as it is.

Every other hook is maturin's own.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

import maturin
from maturin import (  # noqa: F401  (re-exported PEP 517 hooks)
    build_sdist,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11: maturin depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
# The oldest glibc the shipped files may need (manylinux2014); the Makefile's
# PORTABLE_GLIBC.
GLIBC = "2.17"
# What maturin is asked for when the user passes no build-args of their own.
DEFAULT_MATURIN_ARGS = "--zig --compatibility manylinux2014"


def _say(msg: str) -> None:
    print(f"dyncc build: {msg}", flush=True)


def _run(cmd: list[str], **kw: Any) -> None:
    _say("running " + " ".join(cmd))
    subprocess.run(cmd, check=True, cwd=ROOT, **kw)


def _zig_env() -> None:
    """Lets cargo-zigbuild and maturin find the zig of the `ziglang` wheel
    (a build requirement) through this interpreter, which is the one pip
    installed the requirements for; `python3` on PATH may not be."""
    os.environ.setdefault("CARGO_ZIGBUILD_PYTHON_PATH", sys.executable)


def _triple() -> str:
    if sys.platform != "linux":
        raise SystemExit(
            "dyncc build: NCCL and this plugin are Linux-only; build on Linux "
            f"(this is {sys.platform})"
        )
    arch = platform.machine()
    if arch not in ("x86_64", "aarch64"):
        raise SystemExit(f"dyncc build: no glibc {GLIBC} target for machine {arch}")
    return f"{arch}-unknown-linux-gnu"


def _data_dir() -> Path:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return ROOT / tomllib.load(f)["tool"]["maturin"]["data"]


def _target_dir() -> Path:
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        check=True,
        cwd=ROOT,
        stdout=subprocess.PIPE,
    ).stdout
    return Path(json.loads(out)["target_directory"])


def stage_plugin() -> Path:
    """Builds the portable plugin and writes the wheel's data directory."""
    _zig_env()
    triple = _triple()
    zigbuild = shutil.which("cargo-zigbuild")
    if zigbuild is None:
        raise SystemExit(
            "dyncc build: cargo-zigbuild is not on PATH (pip installs it as a build "
            "requirement; with --no-build-isolation: pip install cargo-zigbuild ziglang)"
        )
    # `rustc` rather than `zigbuild`: `-C strip=symbols` applies to the
    # plugin alone (the release profile's line tables are for benchmarks,
    # not the shipped file), so its dependencies are the ones `make
    # plugin-portable` built, and the other way round.
    _run(
        [
            zigbuild,
            "rustc",
            "--release",
            "-p",
            "dyncc-runtime",
            "--lib",
            "--target",
            f"{triple}.{GLIBC}",
            "--",
            "-C",
            "strip=symbols",
        ]
    )
    built = _target_dir() / triple / "release" / "libdyncc_runtime.so"
    data = _data_dir()
    if data.exists():
        shutil.rmtree(data)
    lib = data / "data" / "lib"
    lib.mkdir(parents=True)
    shutil.copyfile(built, lib / "libnccl-tuner-dyncc.so")
    (lib / "libnccl-tuner-dyncc.so").chmod(0o755)
    zig = [sys.executable, "-m", "ziglang"]
    zig_arch = triple.split("-")[0]
    _run(
        [
            "sh",
            str(ROOT / "packaging" / "profiler-stub.sh"),
            str(lib),
            *zig,
            "cc",
            "-target",
            f"{zig_arch}-linux-gnu.{GLIBC}",
        ]
    )
    inc = data / "data" / "include"
    inc.mkdir(parents=True)
    shutil.copy2(ROOT / "include" / "dyncc.h", inc / "dyncc.h")
    return data


def _maturin_settings(config_settings: Mapping[str, Any] | None) -> dict[str, Any]:
    settings = dict(config_settings or {})
    if (
        "build-args" not in settings
        and "maturin.build-args" not in settings
        and not os.environ.get("MATURIN_PEP517_ARGS")
    ):
        settings["build-args"] = DEFAULT_MATURIN_ARGS
    return settings


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    # maturin refuses a missing data directory even for the metadata, which
    # does not depend on it; build_wheel fills it.
    _data_dir().mkdir(parents=True, exist_ok=True)
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    stage_plugin()
    return maturin.build_wheel(
        wheel_directory, _maturin_settings(config_settings), metadata_directory
    )


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    stage_plugin()
    return maturin.build_editable(
        wheel_directory, _maturin_settings(config_settings), metadata_directory
    )
