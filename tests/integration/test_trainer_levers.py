"""The trainer's opt-in speed levers: ``train.share_prefix``, ``train.compile``, ``train.autocast``,
``train.bucket_by_length``, ``optim.fused``.

* share_prefix: the FLOP accounting charges the positions computed (each group's prompt once),
  by hand; the first update equals the default run's to float rounding (same samples, same
  loss);
* autocast=bf16: π_old is scored in the same precision as π, so the first update's ratio is 1;
  the setting is in the run id (and the defaults are not, so older run ids stand);
* bucket_by_length: micro-batches take rows longest first and drop trailing padding columns
  (``Rollout.trim`` by hand); the update equals the unbucketed one to float rounding;
* an algorithm that needs a field the functional forward does not compute is refused with one
  message naming the lever and the field; one that reads the behaviour's top-K with
  ``rollout.topk=0`` likewise;
* OTB's π_old Σπ² comes from the scoring pass (which runs whatever ``rollout.old_logp``), equal to
  the full softmax's by hand;
* train.compile on a CPU without a C++ compiler is refused before anything is written;
* optim.fused builds torch's fused AdamW, whose update equals the default's to float rounding;
* (slow) train.compile runs a short training and its first update equals the default's.
"""

from __future__ import annotations

import json

import pytest
import torch

from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl
from rlsuite.suite.spec import resolve
from rlsuite.suite.types import Batch

P = 505_216  # non-embedding parameters of the tiny model (tests/integration/test_budget_flops.py)
G = 4
SMALL = ["--task", "arith", "--set", "model.warm_start=none", "--set", "eval.max_prompts=4",
         "--set", "eval.test_prompts=4",
         "--set", "rollout.prompts_per_step=4", "--set", f"rollout.group_size={G}"]


def _run(tmp_path, capsys, *args):
    code = main(["run", *SMALL, *args, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    run_dir = out.strip().splitlines()[-1].split("run_dir: ")[1]
    return read_jsonl(f"{run_dir}/metrics.jsonl"), json.load(open(f"{run_dir}/spec.json"))


def test_share_prefix_charges_the_positions_it_computes(tmp_path, capsys):
    base = ["--algo", "grpo", "--budget", "updates=2", "--set", "rollout.old_logp=behaviour", "--set", "algo.kl_coef=0"]
    rows, spec = _run(tmp_path / "shared", capsys, *base, "--set", "train.share_prefix=true")
    ref, _ = _run(tmp_path / "plain", capsys, *base, "--set", "train.share_prefix=false")
    assert spec["train"]["share_prefix"] is True
    r = rows[0]
    n, gen = r["budget/train_tokens"], r["budget/gen_tokens"]
    prompt_tokens = n - gen  # every group of G samples repeats its prompt G times
    computed = n - prompt_tokens * (G - 1) // G
    # rollout 2P·n + training 6P·(positions computed); no scoring pass (π_old aliased to μ)
    assert r["budget/flops_train"] == 6 * P * computed
    assert r["budget/flops"] == 2 * P * n + 6 * P * computed
    assert ref[0]["budget/flops_train"] == 6 * P * n
    # the same samples and the same loss to float rounding
    assert r["reward/mean"] == ref[0]["reward/mean"] and n == ref[0]["budget/train_tokens"]
    assert r["loss/policy"] == pytest.approx(ref[0]["loss/policy"], abs=1e-6)
    assert r["stats/entropy"] == pytest.approx(ref[0]["stats/entropy"], abs=1e-5)


def test_autocast_scores_pi_old_in_the_training_precision(tmp_path, capsys):
    rows, spec = _run(tmp_path, capsys, "--algo", "grpo", "--budget", "updates=2", "--set", "train.autocast=bf16",
                      "--set", "train.share_prefix=true")
    assert spec["train"]["autocast"] == "bf16"
    assert rows[0]["stats/ratio_max"] == pytest.approx(1.0, abs=1e-6)  # π_old = π before the first update
    assert all(abs(r["loss/total"]) < 1e3 for r in rows)


def test_every_lever_setting_is_its_own_run_id():
    """The levers are in the run id as set: `auto` (the default, resolved by capability at the start
    of the run, the same on every machine) and an explicit value are different ids."""
    base = resolve("arith", "grpo", "tiny", 0)
    assert (base.train.share_prefix, base.optim.fused, base.rollout.engine) == ("auto", "auto", "auto")
    same = resolve("arith", "grpo", "tiny", 0, sets=[("train.autocast", "none"), ("train.share_prefix", "auto"),
                                                    ("train.compile", False), ("optim.fused", "auto")])
    assert same.run_id == base.run_id
    ids = {resolve("arith", "grpo", "tiny", 0, sets=[(k, v)]).run_id
           for k, v in (("train.autocast", "bf16"), ("train.share_prefix", True), ("train.share_prefix", False),
                        ("train.compile", True), ("optim.fused", True), ("optim.fused", False))}
    assert len(ids) == 6 and base.run_id not in ids


def test_auto_levers_resolve_by_capability_and_are_recorded(tmp_path, capsys):
    """`auto` turns the same-math levers on where they serve (the tiny Llama on a CPU: share_prefix,
    fused AdamW, the native engine where a C++ toolchain builds it, else oneDNN's where torch has it);
    spec.json and env.json record the result.
    An entry whose update needs a field the fast forward does not compute (attention statistics)
    resolves share_prefix off, as does a sharded run (tests/integration/test_fsdp.py)."""
    from rlsuite.suite.checks import resolve_auto
    from rlsuite.suite.engines import auto_kind
    from rlsuite.suite.models import load_model

    rows, spec = _run(tmp_path, capsys, "--algo", "grpo", "--budget", "updates=1")
    run = tmp_path / spec["run_id"]
    env = json.loads((run / "env.json").read_text())
    model, _, _ = load_model(resolve("arith", "grpo", "tiny", 0).model)
    want = {"train.share_prefix": True, "optim.fused": True,
            "rollout.engine": auto_kind(model)}
    assert want["rollout.engine"] in ("native", "onednn", "kv")
    assert spec["resolved"] == env["resolved"] == want
    assert spec["train"]["share_prefix"] == "auto" and env["identity"] == spec["identity"]
    s = resolve("arith", "grpo", "tiny", 0)
    off = resolve_auto(model, frozenset({"entropy", "attn_stat"}), s.train, s.dist, s.optim)
    assert off == {"train.share_prefix": False, "optim.fused": True}
    sharded = resolve("arith", "grpo", "tiny", 0, sets=[("dist.world_size", 2), ("dist.shard", "fsdp"),
                                                         ("rollout.rng", "row")])
    assert resolve_auto(model, frozenset({"entropy"}), sharded.train, sharded.dist, sharded.optim) == \
        {"train.share_prefix": False, "optim.fused": False}
    explicit = resolve("arith", "grpo", "tiny", 0, sets=[("train.share_prefix", False), ("optim.fused", False)])
    assert resolve_auto(model, frozenset({"entropy"}), explicit.train, explicit.dist, explicit.optim) == \
        {"train.share_prefix": False, "optim.fused": False}


def test_fused_adamw_takes_the_default_update_to_float_rounding(tmp_path, capsys, monkeypatch):
    made = []
    adamw = torch.optim.AdamW

    def spy(*a, **kw):
        made.append(kw.get("fused"))
        return adamw(*a, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    base = ["--algo", "grpo", "--budget", "updates=2", "--set", "rollout.old_logp=behaviour", "--set", "algo.kl_coef=0",
            "--set", "optim.lr=1e-3"]
    rows, spec = _run(tmp_path / "fused", capsys, *base, "--set", "optim.fused=true")
    ref, _ = _run(tmp_path / "plain", capsys, *base, "--set", "optim.fused=false")
    assert spec["optim"]["fused"] is True and made == [True, None]  # fused only where on
    # the first update is the same AdamW step: the second rollout samples with the same weights
    # (to ~1e-8), so its samples and loss agree
    assert rows[1]["reward/mean"] == ref[1]["reward/mean"]
    assert rows[1]["loss/policy"] == pytest.approx(ref[1]["loss/policy"], abs=1e-5)


def test_a_field_the_fast_forward_cannot_compute_is_refused(tmp_path, capsys):
    code = main(["run", *SMALL, "--algo", "is_grpo", "--set", "algo.orthogonality=true", "--budget", "updates=1",
                 "--set", "train.share_prefix=true", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "train.share_prefix" in err and "'hidden'" in err and "is_grpo" in err
    assert not list(tmp_path.rglob("metrics.jsonl"))


@pytest.mark.parametrize("algo, sets", [("dppo_pdm", []), ("otb", ["--set", "algo.energy=behaviour_topk"])])
def test_an_entry_reading_the_behaviour_top_k_without_one_is_refused(tmp_path, capsys, algo, sets):
    code = main(["run", *SMALL, "--algo", algo, *sets, "--set", "rollout.topk=0", "--budget", "updates=1",
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1
    assert f"'{algo}'" in err and "rollout.topk=0" in err and "rollout.topk > 0" in err
    assert not list(tmp_path.rglob("metrics.jsonl"))


@pytest.mark.slow
def test_compile_trains_and_matches_the_eager_first_update(tmp_path, capsys):
    base = ["--algo", "grpo", "--budget", "updates=3"]
    rows, spec = _run(tmp_path / "compiled", capsys, *base, "--set", "train.compile=true")
    ref, _ = _run(tmp_path / "eager", capsys, *base)
    assert spec["train"]["compile"] is True and len(rows) == 3
    assert rows[0]["reward/mean"] == ref[0]["reward/mean"]
    assert rows[0]["loss/policy"] == pytest.approx(ref[0]["loss/policy"], abs=1e-6)
    assert rows[0]["stats/grad_norm"] == pytest.approx(ref[0]["stats/grad_norm"], rel=1e-4)


def test_trim_cuts_every_per_token_field():
    B, T = 3, 5
    ones = torch.ones(B, T)
    b = Batch(tokens=torch.arange(B * T).view(B, T), attn_mask=ones.long(), loss_mask=ones, behav_logp=ones,
              turn_id=ones.long(), policy_version=torch.zeros(B, dtype=torch.long),
              behaviour_id=torch.zeros(B, dtype=torch.long),
              group_id=torch.zeros(B, dtype=torch.long), example_idx=torch.arange(B), scores=torch.zeros(B),
              rewards=torch.zeros(B), truncated=torch.zeros(B, dtype=torch.bool), prompt_width=2,
              topk_ids=torch.zeros(B, T, 4, dtype=torch.long), adv=ones, extras={"w": torch.ones(B), "tok": ones})
    t = b.trim(3)
    assert t.tokens.tolist() == [[0, 1, 2], [5, 6, 7], [10, 11, 12]]
    assert t.loss_mask.shape == t.adv.shape == t.extras["tok"].shape == (B, 3) and t.topk_ids.shape == (B, 3, 4)
    assert t.extras["w"].shape == (B,) and t.scores.shape == (B,) and t.prompt_width == 2 and t.old_logp is None


def test_bucket_by_length_equals_the_unbucketed_update(tmp_path, capsys):
    # from the committed base (not warm_start=none): rewards differ within groups, so the
    # gradient is not zero and the comparison can fail
    base = ["--algo", "grpo", "--budget", "updates=2", "--set", "train.micro_batch_size=3",
            "--set", "model.warm_start=task"]
    rows, spec = _run(tmp_path / "bucketed", capsys, *base, "--set", "train.bucket_by_length=true")
    ref, _ = _run(tmp_path / "plain", capsys, *base)
    assert spec["train"]["bucket_by_length"] is True
    r, q = rows[0], ref[0]
    assert r["reward/mean"] == q["reward/mean"] and r["budget/flops"] == q["budget/flops"]
    assert 0 < r["reward/mean"] < 1 and q["stats/grad_norm"] > 1e-3, q
    assert r["loss/policy"] == pytest.approx(q["loss/policy"], abs=1e-6)
    assert r["stats/grad_norm"] == pytest.approx(q["stats/grad_norm"], rel=1e-4, abs=1e-7)


def test_micro_batch_plan_orders_rows_longest_first():
    from rlsuite.suite.update_plan import micro_batches

    train = resolve("arith", "grpo", "tiny", 0,
                    sets=[("train.micro_batch_size", 2), ("train.bucket_by_length", True)]).train
    lengths = [3, 5, 4, 1, 2, 6, 6]
    attn = torch.tensor([[1] * n + [0] * (6 - n) for n in lengths])
    mb = type("MB", (), {"batch_size": 7, "tokens": attn, "attn_mask": attn})()
    plan = micro_batches(mb, 2, train)
    # rank 0 holds rows 0..2 (lengths 3, 5, 4), rank 1 rows 3..6 (1, 2, 6, 6): longest first, ties in order
    assert [[r.tolist() for r in rank] for rank in plan] == [[[1, 2], [0]], [[5, 6], [4, 3]]]
    # left padding does not count: the order is by the last real column (what trimming keeps)
    attn = torch.tensor([[0, 0, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]])
    mb = type("MB", (), {"batch_size": 2, "tokens": attn, "attn_mask": attn})()
    assert [r.tolist() for r in micro_batches(mb, 1, train)[0]] == [[0, 1]]
    # a rank with no rows gets no micro-batch (world size above the minibatch size)
    mb = type("MB", (), {"batch_size": 1, "tokens": attn[:1], "attn_mask": attn[:1]})()
    assert [[r.tolist() for r in rank] for rank in micro_batches(mb, 2, train)] == [[], [[0]]]
    train = resolve("arith", "grpo", "tiny", 0).train  # without bucketing: the same rows as before the setting existed
    mb = type("MB", (), {"batch_size": 7, "tokens": torch.ones(7, 6), "attn_mask": torch.ones(7, 6)})()
    assert [[r.tolist() for r in rank] for rank in micro_batches(mb, 2, train)] == [[[0, 1, 2]], [[3, 4, 5, 6]]]


def test_a_run_folder_from_before_the_reset_is_never_taken_for_a_current_run(tmp_path):
    """A version-1 spec.json (written before issue 32's reset, no identity inputs) migrates, but its
    identity is not a current run's: a folder holding one under a current run id is refused, not
    resumed; a current document resumes, and an `auto` lever set explicitly is another run."""
    from rlsuite.suite.runner import check_existing

    spec = resolve("arith", "grpo", "tiny", 0)
    doc = spec.to_dict() | {"run_id": spec.run_id}
    (tmp_path / "status.json").write_text(json.dumps({"state": "interrupted", "attempt": 1}))
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    assert check_existing(tmp_path, spec) == (None, 2)
    for lever in (("train.share_prefix", True), ("optim.fused", False)):
        with pytest.raises(Exception, match="different spec"):
            check_existing(tmp_path, resolve("arith", "grpo", "tiny", 0, sets=[lever]))
    old = {k: v for k, v in doc.items() if k not in ("schema", "identity", "loss", "dist", "log")}
    (tmp_path / "spec.json").write_text(json.dumps(old))
    with pytest.raises(Exception, match="different spec"):
        check_existing(tmp_path, spec)


def test_compile_without_a_compiler_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    code = main(["run", *SMALL, "--algo", "grpo", "--budget", "updates=1", "--set", "train.compile=true",
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "train.compile" in err and "C++ compiler" in err
    assert not list(tmp_path.rglob("metrics.jsonl"))


STALE = [("rollout.sync", "lag"), ("rollout.staleness", 2)]


@pytest.mark.parametrize("algo,sets", [("grpo", []), ("dr_grpo", [("algo.kl_coef", 0.05)]),
                                       ("gspo", [("rollout.max_new_tokens", 6)]),
                                       ("grpo", STALE), ("dppo", STALE), ("a3po", STALE),
                                       ("grpo", [*STALE, ("loss.opsm_delta", 1e-4)])])
def test_pi_old_from_the_update_forward_is_the_scoring_pass_bit_for_bit(tmp_path, monkeypatch, algo, sets):
    """One epoch, one minibatch, on-policy or stale (``rollout.sync=lag``: π_old is still the
    weights before the update, μ the lagging sampler): π_old is taken from the update's own forward
    instead of a scoring pass (``Scorer.from_update``). Every metric of every step — losses,
    ratios, clip fractions, the engine–trainer gap ``mismatch/*`` and ``stats/kl_ref`` (logged
    after the update, in the scoring pass's row order) — equals the run with the pass bit for bit;
    only the pass's FLOPs (``budget/flops_score_old``) and the timings differ."""
    from rlsuite.suite.runner import execute
    from rlsuite.suite.scoring import Scorer

    rows = {}
    for on in (True, False):
        monkeypatch.setattr(Scorer, "old_from_update", on)
        spec = resolve("arith", algo, "tiny", 0, sets=[("model.warm_start", "none"), ("eval.max_prompts", 4),
                                                       ("eval.test_prompts", 4),
                                                       ("rollout.prompts_per_step", 4), ("rollout.group_size", G),
                                                       *sets], budgets=[("updates", 3)])
        code, run_dir = execute(spec, tmp_path / str(on))
        assert code == 0
        rows[on] = read_jsonl(run_dir / "metrics.jsonl")
    timing = ("perf/", "budget/flops", "budget/wall_s", "time")
    assert len(rows[True]) == len(rows[False]) == 3
    for a, b in zip(rows[True], rows[False]):
        assert "budget/flops_score_old" not in a and b["budget/flops_score_old"] > 0
        assert "mismatch/logp_abs_diff_max" in a
        if algo not in ("dppo", "a3po"):  # (their ratios are π/μ and π/π_prox, π_prox interpolated)
            assert a["stats/ratio_max"] == a["stats/ratio_min"] == 1.0
        keys = {k for k in set(a) | set(b) if not k.startswith(timing)}
        assert {k: a.get(k) for k in keys} == {k: b.get(k) for k in keys}
    if algo == "dr_grpo":
        assert "stats/kl_ref" in rows[True][0]


def test_pi_old_keeps_its_scoring_pass_where_the_update_cannot_supply_it(tmp_path, capsys):
    """Two minibatches (the second trains weights that did not sample it), a trainer-level
    correction, and an entry that reads π_old in its advantages (``ggpo``) keep the pass."""
    for args in (["--algo", "grpo", "--set", "train.minibatches=2"],
                 ["--algo", "grpo", "--set", "loss.is_correction=token_tis"],
                 ["--algo", "ggpo"]):
        rows, _ = _run(tmp_path / "-".join(args), capsys, *args, "--budget", "updates=2")
        assert rows[0]["budget/flops_score_old"] > 0, args


@pytest.mark.parametrize("old_logp", ["recompute", "behaviour"])
def test_otb_reads_pi_old_sum_of_squares_from_the_scoring_pass(tmp_path, monkeypatch, old_logp):
    """OTB's energy reads Σ_v π_old(v)² (``Batch.old_sum_pi_sq``): the scoring pass runs even where
    π_old could come from the update's forward or be aliased to μ, and its field is the full softmax's
    Σπ² at the rollout temperature, computed by hand from the model's logits at the same weights; π_old's
    log-probs are that pass's (not aliased to μ under ``rollout.old_logp=behaviour``: one distribution)."""
    import rlsuite.suite.scoring as scoring
    from rlsuite.algorithms.otb import OTB
    from rlsuite.suite.runner import execute

    seen, batches = [], []
    real_forward, real_adv = scoring.policy_forward, OTB.advantages

    def forward(model, tokens, attn, temperature, want=frozenset(), *a, **kw):
        fwd = real_forward(model, tokens, attn, temperature, want, *a, **kw)
        if "sum_pi_sq" in want:
            with torch.no_grad():
                logits = model(input_ids=tokens, attention_mask=attn,
                               position_ids=(attn.long().cumsum(-1) - 1).clamp(min=0)).logits.float() / temperature
            hand = torch.exp(torch.logsumexp(2 * logits, -1) - 2 * torch.logsumexp(logits, -1))
            logp = torch.log_softmax(logits, -1)[:, :-1].gather(-1, tokens[:, 1:, None]).squeeze(-1)
            pad = lambda x: torch.nn.functional.pad(x, (1, 0))  # noqa: E731  (aligned with the tokens)
            seen.append((pad(hand[:, :-1]), pad(logp)))
        return fwd

    def advantages(self, batch, ctx):
        batches.append(batch)
        return real_adv(self, batch, ctx)

    monkeypatch.setattr(scoring, "policy_forward", forward)
    monkeypatch.setattr(OTB, "advantages", advantages)
    spec = resolve("arith", "otb", "tiny", 0, sets=[("model.warm_start", "none"), ("eval.max_prompts", 4),
                                                   ("eval.test_prompts", 4), ("rollout.prompts_per_step", 4),
                                                   ("rollout.group_size", G), ("rollout.old_logp", old_logp),
                                                   ("rollout.temperature", 0.8)], budgets=[("updates", 2)])
    code, run_dir = execute(spec, tmp_path)
    assert code == 0 and len(seen) == len(batches) == 2
    for (hand, logp), b in zip(seen, batches):
        m = b.loss_mask
        assert b.old_sum_pi_sq is not None and float(m.sum()) > 0
        torch.testing.assert_close(b.old_sum_pi_sq, hand * m, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(b.old_logp, logp * m, atol=1e-5, rtol=1e-5)
        assert bool(((b.old_sum_pi_sq >= torch.exp(b.old_logp) ** 2 - 1e-6) | (m == 0)).all())
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert all(r["budget/flops_score_old"] > 0 for r in rows)
    assert rows[0]["algo/otb/energy_mean"] > 0
