"""A variant that exists only for the tests, in its own file: its hyper-parameter ``window``
has the name local-m, sliding-window and dilated already use, with its own default (7)."""

from __future__ import annotations

from attnlab.nn.attention import ATTENTION, Attention, AttentionSpec, HParam

TWIN_DEFAULT = 7

SPEC = AttentionSpec(
    name="twin-window-test",
    roles=frozenset({"rnn-cross", "self", "causal-self", "cross"}),
    formula="score = 0 (uniform)",
    complexity="O(1)",
    known_for="a test variant whose window means something else",
    hparams=(HParam("window", TWIN_DEFAULT, "twin: its own window", low=1, high=50),),
)


class TwinWindowAttention(Attention):
    """Uniform weights over the real keys; remembers the window it was built with."""

    spec = SPEC

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        window: int = TWIN_DEFAULT,
    ):
        super().__init__()
        self.window = window
        self.out_dim = key_dim


def register() -> None:
    ATTENTION.add(SPEC.name, TwinWindowAttention, SPEC)


def unregister() -> None:
    ATTENTION.remove(SPEC.name)
