"""Decoding speed and quality: attnlab's batched search against per-sentence Python search.

Issue 4's definition, measured side by side in one run on the 1000 Multi30k test sentences
(test_2016_flickr, de->en; the toy reverse test set when ../shared/corpora/multi30k is absent):

- data as in ../shared/bench (make-toy.py / seed_naive.py): lower-cased, regex-tokenised
  (``\\w+|[^\\w\\s]``), vocabularies from the training side with min_freq 2 (at most 10,000),
  training pairs longer than 50 tokens dropped, every search capped at 60 steps
  (seed_naive's max_output_length, </s> included), </s> blocked at the first step,
  beam 5 with the GNMT length penalty alpha = 1 (JoeyNMT's beam_alpha 1, as seed_naive);
- two models of the naive baseline's sizes (emb 64, bi-GRU 128 per direction, GRU decoder
  128, Bahdanau attention, dropout 0.1), trained on the same batches with the same recipe
  (CE summed over tokens / sentences, Adam 2e-3, clip 1.0, ``--updates`` batches of 64
  sentences) and cached under /tmp, so a rerun skips training:
  * attnlab's ``RNNSeq2Seq`` (no input feeding);
  * seed_naive's ``Seq2Seq``, imported from ../shared/bench/seed_naive.py (not copied);
- speed, sentences per second:
  * the issue's comparison: attnlab's batched greedy / beam 5 (``decode_sorted``: sorted by
    length, ``--batch`` sentences per batch) against seed_naive's own per-sentence
    ``greedy_one`` / ``beam_one`` on its own model (same sizes, different weights and a
    heavier tutorial-style step: repeat+concat attention, a 448 -> V output layer);
  * the stricter one: the same batched search against a per-sentence loop over attnlab's
    *own* ``model.step`` (same weights; ``own_greedy_one`` / ``own_beam_one`` below follow
    ``greedy_one`` / ``beam_one`` line by line);
  decode time depends on how long hypotheses run, so the mean hypothesis length of every
  search is printed beside its BLEU.
- corpus BLEU (sacrebleu 13a on the tokenised, lower-cased text, as seed_naive) of greedy,
  beam 5, beam 5 + penalties (alpha 0.6, beta 0.2) and sampling on attnlab's model.

Timing: ``--rounds`` rounds (default 4). Each round times every batched search on all test
sentences (median over rounds is reported) and every per-sentence search on the round's
share of the sentences (summed over rounds), so all searches see the same machine load.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/decode_speed.py
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/decode_speed.py --sentences 200   # quicker

With ``--ctranslate2 RUN`` (a trained Transformer run, e.g. multi30k-transformer) the script
instead exports RUN to CTranslate2 at float32 and at int8 and times, side by side in one run,
attnlab's batched greedy / beam 5 against CTranslate2's on the run's own test sentences (its
tokenizer and vocabularies; the same step budgets, the same batch sizes, ``--threads`` for
both): sentences/s, BLEU (sacrebleu on detokenised text, as ``attnlab eval``), and the share
of sentences whose tokens equal attnlab's, with the largest score difference among them;
then every sentence where float32 differs, with both engines' log-probs (a tie within
rounding, or which search found the likelier hypothesis), and CTranslate2's
``return_attention`` against attnlab's teacher-forced map (``--attention-sentences``).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/decode_speed.py --ctranslate2 runs/m30k-tf
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attnlab.allocator import retain_freed_memory  # noqa: E402
from attnlab.config import DecodeConfig, ExperimentConfig, ModelConfig  # noqa: E402
from attnlab.data.vocab import Vocab  # noqa: E402
from attnlab.decode.search import decode_sorted, sentences_per_batch  # noqa: E402
from attnlab.nn.model import build_model, count_parameters  # noqa: E402
from attnlab.nn.seq2seq import BOS_ID, EOS_ID, PAD_ID, Seq2Seq  # noqa: E402

SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpora" / "multi30k"
NAIVE_PATH = SHARED / "bench" / "seed_naive.py"
TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)  # make-toy.py's tokenisation
MAX_TRAIN_LEN = 50  # seed_naive / JoeyNMT max_length on multi30k
CACHE = Path("/tmp/attnlab-decode-bench")


# ------------------------------------------------------------------------------- data
def load_data() -> tuple[
    str, list[list[str]], list[list[str]], list[list[str]], list[list[str]], int
]:
    """(name, train src, train tgt, test src, test tgt, max output length) as token lists."""
    if (CORPUS / "train.de").exists():

        def read(name: str) -> list[list[str]]:
            lines = (CORPUS / name).read_text(encoding="utf-8").splitlines()
            return [TOKEN.findall(line.strip().lower()) for line in lines]

        def pairs(prefix: str) -> list[tuple[list[str], list[str]]]:
            return [
                (d, e)
                for d, e in zip(read(f"{prefix}.de"), read(f"{prefix}.en"), strict=True)
                if d and e
            ]

        train = [
            (d, e) for d, e in pairs("train") if len(d) <= MAX_TRAIN_LEN and len(e) <= MAX_TRAIN_LEN
        ]
        test = pairs("test_2016_flickr")
        return (
            "multi30k de-en",
            [p[0] for p in train],
            [p[1] for p in train],
            [p[0] for p in test],
            [p[1] for p in test],
            60,
        )

    from attnlab.config import DataConfig
    from attnlab.data.dataset import load_dataset

    data = load_dataset(DataConfig(task="reverse", test_size=1000))
    train, test = data.splits.train, data.splits.test
    return (
        "toy reverse",
        [list(e.src_tokens) for e in train],
        [list(e.tgt_tokens) for e in train],
        [list(e.src_tokens) for e in test],
        [list(e.tgt_tokens) for e in test],
        30,
    )


def load_naive() -> Any:
    """seed_naive.py as a module (it is run with this venv's torch, not copied)."""
    spec = importlib.util.spec_from_file_location("seed_naive", NAIVE_PATH)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import {NAIVE_PATH}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pad(rows: list[list[int]], value: int = PAD_ID) -> torch.Tensor:
    width = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


# --------------------------------------------------------------------------- training
LossFn = Callable[[list[int]], torch.Tensor]


def train(
    model: torch.nn.Module, loss_of: LossFn, n_train: int, updates: int, batch: int, seed: int
) -> float:
    """seed_naive's recipe: shuffled epochs of ``batch`` sentences, Adam 2e-3, clip 1.0.

    Returns the wall time.
    """
    rng = random.Random(seed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    model.train()
    order: list[int] = []
    pos = 0
    start = time.perf_counter()
    for step in range(updates):
        if pos >= len(order):
            order = list(range(n_train))
            rng.shuffle(order)
            pos = 0
        idx = order[pos : pos + batch]
        pos += batch
        loss = loss_of(idx)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == updates - 1:
            print(
                f"    update {step:4d}  loss/sentence {loss.item():7.2f}  "
                f"{time.perf_counter() - start:4.0f}s",
                flush=True,
            )
    model.eval()
    return time.perf_counter() - start


def cached_training(
    model: torch.nn.Module, path: Path, tag: str, fit: Callable[[], float]
) -> float:
    """Load ``path`` when it was trained with the same settings (``tag``); else train and save."""
    from safetensors.torch import load_file, save_file

    meta = path.with_suffix(".json")
    if path.exists() and meta.exists() and json.loads(meta.read_text()).get("tag") == tag:
        model.load_state_dict(load_file(str(path)))
        model.eval()
        print(f"  cached weights {path}")
        return 0.0
    seconds = fit()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    meta.write_text(json.dumps({"tag": tag, "train_s": seconds}))
    return seconds


# ------------------------------------- per-sentence search over attnlab's own model.step
def _forbid(logits: torch.Tensor, step: int) -> torch.Tensor:
    logits = logits.clone()
    logits[:, BOS_ID] = float("-inf")
    logits[:, PAD_ID] = float("-inf")
    if step < 1:  # min_output_length 1
        logits[:, EOS_ID] = float("-inf")
    return logits


def _encode_one(model: Seq2Seq, src_ids: list[int]) -> tuple[Any, Any]:
    src = torch.tensor([src_ids])
    enc = model.encode(src, src != PAD_ID)
    return enc, model.start_state(enc)


@torch.no_grad()
def own_greedy_one(model: Seq2Seq, src_ids: list[int], max_len: int) -> list[int]:
    """seed_naive.greedy_one over attnlab's ``model.step``."""
    enc, state = _encode_one(model, src_ids)
    y, out = BOS_ID, []
    for step in range(max_len):
        logits, state, _ = model.step(torch.tensor([y]), state, enc)
        y = _forbid(logits, step).argmax(1).item()
        if y == EOS_ID:
            break
        out.append(y)
    return out


@torch.no_grad()
def own_beam_one(
    model: Seq2Seq, src_ids: list[int], max_len: int, beam: int = 5, alpha: float = 1.0
) -> list[int]:
    """seed_naive.beam_one over attnlab's ``model.step``."""
    enc, state = _encode_one(model, src_ids)
    live = [([BOS_ID], 0.0, state)]
    finished: list[tuple[list[int], float]] = []
    for step in range(max_len):
        cands = []
        for toks, score, st in live:  # one decoder call per hypothesis
            logits, st2, _ = model.step(torch.tensor([toks[-1]]), st, enc)
            logp = F.log_softmax(_forbid(logits, step), dim=1).squeeze(0)
            top_lp, top_ix = logp.topk(beam)
            for lp, ix in zip(top_lp.tolist(), top_ix.tolist(), strict=True):
                cands.append((toks + [ix], score + lp, st2))
        cands.sort(key=lambda c: c[1], reverse=True)
        live = []
        for toks, score, st in cands[:beam]:
            if toks[-1] == EOS_ID:
                finished.append((toks[1:-1], score / ((5.0 + len(toks) - 1) / 6.0) ** alpha))
            else:
                live.append((toks, score, st))
        if len(finished) >= beam or not live:
            break
    if not finished:
        finished = [(t[1:], s / ((5.0 + len(t) - 1) / 6.0) ** alpha) for t, s, _ in live]
    return max(finished, key=lambda f: f[1])[0]


# ---------------------------------------------------------------------------- helpers
def batched(model: Seq2Seq, src: list[list[int]], cfg: DecodeConfig) -> list[list[int]]:
    return [nbest[0].tokens for nbest in decode_sorted(model, src, cfg)]


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def bleu(hyps: list[list[str]], refs: list[list[str]]) -> float:
    import sacrebleu

    # seed_naive's scoring: 13a corpus BLEU on the tokenised text; an empty output is "<unk>".
    text = [" ".join(h) or "<unk>" for h in hyps]
    # force: the text is tokenised on purpose (as seed_naive scores); no "forgot to detokenize"
    # warning
    refs_text = [[" ".join(r) for r in refs[: len(text)]]]
    return sacrebleu.corpus_bleu(text, refs_text, tokenize="13a", force=True).score


def mean_len(hyps: list[list[Any]]) -> float:
    return sum(len(h) for h in hyps) / max(len(hyps), 1)


# ------------------------------------------- attnlab against its CTranslate2 export
def ctranslate2_comparison(args: argparse.Namespace) -> None:
    """attnlab's batched searches and CTranslate2 float32 / int8 on one run's test set."""
    import dataclasses
    import tempfile

    from attnlab.evaluate import corpus_bleu
    from attnlab.exporters.ctranslate2 import load_ct2_model, save_ctranslate2, translate_tokens
    from attnlab.runs import load_checkpoint
    from attnlab.runs.loading import load_checkpoint_data

    loaded = load_checkpoint(Path(args.ctranslate2))
    data = loaded.config.data
    if args.corpus:
        data = dataclasses.replace(data, path=args.corpus)
    dataset = load_checkpoint_data(loaded, data)
    test = dataset.splits.test[: args.sentences]
    sources = [list(e.src_tokens) for e in test]
    source_ids = [dataset.src_vocab.encode(t) for t in sources]
    refs = [e.tgt_text or dataset.detokenize_target(e.tgt_tokens) for e in test]
    model, itos = loaded.model, dataset.tgt_vocab.itos
    base = replace(loaded.config.decode, batch_size=args.batch_size, batch_rows=args.batch_rows)
    configs = {"greedy": replace(base, beam=1), "beam 5": replace(base, beam=5)}
    print(
        f"{loaded.config.name} ({loaded.path}): {len(test)} test sentences; "
        f"torch {torch.__version__}, {args.threads} threads for both engines"
    )

    searches: dict[str, Callable[[], list[tuple[list[str], float]]]] = {}
    for label, cfg in configs.items():

        def ours(cfg: DecodeConfig = cfg) -> list[tuple[list[str], float]]:
            best = [n[0] for n in decode_sorted(model, source_ids, cfg)]
            return [([itos[i] for i in h.tokens], h.log_prob) for h in best]

        searches[f"attnlab batched {label}"] = ours
    scratch = Path(tempfile.mkdtemp(prefix="attnlab-ct2-bench-"))
    for quantization in ("float32", "int8"):
        out = save_ctranslate2(model, loaded.config, dataset, scratch / quantization, quantization)
        ct2_model = load_ct2_model(out, quantization, threads=args.threads)
        for label, cfg in configs.items():

            def theirs(cfg: DecodeConfig = cfg, m: Any = ct2_model) -> list[Any]:
                found = translate_tokens(
                    m,
                    sources,
                    cfg.beam,
                    max_len_ratio=cfg.max_len_ratio,
                    max_len_const=cfg.max_len_const,
                    batch_size=sentences_per_batch(cfg),
                )
                return [(t.tokens, t.score) for t in found]

            searches[f"CTranslate2 {quantization} {label}"] = theirs

    for fn in searches.values():  # warm-up
        fn()
    seconds: dict[str, list[float]] = {label: [] for label in searches}
    outputs: dict[str, list[tuple[list[str], float]]] = {}
    for r in range(max(1, args.rounds)):
        for label, fn in searches.items():
            outputs[label], t = timed(fn)
            seconds[label].append(t)
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in seconds.items()))

    print(
        f"\n## attnlab and CTranslate2 ({loaded.config.name}, {len(test)} sentences, step budget "
        f"ceil({base.max_len_ratio}·|X|) + {base.max_len_const}, length penalty 0; batches of "
        f"{sentences_per_batch(configs['greedy'])} (greedy) / "
        f"{sentences_per_batch(configs['beam 5'])} (beam 5) sentences; {args.threads} threads)\n"
    )
    print("| search | sent/s | BLEU | same tokens as attnlab | max score diff |")
    print("|---|---:|---:|---:|---:|")
    for label in searches:
        search = "greedy" if label.endswith("greedy") else "beam 5"
        reference = outputs[f"attnlab batched {search}"]
        same = [
            abs(a[1] - b[1]) for a, b in zip(reference, outputs[label], strict=True) if a[0] == b[0]
        ]
        text = [dataset.detokenize_target(tokens) for tokens, _ in outputs[label]]
        print(
            f"| {label} | {len(test) / statistics.median(seconds[label]):,.1f} "
            f"| {corpus_bleu(text, refs)[0].score:.2f} "
            f"| {100 * len(same) / len(test):.1f}% | {max(same, default=0.0):.2e} |"
        )
    for search in configs:
        _explain_differences(
            search, outputs[f"attnlab batched {search}"], outputs[f"CTranslate2 float32 {search}"]
        )
    _attention_parity(model, dataset, source_ids, sources, scratch / "float32", args)
    shutil.rmtree(scratch, ignore_errors=True)


TIE = 1e-4  # score gaps up to this are float32 rounding of equal-probability hypotheses


def _explain_differences(
    search: str, ours: list[tuple[list[str], float]], theirs: list[tuple[list[str], float]]
) -> None:
    """Each sentence where CTranslate2 float32 and attnlab differ, with both log-probs.

    Both scores are log P of the engine's own hypothesis under the same weights, so they
    say which search found the likelier translation, or that the two tie within rounding.
    """
    diffs = [(i, a, b) for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a[0] != b[0]]
    print(f"\n### {search}: {len(diffs)} of {len(ours)} sentences differ (float32)")
    for i, (tokens, score), (their_tokens, their_score) in diffs:
        gap = their_score - score
        if abs(gap) <= TIE:
            why = f"a tie within float32 rounding (|gap| {abs(gap):.1e})"
        elif gap > 0:
            why = f"CTranslate2's is likelier by {gap:.3g} (attnlab's search missed it)"
        else:
            why = f"attnlab's is likelier by {-gap:.3g} (CTranslate2's search missed it)"
        print(
            f"- sentence {i}: attnlab {' '.join(tokens)!r} ({score:.4f}) · CTranslate2 "
            f"{' '.join(their_tokens)!r} ({their_score:.4f}): {why}"
        )


def _attention_parity(
    model: Seq2Seq,
    dataset: Any,
    source_ids: list[list[int]],
    sources: list[list[str]],
    model_dir: Path,
    args: argparse.Namespace,
) -> None:
    """CTranslate2's return_attention (float32 greedy, untimed) against attnlab's
    teacher-forced map of the same hypothesis: last decoder layer, head average."""
    from attnlab.exporters.ctranslate2 import load_ct2_model, translate_tokens

    count = min(len(sources), args.attention_sentences)
    ct2_model = load_ct2_model(model_dir, "float32", threads=args.threads)
    found = translate_tokens(ct2_model, sources[:count], 1, return_attention=True)
    largest, checked = 0.0, 0
    for src_ids, translation in zip(source_ids, found, strict=False):
        if not translation.tokens or translation.attention is None:
            continue
        tgt_ids = dataset.tgt_vocab.encode(translation.tokens)
        src = torch.tensor([src_ids])
        with torch.no_grad():
            out = model(src, src != PAD_ID, torch.tensor([[BOS_ID, *tgt_ids]]), need_weights=True)
        ours = out.attentions["cross"][0, -1, :, : len(tgt_ids)].mean(0)  # [T, S]
        theirs = torch.tensor(translation.attention)
        largest = max(largest, float((ours - theirs).abs().max()))
        checked += 1
    print(
        f"\nreturn_attention (float32 greedy, first {count} sentences, {checked} non-empty): "
        f"largest |CTranslate2 - attnlab| weight {largest:.2e} (last layer, head average)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sentences", type=int, default=1000, help="test sentences (all searches)")
    parser.add_argument(
        "--updates", type=int, default=300, help="training batches of seed_naive's model"
    )
    parser.add_argument(
        "--attnlab-updates",
        type=int,
        default=600,
        help="training batches of attnlab's model (it learns slower per update: see the README)",
    )
    parser.add_argument("--train-batch", type=int, default=64)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="decode.batch_size: sentences per batch (0: fill --batch-rows)",
    )
    parser.add_argument(
        "--batch-rows", type=int, default=DecodeConfig().batch_rows, help="decode.batch_rows"
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--skip-naive", action="store_true", help="only the stricter comparison (no seed_naive)"
    )
    parser.add_argument(
        "--ctranslate2",
        metavar="RUN",
        help="compare attnlab with its CTranslate2 export (float32, int8) on RUN's test set",
    )
    parser.add_argument(
        "--attention-sentences",
        type=int,
        default=200,
        help="with --ctranslate2: sentences whose return_attention is checked (untimed)",
    )
    parser.add_argument(
        "--corpus", help="with --ctranslate2: the corpus directory, if not RUN's data.path"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    retain_freed_memory()  # as the attnlab command does at start-up (both sides share this process)
    if args.ctranslate2:
        ctranslate2_comparison(args)
        return

    name, train_src, train_tgt, test_src_tok, test_tgt_tok, max_out = load_data()
    test_src_tok, test_tgt_tok = test_src_tok[: args.sentences], test_tgt_tok[: args.sentences]
    n_test = len(test_src_tok)

    # ---- attnlab's model and vocabularies (pad 0, unk 1, <s> 2, </s> 3)
    src_vocab = Vocab.build(train_src, min_freq=2, max_size=10000)
    tgt_vocab = Vocab.build(train_tgt, min_freq=2, max_size=10000)
    config = ExperimentConfig(
        model=ModelConfig(
            arch="rnn",
            cell="gru",
            attention="bahdanau",
            emb=64,
            hidden=128,
            bidirectional=True,
            input_feeding=False,
            dropout=0.1,
        )
    )
    torch.manual_seed(args.seed)
    model = build_model(config, len(src_vocab), len(tgt_vocab))
    train_s_ids = [src_vocab.encode(s) for s in train_src]
    train_t_ids = [tgt_vocab.encode(t) for t in train_tgt]
    test_src = [src_vocab.encode(s) for s in test_src_tok]
    print(
        f"{name}: {len(train_src)} training pairs, {n_test} test sentences, "
        f"vocab {len(src_vocab)}/{len(tgt_vocab)}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )

    def attnlab_loss(idx: list[int]) -> torch.Tensor:
        s = pad([train_s_ids[i] for i in idx])
        tgt_in = pad([[BOS_ID, *train_t_ids[i]] for i in idx])
        tgt_out = pad([[*train_t_ids[i], EOS_ID] for i in idx])
        logits = model(s, s != PAD_ID, tgt_in).logits
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            tgt_out.reshape(-1),
            ignore_index=PAD_ID,
            reduction="sum",
        ) / len(idx)

    tag = f"{name}|{args.train_batch}|{args.seed}|{len(src_vocab)}|{len(tgt_vocab)}"
    print(f"attnlab RNNSeq2Seq, {count_parameters(model):,} parameters")
    ours_train_s = cached_training(
        model,
        CACHE / "attnlab.safetensors",
        f"{tag}|{args.attnlab_updates}",
        lambda: train(
            model, attnlab_loss, len(train_src), args.attnlab_updates, args.train_batch, args.seed
        ),
    )

    # ---- seed_naive's model (its own vocabularies: unk 0, pad 1, <s> 2, </s> 3)
    naive_mod = None if args.skip_naive else load_naive()
    if naive_mod is not None:
        n_src_vocab = naive_mod.Vocab(train_src, 10000, 2)
        n_tgt_vocab = naive_mod.Vocab(train_tgt, 10000, 2)
        torch.manual_seed(args.seed)
        naive = naive_mod.Seq2Seq(len(n_src_vocab), len(n_tgt_vocab))
        n_train = [
            (n_src_vocab.encode(a), n_tgt_vocab.encode(b))
            for a, b in zip(train_src, train_tgt, strict=True)
        ]
        n_test_src = [n_src_vocab.encode(s) for s in test_src_tok]

        def naive_loss(idx: list[int]) -> torch.Tensor:  # seed_naive.main's training step
            src, src_len = naive_mod.pad_batch([n_train[i][0] for i in idx])
            trg, _ = naive_mod.pad_batch([n_train[i][1] for i in idx], bos=True)
            trg_in, trg_out = trg[:, :-1], trg[:, 1:]
            trg_in = trg_in.masked_fill(trg_in == naive_mod.EOS, naive_mod.PAD)
            logits = naive(src, src_len, trg_in)
            return F.cross_entropy(
                logits.reshape(-1, logits.size(-1)),
                trg_out.reshape(-1),
                ignore_index=naive_mod.PAD,
                reduction="sum",
            ) / len(idx)

        print(f"seed_naive Seq2Seq, {sum(p.numel() for p in naive.parameters()):,} parameters")
        naive_train_s = cached_training(
            naive,
            CACHE / "seed_naive.safetensors",
            f"{tag}|{args.updates}",
            lambda: train(
                naive, naive_loss, len(train_src), args.updates, args.train_batch, args.seed
            ),
        )
    model.eval()

    # ---- the searches; every one capped at max_out steps (</s> included), </s> blocked at step 0
    base = DecodeConfig(
        max_len_ratio=0.0,
        max_len_const=max_out,
        min_len=1,
        batch_size=args.batch_size,
        batch_rows=args.batch_rows,
    )
    greedy_cfg = base
    beam_cfg = replace(base, beam=5, alpha=1.0)
    searches: dict[
        str, tuple[bool, Callable[[list[int]], Any]]
    ] = {}  # label -> (per-sentence?, fn)
    searches["attnlab batched greedy"] = (False, lambda: batched(model, test_src, greedy_cfg))
    searches["attnlab batched beam 5"] = (False, lambda: batched(model, test_src, beam_cfg))
    searches["attnlab per-sentence greedy"] = (
        True,
        lambda i: own_greedy_one(model, test_src[i], max_out),
    )
    searches["attnlab per-sentence beam 5"] = (
        True,
        lambda i: own_beam_one(model, test_src[i], max_out, 5, 1.0),
    )
    if naive_mod is not None:
        searches["seed_naive greedy_one"] = (
            True,
            lambda i: naive_mod.greedy_one(naive, n_test_src[i], max_out),
        )
        searches["seed_naive beam_one"] = (
            True,
            lambda i: naive_mod.beam_one(naive, n_test_src[i], max_out, 5, 1.0),
        )

    # warm-up: the first calls pay for allocator and kernel set-up
    decode_sorted(model, test_src[:32], greedy_cfg)
    decode_sorted(model, test_src[:32], beam_cfg)
    for per_sentence, fn in searches.values():
        if per_sentence:
            fn(0)

    print(f"\ndecoding {n_test} sentences, {args.rounds} rounds ...", flush=True)
    rounds = max(1, args.rounds)
    bounds = [round(r * n_test / rounds) for r in range(rounds + 1)]
    seconds: dict[str, list[float]] = {label: [] for label in searches}
    outputs: dict[str, list[Any]] = {label: [] for label in searches}
    for r in range(rounds):
        part = range(bounds[r], bounds[r + 1])
        for label, (per_sentence, fn) in searches.items():
            if per_sentence:
                out, t = timed(lambda fn=fn, part=part: [fn(i) for i in part])
                outputs[label].extend(out)
            else:
                out, t = timed(fn)
                outputs[label] = out
            seconds[label].append(t)
        print(
            f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in seconds.items()),
            flush=True,
        )

    rate = {}
    for label, (per_sentence, _) in searches.items():
        # per-sentence: each round decoded its share; batched: each round decoded everything
        rate[label] = (
            n_test / sum(seconds[label])
            if per_sentence
            else n_test / statistics.median(seconds[label])
        )

    def words(label: str) -> list[list[str]]:
        ids = outputs[label]
        if label.startswith("seed_naive"):
            return [[n_tgt_vocab.itos[i] for i in h] for h in ids]
        return [tgt_vocab.decode(h) for h in ids]

    print(
        f"\n## Speed ({name}, {n_test} sentences, cap {max_out} steps, beam 5 alpha 1; batches of "
        f"{sentences_per_batch(greedy_cfg)} (greedy) / {sentences_per_batch(beam_cfg)} (beam 5) "
        "sentences sorted by length; "
        f"{args.threads} threads, torch {torch.__version__})\n"
    )
    print("| search | sent/s | mean hyp. length | BLEU |")
    print("|---|---:|---:|---:|")
    for label in searches:
        print(
            f"| {label} | {rate[label]:,.1f} | {mean_len(outputs[label]):.2f} "
            f"| {bleu(words(label), test_tgt_tok):.2f} |"
        )
    ratios = {
        "greedy": rate["attnlab batched greedy"] / rate["attnlab per-sentence greedy"],
        "beam 5": rate["attnlab batched beam 5"] / rate["attnlab per-sentence beam 5"],
    }
    print(
        "\nstricter (same model, same weights): "
        "batched vs a per-sentence loop over attnlab's model.step: "
        f"greedy {ratios['greedy']:.1f}x, beam 5 {ratios['beam 5']:.1f}x"
    )
    same_g = sum(
        a == b
        for a, b in zip(
            outputs["attnlab batched greedy"], outputs["attnlab per-sentence greedy"], strict=True
        )
    )
    print(
        f"  identical outputs: greedy {100 * same_g / n_test:.1f}% "
        "(beam differs by design: the per-sentence beam does not refill finished beams)"
    )
    if naive_mod is not None:
        g = rate["attnlab batched greedy"] / rate["seed_naive greedy_one"]
        b = rate["attnlab batched beam 5"] / rate["seed_naive beam_one"]
        print(
            f"issue 4 (same sizes, seed_naive's own decoder): greedy {g:.1f}x, beam 5 {b:.1f}x "
            f"(target >= 20x: {'met' if min(g, b) >= 20 else 'NOT met'})"
        )

    quality = [
        ("greedy", greedy_cfg, outputs["attnlab batched greedy"]),
        ("beam 5 (alpha 1, the speed run)", beam_cfg, outputs["attnlab batched beam 5"]),
        ("beam 5 (no penalties)", replace(base, beam=5), None),
        ("beam 5, alpha 0.6, beta 0.2", replace(base, beam=5, alpha=0.6, beta=0.2), None),
        (
            "sampling, temperature 0.7, top-p 0.9, seed 1",
            replace(base, sample=True, temperature=0.7, top_p=0.9, seed=1),
            None,
        ),
    ]
    print(
        f"\n## BLEU of attnlab's model ({name} test, {n_test} sentences, "
        "sacrebleu 13a on tokenised lower-cased text)\n"
    )
    print("| search | BLEU | mean hyp. length | sent/s |")
    print("|---|---:|---:|---:|")
    scores = {}
    for label, cfg, hyps in quality:
        if hyps is None:
            hyps, t = timed(lambda cfg=cfg: batched(model, test_src, cfg))
            speed = f"{n_test / t:,.1f}"
        else:
            speed = "(above)"
        scores[label] = bleu([tgt_vocab.decode(h) for h in hyps], test_tgt_tok)
        print(f"| {label} | {scores[label]:.2f} | {mean_len(hyps):.2f} | {speed} |", flush=True)
    best_beam = max(scores["beam 5 (alpha 1, the speed run)"], scores["beam 5 (no penalties)"])
    worst_beam = min(scores["beam 5 (alpha 1, the speed run)"], scores["beam 5 (no penalties)"])
    print(
        f"\nbeam 5 >= greedy: {'yes' if worst_beam >= scores['greedy'] else 'NO'} "
        f"(greedy {scores['greedy']:.2f}, best beam 5 {best_beam:.2f})"
    )
    if ours_train_s or (naive_mod is not None and naive_train_s):
        print(
            f"(training: attnlab {ours_train_s:.0f}s"
            + (f", seed_naive {naive_train_s:.0f}s" if naive_mod is not None else "")
            + ")"
        )


if __name__ == "__main__":
    main()
