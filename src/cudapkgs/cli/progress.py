"""What a build shows people: plain lines, or rich bars on a terminal (rich imported only then). The scheduler reports through its small `Progress` interface (`realise.scheduler`)."""

from __future__ import annotations

import os
import sys
import threading
import time
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any, TextIO

from ..derivation import Derivation
from ..realise.scheduler import Plan, Progress
from ..table import format_size


_UNKNOWN_STEP = 64 << 20  # a download of unknown size says how far it got every 64 MiB


def _fetch_summary(plan: Plan) -> str:
    """"4.0 KiB", or with the sources a cache holds and those of unknown size (a wheel's, until
    fetched: only --dry-run asks the index) counted apart: "2.0 KiB to download; 1 already cached"."""
    cached = sum(1 for f in plan.to_fetch if f.cached)
    unknown = plan.unknown_sizes
    if not cached and not unknown:
        return format_size(plan.download_size)
    parts = [f"{format_size(plan.download_size)} to download"] if plan.download_size else []
    if unknown:
        parts.append("sizes unknown" if unknown == len(plan.to_fetch) else f"{unknown} of unknown size")
    if cached:
        parts.append(f"{cached} already cached")
    return "; ".join(parts)


class PlainProgress:
    """One line per event, for logs and pipes: starts, steps, download start/end, results."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()
        self._total = 0
        self._done = 0
        self._downloading: dict[str, tuple[float, int]] = {}  # drv path -> (start, bytes when last reported)

    def _line(self, text: str) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    def begin(self, plan: Plan, jobs: int) -> None:
        self._total = len(plan.to_build)
        fetch = f", fetching {len(plan.to_fetch)} source(s) ({_fetch_summary(plan)})" if plan.to_fetch else ""
        self._line(f"building {self._total} derivation(s) with {jobs} job(s){fetch}")

    def started(self, drv: Derivation) -> None:
        self._line(f"building {drv.name}")

    def download(self, drv: Derivation, done: int, total: int | None) -> None:
        """A line when a download starts, one per quarter of one of 64 MiB or more (per 64 MiB when the size is unknown) with its
        speed, and one when it ends: "x: fetched 400.0 MiB in 21 s (19.0 MiB/s)"."""
        now = time.monotonic()
        complete = total is not None and done >= total
        with self._lock:
            first = drv.drv_path not in self._downloading
            start, reported = self._downloading.get(drv.drv_path, (now, 0))
            step = (total // 4 if total >= _UNKNOWN_STEP else 0) if total else _UNKNOWN_STEP  # small ones: start and end
            due = not first and not complete and step > 0 and done // step > reported // step
            if complete:
                self._downloading.pop(drv.drv_path, None)
            elif first or due:
                self._downloading[drv.drv_path] = (start, done)
        elapsed = now - start
        speed = f" ({format_size(int(done / elapsed))}/s)" if elapsed > 0.5 else ""
        if complete:
            taken = f" in {elapsed:.0f} s{speed}" if not first and elapsed >= 1 else ""
            self._line(f"{drv.name}: fetched {format_size(total)}{taken}")
        elif first:
            self._line(f"{drv.name}: fetching {format_size(total)}" if total is not None
                       else f"{drv.name}: fetching (size unknown)")
        elif due:
            share = f" of {format_size(total)}" if total else ""
            self._line(f"{drv.name}: {format_size(done)}{share}{speed}")

    def step(self, drv: Derivation, name: str) -> None:
        self._line(f"{drv.name}: {name}")

    def finished(self, drv: Derivation, error: BaseException | None) -> None:
        with self._lock:
            self._done += 1
            count = f"[{self._done}/{self._total}]"
        if error is None:
            self._line(f"{count} built {drv.name}")
        else:  # the reason and the log come once, in the error that ends the command
            self._line(f"{count} failed {drv.name}")

    def end(self) -> None:
        pass


class RichProgress:
    """rich bars: one overall bar counting builds, one per running build (bytes while downloading, else steps)."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichBars
        from rich.progress import TransferSpeedColumn
        from rich.text import Text

        class AmountColumn(ProgressColumn):
            """Bytes for downloads, "step N" for build phases, "done/total" for the overall bar."""

            def __init__(self) -> None:
                super().__init__()
                self._bytes = DownloadColumn()
                self._speed = TransferSpeedColumn()

            def render(self, task: Any) -> Any:
                kind = task.fields.get("kind")
                if kind == "download":
                    return Text.assemble(self._bytes.render(task), " ", self._speed.render(task))
                if kind == "steps":
                    return Text(f"step {int(task.completed)}", style="progress.download")
                return Text(f"{int(task.completed)}/{int(task.total or 0)}", style="progress.download")

        self._lock = threading.Lock()
        self._console = Console(file=stream, stderr=stream is sys.stderr)
        self._bars = RichBars(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), AmountColumn(), TimeElapsedColumn(),
            console=self._console, transient=True,
        )
        self._tasks: dict[str, Any] = {}
        self._steps: dict[str, int] = {}
        self._overall: Any = None

    def begin(self, plan: Plan, jobs: int) -> None:
        self._bars.start()
        # The same summary as the plain lines: sizes a wheel does not know until fetched are said so, not "0 B".
        fetch = f", fetching {len(plan.to_fetch)} ({_fetch_summary(plan)})" if plan.to_fetch else ""
        self._overall = self._bars.add_task(f"[bold]building[/] ({jobs} jobs{fetch})", total=len(plan.to_build), kind="total")

    def started(self, drv: Derivation) -> None:
        with self._lock:
            self._tasks[drv.drv_path] = self._bars.add_task(drv.name, total=None, kind="steps")
            self._steps[drv.drv_path] = 0

    def download(self, drv: Derivation, done: int, total: int | None) -> None:
        task = self._tasks.get(drv.drv_path)
        if task is not None:
            self._bars.update(task, completed=done, total=total, kind="download", description=f"{drv.name}: fetching")

    def step(self, drv: Derivation, name: str) -> None:
        task = self._tasks.get(drv.drv_path)
        if task is not None:
            with self._lock:
                steps = self._steps[drv.drv_path] = self._steps.get(drv.drv_path, 0) + 1
            self._bars.update(task, completed=steps, total=None, kind="steps", description=f"{drv.name}: {name}")

    def finished(self, drv: Derivation, error: BaseException | None) -> None:
        with self._lock:
            task = self._tasks.pop(drv.drv_path, None)
        if task is not None:
            self._bars.remove_task(task)
        self._bars.advance(self._overall)
        if error is None:
            self._console.print(f"built {drv.name}", style="green", highlight=False, markup=False)
        else:
            self._console.print(f"failed {drv.name}", style="red", highlight=False, markup=False)

    def end(self) -> None:
        self._bars.stop()


def make_progress(stream: TextIO | None = None, *, rich: bool | None = None) -> Progress:
    """Rich bars when `stream` is a terminal (and TERM is not dumb), else plain lines."""
    stream = stream if stream is not None else sys.stderr
    if rich is None:
        rich = bool(getattr(stream, "isatty", lambda: False)()) and os.environ.get("TERM") != "dumb"
    return RichProgress(stream) if rich else PlainProgress(stream)
