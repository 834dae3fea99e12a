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
* unbounded: a command's peak memory (ru_maxrss) passed ``--max-rss-mb``;
* data lost: a file the user did not ask to replace was deleted or changed.

Issue 43's cases (``--issue 43``: output paths, ``--force``, studies, standard input) follow
issue 31's; ``--only`` picks items within the chosen issues. The last line gives the totals;
the goal is zero in every column.
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
TINY_TRANSFORMER = (
    "model.arch=transformer",
    "model.d_model=16",
    "model.heads=2",
    "model.ff=32",
    "model.enc_layers=1",
    "model.dec_layers=1",
)


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
    issue: int = 31  # the issue whose list numbers ``item`` (31, or 43)
    data_lost: int = 0
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

    def run(
        self,
        args: list[str],
        timeout: float | None = None,
        stdin: str | None = None,
        cwd: Path | None = None,
    ) -> Ran:
        """``python -m attnlab ARGS`` with a bound; its peak memory from wait4."""
        argv = [sys.executable, "-m", "attnlab", *args]
        began = time.monotonic()
        proc = self.popen(argv, stdin=subprocess.PIPE if stdin is not None else None, cwd=cwd)
        try:
            out, err = proc.communicate(stdin, timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, err = proc.communicate()
            return Ran(None, out, err, time.monotonic() - began, 0.0)
        rss = _child_rss_mb()
        return Ran(proc.returncode, out, err, time.monotonic() - began, rss)

    def train_run(self, name: str, *sets: str, steps: int = 2) -> Path:
        """A finished tiny run (the base many cases copy); one already in ``--work`` is reused."""
        if (self.work / name / "checkpoints" / "last").is_dir():
            return self.work / name
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
        ran = b.run(["runs", str(b.work), "--verbose"], timeout=30)
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


# -- issue 43: never destroy what the user did not ask to replace -----------------------------


def _digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` (or ``root`` itself) -> sha256 of its bytes; a symlink -> its
    target's text, never followed."""
    import hashlib

    if root.is_symlink():
        return {".": "-> " + os.readlink(root)}
    if not root.is_dir():
        return {".": hashlib.sha256(root.read_bytes()).hexdigest()} if root.is_file() else {}
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def kept(o: Outcome, before: dict[str, str], root: Path) -> None:
    """data lost: a file of ``before`` is gone or changed under ``root`` (new ones are fine)."""
    after = _digest(root)
    lost = [k for k, v in before.items() if after.get(k) != v]
    if lost:
        o.bad("data_lost", f"{len(lost)} of {len(before)} files under {root.name} lost: {lost[:3]}")


def _user_folder(root: Path) -> Path:
    """A folder of the user's own: a file and a sub-folder with a file."""
    (root / "sub").mkdir(parents=True, exist_ok=True)
    (root / "mine.txt").write_text("the user's\n")
    (root / "sub" / "notes.md").write_text("also the user's\n")
    return root


def case_ct2_force(b: Bench, tf: Path, where: str) -> Outcome:
    o = Outcome(1, f"export --format ctranslate2 --force --out {where}", issue=43)
    export = ["export", str(tf), "--format", "ctranslate2", "--force", "--out"]
    if where == ".":
        folder = _user_folder(b.work / "ct2-cwd")
        ran, guarded = b.run([*export, "."], cwd=folder), folder
    elif where == "some/..":
        folder = _user_folder(b.work / "ct2-parent")
        ran, guarded = b.run([*export, "sub/.."], cwd=folder), folder
    elif where == "RUN":
        guarded = tf
        before = _digest(tf)
        ran = b.run([*export, str(tf)])
        judge(o, ran, refused=True)
        kept(o, before, tf)
        return o
    else:  # a folder of the user's files
        guarded = _user_folder(b.work / "ct2-user")
        ran = b.run([*export, str(guarded)])
    before = _digest(guarded)
    judge(o, ran, refused=True)
    kept(o, before, guarded)
    return o


def case_bundle_over_run(b: Bench, run: Path, command: str) -> Outcome:
    o = Outcome(1, f"{command} --out RUN/checkpoints/last/model.safetensors --force", issue=43)
    weights = run / "checkpoints" / "last" / "model.safetensors"
    before = _digest(run / "checkpoints")
    extra = ["--last", "2"] if command == "average" else ["--checkpoint", "last"]
    ran = b.run([command, str(run), *extra, "--out", str(weights), "--force"])
    judge(o, ran, refused=True, needle="run or study directory")
    kept(o, before, run / "checkpoints")
    return o


def _study_text(name: str, seeds: int, grid: str, *sets: str) -> str:
    items = ", ".join(f'"{s}"' for s in (*TINY, *sets))
    return f'name = "{name}"\npreset = "reverse-bahdanau"\nseeds = {seeds}\nset = [{items}]\n{grid}'


def case_study_unsaved_run(b: Bench) -> Outcome:
    """A study's run folder that saved no checkpoint, holding the user's file: the rerun
    removed the folder whole (shutil.rmtree)."""
    o = Outcome(1, "study run over an unsaved run folder holding the user's file", issue=43)
    spec = b.work / "unsaved.toml"
    spec.write_text(_study_text("unsaved", 1, '[grid]\n"train.lr" = [1e-3]\n', "train.max_steps=2"))
    run = b.work / "studies-unsaved" / "unsaved" / "1e-3-s1"
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text("")
    (run / "notes.txt").write_text("the user's\n")
    before = _digest(run / "notes.txt")
    ran = b.run(["study", "run", str(spec), "--out", str(run.parents[1])], timeout=120)
    if ran.code is None:
        o.bad("hang", "no answer")
    if "notes.txt" not in ran.out + ran.err:
        o.bad("silent_wrong", f"the refusal does not name notes.txt: {_last_line(ran.out)}")
    kept(o, before, run / "notes.txt")
    return o


class _FifoReader:
    """Reads a FIFO to its end in a thread (what a ``cat`` on the other side would do)."""

    def __init__(self, path: Path) -> None:
        import threading

        self.data = b""
        self.thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self.thread.start()

    def _read(self, path: Path) -> None:
        with open(path, "rb") as handle:
            self.data = handle.read()


def case_output_special(b: Bench, base: Path, kind: str) -> Outcome:
    o = Outcome(2, f"eval --hyps {kind}", issue=43)
    target = b.work / f"hyps-{kind.replace(' ', '-')}"
    evaluate = ["eval", str(base), "--device", "cpu", "--hyps"]
    if kind == "FIFO with a reader":
        os.mkfifo(target)
        reader = _FifoReader(target)
        ran = b.run([*evaluate, str(target)])
        reader.thread.join(10)
        judge(o, ran, refused=False)
        if not stat_is_fifo(target):
            o.bad("data_lost", "the FIFO was replaced by a file")
        elif (got := reader.data.count(b"\n")) != 8:  # the tiny test split's 8 hypotheses
            o.bad("silent_wrong", f"the reader got {got} lines, not 8")
    elif kind == "FIFO without a reader":
        os.mkfifo(target)
        judge(o, b.run([*evaluate, str(target)]), refused=True)
        if not stat_is_fifo(target):
            o.bad("data_lost", "the FIFO was replaced by a file")
    elif kind == "symlink":
        real = b.work / "hyps-real.txt"
        real.write_text("old\n")
        target.symlink_to(real)
        judge(o, b.run([*evaluate, str(target)]), refused=False)
        if not target.is_symlink():
            o.bad("data_lost", "the symlink was replaced by a file")
        elif real.read_text().count("\n") != 8:
            o.bad("silent_wrong", "the symlink's target was not written")
    else:  # a folder
        _user_folder(target)
        before = _digest(target)
        judge(o, b.run([*evaluate, str(target)]), refused=True, needle="folder")
        kept(o, before, target)
    return o


def stat_is_fifo(path: Path) -> bool:
    import stat

    return path.exists() and stat.S_ISFIFO(os.lstat(path).st_mode)


def case_refs_over_events(b: Bench, base: Path) -> Outcome:
    o = Outcome(3, "eval --refs RUN/events.jsonl", issue=43)
    run = b.copy_run(base, "refs-over-events")
    before = _digest(run)
    ran = b.run(["eval", str(run), "--device", "cpu", "--refs", str(run / "events.jsonl")])
    judge(o, ran, refused=True, needle="events.jsonl")
    kept(o, before, run)
    return o


def case_translate_zero(b: Bench, base: Path) -> Outcome:
    o = Outcome(4, "translate < /dev/zero", issue=43)
    began = time.monotonic()
    with open("/dev/zero", "rb") as zero:
        proc = subprocess.Popen(
            [sys.executable, "-m", "attnlab", "translate", str(base), "--device", "cpu"],
            stdin=zero,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=b.env,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=b.timeout)
            ran = Ran(proc.returncode, out, err, time.monotonic() - began, _child_rss_mb())
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, err = proc.communicate()
            ran = Ran(None, out, err, time.monotonic() - began, 0.0)
    judge(o, ran, refused=True, needle="longer than")
    return o


def case_translate_stream(b: Bench, base: Path) -> Outcome:
    """Short lines through a pipe that stays open: the first translations must come before it
    closes (a collect-all reader prints nothing until EOF); then 20,000 lines, bounded."""
    import select

    o = Outcome(4, "translate on a stream of short lines", issue=43)
    proc = b.popen(
        [sys.executable, "-m", "attnlab", "translate", str(base), "--device", "cpu"],
        stdin=subprocess.PIPE,
    )
    try:
        proc.stdin.write("5 9 2 7\n" * 300)
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], b.timeout)
        if not ready:
            o.bad("hang", f"no output in {b.timeout:.0f} s while stdin stayed open")
    finally:
        _kill_group(proc.pid)
        proc.communicate()
    lines = "".join(f"{i % 10} {(i // 10) % 10} 3\n" for i in range(20_000))
    ran = b.run(["translate", str(base), "--device", "cpu"], stdin=lines, timeout=300)
    judge(o, ran, refused=False)
    if ran.code == 0 and len(ran.out.splitlines()) != 20_000:
        o.bad("silent_wrong", f"{len(ran.out.splitlines())} lines out for 20,000 in")
    return o


def case_big_grid(b: Bench) -> Outcome:
    o = Outcome(5, "a 2,999 x 1,000 study grid", issue=43)
    spec = b.work / "big-grid.toml"
    values = ", ".join(str(i) for i in range(2999))
    lrs = ", ".join(f"{(i + 1) * 1e-5:g}" for i in range(1000))
    grid = f'[grid]\n"train.max_steps" = [{values}]\n"train.lr" = [{lrs}]\n'
    spec.write_text(_study_text("big", 1, grid))
    ran = b.run(["study", "run", str(spec), "--out", str(b.work / "studies-big")], timeout=30)
    judge(o, ran, refused=True, needle="--max-runs")
    if ran.code is not None and "2999000" not in ran.out.replace(",", ""):
        o.bad("silent_wrong", f"the count was not printed: {_last_line(ran.out)}")
    return o


def case_concurrent_study(b: Bench) -> Outcome:
    o = Outcome(6, "two study runs of one study at once", issue=43)
    spec = b.work / "twice.toml"
    spec.write_text(_study_text("twice", 1, '[grid]\n"train.lr" = [1e-3]\n', *LONG))
    out = b.work / "studies-twice"
    first = b.popen([sys.executable, "-m", "attnlab", "study", "run", str(spec), "--out", str(out)])
    try:
        if not _wait_for(lambda: _stepped(out / "twice" / "1e-3-s1"), b.timeout * 2):
            o.bad("hang", "the first study never trained")
            return o
        ran = b.run(["study", "run", str(spec), "--out", str(out)], timeout=60)
        judge(o, ran, refused=True, needle="pid")
    finally:
        with contextlib.suppress(OSError):
            os.killpg(first.pid, signal.SIGINT)
        try:
            first.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            _kill_group(first.pid)
            first.communicate()
            o.bad("hang", "the first study did not stop on Ctrl+C")
    count_orphans(o, str(spec))
    return o


def scored_study(b: Bench) -> Path:
    """A study of two float-valued cells x 2 seeds, trained and scored (items 7, 11)."""
    spec = b.work / "floats.toml"
    spec.write_text(_study_text("floats", 2, '[grid]\n"train.lr" = [3e-4, 6e-4]\n', *_STEPS))
    out = b.work / "studies-floats"
    ran = b.run(["study", "run", str(spec), "--out", str(out)], timeout=600)
    if ran.code != 0:
        sys.exit(f"could not run the base study: {ran.err[-2000:]}")
    return out / "floats"


_STEPS = ("train.max_steps=2", "train.eval_every=2")


def case_corrupt_score(b: Bench, directory: Path) -> Outcome:
    o = Outcome(7, "study show with a corrupt study-score.json", issue=43)
    (directory / "3e-4-s2" / "study-score.json").write_text("{")
    for extra in ([], ["--json"]):
        ran = b.run(["study", "show", str(directory), *extra], timeout=60)
        judge(o, ran, refused=False)
        if "study-score.json" not in ran.out + ran.err:
            o.bad("silent_wrong", f"study show {' '.join(extra)} does not name the bad file")
    return o


def case_float_cells(b: Bench, directory: Path) -> Outcome:
    o = Outcome(11, "grid cells of float values are named as written", issue=43)
    names = sorted(p.name for p in directory.iterdir() if p.is_dir())
    if names[:4] != ["3e-4-s1", "3e-4-s2", "6e-4-s1", "6e-4-s2"]:
        o.bad("silent_wrong", f"run folders {names}")
    return o


def case_incomplete_status(b: Bench, base: Path) -> Outcome:
    o = Outcome(8, "a run folder with only config.toml", issue=43)
    folder = b.work / "incomplete-runs"
    shutil.rmtree(folder, ignore_errors=True)  # the bench's own, from an earlier --work
    for i in range(3):
        (folder / f"r{i}").mkdir(parents=True)
        shutil.copy(base / "config.toml", folder / f"r{i}" / "config.toml")
    ran = b.run(["runs", str(folder)], timeout=30)
    judge(o, ran, refused=False)
    rows = [line.split() for line in ran.out.splitlines()]
    statuses = [row[-1] for row in rows if row and row[0] in ("r0", "r1", "r2")]
    if statuses != ["incomplete"] * 3:  # the title names the folder: only the rows count
        o.bad("silent_wrong", f"statuses {statuses}, not incomplete")
    return o


def case_pytest(b: Bench, item: int, name: str, test: str) -> Outcome:
    """An item only the lab (Pilot) or a fault inside a child's start reaches: its test."""
    o = Outcome(item, f"{name} (its test)", issue=43)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    proc = b.popen(argv, cwd=ROOT)
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        proc.communicate()
        o.bad("hang", "the test ran past 300 s")
        return o
    if proc.returncode != 0:
        o.bad("silent_wrong", _last_line(out))
    return o


def case_special_study_file(b: Bench, kind: str) -> Outcome:
    o = Outcome(12, f"study run {kind}", issue=43)
    path = Path("/dev/zero")
    if kind == "FIFO":
        path = b.work / "fifo-study.toml"
        os.mkfifo(path)
    ran = b.run(["study", "run", str(path), "--out", str(b.work / "studies-special")], timeout=30)
    judge(o, ran, refused=True, needle="not a regular file")
    return o


def case_many_broken_runs(b: Bench, base: Path) -> Outcome:
    o = Outcome(13, "attnlab runs over 40 broken runs", issue=43)
    folder = b.work / "broken-runs"
    shutil.rmtree(folder, ignore_errors=True)  # the bench's own, from an earlier --work
    for i in range(40):
        run = folder / f"r{i:02d}"
        run.mkdir(parents=True)
        shutil.copy(base / "config.toml", run / "config.toml")
        good = (base / "events.jsonl").read_bytes()
        (run / "events.jsonl").write_bytes(good + b"[1, 2]\nnot json\n")
    ran = b.run(["runs", str(folder)], timeout=60)
    judge(o, ran, refused=False)
    warned = [line for line in ran.err.splitlines() if "malformed" in line]
    if len(warned) != 1 or "(+39 more)" not in warned[0]:
        o.bad("silent_wrong", f"{len(warned)} warning lines, not one folded")
    ran = b.run(["runs", str(folder), "--verbose"], timeout=60)
    if sum("malformed" in line for line in ran.err.splitlines()) != 40:
        o.bad("silent_wrong", "--verbose does not list the 40 warnings")
    return o


def case_compare_train_size(b: Bench, base: Path) -> Outcome:
    o = Outcome(14, "compare two runs of one task with other data.train_size", issue=43)
    other = b.train_run("base-48", "data.train_size=48")
    for extra in (["--significance"], ["5 9 2 7"]):
        ran = b.run(["compare", str(base), str(other), *extra, "--device", "cpu"], timeout=120)
        judge(o, ran, refused=False)
    return o


def cases_43(b: Bench) -> list[tuple[int, Callable[[], Outcome]]]:
    import importlib.util

    base = b.train_run("base")
    kept_run = b.train_run("kept", "train.keep_last=2", "train.eval_every=2", steps=4)
    found: list[tuple[int, Callable[[], Outcome]]] = []
    if importlib.util.find_spec("ctranslate2") is not None:
        tf = b.train_run("tf", *TINY_TRANSFORMER)
        found += [(1, lambda w=w: case_ct2_force(b, tf, w)) for w in (".", "some/..", "RUN", "DIR")]
    else:
        print("  ctranslate2 is not installed: item 43.1's export cases skipped", file=sys.stderr)
    found += [
        (1, lambda: case_bundle_over_run(b, b.copy_run(base, "over-export"), "export")),
        (1, lambda: case_bundle_over_run(b, b.copy_run(kept_run, "over-average"), "average")),
        (1, lambda: case_study_unsaved_run(b)),
        *[
            (2, lambda k=k: case_output_special(b, base, k))
            for k in ("FIFO with a reader", "FIFO without a reader", "symlink", "folder")
        ],
        (3, lambda: case_refs_over_events(b, base)),
        (4, lambda: case_translate_zero(b, base)),
        (4, lambda: case_translate_stream(b, base)),
        (5, lambda: case_big_grid(b)),
        (6, lambda: case_concurrent_study(b)),
    ]
    floats: list[Path] = []

    def study_dir() -> Path:
        if not floats:
            floats.append(scored_study(b))
        return floats[0]

    found += [
        (7, lambda: case_corrupt_score(b, study_dir())),
        (8, lambda: case_incomplete_status(b, base)),
        (
            9,
            lambda: case_pytest(
                b,
                9,
                "the Studies tab clears a previous study's plot",
                "tests/test_tui_studies.py::"
                "test_a_broken_study_clears_the_previous_studys_table_and_plot",
            ),
        ),
        (
            10,
            lambda: case_pytest(
                b,
                10,
                "Ctrl+C while a child starts is interrupted",
                "tests/test_study_run.py::"
                "test_ctrl_c_reaching_a_child_that_is_still_starting_is_interrupted",
            ),
        ),
        (11, lambda: case_float_cells(b, study_dir())),
        (12, lambda: case_special_study_file(b, "FIFO")),
        (12, lambda: case_special_study_file(b, "/dev/zero")),
        (13, lambda: case_many_broken_runs(b, base)),
        (14, lambda: case_compare_train_size(b, base)),
    ]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--issue", default="", help="31, 43 or both (default: both)")
    parser.add_argument("--only", default="", help="comma-separated item numbers (default all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="bound per command (s)")
    parser.add_argument("--max-rss-mb", type=float, default=1024.0, help="peak memory bound")
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (temp)")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="attnlab-adversarial-"))
    o_max_rss[0] = args.max_rss_mb
    only = {int(x) for x in args.only.split(",") if x.strip()}
    issues = {int(x) for x in args.issue.split(",") if x.strip()} or {31, 43}
    bench = Bench(work, args.timeout, args.max_rss_mb)
    began = time.perf_counter()
    rows: list[Outcome] = []
    chosen = [(31, item, case) for item, case in cases(bench)] if 31 in issues else []
    if 43 in issues:
        chosen += [(43, item, case) for item, case in cases_43(bench)]
    for issue, item, case in chosen:
        if only and item not in only:
            continue
        try:
            outcome = case()
        except Exception as err:  # the bench itself failed on this case: count it, go on
            outcome = Outcome(item, getattr(case, "__name__", "case"), issue=issue)
            outcome.bad("silent_wrong", f"the case could not run: {type(err).__name__}: {err}")
        rows.append(outcome)
        status = "ok" if not outcome.notes else "; ".join(outcome.notes)
        label = f"{outcome.issue}.{outcome.item}"
        print(f"  [{label:>5}] {outcome.name}: {status}", file=sys.stderr, flush=True)
    columns = ("data_lost", "hang", "traceback", "orphan", "silent_wrong", "unbounded")
    print("| item | case | " + " | ".join(columns) + " |")
    print("|---:|---|" + "---:|" * len(columns))
    for r in rows:
        cells = " | ".join(str(getattr(r, c)) for c in columns)
        print(f"| {r.issue}.{r.item} | {r.name} | {cells} |")
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
