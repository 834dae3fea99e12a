"""Start-up time of the lab: ``attnlab`` to the first interactive frame.

    python benchmarks/tui_startup.py [--repeat 5]

Each repeat starts a fresh interpreter that imports the console script's module
(``attnlab.cli``), builds the app with the same factory ``attnlab`` uses and runs it headless;
the auto-pilot runs once the first screen is composed and accepting keys, and prints. Measured
from the parent: process spawn -> that line. Also reported: whether torch was imported by
then (it must not be: the registries load in a background thread after the first frame), and
the time until the Setup menus (which need the registries, hence torch) are built.

Target (issue 5): first interactive frame < 1.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import asyncio, sys, time
from pathlib import Path
import attnlab.cli  # what the console script imports
from attnlab.tui.app import make_app

app = make_app(Path(sys.argv[1]))

async def auto_pilot(pilot):
    # The app records when its first refresh (the first frame) has completed.
    while app.first_frame_at is None:
        await asyncio.sleep(0.005)
    print("FRAME", "torch" in sys.modules, flush=True)
    await asyncio.wait_for(app.menus_ready.wait(), 120)
    print("MENUS", flush=True)
    await pilot.exit(None)

app.run(headless=True, size=(100, 30), auto_pilot=auto_pilot)
"""


BASELINE = r"""
import sys
from textual.app import App
from textual.widgets import Footer, Header, Static

class Hello(App):
    def compose(self):
        yield Header(); yield Static("hello"); yield Footer()

async def auto_pilot(pilot):
    await pilot.pause()  # its first frame
    print("FRAME False", flush=True)
    print("MENUS", flush=True)
    await pilot.exit(None)

Hello().run(headless=True, size=(100, 30), auto_pilot=auto_pilot)
"""


def once(code: str = CHILD) -> tuple[float, float, bool]:
    runs = tempfile.mkdtemp(prefix="attnlab-startup-")
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, runs], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    frame = menus = float("nan")
    torch_loaded = True
    for line in proc.stdout:
        if line.startswith("FRAME"):
            frame = time.perf_counter() - start
            torch_loaded = line.split()[1] == "True"
        elif line.startswith("MENUS"):
            menus = time.perf_counter() - start
    proc.wait()
    return frame, menus, torch_loaded


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results = [once() for _ in range(args.repeat)]
    frames = [r[0] for r in results]
    menus = [r[1] for r in results]
    for i, (frame, menu, torch_loaded) in enumerate(results, 1):
        print(
            f"run {i}: first frame {frame:.2f} s (torch imported: {torch_loaded}), "
            f"menus ready {menu:.2f} s"
        )
    baseline = statistics.median(once(BASELINE)[0] for _ in range(3))
    print(f"(a bare Textual app with a header and a footer on this machine: {baseline:.2f} s)")
    print(
        f"median first interactive frame {statistics.median(frames):.2f} s; "
        f"median menus ready {statistics.median(menus):.2f} s"
    )
    ok = statistics.median(frames) < 1.5
    print("PASS" if ok else "FAIL", "(target: first interactive frame < 1.5 s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
