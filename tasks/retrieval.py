"""Passage retrieval for the search tasks: BM25 over a local passage file, a cached index,
and a small HTTP server/client that speak Search-R1's ``/retrieve`` protocol.

Passages use the Search-R1 / FlashRAG layout ``{"id", "contents"}`` with
``contents = '"<title>"\\n<text>'``. A file whose rows have ``title`` and ``text`` instead
(the shared HotpotQA sample, ``$RLSUITE_DATA/search/corpus.jsonl``) is converted row by row
when it is read.

Index: ``bm25s`` (the optional extra ``rlsuite[search]``), Lucene-style BM25 with k1 = 1.5,
b = 0.75, lowercase word tokens of two or more characters and English stopwords, *no
stemming*. Search-R1's BM25 baseline uses pyserini (Lucene's English analyzer, which stems),
so scores differ slightly from theirs; their main retriever is dense e5 (use its server
through ``retriever_url``). The index and the byte offset of every passage are built once
and cached under ``$RLSUITE_CACHE/retrieval/`` (keyed by the corpus file's path, size and
mtime, the BM25 settings and the bm25s version), under an exclusive file lock and published
by an atomic rename, like :mod:`rlsuite.suite.warmstart`. Passages are read from the corpus file on
demand (``os.pread`` at the cached offsets), so a large corpus is not held in memory while
serving (the one-off build does tokenise every passage in memory).

Server (one index shared by every rollout worker on a node)::

    python -m rlsuite.tasks.retrieval serve --corpus $RLSUITE_DATA/search/corpus.jsonl --port 8000
    # POST http://127.0.0.1:8000/retrieve  {"queries": [...], "topk": 3, "return_scores": true}
    # → {"result": [[{"document": {"id": ..., "contents": ...}, "score": ...}, ...], ...]}

The request and the response (with ``return_scores``) are those Search-R1's client sends and
reads (``search_r1/llm_agent/generation.py``, ``search_r1/search/retrieval_request.py``), so
a task's ``retriever_url`` can also point at Search-R1's own dense (e5) server. ``GET /health``
answers ``{"ok": true, "passages": N}``. ``--idle-exit S`` stops the server after S seconds
without a request. Other commands: ``build`` (build the cache ahead of time) and ``query``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence

from rlsuite.suite.cache import build_once
from rlsuite.suite.errors import BadInput

Hit = dict  # {"document": {"id": str, "contents": str}, "score": float}

K1, B = 1.5, 0.75
STOPWORDS = "en"
INDEX_FORMAT = "1"  # bump when the cached layout or the tokenisation changes


class Retriever(Protocol):
    """Anything that maps queries to ranked passages."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` hits per query, best first (fewer when fewer passages match)."""
        ...


def to_passage(row: Any, where: str) -> dict:
    """A corpus row → ``{"id", "contents"}`` (``contents`` built from ``title``/``text`` when absent)."""
    if not isinstance(row, dict):
        raise BadInput(f"{where}: expected a JSON object")
    if isinstance(row.get("contents"), str):
        return {"id": str(row.get("id", "")), "contents": row["contents"]}
    if isinstance(row.get("title"), str) and isinstance(row.get("text"), str):
        return {"id": str(row.get("id", "")), "contents": f'"{row["title"]}"\n{row["text"]}'}
    raise BadInput(f"{where}: a passage needs 'contents', or 'title' and 'text'")


def split_contents(contents: str) -> tuple[str, str]:
    """``'"Title"\\ntext'`` → (``'"Title"'``, ``'text'``), as Search-R1's ``_passages2string``."""
    title, _, text = contents.partition("\n")
    return title, text


def _tokenize(texts: Sequence[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(list(texts), stopwords=STOPWORDS, return_ids=False, show_progress=False)


def cache_root() -> Path:
    return Path(os.environ.get("RLSUITE_CACHE", Path.home() / ".cache" / "rlsuite"))


def _import_bm25s():
    try:
        import bm25s
    except ImportError:
        raise BadInput("BM25 retrieval needs the optional package bm25s: pip install 'rlsuite[search]' "
                       "(or pip install bm25s), or set task.retriever_url to a running retrieval server") from None
    return bm25s


class BM25Index:
    """A bm25s index over a passage JSONL file, built once and cached (see the module docstring)."""

    def __init__(self, corpus: Path, folder: Path, info: dict) -> None:
        bm25s = _import_bm25s()
        self.corpus, self.folder, self.info = corpus, folder, info
        self.bm25 = bm25s.BM25.load(str(folder / "bm25"), mmap=False, show_progress=False, verbosity=0)
        import numpy as np

        self.offsets = np.load(folder / "offsets.npy")
        self._fd = os.open(corpus, os.O_RDONLY)
        self._lock = threading.Lock()  # bm25s scoring keeps scratch buffers: one query batch at a time

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def open(cls, corpus: str | Path) -> "BM25Index":
        """Load the cached index of ``corpus``, building it first if needed (locked, atomic)."""
        bm25s = _import_bm25s()
        corpus = Path(corpus).resolve()
        try:
            st = corpus.stat()
        except OSError as e:
            raise BadInput(f"passage file {corpus}: {e.strerror}") from None
        key = json.dumps({"path": str(corpus), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "k1": K1, "b": B,
                          "stopwords": STOPWORDS, "bm25s": bm25s.__version__, "format": INDEX_FORMAT}, sort_keys=True)
        folder = cache_root() / "retrieval" / f"{corpus.stem}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        info, _ = build_once(folder, lambda tmp: {**_build(corpus, tmp, bm25s), "key": json.loads(key)})
        return cls(corpus, folder, info)

    def passage(self, i: int) -> dict:
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        line = os.pread(self._fd, end - start, start).decode("utf-8")
        return to_passage(json.loads(line), f"{self.corpus}: passage {i}")

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        k = max(1, min(k, len(self)))
        with self._lock:
            docs, scores = self.bm25.retrieve(_tokenize(queries), k=k, show_progress=False, n_threads=1)
        return [[{"document": self.passage(int(d)), "score": float(s)} for d, s in zip(drow, srow) if s > 0]
                for drow, srow in zip(docs, scores)]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _build(corpus: Path, folder: Path, bm25s) -> dict:
    """Read ``corpus`` (one passage per non-empty line), index it into ``folder``."""
    import numpy as np

    t0 = time.perf_counter()
    offsets, texts = [], []
    with open(corpus, "rb") as fh:
        pos = 0
        for n, raw in enumerate(fh, 1):
            if raw.strip():
                try:
                    row = json.loads(raw)
                except json.JSONDecodeError as e:
                    raise BadInput(f"{corpus}:{n}: not valid JSON ({e.msg})") from None
                except UnicodeDecodeError as e:
                    raise BadInput(f"{corpus}:{n}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                   f"{e.start + 1}); expected JSONL, one JSON object per line") from None
                texts.append(to_passage(row, f"{corpus}:{n}")["contents"])
                offsets.append(pos)
            pos += len(raw)
    if not texts:
        raise BadInput(f"{corpus}: no passages")
    # passage i lies in bytes [offsets[i], offsets[i+1]); blank lines caught in a span are
    # harmless (json.loads ignores surrounding whitespace)
    offsets.append(pos)
    np.save(folder / "offsets.npy", np.array(offsets, dtype=np.int64))
    bm = bm25s.BM25(k1=K1, b=B, method="lucene")
    bm.index(_tokenize(texts), show_progress=False)
    bm.save(str(folder / "bm25"), show_progress=False)
    return {"passages": len(texts), "build_s": round(time.perf_counter() - t0, 3)}


class TinyBM25:
    """Pure-Python Lucene BM25 (k1 = 1.5, b = 0.75) over a small in-memory passage list.

    For synthetic collections of a few thousand short passages (``search_toy``), where an
    optional dependency and an on-disk cache buy nothing. Tokens: lowercase ``\\w+`` runs; ties
    go to the earlier passage, so rankings are fully deterministic.
    """

    def __init__(self, passages: Sequence[dict], k1: float = K1, b: float = B) -> None:
        import math
        import re
        from collections import Counter

        self._re = re.compile(r"\w+")
        self.passages = list(passages)
        docs = [Counter(self._tok(p["contents"])) for p in self.passages]
        n = len(docs)
        avgdl = sum(sum(d.values()) for d in docs) / max(1, n)
        df = Counter(t for d in docs for t in d)
        idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        self.postings: dict[str, list[tuple[int, float]]] = {}
        for i, d in enumerate(docs):
            norm = k1 * (1 - b + b * sum(d.values()) / avgdl)
            for t, tf in d.items():
                self.postings.setdefault(t, []).append((i, idf[t] * tf * (k1 + 1) / (tf + norm)))

    def _tok(self, text: str) -> list[str]:
        return self._re.findall(text.lower())

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        out = []
        for q in queries:
            scores: dict[int, float] = {}
            for t in set(self._tok(q)):
                for i, s in self.postings.get(t, ()):
                    scores[i] = scores.get(i, 0.0) + s
            best = sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]
            out.append([{"document": self.passages[i], "score": s} for i, s in best])
        return out


class RemoteRetriever:
    """Client of a ``/retrieve`` server (this module's or Search-R1's)."""

    def __init__(self, url: str, timeout_s: float = 30.0, retries: int = 2) -> None:
        self.url, self.timeout_s, self.retries = url, timeout_s, retries

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        body = json.dumps({"queries": list(queries), "topk": k, "return_scores": True}).encode()
        last: Optional[Exception] = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    result = json.loads(resp.read())["result"]
                return [[h if "document" in h else {"document": h, "score": None} for h in hits] for hits in result]
            except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
                last = e
                time.sleep(0.2 * 2 ** attempt)
        raise RuntimeError(f"retrieval server {self.url} failed after {self.retries + 1} tries: {last}")


# -- the server --------------------------------------------------------------------------

def make_server(index: Retriever, host: str = "127.0.0.1", port: int = 0, default_k: int = 3) -> ThreadingHTTPServer:
    """An HTTP server answering ``POST /retrieve`` and ``GET /health`` (not started)."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            server.last_request = time.monotonic()
            if self.path.rstrip("/") == "/health":
                self._send(200, {"ok": True, "passages": len(index) if hasattr(index, "__len__") else None})
            else:
                self._send(404, {"error": "unknown path; use POST /retrieve or GET /health"})

        def do_POST(self) -> None:  # noqa: N802
            server.last_request = time.monotonic()
            if self.path.rstrip("/") != "/retrieve":
                self._send(404, {"error": "unknown path; use POST /retrieve"})
                return
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                queries = req["queries"]
                if isinstance(queries, str) or not all(isinstance(q, str) for q in queries):
                    raise ValueError("'queries' must be a list of strings")
                k = int(req.get("topk", default_k))
            except (KeyError, ValueError, TypeError) as e:
                self._send(400, {"error": f"bad request: {e}"})
                return
            try:
                hits = index.search(queries, k)
            except Exception as e:  # noqa: BLE001 - report to the client, keep serving
                self._send(500, {"error": f"{type(e).__name__}: {e}"})
                return
            if not req.get("return_scores", False):
                hits = [[h["document"] for h in row] for row in hits]
            self._send(200, {"result": hits})

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.last_request = time.monotonic()
    return server


def serve(index: Retriever, host: str, port: int, idle_exit_s: Optional[float] = None, announce=print) -> None:
    """Serve until interrupted, or until ``idle_exit_s`` seconds pass without a request."""
    server = make_server(index, host, port)
    h, p = server.server_address[:2]
    announce(f"listening on http://{h}:{p}/retrieve", flush=True)
    if idle_exit_s:
        def watchdog() -> None:
            while time.monotonic() - server.last_request < idle_exit_s:
                time.sleep(min(1.0, idle_exit_s / 4))
            server.shutdown()
        threading.Thread(target=watchdog, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlsuite.tasks.retrieval", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve a BM25 index over HTTP (POST /retrieve)")
    s.add_argument("--corpus", required=True, help="passage JSONL ({id, contents} or {id, title, text})")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000, help="0 = any free port (printed)")
    s.add_argument("--idle-exit", type=float, default=None, metavar="S", help="stop after S idle seconds")
    b = sub.add_parser("build", help="build (or find) the cached index and print its info")
    b.add_argument("--corpus", required=True)
    q = sub.add_parser("query", help="print the top-k passages of one query")
    q.add_argument("text")
    q.add_argument("--corpus")
    q.add_argument("--url")
    q.add_argument("-k", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "serve":
            serve(BM25Index.open(args.corpus), args.host, args.port, args.idle_exit)
        elif args.cmd == "build":
            idx = BM25Index.open(args.corpus)
            print(json.dumps({**idx.info, "folder": str(idx.folder)}, indent=2))
        else:
            if bool(args.corpus) == bool(args.url):
                raise BadInput("give exactly one of --corpus and --url")
            r = RemoteRetriever(args.url) if args.url else BM25Index.open(args.corpus)
            for h in r.search([args.text], args.k)[0]:
                print(f"{h['score']}\t{h['document']['contents'][:200]!r}")
    except BadInput as e:
        print(f"tasks.retrieval: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
