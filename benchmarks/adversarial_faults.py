"""Adversarial inputs and faults (issue 31), each run once with a time bound, then counted.

    OMP_NUM_THREADS=1 python benchmarks/adversarial_faults.py [--only 3,4] [--timeout 60]

The sibling of ``fault_injection.py`` (``kill -9`` inside saves): this one tries what a user,
a damaged disk or a hostile file can hand attnlab — DDP launchers killed with SIGKILL, FIFOs
and devices where files belong, sparse giants, crafted checkpoints and JSON, huge numbers,
unlinked logs — and checks each against what the docs promise. Every case runs its commands
as child processes with a timeout and reports:

* hang: a command outlived its bound (it is killed);
* traceback: a command printed a Python traceback where one ``error:`` line is promised;
* orphan: a process of the case still ran after its command ended (killed, then counted);
* silent wrong: exit 0 (or a success) where the input must be refused, or a wrong result;
* unbounded: a command's peak memory (ru_maxrss) passed ``--max-rss-mb``.

The last line gives the totals; the goal is zero in every column.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TINY = (
    "data.train_size=64",
    "data.dev_size=8",
    "data.test_size=8",
    "data.max_len=8",
    "model.hidden=16",
    "model.emb=8",
    "train.batch_size=16",
    "train.samples=0",
    "train.eval_sentences=8",
    "train.log_every=1",
    "train.device=cpu",
    "train.threads=1",
)
LONG = ("train.max_steps=100000", "train.eval_every=100000")


@dataclass
class Ran:
    code: int | None  # None: killed at the bound (a hang)
    out: str
    err: str
    seconds: float
    max_rss_mb: float


@dataclass
class Outcome:
    item: int
    name: str
    hang: int = 0
    traceback: int = 0
    orphan: int = 0
    silent_wrong: int = 0
    unbounded: int = 0
    notes: list[str] = field(default_factory=list)

    def bad(self, kind: str, note: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        self.notes.append(f"{kind}: {note}")


class Bench:
    def __init__(self, work: Path, timeout: float, max_rss_mb: float) -> None:
        self.work = work
        self.timeout = timeout
        self.max_rss_mb = max_rss_mb
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
            "ATTNLAB_CACHE": str(work / "cache"),
            "COLUMNS": "120",
        }

    # -- running commands ------------------------------------------------------------------

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen:
        return subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=kw.pop("stdin", subprocess.DEVNULL),
            text=True,
            env={**self.env, **kw.pop("env", {})},
            start_new_session=True,
            **kw,
        )

    def run(self, args: list[str], timeout: float | None = None, stdin: str | None = None) -> Ran:
        """``python -m attnlab ARGS`` with a bound; its peak memory from wait4."""
        argv = [sys.executable, "-m", "attnlab", *args]
        began = time.monotonic()
        proc = self.popen(argv, stdin=subprocess.PIPE if stdin is not None else None)
        try:
            out, err = proc.communicate(stdin, timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, err = proc.communicate()
            return Ran(None, out, err, time.monotonic() - began, 0.0)
        rss = _child_rss_mb()
        return Ran(proc.returncode, out, err, time.monotonic() - began, rss)

    def train_run(self, name: str, *sets: str, steps: int = 2) -> Path:
        """A finished tiny run (the base many cases copy)."""
        items = (*TINY, f"train.max_steps={steps}", f"train.eval_every={steps}", *sets)
        args = ["train", "--quiet", "--out", str(self.work), "--run-name", name]
        ran = self.run(args + [a for s in items for a in ("--set", s)], timeout=300)
        if ran.code != 0:
            sys.exit(f"could not train the base run {name}: {ran.err[-2000:]}")
        return self.work / name

    def copy_run(self, base: Path, name: str) -> Path:
        target = self.work / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(base, target, symlinks=True)
        return target


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


_RSS_SEEN = [0.0]


def _child_rss_mb() -> float:
    """Peak RSS of the largest child so far (RUSAGE_CHILDREN is a maximum over children):
    reported per case as the growth over what was seen before."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    grew = peak if peak > _RSS_SEEN[0] else 0.0
    _RSS_SEEN[0] = max(_RSS_SEEN[0], peak)
    return grew


def judge(
    o: Outcome, ran: Ran, *, refused: bool, needle: str | None = None, one_line: bool = True
) -> None:
    """Score one command: bounded, no traceback, refused (or not) as promised."""
    if ran.code is None:
        o.bad("hang", f"no answer in {ran.seconds:.0f} s")
        return
    if "Traceback (most recent call last)" in ran.err + ran.out:
        o.bad("traceback", _last_line(ran.err))
    if ran.max_rss_mb and ran.max_rss_mb > 0 and ran.max_rss_mb > o_max_rss[0]:
        o.bad("unbounded", f"peak memory {ran.max_rss_mb:.0f} MB")
    errors = [line for line in ran.err.splitlines() if line.startswith("error:")]
    if refused:
        if ran.code == 0:
            o.bad("silent_wrong", f"exit 0 where a refusal is promised: {_last_line(ran.out)}")
        elif one_line and len(errors) != 1:
            o.bad("traceback", f"{len(errors)} error lines: {errors[:2]}")
        elif needle and not any(needle in e for e in errors):
            o.bad("silent_wrong", f"the error does not say {needle!r}: {errors[:1]}")
    elif ran.code != 0:
        o.bad("silent_wrong", f"exit {ran.code}: {_last_line(ran.err)}")


o_max_rss = [1024.0]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _processes_naming(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                argv = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
            if text in argv:
                pids.append(int(entry.name))
    return pids


def count_orphans(o: Outcome, marker: str, grace_s: float = 15.0) -> None:
    end = time.monotonic() + grace_s
    while time.monotonic() < end and _processes_naming(marker):
        time.sleep(0.2)
    left = _processes_naming(marker)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if left:
        o.bad("orphan", f"{len(left)} processes outlived their parent")


def _wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _stepped(run_dir: Path) -> bool:
    events = run_dir / "events.jsonl"
    try:
        return events.is_file() and '"type": "step"' in events.read_text(errors="replace")
    except OSError:
        return False


def _events(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    try:
        data = (run_dir / "events.jsonl").read_bytes()
    except OSError:
        return out
    for line in data.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


# -- item 1: DDP processes die with their launcher -----------------------------------------


def ddp_start(b: Bench, name: str) -> tuple[subprocess.Popen, Path]:
    args = [sys.executable, "-m", "attnlab", "train", "--nproc", "2", "--quiet"]
    args += ["--out", str(b.work / name), "--run-name", "r"]
    args += [a for s in (*TINY, *LONG) for a in ("--set", s)]
    proc = b.popen(args)
    return proc, b.work / name / "r"


def case_ddp_kill(b: Bench, victim: str) -> Outcome:
    o = Outcome(1, f"kill -9 of the DDP {victim}")
    marker = str(b.work / f"ddp-{victim}")
    proc, run_dir = ddp_start(b, f"ddp-{victim}")
    try:
        if not _wait_for(lambda: _stepped(run_dir), 180):
            o.bad("hang", "no step within 180 s")
            return o
        ranks = [
            p
            for p in _processes_naming(marker)
            if "--nproc" not in _cmd(p) and "torchrun_entry" not in _cmd(p)
        ]
        if victim == "launcher":
            os.kill(proc.pid, signal.SIGKILL)
        elif victim == "torchrun":
            (agent,) = [p for p in _processes_naming(marker) if "torchrun_entry" in _cmd(p)]
            os.kill(agent, signal.SIGKILL)
        else:
            os.kill(max(ranks), signal.SIGKILL)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            o.bad("hang", "the launcher did not end within 60 s")
            err = ""
        if victim == "rank":
            errors = [line for line in err.splitlines() if line.startswith("error:")]
            if "Traceback" in err:
                o.bad("traceback", "a killed rank printed tracebacks")
            if len(errors) != 1 or "died of SIGKILL" not in errors[0]:
                o.bad("silent_wrong", f"not one line naming the rank: {errors}")
    finally:
        count_orphans(o, marker)
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
    return o


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# -- item 2 and 8: crafted checkpoints ------------------------------------------------------


def _rewrite_safetensors(path: Path, edit: Callable[[dict, bytearray], bytes | None]) -> None:
    """Rewrite a safetensors file's JSON header (and optionally its data) with ``edit``."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = bytearray(raw[8 + size :])
    new_data = edit(header, data)
    if new_data is not None:
        data = bytearray(new_data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(data))


def case_checkpoint(b: Bench, base: Path, name: str, item: int, edit, needle: str) -> Outcome:
    o = Outcome(item, name)
    run = b.copy_run(base, f"ckpt-{name.replace(' ', '-')[:40]}")
    model = run / "checkpoints" / "last" / "model.safetensors"
    _rewrite_safetensors(model, edit)
    for command in _readers(b, run):
        judge(o, b.run(command, timeout=30), refused=True, needle=needle)
    return o


def _readers(b: Bench, run: Path) -> list[list[str]]:
    """eval and export of ``run``'s last checkpoint (the one the cases damage)."""
    out = b.work / "exports" / f"{run.name}.safetensors"
    return [
        ["eval", str(run / "checkpoints" / "last"), "--device", "cpu"],
        ["export", str(run), "--checkpoint", "last", "--out", str(out), "--force"],
    ]


def extra_huge_tensor(header: dict, data: bytearray) -> None:
    header["zz.extra"] = {"dtype": "F32", "shape": [0, 2**30], "data_offsets": [len(data)] * 2}


def dtype_lie(header: dict, data: bytearray) -> None:
    name = next(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")
    header[name]["dtype"] = "I32"


def nan_weights(header: dict, data: bytearray) -> bytes:
    name = next(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")
    start, end = header[name]["data_offsets"]
    nan = struct.pack("<f", float("nan"))
    data[start:end] = nan * ((end - start) // 4)
    return bytes(data)


# -- item 3: special files ------------------------------------------------------------------


def case_fifo(b: Bench, base: Path, where: str) -> Outcome:
    o = Outcome(3, f"FIFO as {where}")
    run = b.copy_run(base, f"fifo-{where.replace('/', '-')}")
    target = run / where
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink(missing_ok=True)
    os.mkfifo(target)
    if where == "events.jsonl":
        ran = b.run(["runs", str(b.work)], timeout=30)
        judge(o, ran, refused=False)  # a warning, the other runs still listed
        if "FIFO" not in ran.err:
            o.bad("silent_wrong", "no warning names the FIFO")
    else:
        for command in _readers(b, run):
            judge(o, b.run(command, timeout=30), refused=True, needle="FIFO")
    return o


def case_fifo_control(b: Bench) -> Outcome:
    """A FIFO as RUN/control while training: the trainer must go on (and finish)."""
    o = Outcome(3, "FIFO as RUN/control during training")
    name = "fifo-control"
    args = [sys.executable, "-m", "attnlab", "train", "--quiet", "--out", str(b.work)]
    items = (*TINY, "train.max_steps=40", "train.eval_every=40")
    args += ["--run-name", name, *[a for s in items for a in ("--set", s)]]
    proc = b.popen(args)
    run_dir = b.work / name
    try:
        if _wait_for(lambda: _stepped(run_dir), 120):
            control = run_dir / "control"
            control.unlink(missing_ok=True)
            os.mkfifo(control)
        _, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            o.bad("silent_wrong", f"training exited {proc.returncode}: {_last_line(err)}")
        if "Traceback" in err:
            o.bad("traceback", _last_line(err))
    except subprocess.TimeoutExpired:
        o.bad("hang", "training did not finish with a FIFO as its control file")
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
    return o


def case_corpus_special(b: Bench, kind: str) -> Outcome:
    o = Outcome(3 if kind == "fifo" else 4, f"{kind} as a corpus file")
    folder = b.work / f"corpus-{kind.strip('/').replace('/', '-')}"
    folder.mkdir(exist_ok=True)
    (folder / "c.de").write_text("ein hund\nzwei katzen\n" * 10)
    tgt = folder / "c.en"
    tgt.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(tgt)
    else:
        tgt.symlink_to("/dev/zero")
    sets = ["--set", f"data.src_file={folder / 'c.de'}", "--set", f"data.tgt_file={tgt}"]
    judge(
        o,
        b.run(["data", "stats", "--set", "data.task=corpus", *sets], timeout=30),
        refused=True,
        needle="not a regular file",
    )
    return o


# -- item 4: reads without bound ------------------------------------------------------------


def case_sparse_control(b: Bench) -> Outcome:
    o = Outcome(4, "3 GB sparse RUN/control during training")
    name = "sparse-control"
    args = [sys.executable, "-m", "attnlab", "train", "--quiet", "--out", str(b.work)]
    items = (*TINY, "train.max_steps=30", "train.eval_every=30")
    args += ["--run-name", name, *[a for s in items for a in ("--set", s)]]
    proc = b.popen(args)
    run_dir = b.work / name
    try:
        if _wait_for(lambda: _stepped(run_dir), 120):
            with open(run_dir / "control", "wb") as handle:
                handle.truncate(3 << 30)
        _, err = proc.communicate(timeout=120)
        rss = _child_rss_mb()
        if rss > o_max_rss[0]:
            o.bad("unbounded", f"peak memory {rss:.0f} MB")
        if proc.returncode != 0:
            o.bad("silent_wrong", f"training exited {proc.returncode}: {_last_line(err)}")
        if "Traceback" in err:
            o.bad("traceback", _last_line(err))
    except subprocess.TimeoutExpired:
        o.bad("hang", "training did not finish")
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
    return o


def case_sparse_events(b: Bench, base: Path) -> Outcome:
    o = Outcome(4, "2 GB sparse events.jsonl")
    run = b.copy_run(base, "sparse-events")
    with open(run / "events.jsonl", "ab") as handle:
        handle.truncate(handle.tell() + (2 << 30))
    ran = b.run(["runs", str(run.parent)], timeout=60)
    judge(o, ran, refused=False)
    return o


# -- item 5: tracebacks where one line is promised -------------------------------------------


def case_json(b: Bench, base: Path, file: str, content: str, name: str) -> Outcome:
    o = Outcome(5, name)
    run = b.copy_run(base, f"json-{name.replace(' ', '-')[:40]}")
    path = run / "checkpoints" / "last" / file
    path.write_text(content)
    if file == "trainer_state.json":
        ran = b.run(["train", "--resume", str(run), "--quiet", "--set", "train.max_steps=4"])
        judge(o, ran, refused=True, needle=file)
    else:
        for command in _readers(b, run):
            judge(o, b.run(command, timeout=30), refused=True, needle=file)
    return o


def case_cli_refusal(b: Bench, item: int, name: str, args: list[str], needle: str) -> Outcome:
    o = Outcome(item, name)
    judge(o, b.run(args, timeout=60), refused=True, needle=needle)
    return o


def case_inconsistent_cache(b: Bench) -> Outcome:
    o = Outcome(5, "valid JSON but inconsistent corpus cache")
    folder = b.work / "corpus-cache"
    folder.mkdir(exist_ok=True)
    lines = [f"satz {i} mit wort {i % 7}" for i in range(60)]
    (folder / "c.de").write_text("\n".join(lines) + "\n")
    (folder / "c.en").write_text("\n".join(s.replace("satz", "sentence") for s in lines) + "\n")
    sets = ["--set", "data.task=corpus", "--set", f"data.src_file={folder / 'c.de'}"]
    sets += ["--set", f"data.tgt_file={folder / 'c.en'}", "--json"]
    first = b.run(["data", "stats", *sets])
    judge(o, first, refused=False)
    if first.code != 0:
        return o
    cache = Path(json.loads(first.out)["cache_file"])
    payload = json.loads(cache.read_text())
    payload["pairs"]["train"] = payload["pairs"]["train"][:-1]
    cache.write_text(json.dumps(payload))
    judge(o, b.run(["data", "stats", *sets]), refused=False)
    return o


# -- item 7: length caps ---------------------------------------------------------------------


def case_long_dev_line(b: Bench) -> Outcome:
    o = Outcome(7, "100,000-token dev line")
    folder = b.work / "corpus-long"
    folder.mkdir(exist_ok=True)
    for split, n in (("train", 64), ("dev", 8), ("test", 8)):
        lines = [f"{split} satz {i} wort {i % 5}" for i in range(n)]
        targets = [f"{split} sentence {i} word {i % 5}" for i in range(n)]
        if split == "dev":
            lines[0] = " ".join(["wort"] * 100_000)
        (folder / f"{split}.de").write_text("\n".join(lines) + "\n")
        (folder / f"{split}.en").write_text("\n".join(targets) + "\n")
    items = (
        *TINY[4:],
        "data.task=corpus",
        f"data.path={folder}",
        "train.max_steps=2",
        "train.eval_every=2",
    )
    args = ["train", "--quiet", "--out", str(b.work), "--run-name", "long-dev"]
    ran = b.run(args + [a for s in items for a in ("--set", s)], timeout=120)
    judge(o, ran, refused=False)
    return o


def case_long_translate(b: Bench, base: Path) -> Outcome:
    o = Outcome(7, "50,000-token translate line")
    line = " ".join(str(i % 10) for i in range(50_000))
    ran = b.run(["translate", str(base), "--device", "cpu"], timeout=60, stdin=line + "\n")
    judge(o, ran, refused=False)
    if ran.code == 0 and "cut to" not in ran.err:
        o.bad("silent_wrong", "no warning counts the cut line")
    return o


# -- item 8: silent wrong results ------------------------------------------------------------


def case_duplicate_vocab(b: Bench, base: Path) -> Outcome:
    o = Outcome(8, "duplicate token in meta.json's vocabulary")
    run = b.copy_run(base, "dup-vocab")
    meta_file = run / "checkpoints" / "last" / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["dataset"]["src_vocab"][5] = meta["dataset"]["src_vocab"][4]
    meta_file.write_text(json.dumps(meta))
    judge(o, b.run(_readers(b, run)[0]), refused=True, needle="appears twice")
    return o


def case_average_vocab(b: Bench, kept: Path) -> Outcome:
    o = Outcome(8, "average of copies with other same-size vocabularies")
    run = b.copy_run(kept, "avg-vocab")
    copies = sorted((run / "checkpoints").glob("step-*"))
    meta_file = copies[0] / "meta.json"
    meta = json.loads(meta_file.read_text())
    vocab = meta["dataset"]["tgt_vocab"]
    vocab[4], vocab[5] = vocab[5], vocab[4]
    meta_file.write_text(json.dumps(meta))
    out = b.work / "avg.safetensors"
    ran = b.run(["average", str(run), "--last", "2", "--out", str(out)])
    judge(o, ran, refused=True, needle="differs")
    return o


def case_integer(b: Bench) -> Outcome:
    o = Outcome(8, "integers: 1e23 steps refused, 1e3 and 0x10 consistent")
    huge = b.run(
        [
            "train",
            "--out",
            str(b.work / "ints"),
            "--set",
            "train.max_steps=99999999999999999999999",
            "--set",
            "train.device=cpu",
        ]
    )
    judge(o, huge, refused=True, needle="out of range")
    sci = b.run(
        [
            "train",
            "--out",
            str(b.work / "ints"),
            "--set",
            "train.max_steps=1e3",
            "--set",
            "train.device=cpu",
        ]
    )
    judge(o, sci, refused=True, needle="must be an integer")
    return o


def case_unknown_control(b: Bench) -> Outcome:
    o = Outcome(8, "unknown control word leaves a note")
    name = "control-word"
    args = [sys.executable, "-m", "attnlab", "train", "--quiet", "--out", str(b.work)]
    items = (*TINY, "train.max_steps=40", "train.eval_every=40")
    args += ["--run-name", name, *[a for s in items for a in ("--set", s)]]
    proc = b.popen(args)
    run_dir = b.work / name
    try:
        if _wait_for(lambda: _stepped(run_dir), 120):
            (run_dir / "control").write_text("explode\n")
        proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        o.bad("hang", "training did not finish")
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
    notes = [e for e in _events(run_dir) if e.get("type") == "note"]
    if not any("explode" in str(e.get("message", "")) for e in notes):
        o.bad("silent_wrong", "the unknown control word left no note event")
    return o


# -- item 9: events.jsonl deleted during training --------------------------------------------


def case_deleted_events(b: Bench) -> Outcome:
    o = Outcome(9, "events.jsonl deleted during training")
    name = "deleted-events"
    args = [sys.executable, "-m", "attnlab", "train", "--quiet", "--out", str(b.work)]
    items = (*TINY, "train.max_steps=40", "train.eval_every=20")
    args += ["--run-name", name, *[a for s in items for a in ("--set", s)]]
    proc = b.popen(args)
    run_dir = b.work / name
    try:
        if _wait_for(lambda: _stepped(run_dir), 120):
            (run_dir / "events.jsonl").unlink()
        proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        o.bad("hang", "training did not finish")
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
    events = _events(run_dir)
    done = [e for e in events if e.get("type") == "done"]
    if not done or done[-1].get("reason") != "finished":
        o.bad("silent_wrong", "the new log has no done=finished event")
    if not any(e.get("type") == "note" and "events.jsonl" in str(e.get("message")) for e in events):
        o.bad("silent_wrong", "no note says the log was started again")
    listed = b.run(["runs", str(b.work)])
    judge(o, listed, refused=False)
    row = [line for line in listed.out.splitlines() if name in line]
    if not row or "error" in row[0]:
        o.bad("silent_wrong", f"attnlab runs shows it as: {row[:1]}")
    return o


# -- item 10 and 11: failed saves, a symlinked last -----------------------------------------


def case_unwritable_save(b: Bench, base: Path) -> Outcome:
    """An immutable checkpoints/last (chattr +i: root too is refused), else read-only."""
    o = Outcome(10, "a checkpoint save that fails (immutable checkpoints/last)")
    run = b.copy_run(base, "readonly-save")
    checkpoints = run / "checkpoints" / "last"
    immutable = subprocess.run(["chattr", "+i", str(checkpoints)], capture_output=True)
    if immutable.returncode != 0:
        os.chmod(checkpoints, 0o555)
    try:
        ran = b.run(["train", "--resume", str(run), "--quiet", "--set", "train.max_steps=4"])
    finally:
        if immutable.returncode == 0:
            subprocess.run(["chattr", "-i", str(checkpoints)], capture_output=True)
        os.chmod(checkpoints, 0o755)
    judge(o, ran, refused=True)
    if ran.code not in (None, 1):
        o.bad("silent_wrong", f"exit {ran.code}; run-directory.md maps the error done reason to 1")
    return o


def case_symlinked_last(b: Bench, base: Path) -> Outcome:
    o = Outcome(11, "resume with checkpoints/last a symlink")
    run = b.copy_run(base, "symlink-last")
    last = run / "checkpoints" / "last"
    real = run / "checkpoints" / "real-last"
    last.rename(real)
    last.symlink_to("real-last")
    ran = b.run(["train", "--resume", str(run), "--quiet", "--set", "train.max_steps=4"])
    judge(o, ran, refused=False)
    left = [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".last.")]
    if left:
        o.bad("silent_wrong", f"left behind: {left}")
    if not real.is_dir():
        o.bad("silent_wrong", "the symlink's target was removed (followed)")
    return o


# -- items 12, 13 ----------------------------------------------------------------------------


def case_cache_mode(b: Bench) -> Outcome:
    o = Outcome(12, "corpus cache files get the umask's mode")
    folder = b.work / "corpus-cache"
    sets = ["--set", "data.task=corpus", "--set", f"data.src_file={folder / 'c.de'}"]
    sets += ["--set", f"data.tgt_file={folder / 'c.en'}", "--json"]
    ran = b.run(["data", "stats", *sets])
    judge(o, ran, refused=False)
    if ran.code == 0:
        mode = Path(json.loads(ran.out)["cache_file"]).stat().st_mode & 0o777
        umask = os.umask(0)
        os.umask(umask)
        if mode != 0o666 & ~umask:
            o.bad("silent_wrong", f"mode {mode:o}, umask {umask:03o}")
    return o


def case_identical_sources(b: Bench) -> Outcome:
    o = Outcome(13, "300 identical source lines")
    tsv = b.work / "same.tsv"
    tsv.write_text("same line\tgleich\n" * 300)
    ran = b.run(["data", "stats", str(tsv)])
    judge(o, ran, refused=True, needle="distinct")
    return o


def case_meta_task_corpus(b: Bench, base: Path) -> Outcome:
    o = Outcome(13, "meta.json claiming data.task=corpus")
    run = b.copy_run(base, "meta-corpus")
    meta_file = run / "checkpoints" / "last" / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["config"]["data"]["task"] = "corpus"
    meta_file.write_text(json.dumps(meta))
    judge(o, b.run(_readers(b, run)[0]), refused=True, needle="meta.json")
    return o


# -- the list ---------------------------------------------------------------------------------


def cases(b: Bench) -> list[tuple[int, Callable[[], Outcome]]]:
    base = b.train_run("base")
    kept = b.train_run("kept", "train.keep_last=2", "train.eval_every=2", steps=4)
    deep = "[" * 100_000 + "]" * 100_000
    digits = '{"step": ' + "9" * 5000 + "}"
    return [
        (1, lambda: case_ddp_kill(b, "launcher")),
        (1, lambda: case_ddp_kill(b, "torchrun")),
        (1, lambda: case_ddp_kill(b, "rank")),
        (
            2,
            lambda: case_checkpoint(
                b, base, "extra [0, 2^30] tensor", 2, extra_huge_tensor, "zz.extra"
            ),
        ),
        (8, lambda: case_checkpoint(b, base, "dtype relabelled F32 -> I32", 8, dtype_lie, "I32")),
        (8, lambda: case_checkpoint(b, base, "NaN weights", 8, nan_weights, "finite")),
        (3, lambda: case_fifo(b, base, "events.jsonl")),
        (3, lambda: case_fifo(b, base, "checkpoints/last/model.safetensors")),
        (3, lambda: case_fifo(b, base, "checkpoints/last/meta.json")),
        (3, lambda: case_fifo_control(b)),
        (3, lambda: case_corpus_special(b, "fifo")),
        (4, lambda: case_corpus_special(b, "/dev/zero")),
        (4, lambda: case_sparse_control(b)),
        (4, lambda: case_sparse_events(b, base)),
        (5, lambda: case_json(b, base, "meta.json", deep, "deep meta.json")),
        (5, lambda: case_json(b, base, "meta.json", digits, "5000-digit number in meta.json")),
        (5, lambda: case_json(b, base, "trainer_state.json", deep, "deep trainer_state.json")),
        (
            5,
            lambda: case_json(
                b, base, "trainer_state.json", digits, "5000-digit trainer_state.json"
            ),
        ),
        (
            5,
            lambda: case_cli_refusal(
                b,
                5,
                "--seed 2**70",
                ["train", "--out", str(b.work / "s"), "--seed", str(2**70), "--device", "cpu"],
                "train.seed",
            ),
        ),
        (5, lambda: case_inconsistent_cache(b)),
        (
            6,
            lambda: case_cli_refusal(
                b,
                6,
                "train.threads=100000",
                ["train", "--out", str(b.work / "t"), "--set", "train.threads=100000"],
                "train.threads",
            ),
        ),
        (7, lambda: case_long_dev_line(b)),
        (7, lambda: case_long_translate(b, base)),
        (8, lambda: case_duplicate_vocab(b, base)),
        (8, lambda: case_average_vocab(b, kept)),
        (8, lambda: case_integer(b)),
        (8, lambda: case_unknown_control(b)),
        (9, lambda: case_deleted_events(b)),
        (10, lambda: case_unwritable_save(b, base)),
        (11, lambda: case_symlinked_last(b, base)),
        (12, lambda: case_cache_mode(b)),
        (13, lambda: case_identical_sources(b)),
        (13, lambda: case_meta_task_corpus(b, base)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated item numbers (default all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="bound per command (s)")
    parser.add_argument("--max-rss-mb", type=float, default=1024.0, help="peak memory bound")
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (temp)")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="attnlab-adversarial-"))
    o_max_rss[0] = args.max_rss_mb
    only = {int(x) for x in args.only.split(",") if x.strip()}
    bench = Bench(work, args.timeout, args.max_rss_mb)
    began = time.perf_counter()
    rows: list[Outcome] = []
    for item, case in cases(bench):
        if only and item not in only:
            continue
        try:
            outcome = case()
        except Exception as err:  # the bench itself failed on this case: count it, go on
            outcome = Outcome(item, getattr(case, "__name__", "case"))
            outcome.bad("silent_wrong", f"the case could not run: {type(err).__name__}: {err}")
        rows.append(outcome)
        status = "ok" if not outcome.notes else "; ".join(outcome.notes)
        print(f"  [{outcome.item:>2}] {outcome.name}: {status}", file=sys.stderr, flush=True)
    columns = ("hang", "traceback", "orphan", "silent_wrong", "unbounded")
    print("| item | case | " + " | ".join(columns) + " |")
    print("|---:|---|" + "---:|" * len(columns))
    for r in rows:
        print(f"| {r.item} | {r.name} | " + " | ".join(str(getattr(r, c)) for c in columns) + " |")
    totals = {c: sum(getattr(r, c) for r in rows) for c in columns}
    print(
        f"{len(rows)} cases in {time.perf_counter() - began:.0f} s: "
        + ", ".join(f"{totals[c]} {c.replace('_', ' ')}" for c in columns)
        + f" (runs in {work})"
    )
    if args.json:
        print(json.dumps({"totals": totals, "rows": [r.__dict__ for r in rows]}))


if __name__ == "__main__":
    main()
