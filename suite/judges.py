"""Pairwise judges for generative-reward-model rewards (used by RRC, ``algorithms/rrc.py``).

Engine infrastructure, not an entry: the ``lm`` judge loads a model (``suite/models.py``), so this
module lives with the engine and the entries import it.

A judge answers one question: with responses ``first`` and ``second`` to a prompt shown in that
order (positions A and B), how likely is ``first`` the better one? :func:`judge_pairs` turns the
single-order verdicts into the order-debiased preference

    s(a ≻ b) = ½·[P_A(a, b) + 1 − P_A(b, a)]                      (both presentation orders)

as GRAM does (github.com/NiuTrans/GRAM, checked: softmax over the verdict tokens "A"/"B" at the
answer position, averaged over both orders). Without debiasing, ``s = P_A(a, b)``.

Registered judges (``JUDGES``; outside packages add more through the ``rlsuite.judges``
entry-point group):

* ``task`` — prefers the response the task grades higher (1, 0, or ½ on ties); deterministic
  and free. It grades through the task's own grader (``Group.grade``; grades already computed
  for the group's responses are reused), so neither the engine nor ``algorithms/`` imports
  a task.
* ``lm`` — a causal LM (a registered model name, a Hugging Face id or a local path) prompted
  with :data:`TEMPLATE`; ``P_A`` is the softmax over the logits of the verdict tokens "A"/"B" at
  the answer position. Its forward FLOPs are charged as ``ctx.charge("judge", tokens, P)``.

Judges are loaded once per (name, model) by :func:`load_judge` and shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional, Sequence

import torch
from torch import Tensor

from rlsuite.suite.registry import Registry

Charge = Callable[[str, int, int], None]
Pairs = Sequence[tuple[int, int]]

TIE_TOL = 1e-6
"""|s − ½| at or below this counts as a tie (exact for the task judge; rare for an LM judge)."""

TEMPLATE = ("Compare two responses to the same prompt and decide which one is better "
            "(correct, helpful and concise).\n\n[Prompt]\n{prompt}\n\n[Response A]\n{a}\n\n"
            "[Response B]\n{b}\n\nThe better response is (A or B):")
"""[ASSUMPTION] The LM judge's prompt (GRAM's own template was not reproduced); plain text, no
chat template."""


@dataclass(frozen=True)
class Pool:
    """The responses a judge may compare for one prompt.

    ``texts``: the responses (the group's completions, then any anchors); ``grade(text)``: the
    task's grader for this prompt; ``known``: task grades already computed for the first
    ``len(known)`` texts (None = grade on demand).
    """

    prompt: str
    texts: tuple[str, ...]
    grade: Optional[Callable[[str], float]] = None
    known: tuple[Optional[float], ...] = ()


@dataclass(frozen=True)
class Judged:
    """Verdicts on ``n`` pairs (i, j): ``s [n]`` = s(i ≻ j) (order-averaged when debiased);
    ``first [n]`` = P_A with i shown first; ``second [n]`` = P_A with j shown first (None
    without debiasing); ``calls``: single-order verdicts requested."""

    s: Tensor
    first: Tensor
    second: Optional[Tensor]
    calls: int

    @property
    def agree(self) -> Optional[Tensor]:
        """[n] bool: both orders name the same winner (or both tie); None without debiasing."""
        if self.second is None:
            return None
        return _winner(self.first) == -_winner(self.second)

    @property
    def ties(self) -> Tensor:
        return (self.s - 0.5).abs() <= TIE_TOL


@dataclass(frozen=True)
class Preference:
    """``compare``'s answer: ``p`` = s(a ≻ b); ``p_ab`` = P_A(a, b); ``p_ba`` = P_A(b, a)."""

    p: float
    p_ab: float
    p_ba: Optional[float]
    calls: int


def _winner(p: Tensor) -> Tensor:
    """+1 when the response shown first wins, −1 when it loses, 0 on a tie. [n] → [n]."""
    return torch.where((p - 0.5).abs() <= TIE_TOL, 0, torch.sign(p - 0.5)).long()


class Judge:
    """Base class: ``prefer(pool, pairs, charge) → [n]`` P_A(texts[i], texts[j]) with i shown first."""

    name: ClassVar[str] = ""
    uses_model: ClassVar[bool] = False

    @classmethod
    def load(cls, model: str) -> "Judge":
        return cls()

    def to(self, device: Any) -> "Judge":
        return self

    def prefer(self, pool: Pool, pairs: Pairs, charge: Optional[Charge] = None) -> Tensor:
        raise NotImplementedError

    def compare(self, prompt: str, response_a: str, response_b: str, *, debias: bool = True,
                grade: Optional[Callable[[str], float]] = None, charge: Optional[Charge] = None) -> Preference:
        """s(a ≻ b) for one pair (both orders when ``debias``)."""
        j = judge_pairs(self, Pool(prompt, (response_a, response_b), grade), [(0, 1)], debias, charge)
        return Preference(float(j.s[0]), float(j.first[0]), None if j.second is None else float(j.second[0]), j.calls)


def judge_pairs(judge: Judge, pool: Pool, pairs: Pairs, debias: bool = True,
                charge: Optional[Charge] = None) -> Judged:
    """Judge every pair, in both presentation orders (one batched call) when ``debias``."""
    pairs = list(pairs)
    if not pairs:
        z = torch.zeros(0)
        return Judged(z, z, z if debias else None, 0)
    if not debias:
        p = judge.prefer(pool, pairs, charge).float()
        return Judged(p, p, None, len(pairs))
    both = judge.prefer(pool, pairs + [(j, i) for i, j in pairs], charge).float()
    first, second = both[:len(pairs)], both[len(pairs):]
    return Judged(0.5 * (first + 1.0 - second), first, second, 2 * len(pairs))


class TaskJudge(Judge):
    """Prefers the response the task grades higher; ties ½."""

    name = "task"

    def prefer(self, pool: Pool, pairs: Pairs, charge: Optional[Charge] = None) -> Tensor:
        cache: dict[int, float] = {}

        def score(i: int) -> float:
            if i not in cache:
                if i < len(pool.known) and pool.known[i] is not None:
                    cache[i] = float(pool.known[i])
                elif pool.grade is not None:
                    cache[i] = float(pool.grade(pool.texts[i]))
                else:
                    raise ValueError("the task judge grades through the task's grader (Group.grade), "
                                     "which this group does not carry")
            return cache[i]

        d = torch.tensor([score(i) - score(j) for i, j in pairs], dtype=torch.float)
        return 0.5 + 0.5 * torch.sign(d)


class LMJudge(Judge):
    """A causal LM prompted with :data:`TEMPLATE`; P_A from the softmax over the "A"/"B" logits."""

    name = "lm"
    uses_model = True
    chunk = 16
    """Sequences per forward."""

    def __init__(self, model: Any, tok: Any) -> None:
        from rlsuite.suite.models import non_embedding_params

        self.model = model.eval().requires_grad_(False)
        self.tok = tok
        self.params = non_embedding_params(model)
        self.max_len = getattr(model.config, "max_position_embeddings", None)
        bos = tok.bos_token_id
        self.bos = [bos] if bos is not None and tok("a").input_ids[:1] == [bos] else []
        self.answer_sep, self.verdict_ids = _verdict_tokens(self._enc, TEMPLATE.format(prompt="q", a="x", b="y"))

    @classmethod
    def load(cls, model: str) -> "LMJudge":
        from rlsuite.suite.config import ModelConfig
        from rlsuite.suite.models import load_model

        m, tok, _ = load_model(ModelConfig(name=model, warm_start="none"))
        return cls(m, tok)

    def to(self, device: Any) -> "LMJudge":
        self.model.to(device)
        return self

    def _enc(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False).input_ids)

    def _clip(self, text: str, n: int) -> str:
        ids = self._enc(text)
        return text if len(ids) <= n else self.tok.decode(ids[:n])

    def encode(self, prompt: str, first: str, second: str) -> list[int]:
        """Token ids of the judging prompt up to the answer position (responses clipped to fit)."""
        if self.max_len:
            room = (self.max_len - len(self._enc(TEMPLATE.format(prompt=prompt, a="", b=""))) - 8) // 2
            first, second = self._clip(first, max(room, 1)), self._clip(second, max(room, 1))
        ids = self.bos + self._enc(TEMPLATE.format(prompt=prompt, a=first, b=second) + self.answer_sep)
        return ids[-self.max_len:] if self.max_len else ids

    @torch.no_grad()
    def prefer(self, pool: Pool, pairs: Pairs, charge: Optional[Charge] = None) -> Tensor:
        seqs = [self.encode(pool.prompt, pool.texts[i], pool.texts[j]) for i, j in pairs]
        out = [self._p_first(seqs[k:k + self.chunk], charge) for k in range(0, len(seqs), self.chunk)]
        return torch.cat(out) if out else torch.zeros(0)

    def _p_first(self, seqs: list[list[int]], charge: Optional[Charge]) -> Tensor:
        dev = next(self.model.parameters()).device
        L = max(map(len, seqs))
        ids = torch.full((len(seqs), L), self.tok.pad_token_id or 0, dtype=torch.long)
        attn = torch.zeros(len(seqs), L, dtype=torch.long)
        for r, s in enumerate(seqs):  # left padding: the answer position is the last column
            ids[r, L - len(s):] = torch.tensor(s)
            attn[r, L - len(s):] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(input_ids=ids.to(dev), attention_mask=attn.to(dev), position_ids=pos.to(dev),
                            logits_to_keep=1).logits[:, -1]  # [n, V]
        if charge is not None:
            charge("judge", int(attn.sum()), self.params)
        return torch.softmax(logits[:, list(self.verdict_ids)].float(), -1)[:, 0].cpu()


def _verdict_tokens(enc: Callable[[str], list[int]], text: str) -> tuple[str, tuple[int, int]]:
    """(separator appended to the prompt, ids of the verdicts "A" and "B"): the first layout in
    which each verdict is exactly one token after the prompt (" A" as one token, as in
    SentencePiece/BPE vocabularies; else a space then "A", as in character vocabularies)."""
    for sep, lead in (("", " "), (" ", ""), ("", "")):
        base = enc(text + sep)
        ids = []
        for letter in ("A", "B"):
            full = enc(text + sep + lead + letter)
            if full[:len(base)] == base and len(full) == len(base) + 1:
                ids.append(full[-1])
        if len(ids) == 2 and ids[0] != ids[1]:
            return sep, (ids[0], ids[1])
    raise ValueError("the judge's tokenizer has no single-token verdicts 'A' and 'B'")


JUDGES: Registry[type[Judge]] = Registry("judge", "rlsuite.judges")
JUDGES.register("task", TaskJudge)
JUDGES.register("lm", LMJudge)

_LOADED: dict[tuple[str, str], Judge] = {}


def load_judge(name: str, model: str = "") -> Judge:
    """The judge ``name`` (with ``model`` for LM judges), loaded once and shared."""
    cls = JUDGES.get(name)
    key = (JUDGES.canonical(name), model if cls.uses_model else "")
    if key not in _LOADED:
        _LOADED[key] = cls.load(model)
    return _LOADED[key]
