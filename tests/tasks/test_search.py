"""The ``search`` task: SQuAD normalisation, EM/F1, answer extraction, the Search-R1
environment turn by turn (driven through the real multi-turn rollout code by a scripted
engine), BM25 retrieval and its cache, the localhost retrieval server, and data errors.

BM25 tests need ``bm25s`` (the ``search`` extra; skipped without it). Data tests need
``$RLSUITE_DATA/search`` (skip without it; fail under RLSUITE_REQUIRE_DATA=1).
Run: ``python -m pytest -q tests/tasks/test_search.py`` (≈ 10 s).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.errors import BadInput
from rlsuite.suite.models import char_tokenizer
from rlsuite.suite.rollout import collect
from rlsuite.suite.engines.base import GenOutput, SamplingParams
from rlsuite.tasks.retrieval import BM25Index, RemoteRetriever, TinyBM25
from rlsuite.tasks.search import (INVALID, Search, SearchConfig, SearchEnv, exact_match, extract_answer, f1_score,
                                  grade_answer, normalize_answer, render_passages)
from tests.conftest import data_dir

REPO = Path(__file__).resolve().parents[2]
PASSAGES = [{"id": "p0", "contents": '"Harvey Pekar"\nHarvey Pekar (1939-2010) was an American comic book writer.'},
            {"id": "p1", "contents": '"Denise Levertov"\nDenise Levertov (1923-1997) was a British-born poet.'},
            {"id": "p2", "contents": '"Oslo"\nOslo is the capital of Norway.'}]


def write_corpus(path: Path, rows=PASSAGES) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- pure scoring --------------------------------------------------------------------------

def test_squad_normalisation_em_and_f1():
    assert normalize_answer("  The  Eiffel-Tower! ") == "eiffeltower"
    assert normalize_answer("A cat, an apple and THE dog.") == "cat apple and dog"
    assert exact_match("the Beatles", ["Beatles", "x"]) and not exact_match("Beatles band", ["Beatles"])
    assert f1_score("Beatles band", ["the Beatles"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert f1_score("nothing", ["Beatles"]) == 0.0
    assert f1_score("Paul", ["John Lennon", "Paul"]) == 1.0  # the best gold counts


def test_last_answer_span_outside_information_blocks():
    assert extract_answer("<answer> a </answer> then <answer>b</answer>") == "b"
    assert extract_answer("<search>x</search>\n\n<information>Doc 1 says <answer>no</answer></information>") is None
    assert extract_answer("<answer>yes</answer><information><answer>no</answer></information>") == "yes"
    assert extract_answer("no tags") is None
    g = grade_answer("<answer> The Beatles </answer>", ["beatles"], "em")
    assert (g.reward, g.correct, g.parsed) == (1.0, True, "beatles")
    f = grade_answer("<answer>Beatles band</answer>", ["the Beatles"], "f1")
    assert f.reward == pytest.approx(2 / 3) and not f.correct and f.parsed == "beatles band"


# -- the environment -----------------------------------------------------------------------

def test_env_search_answer_and_invalid_turns():
    queries = []

    class Fake:
        def search(self, qs, k):
            queries.extend(qs)
            return [[{"document": p, "score": 1.0} for p in PASSAGES[:k]] for _ in qs]

    env = SearchEnv(lambda: Fake(), top_k=2)
    obs = env.step("<think>who?</think>\n<search> Harvey Pekar </search>")
    assert queries == ["Harvey Pekar"]
    assert obs == ('\n\n<information>Doc 1(Title: "Harvey Pekar") Harvey Pekar (1939-2010) was an American comic '
                   'book writer.\nDoc 2(Title: "Denise Levertov") Denise Levertov (1923-1997) was a British-born '
                   'poet.</information>\n\n')
    assert env.step("<answer> Denise Levertov </answer>") is None
    assert env.step("I forgot the tags</search>") == INVALID
    assert render_passages([]) == "" and env.stop_strings == ("</search>", "</answer>")


class ScriptedEngine:
    """An engine that 'generates' fixed turns (one list per sample), honouring stop strings."""

    def __init__(self, tok, turns):
        self.tok, self.turns, self.version, self.calls = tok, [list(t) for t in turns], 0, []

    def generate(self, prompts, params, generator=None, want_attn=False, limits=None):
        self.calls.append(params.stop_strings)
        ids, reasons = [], []
        for p in prompts:
            b = next(i for i, t in enumerate(self.turns) if t and self._owner(p, i))
            text = self.turns[b].pop(0)
            ids.append(self.tok.encode(text, add_special_tokens=False) +
                       ([self.tok.eos_token_id] if not any(text.endswith(s) for s in params.stop_strings) else []))
            reasons.append("string" if any(text.endswith(s) for s in params.stop_strings) else "eos")
        n = [len(x) for x in ids]
        return GenOutput(ids=ids, logp=[[-0.5] * k for k in n], trunc_logp=[[-0.5] * k for k in n],
                         stopped=[True] * len(ids), stop_reason=reasons)

    def _owner(self, prompt, i):
        return self.tok.decode(prompt).startswith(f"Q{i}:")


def test_multi_turn_rollout_appends_masked_observations_and_ends_on_answer():
    tok = char_tokenizer()
    index = TinyBM25(PASSAGES)
    prompts = [tok.encode("Q0: who wrote comics?\n"), tok.encode("Q1: capital of Norway?\n")]
    eng = ScriptedEngine(tok, [["<search>Harvey Pekar comic</search>", "<answer>Harvey Pekar</answer>"],
                               ["<answer>Oslo</answer>"]])
    envs = [SearchEnv(lambda: index, top_k=1) for _ in prompts]
    rec, _ = collect(eng, tok, prompts, SamplingParams(max_new_tokens=200, stop_ids=(tok.eos_token_id,)),
                     None, envs=envs, max_turns=4, max_obs_tokens=512)
    assert set(eng.calls[0]) == {"</search>", "</answer>"} and len(eng.calls) == 2  # sample 1 ended on its answer
    text0 = rec.texts[0]
    assert "<information>Doc 1(Title: \"Harvey Pekar\")" in text0 and text0.endswith("<answer>Harvey Pekar</answer>")
    obs = "\n\n<information>" + render_passages(index.search(["Harvey Pekar comic"], 1)[0]).strip() + \
          "</information>\n\n"
    w = rec.prompt_width
    mask = rec.loss_mask[0, w:]
    n1 = len("<search>Harvey Pekar comic</search>")
    assert mask[:n1].eq(1).all() and mask[n1:n1 + len(obs)].eq(0).all()
    assert mask[n1 + len(obs):].sum() == len("<answer>Harvey Pekar</answer>")
    assert rec.turn_id[0, w + n1 + len(obs)] == 1 and rec.behav_logp[0, w + n1] == 0.0
    assert rec.texts[1] == "<answer>Oslo</answer>" and rec.loss_mask[1].sum() == len("<answer>Oslo</answer>")
    assert grade_answer(text0, ["Harvey Pekar"], "em").correct


# -- BM25, its cache and the server --------------------------------------------------------

def test_bm25_index_is_built_once_and_cached(tmp_path, monkeypatch):
    pytest.importorskip("bm25s", reason="the search extra (bm25s) is not installed")
    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path / "cache"))
    corpus = write_corpus(tmp_path / "c.jsonl", [{"id": "a", "title": "Oslo", "text": "Oslo is in Norway."}] +
                          PASSAGES[:2])
    opened = []
    threads = [threading.Thread(target=lambda: opened.append(BM25Index.open(corpus))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({str(i.folder) for i in opened}) == 1
    assert len(list((tmp_path / "cache" / "retrieval").glob("*tmp*"))) == 0
    hits = opened[0].search(["capital of Norway Oslo", "zzzz"], 2)
    assert hits[0][0]["document"] == {"id": "a", "contents": '"Oslo"\nOslo is in Norway.'} and hits[1] == []
    assert len(opened[0]) == 3
    for i in opened:
        i.close()


def test_bm25_bad_corpus_row_names_file_and_line(tmp_path, monkeypatch):
    pytest.importorskip("bm25s", reason="the search extra (bm25s) is not installed")
    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps(PASSAGES[0]) + '\n{"id": "x", "title": "no text"}\n')
    with pytest.raises(BadInput, match=r"c\.jsonl:2: a passage needs 'contents', or 'title' and 'text'"):
        BM25Index.open(corpus)


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_retrieval_server_on_localhost(tmp_path):
    """Start ``python -m rlsuite.tasks.retrieval serve`` on 127.0.0.1 (any free port, exits by itself
    after 30 idle seconds), query it with the task's client, compare with the local index."""
    pytest.importorskip("bm25s", reason="the search extra (bm25s) is not installed")
    corpus = write_corpus(tmp_path / "c.jsonl")
    env = {**os.environ, "RLSUITE_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "rlsuite.tasks.retrieval", "serve", "--corpus", str(corpus),
                             "--port", "0", "--idle-exit", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "server did not start within 60 s"
        line = proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split()[-1]
        assert _get(url.replace("/retrieve", "/health")) == {"ok": True, "passages": 3}
        t0 = time.perf_counter()
        remote = RemoteRetriever(url).search(["Norway capital", "Levertov poet", "qqqq"], 2)
        assert time.perf_counter() - t0 < 5
        assert remote[0][0]["document"]["id"] == "p2" and remote[1][0]["document"]["id"] == "p1" and remote[2] == []
        assert all(isinstance(h["score"], float) for h in remote[0])
        req = urllib.request.Request(url, data=b'{"queries": "not a list"}',
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError, match="400"):
            urllib.request.urlopen(req, timeout=10)
        # Search-R1's own client shape: return_scores false → plain documents
        req = urllib.request.Request(url, data=json.dumps({"queries": ["Oslo"], "topk": 1}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read()) == {"result": [[PASSAGES[2]]]}
        # a task pointed at the server uses it for its environments
        task = Search(SearchConfig(name="search", data_path=str(tmp_path / "q.jsonl"), retriever_url=url))
        obs = task.make_env({"question": "q", "answer": "a"}).step("<search>Oslo Norway</search>")
        assert obs.startswith('\n\n<information>Doc 1(Title: "Oslo") Oslo is the capital of Norway.')
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode is not None


# -- the task on the shared sample ---------------------------------------------------------

@pytest.fixture(scope="module")
def search_dir():
    return data_dir("search")


def test_sample_splits_prompt_and_grading(search_dir):
    task = Search(SearchConfig(name="search", data_path=str(search_dir)))
    s = task.splits()
    assert sum(len(v) for v in s.values()) == 200 and all(s.values())
    ids = {k: {r["id"] for r in v} for k, v in s.items()}
    assert not (ids["train"] & ids["val"] or ids["train"] & ids["test"] or ids["val"] & ids["test"])
    again = Search(SearchConfig(name="search", data_path=str(search_dir))).splits()
    assert {k: [r["id"] for r in v] for k, v in again.items()} == {k: [r["id"] for r in v] for k, v in s.items()}
    ex = s["test"][0]
    p = task.prompt(ex)
    assert p.startswith("Answer the given question. You must conduct reasoning inside <think>")
    assert p.endswith(f"Question: {ex['question']}\n") or p.endswith(f"Question: {ex['question']}?\n")
    assert task.grade(ex, task.reference_completion(ex)).correct
    assert not task.grade(ex, "<answer>certainly not this</answer>").correct


def test_sample_retrieval_finds_gold_passages(search_dir):
    """BM25 with the raw question as the query puts a gold paragraph in the top 3 for most
    HotpotQA sample questions (a sanity check of tokenisation and the passage layout)."""
    pytest.importorskip("bm25s", reason="the search extra (bm25s) is not installed")
    task = Search(SearchConfig(name="search", data_path=str(search_dir)))
    rows = [r for v in task.splits().values() for r in v]
    hits = task.retriever().search([r["question"] for r in rows], 3)
    found = sum(any(h["document"]["contents"].split("\n")[0].strip('"') in r["supporting_facts"]["title"]
                    for h in hs) for r, hs in zip(rows, hits))
    assert found / len(rows) >= 0.8, found
    task.close()


def test_data_errors_are_clear(tmp_path, monkeypatch):
    bad = tmp_path / "qs_questions.jsonl"
    bad.write_text('{"question": "q1", "answer": "a"}\n\n{"question": "q2", "answer": 3}\n')
    with pytest.raises(BadInput, match=r"qs_questions\.jsonl:3: a question row needs"):
        Search(SearchConfig(name="search", data_path=str(tmp_path))).splits()
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(BadInput, match="PeterJinGo/nq_hotpotqa_train.*task.data_path"):
        Search(SearchConfig(name="search")).splits()
    good = tmp_path / "good.jsonl"
    good.write_text('{"question": "q1", "golden_answers": ["a", "b"]}\n')
    task = Search(SearchConfig(name="search", data_path=str(good)))
    (row,) = [r for v in task.splits().values() for r in v]
    assert task.gold(row) == "a | b"
    with pytest.raises(BadInput, match="no passage file"):
        task.retriever()


def test_f1_reward_option():
    task = Search(SearchConfig(name="search", data_path="unused", reward="f1"))
    g = task.grade({"question": "q", "golden_answers": ["New York City"]}, "<answer>New York</answer>")
    assert g.reward == pytest.approx(0.8) and not g.correct
    with pytest.raises(ValueError, match="top_k"):
        SearchConfig(top_k=0)


@pytest.mark.slow
def test_search_run_with_local_data(search_dir, tmp_path, capsys):
    """Mechanics with the tiny model (embedded preset): the run completes and logs evals."""
    code = main(["run", "--task", "search", "--algo", "grpo", "--seed", "0", "--set", f"task.data_path={search_dir}",
                 "--budget", "updates=1", "--set", "eval.max_prompts=2",
                 "--set", "eval.test_prompts=2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    evals = [json.loads(x) for x in open(f"{run_dir}/evals.jsonl")]
    assert {"val", "test"} <= {e["split"] for e in evals} and "eval/search/greedy_acc" in evals[-1]


def test_parsed_answers_vote_in_maj_at_k():
    from rlsuite.suite.evaluate import maj_at_k

    golds = ["The Beatles"]
    grades = [grade_answer(c, golds, "em") for c in
              ["<answer>Rolling Stones</answer>", "<answer>the beatles</answer>", "no answer",
               "<answer>Beatles!</answer>"]]
    assert [g.parsed for g in grades] == ["rolling stones", "beatles", None, "beatles"]
    assert maj_at_k([g.parsed for g in grades], [g.correct for g in grades], 4) == 1.0  # 2 votes beat 1; None abstains
