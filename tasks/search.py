"""``search``: Search-R1-style tool-use QA (Jin et al. 2025, arXiv 2503.09516).

Protocol (Search-R1 ``search_r1/llm_agent/generation.py`` and its instruction template):
the model reasons, may write ``<search> query </search>``; the environment answers with
``\\n\\n<information>Doc 1(Title: "t") text\\nDoc 2(...) ...</information>\\n\\n`` (the top-k
passages; an observation, masked out of the loss); the model ends with
``<answer> … </answer>``. A policy turn ends on ``</search>``, ``</answer>`` or EOS; a turn
that ends with an answer, or on EOS, ends the episode. A turn whose first tag pair is
neither a search nor an answer gets Search-R1's "My previous action is invalid ..." message
as its observation. ``rollout.max_turns`` bounds the policy turns.

Reward (Search-R1's exact-match rule, as in verl 0.9.1's
``verl/utils/reward_score/search_r1_like_qa_em.py``): the *last* ``<answer>`` span of the
response (complete ``<information>`` blocks are removed first, so a passage cannot supply it),
normalised SQuAD-style (lowercase, strip punctuation, drop a|an|the, collapse whitespace),
scores 1 if it equals any normalised gold answer, else 0 (``reward=em``); ``reward=f1`` gives
the SQuAD token F1 against the best gold instead. ``correct`` is always exact match, and
``parsed`` (the maj@k vote) is the normalised answer. (verl 0.9.1's version also divides a
correct answer's score by 4 when the response has more than 10 ``<answer>`` or ``</answer>``
tags; not done here.)

Data: local JSONL through ``task.data_path`` (e.g. ``$RLSUITE_DATA/search``: 200 HotpotQA
dev questions with ``answer``, carved by hash into train/val/test, and ``corpus.jsonl``, the
4,948 HotpotQA paragraphs); rows keep their own fields (``question`` plus ``answer`` or
``golden_answers``). Without ``data_path``: ``load_dataset("PeterJinGo/nq_hotpotqa_train")``
(Search-R1's NQ + HotpotQA train, and its test split filtered by ``test_sources``); val is a
hash slice of train. Retrieval: BM25 (:mod:`rlsuite.tasks.retrieval`) over ``corpus_path``, or a
``/retrieve`` server at ``retriever_url`` shared by every worker on a node.

Deviations from Search-R1: an EOS-terminated turn ends the episode (Search-R1 treats it as an
invalid action and continues); ``rollout.max_new_tokens`` caps policy tokens over the whole
episode (Search-R1 caps each turn); BM25 here does not stem (see :mod:`rlsuite.tasks.retrieval`).

Example prompt: ``Answer the given question. You must conduct reasoning inside <think> and
</think> ... Question: Between Harvey Pekar and Denise Levertov who was born earlier?\\n``.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Optional, Sequence

from rlsuite.suite.errors import BadInput
from rlsuite.tasks.base import Environment, Grade, Task, TaskConfig, hash_split, read_jsonl, register
from rlsuite.tasks.retrieval import BM25Index, Hit, RemoteRetriever, Retriever, split_contents
from rlsuite.tasks.rowlines import line_of

HF_ID = "PeterJinGo/nq_hotpotqa_train"

INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>. Question: {question}\n")
"""Search-R1's instruction (``scripts/data_process/nq_search.py``, template ``base``), verbatim."""

INVALID = ("\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
           "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
           "Let me try again.\n")
"""Search-R1's observation after a turn with no valid action."""

STOP_STRINGS = ("</search>", "</answer>")
_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_INFO = re.compile(r"<information>.*?</information>", re.DOTALL)


# -- answers and scores (pure functions) ------------------------------------------------

def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop a|an|the, collapse whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def extract_answer(response: str) -> Optional[str]:
    """The last ``<answer>…</answer>`` span of a response, outside ``<information>`` blocks."""
    spans = _ANSWER.findall(_INFO.sub(" ", response))
    return spans[-1].strip() if spans else None


def exact_match(pred: str, golds: Sequence[str]) -> bool:
    p = normalize_answer(pred)
    return any(p == normalize_answer(g) for g in golds)


def f1_score(pred: str, golds: Sequence[str]) -> float:
    """SQuAD token F1 of ``pred`` against the best of ``golds``."""
    best = 0.0
    p_tok = normalize_answer(pred).split()
    for g in golds:
        g_tok = normalize_answer(g).split()
        common = sum((Counter(p_tok) & Counter(g_tok)).values())
        if common:
            prec, rec = common / len(p_tok), common / len(g_tok)
            best = max(best, 2 * prec * rec / (prec + rec))
    return best


def gold_answers(example: dict) -> list[str]:
    """``golden_answers`` (Search-R1 / FlashRAG) or ``answer`` (a string or a list), as a list."""
    golds = example["golden_answers"] if "golden_answers" in example else example["answer"]
    return [golds] if isinstance(golds, str) else [str(g) for g in golds]


def grade_answer(response: str, golds: Sequence[str], reward: str) -> Grade:
    pred = extract_answer(response)
    if pred is None:
        return Grade(reward=0.0, correct=False, parsed=None)
    em = exact_match(pred, golds)
    return Grade(reward=float(em) if reward == "em" else f1_score(pred, golds), correct=em,
                 parsed=normalize_answer(pred))


def render_passages(hits: Sequence[Hit]) -> str:
    """Search-R1's ``_passages2string``: ``Doc i(Title: <title line>) <text>`` per hit."""
    out = ""
    for i, h in enumerate(hits, 1):
        title, text = split_contents(h["document"]["contents"])
        out += f"Doc {i}(Title: {title}) {text}\n"
    return out


# -- the environment ---------------------------------------------------------------------

class SearchEnv(Environment):
    """One episode: a ``</search>`` turn gets passages, an ``</answer>`` turn ends it."""

    stop_strings = STOP_STRINGS

    def __init__(self, retriever: Callable[[], Retriever], top_k: int,
                 render: Callable[[Sequence[Hit]], str] = render_passages) -> None:
        self._retriever, self.top_k, self.render = retriever, top_k, render
        self.queries: list[str] = []

    def step(self, text: str) -> Optional[str]:
        m = _ACTION.search(text)
        if m is None:
            return INVALID
        if m.group(1) == "answer":
            return None
        query = m.group(2).strip()
        self.queries.append(query)
        hits = self._retriever().search([query], self.top_k)[0]
        return f"\n\n<information>{self.render(hits).strip()}</information>\n\n"


# -- the task ----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class SearchConfig(TaskConfig):
    ranges = {"top_k": "[1, inf)", "val_fraction": "(0, 0.5)", "test_fraction": "(0, 0.5)"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    data_path: Optional[str] = None
    """Questions: a JSONL file or a folder (train*/test*.jsonl, or *questions*.jsonl, plus
    corpus.jsonl); None = the Hugging Face dataset ``PeterJinGo/nq_hotpotqa_train``."""
    corpus_path: Optional[str] = None
    """Passage JSONL for BM25; None = ``corpus.jsonl`` beside the questions."""
    retriever_url: Optional[str] = None
    """A running ``/retrieve`` server (``python -m rlsuite.tasks.retrieval serve``); overrides corpus_path."""
    top_k: int = 3
    """Passages per search (Search-R1: 3)."""
    reward: Literal["em", "f1"] = "em"
    """``em``: normalised exact match (Search-R1); ``f1``: SQuAD token F1 against the best gold."""
    val_fraction: float = 0.1
    """Hash-selected share of train held out as val."""
    test_fraction: float = 0.25
    """Hash-selected share held out as test when the questions come without a test file."""
    test_sources: tuple[str, ...] = ("nq", "hotpotqa")
    """Hugging Face test split: ``data_source`` values kept (empty = all seven)."""

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ValueError(f"top_k must be ≥ 1, got {self.top_k}")
        for name in ("val_fraction", "test_fraction"):
            if not 0 < getattr(self, name) < 0.5:
                raise ValueError(f"{name} must be in (0, 0.5), got {getattr(self, name)}")


@register
class Search(Task):
    name = "search"
    summary = "Search-R1 tool-use QA: <search> turns get BM25 passages, exact match on the last <answer>."
    version = "1"
    citation = ("Jin et al. 2025, Search-R1: Training LLMs to Reason and Leverage Search Engines with "
                "Reinforcement Learning, arXiv:2503.09516")
    Config = SearchConfig
    cfg: SearchConfig
    inert = {"test_sources": "filters the Hugging Face test split only (task.data_path unset, which needs the hub); "
                             "local questions never read it"}
    presets = {
        # tiny model: mechanics only (the 560-character instruction nearly fills its 1024 context)
        "embedded": {"rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 48, "max_turns": 2,
                                 "max_obs_tokens": 96},
                     "optim": {"lr": 3e-4}, "budget": {"samples": 8}, "eval": {"max_prompts": 4}},
        # Search-R1 (GRPO run): n = 5, lr 1e-6, 500 obs tokens, 4 searches + a final turn, T = 1
        "hf": {"rollout": {"group_size": 5, "prompts_per_step": 256, "max_new_tokens": 1024, "max_turns": 5,
                           "max_obs_tokens": 500, "temperature": 1.0},
               "optim": {"lr": 1e-6}, "budget": {"samples": 256000}, "eval": {"max_prompts": 500}},
    }

    def __init__(self, cfg: SearchConfig) -> None:
        super().__init__(cfg)
        self._splits: Optional[dict[str, list[dict]]] = None
        self._index: Optional[Retriever] = None
        self._corpus: Optional[Path] = None

    # -- data --------------------------------------------------------------------------
    def splits(self) -> dict[str, list[dict]]:
        if self._splits is None:
            train, test = self._load()
            if test is None:
                test = [r for r in train if hash_split(_key(r), self.cfg.test_fraction, "test")]
                train = [r for r in train if not hash_split(_key(r), self.cfg.test_fraction, "test")]
            val = [r for r in train if hash_split(_key(r), self.cfg.val_fraction, "val")]
            train = [r for r in train if not hash_split(_key(r), self.cfg.val_fraction, "val")]
            self._splits = {"train": train, "val": val, "test": test}
        return self._splits

    def _load(self) -> tuple[list[dict], Optional[list[dict]]]:
        if self.cfg.data_path is None:
            return self._load_hf()
        p = Path(self.cfg.data_path)
        if p.is_dir():
            trains, tests = sorted(p.glob("train*.jsonl")), sorted(p.glob("test*.jsonl"))
            if trains and tests:
                self._corpus = p / "corpus.jsonl"
                return [r for f in trains for r in read_questions(f)], [r for f in tests for r in read_questions(f)]
            qs = sorted(p.glob("*questions*.jsonl"))
            if not qs:
                raise BadInput(f"search: folder {p} needs train*.jsonl and test*.jsonl, or *questions*.jsonl")
            self._corpus = p / "corpus.jsonl"
            return [r for f in qs for r in read_questions(f)], None
        if not p.exists():
            raise BadInput(f"search: task.data_path {p} does not exist")
        self._corpus = p.parent / "corpus.jsonl"
        return read_questions(p), None

    def _load_hf(self) -> tuple[list[dict], list[dict]]:
        try:
            from datasets import load_dataset

            ds = load_dataset(HF_ID)
            train, test = ds["train"], ds["test"]
        except Exception as e:  # noqa: BLE001 - offline or missing: one clear message
            raise BadInput(f"search: cannot load '{HF_ID}' ({type(e).__name__}); set task.data_path to local "
                           f"JSONL questions (e.g. $RLSUITE_DATA/search)") from None
        keep = set(self.cfg.test_sources)
        conv = [{"id": r.get("id"), "question": r["question"], "golden_answers": list(r["golden_answers"]),
                 "data_source": r.get("data_source")} for r in train]
        tconv = [{"id": r.get("id"), "question": r["question"], "golden_answers": list(r["golden_answers"]),
                  "data_source": r.get("data_source")} for r in test if not keep or r.get("data_source") in keep]
        return conv, tconv

    # -- retrieval ---------------------------------------------------------------------
    def retriever(self) -> Retriever:
        """The shared retriever: the server at ``retriever_url``, else the cached BM25 index."""
        if self._index is None:
            if self.cfg.retriever_url:
                self._index = RemoteRetriever(self.cfg.retriever_url)
            else:
                self.splits()
                corpus = Path(self.cfg.corpus_path) if self.cfg.corpus_path else self._corpus
                if corpus is None or not corpus.exists():
                    raise BadInput(f"search: no passage file (looked for {corpus}); set task.corpus_path to a "
                                   f"passage JSONL or task.retriever_url to a retrieval server")
                self._index = BM25Index.open(corpus)
        return self._index

    # -- the task protocol -------------------------------------------------------------
    def prompt(self, example: dict) -> str:
        q = example["question"].strip()
        return INSTRUCTION.format(question=q if q.endswith("?") else q + "?")

    def gold(self, example: dict) -> str:
        return " | ".join(gold_answers(example))

    def reference_completion(self, example: dict) -> str:
        """A completion that must grade correct (used by the contract tests)."""
        return f"<answer> {gold_answers(example)[0]} </answer>"

    def grade(self, example: dict, completion: str) -> Grade:
        return grade_answer(completion, gold_answers(example), self.cfg.reward)

    def make_env(self, example: dict) -> SearchEnv:
        return SearchEnv(self.retriever, self.cfg.top_k)

    def close(self) -> None:
        if isinstance(self._index, BM25Index):
            self._index.close()
        self._index = None


def _key(row: dict) -> str:
    return str(row.get("id") or row["question"])


def read_questions(path: Path) -> list[dict]:
    """QA rows with ``question`` and ``answer`` or ``golden_answers`` (BadInput names file:line)."""
    rows = read_jsonl(path, ("question",))
    for i, r in enumerate(rows):
        golds = r.get("golden_answers", r.get("answer"))
        ok = isinstance(golds, str) or (isinstance(golds, list) and golds and all(isinstance(g, str) for g in golds))
        if not ok or not isinstance(r["question"], str):
            raise BadInput(f"{path}:{line_of(path, i)}: a question row needs a string 'question' and 'answer' "
                           f"(a string or list of strings) or 'golden_answers' (a list of strings)")
    return rows


__all__ = ["Search", "SearchConfig", "SearchEnv", "normalize_answer", "extract_answer", "exact_match", "f1_score",
           "gold_answers", "grade_answer", "render_passages", "read_questions"]
