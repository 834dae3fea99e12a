"""The lab: a Textual app over the attnlab engine.

``make_app(runs_dir)`` builds it (the CLI and the tests use the same factory);
``run_app(runs_dir)`` runs it. Nothing here imports torch at module import time: the
registries (which import torch) load in a thread after the first frame, training runs in a
child process, and Inspect loads models in a thread worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual import events, on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, TabbedContent, TabPane, Tabs

from attnlab.config import ExperimentConfig
from attnlab.errors import AttnlabError
from attnlab.tui.menus import Menus
from attnlab.tui.views.setup import SetupView
from attnlab.tui.views.train import CommandFactory, SampleChosen, TrainView

TABS = ("setup", "train", "inspect", "runs", "export", "studies")
TAB_FOCUS = {
    "train": "#samples",
    "inspect": "#heatmap",
    "runs": "#runs-table",
    "export": "#export-run",
    "studies": "#studies-list",
}


@dataclass
class MenusLoaded(Message):
    menus: Menus
    config: ExperimentConfig | None


@dataclass
class MenusFailed(Message):
    error: str


def default_config() -> ExperimentConfig:
    """The experiment the lab opens on: reverse, GRU + Bahdanau, small enough to show progress
    within seconds (the ``reverse-bahdanau`` preset when it exists)."""
    from attnlab.config import preset_names
    from attnlab.experiment import load_preset

    if "reverse-bahdanau" in preset_names():
        return load_preset("reverse-bahdanau")
    return ExperimentConfig(name="reverse-bahdanau")


class AttnLab(App[None]):
    """attnlab: pick attention variants, train, inspect alignments, compare, export."""

    CSS_PATH = "app.tcss"
    TITLE = "attnlab"
    SUB_TITLE = "attention lab"

    BINDINGS = [
        Binding("1", "tab('setup')", "Setup", show=False),
        Binding("2", "tab('train')", "Train", show=False),
        Binding("3", "tab('inspect')", "Inspect", show=False),
        Binding("4", "tab('runs')", "Runs", show=False),
        Binding("5", "tab('export')", "Export", show=False),
        Binding("6", "tab('studies')", "Studies", show=False),
        Binding("S", "queue_study", "Study…", show=False),
        Binding("t", "train", "Train ▶"),
        Binding("ctrl+t", "train", "Train", show=False, priority=True),
        Binding("p", "control('pause')", "Pause"),
        Binding("x", "control('stop')", "Stop"),
        Binding("s", "control('save')", "Save now"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("f1", "help", "Help", show=False),
        Binding("escape", "blur", "Leave field", show=False),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(
        self,
        runs_dir: Path = Path("runs"),
        *,
        config: ExperimentConfig | None = None,
        command_factory: CommandFactory | None = None,
        poll_seconds: float | None = None,
    ) -> None:
        super().__init__()
        self.runs_dir = Path(runs_dir)
        self.initial_config = config
        self.command_factory = command_factory
        self.poll_seconds = poll_seconds
        self.menus: Menus | None = None
        self.first_frame_at: float | None = None  # perf_counter() after the first refresh
        self.views_ready = (
            False  # Train / Inspect / Runs / Export mounted (just after the first frame)
        )
        self.menus_ready = asyncio.Event()  # set once Setup's menus are built (tests wait on it)
        self.studies: list[Any] = []  # `attnlab study run` children started from Setup
        self.study_seeds = 3

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # Only Setup is built for the first frame; the other tabs are mounted right after it.
        yield Header(icon="◈")
        with TabbedContent(initial="setup", id="tabs"):
            with TabPane("1 Setup", id="setup"):
                yield SetupView(
                    self.initial_config or ExperimentConfig(name="reverse-bahdanau"),
                    id="setup-view",
                )
            for tab in TABS[1:]:
                yield TabPane(f"{TABS.index(tab) + 1} {tab.title()}", id=tab)
        yield Footer()

    def on_mount(self) -> None:
        # Tab / Shift+Tab stay in the tab body: the tab bar is for the mouse and 1..5 (a
        # focused tab bar would take the arrows, which then switch tabs).
        self.query_one("#tabs", TabbedContent).query_one(Tabs).can_focus = False
        self.call_after_refresh(self._after_first_frame)

    async def _after_first_frame(self) -> None:
        """The first frame is on screen: build the other tabs, then import the registries
        (and torch) in a thread."""
        self.first_frame_at = time.perf_counter()
        from attnlab.tui.views.export import ExportView
        from attnlab.tui.views.inspect import InspectView
        from attnlab.tui.views.runs import RunsView
        from attnlab.tui.views.studies import StudiesView

        kwargs = {"poll_seconds": self.poll_seconds} if self.poll_seconds else {}
        views = {
            "train": TrainView(
                self.runs_dir, command_factory=self.command_factory, id="train-view", **kwargs
            ),
            "inspect": InspectView(self.runs_dir, id="inspect-view"),
            "runs": RunsView(self.runs_dir, id="runs-view"),
            "export": ExportView(self.runs_dir, id="export-view"),
            "studies": StudiesView(self.runs_dir, id="studies-view"),
        }
        for tab, view in views.items():
            await self.query_one(f"#{tab}", TabPane).mount(view)
        self.views_ready = True
        self.load_registries()

    def on_unmount(self) -> None:
        # The lab is closing: remove its children's scratch directories (attnlab-lab-*), and
        # interrupt the studies it started (each run saves and stays resumable).
        from attnlab.launch import remove_scratch_dirs

        remove_scratch_dirs()
        if self.studies:
            from attnlab.study.queue import stop_study

            for proc in self.studies:
                stop_study(proc)

    def on_resize(self, event: events.Resize) -> None:
        # At 80 columns the side panels shrink (see app.tcss ".narrow").
        self.set_class(event.size.width < 90, "narrow")
        self.set_class(event.size.height < 30, "short")

    @work(thread=True, exclusive=True, exit_on_error=False, group="registries")
    def load_registries(self) -> None:
        """Import the registries (and torch) off the UI thread; post what the menus need."""
        from attnlab.errors import AttnlabError
        from attnlab.tui.menus import load_menus

        try:
            menus = load_menus()
            config = None if self.initial_config is not None else default_config()
        except (AttnlabError, ImportError) as err:
            self.post_message(MenusFailed(str(err)))
            return
        self.post_message(MenusLoaded(menus, config))

    @on(MenusLoaded)
    async def _menus_loaded(self, message: MenusLoaded) -> None:
        self.menus = message.menus
        setup = self.query_one(SetupView)
        if message.config is not None:
            setup.config = message.config
        await setup.populate(message.menus)
        # torch, the registries and every widget now exist: move them out of the cyclic GC's
        # reach, so its full collections (hundreds of ms with torch loaded) stop stalling keys.
        gc.collect()
        gc.freeze()
        self.menus_ready.set()

    @on(MenusFailed)
    def _menus_failed(self, message: MenusFailed) -> None:
        self.notify(message.error, title="Cannot load the registries", severity="error", timeout=30)

    # -- views --------------------------------------------------------------------------------

    @property
    def setup_view(self) -> SetupView:
        return self.query_one(SetupView)

    @property
    def train_view(self) -> TrainView:
        return self.query_one(TrainView)

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab
        # Move focus into the new tab: a focused widget left in a hidden pane would switch the
        # tabs back (TabbedContent follows focus). Setup starts unfocused so letter keys work.
        target = self.query(TAB_FOCUS[tab]) if tab in TAB_FOCUS else None
        self.screen.set_focus(target.first() if target else None)

    def action_blur(self) -> None:
        """Esc leaves a field for the tab's body (the heatmap, the tables), whose keys then
        work; in Setup nothing keeps focus, so letter keys are commands."""
        tab = self.query_one("#tabs", TabbedContent).active
        target = self.query(TAB_FOCUS[tab]) if tab in TAB_FOCUS else None
        self.screen.set_focus(target.first() if target else None)

    def action_train(self) -> None:
        self.setup_view.request_training(queue=False)

    def action_queue(self) -> None:
        self.setup_view.request_training(queue=True)

    def action_control(self, word: str) -> None:
        if self.views_ready:
            self.notify(self.train_view.control(word))

    @on(SetupView.TrainRequested)
    def _train_requested(self, message: SetupView.TrainRequested) -> None:
        notice = self.train_view.train(message.config, queue=message.queue)
        self.notify(notice)
        if not message.queue:
            self.action_tab("train")

    @on(TrainView.RunFinished)
    def _run_finished(self, message: TrainView.RunFinished) -> None:
        from attnlab.tui.views.runs import RunsView

        self.query_one(RunsView).refresh_runs()

    @on(SampleChosen)
    def _sample_chosen(self, message: SampleChosen) -> None:
        from attnlab.tui.views.inspect import InspectView

        self.query_one(InspectView).show_logged_sample(message.run_dir, message.sample)
        self.action_tab("inspect")

    def open_in_inspect(self, run_dir: Path) -> None:
        from attnlab.tui.views.inspect import InspectView

        self.query_one(InspectView).select_run(run_dir)
        self.action_tab("inspect")

    def queue_variants(self) -> None:
        """Queue one run per attention variant that fits the architecture's sweep slot
        (``ArchSpec.sweep``: the RNN's attention, the Transformer's cross-attention)."""
        setup = self.setup_view
        config = setup.validate_form()
        if config is None or self.menus is None:
            self.notify(setup.error or "the registries are still loading", severity="error")
            return
        spec = self.menus.arch_specs.get(config.model.arch)
        slot = spec.sweep_slot if spec else None
        if slot is None:
            self.notify(f"{config.model.arch} has no attention slot to vary", severity="error")
            return
        from attnlab.experiment import validate  # the registries import torch: lazily

        key, names = slot.field, self.menus.variants_for(slot.role)
        queued: list[str] = []
        for name in names:
            model = dataclasses.replace(config.model, **{key: name})
            candidate = config.replace(model=model, name=f"{config.name}-{name}")
            try:
                validate(
                    candidate
                )  # e.g. luong-dot needs equal state sizes: skip, do not fail later
            except AttnlabError as err:
                self.notify(f"skipped {name}: {err}", severity="warning")
                continue
            queued.append(name)
            self.train_view.train(candidate, queue=True)
        if not self.train_view.active and self.train_view.queue:
            self.train_view.train(self.train_view.queue.pop(0))
        self.notify(f"queued {len(queued)} runs: {', '.join(queued)}")
        self.action_tab("train")

    def action_queue_study(self) -> None:
        """Setup's ``S``: ask first (the slot, the seeds, the runs and their time), then run
        every variant of the chosen slot × the seeds as a study (issue 44: no study from one
        stray key)."""
        prompt = self.study_prompt()
        if prompt is not None:
            self.push_screen(prompt, self._study_chosen)

    def study_prompt(self) -> Any:
        """The StudyPrompt for the Setup experiment, or None (said in a notice) when it has
        no attention slot or is invalid."""
        from attnlab.tui.screens.study_prompt import SlotOption, StudyPrompt

        setup = self.setup_view
        config = setup.validate_form()
        if config is None or self.menus is None:
            self.notify(setup.error or "the registries are still loading", severity="error")
            return None
        spec = self.menus.arch_specs.get(config.model.arch)
        if spec is None or not spec.slots:
            self.notify(f"{config.model.arch} has no attention slot to vary", severity="error")
            return None
        slots = [
            SlotOption(s.key, s.title, tuple(self._slot_variants(config, s))) for s in spec.slots
        ]
        sweep = spec.sweep_slot
        return StudyPrompt(
            config.name,
            slots,
            self.study_seeds,
            lambda runs: self._study_time(config, runs),
            chosen=sweep.key if sweep else None,
        )

    def _slot_variants(self, config: ExperimentConfig, slot: Any) -> list[str]:
        """The slot's variants that work with ``config`` (e.g. luong-dot needs equal state
        sizes: left out, not failed later)."""
        from attnlab.experiment import validate

        names = []
        for name in self.menus.variants_for(slot.role) if self.menus else []:
            try:
                validate(
                    config.replace(model=dataclasses.replace(config.model, **{slot.field: name}))
                )
            except AttnlabError:
                continue
            names.append(name)
        return names

    def _study_time(self, config: ExperimentConfig, runs: int) -> str:
        """The prompt's time line: from the newest finished run like this one (Runs' list)."""
        from attnlab.study.estimate import duration_text, estimate_study
        from attnlab.study.runner import plan_workers

        try:
            workers, _threads = plan_workers(None, config.train.threads or None)
        except AttnlabError:
            workers = 1
        from attnlab.tui.views.runs import RunsView

        finished = [run for view in self.query(RunsView) for run in getattr(view, "runs", [])]
        estimate = estimate_study(config, runs, workers, finished)
        if estimate is None:
            return "time: unknown until one run has finished here (train one to time it)"
        return (
            f"time {duration_text(estimate.seconds)} on {estimate.workers} worker"
            f"{'s' if estimate.workers != 1 else ''} ({config.train.max_steps} steps × "
            f"{estimate.per_step_s:.3g} s/step, timed on {estimate.reference})"
        )

    def _study_chosen(self, choice: Any) -> None:
        if choice is not None:
            self.queue_variant_study(choice.seeds, choice.slot_key)

    def queue_variant_study(self, seeds: int, slot_key: str | None = None) -> Path | None:
        """Every attention variant of one slot (the architecture's sweep slot by default) ×
        ``seeds``, as a study (``attnlab study run`` in a child process); the Studies tab
        opens on it and shows it fill in."""
        setup = self.setup_view
        config = setup.validate_form()
        if config is None or self.menus is None:
            self.notify(setup.error or "the registries are still loading", severity="error")
            return None
        spec = self.menus.arch_specs.get(config.model.arch)
        slot = None
        if spec is not None:
            slot = spec.slot(slot_key) if slot_key else spec.sweep_slot
        if slot is None:
            self.notify(f"{config.model.arch} has no attention slot to vary", severity="error")
            return None
        from attnlab.study.queue import start_study, write_variant_study

        names = self._slot_variants(config, slot)
        if not names:
            self.notify(f"no {slot.title} variant works with this experiment", severity="error")
            return None
        current = getattr(config.model, slot.field)
        baseline = current if current in names else names[0]
        study_file = write_variant_study(config, slot.key, names, seeds, baseline)
        out = self.runs_dir / "studies"
        self.studies.append(start_study(study_file, out))
        self.study_seeds = seeds
        self.notify(f"study: {len(names)} variants × {seeds} seeds ({study_file.stem})")
        self.action_tab("studies")
        from attnlab.tui.views.studies import StudiesView

        for view in self.query(StudiesView):
            view.open_study(out / study_file.stem)
        return study_file

    # -- help, palette, quit ------------------------------------------------------------------

    def action_help(self) -> None:
        from attnlab.tui.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for tab in TABS:
            yield SystemCommand(
                f"Go to {tab.title()}", f"Show the {tab} tab", lambda t=tab: self.action_tab(t)
            )
        yield SystemCommand("Train", "Train the experiment set up in Setup", self.action_train)
        yield SystemCommand(
            "Study: every variant of a slot × N seeds",
            "Run the Setup experiment with every variant of one attention slot, N seeds each, "
            "as a study; asks first: slot, seeds, runs, time (key S)",
            self.action_queue_study,
        )
        yield SystemCommand(
            "Queue", "Add the Setup experiment to the training queue", self.action_queue
        )
        yield SystemCommand(
            "Queue every variant",
            "Train each attention variant on this task, one after another",
            self.queue_variants,
        )
        yield SystemCommand(
            "Pause / resume training",
            "Pause or resume the active run",
            lambda: self.action_control("pause"),
        )
        yield SystemCommand(
            "Stop training",
            "Stop the active run (saves a checkpoint)",
            lambda: self.action_control("stop"),
        )
        yield SystemCommand(
            "Save checkpoint now", "Ask the active run to save", lambda: self.action_control("save")
        )
        yield SystemCommand(
            "Heads: importance and pruning curve",
            "Which heads matter for the run chosen in Inspect",
            lambda: self._inspect("heads"),
        )
        yield SystemCommand(
            "Compare two runs on this sentence",
            "Inspect's sentence through a second run: maps, A − B, JS, AER",
            lambda: self._inspect("compare"),
        )
        yield SystemCommand(
            "Export the Inspect map to SVG/HTML",
            "Write the map shown in Inspect to RUN/figures",
            lambda: self._inspect("export_map"),
        )
        yield SystemCommand(
            "Toggle light/dark", "Switch between the light and dark theme", self.action_toggle_theme
        )

    def _inspect(self, action: str) -> None:
        """A command of the Inspect tab from the palette (Inspect shows the result)."""
        from attnlab.tui.views.inspect import InspectView

        if not self.views_ready:
            return
        self.action_tab("inspect")
        getattr(self.query_one(InspectView), f"action_{action}")()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    async def action_quit(self) -> None:
        if not self.views_ready or not self.train_view.active or self.train_view.process is None:
            self.exit()
            return
        from attnlab.tui.help import QuitScreen

        def decide(choice: str | None) -> None:
            if choice == "stop":
                self.train_view.control("stop")
                self.exit()
            elif choice == "keep":
                self.exit()

        self.push_screen(QuitScreen(self.train_view.process.run_name), decide)


def make_app(
    runs_dir: Path = Path("runs"),
    *,
    config: ExperimentConfig | None = None,
    command_factory: CommandFactory | None = None,
    poll_seconds: float | None = None,
) -> AttnLab:
    """The app factory shared by the CLI and the tests."""
    return AttnLab(
        runs_dir, config=config, command_factory=command_factory, poll_seconds=poll_seconds
    )


def run_app(runs_dir: Path = Path("runs")) -> None:
    """Open the lab on ``runs_dir`` (what ``attnlab`` with no command does)."""
    make_app(runs_dir).run()
