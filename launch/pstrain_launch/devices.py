"""--devices cuda:0,cuda:2,cpu: one worker per listed device (docs/operations.md, "Devices").

Entries are what the worker's --device takes, less `auto`: cpu, cuda (GPU local rank mod
visible GPUs) and cuda:K. CUDA numbers the GPUs that CUDA_VISIBLE_DEVICES leaves visible from 0,
so cuda:K is the K-th entry of that list; the launcher passes the variable on unchanged and only
checks that every cuda:K exists in it.
"""

import re

from .placement import PlacementError

_DEVICE = re.compile(r"cpu|cuda|cuda:[0-9]+")


def parse(text):
    """'cuda:0,cuda:2,cpu' -> ['cuda:0', 'cuda:2', 'cpu']."""
    entries = [entry.strip() for entry in text.split(",")]
    for entry in entries:
        if not _DEVICE.fullmatch(entry):
            shown = f"'{entry}' is not" if entry else "an empty entry is not"
            raise PlacementError(f"--devices: {shown} cpu, cuda or cuda:K (K = 0, 1, ...: a visible GPU)")
    return entries


def check_visible(devices, visible):
    """Every cuda:K must be among the GPUs CUDA_VISIBLE_DEVICES (`visible`; None: not set)
    leaves, and a plain cuda needs one."""
    if visible is None:
        return
    count = len([entry for entry in visible.split(",") if entry.strip()])
    for device in devices:
        need = int(device[5:]) + 1 if device.startswith("cuda:") else 1 if device == "cuda" else 0
        if need > count:
            raise PlacementError(f"--devices: {device} needs {need} visible GPU(s), but CUDA_VISIBLE_DEVICES="
                                 f"'{visible}' leaves {count} (cuda:K counts the GPUs of that list from 0)")
