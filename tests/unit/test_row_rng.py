"""Row-invariant sampling noise (``rollout.rng=row``, :class:`rlsuite.suite.engines.sampling.RowNoise`), the
settings of data parallelism (``dist.world_size``) and the gradient all-reduce of
:mod:`rlsuite.suite.distributed` on a fixed batch."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from rlsuite.suite.config import ModelConfig
from rlsuite.suite.errors import BadInput
from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engines.sampling import RowNoise, sample_step, splitmix64
from rlsuite.suite.engines.base import SamplingParams
from rlsuite.suite.spec import resolve

M64 = (1 << 64) - 1


def _splitmix64_ref(x: int) -> int:
    """The reference splitmix64 on Python ints (unsigned 64-bit)."""
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def test_splitmix64_matches_the_reference_with_wrapping_and_logical_shifts():
    xs = [0, 1, 2, 12345, (1 << 63) - 1, 1 << 62, (1 << 64) - 1, 0xDEADBEEFCAFEBABE]
    signed = [x - (1 << 64) if x >= 1 << 63 else x for x in xs]
    got = splitmix64(torch.tensor(signed, dtype=torch.long)).tolist()
    assert [g & M64 for g in got] == [_splitmix64_ref(x) for x in xs]
    assert _splitmix64_ref(0) == 0xE220A8397B1DCDAF  # the published first output for seed 0


def test_row_noise_of_a_batch_equals_the_noise_of_its_halves():
    logits = torch.randn(10, 37, generator=torch.Generator().manual_seed(0))
    params = SamplingParams(max_new_tokens=4, temperature=0.7, top_p=0.9)
    full = RowNoise(123, range(100, 110))
    lo, hi = full.take(range(0, 3)), full.take(range(3, 10))
    for _ in range(5):  # several token positions
        a = sample_step(logits, params, full)[0]
        b = torch.cat([sample_step(logits[:3], params, lo)[0], sample_step(logits[3:], params, hi)[0]])
        assert torch.equal(a, b)
    # ... and it depends on the key, the row and the position
    u = RowNoise(123, [5, 6]).uniform(37)
    assert not torch.equal(u[0], u[1])
    assert not torch.equal(RowNoise(124, [5]).uniform(37), RowNoise(123, [5]).uniform(37))
    n = RowNoise(123, [5])
    assert not torch.equal(n.uniform(37), n.uniform(37))
    first = RowNoise(123, [5])
    first.uniform(37)  # position 0, then position 1 == a row that starts at offset 1
    assert torch.equal(RowNoise(123, [5], offsets=[1]).uniform(37), first.uniform(37))


def test_row_noise_is_uniform_and_gumbel_max_samples_the_distribution():
    u = RowNoise(7, range(400)).uniform(250).flatten()  # 100,000 draws
    assert 0 < float(u.min()) and float(u.max()) < 1
    assert stats.kstest(u.numpy(), "uniform").pvalue > 1e-3
    # neighbouring rows and vocab ids are uncorrelated
    grid = u.view(400, 250)
    assert abs(float(torch.corrcoef(torch.stack([grid[:-1].flatten(), grid[1:].flatten()]))[0, 1])) < 0.02
    assert abs(float(torch.corrcoef(torch.stack([grid[:, :-1].flatten(), grid[:, 1:].flatten()]))[0, 1])) < 0.02
    # Gumbel-max with row noise draws from softmax(logits): chi-square on 20,000 rows
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0, 0.5]]).expand(20000, 5)
    tok = sample_step(logits, SamplingParams(max_new_tokens=1), RowNoise(11, range(20000)))[0]
    counts = torch.bincount(tok, minlength=5).double().numpy()
    expected = torch.softmax(logits[0].double(), -1).numpy() * 20000
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_kv_sampler_row_noise_is_independent_of_batching_and_padding():
    from rlsuite.suite.models import load_model

    torch.manual_seed(0)
    model, tok, _ = load_model(ModelConfig())
    eng = KVSampler(model, tok)
    prompts = [tok.encode(p) for p in ("1+2=", "13+24=", "7-5=", "99-98=", "0+0=", "45+45=")]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, stop_ids=(tok.eos_token_id,))
    noise = RowNoise(99, range(len(prompts)))
    full = eng.generate(prompts, params, noise)
    parts = [eng.generate(prompts[:2], params, noise.take(range(2))),  # different prompt widths
             eng.generate(prompts[2:], params, noise.take(range(2, 6)))]
    assert full.ids == parts[0].ids + parts[1].ids
    lp = [x for p in parts for x in p.logp]
    for a, b in zip(full.logp, lp):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-5)


# ---------------------------------------------------------------------------------------
# settings


def test_world_size_needs_row_rng_and_row_rng_needs_the_kv_sampler():
    with pytest.raises(BadInput) as e:
        resolve("arith", "grpo", "tiny", 0, sets=[("dist.world_size", 2)])
    assert "rollout.rng=row" in str(e.value) and "valid" in str(e.value)
    with pytest.raises(BadInput) as e:
        resolve("arith", "grpo", "tiny", 0, sets=[("rollout.rng", "row"), ("rollout.engine", "hf")])
    assert "valid rollout.engine with rng=row: auto, kv" in str(e.value)
    with pytest.raises(BadInput) as e:
        resolve("arith", "grpo", "tiny", 0, sets=[("dist.world_size", 0)])
    assert "dist.world_size must be ≥ 1" in str(e.value)
    with pytest.raises(BadInput) as e:
        resolve("arith", "grpo", "tiny", 0, sets=[("rollout.rng", "rows")])
    assert "valid: batch, row" in str(e.value)
    spec = resolve("arith", "grpo", "tiny", 0, sets=[("dist.world_size", 2), ("rollout.rng", "row")])
    assert spec.dist.world_size == 2 and spec.rollout.rng == "row"


def test_run_id_ignores_world_size_and_the_default_rng():
    base = resolve("arith", "grpo", "tiny", 3)
    row = resolve("arith", "grpo", "tiny", 3, sets=[("rollout.rng", "row")])
    row2 = resolve("arith", "grpo", "tiny", 3, sets=[("rollout.rng", "row"), ("dist.world_size", 2)])
    assert resolve("arith", "grpo", "tiny", 3, sets=[("rollout.rng", "batch")]).run_id == base.run_id
    assert row.run_id != base.run_id  # different samples: a different run
    assert row2.run_id == row.run_id  # the same run by construction, any world size


# ---------------------------------------------------------------------------------------
# the gradient all-reduce on a fixed batch (two gloo processes)


def _grad_worker(rank: int, size: int, store: str, queue) -> None:
    import torch.distributed as dist

    from rlsuite.suite.aggregation import aggregation_weights
    from rlsuite.suite.distributed import World

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=size)
    try:
        w = World(rank, size)
        net = torch.nn.Sequential(torch.nn.Embedding(11, 8), torch.nn.Linear(8, 1))
        torch.manual_seed(0)
        for p in net.parameters():
            p.data.normal_()
        unused = torch.nn.Parameter(torch.ones(3))  # no gradient anywhere: must stay None
        x = torch.randint(0, 11, (7, 5), generator=torch.Generator().manual_seed(1))
        mask = (torch.rand(7, 5, generator=torch.Generator().manual_seed(2)) > 0.3).float()
        wts = aggregation_weights(mask, "seq-mean-token-mean", 5)  # the global normaliser
        lo, hi = w.shard(7)
        loss = (wts[lo:hi] * net(x[lo:hi]).squeeze(-1) ** 2).sum()
        loss.backward()
        bad = w.all_reduce_grads(list(net.parameters()) + [unused], flag=float(rank == 1))
        # numpy arrays: pickled by value (torch tensors would travel as shared memory of a dead process)
        queue.put((rank, [p.grad.numpy().copy() for p in net.parameters()], unused.grad, bad))
    finally:
        dist.destroy_process_group()


def test_sharded_backward_plus_all_reduce_equals_the_full_batch_gradient(tmp_path):
    import multiprocessing as mp

    from rlsuite.suite.aggregation import aggregation_weights

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_grad_worker, args=(r, 2, f"file://{tmp_path}/store", q)) for r in range(2)]
    for p in procs:
        p.start()
    res = {r[0]: r[1:] for r in (q.get(timeout=180) for _ in range(2))}
    for p in procs:
        p.join(120)
    net = torch.nn.Sequential(torch.nn.Embedding(11, 8), torch.nn.Linear(8, 1))
    torch.manual_seed(0)
    for p in net.parameters():
        p.data.normal_()
    x = torch.randint(0, 11, (7, 5), generator=torch.Generator().manual_seed(1))
    mask = (torch.rand(7, 5, generator=torch.Generator().manual_seed(2)) > 0.3).float()
    (aggregation_weights(mask, "seq-mean-token-mean", 5) * net(x).squeeze(-1) ** 2).sum().backward()
    for rank in (0, 1):
        grads, unused, bad = res[rank]
        assert unused is None and bad == 1.0
        for g, p in zip(grads, net.parameters()):
            torch.testing.assert_close(torch.from_numpy(g), p.grad, rtol=1e-6, atol=1e-7)
    assert all((a == b).all() for a, b in zip(res[0][0], res[1][0]))  # identical on every rank
