"""Setup: choose task, architecture, attention (per role) and training options.

Every menu is generated from the registries (``attnlab.tui.menus.Menus``): the
architecture's own fields and attention slots come from its ``ArchSpec``; each chosen
variant's hyper-parameters become inputs with that variant's ranges and defaults. Every
change re-validates the whole experiment through ``attnlab.config``; invalid fields are
marked and Train is blocked with the one-line reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, Static
from textual.widgets._select import SelectOverlay  # Select's own list: no public name

from attnlab.config import CHOICES, ExperimentConfig, dumps_toml, to_dict
from attnlab.errors import AttnlabError
from attnlab.naming import describe, experiment_name
from attnlab.tui.help import ConfirmScreen
from attnlab.tui.menus import (
    SAME_AS_ENCODER,
    HParamInfo,
    Menus,
    check_field,
    chosen_variants,
    config_from_form,
    effective_model,
    field_range_text,
    hparam_groups,
    key_in_message,
)
from attnlab.tui.views.corpus_preview import CorpusPreview, data_for_preview


@dataclass(frozen=True)
class FieldDef:
    key: str  # section.key in the config
    label: str
    kind: str  # "input" | "select" | "check"
    group: str = ""  # "" or "corpus": shown only when that applies
    archs: tuple[str, ...] = ()  # shown only for these architectures ("" = every one)


# The fields every experiment has; the model's own fields and attention menus come from the
# architectures' specs (``arch_fields``) and sit after model.arch; once the registries are
# loaded the Data rows after data.task come from the task registry (``data_fields``): these
# four are the first frame's, before it is read.
FIELDS: tuple[FieldDef, ...] = (
    FieldDef("data.task", "task", "select"),
    FieldDef("data.path", "corpus path", "input", "corpus"),
    FieldDef("data.min_len", "min length", "input"),
    FieldDef("data.max_len", "max length", "input"),
    FieldDef("data.train_size", "train pairs", "input"),
    FieldDef("model.arch", "architecture", "select"),
    FieldDef("train.max_steps", "steps", "input"),
    FieldDef("train.batch_size", "batch size", "input"),
    FieldDef("train.lr", "learning rate", "input"),
    FieldDef("train.schedule", "lr schedule", "select"),
    FieldDef("train.warmup", "warmup steps", "input"),
    FieldDef("train.eval_every", "eval every", "input"),
    FieldDef("train.teacher_forcing", "teacher forcing", "input"),
    FieldDef("train.tf_schedule", "TF schedule", "select"),
    FieldDef("train.device", "device", "select"),
    FieldDef("train.nproc", "processes", "input"),  # data-parallel (torchrun + DDP)
)
SECTION_TITLES = {"data.task": "Data", "model.arch": "Model", "train.max_steps": "Training"}


def arch_fields(menus: Menus) -> list[FieldDef]:
    """Each architecture's fields then its attention slots, in registry order; a key two
    architectures declare is one row shown for both."""
    found: dict[str, FieldDef] = {}
    for arch, spec in menus.arch_specs.items():
        rows = [(key, label, _kind(key)) for key, label in spec.fields]
        rows += [(slot.key, slot.label, "select") for slot in spec.slots]
        for key, label, kind in rows:
            known = found.get(key)
            archs = (*known.archs, arch) if known else (arch,)
            found[key] = FieldDef(key, known.label if known else label, kind, archs=archs)
    return list(found.values())


def data_fields(menus: Menus) -> list[FieldDef]:
    """The Data section from the task registry: every field a task declares it reads
    (``TaskSpec.reads``, ``attnlab.data.task_registry.fields_read``), typed by the config
    (a choice: a menu; a flag: a checkbox; else an input with its range); each row shows
    only for the tasks that read it. A new task's fields appear with no edit here."""
    from attnlab.data.task_registry import field_label

    return [
        FieldDef(key, field_label(key), _kind(key), "corpus" if key == "data.path" else "")
        for key in menus.data_fields()
    ]


def form_fields(menus: Menus | None) -> list[FieldDef]:
    if menus is None:
        return list(FIELDS)
    at = next(i for i, d in enumerate(FIELDS) if d.key == "model.arch")
    head = [FIELDS[0], *data_fields(menus)]  # data.task, then what the tasks read
    return [*head, FIELDS[at], *arch_fields(menus), *FIELDS[at + 1 :]]


def _kind(key: str) -> str:
    if key in CHOICES:
        return "select"
    section, name = key.split(".", 1)
    default = to_dict(ExperimentConfig())[section].get(name)
    return "check" if isinstance(default, bool) else "input"


def _shape(groups: list[tuple[str, list[HParamInfo]]]) -> tuple:
    """What the hyper-parameter box shows: each group's title and its inputs' names."""
    return tuple((title, tuple(h.name for h in infos)) for title, infos in groups)


def field_id(key: str) -> str:
    return "f-" + key.replace(".", "--")


def hparam_id(name: str, variant: str) -> str:
    """The input of ``variant``'s hyper-parameter ``name`` (each variant has its own)."""
    return f"hp-{variant}--{name}"


class SetupView(Vertical):
    """The Setup tab."""

    class TrainRequested(Message):
        """Train (or queue) this experiment."""

        def __init__(self, config: ExperimentConfig, queue: bool = False) -> None:
            super().__init__()
            self.config = config
            self.queue = queue

    def __init__(self, config: ExperimentConfig, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.config = config  # the last valid experiment
        self._origin = config  # the preset / config loaded: its name fits only while unchanged
        self.menus: Menus | None = None
        self.error: str | None = "loading the registries…"
        self.side_variant = ""
        self._hparam_values: dict[str, str] = {}  # "variant.name" -> the input's text
        self._shown_hparams: tuple[str, ...] | None = None  # None: not built yet
        self._shown_groups: tuple | None = None
        self._train_when_read: bool | None = None  # `t` waits for a corpus re-read (queue?)

    def compose(self) -> ComposeResult:
        with Horizontal(id="setup-body"):
            with VerticalScroll(id="setup-form"):
                yield Static("Loading the registries…", id="setup-loading")
            # Scrolls: at 80x24 a long formula pushes the preset Load / Save buttons (and, for
            # a Transformer, the preset menu) below the screen; Tab then scrolls them into view.
            with VerticalScroll(id="setup-side"):
                yield Static("", id="variant-info")
                yield Static("", id="setup-status")
                with Horizontal(classes="buttons"):
                    yield Button(
                        "Train ▶", id="train-button", variant="success", compact=True, disabled=True
                    )
                    yield Button("Queue +", id="queue-button", compact=True, disabled=True)
                yield Label("presets:", classes="side-label")
                yield PresetSelect(
                    [], prompt="load a built-in preset", id="preset-select", compact=True
                )
                yield FieldInput(
                    placeholder="or a file: my-run.toml", id="preset-path", compact=True
                )
                with Horizontal(classes="buttons"):
                    yield Button("Load", id="preset-load", compact=True)
                    yield Button("Save", id="preset-save", compact=True)

    # -- building the form from the registries ------------------------------------------------

    async def populate(self, menus: Menus) -> None:
        """Build every menu from the registry snapshot (called once the registries loaded)."""
        self.menus = menus
        self._origin = self.config  # the app may have swapped in the default preset
        with self.prevent(Select.Changed):
            self.query_one("#preset-select", PresetSelect).set_options(
                [(name, name) for name in menus.presets]
            )
        self.query_one("#preset-select", PresetSelect).current = self._origin.name
        await self._rebuild_form()

    async def _rebuild_form(self) -> None:
        form = self.query_one("#setup-form", VerticalScroll)
        await form.remove_children()
        raw = _flat(self.config)
        rows: list[Widget] = []
        for definition in form_fields(self.menus):
            if definition.key == "train.max_steps":
                # The chosen variants' hyper-parameters sit between Model and Training.
                rows.append(Static("Attention hyper-parameters", classes="section-title"))
                rows.append(Vertical(id="hparams"))
            if definition.key in SECTION_TITLES:
                rows.append(Static(SECTION_TITLES[definition.key], classes="section-title"))
            rows.append(self._field_row(definition, raw))
            if definition.key == "data.path":
                rows.append(CorpusPreview(id="corpus-preview", classes="group-corpus"))
        # Hidden before they are mounted: the first frame shows only the chosen architecture's
        # fields (no flash of the other one's).
        for row in rows:
            if not _row_shown(
                row, str(raw.get("model.arch", "rnn")), str(raw.get("data.task", "")), self.menus
            ):
                row.display = False
        await form.mount_all(rows)
        self._shown_hparams = None
        self._shown_groups = None
        self._apply_groups()
        await self._rebuild_hparams()
        names = chosen_variants(self.menus, self.config.model.arch, self.form_values())
        self.side_variant = names[0] if names else ""
        self._show_variant()
        self.validate_form()

    def _field_row(self, definition: FieldDef, raw: dict[str, Any]) -> Widget:
        key = definition.key
        value = raw.get(key, "")
        wid = field_id(key)
        widget: Widget
        if definition.kind == "select":
            options = self._options_for(key)
            values = [v for _, v in options]
            current = value if value in values else (values[0] if values else Select.NULL)
            widget = Select(options, value=current, allow_blank=False, id=wid, compact=True)
        elif definition.kind == "check":
            widget = Checkbox("on", value=bool(value), id=wid, compact=True)
        else:
            widget = FieldInput(
                _text(value), placeholder=field_range_text(key), id=wid, compact=True
            )
        widget.tooltip = f"{key} {field_range_text(key)}".strip()
        groups = [definition.group] if definition.group else []
        groups += list(definition.archs)  # group-<arch>: shown for that architecture
        classes = " ".join(["field", *(f"group-{g}" for g in groups)])
        if _task_specific(key):
            classes += " task-field"  # shown only when the chosen task reads it (name = key)
        parts: list[Widget] = [Label(definition.label, classes="field-label"), widget]
        if _task_specific(key) and definition.kind == "input" and field_range_text(key):
            # A data field's range beside it (the registry declares the field, the config
            # its type and range): visible with a value in the field too.
            parts.append(Label(field_range_text(key), classes="field-hint", markup=False))
        return Horizontal(*parts, classes=classes, name=key)

    def _options_for(self, key: str) -> list[tuple[str, str]]:
        menus = self.menus
        assert menus is not None
        if key == "data.task":
            return [(name, name) for name, _ in menus.tasks]
        if key == "model.arch":
            return [(name, name) for name, _ in menus.archs]
        for slot in menus.all_slots():
            if slot.key == key:
                options = [(name, name) for name in menus.variants_for(slot.role)]
                if slot.same_as:
                    options.insert(0, (slot.empty_label or "same as before", SAME_AS_ENCODER))
                return options
        return [(choice, choice) for choice in CHOICES.get(key, ())]

    def _apply_groups(self) -> None:
        values = self.form_values()
        arch, task = str(values.get("model.arch", "rnn")), str(values.get("data.task", ""))
        for row in self.query(".field, CorpusPreview"):
            row.display = _row_shown(row, arch, task, self.menus)

    def _wanted_groups(self) -> list[tuple[str, list[HParamInfo]]]:
        """The hyper-parameter groups the menus' current values call for."""
        assert self.menus is not None
        values = self.form_values()
        return hparam_groups(self.menus, values.get("model.arch", "rnn"), values)

    async def _rebuild_hparams(self) -> None:
        if self.menus is None:
            return
        groups = self._wanted_groups()
        shape = _shape(groups)
        if shape == self._shown_groups:
            return
        box = self.query_one("#hparams", Vertical)
        await box.remove_children()
        rows: list[Widget] = []
        for title, infos in groups:
            # One sub-heading per variant (with its roles), its fields below it.
            rows.append(Static(_escape(title), classes="hparam-group"))
            if not infos:
                rows.append(Static("  (no hyper-parameters)", classes="dim"))
            for info in infos:
                rows.append(self._hparam_row(info))
        if not rows:
            rows.append(Static("(none for this choice)", classes="dim"))
        await box.mount_all(rows)
        # Recorded once mounted: until then validate_form waits (see rebuilding).
        self._shown_groups = shape
        self._shown_hparams = tuple(h.key for _, infos in groups for h in infos)

    def _hparam_row(self, info: HParamInfo) -> Widget:
        # The config's value for this variant (qualified, else an older flat key), else its own
        # default: never another variant's.
        explicit = self.config.model.params_for(info.variants[0])
        text = self._hparam_values.setdefault(
            info.key, _text(explicit.get(info.name, info.default))
        )
        field = FieldInput(
            text,
            placeholder=info.range_text(),
            id=hparam_id(info.name, info.variants[0]),
            compact=True,
        )
        field.tooltip = f"model.{info.key}: {info.help} {info.range_text()}"
        # Range and default beside the field, always (not only once it is emptied).
        hint = Label(
            f"{_escape(info.range_text())} · default {_escape(_text(info.default))}",
            classes="field-hint",
        )
        return Horizontal(Label(info.name, classes="field-label"), field, hint, classes="field")

    # -- reading and validating ----------------------------------------------------------------

    def form_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for definition in form_fields(self.menus):
            try:
                widget = self.query_one(f"#{field_id(definition.key)}")
            except Exception:
                continue
            if isinstance(widget, Select):
                values[definition.key] = "" if widget.value is Select.NULL else widget.value
            elif isinstance(widget, (Checkbox, Input)):
                values[definition.key] = widget.value
        return values

    def _visible_values(self) -> dict[str, Any]:
        """Only the fields that apply to the chosen architecture / task."""
        values = self.form_values()
        arch, corpus = values.get("model.arch", "rnn"), values.get("data.task") == "corpus"
        fields = {d.key: d for d in form_fields(self.menus)}

        task, menus = str(values.get("data.task", "")), self.menus

        def shown(d: FieldDef) -> bool:
            if _task_specific(d.key) and menus is not None and not menus.reads(task, d.key):
                return False  # a field the task does not read: not shown, not checked
            return (not d.archs or arch in d.archs) and (d.group != "corpus" or corpus)

        return {k: v for k, v in values.items() if shown(fields[k])}

    def hparam_values(self) -> dict[str, str]:
        return {name: self._hparam_values.get(name, "") for name in self._shown_hparams or ()}

    def validate_form(self) -> ExperimentConfig | None:
        """Mark invalid fields, show the first reason, enable Train only when valid."""
        if self.menus is None:
            return None
        if self.rebuilding:
            # A menu changed and its variant's inputs are not mounted yet: a config now would
            # hold the variant without its hyper-parameters. The rebuild validates when done.
            return None
        for widget in self.query(".invalid"):
            widget.remove_class("invalid")
        values = self._visible_values()
        hparams = self.hparam_values()
        first: str | None = None
        for key, value in values.items():
            message = check_field(key, value)
            if message:
                self._mark(key)
                first = first or message
        for key, value in hparams.items():
            message = check_field(f"model.{key}", value)
            if message:
                self._mark(f"model.{key}")
                first = first or message
        config = None
        if first is None:
            try:
                config = self._identified(config_from_form(self.config, values, hparams))
            except AttnlabError as err:
                first = str(err)
                key = key_in_message(first)
                if key:
                    self._mark(key)
            except Exception as err:  # a broken third-party variant must not take the lab down
                first = f"{type(err).__name__}: {err}"
        reading = False
        if values.get("data.task") == "corpus":
            # The corpus must read cleanly before Train: the preview (a thread) says so.
            preview = self.query_one(CorpusPreview)
            preview.request(
                data_for_preview((config or self.config).data, str(values.get("data.path", "")))
            )
            corpus_error = preview.status()
            if corpus_error and first is None:
                first, reading = corpus_error, preview.pending
            if corpus_error and not preview.pending:
                self._mark("data.path")
        self.error = first
        if config is not None:
            self.config = config
        status = self.query_one("#setup-status", Static)
        if reading:
            status.update(f"[dim]… {_escape(first or '')}[/]")
        elif first:
            status.update(f"[b $error]✗[/] {_escape(first)}")
        else:
            status.update(f"[b $success]✓[/] ready: {_summary(self.config, self.menus)}")
        self.query_one("#train-button", Button).disabled = first is not None
        self.query_one("#queue-button", Button).disabled = first is not None
        return config if first is None else None

    @property
    def rebuilding(self) -> bool:
        """Whether the shown hyper-parameter inputs lag the menus (a rebuild is pending)."""
        return self.menus is not None and _shape(self._wanted_groups()) != self._shown_groups

    def _identified(self, config: ExperimentConfig) -> ExperimentConfig:
        """``config`` named and described by what it is: the loaded preset's name and
        description only while the experiment is unchanged, else derived from the config."""
        origin, menus = self._origin, self.menus
        assert menus is not None
        # Compared by what they build: a preset's flat window=3 equals the form's local-m.window=3.
        if (config.data, effective_model(menus, config.model), config.train, config.decode) == (
            origin.data,
            effective_model(menus, origin.model),
            origin.train,
            origin.decode,
        ):
            return config.replace(name=origin.name, description=origin.description)
        return config.replace(name=experiment_name(config), description=describe(config))

    def _mark(self, key: str) -> None:
        section, name = key.split(".", 1)
        selectors = [f"#{field_id(key)}"] if "." not in name else []
        if section == "model":  # a variant's input, or every shown input of a flat name
            variant, _, param = name.rpartition(".")
            shown = [k for k in self._shown_hparams or () if k.rpartition(".")[2] == param]
            selectors += [
                f"#{hparam_id(param, k.rpartition('.')[0])}"
                for k in shown
                if not variant or k.rpartition(".")[0] == variant
            ]
        for selector in selectors:
            for widget in self.query(selector):
                widget.add_class("invalid")

    # -- side panel ---------------------------------------------------------------------------

    def _show_variant(self) -> None:
        info_widget = self.query_one("#variant-info", Static)
        if self.menus is None or self.side_variant not in self.menus.variants:
            info_widget.update("")
            return
        v = self.menus.variants[self.side_variant]
        lines = [
            f"[b]{_escape(v.name)}[/b]",
            _escape(v.formula),
            f"[dim]complexity[/] {_escape(v.complexity)}",
            _escape(v.known_for),
        ]
        if v.paper:
            lines.append(f"[dim]{_escape(v.paper)}[/]")
        lines.append(f"[dim]roles: {', '.join(sorted(v.roles))}[/]")
        info_widget.update("\n".join(lines))

    # -- events -------------------------------------------------------------------------------

    @on(Select.Changed, "#preset-select")
    async def _preset_chosen(self, event: Select.Changed) -> None:
        event.stop()
        if event.value is not Select.NULL:
            await self.load(str(event.value))

    @on(Select.Changed)
    async def _select_changed(self, event: Select.Changed) -> None:
        wid = event.select.id or ""
        if wid == "preset-select":
            return
        row = event.select.parent
        if self._is_attention_select(wid) and row is not None and row.display:
            self.side_variant = self._variant_of(wid, event.value)
            self._show_variant()
        if wid in (field_id("model.arch"), field_id("data.task")):
            self._apply_groups()
            if wid == field_id("model.arch") and self.menus is not None:
                names = chosen_variants(self.menus, str(event.value), self.form_values())
                self.side_variant = names[0] if names else ""
                self._show_variant()
        await self._rebuild_hparams()
        self.validate_form()

    def _is_attention_select(self, wid: str) -> bool:
        return self.menus is not None and wid in {field_id(s.key) for s in self.menus.all_slots()}

    def _variant_of(self, wid: str, value: Any) -> str:
        """The variant an attention menu stands for (an empty value resolved by its slot)."""
        if value != SAME_AS_ENCODER or self.menus is None:
            return str(value)
        values = self.form_values()
        resolved = self.menus.resolve(str(values.get("model.arch", "")), values)
        key = next(s.key for s in self.menus.all_slots() if field_id(s.key) == wid)
        return resolved.get(key, "")

    def on_show(self) -> None:
        self._recheck_corpus()  # back on Setup: the corpus may have appeared meanwhile

    def _recheck_corpus(self) -> bool:
        """Read the corpus again if its preview shows an error (the red line must not outlive
        the problem until the field is edited); True when a new read started."""
        if self.menus is None or self.form_values().get("data.task") != "corpus":
            return False
        started = self.query_one(CorpusPreview).recheck()
        if started:
            self.validate_form()  # Train waits for the new read
        return started

    def on_descendant_focus(self, event: Any) -> None:
        """Focusing an attention menu shows that variant in the side panel; focusing the
        corpus path re-reads a corpus that failed."""
        widget = event.widget
        if widget.id == field_id("data.path"):
            self._recheck_corpus()
        if isinstance(widget, Select) and self._is_attention_select(widget.id or ""):
            value = widget.value
            if value is not Select.NULL:
                value = self._variant_of(widget.id or "", value)
            if value and value is not Select.NULL:
                self.side_variant = str(value)
                self._show_variant()

    @on(Input.Changed)
    def _input_changed(self, event: Input.Changed) -> None:
        wid = event.input.id or ""
        if wid.startswith("hp-"):  # hp-<variant>--<name>
            variant, _, name = wid[3:].rpartition("--")
            self._hparam_values[f"{variant}.{name}"] = event.value
        if wid != "preset-path":
            self.validate_form()

    @on(Checkbox.Changed)
    def _check_changed(self) -> None:
        self.validate_form()

    @on(CorpusPreview.Computed)
    def _corpus_previewed(self) -> None:
        # Train follows the corpus: blocked on an error, allowed once read
        config = self.validate_form()
        queue, self._train_when_read = self._train_when_read, None
        if queue is not None:  # `t` re-read a failed corpus: train now, or say why not
            if config is not None:
                self.post_message(self.TrainRequested(config, queue=queue))
            else:
                self.app.notify(self.error or "", title="Cannot train", severity="error")

    @on(Button.Pressed, "#train-button")
    def _train(self) -> None:
        self.request_training(queue=False)

    @on(Button.Pressed, "#queue-button")
    def _queue(self) -> None:
        self.request_training(queue=True)

    def request_training(self, queue: bool = False) -> bool:
        """Post TrainRequested if the form is valid; otherwise say why (never starts a run).
        A corpus whose preview failed is read again first; the run starts when it reads."""
        if self._recheck_corpus():
            self._train_when_read = queue
            self.app.notify("reading the corpus again …", title="Train")
            return False
        config = self.validate_form()
        if config is None:
            waiting = (
                "the registries are still loading" if self.menus is None else "the form is updating"
            )
            self.app.notify(
                self.error or waiting,
                title="Cannot train",
                severity="error",
            )
            return False
        self.post_message(self.TrainRequested(config, queue=queue))
        return True

    @on(Button.Pressed, "#preset-load")
    @on(Input.Submitted, "#preset-path")
    async def _load_preset(self) -> None:
        name = self.query_one("#preset-path", Input).value.strip()
        if not name:
            self.app.notify("type a preset name or a .toml path", severity="warning")
            return
        await self.load(name)

    async def load(self, name: str) -> None:
        """Load a preset (a name from presets/ or a TOML file) into the form."""
        from attnlab.experiment import load_preset  # the registries import torch: lazily

        try:
            config = load_preset(name)
        except AttnlabError as err:
            self.app.notify(str(err), title="Cannot load preset", severity="error")
            return
        await self.set_config(config)
        self.app.notify(f"loaded {name}")

    @on(Button.Pressed, "#preset-save")
    def _save_preset(self) -> None:
        name = self.query_one("#preset-path", Input).value.strip()
        config = self.validate_form()
        if config is None or not name:
            self.app.notify(self.error or "type a file name to save to", severity="error")
            return
        path = Path(name if name.endswith(".toml") else f"{name}.toml")
        if not path.exists():
            self._write_preset(path, config)
            return

        def decide(overwrite: bool | None) -> None:
            if overwrite:
                self._write_preset(path, config)
            else:
                self.app.notify(f"{path} left as it was", title="Not saved")

        # As Export does: an existing file is replaced only when the user says so.
        self.app.push_screen(
            ConfirmScreen(f"[b]{_escape(str(path))}[/b] exists. Overwrite it with this setup?"),
            decide,
        )

    def _write_preset(self, path: Path, config: ExperimentConfig) -> None:
        from attnlab.runs import write_output_text

        # As every output a user names: whole or not at all, never over a run's file (a
        # confirmed "runs/r/config" replaced that run's config), a FIFO refused, not waited on.
        try:
            write_output_text(path, dumps_toml(config), "preset")
        except AttnlabError as err:
            self.app.notify(str(err), title="Cannot save preset", severity="error")
            return
        self.app.notify(f"saved {path}")

    async def set_config(self, config: ExperimentConfig) -> None:
        self.config = config
        self._origin = config
        self.query_one("#preset-select", PresetSelect).current = config.name
        self._hparam_values = {}  # filled from the config per variant as the rows are built
        if self.menus is not None:
            await self._rebuild_form()


class FieldInput(Input):
    """An Input that applies its own editing keys (Ctrl+A home, Ctrl+K delete to the end, …)
    in the order they were typed. Textual runs a widget's key bindings once the key has
    bubbled up to the app, while it inserts characters at once: from a fast burst
    (``C-a C-k 300`` pasted by tmux or typed quickly) the characters landed first and the
    late Ctrl+K then deleted them, leaving the field empty."""

    async def _on_key(self, event: events.Key) -> None:
        bindings = self._bindings.key_to_bindings.get(event.key, [])
        if bindings and not event.is_printable:
            event.stop()
            event.prevent_default()
            await self.run_action(bindings[0].action)
            return
        await super()._on_key(event)


class PresetSelect(Select[str]):
    """The preset menu: opens with the highlight on the current preset (``current``, the
    loaded experiment's name) rather than on the first entry."""

    current = ""

    def _watch_expanded(self, expanded: bool) -> None:
        super()._watch_expanded(expanded)
        values = [value for _, value in self._options]
        if expanded and self.current in values:
            self.query_one(SelectOverlay).highlighted = values.index(self.current)


def _task_specific(key: str) -> bool:
    """A data field only some tasks read (the task registry says which: ``Menus.reads``)."""
    return key.startswith("data.") and key != "data.task"


def _row_shown(row: Widget, arch: str, task: str, menus: Menus | None = None) -> bool:
    """A row shows when its architecture groups (if any) include ``arch``, for corpus rows
    the task is corpus, and for a task's data field the chosen task reads it."""
    groups = {c[len("group-") :] for c in row.classes if c.startswith("group-")}
    if "corpus" in groups and task != "corpus":
        return False
    if row.has_class("task-field") and menus is not None and not menus.reads(task, row.name or ""):
        return False
    archs = groups - {"corpus"}
    return not archs or arch in archs


def _flat(config: ExperimentConfig) -> dict[str, Any]:
    raw = to_dict(config)
    return {
        f"{section}.{key}": value
        for section in ("data", "model", "train", "decode")
        for key, value in raw[section].items()
    }


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def _summary(config: ExperimentConfig, menus: Menus | None) -> str:
    """``task, arch <the architecture's summary>, N steps`` (empty slots resolved)."""
    m = config.model
    spec = menus.arch_specs.get(m.arch) if menus else None
    model = spec.summary(config, menus.roles_of) if spec and menus else m.attention
    return f"{config.data.task}, {m.arch} {model}, {config.train.max_steps} steps"
