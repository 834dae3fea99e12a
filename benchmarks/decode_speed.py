"""Decoding speed and quality: batched search against a per-sentence Python search.

One RNN + Bahdanau model (bi-GRU encoder, GRU decoder, emb 64, hidden 128: the sizes of the
naive baseline in ../shared/bench/seed_naive.py) is trained briefly on Multi30k de->en
(``--train-steps``, teacher forcing, Adam) or, with ``--train-steps 0``, left at random
weights. Then, on the first ``--sentences`` test sentences (test_2016_flickr; the toy
reverse test set when ../shared/corpora/multi30k is absent):

- speed, sentences per second: attnlab's batched greedy and beam 5 (the test set in chunks of
  ``--chunk`` sentences, each one batch; the four searches take turns chunk by chunk so
  that they see the same machine load) against a re-implementation of seed_naive's
  per-sentence greedy (one ``model.step`` per token, ``.item()``) and per-sentence beam
  (a Python list of hypotheses, one ``model.step`` per hypothesis per step), all calling the
  same model's ``step`` with the same weights, the same step budget (ceil(1.5 |X|) + 10),
  </s> blocked at the first step and the GNMT length penalty alpha = 1 (as seed_naive);
- corpus BLEU (sacrebleu 13a, detokenised, lowercased like the training data) for greedy,
  beam 5, beam 5 with penalties, and sampling.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/decode_speed.py
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/decode_speed.py --naive-sentences 200  # quicker
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attnlab.config import DecodeConfig, ExperimentConfig, ModelConfig  # noqa: E402
from attnlab.data.vocab import Vocab  # noqa: E402
from attnlab.decode.search import decode_batch  # noqa: E402
from attnlab.nn.model import build_model, count_parameters  # noqa: E402
from attnlab.nn.seq2seq import BOS_ID, EOS_ID, PAD_ID, Seq2Seq  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpora" / "multi30k"
MAX_LEN_RATIO, MAX_LEN_CONST = 1.5, 10


# ------------------------------------------------------------------------------- data
def load_data(n_test: int) -> tuple[str, list[list[str]], list[list[str]], list[list[str]], list[str], Any]:
    """(name, train src, train tgt, test src tokens, test references, target detokeniser)."""
    if (CORPUS / "train.de").exists():
        from attnlab.data.tokenizers import make_tokenizer

        tok = make_tokenizer("word", lowercase=True)

        def read(name: str) -> list[str]:
            return (CORPUS / name).read_text(encoding="utf-8").splitlines()

        train_de, train_en = read("train.de"), read("train.en")
        pairs = [(tok.encode(d), tok.encode(e)) for d, e in zip(train_de, train_en, strict=True) if d.strip() and e.strip()]
        test_de, test_en = read("test_2016_flickr.de")[:n_test], read("test_2016_flickr.en")[:n_test]
        test_src = [tok.encode(line) for line in test_de]
        refs = [line.lower() for line in test_en]
        return "multi30k de-en", [p[0] for p in pairs], [p[1] for p in pairs], test_src, refs, tok.decode

    from attnlab.config import DataConfig
    from attnlab.data.dataset import load_dataset

    data = load_dataset(DataConfig(task="reverse", test_size=n_test))
    train, test = data.splits.train, data.splits.test[:n_test]
    return (
        "toy reverse",
        [list(e.src_tokens) for e in train],
        [list(e.tgt_tokens) for e in train],
        [list(e.src_tokens) for e in test],
        [" ".join(e.tgt_tokens) for e in test],
        " ".join,
    )


def pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


# --------------------------------------------------------------------------- training
def train(model: Seq2Seq, src: list[list[int]], tgt: list[list[int]], steps: int, batch: int, seed: int) -> float:
    """Teacher-forced cross-entropy, Adam 2e-3, clip 1.0; returns the wall time."""
    rng = random.Random(seed)
    order = sorted(range(len(src)), key=lambda i: len(src[i]))
    chunks = [order[i : i + batch] for i in range(0, len(order), batch)]  # length buckets
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        idx = rng.choice(chunks)
        s = pad([src[i] for i in idx])
        tgt_in = pad([[BOS_ID, *tgt[i]] for i in idx])
        tgt_out = pad([[*tgt[i], EOS_ID] for i in idx])
        out = model(s, s != PAD_ID, tgt_in)
        loss = F.cross_entropy(out.logits.reshape(-1, out.logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD_ID)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  train step {step:5d}  loss {loss.item():.3f}  {time.perf_counter() - start:.0f}s", flush=True)
    model.eval()
    return time.perf_counter() - start


# ------------------------------------------------------ per-sentence search (seed_naive)
def _forbid(logits: torch.Tensor, step: int) -> torch.Tensor:
    logits = logits.clone()
    logits[:, BOS_ID] = float("-inf")
    logits[:, PAD_ID] = float("-inf")
    if step < 1:
        logits[:, EOS_ID] = float("-inf")
    return logits


def _encode_one(model: Seq2Seq, src_ids: list[int]) -> tuple[Any, Any]:
    src = torch.tensor([src_ids])
    enc = model.encode(src, src != PAD_ID)
    return enc, model.start_state(enc)


@torch.no_grad()
def naive_greedy(model: Seq2Seq, src_ids: list[int], max_len: int) -> list[int]:
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
def naive_beam(model: Seq2Seq, src_ids: list[int], max_len: int, beam: int = 5, alpha: float = 1.0) -> list[int]:
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


# ------------------------------------------------------------------------ batched search
@torch.no_grad()
def batched(model: Seq2Seq, src: list[list[int]], cfg: DecodeConfig, batch: int) -> list[list[int]]:
    order = sorted(range(len(src)), key=lambda i: len(src[i]))
    out: list[list[int]] = [[] for _ in src]
    for start in range(0, len(order), batch):
        idx = order[start : start + batch]
        s = pad([src[i] for i in idx])
        for i, nbest in zip(idx, decode_batch(model, s, s != PAD_ID, cfg), strict=True):
            out[i] = nbest[0].tokens
    return out


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def bleu(hyps: list[list[int]], refs: list[str], vocab: Vocab, detok: Any) -> float:
    import sacrebleu

    text = [detok(vocab.decode(h)) for h in hyps]
    return sacrebleu.corpus_bleu(text, [refs[: len(text)]]).score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=1000, help="test sentences (batched runs and BLEU)")
    parser.add_argument("--naive-sentences", type=int, default=1000, help="test sentences for the per-sentence runs")
    parser.add_argument("--train-steps", type=int, default=600, help="0 = random weights")
    parser.add_argument("--train-batch", type=int, default=64)
    parser.add_argument("--batch", type=int, default=128, help="sentences per batch in batched decoding")
    parser.add_argument("--chunk", type=int, default=125, help="sentences per interleaving chunk")
    parser.add_argument("--weights", type=Path, default=Path("/tmp/attnlab-decode-bench.safetensors"),
                        help="cache of the trained weights (reused when the settings match)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    name, train_src, train_tgt, test_src_tok, refs, detok = load_data(args.sentences)
    src_vocab = Vocab.build(train_src, min_freq=2)
    tgt_vocab = Vocab.build(train_tgt, min_freq=2)
    config = ExperimentConfig(
        model=ModelConfig(arch="rnn", cell="gru", attention="bahdanau", emb=64, hidden=128,
                          bidirectional=True, input_feeding=False, dropout=0.1)
    )
    model = build_model(config, len(src_vocab), len(tgt_vocab))
    train_src_ids = [src_vocab.encode(s) for s in train_src]
    train_tgt_ids = [tgt_vocab.encode(t) for t in train_tgt]
    test_src = [src_vocab.encode(s) for s in test_src_tok]
    print(f"{name}: {len(train_src)} training pairs, {len(test_src)} test sentences, "
          f"vocab {len(src_vocab)}/{len(tgt_vocab)}, model {count_parameters(model):,} parameters")

    from safetensors.torch import load_file, save_file

    tag = f"{name}|{args.train_steps}|{args.train_batch}|{args.seed}|{len(src_vocab)}|{len(tgt_vocab)}"
    meta_path = args.weights.with_suffix(".json")
    train_s = 0.0
    if args.train_steps and args.weights.exists() and meta_path.exists() and json.loads(meta_path.read_text()).get("tag") == tag:
        model.load_state_dict(load_file(str(args.weights)))
        print(f"weights: trained {args.train_steps} steps (cached in {args.weights})")
    elif args.train_steps:
        print(f"training {args.train_steps} steps, batch {args.train_batch} ...")
        train_s = train(model, train_src_ids, train_tgt_ids, args.train_steps, args.train_batch, args.seed)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(args.weights))
        meta_path.write_text(json.dumps({"tag": tag}))
    else:
        print("weights: random (not trained)")
    model.eval()

    budgets = [max(1, math.ceil(MAX_LEN_RATIO * len(s)) + MAX_LEN_CONST) for s in test_src]
    base = DecodeConfig(max_len_ratio=MAX_LEN_RATIO, max_len_const=MAX_LEN_CONST, min_len=1, batch_size=args.batch)
    greedy_cfg = base
    beam_cfg = replace(base, beam=5, alpha=1.0)  # as seed_naive: beam 5, GNMT alpha 1
    n_naive = min(args.naive_sentences, len(test_src))

    # The machine is shared and its load moves a lot: the four searches run interleaved,
    # chunk by chunk, so each sees the same load; times are summed over the chunks.
    warm = test_src[:16]  # first calls pay for allocator and kernel set-up: keep that out
    batched(model, warm, greedy_cfg, args.batch)
    batched(model, warm, beam_cfg, args.batch)
    naive_greedy(model, warm[0], budgets[0])
    naive_beam(model, warm[0], budgets[0])
    print(f"decoding, interleaved in chunks of {args.chunk} sentences ...", flush=True)
    labels = ["batched greedy", "per-sentence greedy", "batched beam 5 (alpha 1)", "per-sentence beam 5 (alpha 1)"]
    seconds = dict.fromkeys(labels, 0.0)
    counts = dict.fromkeys(labels, 0)
    g_batched: list[list[int]] = []
    g_naive: list[list[int]] = []
    b_batched: list[list[int]] = []
    b_naive: list[list[int]] = []
    for start in range(0, len(test_src), args.chunk):
        chunk = test_src[start : start + args.chunk]
        n_chunk_naive = max(0, min(len(chunk), n_naive - start))
        naive_part = list(zip(chunk[:n_chunk_naive], budgets[start : start + n_chunk_naive], strict=True))
        runs = [
            (labels[0], g_batched, len(chunk), lambda chunk=chunk: batched(model, chunk, greedy_cfg, args.batch)),
            (labels[1], g_naive, n_chunk_naive, lambda part=naive_part: [naive_greedy(model, s, b) for s, b in part]),
            (labels[2], b_batched, len(chunk), lambda chunk=chunk: batched(model, chunk, beam_cfg, args.batch)),
            (labels[3], b_naive, n_chunk_naive, lambda part=naive_part: [naive_beam(model, s, b) for s, b in part]),
        ]
        for label, sink, n, fn in runs:
            if n == 0:
                continue
            out, t = timed(fn)
            sink.extend(out)
            seconds[label] += t
            counts[label] += n
        print(f"  {start + len(chunk)} sentences done", flush=True)
    rows = [(label, counts[label], seconds[label]) for label in labels]

    rate = {label: n / t for label, n, t in rows}
    print(f"\n## Speed ({name}, {args.threads} threads, torch {torch.__version__})\n")
    print("| search | sentences | seconds | sent/s |")
    print("|---|---:|---:|---:|")
    for label, n, t in rows:
        print(f"| {label} | {n} | {t:.1f} | {n / t:.1f} |")
    print(f"\ngreedy speed-up: {rate['batched greedy'] / rate['per-sentence greedy']:.1f}x; "
          f"beam 5 speed-up: {rate['batched beam 5 (alpha 1)'] / rate['per-sentence beam 5 (alpha 1)']:.1f}x")
    same_g = sum(a == b for a, b in zip(g_batched, g_naive, strict=False)) / n_naive
    same_b = sum(a == b for a, b in zip(b_batched, b_naive, strict=False)) / n_naive
    print(f"identical outputs, batched vs per-sentence: greedy {100 * same_g:.1f}%, beam 5 {100 * same_b:.1f}%")

    quality = [
        ("greedy", greedy_cfg, g_batched),
        ("beam 5", replace(base, beam=5), None),
        ("beam 5, alpha 1 (speed run)", beam_cfg, b_batched),
        ("beam 5, alpha 0.6, beta 0.2", replace(base, beam=5, alpha=0.6, beta=0.2), None),
        ("diverse beam 6, 3 groups, lambda 0.5", replace(base, beam=6, groups=3, diversity=0.5), None),
        ("sampling, temperature 0.7, top-p 0.9", replace(base, sample=True, temperature=0.7, top_p=0.9, seed=1), None),
    ]
    print(f"\n## BLEU ({name} test, {len(test_src)} sentences, sacrebleu 13a, lowercased)\n")
    print("| search | BLEU | sent/s |")
    print("|---|---:|---:|")
    for label, cfg, hyps in quality:
        if hyps is None:
            hyps, t = timed(lambda cfg=cfg: batched(model, test_src, cfg, args.batch))
            speed = f"{len(test_src) / t:.1f}"
        else:
            speed = "(above)"
        print(f"| {label} | {bleu(hyps, refs, tgt_vocab, detok):.2f} | {speed} |", flush=True)
    if train_s:
        print(f"\n(training took {train_s:.0f}s)")


if __name__ == "__main__":
    main()
