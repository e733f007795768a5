"""A description of the machine a benchmark ran on (recorded next to every figure)."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

from prepkit.parallel import available_cores

LIBRARIES = ("numpy", "numba", "numba-cuda", "pillow", "zarr", "nvidia-nvimgcodec-cu12", "nvidia-nvimgcodec-cu13",
             "qoi", "torch", "pyspng", "imagecodecs", "scikit-image")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    """The CUDA device's name, or None without a usable GPU (never raises)."""
    try:
        from numba import config, cuda

        if config.ENABLE_CUDASIM or not cuda.is_available():
            return None
        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return None


def describe_machine(with_gpu: bool = True) -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cores = available_cores()
    return {
        "cpu": cpu_model(),
        "cores": cores,
        "gpu": gpu_name() if with_gpu else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libraries": versions,
    }


def machine_line(info: dict[str, Any] | None = None) -> str:
    info = info or describe_machine()
    gpu = info["gpu"] or "no GPU"
    return f"{info['cpu']}, {info['cores']} cores, {gpu}, Python {info['python']}"
