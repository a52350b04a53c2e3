"""What this machine lets the process use: host memory available now, and
sizes in words (every floor of the package asks these)."""

from __future__ import annotations

import os


def host_available_bytes() -> int:
    """Memory this process may use now: the host's available memory (Linux:
    MemAvailable), or less where a container's limit (cgroup) or the
    process's address-space limit (``ulimit -v``, RLIMIT_AS) leaves less; a
    cautious 2 GiB where none can be read."""
    found = [
        a for a in (_meminfo_available(), cgroup_available_bytes(), address_space_available_bytes()) if a is not None
    ]
    return min(found) if found else 2 << 30


def address_space_available_bytes(status: str = "/proc/self/status") -> int | None:
    """Bytes of address space this process may still map under its RLIMIT_AS
    (the soft limit less the VmSize that ``status`` reports), or None where
    there is no limit. An allocation beyond it fails however much memory the
    host has free."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = 0
    try:
        with open(status) as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return max(int(soft) - used, 0)


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cgroup_available_bytes(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int | None:
    """Bytes left under this process's cgroup memory limits (limit minus usage,
    the smallest over its cgroup and their parents), or None where there is no
    limit. Reads cgroup v2 (``memory.max``, ``memory.current``) and v1
    (``memory.limit_in_bytes``, ``memory.usage_in_bytes``) at the paths
    ``proc_cgroup`` names under ``root`` (a batch job's limit sits on a child
    cgroup), and at ``root`` itself (a container sees its own cgroup there).
    The host's free memory ignores such limits, and exceeding one gets the
    process killed."""

    def read(path):
        try:
            with open(os.path.join(root, path)) as fh:
                return fh.read().strip()
        except OSError:
            return None

    def available(folder, limit_file, usage_file, cache_key):
        limit = read(folder + limit_file)
        if limit is None or limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None  # no such file, or no limit (v1 writes a huge number)
        usage = read(folder + usage_file)
        used = int(usage) if usage is not None and usage.isdigit() else 0
        # Usage counts the page cache; its inactive part is given back on demand.
        for line in (read(folder + "memory.stat") or "").splitlines():
            key, _, value = line.partition(" ")
            if key == cache_key and value.strip().isdigit():
                used -= min(int(value), used)
        return max(int(limit) - used, 0)

    v2 = ("memory.max", "memory.current", "inactive_file")
    v1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    places = [("", *v2), ("memory/", *v1), ("", *v1)]
    try:
        with open(proc_cgroup) as fh:
            lines = fh.read().splitlines()
    except OSError:
        lines = []
    for line in lines:  # "0::/path" (v2) or "4:memory:/path" (v1)
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), 0, -1):  # the cgroup and its parents
            sub = "/".join(parts[:depth]) + "/"
            if controllers == "":
                places.append((sub, *v2))
            elif "memory" in controllers.split(","):
                places.append(("memory/" + sub, *v1))
    found = [a for a in (available(*place) for place in places) if a is not None]
    return min(found) if found else None


def format_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``: binary units, three significant figures."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux/macOS), 0 if unknown."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return 0
    import sys

    return int(peak) if sys.platform == "darwin" else int(peak) * 1024
