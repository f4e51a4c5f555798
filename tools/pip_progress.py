"""Condenses pip's output into a progress line every few seconds (stdlib only: it runs before the
virtualenv has anything installed). Usage: ``pip install ... 2>&1 | python3 tools/pip_progress.py``.

pip's own output is a line per package (too much to read) and ``-q`` is none (a silent minute);
this prints how many packages are collected, downloaded and being installed, and passes errors
through whole."""

from __future__ import annotations

import sys
import threading
import time

EVERY = 10.0


class Progress:
    """What pip has said so far; a timer thread reports it, since pip is silent while installing."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.collected = self.downloaded = 0
        self.latest = ""
        self.phase = "collecting"
        self.lock = threading.Lock()

    def report(self) -> None:
        with self.lock:
            elapsed = time.monotonic() - self.started
            if self.phase == "installing":
                line = f"{elapsed:.0f} s, installing {self.collected} packages"
            else:
                line = f"{elapsed:.0f} s, {self.collected} packages collected ({self.downloaded} downloaded), latest {self.latest}"
        print(f"agentlog setup: pip: {line}", flush=True)


def main() -> int:
    state = Progress()
    done = threading.Event()

    def tick() -> None:
        while not done.wait(EVERY):
            state.report()

    threading.Thread(target=tick, daemon=True).start()
    tail: list[str] = []
    for raw in sys.stdin:
        line = raw.rstrip("\n")
        tail = [*tail[-40:], line]
        words = line.split()
        with state.lock:
            if line.startswith("Collecting ") and len(words) > 1:
                state.collected += 1
                state.latest = words[1]
            elif line.lstrip().startswith("Downloading "):
                state.downloaded += 1
            elif line.startswith("Installing collected packages"):
                state.phase = "installing"
        if line.startswith(("ERROR", "error:")):
            print(line, flush=True)
        if line.startswith("Successfully installed"):
            elapsed = time.monotonic() - state.started
            print(f"agentlog setup: pip: {len(words) - 2} packages installed in {elapsed:.0f} s", flush=True)
    done.set()
    if any(line.startswith(("ERROR", "error:")) for line in tail):
        print("agentlog setup: pip failed; its last lines:", *tail[-15:], sep="\n", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
