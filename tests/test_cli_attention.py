"""``attnlab translate --show-attention --role/--layer/--head`` and its piped (plain) form, and
``attnlab runs`` column priorities. The expected maps come from the model's own forward pass."""

from __future__ import annotations

import torch
from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.cli.runs import _runs_columns
from attnlab.runs import load_checkpoint


def invoke(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def _train(tmp_path, tiny_sets, preset: str, name: str):
    result = invoke(
        "train",
        "--preset",
        preset,
        "--out",
        str(tmp_path),
        "--run-name",
        name,
        "--quiet",
        *tiny_sets,
    )
    assert result.exit_code == 0, result.output
    return tmp_path / name


def _table(output: str, title: str) -> tuple[list[str], list[tuple[str, list[int]]]]:
    """Parse one plain map: (column tokens, [(row token, ints)]) after the line ``title``."""
    lines = output.splitlines()
    at = lines.index(title)
    header = lines[at + 1].split()
    rows = []
    for line in lines[at + 2 :]:
        if line.startswith("("):
            break
        label, *cells = line.split()
        rows.append((label, [int(c) for c in cells]))
    return header, rows


def test_transformer_roles_layers_heads_plain(tmp_path, tiny_sets):
    run = _train(tmp_path, tiny_sets, "reverse-transformer", "tf")
    src = "5 9 2 7"
    default = invoke("translate", str(run), src, "--show-attention")
    assert default.exit_code == 0, default.output
    hyp = default.output.splitlines()[0].split()
    loaded = load_checkpoint(run, device=torch.device("cpu"))
    n_layers = loaded.config.model.dec_layers  # cross and decoder self live in the decoder
    n_heads = loaded.config.model.heads
    title = f"cross-attention (target × source), layer {n_layers - 1}/{n_layers}, head average"
    header, rows = _table(default.output, title)
    assert header == src.split()
    assert "\x1b" not in default.output and "█" not in default.output  # no colour legend piped

    # Reference: one teacher-forced pass over <s> + hyp, decoder self-attention, layer 0, head 1.
    result = invoke(
        "translate",
        str(run),
        src,
        "--show-attention",
        "--role",
        "dec-self",
        "--layer",
        "0",
        "--head",
        "1",
    )
    assert result.exit_code == 0, result.output
    title = f"decoder self-attention (target × target), layer 0/{n_layers}, head 1/{n_heads}"
    header, rows = _table(result.output, title)
    assert header == ["<s>", *hyp]
    ids = loaded.src_vocab.encode(src.split())
    tgt = [2, *loaded.tgt_vocab.encode(hyp)]  # BOS_ID = 2
    with torch.no_grad():
        out = loaded.model(
            torch.tensor([ids]), torch.tensor([ids]) != 0, torch.tensor([tgt]), need_weights=True
        )
    expected = out.attentions["dec_self"][0, 0, 1]  # [T, T]
    assert [label for label, _ in rows] == ["<s>", *hyp]
    for k, (_, values) in enumerate(rows):
        assert values == [round(100 * float(v)) for v in expected[k]]
        assert abs(sum(values) - 100) <= len(values)  # a distribution over the keys
        assert all(v == 0 for v in values[k + 1 :])  # causal: nothing on later tokens

    enc = invoke("translate", str(run), src, "--show-attention", "--role", "enc-self")
    assert "encoder self-attention (source × source)" in enc.output

    bad = invoke("translate", str(run), src, "--show-attention", "--head", str(n_heads))
    assert bad.exit_code == 2
    assert bad.output.splitlines() == [  # the one line, not a translation first
        f"error: --head {n_heads}: this model has {n_heads} heads; valid: 0..{n_heads - 1}"
    ]


def test_sigmoid_maps_print_plain_without_a_row_sum(tmp_path, tiny_sets):
    """Sigmoid attention's rows are "unnormalised": the piped map prints (it raised KeyError)
    with a footer that claims no row sum; the numbers are the model's own forward weights."""
    sets = ["--set", "model.self_attention=sigmoid", "--set", "model.cross_attention=sigmoid"]
    run = _train(tmp_path, [*tiny_sets, *sets], "reverse-transformer", "sig")
    src = "5 9 2 7"
    footer = "(weights x 100; rows: queries, columns: keys; rows need not sum to 100)"
    cross = invoke("translate", str(run), src, "--show-attention")
    assert cross.exit_code == 0, cross.output
    assert cross.output.rstrip().endswith(footer)
    enc = invoke("translate", str(run), src, "--show-attention", "--role", "enc-self")
    assert enc.exit_code == 0, enc.output
    assert enc.output.rstrip().endswith(footer)
    loaded = load_checkpoint(run, device=torch.device("cpu"))
    n_layers = loaded.config.model.enc_layers
    title = f"encoder self-attention (source × source), layer {n_layers - 1}/{n_layers}"
    header, rows = _table(enc.output, f"{title}, head average")
    ids = loaded.src_vocab.encode(src.split())
    with torch.no_grad():
        out = loaded.model(
            torch.tensor([ids]), torch.tensor([ids]) != 0, torch.tensor([[2]]), need_weights=True
        )
    expected = out.attentions["enc_self"][0, -1].mean(0)  # [S, S], heads averaged
    assert header == src.split()
    assert [values for _, values in rows] == [
        [round(100 * float(v)) for v in row] for row in expected
    ]


def test_rnn_has_only_cross_attention(tmp_path, tiny_sets):
    run = _train(tmp_path, tiny_sets, "reverse-bahdanau", "rnn")
    result = invoke("translate", str(run), "1 2 3", "--show-attention", "--role", "enc-self")
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert lines == [
        "error: --role enc-self: a rnn model has no enc-self attention; valid: --role cross"
    ]
    ok = invoke("translate", str(run), "1 2 3", "--show-attention")
    assert "cross-attention (target × source), layer 0/1, head average" in ok.output


def test_runs_columns_keep_metrics_at_80_and_everything_at_120():
    rows = [
        {
            "run": "reverse-rnn-luong-general-20261129-101544",
            "task": "reverse",
            "model": "rnn/luong-general",
            "params": "9k",
            "steps": "1500",
            "BLEU": "97.4",
            "chrF": "98.1",
            "EM": "0.91",
            "tok/s": "26649",
            "status": "finished",
        }
    ]
    narrow, width80 = _runs_columns(rows, 80)
    # the name is never cut: the model column goes first (41 + metrics + status fill 77)
    assert narrow == ["run", "BLEU", "chrF", "EM", "status"]
    assert width80 == len(rows[0]["run"])
    assert _runs_columns(rows, 30) == (["run"], len(rows[0]["run"]))
    wide, width120 = _runs_columns(rows, 132)  # the uncut name takes 41 of them
    assert wide == [
        "run",
        "task",
        "model",
        "params",
        "steps",
        "BLEU",
        "chrF",
        "EM",
        "tok/s",
        "status",
    ]
    assert width120 == width80
    assert _runs_columns(rows, None)[0] == wide  # piped: everything


def test_translate_names_unknown_source_tokens_and_labels_them_unk(tmp_path, tiny_sets):
    run = _train(tmp_path, tiny_sets, "reverse-bahdanau", "oov")
    vocab = load_checkpoint(run).src_vocab
    assert "zz" not in vocab.stoi and "qq" not in vocab.stoi and "1" in vocab.stoi
    result = invoke("translate", str(run), "1 zz 3 zz qq", "--show-attention")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "zz, qq" in warnings[0] and "2 source tokens" in warnings[0]
    title = next(line for line in result.output.splitlines() if line.startswith("cross-att"))
    header, _rows = _table(result.output, title)
    assert header == ["1", "<unk>", "3", "<unk>", "<unk>"]
    clean = invoke("translate", str(run), "1 2 3")
    assert "warning" not in clean.stderr


def test_decoder_only_maps_cover_prompt_and_target(tmp_path, tiny_sets):
    """A decoder-only model's dec-self map is one causal map over prompt ⊕ <s> ⊕ target (the
    model's own weights); its cross map is the target-over-prompt block, rows sum to <= 100."""
    sets = ["--set", "model.d_model=16", "--set", "model.heads=2", "--set", "model.ff=32"]
    run = _train(tmp_path, [*tiny_sets, *sets], "reverse-decoder-only", "gpt")
    src = "5 9 2 7"
    cross = invoke("translate", str(run), src, "--show-attention")
    assert cross.exit_code == 0, cross.output
    hyp = cross.output.splitlines()[0].split()
    assert cross.output.rstrip().endswith("rows sum to <= 100; ∅ = unattended mass (1 − row sum))")
    whole = invoke("translate", str(run), src, "--show-attention", "--role", "dec-self")
    assert whole.exit_code == 0, whole.output
    loaded = load_checkpoint(run, device=torch.device("cpu"))
    n_layers = loaded.config.model.dec_layers
    title = f"decoder self-attention (target × target), layer {n_layers - 1}/{n_layers}"
    header, rows = _table(whole.output, f"{title}, head average")
    assert header == [*src.split(), "<s>", *hyp]
    ids = loaded.src_vocab.encode(src.split())
    tgt = [2, *loaded.tgt_vocab.encode(hyp)]
    with torch.no_grad():
        out = loaded.model(
            torch.tensor([ids]), torch.tensor([ids]) != 0, torch.tensor([tgt]), need_weights=True
        )
    expected = out.attentions["dec_self"][0, -1].mean(0)  # [S+T, S+T]
    assert [values for _, values in rows] == [
        [round(100 * float(v)) for v in row] for row in expected
    ]
    for k, (_, values) in enumerate(rows):  # causal prefix (the preset's): nothing later
        assert all(v == 0 for v in values[k + 1 :])
    bad = invoke("translate", str(run), src, "--show-attention", "--role", "enc-self")
    assert bad.exit_code == 2
    assert bad.output.splitlines() == [
        "error: --role enc-self: a decoder-only model has no enc-self attention; "
        "valid: --role dec-self, --role cross"
    ]
