"""The trainer stays the loop (issue 37 §1).

``suite/trainer.py`` grew back to 770 lines once (trackers, progress, FSDP, KL and the mismatch
correction landed in it; scoring, checkpoints, evals and the KL controller lived in the class),
``suite/sharding.py`` reached into the trainer's private members, and the loop branched on the
parallel mode in several places. Since the split, the training state has one owner
(``suite/train_state.py``), scoring, evals and the KL controller have their own modules, and the
parallel mode is one object the loop calls alike in every mode (``suite/parallel.py``). These
checks keep it so:

* ``suite/trainer.py`` has at most :data:`MAX_LINES` lines;
* no module of the packages outside ``suite/trainer.py`` touches a private member of a trainer:
  neither ``<trainer>._x`` on a name that holds one (``tr``, ``trainer``, ...) nor any private
  name the ``Trainer`` class defines, on any object but ``self``/``cls``;
* the loop does not branch on the parallel mode: no ``if``, ``while``, conditional expression,
  comprehension condition, boolean operand or ``match`` subject in ``suite/trainer.py`` reads the
  parallel mode (``shard``, ``parallel``, ``Sharding``, ``Replicated``, ``world.active``) other
  than through a call of the mode object (its answer is the polymorphism the loop relies on).

Each check runs on the source it is given; the tests below also run it on a sample of the old
shape and require it to fail there, so none of them is a check that cannot fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("suite", "tasks", "algorithms", "sweeps", "reports")
TRAINER = ROOT / "suite" / "trainer.py"
MAX_LINES = 550
TRAINER_NAMES = {"tr", "trainer", "tr_", "the_trainer"}
"""Names under which a module holds a trainer (what ``suite/sharding.py`` received before the split)."""
PARALLEL = {"shard", "parallel", "Sharding", "Replicated", "ShardedBehaviour", "parallel_mode"}
"""Names (or attribute names) that are the parallel mode; ``world.active`` is data parallelism."""


def package_files(root: Path | None = None) -> list[Path]:
    root = ROOT if root is None else root
    return [f for pkg in PACKAGES for f in sorted((root / pkg).rglob("*.py"))]


def trainer_private_names(source: str) -> set[str]:
    """Private names the ``Trainer`` class of ``source`` defines: its ``_methods`` and the
    ``self._attributes`` it assigns (dunders excluded)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.add(sub.name)
                elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) \
                        and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    out.add(sub.attr)
    return {n for n in out if n.startswith("_") and not n.startswith("__")}


def private_trainer_accesses(source: str, private: set[str]) -> list[str]:
    """``<receiver>.<attr>`` of ``source`` where ``attr`` is private and the receiver is a name
    that holds a trainer, or ``attr`` is one of the trainer's own private names ``private`` on
    anything but ``self``/``cls``; each as ``line: expression``."""
    hits: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        recv = node.value.id if isinstance(node.value, ast.Name) else None
        if recv in TRAINER_NAMES or (node.attr in private and recv not in ("self", "cls")):
            hits.append((node.lineno, f"{node.lineno}: {ast.unparse(node)}"))
    return [h for _, h in sorted(hits)]


def _reads_parallel_mode(expr: ast.AST) -> bool:
    """Whether ``expr`` reads the parallel mode itself (``self.shard is None``, ``world.active``,
    ``isinstance(m, Sharding)``, a flag of the mode object); what a call returns is the mode's
    own answer (polymorphism, not a branch), so calls are not entered, ``isinstance``-like ones
    excepted."""
    if isinstance(expr, ast.Call):
        f = expr.func
        if isinstance(f, ast.Name) and f.id in ("isinstance", "type", "getattr", "hasattr"):
            return any(_reads_parallel_mode(a) for a in expr.args)
        return False
    if isinstance(expr, ast.Name) and expr.id in PARALLEL:
        return True
    if isinstance(expr, ast.Attribute) and (expr.attr in PARALLEL or expr.attr == "active"):
        return True
    return any(_reads_parallel_mode(c) for c in ast.iter_child_nodes(expr))


def parallel_branches(source: str) -> list[str]:
    """The conditions of ``source`` that read the parallel mode (``line: condition``)."""
    conds: list[ast.AST] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            conds.append(node.test)
        elif isinstance(node, ast.comprehension):
            conds.extend(node.ifs)
        elif isinstance(node, ast.BoolOp):
            conds.extend(node.values)
        elif isinstance(node, ast.Match):
            conds.append(node.subject)
    inner = {id(n) for c in conds for n in ast.walk(c) if n is not c}  # an operand of a condition listed already
    return [f"{c.lineno}: {ast.unparse(c)}" for c in sorted(conds, key=lambda c: (c.lineno, c.col_offset))
            if id(c) not in inner and _reads_parallel_mode(c)]


# -- the old shapes each check must fail on (excerpts of suite/trainer.py and suite/sharding.py
#    as they were before the split) ---------------------------------------------------------
OLD_TRAINER = '''
class Trainer:
    def __init__(self, spec):
        self._ref_refreshed = False
        self.shard = None

    def _base_sha256(self):
        return None

    def _clip_and_step(self, nonfinite=None):
        if self.world.active and self.shard is None:
            pass
        clip_norm = self.shard.clip_grad_norm if self.shard is not None else torch.nn.utils.clip_grad_norm_

    def run_eval(self, split):
        if isinstance(self.parallel, Sharding) or self.parallel.base_eval_memo:
            pass
        if self.parallel.nonfinite(total, 1) is None and resume and load(self.parallel):  # calls: not branches
            pass
'''
OLD_SHARDING = '''
class Sharding:
    def apply(self, tr) -> None:
        tr._base_sha256()
        tr.behaviour = None

    def load(self, tr, st, ckpt) -> None:
        tr._ref_refreshed = True
'''


def test_the_checks_fail_on_the_old_shape():
    assert len(OLD_TRAINER.splitlines()) <= MAX_LINES  # (the length check: see the next test)
    private = trainer_private_names(OLD_TRAINER)
    assert {"_ref_refreshed", "_base_sha256", "_clip_and_step"} <= private
    assert private_trainer_accesses(OLD_SHARDING, private) == ["4: tr._base_sha256", "8: tr._ref_refreshed"]
    assert private_trainer_accesses(OLD_SHARDING, set()) == ["4: tr._base_sha256", "8: tr._ref_refreshed"]
    got = parallel_branches(OLD_TRAINER)
    assert [g.split(":")[0] for g in got] == ["11", "13", "16"], got
    assert "self.shard is not None" in got[1] and "isinstance(self.parallel, Sharding)" in got[2], got


def test_the_trainer_is_the_loop_and_short():
    n = len(TRAINER.read_text().splitlines())
    assert n <= MAX_LINES, (f"suite/trainer.py has {n} lines (at most {MAX_LINES}): move what is not the loop "
                            f"into a module of its own (scoring, evals, checkpoints, KL, parallel mode)")


def test_no_module_touches_a_trainers_private_members():
    private = trainer_private_names(TRAINER.read_text())
    found = {}
    for f in package_files():
        if f.resolve() == TRAINER.resolve():
            continue
        hits = private_trainer_accesses(f.read_text(), private)
        if hits:
            found[str(f.relative_to(ROOT))] = hits
    assert not found, f"modules reach into the trainer's private members (give them a public owner): {found}"


def test_the_loop_does_not_branch_on_the_parallel_mode():
    got = parallel_branches(TRAINER.read_text())
    assert not got, (f"suite/trainer.py branches on the parallel mode: {got}; give the parallel-mode objects "
                     f"(suite/parallel.py, suite/sharding.py) a method instead")
