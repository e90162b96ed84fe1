"""The machine a benchmark ran on, as one phrase for the tables of benchmarks/RESULTS.md.

Why: this project's figures come from virtual machines that report the same kernel string
(`platform.platform()`) on an Intel Xeon and on an AMD EPYC, and the two differ by up to 2x on the
same code (XGBoost's `pred_contribs` on small-8f: 488k against 873k rows/s; shapfusion's one row
against a block's row: 3.9-5.4x against 6.8-8.5x). So every table names the CPU model, its widest
vectors (the engines compile AVX-512 and AVX2 copies and pick at run time), its L2 cache a core,
the cores this process may use and the memory, beside the kernel. Standard library only: the GPU
host runs it too (`gpu_peers.py`), with no packages beyond its own.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (empty off Linux)."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block ends at its blank line
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model() -> str:
    """The CPU's model name, as the OS reports it."""
    info = _cpuinfo()
    # x86 names it "model name"; Arm kernels give only the implementer and part numbers.
    return info.get("model name") or platform.processor() or platform.machine() or "unknown CPU"


def widest_vectors() -> str | None:
    """The widest vector instructions the CPU offers (what the engines' run-time dispatch can
    use), or None where /proc/cpuinfo does not say."""
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("sve", "SVE"), ("asimd", "NEON")):
        if flag in flags:
            return name
    return None


def l2_per_core() -> str | None:
    """The L2 cache of the first core (sysfs's `index2`), as the kernel writes it ("2048K")."""
    try:
        size = Path("/sys/devices/system/cpu/cpu0/cache/index2/size").read_text().strip()
    except OSError:
        return None
    return size or None


def usable_cores() -> int:
    """Cores this process may run on (its affinity: a container's or `taskset`'s limit), else
    the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def memory_gib() -> float | None:
    """The machine's memory in GiB (/proc/meminfo's MemTotal), or None off Linux."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def describe() -> str:
    """One phrase for a results table: "Intel(R) Xeon(R) Processor (AVX-512, L2 2048K a core),
    2 cores, 23.5 GiB; x86_64 Linux-6.18.44-...-glibc2.36"."""
    l2 = l2_per_core()
    details = [d for d in (widest_vectors(), f"L2 {l2} a core" if l2 else None) if d]
    cpu = cpu_model() + (f" ({', '.join(details)})" if details else "")
    memory = memory_gib()
    parts = [cpu, f"{usable_cores()} cores"] + ([f"{memory:.1f} GiB"] if memory else [])
    return f"{', '.join(parts)}; {platform.machine()} {platform.platform()}"


if __name__ == "__main__":
    print(describe())
