"""LM generation (attnlab.decode.generate) against full forward passes, in float64.

Every cached step's logits equal a full forward over prompt ⊕ the tokens generated so far
(rows of different lengths in one batch, and with a sliding context, the tokens the window
holds); greedy equals the arg-max continuation of explicit full-forward loops; top-k / top-p
draw only from the support a hand computation gives; the same seed gives the same tokens.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnlab.config import ExperimentConfig
from attnlab.decode.generate import Sampling, causal_map, generate, generate_steps
from attnlab.decode.sampling import filter_log_probs
from attnlab.errors import AttnlabError
from attnlab.experiment import validate
from attnlab.nn.model import build_model
from attnlab.nn.seq2seq import BOS_ID, EOS_ID, PAD_ID, UNK_ID

VOCAB = 24
SPECIAL = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)


def lm(name: str = "scaled-dot", positions: str = "rotary", prefix: str = "causal"):
    cfg = ExperimentConfig()
    model = replace(
        cfg.model,
        arch="decoder-only",
        d_model=32,
        heads=4,
        ff=64,
        dec_layers=2,
        dropout=0.0,
        positions=positions,
        self_attention=name,
        prefix=prefix,
    )
    cfg = validate(replace(cfg, model=model, data=replace(cfg.data, shared_vocab=True)))
    torch.manual_seed(0)
    return build_model(cfg, VOCAB, VOCAB).double().eval()


def full_logits(model, tokens: list[int]) -> torch.Tensor:
    """[N, V]: one full pass over ``tokens`` as an LM reads a window (an empty source)."""
    ids = torch.tensor([tokens])
    with torch.no_grad():
        return model(ids[:, :0], ids[:, :0].bool(), ids).logits[0]


def allowed(logits: torch.Tensor) -> torch.Tensor:
    out = logits.clone()
    out[..., list(SPECIAL)] = float("-inf")
    return out


PROMPTS = [[5, 9, 7, 11, 4, 6], [8, 13], [17]]


@pytest.mark.parametrize(
    ("name", "positions", "prefix"),
    [
        ("scaled-dot", "rotary", "causal"),
        ("scaled-dot", "learned", "bidirectional"),  # the prompt is still read causally
        ("gqa", "sinusoidal", "causal"),
        ("alibi", "none", "causal"),
    ],
)
def test_cached_steps_equal_the_full_forward(name, positions, prefix):
    model = lm(name, positions, prefix)
    steps = list(generate_steps(model, PROMPTS, 5, Sampling(seed=3)))
    for row, prompt in enumerate(PROMPTS):
        sequence = prompt + [int(s.tokens[row]) for s in steps]
        full = full_logits(model, sequence)
        for t, step in enumerate(steps):
            reference = full[len(prompt) - 1 + t]
            assert torch.allclose(step.logits[row], reference, atol=1e-9), (row, t)
    assert model.bidirectional == (prefix == "bidirectional")  # restored afterwards


@pytest.mark.parametrize("positions", ["rotary", "learned"])
def test_a_one_token_prompt_alone(positions):
    model = lm(positions=positions)
    steps = list(generate_steps(model, [[9]], 4, Sampling(seed=4)))
    full = full_logits(model, [9] + [int(s.tokens[0]) for s in steps])
    for t, step in enumerate(steps):
        assert torch.allclose(step.logits[0], full[t], atol=1e-9), t


def test_sliding_context_matches_the_window_it_holds():
    model = lm(positions="learned")
    context, keep, prompts = 6, 3, [[5, 9, 7, 11], [8, 13]]
    steps = list(generate_steps(model, prompts, 9, Sampling(seed=1), context=context, keep=keep))
    sequences = [p + [int(s.tokens[r]) for s in steps] for r, p in enumerate(prompts)]
    starts = [0, 0]
    slid = 0
    for t, step in enumerate(steps):
        ends = [len(p) + t for p in prompts]  # a step reads seq[end - 1], predicts seq[end]
        # the batch's cache is as long as its longest window: when that one is full, every
        # row is cut to its last ``keep`` tokens
        if max(e - s for e, s in zip(ends, starts, strict=True)) > context:
            starts = [max(0, e - keep) for e in ends]
            slid += 1
        for row, sequence in enumerate(sequences):
            window = sequence[starts[row] : ends[row]]
            reference = full_logits(model, window)[-1]
            assert torch.allclose(step.logits[row], reference, atol=1e-9), (row, t)
    assert slid >= 2  # the window did slide, more than once


def argmax_loop(model, prompt: list[int], n: int) -> list[int]:
    sequence = list(prompt)
    for _ in range(n):
        sequence.append(int(allowed(full_logits(model, sequence)[-1]).argmax()))
    return sequence[len(prompt) :]


@pytest.mark.parametrize("sampling", [Sampling(temperature=0.0), Sampling(top_k=1, seed=5)])
def test_greedy_is_the_argmax_continuation(sampling):
    model = lm()
    out = generate(model, PROMPTS, 6, sampling)
    for row, prompt in enumerate(PROMPTS):
        assert out[row].tolist() == argmax_loop(model, prompt, 6)


def test_specials_are_never_generated():
    model = lm()
    with torch.no_grad():  # make the specials the most likely tokens by far
        model.output.bias[list(SPECIAL)] = 50.0
    out = generate(model, PROMPTS, 8, Sampling(seed=2))
    assert not set(out.flatten().tolist()) & set(SPECIAL)


def support(model, prompt: list[int], sampling: Sampling, draws: int) -> set[int]:
    out = generate(model, [prompt] * draws, 1, sampling)
    return set(out[:, 0].tolist())


def test_top_k_and_top_p_restrict_the_support_to_a_hand_computed_set():
    model = lm()
    prompt = [5, 9, 7]
    probs = torch.softmax(allowed(full_logits(model, prompt)[-1]), dim=-1)
    order = sorted(range(VOCAB), key=lambda v: -float(probs[v]))
    top3 = set(order[:3])
    assert support(model, prompt, Sampling(top_k=3, seed=0), 400) == top3
    # the nucleus: the most likely tokens until their mass first reaches p
    p, mass, nucleus = 0.5, 0.0, set()
    for v in order:
        if mass >= p:
            break
        nucleus.add(v)
        mass += float(probs[v])
    assert support(model, prompt, Sampling(top_p=p, seed=0), 400) == nucleus
    # temperature 1 with no filter: every ordinary token can come (none has tiny mass here)
    assert filter_log_probs(probs.log()[None]).isfinite().sum() == VOCAB - len(SPECIAL)


def test_same_seed_same_tokens_other_seed_other_tokens():
    model = lm()
    a = generate(model, PROMPTS, 12, Sampling(temperature=1.5, seed=7))
    b = generate(model, PROMPTS, 12, Sampling(temperature=1.5, seed=7))
    c = generate(model, PROMPTS, 12, Sampling(temperature=1.5, seed=8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"sampling": Sampling(temperature=-1)}, "temperature -1"),
        ({"sampling": Sampling(temperature=float("nan"))}, "temperature nan"),
        ({"sampling": Sampling(top_k=-2)}, "top-k -2"),
        ({"sampling": Sampling(top_p=0.0)}, "top-p 0"),
        ({"sampling": Sampling(seed=-1)}, "seed -1"),
        ({"max_new": 0}, "max-new 0"),
        ({"prompts": [[5], []]}, "empty prompt"),
    ],
)
def test_bad_values_are_one_line(kwargs, words):
    args = {"prompts": PROMPTS, "max_new": 2, "sampling": Sampling()} | kwargs
    with pytest.raises(AttnlabError, match=words) as err:
        generate(lm(), args["prompts"], args["max_new"], args["sampling"])
    assert "\n" not in str(err.value)


def test_causal_map_is_lower_triangular_and_stochastic():
    model = lm()
    maps = causal_map(model, [5, 9, 7, 11, 4])
    assert maps.shape == (2, 4, 5, 5)
    assert torch.all(maps.triu(diagonal=1) == 0)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 4, 5, dtype=maps.dtype))


def test_on_each_device_greedy_matches_the_cpu_and_a_seed_repeats(device):
    cpu = lm()
    model = lm().to(device)
    greedy = Sampling(temperature=0.0)
    expected = generate(cpu, PROMPTS, 6, greedy)
    assert torch.equal(generate(model, PROMPTS, 6, greedy).cpu(), expected)
    sampled = Sampling(top_p=0.9, seed=11)
    first = generate(model, PROMPTS, 6, sampled, context=5)
    assert first.device.type == torch.device(device).type
    assert torch.equal(first, generate(model, PROMPTS, 6, sampled, context=5))
