"""Setup's live corpus preview: the first pairs and short statistics of ``data.path``.

Shown under the corpus path field when ``data.task = "corpus"``. Every change of the
settings that decide what is read (path, files, languages, columns, tokenizer...) restarts a
short debounce timer; the corpus is then read in a thread worker (``attnlab.data.corpus``
only, no torch, no tokenizer training) and the result comes back as a ``Computed`` message,
so typing never waits on the disk. A source that cannot be read shows the engine's one-line
``AttnlabError`` here; Setup keeps Train blocked until the preview of the current settings
came back clean.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from textual import on, work
from textual.content import Content
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Static

from attnlab.config import DataConfig
from attnlab.errors import AttnlabError

# The settings that change what the preview shows (a subset of the corpus cache key).
PREVIEW_FIELDS = (
    "path",
    "src_file",
    "tgt_file",
    "columns",
    "src_lang",
    "tgt_lang",
    "tokenizer",
    "subword_vocab",
    "lowercase",
    "dev_fraction",
    "test_fraction",
    "seed",
    "max_pairs",
)
PreviewKey = tuple[Any, ...]


def preview_key(cfg: DataConfig) -> PreviewKey:
    return tuple(getattr(cfg, name) for name in PREVIEW_FIELDS)


@dataclass(frozen=True)
class SplitSummary:
    pairs: int
    src_mean: float  # whitespace words per sentence
    src_max: int
    tgt_mean: float
    tgt_max: int


@dataclass(frozen=True)
class CorpusSummary:
    """What the preview shows; computed without tokenising."""

    first_pairs: list[tuple[str, str]]  # the first training pairs as read (before any split)
    splits: dict[str, SplitSummary]  # train/dev/test as training will see them
    split_off: list[str]  # splits taken out of train with data.seed
    empty_skipped: int  # lines skipped because one side was empty
    src_types: int  # distinct whitespace words in train (lowercased when data.lowercase)
    tgt_types: int
    source: str  # where train came from


def _lengths(sentences: list[str]) -> tuple[float, int]:
    lengths = [len(s.split()) for s in sentences]
    if not lengths:
        return 0.0, 0
    return sum(lengths) / len(lengths), max(lengths)


def summarise_corpus(cfg: DataConfig, n: int = 5) -> CorpusSummary:
    """Read the corpus ``cfg`` points at and summarise it; raises AttnlabError (one line).

    Uses the same reader and split logic as training (``read_source`` + ``assemble_splits``),
    so the pair counts are the ones the run will train and evaluate on.
    """
    from attnlab.data.corpus import assemble_splits, read_source

    sides = read_source(cfg)
    train_side = sides["train"]
    assert train_side is not None  # read_source raises when there is no training data
    pairs, info = assemble_splits(cfg, sides)
    splits: dict[str, SplitSummary] = {}
    for split in ("train", "dev", "test"):
        src_mean, src_max = _lengths([s for s, _ in pairs[split]])
        tgt_mean, tgt_max = _lengths([t for _, t in pairs[split]])
        splits[split] = SplitSummary(len(pairs[split]), src_mean, src_max, tgt_mean, tgt_max)
    fold = str.lower if cfg.lowercase else str
    src_types = {w for s, _ in pairs["train"] for w in fold(s).split()}
    tgt_types = {w for _, t in pairs["train"] for w in fold(t).split()}
    return CorpusSummary(
        first_pairs=train_side.pairs[:n],
        splits=splits,
        split_off=list(info.get("split_off", [])),
        empty_skipped=sum(info.get("empty_skipped", {}).values()),
        src_types=len(src_types),
        tgt_types=len(tgt_types),
        source=train_side.description,
    )


def one_line(error: BaseException) -> str:
    """The first line of an error (an unexpected one keeps its type name), never a traceback."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text if isinstance(error, AttnlabError) else f"{type(error).__name__}: {text}"


class CorpusPreview(Static):
    """First pairs and statistics of the corpus in Setup (hidden for toy tasks)."""

    DEBOUNCE_S = 0.3
    MAX_PAIRS = 5

    @dataclass
    class Computed(Message):
        """A preview finished (``summary`` or one-line ``error``); bubbles to Setup."""

        key: PreviewKey
        summary: CorpusSummary | None
        error: str | None

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__("", id=id, classes=classes)
        self.key: PreviewKey | None = None  # the settings asked for last
        self.done_key: PreviewKey | None = None  # the settings the shown result belongs to
        self.summary: CorpusSummary | None = None
        self.error: str | None = None
        self.tokenizer = ""
        self._timer: Timer | None = None
        self._cfg: DataConfig | None = None  # the settings asked for last (for ``recheck``)

    # -- asking -------------------------------------------------------------------------------

    def request(self, cfg: DataConfig) -> None:
        """Preview ``cfg`` after a short pause (repeated calls with the same settings are free)."""
        key = preview_key(cfg)
        if key == self.key:
            return
        self.key, self._cfg = key, cfg
        self.tokenizer = (
            cfg.tokenizer
            if cfg.tokenizer not in ("bpe", "unigram")
            else f"{cfg.tokenizer} {cfg.subword_vocab}"
        )
        if self._timer is not None:
            self._timer.stop()
        self.remove_class("error")
        self.update(Content.from_markup("[dim]reading the corpus…[/]"))
        self._timer = self.set_timer(self.DEBOUNCE_S, lambda: self._compute(cfg, key))

    def recheck(self) -> bool:
        """Read the same settings again when the shown result is an error (the corpus may have
        appeared since: downloaded, unpacked, mounted); True when a new read started."""
        if self._cfg is None or self.pending or self.error is None:
            return False
        self.key = None
        self.request(self._cfg)
        return True

    def status(self) -> str | None:
        """None when the current settings read cleanly; else why Train must wait (one line)."""
        if self.key is None or self.done_key != self.key:
            return "reading the corpus…"
        return self.error

    @property
    def pending(self) -> bool:
        return self.key is not None and self.done_key != self.key

    @work(thread=True, exclusive=True, exit_on_error=False, group="corpus-preview")
    def _compute(self, cfg: DataConfig, key: PreviewKey) -> None:
        try:
            summary, error = summarise_corpus(cfg, self.MAX_PAIRS), None
        except Exception as err:  # a reader bug must show as a line, not take the lab down
            summary, error = None, one_line(err)
        self.post_message(self.Computed(key, summary, error))

    # -- showing ------------------------------------------------------------------------------

    def on_resize(self) -> None:
        # Pairs are cut to the width; only the width changes the text, so this settles at once.
        if self.summary is not None and self.error is None and not self.pending:
            self.update(self.render_summary())

    @on(Computed)
    def _computed(self, message: Computed) -> None:
        if message.key != self.key:
            message.stop()  # a result for settings that changed meanwhile
            return
        self.done_key = message.key
        self.summary, self.error = message.summary, message.error
        self.set_class(self.error is not None, "error")  # an error wraps; pairs are cut with "…"
        self.update(self.render_summary())

    def render_summary(self) -> Content:
        if self.error is not None:
            return Content.from_markup("[b $error]✗[/] $message", message=self.error)
        summary = self.summary
        if summary is None:
            return Content("")
        # 80x24: fewer example pairs so the form keeps room for the other fields.
        n = self.MAX_PAIRS if self.app.size.height >= 30 else 3
        width = max(self.content_region.width, 20)
        lines = [Content.from_markup("[b]first pairs[/] [dim]$source[/]", source=summary.source)]
        for i, (src, tgt) in enumerate(summary.first_pairs[:n], start=1):
            # Cut the source at about half the line so the target stays visible too.
            room = width - len(str(i)) - 4  # "i " + " → "
            if len(src) + len(tgt) > room:
                src = _cut(src, max(room - min(len(tgt), room // 2), 8))
            lines.append(
                Content.from_markup(
                    "[dim]$i[/] $src [$accent]→[/] $tgt", i=str(i), src=src, tgt=tgt
                )
            )
        splits = " · ".join(f"[b]{name}[/] {s.pairs:,}" for name, s in summary.splits.items())
        split_off = (
            f" [dim]({', '.join(summary.split_off)} split off train)[/]"
            if summary.split_off
            else ""
        )
        lines.append(
            Content.from_markup(
                splits + split_off + " · $empty empty",  # split names and counts: no markup inside
                empty=str(summary.empty_skipped),
            )
        )
        train = summary.splits["train"]
        lines.append(
            Content.from_markup(
                "[b]length[/] src $sm/$sx · tgt $tm/$tx [dim]words mean/max[/]",
                sm=f"{train.src_mean:.1f}",
                sx=str(train.src_max),
                tm=f"{train.tgt_mean:.1f}",
                tx=str(train.tgt_max),
            )
        )
        lines.append(
            Content.from_markup(
                "[b]vocab[/] src $sv · tgt $tv words · [dim]tokenizer[/] $tok",
                sv=f"{summary.src_types:,}",
                tv=f"{summary.tgt_types:,}",
                tok=self.tokenizer,
            )
        )
        return Content("\n").join(lines)


def _cut(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1].rstrip() + "…"


def data_for_preview(base: DataConfig, path: str) -> DataConfig:
    """``base`` with the path typed in the form (the other corpus settings come from the preset)."""
    return dataclasses.replace(base, task="corpus", path=path.strip())
