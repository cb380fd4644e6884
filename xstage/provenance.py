"""Where a record came from: machine, GPU, driver, CUDA, library versions, git commit, date."""

import datetime as _dt
import functools
import hashlib
import importlib.metadata
import json
import platform as _platform
import re
import subprocess
from pathlib import Path

_LIBS = ("xstage", "simpy", "numpy", "pandas", "pyarrow", "plotly", "torch", "triton", "cupy-cuda13x",
         "cupy-cuda12x", "nvshmem4py-cu13", "nvshmem4py-cu12")


def git_commit(path: Path | None = None) -> str:
    """The commit of the checkout holding this package ('+dirty' when it has changes), or 'unknown'.

    ``$XSTAGE_GIT_COMMIT`` wins: set it where the code runs from a copy without .git (a lent GPU machine).
    """
    import os

    if os.environ.get("XSTAGE_GIT_COMMIT"):
        return os.environ["XSTAGE_GIT_COMMIT"]
    where = str(path or Path(__file__).resolve().parent.parent)
    try:
        head = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        if not head:
            return "unknown"
        dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def distribution_versions(names) -> dict:
    """The installed version of each distribution in ``names``, None where it is not installed."""
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def library_versions() -> dict:
    """The versions of the installed libraries a record depends on (missing ones left out)."""
    return {k: v for k, v in distribution_versions(_LIBS).items() if v is not None}


def gpu_info() -> dict:
    """GPU name, SM count, driver and CUDA versions, and the GPU's UUID (which physical GPU: lent machines
    change between sessions) when torch sees a GPU; {} otherwise."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    props = torch.cuda.get_device_properties(0)
    info = {"gpu": props.name, "sm_count": props.multi_processor_count,
            "gpu_memory_GiB": round(props.total_memory / 2**30, 1), "cuda_runtime": torch.version.cuda,
            "device_count": torch.cuda.device_count()}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,pcie.link.gen.current,"
                              "pcie.link.width.current,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
        if out:
            fields = [f.strip() for f in out[0].split(",")]
            info.update(driver=fields[0], sm_clock=fields[1], sm_clock_max=fields[2],
                        pcie_gen=fields[3], pcie_width=fields[4], gpu_uuid=fields[5])
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return info


def gpu_slug(gpu_name: str) -> str:
    """The model part of a GPU's name: "NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA H200" -> "h200" (the first word of
    letters then digits; else the last word; "gpu" for none)."""
    words = ["".join(ch for ch in w if ch.isalnum() or ch == "-") for w in gpu_name.lower().replace("nvidia", "").split()]
    words = [w for w in words if w]
    model = [w for w in words if re.fullmatch(r"[a-z]+\d+[a-z0-9-]*", w)]
    if model:
        return model[0]
    return words[-1] if words else "gpu"


def platform_name(target: str, gpu_name: str = "", peer_pattern: str = "next") -> str:
    """The platform a GPU's measurements are named after: ``h100-pcie-host``, ``h200-local``, ``h200-peer-a2a``."""
    slug = gpu_slug(gpu_name)
    suffix = {"host": "pcie-host", "local": "local", "peer": "peer"}[target]
    if target == "peer" and peer_pattern == "all":
        suffix = "peer-a2a"
    return f"{slug}-{suffix}".replace(" ", "")


def this_gpu_platform(target: str = "host", fallback: str = "h200-pcie-host") -> str:
    """``platform_name`` of the GPU this process sees (what a kernel bench labels its rows with); ``fallback`` when
    torch sees none (the records' name before session 23, when every bench ran on an H200)."""
    name = _gpu_name()
    return platform_name(target, name) if name else fallback


@functools.lru_cache(maxsize=1)
def _gpu_name() -> str:
    try:
        import torch
    except ImportError:
        return ""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


def provenance(*, with_gpu: bool = False) -> dict:
    """Provenance block written beside every record."""
    prov = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "host": _platform.node(),
        "python": _platform.python_version(),
        "libraries": library_versions(),
    }
    if with_gpu:
        prov["gpu"] = gpu_info()
    return prov


def content_hash(obj) -> str:
    """sha256 of an object's canonical JSON (used for platform files)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
