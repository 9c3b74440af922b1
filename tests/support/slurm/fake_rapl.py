"""A simulated RAPL package meter for test clusters, so Slurm's `acct_gather_energy/rapl` has
something to read on machines without a power sensor (TEST ONLY).

Adapted from the fake MSR writer of this project's Slurm bring-up recipe: it writes the RAPL
model-specific registers (unit 0x606, power info 0x614, package energy 0x611, DRAM 0x619)
into regular files at `/dev/cpu/N/msr`, advancing the package counter at `watts`. It never
touches a real MSR device (a character device): where one exists, it refuses to start.
Files and folders it created are removed when it stops (SIGTERM or SIGINT).

    python -m joulepool.bridges.slurm.fake_rapl --watts 100
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import stat
import struct
import sys
import time
from pathlib import Path
from typing import BinaryIO

from joulepool.errors import PoolError

CPU_ROOT = Path("/dev/cpu")
ENERGY_STATUS_UNIT = 14
"""The energy unit is 1/2^14 J, as on most Intel packages."""
UNIT = (10 << 16) | (ENERGY_STATUS_UNIT << 8) | 3
MSR_RAPL_POWER_UNIT = 0x606
MSR_PKG_ENERGY_STATUS = 0x611
MSR_PKG_POWER_INFO = 0x614
MSR_DRAM_ENERGY_STATUS = 0x619


class RealMeterPresent(PoolError):
    """A real MSR device is there: the simulation must not shadow it."""

    code = "real_meter_present"


def _put(fh: BinaryIO, offset: int, value: int) -> None:
    fh.seek(offset)
    fh.write(struct.pack("<Q", value))
    fh.flush()


def msr_paths(root: Path = CPU_ROOT, cpus: int | None = None) -> list[Path]:
    """The `msr` file of every CPU folder under `root` (created for `cpus` CPUs if none exist)."""
    present = (
        sorted((int(d.name) for d in root.iterdir() if d.name.isdigit()), key=int)
        if root.is_dir()
        else []
    )
    if not present:
        present = list(range(cpus or os.cpu_count() or 1))
    return [root / str(c) / "msr" for c in present]


class FakeRapl:
    """The simulated meter: `start()` creates the register files, `tick()` advances them."""

    def __init__(self, watts: int, root: Path = CPU_ROOT) -> None:
        if watts < 0:
            raise PoolError(f"watts: must not be negative, got {watts}")
        self.watts = watts
        self.root = root
        self._files: list[BinaryIO] = []
        self._created_files: list[Path] = []
        self._created_dirs: list[Path] = []
        self._t0 = time.monotonic()

    def start(self) -> None:
        """Create the register files; refuse if any is a real device."""
        paths = msr_paths(self.root)
        for p in paths:
            if p.exists() and stat.S_ISCHR(p.stat().st_mode):
                raise RealMeterPresent(
                    f"{p} is a real MSR device; the simulated meter is not needed"
                )
        for p in paths:
            for d in (p.parent.parent, p.parent):
                if not d.exists():
                    d.mkdir()
                    self._created_dirs.append(d)
            if not p.exists():
                self._created_files.append(p)
            fh = p.open("w+b")
            fh.truncate(0x1000)
            _put(fh, MSR_RAPL_POWER_UNIT, UNIT)
            _put(fh, MSR_PKG_POWER_INFO, self.watts * 2 * 8)
            _put(fh, MSR_PKG_ENERGY_STATUS, 0)
            _put(fh, MSR_DRAM_ENERGY_STATUS, 0)
            self._files.append(fh)
        self._t0 = time.monotonic()

    def tick(self) -> None:
        """Advance every package counter to `watts` × elapsed time (wrapping at 32 bits)."""
        energy = (
            int((time.monotonic() - self._t0) * self.watts * (1 << ENERGY_STATUS_UNIT)) & 0xFFFFFFFF
        )
        for fh in self._files:
            _put(fh, MSR_PKG_ENERGY_STATUS, energy)
            _put(fh, MSR_DRAM_ENERGY_STATUS, energy // 10)

    def stop(self) -> None:
        """Close and remove what `start()` created (only regular files, never a device)."""
        for fh in self._files:
            fh.close()
        self._files = []
        for p in self._created_files:
            if p.is_file() and not stat.S_ISCHR(p.stat().st_mode):
                p.unlink()
        for d in reversed(self._created_dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
        self._created_files, self._created_dirs = [], []


def main(argv: list[str] | None = None) -> int:
    """Run the simulated meter until SIGTERM (test clusters only; see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="fake_rapl", description="simulated RAPL meter (test only)"
    )
    parser.add_argument("--watts", type=int, default=100)
    parser.add_argument("--ready-file", type=Path, help="touched once the registers exist")
    args = parser.parse_args(argv)
    meter = FakeRapl(args.watts)
    try:
        meter.start()
    except PoolError as exc:
        print(f"fake_rapl: {exc}", file=sys.stderr)
        return 1
    running = True

    def _stop(_signum: int, _frame: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.ready_file is not None:
        args.ready_file.touch()
    try:
        while running:
            meter.tick()
            time.sleep(0.1)
    finally:
        meter.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
