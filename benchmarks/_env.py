"""Set-up shared by every benchmark script: offline defaults (before anything imports transformers), quiet progress
bars, and the repository root on sys.path (for a Python without ptmlab installed); and what every result records:
its default name ``BENCHMARK.MACHINE.json`` (``result_path``), the machine and library versions (``machine_info``),
and paths relative to the project or the data folder, never absolute (``portable``)."""

import os
import platform
import re
import sys
from pathlib import Path

for _key, _value in (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                     ("PTMLAB_PROGRESS", "0")):
    os.environ.setdefault(_key, _value)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def cpu_flags() -> set[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where the file does not exist)."""
    line = next((ln for ln in _cpuinfo_lines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def machine_tag(device: str = "cpu") -> str:
    """The machine label of result file names: ``gpu-h200`` for a CUDA device, else the CPU's widest vector unit
    (``cpu-avx512-bf16``, ``cpu-avx512``, ``cpu-avx2``, or ``cpu-`` and the architecture)."""
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(torch.device(device)).lower().replace("nvidia", "")
        return "gpu-" + (re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "cuda")
    flags = cpu_flags()
    for flag, tag in (("avx512_bf16", "cpu-avx512-bf16"), ("avx512f", "cpu-avx512"), ("avx2", "cpu-avx2")):
        if flag in flags:
            return tag
    return "cpu-" + (platform.machine().lower() or "unknown")


def result_path(benchmark: str, device: str = "cpu", investigation: bool = False) -> Path:
    """Where a run writes by default: ``benchmarks/results/BENCHMARK.MACHINE.json`` (an investigation's under
    ``benchmarks/investigations/results/``), so that there is one current file per benchmark and machine."""
    folder = ROOT / "benchmarks" / ("investigations" if investigation else "") / "results"
    return folder / f"{benchmark}.{machine_tag(device)}.json"


def machine_info(device: str = "cpu") -> dict:
    """What a result records about the machine that made it: its label, CPU, core count and library versions."""
    from importlib import metadata

    cpu = next((ln.partition(":")[2].strip() for ln in _cpuinfo_lines() if ln.startswith("model name")), "")
    versions = {}
    for lib in ("torch", "transformers", "onnxruntime"):
        try:
            versions[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            versions[lib] = None
    return {"label": machine_tag(device), "cpu": cpu or platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "python": platform.python_version(), **versions}


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def portable(path) -> str:
    """A path as a committed result records it: relative to the project, else to the shared data folder, else only
    its last component (a run folder elsewhere on the machine that made it), never absolute."""
    from ptmlab.tokenization.corpora import shared_data_dir

    p = Path(path).resolve()
    for base in (ROOT, shared_data_dir()):
        if base is not None and p.is_relative_to(base):
            return str(p.relative_to(base))
    return p.name
