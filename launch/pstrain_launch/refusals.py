"""One refusal of the job's flags, said once: every process of a job gets the same flags, so a
refusal of one (`--resume: no usable checkpoint in 'DIR' ...`) comes from each PS shard, again as
each worker's "psN rejected HELLO: ...", and as the shards' warnings of the rejected message. The
launcher holds those lines back from the terminal (the processes' logs keep them) and says the
refusal once, naming the processes that gave it, as --dry-run does for the binaries' refusals:

    launch: ps0, ps1, w0, w1, w2 refused: --resume: no usable checkpoint in 'DIR' (it holds none; ...)
"""

import re
import threading

# An error line ("HH:MM:SS.mmm E who: ...") whose message ends in a flag's refusal ("--flag: why").
_LINE = re.compile(rb"^[0-9:.]+ ([EW]) (.*)$")
_REFUSAL = re.compile(r"(--[a-z][a-z0-9-]*: .*)$")


def _order(label):
    """PS shards first, then workers, each by index; anything else after them, by name."""
    match = re.fullmatch(r"(ps|w)(\d+)", label)
    return (0 if match.group(1) == "ps" else 1, int(match.group(2)), "") if match else (2, 0, label)


def refusal_of(message):
    """The flag's refusal a message ends in ("--resume: ..."), or None."""
    match = _REFUSAL.search(message)
    return match.group(1) if match else None


class Refusals:
    """The refusals held back, each with the processes that gave it (in order of first sight)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = {}  # refusal text -> [labels]
        self.reported = set()

    def hold(self, label, line):
        """Whether a process's line (bytes) is held back: an error line ending in a flag's
        refusal, or a warning that repeats one already held (the shards' "rejected a message from
        peer ...: <refusal>"). Warnings of their own are shown as they come."""
        match = _LINE.match(line.rstrip(b"\n"))
        if not match:
            return False
        refusal = refusal_of(match.group(2).decode("utf-8", "replace").strip())
        if refusal is None:
            return False
        with self.lock:
            if match.group(1) == b"W" and refusal not in self.seen:
                return False
            labels = self.seen.setdefault(refusal, [])
            if label not in labels:
                labels.append(label)
        return True

    def take(self):
        """[(refusal, "ps0, ps1, w0")] of those not yet reported; they are reported from now on."""
        with self.lock:
            out = [(text, ", ".join(sorted(labels, key=_order))) for text, labels in self.seen.items()
                   if text not in self.reported]
            self.reported.update(text for text, _ in out)
        return out

    def replace_in(self, message):
        """`message` (the launcher's own, e.g. why the job stopped) with each refusal held in it
        replaced by "the refusal below", so that its text is said once, on the launcher's line."""
        with self.lock:
            for text in self.seen:
                message = message.replace(text, "the refusal below")
        return message
