"""Page frames as records: ``collect()``'s result written to a folder once, read back to draw pages.

    save_frames(folder, collected)      # folder/manifest.json + folder/frame-0001.parquet, ...
    collected = load_frames(folder)     # the same dict: frames, labels, nested as collect() returns it

Every frame is a record file of kind ``summary`` whose metadata names the frame (``frames/timeline/
sim/expert_wave/gantt``); ``manifest.json`` holds the tree of labels with a ``{"$frame": file}`` where
a frame was, and ``inputs``, the fingerprint of what the frames were computed from (``input_key``:
every record file under the records folder, the platforms, the quick flag and the package's code),
so a dashboard build can tell whether saved frames are still current. The folder is written beside
its final path and renamed into place (``write_folder``).
"""

import hashlib
import importlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.records import load_records, save_records

MANIFEST = "manifest.json"
FORMAT = 1


def write_folder(path, build, *, overwrite: bool = False, what: str = "--out") -> Path:
    """Build a folder with ``build(tmp)`` beside ``path`` and rename it into place: a reader sees the old
    folder or the new one, never a mix; stale files of the old one are gone. An existing non-empty
    ``path`` is replaced only with ``overwrite``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(what, str(path), "exists and is not a folder")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise InputError(what, str(path), "already exists (pass --overwrite to replace it)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as err:
        raise InputError(what, str(path), f"cannot be written ({err.strerror or err})") from None
    old = None
    try:
        build(tmp)
        os.chmod(tmp, 0o755)
        if path.exists():
            old = tmp.with_name(tmp.name[:-4] + ".old")
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException:
        if old is not None and not path.exists():
            os.replace(old, path)
            old = None
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return path


def _encode(value, key: str, frames: list):
    if isinstance(value, pd.DataFrame):
        frames.append((key, value))
        return {"$frame": f"frame-{len(frames):04d}.parquet"}
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise InputError(f"frame tree keys at {key}", bad, "must be strings")
        return {k: _encode(v, f"{key}/{k}", frames) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{key}/{i}", frames) for i, v in enumerate(value)]
    if isinstance(value, np.ndarray):
        return {"$array": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise InputError(f"frame tree value at {key}", type(value).__name__, "must be a frame, label or number")


def _decode(node, folder: Path):
    if isinstance(node, dict):
        if "$frame" in node:
            frame, _meta = load_records(folder / node["$frame"], "summary")
            return frame
        if "$array" in node:
            return np.asarray(node["$array"], dtype=node["dtype"])
        return {k: _decode(v, folder) for k, v in node.items()}
    if isinstance(node, list):
        return [_decode(v, folder) for v in node]
    return node


def save_frames(folder, collected: dict, *, inputs: str = "", overwrite: bool = False) -> Path:
    """Write ``collected`` (nested dicts of frames and labels) as records into ``folder``, atomically."""
    frames: list = []
    tree = _encode(collected, "frames", frames)

    def build(tmp: Path):
        for i, (key, frame) in enumerate(frames, start=1):
            out = frame.reset_index() if _has_index(frame) else frame
            save_records(tmp / f"frame-{i:04d}.parquet", "summary", out,
                         {"frame": key, "index": list(frame.index.names) if _has_index(frame) else None}, table="frame")
        (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT, "inputs": inputs, "frames": tree}, indent=1,
                                               allow_nan=True))

    return write_folder(folder, build, overwrite=overwrite, what="frames folder")


def _has_index(frame: pd.DataFrame) -> bool:
    return not (isinstance(frame.index, pd.RangeIndex) and frame.index.start == 0 and frame.index.step == 1
                and frame.index.name is None)


def read_manifest(folder) -> dict | None:
    """The manifest of a frames folder, or None when ``folder`` holds none."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise InputError("frames manifest", str(path), f"is not readable ({type(err).__name__})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "frames" not in manifest:
        raise InputError("frames manifest", str(path), f"must be format {FORMAT} with a 'frames' tree")
    return manifest


def load_frames(folder) -> dict:
    """The frame tree ``save_frames`` wrote into ``folder``."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        raise InputError("frames folder", str(folder), f"holds no {MANIFEST} (write one with xstage dashboard)")
    tree = _decode(manifest["frames"], folder)
    _restore_index(tree, manifest["frames"], folder)
    return tree


def _restore_index(tree, node, folder: Path) -> None:
    """Frames saved with a named or non-default index get it back (their metadata names the columns)."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for k, v in items:
        sub = node[k]
        if isinstance(v, pd.DataFrame):
            meta = load_records(folder / sub["$frame"], "summary")[1]
            if meta.get("index"):
                names = meta["index"]
                cols = [n if n is not None else ("index" if len(names) == 1 else f"level_{i}")
                        for i, n in enumerate(names)]
                v = v.set_index(cols)
                v.index.names = names
                tree[k] = v
        elif isinstance(v, (dict, list)):
            _restore_index(v, sub, folder)


def input_key(data_dir, platforms, quick: bool) -> str:
    """A fingerprint of what ``collect(data_dir, platforms, quick=quick)`` reads: every file under
    ``data_dir`` (path, size, modification time), the platform names, the flag, and the package's source."""
    h = hashlib.sha256()
    h.update(json.dumps({"platforms": list(platforms or []), "quick": bool(quick), "format": FORMAT}).encode())
    data_dir = Path(data_dir)
    for path in sorted(data_dir.rglob("*")) if data_dir.is_dir() else ():
        if path.is_file():
            st = path.stat()
            h.update(f"{path.relative_to(data_dir)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    for name in ("xstage", "xstage.sim", "xstage.compare"):   # the code that computes frames
        folder = Path(importlib.import_module(name).__file__).parent
        for path in sorted(folder.glob("**/*.py")) + sorted(folder.glob("**/*.json")):
            h.update(path.read_bytes())
    return h.hexdigest()
