"""The launcher's live progress bar (--progress bar, the default on a terminal).

In bar mode the launcher keeps one status line at the bottom of its stdout, redrawn in place
(carriage return and ANSI erase-line) at most POLL_S apart: a bar, the percentage, step/total,
samples/s, loss, the last evaluation's test figures (AUC and log loss for a click-through-rate
model, accuracy for a classifier), the slowest worker when there is a straggler, and the ETA.
Its figures come from the chief's metrics file (RUNDIR/metrics.jsonl by default), read from
where the last read ended, and the total from the chief's "training N steps" line (status.py's functions, which
`launch.sh status` uses too). The processes' lines still go to RUNDIR/<name>.log, but only
results and warnings/errors reach the terminal (`shown()`).
"""

import json
import os
import re
import time

from . import status

POLL_S = 0.25  # the metrics file is read, and the line redrawn, at most this often
REDRAW_S = 1.0  # without a new record the line is still redrawn this often (the ETA counts down)
BAR_WIDTH = 30

# "HH:MM:SS.mmm L text" (shared/util/log.cc).
_LOG_LINE = re.compile(rb"^[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} ([DIWE]) (.*)$", re.S)
# Results among the INFO lines: the summary, each epoch's evaluation, evaluation-only runs and
# where parameters were saved.
_RESULT = re.compile(rb"\b(summary: |epoch [0-9]+ done: |saved [0-9]+ variables to )|\btest_accuracy=")
_STRAGGLER = re.compile(r"\b(w[0-9]+) is the slowest in ([0-9.]+%)")


def shown(text):
    """Where a process's line goes in bar mode: "result" (stdout), "log" (stderr: warnings but
    the straggler's, errors, and lines not in the log format, such as a usage error) or None (the
    log file only)."""
    match = _LOG_LINE.match(text)
    if match is None:
        return "log"
    level, body = match.group(1), match.group(2)
    if level == b"W" and body.startswith(b"straggler: "):
        return None  # the bar names the slowest worker; each progress line would repeat it
    if level in (b"W", b"E"):
        return "log"
    if level == b"I" and _RESULT.search(body):
        return "result"
    return None


class MetricsTail:
    """The records appended to a JSON Lines file since the last call. Starts at the file's end
    (the chief appends: what is there already is an earlier job's); starts again from 0 when the
    file was replaced by a shorter one."""

    def __init__(self, path):
        self.path = path
        try:
            self.offset = os.path.getsize(path)
        except OSError:
            self.offset = 0
        self.partial = b""

    def records(self):
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.offset:
                    self.offset, self.partial = 0, b""
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()  # a line still being written, or b""
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records


def straggler_text(progress):
    text = progress.get("straggler")
    if not text:
        return ""
    match = _STRAGGLER.search(text)
    return f"slowest {match.group(1)} ({match.group(2)} of steps)" if match else "straggler"


def render(progress, total, age, columns, summary=None, epoch=None):
    """The status line for a progress record read `age` seconds ago (and the last epoch's test
    figures, or the summary's once there is one), at most columns - 1 wide."""
    step = progress.get("step", 0)
    fraction = min(step / total, 1.0) if total else None
    if summary is not None:
        fraction = 1.0 if total is None or summary.get("steps", step) >= total else fraction
    parts = [f"{100.0 * fraction:5.1f}%" if fraction is not None else "",
             f"step {step}" + (f"/{total}" if total else ""),
             f"{progress.get('samples_per_s', 0):,.0f} samples/s"]
    if progress.get("loss") is not None:
        parts.append(f"loss {progress['loss']:.4f}")
    parts.append(status.evaluation_text(summary if summary is not None else epoch))
    parts.append(straggler_text(progress))
    if summary is not None:
        parts.append(f"done in {status.duration(summary.get('seconds', 0))}")
    else:
        eta = status.eta_s(progress, total, age)
        parts.append(f"ETA {status.duration(eta)}" if eta is not None else "")
    rest = "  ".join(p for p in parts if p)
    width = min(BAR_WIDTH, columns - len(rest) - 5)
    if fraction is not None and width >= 10:
        filled = int(round(fraction * width))
        rest = f"[{'#' * filled}{'-' * (width - filled)}] {rest}"
    return rest[:max(columns - 1, 1)]


def terminal_columns(stream):
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 100


class ProgressBar:
    """Bar mode's status line, driven by tick() from the launcher's supervision loop."""

    def __init__(self, output, metrics_path, run_dir, columns, clock=time.monotonic):
        self.out = output
        self.run_dir = run_dir
        self.columns = columns  # () -> the terminal's width now
        self.clock = clock
        self.tail = MetricsTail(metrics_path)
        self.progress = self.summary = self.epoch = self.total = None
        self.read_at = 0.0
        self.polled_at = self.drawn_at = None

    def tick(self, force=False):
        now = self.clock()
        if not force and self.polled_at is not None and now - self.polled_at < POLL_S:
            return
        self.polled_at = now
        new = False
        for record in self.tail.records():
            if record.get("kind") == "progress":
                self.progress, self.read_at, new = record, now, True
            elif record.get("kind") == "summary":
                self.summary, new = record, True
            elif record.get("kind") == "epoch":
                self.epoch, new = record, True
        if self.progress is None:
            return
        if self.total is None:
            self.total = status.total_steps(self.run_dir)  # printed before the first step
        if new or force or self.drawn_at is None or now - self.drawn_at >= REDRAW_S:
            self.out.show(render(self.progress, self.total, now - self.read_at, self.columns(), self.summary,
                                 self.epoch))
            self.drawn_at = now

    def finish(self):
        """The last records, drawn; the line then stays on the screen."""
        self.tick(force=True)
        self.out.end_live()
