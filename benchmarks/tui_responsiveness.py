"""The lab stays responsive while it trains, and training inside it is as fast as headless.

    OMP_NUM_THREADS=2 python benchmarks/tui_responsiveness.py [--steps 400] [--presses 200]

1. Headless: ``attnlab train --preset P --quiet`` in a child process; mean tokens/s of its
   step events (the first 10% skipped as warm-up).
2. In the lab (Pilot, headless terminal 100x30): the same preset is started with the Train
   key, then ``--presses`` key presses are spread over the run (tab switches, Runs-table and
   Inspect cursor moves). Latency = key press -> the first screen update painted after the
   key's action ran (``App._display`` receives the compositor's update; in a real terminal
   that is the write to the tty). The child's tokens/s is read from its events the same way.

Targets (issue 5): median < 100 ms, p95 < 250 ms; lab tokens/s >= 90% of headless.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnlab.events import iter_events
from attnlab.experiment import apply_overrides, load_preset
from attnlab.launch import train_command
from attnlab.tui.app import make_app
from attnlab.tui.views.inspect import InspectView

# Every key changes the screen: tab switches, and cursor moves that go and come back on the
# Train samples table, the Runs table (headless + lab run) and the Inspect heatmap.
KEYS = ["2", "down", "up", "4", "down", "up", "3", "right", "left", "1"]


def tokens_per_s(run_dir: Path) -> float:
    values = [
        e["tokens_per_s"]
        for e in iter_events(run_dir)
        if e.get("type") == "step" and e.get("tokens_per_s")
    ]
    values = values[len(values) // 10 :] or values
    return statistics.fmean(values) if values else float("nan")


def headless(preset_file: Path, out: Path) -> float:
    name = "headless"
    subprocess.run(train_command(preset_file, out, name), check=True)
    return tokens_per_s(out / name)


class PaintClock:
    """Times the app's screen updates and its key-bound actions (benchmark instrumentation)."""

    def __init__(self, app) -> None:
        self.paints: list[float] = []
        self.actions: list[float] = []
        display, run_action = app._display, app.run_action

        def record_display(screen, renderable) -> None:  # the compositor's update goes out
            if renderable is not None:
                self.paints.append(time.perf_counter())
            display(screen, renderable)

        async def record_action(*args, **kwargs):  # a key binding ran its action
            result = await run_action(*args, **kwargs)
            self.actions.append(time.perf_counter())
            return result

        app._display = record_display
        app.run_action = record_action


async def key_to_paint(app, clock: PaintClock, key: str) -> float | None:
    """Seconds from a key press to the first screen update painted after its action ran.

    The key goes in through the driver like a real key press (``pilot.press`` would also
    wait for animations, e.g. the tab underline sliding, which the user does not wait for).
    None when the key ran no action.
    """
    from textual import events

    actions = len(clock.actions)
    start = time.perf_counter()
    app._driver.send_message(events.Key(key, key if len(key) == 1 else None))
    deadline = start + 5.0
    while len(clock.actions) == actions and time.perf_counter() < deadline:
        await asyncio.sleep(0.0005)
    if len(clock.actions) == actions:
        return None
    acted = clock.actions[actions]
    while time.perf_counter() < deadline:
        painted = [t for t in clock.paints if t >= acted]
        if painted:
            return painted[0] - start
        await asyncio.sleep(0.0005)
    return time.perf_counter() - start


async def in_lab(
    config, out: Path, presses: int, gap: float
) -> tuple[list[tuple[str, float]], float, Path]:
    app = make_app(out, config=config)
    latencies: list[tuple[str, float]] = []
    clock = PaintClock(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await asyncio.wait_for(app.menus_ready.wait(), 120)
        await pilot.press("ctrl+t")
        train = app.train_view
        while train.follower is None or len(train.follower.samples) < 2:
            await pilot.pause(0.1)  # the child imports torch, builds data, trains to its first eval
        # Give Inspect a matrix to move the cursor on (a logged sample, no model needed).
        app.query_one(InspectView).show_logged_sample(
            train.follower.run_dir, train.follower.samples[0]
        )
        for i in range(presses):
            if train.follower.finished:
                break
            key = KEYS[i % len(KEYS)]
            latency = await key_to_paint(app, clock, key)
            if latency is not None:
                latencies.append((key, latency))
            await pilot.pause()
            await asyncio.sleep(gap)
        while train.process is not None and train.process.poll() is None:
            await pilot.pause(0.2)
        run_dir = train.process.run_dir
    return latencies, tokens_per_s(run_dir), run_dir


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="reverse-bahdanau")
    parser.add_argument("--steps", type=int, default=900)
    parser.add_argument("--presses", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.15, help="seconds between key presses")
    args = parser.parse_args()

    config = apply_overrides(
        load_preset(args.preset),
        [f"train.max_steps={args.steps}", "train.eval_every=100", "train.device=cpu"],
    )
    out = Path(tempfile.mkdtemp(prefix="attnlab-tui-bench-"))
    preset_file = out / "preset.toml"
    from attnlab.config import dumps_toml

    preset_file.write_text(dumps_toml(config))
    t0 = time.time()
    base = headless(preset_file, out)
    print(f"headless: {base:,.0f} tokens/s ({time.time() - t0:.0f} s)")
    latencies, lab_tps, run_dir = asyncio.run(in_lab(config, out, args.presses, args.gap))
    ms = sorted(x * 1000 for _, x in latencies)
    by_key: dict[str, list[float]] = {}
    for key, x in latencies:
        by_key.setdefault(key, []).append(x * 1000)
    print(
        "per key (median / max ms): "
        + ", ".join(f"{k} {statistics.median(v):.0f}/{max(v):.0f}" for k, v in by_key.items())
    )
    p95 = ms[min(int(round(0.95 * (len(ms) - 1))), len(ms) - 1)]
    print(f"lab:      {lab_tps:,.0f} tokens/s = {lab_tps / base:.1%} of headless")
    print(
        f"key press -> screen updated over {len(ms)} presses during training: "
        f"median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, max {ms[-1]:.1f} ms"
    )
    ok = statistics.median(ms) < 100 and p95 < 250 and lab_tps >= 0.9 * base
    print(
        "PASS" if ok else "FAIL", "(targets: median < 100 ms, p95 < 250 ms, lab >= 90% of headless)"
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
